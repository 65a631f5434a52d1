"""Workspace providers and the Workspace: plain async Python with no Temporal import (Mastra's Workspace: its
filesystem, sandbox, search, skills and LSP). Keel turns a workspace's tools into agent tools in `keel.app`.
`PgVectorStore` (vectors in PostgreSQL) is in `keel.workspace_providers.pgvector`."""

from keel.workspace_providers.composite_filesystem import CompositeFilesystem
from keel.workspace_providers.embedders import SentenceTransformerEmbedder
from keel.workspace_providers.errors import (
    DirectoryNotEmpty,
    DirectoryNotFound,
    FileExists,
    FileNotFound,
    FileReadRequired,
    FilesystemError,
    FilesystemUnavailable,
    IsDirectory,
    IsolationUnavailable,
    NotDirectory,
    PermissionDenied,
    ProcessNotFound,
    SandboxError,
    SearchError,
    SearchNotAvailable,
    StaleFile,
    WorkspaceError,
    WorkspaceReadOnly,
    WriteLockTimeout,
)
from keel.workspace_providers.local_filesystem import LocalFilesystem
from keel.workspace_providers.local_sandbox import LocalSandbox
from keel.workspace_providers.s3_filesystem import S3Filesystem
from keel.workspace_providers.sandbox_mounts import OnMountArgs
from keel.workspace_providers.search import SearchResult
from keel.workspace_providers.tool_config import WORKSPACE_TOOLS, ToolConfigContext, ToolHookContext
from keel.workspace_providers.types import CommandResult, FileEntry, FileStat
from keel.workspace_providers.vector_stores import InMemoryVectorStore, VectorStore
from keel.workspace_providers.workspace import Workspace

__all__ = [
    "WORKSPACE_TOOLS",
    "CommandResult",
    "CompositeFilesystem",
    "DirectoryNotEmpty",
    "DirectoryNotFound",
    "FileEntry",
    "FileExists",
    "FileNotFound",
    "FileReadRequired",
    "FileStat",
    "FilesystemError",
    "FilesystemUnavailable",
    "InMemoryVectorStore",
    "IsDirectory",
    "IsolationUnavailable",
    "LocalFilesystem",
    "LocalSandbox",
    "NotDirectory",
    "OnMountArgs",
    "PermissionDenied",
    "ProcessNotFound",
    "S3Filesystem",
    "SandboxError",
    "SearchError",
    "SearchNotAvailable",
    "SearchResult",
    "SentenceTransformerEmbedder",
    "StaleFile",
    "ToolConfigContext",
    "ToolHookContext",
    "VectorStore",
    "Workspace",
    "WorkspaceError",
    "WorkspaceReadOnly",
    "WriteLockTimeout",
]
