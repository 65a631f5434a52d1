"""What each of the eleven workspace tools does with the providers, and the text it answers with: Mastra's
output strings, so a prompt written for Mastra reads the same results on Keel.

Each function takes the resolved provider, the validated input and the tool's config entry, and returns the
tool's output (a string, or a media dict for images and PDFs). Errors are the providers' `WorkspaceError`s.
"""

from __future__ import annotations

import base64
import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from keel.workspace_providers.errors import FileExists, FileNotFound, StaleFile, WorkspaceError, iso_ms
from keel.workspace_providers.output import apply_token_limit, truncate_command_output
from keel.workspace_providers.tool_config import ResolvedToolConfig

DEFAULT_MEDIA_TYPES = ("image/png", "image/jpeg", "image/webp", "application/pdf")
DEFAULT_MAX_MEDIA_BYTES = 10 * 1024 * 1024
LIST_FILES_MAX_TOKENS = 1_000
KILL_TAIL_LINES = 50
_TEXT_APPLICATION_TYPES = {
    "application/json",
    "application/xml",
    "application/javascript",
    "application/typescript",
    "application/x-sh",
    "application/x-yaml",
    "application/yaml",
    "application/toml",
    "application/sql",
    "application/graphql",
    "application/ld+json",
    "application/x-httpd-php",
}


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ReadFileInput(_Input):
    path: str
    offset: int | None = Field(default=None, ge=1)
    limit: int | None = Field(default=None, ge=1)
    show_line_numbers: bool = Field(default=True, alias="showLineNumbers")
    encoding: Literal["utf-8", "utf8", "base64", "hex", "binary"] | None = None


class WriteFileInput(_Input):
    path: str
    content: str
    overwrite: bool = True


class EditFileInput(_Input):
    path: str
    old_string: str
    new_string: str
    replace_all: bool = False


class ListFilesInput(_Input):
    path: str = "."
    max_depth: float = Field(default=2, alias="maxDepth")
    show_hidden: bool = Field(default=False, alias="showHidden")
    dirs_only: bool = Field(default=False, alias="dirsOnly")
    exclude: str | None = None
    extension: str | None = None
    pattern: str | list[str] | None = None
    respect_gitignore: bool = Field(default=True, alias="respectGitignore")


class DeleteInput(_Input):
    path: str
    recursive: bool = False


class FileStatInput(_Input):
    path: str


class MkdirInput(_Input):
    path: str
    recursive: bool = True


class GrepInput(_Input):
    pattern: str
    path: str = "."
    context_lines: float = Field(default=0, alias="contextLines")
    max_count: float | None = Field(default=None, alias="maxCount")
    case_sensitive: bool = Field(default=True, alias="caseSensitive")
    include_hidden: bool = Field(default=False, alias="includeHidden")


class SearchInput(_Input):
    query: str
    top_k: float = Field(default=5, alias="topK", allow_inf_nan=False)
    mode: Literal["bm25", "vector", "hybrid"] | None = None
    min_score: float | None = Field(default=None, alias="minScore", allow_inf_nan=False)


class IndexInput(_Input):
    path: str
    content: str
    metadata: dict[str, Any] | None = None


class ExecuteCommandInput(_Input):
    command: str
    timeout: float | None = None
    cwd: str | None = None
    tail: int | None = None
    background: bool | None = None


class GetProcessOutputInput(_Input):
    pid: str
    tail: int | None = None
    wait: bool | None = None


class KillProcessInput(_Input):
    pid: str


# --- filesystem ---------------------------------------------------------------------------------------------


def _media_type_matches(mime: str | None, patterns: tuple[str, ...]) -> bool:
    if not mime:
        return False
    return any(p in ("*", "*/*") or (p.endswith("/*") and mime.startswith(p[:-1])) or p == mime for p in patterns)


def _text_like(mime: str | None) -> bool:
    return (
        not mime
        or mime == "application/octet-stream"
        or mime.startswith("text/")
        or mime in _TEXT_APPLICATION_TYPES
        or mime.endswith(("+json", "+xml"))
    )


def with_line_numbers(content: str, start: int) -> str:
    lines = content.split("\n")
    width = max(6, len(str(start + len(lines) - 1)) + 1)
    return "\n".join(f"{str(start + i).rjust(width)}→{line}" for i, line in enumerate(lines))


