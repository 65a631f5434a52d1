"""The tools behind the HTTP API's `/api/workspaces` routes. Each runs on a worker as the standalone
`keel.execute_tool` activity, addressed by workspace id (`KeelClient.execute_tool(None, name, args,
workspace_id=...)`), so what the UI does to a workspace happens where, and as, a run's tool calls do it, and shows
in the Temporal UI as an activity of its own.

- Writes (`keel_workspace_fs_write`, `_fs_mkdir`, `_fs_delete`, `keel_workspace_index`) run the workspace's own
  Mastra tools (`mastra_workspace_write_file`, `_mkdir`, `_delete`, `_index`), so the per-file write lock a run's
  writes take, the read-only check, the filesystem's path containment and the tools config's hooks are theirs. A
  person's write needs no read first: `require_read_before_write` guards the model, not the UI. Binary content
  (base64) takes the same write lock and writes the bytes itself (the write tool takes text). A write tool the
  workspace's tools config disables is not run for the UI either.
- Reads (`_fs_read`, `_fs_stat`, `_fs_list`, `keel_workspace_search`, the skills) call the providers, for the
  structured answers Mastra's routes give where the model's tools answer in prose. The search index and the skill
  catalog live in the worker that serves them.

Each answers its Mastra route's JSON. A failure is raised as a `RouteError` carrying the status Mastra's route
answers with, and reaches the API as the tool's error text ``"{error_name}: {message}"`` (`ROUTE_STATUS` maps the
name back to the status).

Error tree::

    AppError
     └── RouteError          400  BadRequestError
          ├── NotFound       404  NotFoundError
          ├── Forbidden      403  ForbiddenError
          ├── Conflict       409  ConflictError
          └── Unavailable    503  UnavailableError
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from keel.app.definitions import App, AppError, Tool, ToolContext, UnknownTool
from keel.workspace_providers import (
    DirectoryNotEmpty,
    DirectoryNotFound,
    FileExists,
    FileNotFound,
    PermissionDenied,
    StaleFile,
    Workspace,
    WorkspaceError,
    WorkspaceReadOnly,
    WriteLockTimeout,
)
from keel.workspace_providers.errors import iso_ms
from keel.workspace_providers.skill_catalog import SkillCatalog
from keel.workspace_providers.skill_frontmatter import SkillConflict
from keel.workspace_providers.skill_models import Skill
from keel.workspace_providers.tool_config import WORKSPACE_TOOLS
from keel.workspace_providers.tools import WorkspaceCall, WorkspaceTool, tracker_path, workspace_tools
from keel.workspace_providers.types import FileEntry

MAX_READ_BYTES = 10 * 1024 * 1024
"""The largest file `fs/read` returns: the answer travels as the activity's result (at most 32 MiB as JSON), and
an encoding grows it (hex doubles it)."""

ReadEncoding = Literal["utf-8", "utf8", "base64", "hex", "binary", "latin1"]
READ_ENCODINGS: tuple[str, ...] = get_args(ReadEncoding)
"""What `fs/read`'s `encoding` may be (the filesystems' `read_file` encodings)."""

SKILLS_SH_DIR = ".agents/skills/"
"""Where Mastra installs skills from skills.sh; their `.meta.json` names the GitHub repository."""


class RouteError(AppError):
    """A workspace route's answer other than success (400 unless a subclass says otherwise)."""

    status = 400
    error_name = "BadRequestError"


class NotFound(RouteError):
    status, error_name = 404, "NotFoundError"


class Forbidden(RouteError):
    status, error_name = 403, "ForbiddenError"


class Conflict(RouteError):
    status, error_name = 409, "ConflictError"


class Unavailable(RouteError):
    status, error_name = 503, "UnavailableError"


ROUTE_STATUS: dict[str, int] = {
    e.error_name: e.status for e in (RouteError, NotFound, Forbidden, Conflict, Unavailable)
}
"""The HTTP status of each route error, by the name its error text starts with."""


