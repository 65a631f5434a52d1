"""`/api/workspaces`: the app's workspaces (the global one, the ones it registers, its agents' and controllers'),
their files, search and skills, in Mastra's shapes for `@mastra/client-js`.

Listing and describing a workspace reads its configuration here. Everything else runs on a worker as a standalone
`keel.execute_tool` activity (`keel.app.workspace_api_tools`): a file the UI writes takes the write lock a run's
write tool takes, on the worker that runs the agents, and each operation shows in the Temporal UI. What Mastra's
routes answer without touching the workspace (no filesystem, no search, no skills, a read-only filesystem, a
request missing its path) is answered here, without a worker.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import Field

from keel.app import Agent, App
from keel.app import workspace_api_tools as tools
from keel.app.workspace_api_tools import Workspace  # the client reaches workspaces through the app layer
from keel.client.api.bodies import Lenient
from keel.client.api.context import Ctx, QueryContext
from keel.client.api.errors import ApiError, bad_request, not_found

router = APIRouter(prefix="/workspaces", tags=["workspaces"])

FsPath = Annotated[str | None, Query(description="A path in the workspace, relative to its root")]
TopK = Annotated[float | None, Query(alias="topK", ge=0, le=1_000_000, allow_inf_nan=False)]
MinScore = Annotated[float | None, Query(alias="minScore", allow_inf_nan=False)]


class WriteBody(Lenient):
    path: str | None = None
    content: str | None = None
    encoding: Literal["utf-8", "base64"] = "utf-8"
    recursive: bool | None = None


class MkdirBody(Lenient):
    path: str | None = None
    recursive: bool | None = None


class IndexBody(Lenient):
    path: str | None = None
    content: str | None = None
    metadata: dict[str, Any] | None = Field(None)


# --- what this process answers ------------------------------------------------------------------------------


def _status(status: str) -> str:
    """A workspace (or filesystem) here was never started: the worker starts its own copy when it starts, and a
    Keel workspace needs no start of its own to be used (a worker resolves it for each call)."""
    return "ready" if status == "pending" else status


def _read_only(ws: Workspace) -> bool:
    return bool(getattr(ws.filesystem, "read_only", False))


def _capabilities(ws: Workspace) -> dict[str, bool]:
    return {
        "hasFilesystem": ws.has_filesystem_config(),
        "hasSandbox": ws.has_sandbox_config(),
        "canBM25": ws.can_bm25,
        "canVector": ws.can_vector,
        "canHybrid": ws.can_hybrid,
        "hasSkills": ws.skills is not None,
    }


def _owner(app: App, ws: Workspace) -> Agent | None:
    """The agent whose workspace this is (its own, or its controller's): Mastra lists those as `source: agent`."""
    if ws is app.workspace:
        return None
    return next((a for a in app.agents.values() if app.workspace_of(a) is ws), None)


def _listed(app: App, ws: Workspace) -> dict[str, Any]:
    owner = _owner(app, ws)
    shown: dict[str, Any] = {"id": ws.id, "name": ws.name, "status": _status(ws.status)}
    if owner is None:
        shown["source"] = "mastra"
    else:
        shown |= {"source": "agent", "agentId": owner.id, "agentName": owner.display_name}
    return shown | {"capabilities": _capabilities(ws), "safety": {"readOnly": _read_only(ws)}}


def _filesystem_info(fs: Any) -> dict[str, Any]:
    """Mastra's route shows its provider's `getInfo()`: `readOnly` only for a read-only filesystem (a Mastra
    provider's `readOnly` is unset otherwise), beside the metadata, where Keel's providers note it."""
    info = dict(fs.get_info())
    metadata = info.get("metadata")
    if isinstance(metadata, dict):
        metadata = {k: v for k, v in metadata.items() if k != "readOnly"}
    shown = {
        "id": info.get("id"),
        "name": info.get("name"),
        "provider": info.get("provider"),
        "status": _status(str(info["status"])) if info.get("status") else None,
        "error": info.get("error"),
        "readOnly": True if getattr(fs, "read_only", False) else None,
        "icon": info.get("icon"),
        "metadata": metadata,
    }
    return {k: v for k, v in shown.items() if v is not None}


def _mounts(fs: Any) -> list[dict[str, Any]] | None:
    mounts = getattr(fs, "mounts", None)
    if not isinstance(mounts, dict):
        return None
    shown = []
    for path, mount in mounts.items():
        info = dict(mount.get_info())
        entry = {
            "path": path,
            "provider": info.get("provider") or getattr(mount, "provider", "unknown"),
            "readOnly": bool(getattr(mount, "read_only", False)),
            "displayName": info.get("name"),
            "icon": info.get("icon"),
            "name": getattr(mount, "name", None),
        }
        shown.append({k: v for k, v in entry.items() if v is not None})
    return shown


@router.get("")
async def list_workspaces(ctx: Ctx) -> dict[str, Any]:
    return {"workspaces": [_listed(ctx.app, ws) for ws in ctx.app.workspaces.values()]}


@router.get("/{workspace_id}")
async def get_workspace(ctx: Ctx, workspace_id: str) -> dict[str, Any]:
    """An unknown id is `{isWorkspaceConfigured: false}` (200), as in Mastra."""
    ws = ctx.app.workspaces.get(workspace_id)
    if ws is None:
        return {"isWorkspaceConfigured": False}
    shown: dict[str, Any] = {"isWorkspaceConfigured": True, **_listed(ctx.app, ws)}
    for key in ("source", "agentId", "agentName"):
        shown.pop(key, None)
    if ws.filesystem is not None:
        shown["filesystem"] = _filesystem_info(ws.filesystem)
        mounts = _mounts(ws.filesystem)
        if mounts is not None:
            shown["mounts"] = mounts
    return shown


# --- what a worker answers ----------------------------------------------------------------------------------


async def _run(ctx: Ctx, ws: Workspace, tool: str, args: dict[str, Any], request_context: Any) -> Any:
    """Run the route's tool on a worker; its error text as Mastra's `{error}` with the route's status."""
    outcome = await ctx.keel.execute_tool(None, tool, args, request_context=request_context, workspace_id=ws.id)
    if not outcome.is_error:
        return outcome.result
    text = str(outcome.result.get("error") if isinstance(outcome.result, dict) else outcome.result)
    known = tools.route_status(text)
    if known is None:
        raise ApiError(500, f"Internal error: {text}")
    raise ApiError(*known)


def _with_filesystem(ctx: Ctx, workspace_id: str, path: str | None) -> tuple[Workspace, str]:
    if not path:
        raise bad_request("Path is required")
    ws = ctx.app.workspaces.get(workspace_id)
    if ws is None or not ws.has_filesystem_config():
        raise not_found("No workspace filesystem configured")
    return ws, path


def _writable(ws: Workspace) -> None:
    if _read_only(ws):
        raise ApiError(403, "Workspace is in read-only mode")


@router.get("/{workspace_id}/fs/read")
async def read_file(
    ctx: Ctx, workspace_id: str, request_context: QueryContext, path: FsPath = None, encoding: str | None = None
) -> Any:
    ws, path = _with_filesystem(ctx, workspace_id, path)
    if encoding and encoding not in tools.READ_ENCODINGS:
        raise bad_request(f"Unknown encoding {encoding!r} (use one of: {', '.join(tools.READ_ENCODINGS)})")
    args = {"path": path, "encoding": encoding or "utf-8"}
    return await _run(ctx, ws, tools.FS_READ, args, request_context)


@router.post("/{workspace_id}/fs/write")
async def write_file(ctx: Ctx, workspace_id: str, body: WriteBody, request_context: QueryContext) -> Any:
    if not body.path or body.content is None:
        raise bad_request("Path and content are required")
    ws, path = _with_filesystem(ctx, workspace_id, body.path)
    _writable(ws)
    if body.encoding == "base64":
        try:
            base64.b64decode(body.content, validate=True)
        except binascii.Error as err:
            raise bad_request(f"content is not valid base64: {err}") from None
    args = {"path": path, "content": body.content, "encoding": body.encoding, "recursive": body.recursive is not False}
    return await _run(ctx, ws, tools.FS_WRITE, args, request_context)


@router.get("/{workspace_id}/fs/list")
async def list_files(
    ctx: Ctx, workspace_id: str, request_context: QueryContext, path: FsPath = None, recursive: bool = False
) -> Any:
    """A workspace without a filesystem lists nothing (200, with `error`), as in Mastra."""
    if not path:
        raise bad_request("Path is required")
    ws = ctx.app.workspaces.get(workspace_id)
    if ws is None or not ws.has_filesystem_config():
        return {"path": path, "entries": [], "error": "No workspace filesystem configured"}
    return await _run(ctx, ws, tools.FS_LIST, {"path": path, "recursive": recursive}, request_context)


@router.delete("/{workspace_id}/fs/delete")
async def delete_path(
    ctx: Ctx,
    workspace_id: str,
    request_context: QueryContext,
    path: FsPath = None,
    recursive: bool = False,
    force: bool = False,
) -> Any:
    ws, path = _with_filesystem(ctx, workspace_id, path)
    _writable(ws)
    args = {"path": path, "recursive": recursive, "force": force}
    return await _run(ctx, ws, tools.FS_DELETE, args, request_context)


@router.post("/{workspace_id}/fs/mkdir")
async def mkdir(ctx: Ctx, workspace_id: str, body: MkdirBody, request_context: QueryContext) -> Any:
    ws, path = _with_filesystem(ctx, workspace_id, body.path)
    _writable(ws)
    args = {"path": path, "recursive": body.recursive is not False}
    return await _run(ctx, ws, tools.FS_MKDIR, args, request_context)


@router.get("/{workspace_id}/fs/stat")
async def stat(ctx: Ctx, workspace_id: str, request_context: QueryContext, path: FsPath = None) -> Any:
    ws, path = _with_filesystem(ctx, workspace_id, path)
    return await _run(ctx, ws, tools.FS_STAT, {"path": path}, request_context)


@router.get("/{workspace_id}/search")
async def search(
    ctx: Ctx,
    workspace_id: str,
    request_context: QueryContext,
    query: str | None = None,
    top_k: TopK = None,
    mode: Literal["bm25", "vector", "hybrid"] | None = None,
    min_score: MinScore = None,
) -> Any:
    """A workspace that is unknown or has no search finds nothing (200), as in Mastra."""
    if not query:
        raise bad_request("Search query is required")
    ws = ctx.app.workspaces.get(workspace_id)
    if ws is None or not (ws.can_bm25 or ws.can_vector):
        return {"results": [], "query": query, "mode": mode or "bm25"}
    args = {"query": query, "top_k": int(top_k or 5), "mode": mode, "min_score": min_score}
    return await _run(ctx, ws, tools.SEARCH, args, request_context)


@router.post("/{workspace_id}/index")
async def index(ctx: Ctx, workspace_id: str, body: IndexBody, request_context: QueryContext) -> Any:
    if not body.path or body.content is None:
        raise bad_request("Path and content are required")
    ws = ctx.app.workspaces.get(workspace_id)
    if ws is None:
        raise not_found("No workspace configured")
    if not (ws.can_bm25 or ws.can_vector):
        raise bad_request("Workspace does not have search configured")
    args = {"path": body.path, "content": body.content, "metadata": body.metadata}
    return await _run(ctx, ws, tools.INDEX, args, request_context)


# --- skills -------------------------------------------------------------------------------------------------


def _with_skills(ctx: Ctx, workspace_id: str) -> Workspace:
    ws = ctx.app.workspaces.get(workspace_id)
    if ws is None or ws.skills is None:
        raise not_found("No workspace with skills configured")
    return ws


_UNSAFE_DRIVE = re.compile(r"^[a-zA-Z]:[\\/]")


def _safe_reference(path: str) -> str:
    """Mastra's `assertSafeFilePath`: no absolute path, no `.` or `..` segment."""
    if path.startswith(("/", "\\")) or _UNSAFE_DRIVE.match(path):
        raise bad_request(f'Invalid file path "{path}". Absolute paths are not allowed.')
    if any(segment in (".", "..") for segment in re.split(r"[\\/]", path)):
        raise bad_request(f'Invalid file path "{path}". Path traversal is not allowed.')
    return path


@router.get("/{workspace_id}/skills/search")
async def search_skills(
    ctx: Ctx,
    workspace_id: str,
    request_context: QueryContext,
    query: str | None = None,
    top_k: TopK = None,
    min_score: MinScore = None,
    skill_names: Annotated[str | None, Query(alias="skillNames")] = None,
    include_references: Annotated[bool, Query(alias="includeReferences")] = True,
) -> Any:
    """`skillNames` is comma-separated. A workspace without skills finds nothing (200), as in Mastra."""
    if not query:
        raise bad_request("Search query is required")
    ws = ctx.app.workspaces.get(workspace_id)
    if ws is None or ws.skills is None:
        return {"results": [], "query": query}
    names = [n.strip() for n in skill_names.split(",")] if skill_names else None
    args = {
        "query": query,
        "top_k": top_k or 5,
        "min_score": min_score,
        "skill_names": names,
        "include_references": include_references,
    }
    return await _run(ctx, ws, tools.SKILLS_SEARCH, args, request_context)


@router.get("/{workspace_id}/skills")
async def list_skills(ctx: Ctx, workspace_id: str, request_context: QueryContext) -> Any:
    ws = ctx.app.workspaces.get(workspace_id)
    if ws is None or ws.skills is None:
        return {"skills": [], "isSkillsConfigured": False}
    return await _run(ctx, ws, tools.SKILLS, {}, request_context)


SkillPath = Annotated[str | None, Query(alias="path", description="The skill's path, when two share its name")]


@router.get("/{workspace_id}/skills/{skill_name}")
async def get_skill(
    ctx: Ctx, workspace_id: str, skill_name: str, request_context: QueryContext, skill_path: SkillPath = None
) -> Any:
    ws = _with_skills(ctx, workspace_id)
    return await _run(ctx, ws, tools.SKILL, {"skill": skill_path or skill_name}, request_context)


@router.get("/{workspace_id}/skills/{skill_name}/references")
async def list_skill_references(
    ctx: Ctx, workspace_id: str, skill_name: str, request_context: QueryContext, skill_path: SkillPath = None
) -> Any:
    ws = _with_skills(ctx, workspace_id)
    return await _run(ctx, ws, tools.SKILL_REFERENCES, {"skill": skill_path or skill_name}, request_context)


@router.get("/{workspace_id}/skills/{skill_name}/references/{reference_path:path}")
async def get_skill_reference(
    ctx: Ctx,
    workspace_id: str,
    skill_name: str,
    reference_path: str,
    request_context: QueryContext,
    skill_path: SkillPath = None,
) -> Any:
    """`reference_path` is relative to the skill's `references/` directory (client-js sends it URL-encoded)."""
    ws = _with_skills(ctx, workspace_id)
    args = {"skill": skill_path or skill_name, "path": _safe_reference(reference_path)}
    return await _run(ctx, ws, tools.SKILL_REFERENCE, args, request_context)