async def read_file(fs: Any, args: ReadFileInput, config: ResolvedToolConfig) -> Any:
    stat = await fs.stat(args.path)
    if _media_type_matches(stat.mime_type, DEFAULT_MEDIA_TYPES):
        max_media = config.max_media_bytes or DEFAULT_MAX_MEDIA_BYTES
        if stat.size <= max_media:
            raw = await fs.read_file(args.path)
            return {
                "__workspaceMedia": True,
                "text": f"{stat.path} ({stat.size} bytes, {stat.mime_type})",
                "mediaType": stat.mime_type,
                "data": base64.b64encode(raw).decode(),
            }
        if not args.encoding:
            return (
                f"{stat.path} ({stat.size} bytes, {stat.mime_type}) — exceeds maxMediaBytes ({max_media}). Returning "
                "metadata only; configure `maxMediaBytes` on the read_file tool to raise this cap."
            )
    if not args.encoding and not _text_like(stat.mime_type):
        return (
            f"{stat.path} ({stat.size} bytes, {stat.mime_type or 'unknown'}) — binary file not readable as text. Pass "
            "an explicit `encoding` (e.g. `base64`) to read the raw bytes, or configure `mediaTypes` on the read_file "
            "tool to surface it as a media part."
        )
    limit = config.max_output_tokens
    if args.encoding not in (None, "utf-8", "utf8"):
        encoded = await fs.read_file(args.path, encoding=args.encoding)
        return apply_token_limit(f"{stat.path} ({stat.size} bytes, {args.encoding})\n{encoded}", limit, "end")
    content = await fs.read_file(args.path, encoding="utf-8")
    lines = content.split("\n")
    start = max(1, args.offset or 1)
    end = min(len(lines), start + args.limit - 1 if args.limit else len(lines))
    if start > end:
        body, first, last = "", 0, 0
    else:
        body, first, last = "\n".join(lines[start - 1 : end]), start, end
    if args.show_line_numbers and (first or last):
        body = with_line_numbers(body, first)
    if args.offset is not None or args.limit is not None:
        header = f"{stat.path} (lines {first}-{last} of {len(lines)}, {stat.size} bytes)"
    else:
        header = f"{stat.path} ({stat.size} bytes)"
    return apply_token_limit(f"{header}\n{body}", limit, "end")


async def write_file(fs: Any, args: WriteFileInput, expected_mtime: datetime | None, *, retry: bool = False) -> str:
    """`retry`: an earlier attempt of this very call may have written already (a worker lost after the write):
    a file that changed since the read but holds exactly this content counts as that write, not as stale."""
    try:
        await fs.write_file(args.path, args.content, overwrite=args.overwrite, expected_mtime=expected_mtime)
    except (StaleFile, FileExists):
        if not retry or await _current_text(fs, args.path) != args.content:
            raise
    return f"Wrote {len(args.content.encode())} bytes to {args.path}"


async def _current_text(fs: Any, path: str) -> str | None:
    try:
        text: str = await fs.read_file(path, encoding="utf-8")
    except (WorkspaceError, UnicodeDecodeError):
        return None
    return text


async def edit_file(fs: Any, args: EditFileInput, expected_mtime: datetime | None) -> str:
    message: str = await fs.edit_file(
        args.path, args.old_string, args.new_string, replace_all=args.replace_all, expected_mtime=expected_mtime
    )
    return message


async def list_files(fs: Any, args: ListFilesInput, config: ResolvedToolConfig) -> str:
    listing: str = await fs.list_tree(
        args.path,
        max_depth=int(args.max_depth),
        show_hidden=args.show_hidden,
        dirs_only=args.dirs_only,
        exclude=args.exclude,
        extension=args.extension,
        pattern=args.pattern,
        respect_gitignore=args.respect_gitignore,
    )
    return apply_token_limit(listing, config.max_output_tokens or LIST_FILES_MAX_TOKENS, "end")


async def delete(fs: Any, args: DeleteInput) -> str:
    await fs.delete(args.path, recursive=args.recursive)
    return f"Deleted {args.path}"


async def file_stat(fs: Any, args: FileStatInput) -> str:
    try:
        stat = await fs.stat(args.path)
    except FileNotFound:
        return f"{args.path}: not found"
    return f"{args.path} Type: {stat.type} Size: {stat.size} bytes Modified: {iso_ms(stat.modified_at)}"


async def mkdir(fs: Any, args: MkdirInput) -> str:
    await fs.mkdir(args.path, recursive=args.recursive)
    return f"Created directory {args.path}"