def _route_error(err: WorkspaceError) -> RouteError:
    """The status Mastra's routes answer a provider's error with (its file-not-found and permission errors), and
    Keel's for the rest: a conflict with the file's state 409, a storage outage 503, anything else the caller's
    request (400)."""
    message = str(err)
    if isinstance(err, FileNotFound | DirectoryNotFound):
        return NotFound(message)
    if isinstance(err, PermissionDenied | WorkspaceReadOnly):
        return Forbidden(message)
    if isinstance(err, FileExists | DirectoryNotEmpty | StaleFile | WriteLockTimeout | SkillConflict):
        return Conflict(message)
    if getattr(err, "retryable", False):
        return Unavailable(message)
    return RouteError(message)


# --- inputs -------------------------------------------------------------------------------------------------


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PathInput(_Input):
    path: str


class ReadInput(_Input):
    path: str
    encoding: ReadEncoding = "utf-8"


class ListInput(_Input):
    path: str
    recursive: bool = False


class WriteInput(_Input):
    path: str
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    recursive: bool = True


class MkdirInput(_Input):
    path: str
    recursive: bool = True


class DeleteInput(_Input):
    path: str
    recursive: bool = False
    force: bool = False


class SearchInput(_Input):
    query: str
    top_k: int = Field(default=5, ge=0)
    mode: Literal["bm25", "vector", "hybrid"] | None = None
    min_score: float | None = None


class IndexInput(_Input):
    path: str
    content: str
    metadata: dict[str, Any] | None = None


class NoInput(_Input):
    pass


class SkillInput(_Input):
    skill: str
    """The skill's name, or its path (Mastra's `?path=` disambiguation)."""


class ReferenceInput(_Input):
    skill: str
    path: str
    """Relative to the skill's `references/` directory."""


class SkillSearchInput(_Input):
    query: str
    top_k: float = Field(default=5, ge=0)
    min_score: float | None = None
    skill_names: list[str] | None = None
    include_references: bool = True


# --- the filesystem -----------------------------------------------------------------------------------------


async def _filesystem(ws: Workspace, ctx: ToolContext) -> Any:
    fs = await ws.resolve_filesystem(ctx.request_context)
    if fs is None:
        raise NotFound("No workspace filesystem configured")
    return fs


async def _existing(fs: Any, path: str) -> None:
    if not await fs.exists(path):
        raise NotFound(f'Path "{path}" not found')


async def _write_tool(ws: Workspace, name: str, ctx: ToolContext, fs: Any) -> WorkspaceTool:
    """The workspace's Mastra tool `name` as this request's tools config gives it; `Forbidden` when `fs` (the
    resolved filesystem, None for a tool that needs none) is read-only (it has no write tools) and when the config
    disables the tool."""
    if getattr(fs, "read_only", False):
        raise Forbidden("Workspace is in read-only mode")
    for wt in await workspace_tools(ws, ctx.request_context):
        if wt.workspace_tool_name == name:
            return wt
    raise Forbidden(f"The workspace's tools config disables {name}, the tool the HTTP API writes with")


def _call(ctx: ToolContext) -> WorkspaceCall:
    return WorkspaceCall(request_context=ctx.request_context, tool_call_id=ctx.tool_call_id, attempt=ctx.attempt)


async def fs_read(ws: Workspace, args: ReadInput, ctx: ToolContext) -> dict[str, Any]:
    fs = await _filesystem(ws, ctx)
    await _existing(fs, args.path)
    stat = await fs.stat(args.path)
    if stat.type == "file" and stat.size > MAX_READ_BYTES:
        raise RouteError(
            f'File "{args.path}" is {stat.size / 1024 / 1024:.1f} MiB: the HTTP API reads files up to '
            f"{MAX_READ_BYTES // 1024 // 1024} MiB"
        )
    content = await fs.read_file(args.path, encoding=args.encoding)
    text = content if isinstance(content, str) else bytes(content).decode("utf-8", "replace")
    return {"path": args.path, "content": text, "type": "file"}


async def fs_stat(ws: Workspace, args: PathInput, ctx: ToolContext) -> dict[str, Any]:
    fs = await _filesystem(ws, ctx)
    await _existing(fs, args.path)
    stat = await fs.stat(args.path)
    shown = {
        "path": stat.path,
        "type": stat.type,
        "size": stat.size,
        "createdAt": iso_ms(stat.created_at),
        "modifiedAt": iso_ms(stat.modified_at),
        "mimeType": stat.mime_type,
    }
    return {k: v for k, v in shown.items() if v is not None}


