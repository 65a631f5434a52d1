"""Plain data the providers return: file metadata, directory entries, command results. The bottom of
`workspace_providers`: it imports nothing of Keel."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

FileType = Literal["file", "directory"]


@dataclass(frozen=True)
class FileStat:
    """Like Mastra's `FileStat`. `path` is the path as the caller gave it (normalised, relative to the base)."""

    name: str
    path: str
    type: FileType
    size: int
    created_at: datetime
    modified_at: datetime
    mime_type: str | None = None


@dataclass(frozen=True)
class FileEntry:
    """One `readdir` entry (`size` only for files, as Mastra reports it)."""

    name: str
    type: FileType
    size: int | None = None
    is_symlink: bool = False


@dataclass(frozen=True)
class CommandResult:
    """The outcome of a foreground command, shaped as Mastra's `CommandResult`.

    `stdout` / `stderr` keep at most the sandbox's byte cap per stream (the *last* bytes: the end of a build log is
    what matters); `*_dropped_bytes` says how much was thrown away.
    """

    success: bool
    exit_code: int
    stdout: str
    stderr: str
    execution_time_ms: int
    command: str
    killed: bool = False
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_dropped_bytes: int = 0
    stderr_dropped_bytes: int = 0