async def grep(fs: Any, args: GrepInput, config: ResolvedToolConfig) -> str:
    found: str = await fs.grep(
        args.pattern,
        path=args.path,
        context_lines=int(args.context_lines),
        max_count=None if args.max_count is None else int(args.max_count),
        case_sensitive=args.case_sensitive,
        include_hidden=args.include_hidden,
    )
    return apply_token_limit(found, config.max_output_tokens, "end")


# --- sandbox ------------------------------------------------------------------------------------------------

_TAIL_PIPE = re.compile(r"\|\s*tail\s+(?:-n\s+)?(-?\d+)\s*$")


def split_tail_pipe(command: str) -> tuple[str, int | None]:
    """`cmd | tail -n 5` → (`cmd`, 5): the tool tails the output itself, so it can stream."""
    match = _TAIL_PIPE.search(command)
    if match and abs(int(match.group(1))) > 0:
        return command[: match.start()].strip(), abs(int(match.group(1)))
    return command, None


def _streams(stdout: str, stderr: str) -> list[str]:
    if stdout and stderr:
        return ["stdout:", stdout, "", "stderr:", stderr]
    if stdout:
        return [stdout]
    if stderr:
        return ["stderr:", stderr]
    return []


def _with_terminal_line(parts: list[str], line: str) -> str:
    if not parts:
        return line
    output = "\n".join(parts)
    separator = "" if output.endswith("\n\n") else "\n" if output.endswith("\n") else "\n\n"
    return f"{output}{separator}{line}"


def command_output(result: Any, tail: int | None, config: ResolvedToolConfig) -> str:
    """A finished foreground command as Mastra's tool prints it."""
    limit = config.max_output_tokens
    parts = _streams(
        truncate_command_output(result.stdout, tail, limit), truncate_command_output(result.stderr, tail, limit)
    )
    if not result.success:
        return _with_terminal_line(parts, f"Exit code: {result.exit_code}")
    return "\n".join(parts) or "(no output)"


def process_output(handle: Any, tail: int | None, config: ResolvedToolConfig) -> str:
    limit = config.max_output_tokens
    stdout = truncate_command_output(handle.stdout(), tail, limit)
    stderr = truncate_command_output(handle.stderr(), tail, limit)
    if not stdout and not stderr:
        return "(no output yet)"
    parts = _streams(stdout, stderr)
    if handle.exit_code is not None:
        parts += ["", f"Exit code: {handle.exit_code}"]
    return "\n".join(parts)


def killed_output(pid: str, handle: Any, config: ResolvedToolConfig) -> str:
    parts = [f"Process {pid} has been killed."]
    if handle is not None:
        limit = config.max_output_tokens
        stdout = truncate_command_output(handle.stdout(), KILL_TAIL_LINES, limit) if handle.stdout() else ""
        stderr = truncate_command_output(handle.stderr(), KILL_TAIL_LINES, limit) if handle.stderr() else ""
        if stdout:
            parts += ["", "--- stdout (last output) ---", stdout]
        if stderr:
            parts += ["", "--- stderr (last output) ---", stderr]
    return "\n".join(parts)


async def search(workspace: Any, args: SearchInput) -> str:
    """Mastra's `mastra_workspace_search`: `<id>[:<start>-<end>]: <content>` per result, then the count and mode.
    A mode the workspace cannot do falls back (hybrid to vector or bm25, vector to bm25), as in Mastra."""
    mode = args.mode
    if mode == "hybrid" and not workspace.can_hybrid:
        mode = "vector" if workspace.can_vector else "bm25"
    elif mode == "vector" and not workspace.can_vector:
        mode = "bm25"
    elif mode is None:
        mode = "hybrid" if workspace.can_hybrid else "vector" if workspace.can_vector else "bm25"
    top_k = int(args.top_k)
    results = await workspace.search(args.query, top_k=top_k, mode=mode, min_score=args.min_score)
    lines = []
    for r in results:
        where = f":{r.line_range[0]}-{r.line_range[1]}" if r.line_range else ""
        lines.append(f"{r.id}{where}: {r.content}")
    lines += ["---", f"{len(results)} result{'' if len(results) == 1 else 's'} ({mode} search)"]
    return "\n".join(lines)


async def index(workspace: Any, args: IndexInput) -> str:
    await workspace.index(args.path, args.content, metadata=args.metadata)
    return f"Indexed {args.path}"