def _entry(entry: FileEntry) -> dict[str, Any]:
    shown: dict[str, Any] = {"name": entry.name, "type": entry.type}
    if entry.size is not None:
        shown["size"] = entry.size
    return shown


async def fs_list(ws: Workspace, args: ListInput, ctx: ToolContext) -> dict[str, Any]:
    fs = await ws.resolve_filesystem(ctx.request_context)
    if fs is None:
        return {"path": args.path, "entries": [], "error": "No workspace filesystem configured"}
    await _existing(fs, args.path)
    entries = await fs.readdir(args.path, recursive=args.recursive)
    return {"path": args.path, "entries": [_entry(e) for e in entries]}


async def fs_write(ws: Workspace, args: WriteInput, ctx: ToolContext) -> dict[str, Any]:
    fs = await _filesystem(ws, ctx)
    wt = await _write_tool(ws, WORKSPACE_TOOLS.FILESYSTEM.WRITE_FILE, ctx, fs)
    if args.encoding == "base64":
        try:
            data = base64.b64decode(args.content, validate=True)
        except binascii.Error as err:
            raise RouteError(f"content is not valid base64: {err}") from None
        async with ws.write_lock.hold(tracker_path(args.path), args.path):  # the lock the write tool takes
            await fs.write_file(args.path, data, recursive=args.recursive)
        return {"success": True, "path": args.path}
    if not args.recursive:
        parent = posixpath.dirname(args.path.rstrip("/"))
        if parent and not await fs.exists(parent):
            raise DirectoryNotFound(parent)
    unread = dataclasses.replace(wt, config=dataclasses.replace(wt.config, require_read_before_write=None))
    await unread.execute({"path": args.path, "content": args.content}, _call(ctx))
    return {"success": True, "path": args.path}


async def fs_mkdir(ws: Workspace, args: MkdirInput, ctx: ToolContext) -> dict[str, Any]:
    wt = await _write_tool(ws, WORKSPACE_TOOLS.FILESYSTEM.MKDIR, ctx, await _filesystem(ws, ctx))
    await wt.execute({"path": args.path, "recursive": args.recursive}, _call(ctx))
    return {"success": True, "path": args.path}


async def fs_delete(ws: Workspace, args: DeleteInput, ctx: ToolContext) -> dict[str, Any]:
    """Mastra's route: a missing path is 404, or success with `force`; a directory is removed with `recursive`
    only when not empty."""
    fs = await _filesystem(ws, ctx)
    wt = await _write_tool(ws, WORKSPACE_TOOLS.FILESYSTEM.DELETE, ctx, fs)
    if not await fs.exists(args.path):
        if args.force:
            return {"success": True, "path": args.path}
        raise NotFound(f'Path "{args.path}" not found')
    await wt.execute({"path": args.path, "recursive": args.recursive}, _call(ctx))
    return {"success": True, "path": args.path}


# --- search -------------------------------------------------------------------------------------------------


def _searchable(ws: Workspace) -> bool:
    return ws.can_bm25 or ws.can_vector


async def search(ws: Workspace, args: SearchInput, ctx: ToolContext) -> dict[str, Any]:
    """Mastra's route: the mode asked for (one the workspace lacks is an error), else the most it can do."""
    if not _searchable(ws):
        return {"results": [], "query": args.query, "mode": args.mode or "bm25"}
    mode = args.mode or ("hybrid" if ws.can_hybrid else "vector" if ws.can_vector else "bm25")
    found = await ws.search(args.query, top_k=args.top_k or 5, mode=mode, min_score=args.min_score)
    results = []
    for r in found:
        shown: dict[str, Any] = {"id": r.id, "content": r.content, "score": r.score}
        if r.line_range is not None:
            shown["lineRange"] = {"start": r.line_range[0], "end": r.line_range[1]}
        details = {k: v for k, v in (r.score_details or {}).items() if v is not None}
        if details:
            shown["scoreDetails"] = details
        results.append(shown)
    return {"results": results, "query": args.query, "mode": mode}


