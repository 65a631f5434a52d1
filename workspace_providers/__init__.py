"""Workspace providers and the Workspace: plain async Python with no Temporal import (Mastra's Workspace, its
filesystem and sandbox parts). Keel turns a workspace's tools into agent tools in `keel.app`."""

from keel.workspace_providers.errors import (
    DirectoryNotEmpty,
    DirectoryNotFound,
    FileExists,
    FileNotFound,
    FileReadRequired,
    FilesystemError,
    IsDirectory,
    IsolationUnavailable,
    NotDirectory,
    PermissionDenied,
    ProcessNotFound,
    SandboxError,
    StaleFile,
    WorkspaceError,
    WorkspaceReadOnly,
    WriteLockTimeout,
)
from keel.workspace_providers.local_filesystem import LocalFilesystem
from keel.workspace_providers.local_sandbox import LocalSandbox
from keel.workspace_providers.tool_config import WORKSPACE_TOOLS, ToolConfigContext, ToolHookContext
from keel.workspace_providers.types import CommandResult, FileEntry, FileStat
from keel.workspace_providers.workspace import Workspace

__all__ = [
    "WORKSPACE_TOOLS",
    "CommandResult",
    "DirectoryNotEmpty",
    "DirectoryNotFound",
    "FileEntry",
    "FileExists",
    "FileNotFound",
    "FileReadRequired",
    "FileStat",
    "FilesystemError",
    "IsDirectory",
    "IsolationUnavailable",
    "LocalFilesystem",
    "LocalSandbox",
    "NotDirectory",
    "PermissionDenied",
    "ProcessNotFound",
    "SandboxError",
    "StaleFile",
    "ToolConfigContext",
    "ToolHookContext",
    "Workspace",
    "WorkspaceError",
    "WorkspaceReadOnly",
    "WriteLockTimeout",
]
