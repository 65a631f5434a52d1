"""The errors a workspace raises, named and worded as Mastra's, so a prompt written for Mastra reads the same text.

Each error has `error_name` (Mastra's class name, which the tool layer prints as ``"{error_name}: {message}"``),
a POSIX-like `code` where Mastra has one, the `path` it is about, and `retryable`: True only for an error the
same call may not meet again (a storage service down); every other one is deterministic.

Error tree::

    WorkspaceError
     ├── FilesystemError
     │    ├── FileNotFound            ENOENT    File not found: p
     │    ├── DirectoryNotFound       ENOENT    Directory not found: p
     │    ├── FileExists              EEXIST    File already exists: p
     │    ├── IsDirectory             EISDIR    Path is a directory: p
     │    ├── NotDirectory            ENOTDIR   Path is not a directory: p
     │    ├── DirectoryNotEmpty       ENOTEMPTY Directory not empty: p
     │    ├── PermissionDenied        EACCES    Permission denied: {operation} on p
     │    ├── StaleFile               ESTALE    File was modified externally: p (expected mtime .., actual ..)
     │    ├── FileReadRequired                  File "p" has not been read. ...
     │    └── FilesystemUnavailable   EAGAIN    S3 endpoint .. unreachable (bucket ".."): ..   (retryable)
     ├── WorkspaceReadOnly                      Workspace is in read-only mode. Cannot perform: op
     ├── SandboxError
     │    ├── IsolationUnavailable              bwrap asked for but not installed
     │    └── ProcessNotFound
     └── WriteLockTimeout                       write-lock timeout on "p" after Nms
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_ms(moment: datetime) -> str:
    """A timestamp as JavaScript's `Date.toISOString()` prints it: `2026-11-30T18:48:00.707Z` (naive = UTC)."""
    utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


class WorkspaceError(Exception):
    """Base of every workspace error."""

    error_name = "WorkspaceError"
    code: str | None = None
    retryable = False

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class FilesystemError(WorkspaceError):
    error_name = "FilesystemError"


class FileNotFound(FilesystemError):
    error_name, code = "FileNotFoundError", "ENOENT"

    def __init__(self, path: str) -> None:
        super().__init__(f"File not found: {path}", path)


class DirectoryNotFound(FilesystemError):
    error_name, code = "DirectoryNotFoundError", "ENOENT"

    def __init__(self, path: str) -> None:
        super().__init__(f"Directory not found: {path}", path)


class FileExists(FilesystemError):
    error_name, code = "FileExistsError", "EEXIST"

    def __init__(self, path: str) -> None:
        super().__init__(f"File already exists: {path}", path)


class IsDirectory(FilesystemError):
    error_name, code = "IsDirectoryError", "EISDIR"

    def __init__(self, path: str) -> None:
        super().__init__(f"Path is a directory: {path}", path)


class NotDirectory(FilesystemError):
    error_name, code = "NotDirectoryError", "ENOTDIR"

    def __init__(self, path: str) -> None:
        super().__init__(f"Path is not a directory: {path}", path)


class DirectoryNotEmpty(FilesystemError):
    error_name, code = "DirectoryNotEmptyError", "ENOTEMPTY"

    def __init__(self, path: str) -> None:
        super().__init__(f"Directory not empty: {path}", path)


class PermissionDenied(FilesystemError):
    """A path outside the workspace (or its allowed paths), or one the OS refuses. `operation` is what was tried,
    possibly with a hint, e.g. ``access (path is outside the workspace; use a relative path like "x")``."""

    error_name, code = "PermissionError", "EACCES"

    def __init__(self, path: str, operation: str = "access") -> None:
        super().__init__(f"Permission denied: {operation} on {path}", path)
        self.operation = operation


class StaleFile(FilesystemError):
    """A write with `expected_mtime` found the file changed since."""

    error_name, code = "StaleFileError", "ESTALE"

    def __init__(self, path: str, expected: datetime, actual: datetime) -> None:
        super().__init__(
            f"File was modified externally: {path} (expected mtime {iso_ms(expected)}, actual {iso_ms(actual)})",
            path,
        )
        self.expected, self.actual = expected, actual


class FileReadRequired(FilesystemError):
    """A write tool called on an existing file the agent has not read (or has read in another filesystem, or
    before it last changed). The message is the whole reason."""

    error_name = "FileReadRequiredError"


class FilesystemUnavailable(FilesystemError):
    """The storage behind a filesystem cannot be reached now (an object store down, refusing connections, or
    answering 5xx): the same call may succeed later, so it is the one retryable filesystem error."""

    error_name, code = "FilesystemUnavailableError", "EAGAIN"
    retryable = True


class WorkspaceReadOnly(WorkspaceError):
    error_name = "WorkspaceReadOnlyError"

    def __init__(self, operation: str, path: str | None = None) -> None:
        super().__init__(f"Workspace is in read-only mode. Cannot perform: {operation}", path)
        self.operation = operation


class SandboxError(WorkspaceError):
    error_name = "SandboxError"


class IsolationUnavailable(SandboxError):
    """`isolation="bwrap"` asked for on a host without bubblewrap: never a silent fallback."""

    error_name = "IsolationUnavailableError"


class ProcessNotFound(SandboxError):
    error_name = "ProcessNotFoundError"

    def __init__(self, pid: str) -> None:
        super().__init__(f"No background process found with PID {pid}.")
        self.pid = pid


class WriteLockTimeout(WorkspaceError):
    error_name = "Error"

    def __init__(self, path: str, timeout_ms: int) -> None:
        super().__init__(f'write-lock timeout on "{path}" after {timeout_ms}ms', path)


class SearchNotAvailable(WorkspaceError):
    error_name = "SearchNotAvailableError"
    code = "NO_SEARCH"

    def __init__(self) -> None:
        super().__init__("Workspace does not have search configured (enable bm25 or provide vectorStore + embedder)")


class SearchError(WorkspaceError):
    """A search that cannot run as asked: a mode that is not configured, a bad filter, a vector store failure."""

    error_name = "SearchError"
    code = "SEARCH_ERROR"