async def index(ws: Workspace, args: IndexInput, ctx: ToolContext) -> dict[str, Any]:
    if not _searchable(ws):
        raise RouteError("Workspace does not have search configured")
    fs = await _filesystem(ws, ctx) if ws.has_filesystem_config() else None
    wt = await _write_tool(ws, WORKSPACE_TOOLS.SEARCH.INDEX, ctx, fs)
    call_args: dict[str, Any] = {"path": args.path, "content": args.content}
    if args.metadata is not None:
        call_args["metadata"] = args.metadata
    await wt.execute(call_args, _call(ctx))
    return {"success": True, "path": args.path}


# --- skills -------------------------------------------------------------------------------------------------


async def _catalog(ws: Workspace, ctx: ToolContext) -> SkillCatalog:
    if ws.skills is None:
        raise NotFound("No workspace with skills configured")
    catalog: SkillCatalog = await ws.skills.scoped(ctx.request_context)
    await catalog.maybe_refresh()
    return catalog


def _without_invocable(shown: dict[str, Any]) -> dict[str, Any]:
    shown.pop("user-invocable", None)  # not in Mastra's route answers
    return shown


async def _skills_sh_source(ws: Workspace, ctx: ToolContext, path: str) -> dict[str, str] | None:
    """`{owner, repo}` of a skill installed from skills.sh (its `.meta.json`), as Mastra's listing shows."""
    if SKILLS_SH_DIR not in path:
        return None
    try:
        fs = await _filesystem(ws, ctx)
        meta = json.loads(await fs.read_file(f"{path}/.meta.json", encoding="utf-8"))
    except (WorkspaceError, ValueError):
        return None
    if isinstance(meta, dict) and meta.get("owner") and meta.get("repo"):
        return {"owner": str(meta["owner"]), "repo": str(meta["repo"])}
    return None


async def skills(ws: Workspace, args: NoInput, ctx: ToolContext) -> dict[str, Any]:
    if ws.skills is None:
        return {"skills": [], "isSkillsConfigured": False}
    listed = []
    for meta in await (await _catalog(ws, ctx)).list():
        shown = _without_invocable(meta.to_dict())
        source = await _skills_sh_source(ws, ctx, meta.path)
        if source is not None:
            shown["skillsShSource"] = source
        listed.append(shown)
    return {"skills": listed, "isSkillsConfigured": True}


async def _skill(catalog: SkillCatalog, identifier: str) -> Skill:
    found = await catalog.get(identifier)
    if found is None:
        raise NotFound(f'Skill "{identifier}" not found')
    return found


async def skill(ws: Workspace, args: SkillInput, ctx: ToolContext) -> dict[str, Any]:
    return _without_invocable((await _skill(await _catalog(ws, ctx), args.skill)).to_dict())


async def skill_references(ws: Workspace, args: SkillInput, ctx: ToolContext) -> dict[str, Any]:
    catalog = await _catalog(ws, ctx)
    found = await _skill(catalog, args.skill)
    return {"skillName": found.name, "references": await catalog.list_references(args.skill)}


async def skill_reference(ws: Workspace, args: ReferenceInput, ctx: ToolContext) -> dict[str, Any]:
    catalog = await _catalog(ws, ctx)
    found = await _skill(catalog, args.skill)
    content = await catalog.get_reference(args.skill, f"references/{args.path}")
    if content is None:
        raise NotFound(f'Reference "{args.path}" not found in skill "{args.skill}"')
    return {"skillName": found.name, "referencePath": args.path, "content": content}


async def skills_search(ws: Workspace, args: SkillSearchInput, ctx: ToolContext) -> dict[str, Any]:
    if ws.skills is None:
        return {"results": [], "query": args.query}
    found = await (await _catalog(ws, ctx)).search(
        args.query,
        top_k=args.top_k or 5,
        min_score=args.min_score,
        skill_names=args.skill_names,
        include_references=args.include_references,
    )
    results = []
    for r in found:
        shown: dict[str, Any] = {
            "skillName": r.skill_name,
            "skillPath": r.skill_path,
            "source": r.source,
            "content": r.content,
            "score": r.score,
        }
        if r.line_range is not None:
            shown["lineRange"] = {"start": r.line_range[0], "end": r.line_range[1]}
        if r.score_details:
            shown["scoreDetails"] = r.score_details
        results.append(shown)
    return {"results": results, "query": args.query}


# --- the tools ----------------------------------------------------------------------------------------------

Operation = Callable[[Workspace, Any, ToolContext], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class _Route:
    input: type[BaseModel]
    run: Operation
    description: str
    idempotent: bool = True


FS_READ = "keel_workspace_fs_read"
FS_STAT = "keel_workspace_fs_stat"
FS_LIST = "keel_workspace_fs_list"
FS_WRITE = "keel_workspace_fs_write"
FS_MKDIR = "keel_workspace_fs_mkdir"
FS_DELETE = "keel_workspace_fs_delete"
SEARCH = "keel_workspace_search"
INDEX = "keel_workspace_index"
SKILLS = "keel_workspace_skills"
SKILL = "keel_workspace_skill"
SKILL_REFERENCES = "keel_workspace_skill_references"
SKILL_REFERENCE = "keel_workspace_skill_reference"
SKILLS_SEARCH = "keel_workspace_skills_search"

_ROUTES: dict[str, _Route] = {
    FS_READ: _Route(ReadInput, fs_read, "GET /workspaces/:id/fs/read: a file's content"),
    FS_STAT: _Route(PathInput, fs_stat, "GET /workspaces/:id/fs/stat: a file's or directory's metadata"),
    FS_LIST: _Route(ListInput, fs_list, "GET /workspaces/:id/fs/list: a directory's entries"),
    FS_WRITE: _Route(WriteInput, fs_write, "POST /workspaces/:id/fs/write: write a file (the write tool's lock)"),
    FS_MKDIR: _Route(MkdirInput, fs_mkdir, "POST /workspaces/:id/fs/mkdir: make a directory (the mkdir tool)"),
    # A delete that ran before a lost worker would answer 404 when run again: it runs at most once.
    FS_DELETE: _Route(DeleteInput, fs_delete, "DELETE /workspaces/:id/fs/delete (the delete tool)", idempotent=False),
    SEARCH: _Route(SearchInput, search, "GET /workspaces/:id/search: the indexed content that matches"),
    INDEX: _Route(IndexInput, index, "POST /workspaces/:id/index: index content (the index tool)"),
    SKILLS: _Route(NoInput, skills, "GET /workspaces/:id/skills: the skills discovered"),
    SKILL: _Route(SkillInput, skill, "GET /workspaces/:id/skills/:name: a skill in full"),
    SKILL_REFERENCES: _Route(SkillInput, skill_references, "GET .../skills/:name/references: its reference files"),
    SKILL_REFERENCE: _Route(ReferenceInput, skill_reference, "GET .../skills/:name/references/:path: one of them"),
    SKILLS_SEARCH: _Route(SkillSearchInput, skills_search, "GET /workspaces/:id/skills/search: skill content"),
}
WORKSPACE_API_TOOLS = tuple(_ROUTES)


def workspace_api_tool(app: App, workspace_id: str, name: str) -> Tool:
    """The HTTP API's tool `name` over the app's workspace `workspace_id`. Raises `AppError` for an unknown
    workspace, `UnknownTool` for an unknown name."""
    workspace = app.get_workspace(workspace_id)
    route = _ROUTES.get(name)
    if route is None:
        raise UnknownTool(name, None)

    async def execute(args: BaseModel, ctx: ToolContext) -> dict[str, Any]:
        try:
            return await route.run(workspace, args, ctx)
        except WorkspaceError as err:
            raise _route_error(err) from err

    return Tool(
        id=name, description=route.description, input_schema=route.input, execute=execute, idempotent=route.idempotent
    )


def route_status(error_text: str) -> tuple[int, str] | None:
    """(status, message) of a route tool's error text ``"{error_name}: {message}"``; None for any other text (a
    failure of Keel's, not of the request)."""
    name, _, message = error_text.partition(": ")
    status = ROUTE_STATUS.get(name)
    return None if status is None else (status, message)


__all__ = [
    "MAX_READ_BYTES",
    "READ_ENCODINGS",
    "ROUTE_STATUS",
    "WORKSPACE_API_TOOLS",
    "Conflict",
    "Forbidden",
    "NotFound",
    "RouteError",
    "Unavailable",
    "Workspace",
    "route_status",
    "workspace_api_tool",
]
