"""`/api/agent-controller`: AgentController sessions over HTTP, the routes the unmodified `@mastra/client-js`
1.47 calls (`client.getAgentController(id).session(resourceId, scope?)`), and the channel webhooks
`POST /api/agent-controllers/:id/channels/:platform/webhook`.

Each session route is a thin layer over `keel.client.controller.Session`: a read is a query to the session's
`AgentSession` workflow or a read of storage, a change a validated update. `?sessionScope=` selects the session
of (controller, resource id, scope) on every session route. The API keeps nothing: restart it at any time.

Where Keel differs from Mastra (bench/mastra/CONTROLLER_SPEC.md §11, §12), on purpose:

- A refused change is a 4xx with the reason, never a 500 (which client-js retries) nor a silent `{ok: true}`:
  unknown mode, model, thread or tool call 404; a tool call already decided, or a thread change while a turn
  runs, 409; a state that fails the schema, or resume data that fails its schema, 422; a malformed body 400.
- Reads never create: `GET S`, `S/permissions`, `S/goal` of a session nobody created answer 404 (Mastra makes
  the session, and a thread, on every GET). Changes, and the event stream, make it on first use as Mastra does.
- `GET S` also gives the calls the session waits on (`pendingApprovals`, `pendingSuspensions`), the running
  turn (`runId`), the session id and `streamOffset`: the stream offset to subscribe from to miss nothing after
  this state.
- The stream (`GET S/stream`) is Mastra's SSE framing, plus an `id: <offset>` line on each frame; it replays
  the session's log from `?offset=N` or from after the standard `Last-Event-ID` header (which wins: an
  EventSource re-sends it on reconnect with the original URL). client-js reads only `data:` lines and its
  reconnect re-GETs the same URL without an offset, so a client-js subscriber that reconnects gets live events
  from the reconnect on; what it missed is in `GET S` (nothing waits unseen: the pending calls are there).
- `PUT S/threads/:id` renames that thread without switching the session to it; `POST S/resource` (re-keying a
  session to another resource) is refused with 409; `GET S/resources` lists only this resource; `GET S/om` is a
  501 (no observational memory); a notification is delivered as a follow-up message.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import inspect
import json
import logging
import re
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Body, Header, Path, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import Field, ValidationError, model_validator
from temporalio.client import RPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from keel.app.controller import ChannelMessage, Channels, ControllerDefinition
from keel.client.api.bodies import Lenient, in_utc
from keel.client.api.context import Ctx
from keel.client.api.errors import ApiError, bad_request, not_found
from keel.client.api.memory import message_json
from keel.client.api.streams import idle_marked
from keel.client.controller import ControllerClient, Session, SessionError, SessionNotFound
from keel.client.errors import KeelClientError, NoWorker
from keel.client.visibility import quoted
from keel.storage import StoredMessage, Thread
from keel.storage.threads import FORKED_SUBAGENT
from keel.workflows.session_contracts import PendingItem, SessionSnapshot

log = logging.getLogger("keel.api")

router = APIRouter(prefix="/agent-controller", tags=["agent-controllers"])
channels_router = APIRouter(prefix="/agent-controllers", tags=["agent-controllers"])

HEARTBEAT_SECONDS = 25.0
"""A `: heartbeat` comment after this long without a frame (Mastra's keepalive)."""
SSE_HEADERS = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-accel-buffering": "no",
}
MAX_ID = 256
ID_PATTERN = r"^[^\x00-\x1f\x7f]+$"
MAX_FILE_DATA = 14 * 1024 * 1024
MAX_FILES_DATA = 28 * 1024 * 1024
DEFAULT_PER_PAGE = 40
GENERIC = "generic"
PLAN_APPROVALS = frozenset({"approve", "approved", "yes", "y", "ok", "lgtm", "go", "go ahead"})

ERROR_STATUS = {
    "UnknownMode": 404,
    "UnknownModel": 404,
    "UnknownAgentType": 404,
    "ThreadNotFound": 404,
    "UnknownToolCall": 404,
    "AlreadyDecided": 409,
    "SessionBusy": 409,
    "InvalidState": 422,
    "InvalidResumeData": 422,
    "InvalidInput": 400,
}
"""A refused session change (`SessionError.kind`) -> its status; any other refusal is a 409 (the session's
state does not allow it now)."""

RESERVED_METADATA = frozenset(
    {
        # Mastra's (never tags)...
        "currentModelId",
        "currentModeId",
        "observerModelId",
        "reflectorModelId",
        "observationThreshold",
        "reflectionThreshold",
        "tokenUsage",
        "thinkingLevel",
        "notifications",
        # ...and the settings Keel's sessions keep on a thread.
        "tasks",
        "titlePinned",
        "clone",
        FORKED_SUBAGENT,
        "parentThreadId",
    }
)
RESERVED_PREFIXES = ("modeModelId_", "subagentModelId")

OM_IDLE = {
    "status": "idle",
    "pendingTokens": 0,
    "threshold": 30000,
    "thresholdPercent": 0,
    "observationTokens": 0,
    "reflectionThreshold": 40000,
    "reflectionThresholdPercent": 0,
    "projectedMessageRemoval": 0,
    "projectedReflectionSavings": 0,
}
OM_MISSING = (
    "Keel has no observational memory: no observer or reflector models (Mastra's omConfig), no observational-"
    "memory record per thread or resource in storage to read here, no om_* events, and the display state's "
    "omProgress stays idle. A session's turns read the thread's messages as they are."
)
NOT_REKEYED = (
    "A Keel session cannot move to another resource: it is a durable workflow whose id is derived from "
    "(controller, resourceId, scope), and its threads, grants, pending calls and event log belong to that "
    "resource. Open the other resource's session instead: POST /api/agent-controller/{cid}/sessions "
    '{{"resourceId": "{new}"}} (client-js: controller.session("{new}").create()).'
)

T = TypeVar("T")

ResourceId = Annotated[str, Path(min_length=1, max_length=MAX_ID, pattern=ID_PATTERN)]
ThreadId = Annotated[str, Path(min_length=1, max_length=MAX_ID, pattern=ID_PATTERN)]
Scope = Annotated[str | None, Query(alias="sessionScope", max_length=MAX_ID, pattern=ID_PATTERN)]


# --- bodies ---------------------------------------------------------------------------------------------------


class CreateSessionBody(Lenient):
    resource_id: str = Field(alias="resourceId", min_length=1, max_length=MAX_ID, pattern=ID_PATTERN)
    tags: dict[str, str] | None = None
    thread_id: str | None = Field(None, alias="threadId", min_length=1, max_length=MAX_ID, pattern=ID_PATTERN)
    session_scope: str | None = Field(None, alias="sessionScope", max_length=MAX_ID, pattern=ID_PATTERN)


class FileIn(Lenient):
    data: str = Field(max_length=MAX_FILE_DATA)
    media_type: str = Field(alias="mediaType", min_length=1)
    filename: str | None = None


class MessageBody(Lenient):
    message: str
    files: list[FileIn] | None = Field(None, max_length=20)
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")
    """Accepted, not used: a session's turns get the session's own context."""

    @model_validator(mode="after")
    def _total(self) -> MessageBody:
        if sum(len(f.data) for f in self.files or ()) > MAX_FILES_DATA:
            raise ValueError("Total attachment size exceeds limit")
        return self


class SteerBody(Lenient):
    message: str
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")


class ApprovalBody(Lenient):
    tool_call_id: str = Field(alias="toolCallId", min_length=1)
    approved: bool | None = None
    decision: Literal["approve", "decline", "always_allow_category"] | None = None
    """Keel's addition (client-js sends `approved`): `always_allow_category` also allows the call's category for
    the rest of the session."""
    reason: str | None = None
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")

    @model_validator(mode="after")
    def _decided(self) -> ApprovalBody:
        if self.approved is None and self.decision is None:
            raise ValueError("Give approved (true/false) or decision (approve, decline, always_allow_category)")
        return self


class SuspensionBody(Lenient):
    tool_call_id: str = Field(alias="toolCallId", min_length=1)
    resume_data: Any = Field(None, alias="resumeData")
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")


class StateBody(Lenient):
    state: dict[str, Any]


class ModeBody(Lenient):
    mode_id: str = Field(alias="modeId", min_length=1)


class ModelBody(Lenient):
    model_id: str = Field(alias="modelId", min_length=1)
    scope: Literal["global", "thread"] | None = None
    mode_id: str | None = Field(None, alias="modeId", min_length=1)


class ThreadBody(Lenient):
    thread_id: str = Field(alias="threadId", min_length=1, max_length=MAX_ID, pattern=ID_PATTERN)


class NewThreadBody(Lenient):
    title: str | None = None


class RenameBody(Lenient):
    title: str


class CloneBody(Lenient):
    source_thread_id: str | None = Field(
        None, alias="sourceThreadId", min_length=1, max_length=MAX_ID, pattern=ID_PATTERN
    )
    title: str | None = None


class CategoryPermissionBody(Lenient):
    category: Literal["read", "edit", "execute", "mcp", "other"]
    policy: Literal["allow", "ask", "deny"]


class ToolPermissionBody(Lenient):
    tool_name: str = Field(alias="toolName", min_length=1)
    policy: Literal["allow", "ask", "deny"]


class SetGoalBody(Lenient):
    objective: str = Field(min_length=1)
    judge_model_id: str | None = Field(None, alias="judgeModelId")
    max_runs: int | None = Field(None, alias="maxRuns", ge=1, le=1000)


class UpdateGoalBody(Lenient):
    judge_model_id: str | None = Field(None, alias="judgeModelId")
    max_runs: int | None = Field(None, alias="maxRuns", ge=1, le=1000)
    status: Literal["active", "paused", "done"] | None = None


class ResourceBody(Lenient):
    new_resource_id: str = Field(alias="newResourceId", min_length=1)


class NotificationBody(Lenient):
    source: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    summary: str = Field(min_length=1)
    priority: Literal["low", "medium", "high", "urgent"] | None = None
    payload: Any = None
    source_id: str | None = Field(None, alias="sourceId")
    dedupe_key: str | None = Field(None, alias="dedupeKey")
    coalesce_key: str | None = Field(None, alias="coalesceKey")
    attributes: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class GenericChannelBody(Lenient):
    """The generic channel adapter's JSON: one chat message."""

    thread_id: str = Field(alias="threadId", min_length=1, max_length=MAX_ID, pattern=ID_PATTERN)
    text: str = Field(min_length=1)
    user_id: str | None = Field(None, alias="userId", max_length=MAX_ID)
    is_dm: bool = Field(False, alias="isDm")


# --- plumbing -------------------------------------------------------------------------------------------------


def _definition(ctx: Ctx, controller_id: str) -> ControllerDefinition:
    found = ctx.app.controllers.get(controller_id)
    if found is None:
        raise not_found(f'agent controller "{controller_id}" not found')
    return found


def _client(ctx: Ctx, controller_id: str) -> ControllerClient:
    _definition(ctx, controller_id)
    return ControllerClient(ctx.keel, ctx.storage, controller_id)


def _scope(scope: str | None) -> str | None:
    return scope or None  # "" is no scope (the same session id)


def _missing(controller_id: str, resource_id: str, scope: str | None) -> ApiError:
    scoped = f" (scope {scope!r})" if scope else ""
    return not_found(
        f"No session for resource {resource_id!r}{scoped} on agent controller {controller_id!r}: create it with "
        f"POST /api/agent-controller/{controller_id}/sessions (client-js: session.create()) or send it a message"
    )


@contextlib.contextmanager
def _answers(controller_id: str, resource_id: str, scope: str | None) -> Iterator[None]:
    """A session's refusal or failure as the status that says whose it is (4xx: the caller's, never retried)."""
    try:
        yield
    except SessionError as err:
        raise ApiError(ERROR_STATUS.get(err.kind or "", 409), str(err)) from None
    except SessionNotFound:
        raise _missing(controller_id, resource_id, scope) from None
    except NoWorker:
        raise
    except ValidationError as err:
        raise bad_request("Invalid request", _issues(err)) from None
    except RPCError as err:
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            raise bad_request(err.message) from None
        if err.status == RPCStatusCode.NOT_FOUND:
            raise _missing(controller_id, resource_id, scope) from None
        raise ApiError(503, f"The session did not answer: {err.message}") from None
    except KeelClientError as err:
        raise ApiError(503, f"The session did not answer: {err}") from None
    except RPCTimeoutOrCancelledError:
        raise ApiError(503, "The session did not answer in time") from None


def _issues(err: ValidationError) -> list[dict[str, str]]:
    return [{"field": ".".join(str(p) for p in e["loc"]) or "body", "message": e["msg"]} for e in err.errors()]


def _existing(ctx: Ctx, controller_id: str, resource_id: str, scope: str | None) -> Session:
    """A handle on the session, not made if missing: the reads' (their `_answers` say 404 then)."""
    return _client(ctx, controller_id).session(resource_id, _scope(scope))


async def _changed(
    ctx: Ctx, controller_id: str, resource_id: str, scope: str | None, change: Callable[[Session], Awaitable[T]]
) -> T:
    """Apply `change` to the session, made first if nobody had (Mastra's get-or-create): the change is tried
    on the session as it is, and only a session that does not exist costs a creation."""
    client = _client(ctx, controller_id)
    scope = _scope(scope)
    with _answers(controller_id, resource_id, scope):
        try:
            return await change(client.session(resource_id, scope))
        except SessionNotFound:
            return await change(await client.create_session(resource_id, scope))


async def _opened(ctx: Ctx, controller_id: str, resource_id: str, scope: str | None) -> tuple[Session, bool]:
    """The session, made if nobody had; True if it did not exist when asked (this call, or one at the same
    time, made it)."""
    client = _client(ctx, controller_id)
    scope = _scope(scope)
    with _answers(controller_id, resource_id, scope):
        session = client.session(resource_id, scope)
        try:
            await session.snapshot()
            return session, False
        except SessionNotFound:
            return await client.create_session(resource_id, scope), True


def _ok(**extra: Any) -> dict[str, Any]:
    return {"ok": True, **{k: v for k, v in extra.items() if v is not None}}


def _pending_json(item: PendingItem) -> dict[str, Any]:
    found: dict[str, Any] = {"toolCallId": item.tool_call_id, "toolName": item.tool_name, "args": item.args}
    if item.kind == "approval":
        found["category"] = item.category
    else:
        found["suspendPayload"] = item.suspend_payload
        found["resumeSchema"] = item.resume_schema
    found["runId"] = item.run_id
    if item.subagent:
        found["subagent"] = item.subagent
    return found


def _goal_json(snapshot: SessionSnapshot) -> dict[str, Any]:
    goal = snapshot.goal
    if goal is None:
        return {}
    shown: dict[str, Any] = {
        "objective": goal.objective,
        "status": goal.status,
        "runsUsed": goal.runs,
        "maxRuns": goal.max_runs,
    }
    if goal.judge_model_id:
        shown["judgeModelId"] = goal.judge_model_id
    if goal.last_evaluation:
        shown["lastEvaluation"] = goal.last_evaluation
    return {"goal": shown}


def _content(message: str, files: list[FileIn] | None) -> Any:
    """The message, with text files inlined as fenced blocks (Mastra's `createMessageInput`). Keel's messages
    carry text: any other file is refused (422) rather than silently dropped."""
    if not files:
        return message
    parts = [{"type": "text", "text": message}]
    for f in files:
        if not (f.media_type.startswith("text/") or f.media_type == "application/json"):
            name = f.filename or "attachment"
            raise ApiError(
                422,
                f"File {name!r} ({f.media_type}) cannot be attached: Keel messages carry text, so only text/* "
                "and application/json files are accepted (inlined into the message)",
            )
        text = f.data
        found = re.match(r"^data:[^;]*;base64,(.*)$", text, re.S)
        if found:
            with contextlib.suppress(binascii.Error, ValueError):
                text = base64.b64decode(found.group(1)).decode("utf-8")
        label = f"[File: {f.filename}]" if f.filename else "[Attached file]"
        fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
        parts.append({"type": "text", "text": f"{label}\n{fence}\n{text}\n{fence}"})
    return parts


def _tags(thread: Thread) -> dict[str, str]:
    return {
        k: v
        for k, v in (thread.metadata or {}).items()
        if isinstance(v, str) and k not in RESERVED_METADATA and not k.startswith(RESERVED_PREFIXES)
    }


async def _active_sessions(
    ctx: Ctx, controller_id: str, resource_id: str | None = None
) -> list[tuple[str, str | None, str | None]]:
    """(session id, resource id, thread id) of the controller's sessions with a turn running or waiting on a
    person, from visibility (no worker asked)."""
    from keel.workflows.search_attributes import KEEL_RESOURCE_ID, KEEL_THREAD_ID

    query = (
        f"KeelKind='session' AND KeelControllerId='{quoted(controller_id)}' AND CloseTime IS NULL "
        "AND (KeelStatus='running' OR KeelStatus='suspended')"
    )
    if resource_id is not None:
        query += f" AND KeelResourceId='{quoted(resource_id)}'"
    found = []
    async for ex in ctx.keel.temporal.list_workflows(query, limit=1000):
        attrs = ex.typed_search_attributes
        found.append((ex.id, attrs.get(KEEL_RESOURCE_ID), attrs.get(KEEL_THREAD_ID)))
    return found


async def _owned_thread(ctx: Ctx, thread_id: str, resource_id: str) -> Thread | None:
    thread = await ctx.storage.get_thread(thread_id)
    return thread if thread is not None and thread.resource_id == resource_id else None


# --- the controller -------------------------------------------------------------------------------------------


@router.get("")
async def list_controllers(ctx: Ctx) -> dict[str, Any]:
    return {"agentControllers": [{"id": cid} for cid in ctx.app.controllers]}


@router.get("/{controller_id}/modes")
async def list_modes(ctx: Ctx, controller_id: str) -> dict[str, Any]:
    definition = _definition(ctx, controller_id)
    default = definition.default_mode.id
    modes = []
    for mode in definition.modes:
        shown: dict[str, Any] = {"id": mode.id}
        if mode.name is not None:
            shown["name"] = mode.name
        shown["default"] = mode.id == default  # Keel's additions, for a mode picker
        if mode.default_model_id:
            shown["defaultModelId"] = mode.default_model_id
        modes.append(shown)
    return {"modes": modes}


@router.get("/{controller_id}/models")
async def list_models(ctx: Ctx, controller_id: str) -> dict[str, Any]:
    """The models a session may switch to (the controller's `models`); without any, the agent's own (any id is
    then accepted and only recorded, as in Mastra)."""
    definition = _definition(ctx, controller_id)
    models = dict(definition.models) or {definition.agent.model.model_id: definition.agent.model}
    shown = []
    for model_id, model in models.items():
        provider, _, name = model_id.partition("/")
        if not name:
            provider, name = model.provider, model_id
        shown.append({"id": model_id, "provider": provider, "modelName": name, "hasApiKey": True, "useCount": 0})
    return {"models": shown}


@router.get("/{controller_id}/active-runs")
async def list_active_runs(ctx: Ctx, controller_id: str) -> dict[str, Any]:
    """The turns running (or waiting on a person) in the controller's sessions: visibility finds the sessions,
    each says its turn."""
    client = _client(ctx, controller_id)
    active = await _active_sessions(ctx, controller_id)

    async def turn(session_id: str, resource_id: str | None) -> dict[str, Any] | None:
        try:
            snapshot = await Session(client, session_id, resource_id or "", None).snapshot()
        except KeelClientError:
            return None  # ended meanwhile, or not answering: not listed
        if snapshot.run_id is None:
            return None
        return {"runId": snapshot.run_id, "resourceId": snapshot.resource_id, "threadId": snapshot.thread_id or ""}

    found = await asyncio.gather(*(turn(session_id, resource_id) for session_id, resource_id, _ in active))
    return {"runs": [r for r in found if r is not None]}


@router.get("/{controller_id}/workspace")
async def workspace_status(ctx: Ctx, controller_id: str) -> dict[str, Any]:
    """Keel's workspace needs no start: a worker resolves it for each tool call, so it is ready when it exists."""
    definition = _definition(ctx, controller_id)
    has = ctx.app.workspace_of(definition.agent) is not None
    return {"hasWorkspace": has, "isReady": has}


# --- sessions -------------------------------------------------------------------------------------------------


@router.post("/{controller_id}/sessions")
async def create_session(ctx: Ctx, controller_id: str, body: CreateSessionBody) -> dict[str, Any]:
    """Get-or-create the session of (resource id, scope); with `threadId`, switched to that thread (made if
    missing)."""
    client = _client(ctx, controller_id)
    scope = _scope(body.session_scope)
    if body.thread_id is not None:
        # Another resource's thread is refused here: a new session started on it would fail as a whole
        # (`AgentSession` binds its first thread before it answers).
        found = await ctx.storage.get_thread(body.thread_id)
        if found is not None and found.resource_id != body.resource_id:
            raise not_found(f"Thread not found: {body.thread_id}")
    with _answers(controller_id, body.resource_id, scope):
        session = await client.create_session(body.resource_id, scope, thread_id=body.thread_id, tags=body.tags)
        # The thread this request bound the session to (read afterwards, it may be another create's since).
        thread_id = body.thread_id or (await session.snapshot()).thread_id
    shown = {"controllerId": controller_id, "resourceId": body.resource_id}
    if thread_id:
        shown["threadId"] = thread_id
    return shown | {"sessionId": session.id}


@router.get("/{controller_id}/sessions/{resource_id}")
async def session_state(
    ctx: Ctx,
    controller_id: str,
    resource_id: ResourceId,
    scope: Scope = None,
    thread_id: Annotated[str | None, Query(alias="threadId", max_length=MAX_ID)] = None,
) -> dict[str, Any]:
    """Mastra's session state, and Keel's: the calls the session waits on, the running turn, and the stream
    offset this state is as of (subscribe from it to miss nothing)."""
    session = _existing(ctx, controller_id, resource_id, scope)
    with _answers(controller_id, resource_id, scope):
        end = await ctx.storage.log_end(session.id)  # before the reads: a subscriber from here misses nothing
        snapshot = await session.snapshot()
        shown = await session.display_state.get()
    target = thread_id or snapshot.thread_id
    thread = await _owned_thread(ctx, target, resource_id) if target else None
    if thread_id and thread is None:
        raise not_found(f'thread "{thread_id}" not found')
    tasks = (thread.metadata or {}).get("tasks") if thread is not None else None
    state = snapshot.state
    settings: dict[str, Any] = {"yolo": snapshot.permissions.yolo}
    if state.get("thinkingLevel") in ("off", "low", "medium", "high", "xhigh", "max"):
        settings["thinkingLevel"] = state["thinkingLevel"]
    notifications = state.get("notifications")
    settings["notifications"] = notifications if notifications in ("off", "bell", "system", "both") else "off"
    settings["smartEditing"] = state.get("smartEditing") is not False
    found: dict[str, Any] = {"controllerId": controller_id, "resourceId": resource_id}
    if target:
        found["threadId"] = target
    return found | {
        "modeId": snapshot.mode_id,
        "modelId": snapshot.model_id or "",
        "running": snapshot.running,
        "tasks": tasks if isinstance(tasks, list) else [],
        "omProgress": dict(OM_IDLE),
        "tokenUsage": shown.get("tokenUsage"),
        "settings": settings,
        # Keel's additions
        "sessionId": snapshot.session_id,
        "sessionScope": snapshot.scope,
        "runId": snapshot.run_id,
        "queuedFollowUps": snapshot.queued,
        "pendingApprovals": [_pending_json(p) for p in snapshot.pending if p.kind == "approval"],
        "pendingSuspensions": [_pending_json(p) for p in snapshot.pending if p.kind == "suspension"],
        "streamOffset": end,
    }


@router.get("/{controller_id}/sessions/{resource_id}/stream")
async def session_stream(
    ctx: Ctx,
    controller_id: str,
    resource_id: ResourceId,
    scope: Scope = None,
    offset: Annotated[int | None, Query(ge=0, le=2**53)] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    """Server-Sent Events: `: connected`, then each session event as `id: <offset>` + `data: <event>`, each
    followed by its `display_state_changed` (same id); `: heartbeat` after 25 s without a frame. From the live
    end, or from `?offset=N` (N included), or after `Last-Event-ID` (which wins). Makes the session if nobody
    had (as Mastra)."""
    start = offset
    if last_event_id is not None and last_event_id.strip():
        try:
            start = int(last_event_id) + 1
            if start > 2**53:
                raise ValueError
        except ValueError:
            raise bad_request(f"Last-Event-ID must be an event offset (an integer), not {last_event_id!r}") from None
        start = max(start, 0)
    session, _ = await _opened(ctx, controller_id, resource_id, scope)
    if start is None:
        start = await ctx.storage.log_end(session.id)  # before the response: nothing after it is missed
    return StreamingResponse(_frames(session, start), headers=SSE_HEADERS)


async def _frames(session: Session, start: int) -> AsyncIterator[bytes]:
    yield b": connected\n\n"
    async with contextlib.aclosing(idle_marked(session.events(start), HEARTBEAT_SECONDS)) as events:
        async for event in events:
            if event is None:
                yield b": heartbeat\n\n"
                continue
            at = event.get("offset")  # the event as Mastra's (the generator still reads its offset)
            data = json.dumps(
                {k: v for k, v in event.items() if k != "offset"}, separators=(",", ":"), ensure_ascii=False
            )
            yield (f"id: {at}\ndata: {data}\n\n" if at is not None else f"data: {data}\n\n").encode()
    yield b"data: [DONE]\n\n"


@router.post("/{controller_id}/sessions/{resource_id}/messages")
async def send_message(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: MessageBody, scope: Scope = None
) -> dict[str, Any]:
    """Acknowledged once the session took the message (a turn starts, or it goes into the running one); what
    follows is on the stream."""
    content = _content(body.message, body.files)
    accepted = await _changed(ctx, controller_id, resource_id, scope, lambda s: s.send_message(content, wait=False))
    return _ok(runId=accepted.run_id)


@router.post("/{controller_id}/sessions/{resource_id}/steer")
async def steer(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: SteerBody, scope: Scope = None
) -> dict[str, Any]:
    accepted = await _changed(ctx, controller_id, resource_id, scope, lambda s: s.steer(body.message))
    return _ok(runId=accepted.run_id)


@router.post("/{controller_id}/sessions/{resource_id}/follow-up")
async def follow_up(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: SteerBody, scope: Scope = None
) -> dict[str, Any]:
    accepted = await _changed(ctx, controller_id, resource_id, scope, lambda s: s.follow_up(body.message))
    return _ok(runId=accepted.run_id, queued=accepted.queued or None)


@router.post("/{controller_id}/sessions/{resource_id}/abort")
async def abort(ctx: Ctx, controller_id: str, resource_id: ResourceId, scope: Scope = None) -> dict[str, Any]:
    """Abort the running turn (answered once it has ended); nothing to abort is fine too."""
    accepted = await _changed(ctx, controller_id, resource_id, scope, lambda s: s.abort())
    return _ok(runId=accepted.run_id)


@router.post("/{controller_id}/sessions/{resource_id}/tool-approval")
async def tool_approval(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: ApprovalBody, scope: Scope = None
) -> dict[str, Any]:
    """Decide a call waiting for approval: 404 if no such call waits, 409 if it was decided already."""
    decision = body.decision or ("approve" if body.approved else "decline")
    accepted = await _changed(
        ctx,
        controller_id,
        resource_id,
        scope,
        lambda s: s.respond_to_tool_approval(body.tool_call_id, decision, reason=body.reason),
    )
    return _ok(runId=accepted.run_id)


@router.post("/{controller_id}/sessions/{resource_id}/tool-suspension")
async def tool_suspension(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: SuspensionBody, scope: Scope = None
) -> dict[str, Any]:
    """Resume a suspended call (`ask_user`'s answer, `submit_plan`'s verdict): 404 if no such call is suspended,
    422 if the data does not match its resume schema."""
    accepted = await _changed(
        ctx,
        controller_id,
        resource_id,
        scope,
        lambda s: s.respond_to_tool_suspension(body.tool_call_id, body.resume_data),
    )
    return _ok(runId=accepted.run_id)


@router.put("/{controller_id}/sessions/{resource_id}/state")
async def set_state(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: StateBody, scope: Scope = None
) -> dict[str, Any]:
    """Merge into the session's state: 422 (unchanged) if the result fails the controller's schema."""
    await _changed(ctx, controller_id, resource_id, scope, lambda s: s.state.set(body.state))
    return _ok()


@router.post("/{controller_id}/sessions/{resource_id}/mode")
async def switch_mode(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: ModeBody, scope: Scope = None
) -> dict[str, Any]:
    await _changed(ctx, controller_id, resource_id, scope, lambda s: s.mode.switch(body.mode_id))
    return _ok()


@router.post("/{controller_id}/sessions/{resource_id}/model")
async def switch_model(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: ModelBody, scope: Scope = None
) -> dict[str, Any]:
    await _changed(
        ctx,
        controller_id,
        resource_id,
        scope,
        lambda s: s.model.switch(body.model_id, scope=body.scope or "thread", mode_id=body.mode_id),
    )
    return _ok()


# --- threads --------------------------------------------------------------------------------------------------


@router.post("/{controller_id}/sessions/{resource_id}/thread")
async def switch_thread(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: ThreadBody, scope: Scope = None
) -> dict[str, Any]:
    """Switch the session to one of its resource's threads: 404 if it has none of that id, 409 while a turn runs."""
    await _changed(ctx, controller_id, resource_id, scope, lambda s: s.thread.switch(body.thread_id))
    return _ok()


@router.get("/{controller_id}/sessions/{resource_id}/threads")
async def list_threads(
    ctx: Ctx,
    controller_id: str,
    resource_id: ResourceId,
    scope: Scope = None,
    limit: Annotated[int | None, Query(ge=0)] = None,
    tags: Annotated[str | None, Query(description="a JSON object: only threads whose metadata has these")] = None,
) -> dict[str, Any]:
    """The resource's threads, most recently updated first (from storage; a forked subagent's left out), each
    `active` while a session's turn runs on it."""
    _definition(ctx, controller_id)
    wanted: dict[str, Any] = {}
    if tags:
        try:
            wanted = json.loads(tags)
        except ValueError:
            raise bad_request('tags must be a JSON object, like {"projectPath": "/repo"}') from None
        if not isinstance(wanted, dict):
            raise bad_request('tags must be a JSON object, like {"projectPath": "/repo"}')
    wanted = {k: v for k, v in wanted.items() if k not in RESERVED_METADATA and not k.startswith(RESERVED_PREFIXES)}
    threads, _ = await ctx.storage.list_threads(resource_id)
    threads = [
        t
        for t in threads
        if not (meta := t.metadata or {}).get(FORKED_SUBAGENT) and all(meta.get(k) == v for k, v in wanted.items())
    ]
    threads.sort(key=lambda t: t.updated_at, reverse=True)
    if limit:
        threads = threads[:limit]
    active = {thread for _, _, thread in await _active_sessions(ctx, controller_id, resource_id)}
    shown = []
    for t in threads:
        entry: dict[str, Any] = {"id": t.id, "title": t.title or "", "updatedAt": t.updated_at.isoformat()}
        if found := _tags(t):
            entry["tags"] = found
        shown.append(entry | {"state": "active" if t.id in active else "idle"})
    return {"threads": shown}


@router.post("/{controller_id}/sessions/{resource_id}/threads")
async def create_thread(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: NewThreadBody, scope: Scope = None
) -> dict[str, Any]:
    """A new thread, which the session switches to."""
    return await _changed(ctx, controller_id, resource_id, scope, lambda s: s.thread.create(body.title))


@router.post("/{controller_id}/sessions/{resource_id}/threads/clone")
async def clone_thread(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: CloneBody, scope: Scope = None
) -> dict[str, Any]:
    """A copy of a thread (default: the current one) with its messages, which the session switches to."""
    return await _changed(
        ctx, controller_id, resource_id, scope, lambda s: s.thread.clone(body.source_thread_id, body.title)
    )


@router.put("/{controller_id}/sessions/{resource_id}/threads/{thread_id}")
async def rename_thread(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, thread_id: ThreadId, body: RenameBody, scope: Scope = None
) -> dict[str, Any]:
    """Rename one of the resource's threads (the session stays on its own thread, unlike Mastra's)."""
    await _changed(ctx, controller_id, resource_id, scope, lambda s: s.thread.rename(body.title, thread_id))
    return _ok()


@router.delete("/{controller_id}/sessions/{resource_id}/threads/{thread_id}")
async def delete_thread(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, thread_id: ThreadId, scope: Scope = None
) -> dict[str, Any]:
    await _changed(ctx, controller_id, resource_id, scope, lambda s: s.thread.delete(thread_id))
    return _ok()


@router.get("/{controller_id}/sessions/{resource_id}/threads/{thread_id}/messages")
async def thread_messages(
    ctx: Ctx,
    controller_id: str,
    resource_id: ResourceId,
    thread_id: ThreadId,
    scope: Scope = None,
    limit: Annotated[int | None, Query(ge=0, description="deprecated: the newest N, oldest first")] = None,
    page: Annotated[int | None, Query(ge=0, le=1_000_000)] = None,
    per_page: Annotated[str | None, Query(alias="perPage", description="a number, or false for all")] = None,
    order_by: Annotated[str | None, Query(alias="orderBy", description='JSON: {"field", "direction"}')] = None,
    filter: Annotated[str | None, Query(description='JSON: {"dateRange": {...}, "roles": [...]}')] = None,
    include: Annotated[str | None, Query(description="JSON: [{id, withPreviousMessages?, ...}]")] = None,
) -> dict[str, Any]:
    """A thread's messages from storage: `?limit=N` (the newest N, oldest first), or a page (`page`, `perPage`
    (default 40, `false`: all), `orderBy` (default newest first), `filter`, `include`)."""
    _definition(ctx, controller_id)
    if limit is not None:
        paged = (("perPage", per_page), ("orderBy", order_by), ("include", include), ("filter", filter))
        given = [name for name, value in paged if value]
        if given:
            raise bad_request(f"limit cannot be combined with {given[0]}; use perPage instead")
    if await _owned_thread(ctx, thread_id, resource_id) is None:
        raise not_found("Thread not found")
    messages, _ = await ctx.storage.list_messages(thread_id)
    page = page or 0
    if limit is not None:
        newest = messages[::-1][page * limit : (page + 1) * limit]
        return {
            "messages": [message_json(m) for m in reversed(newest)],
            "total": len(messages),
            "page": page,
            "perPage": limit,
            "hasMore": (page + 1) * limit < len(messages),
        }
    size = _per_page(per_page)
    descending = _descending(order_by)
    chosen = _filtered(messages, filter)
    ordered = chosen[::-1] if descending else chosen
    shown = ordered if size is False else ordered[page * size : (page + 1) * size]
    extra = _included(messages, include, {m.id for m in shown})
    if extra:
        shown = sorted([*shown, *extra], key=lambda m: messages.index(m), reverse=descending)
    return {
        "messages": [message_json(m) for m in shown],
        "total": len(chosen),
        "page": page,
        "perPage": size,
        "hasMore": size is not False and (page + 1) * size < len(chosen),
    }


def _json_query(name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise bad_request(f"{name} must be JSON") from None


def _per_page(raw: str | None) -> int | Literal[False]:
    if raw is None:
        return DEFAULT_PER_PAGE
    if raw == "false":
        return False
    if not raw.isdigit():
        raise bad_request("perPage must be a number of messages, or false for all")
    return int(raw)


def _descending(raw: str | None) -> bool:
    if not raw:
        return True
    order = _json_query("orderBy", raw)
    if not isinstance(order, dict) or order.get("field", "createdAt") != "createdAt":
        raise bad_request('orderBy must be {"field": "createdAt", "direction": "ASC" | "DESC"}')
    direction = order.get("direction", "DESC")
    if direction not in ("ASC", "DESC"):
        raise bad_request('orderBy.direction must be "ASC" or "DESC"')
    return bool(direction == "DESC")


def _filtered(messages: list[StoredMessage], raw: str | None) -> list[StoredMessage]:
    if not raw:
        return messages
    chosen = _json_query("filter", raw)
    if not isinstance(chosen, dict):
        raise bad_request("filter must be a JSON object")
    if chosen.get("metadata"):
        raise bad_request("filter.metadata is not supported: Keel's messages carry no metadata")
    roles = chosen.get("roles")
    if roles is not None:
        if not isinstance(roles, list):
            raise bad_request("filter.roles must be a list of roles")
        messages = [m for m in messages if m.role in roles]
    span = chosen.get("dateRange")
    if span is not None:
        if not isinstance(span, dict):
            raise bad_request("filter.dateRange must be {start?, end?, startExclusive?, endExclusive?}")
        start, end = _date(span.get("start"), "start"), _date(span.get("end"), "end")
        if start is not None:
            exclusive = span.get("startExclusive") is True
            messages = [m for m in messages if m.created_at > start or (not exclusive and m.created_at == start)]
        if end is not None:
            exclusive = span.get("endExclusive") is True
            messages = [m for m in messages if m.created_at < end or (not exclusive and m.created_at == end)]
    return messages


def _date(value: Any, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(f"filter.dateRange.{name} must be a date (ISO 8601)") from None
    try:
        return in_utc(parsed)
    except ValueError as err:
        raise bad_request(f"filter.dateRange.{name} {err}") from None


def _included(messages: list[StoredMessage], raw: str | None, shown: set[str]) -> list[StoredMessage]:
    """Messages `include` asks for (with their neighbours) that the page does not have."""
    if not raw:
        return []
    wanted = _json_query("include", raw)
    if not isinstance(wanted, list) or not all(isinstance(w, dict) and isinstance(w.get("id"), str) for w in wanted):
        raise bad_request("include must be a list of {id, withPreviousMessages?, withNextMessages?}")
    extra: dict[str, StoredMessage] = {}
    index = {m.id: i for i, m in enumerate(messages)}
    for w in wanted:
        at = index.get(w["id"])
        if at is None:
            continue
        before, after = w.get("withPreviousMessages") or 0, w.get("withNextMessages") or 0
        if not isinstance(before, int) or not isinstance(after, int):
            raise bad_request("include's withPreviousMessages and withNextMessages must be numbers")
        for m in messages[max(0, at - before) : at + after + 1]:
            if m.id not in shown:
                extra[m.id] = m
    return list(extra.values())


# --- permissions, goal, resources -----------------------------------------------------------------------------


@router.get("/{controller_id}/sessions/{resource_id}/permissions")
async def get_permissions(ctx: Ctx, controller_id: str, resource_id: ResourceId, scope: Scope = None) -> dict[str, Any]:
    session = _existing(ctx, controller_id, resource_id, scope)
    with _answers(controller_id, resource_id, scope):
        rules = (await session.snapshot()).permissions
    return {
        "categories": dict(rules.categories),
        "tools": dict(rules.tools),
        "grants": {"categories": list(rules.granted_categories), "tools": list(rules.granted_tools)},
    }


@router.put("/{controller_id}/sessions/{resource_id}/permissions/category")
async def set_category_permission(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: CategoryPermissionBody, scope: Scope = None
) -> dict[str, Any]:
    await _changed(
        ctx, controller_id, resource_id, scope, lambda s: s.permissions.set_for_category(body.category, body.policy)
    )
    return _ok()


@router.put("/{controller_id}/sessions/{resource_id}/permissions/tool")
async def set_tool_permission(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: ToolPermissionBody, scope: Scope = None
) -> dict[str, Any]:
    await _changed(
        ctx, controller_id, resource_id, scope, lambda s: s.permissions.set_for_tool(body.tool_name, body.policy)
    )
    return _ok()


@router.get("/{controller_id}/sessions/{resource_id}/goal")
async def get_goal(ctx: Ctx, controller_id: str, resource_id: ResourceId, scope: Scope = None) -> dict[str, Any]:
    session = _existing(ctx, controller_id, resource_id, scope)
    with _answers(controller_id, resource_id, scope):
        return _goal_json(await session.snapshot())


@router.post("/{controller_id}/sessions/{resource_id}/goal")
async def set_goal(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: SetGoalBody, scope: Scope = None
) -> dict[str, Any]:
    """A goal the session's judge checks after each turn (a new one replaces the old)."""

    async def change(s: Session) -> SessionSnapshot:
        await s.goal.set(body.objective, judge_model_id=body.judge_model_id, max_runs=body.max_runs)
        return await s.snapshot()

    return _goal_json(await _changed(ctx, controller_id, resource_id, scope, change))


@router.put("/{controller_id}/sessions/{resource_id}/goal")
async def update_goal(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: UpdateGoalBody, scope: Scope = None
) -> dict[str, Any]:
    """Change the goal's judge, budget or status: 404 if the session has no goal (Mastra answers `{}`)."""

    async def change(s: Session) -> SessionSnapshot:
        if (await s.snapshot()).goal is None:
            raise not_found("The session has no goal to update: set one first (POST .../goal)")
        await s.goal.update(judge_model_id=body.judge_model_id, max_runs=body.max_runs, status=body.status)
        return await s.snapshot()

    return _goal_json(await _changed(ctx, controller_id, resource_id, scope, change))


@router.delete("/{controller_id}/sessions/{resource_id}/goal")
async def clear_goal(ctx: Ctx, controller_id: str, resource_id: ResourceId, scope: Scope = None) -> dict[str, Any]:
    await _changed(ctx, controller_id, resource_id, scope, lambda s: s.goal.clear())
    return _ok()


@router.get("/{controller_id}/sessions/{resource_id}/resources")
async def resource_ids(ctx: Ctx, controller_id: str, resource_id: ResourceId, scope: Scope = None) -> dict[str, Any]:
    """This resource, if it has a session or threads: a session only ever works on its own resource (Mastra lists
    every resource in storage, anyone's)."""
    session = _existing(ctx, controller_id, resource_id, scope)
    _, threads = await ctx.storage.list_threads(resource_id, limit=1)
    known = threads > 0
    if not known:
        with contextlib.suppress(KeelClientError):
            await session.snapshot()
            known = True
    return {"resourceIds": [resource_id] if known else []}


@router.post("/{controller_id}/sessions/{resource_id}/resource")
async def set_resource_id(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: ResourceBody, scope: Scope = None
) -> dict[str, Any]:
    """Refused (409) unless the resource is the session's own: a durable session is keyed by its resource."""
    _definition(ctx, controller_id)
    if body.new_resource_id == resource_id:
        return _ok()
    raise ApiError(409, NOT_REKEYED.format(cid=controller_id, new=body.new_resource_id))


@router.get("/{controller_id}/sessions/{resource_id}/om")
async def om_record(ctx: Ctx, controller_id: str, resource_id: ResourceId, scope: Scope = None) -> dict[str, Any]:
    _definition(ctx, controller_id)
    raise ApiError(501, "Observational memory is not implemented in Keel", OM_MISSING)


@router.post("/{controller_id}/sessions/{resource_id}/notifications")
async def send_notification(
    ctx: Ctx, controller_id: str, resource_id: ResourceId, body: NotificationBody, scope: Scope = None
) -> dict[str, Any]:
    """Delivered as a follow-up message: a turn now if the session is idle, else after the running one."""
    priority = f", {body.priority} priority" if body.priority else ""
    text = f"[Notification from {body.source}: {body.kind}{priority}]\n{body.summary}"
    if body.payload is not None:
        text += "\n" + json.dumps(body.payload, ensure_ascii=False, default=str)
    accepted = await _changed(ctx, controller_id, resource_id, scope, lambda s: s.follow_up(text))
    return {
        "accepted": True,
        "notificationId": f"notification-{uuid.uuid4()}",
        "decision": "queued" if accepted.queued else "wake",
        "runId": accepted.run_id,
    }


# --- channels -------------------------------------------------------------------------------------------------

_starting: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


@channels_router.post("/{controller_id}/channels/{platform}/webhook")
async def channel_webhook(
    ctx: Ctx,
    controller_id: str,
    platform: Annotated[str, Path(min_length=1, max_length=64)],
    body: Annotated[dict[str, Any], Body(description="the platform's event; generic: {threadId, text, userId?}")],
) -> dict[str, Any]:
    """A chat message from a platform. The chat thread is the session's scope, the resource id
    `Channels.resolve_resource_id(message, default)` (default `channel:<platform>:<threadId>`); a new session
    first gets `on_session_start(session, message)` (awaited; errors logged, not raised). On a platform not in
    `Channels.can_approve` nobody can answer an approval, so its sessions run in yolo (the session's permission
    rules still apply: a tool `deny` still refuses the call). A message while a tool call is suspended (an
    `ask_user` question, a plan to review) answers it; any other is sent to the session."""
    definition = _definition(ctx, controller_id)
    channels = definition.channels
    if channels is None:
        raise not_found(f"Agent controller {controller_id!r} has no channels: configure Channels(...) on it")
    message = await _channel_message(channels, platform, body)
    if message is None:
        return {"ok": True, "ignored": True}
    default = f"channel:{platform}:{message.thread_id}"
    resource_id = default
    if channels.resolve_resource_id is not None:
        resolved = channels.resolve_resource_id(message, default)
        resource_id = str(await resolved if inspect.isawaitable(resolved) else resolved)
    if not re.match(ID_PATTERN, resource_id) or len(resource_id) > MAX_ID:
        raise bad_request(f"This message's resource id is not one a session can have: {resource_id[:80]!r}")
    scope = message.thread_id
    key = f"{controller_id}\x00{resource_id}\x00{scope}"
    lock = _starting.get(key)
    if lock is None:
        lock = _starting[key] = asyncio.Lock()
    async with lock:  # one on_session_start per new session (in this process)
        session, new = await _opened(ctx, controller_id, resource_id, scope)
        if new and channels.on_session_start is not None:
            try:
                started = channels.on_session_start(session, message)
                if inspect.isawaitable(started):
                    await started
            except Exception:
                log.exception("on_session_start of %s failed (the message is delivered all the same)", session.id)
    with _answers(controller_id, resource_id, scope):
        snapshot = await session.snapshot()
        if platform not in channels.can_approve and not snapshot.permissions.yolo:
            await session.state.set({"yolo": True})
        answered = await _answer_suspension(session, snapshot, message.text)
        if answered is not None:
            return _ok(resourceId=resource_id, sessionId=session.id, runId=answered.run_id, answered=answered.call)
        accepted = await session.send_message(message.text, wait=False)
    return _ok(resourceId=resource_id, sessionId=session.id, runId=accepted.run_id, newSession=new or None)


class _Answered:
    def __init__(self, call: str, run_id: str | None) -> None:
        self.call, self.run_id = call, run_id


async def _answer_suspension(session: Session, snapshot: SessionSnapshot, text: str) -> _Answered | None:
    """A chat reply to the suspended call it answers (the first): `ask_user` gets the text, `submit_plan` an
    approval ("yes", "approve", ...) or a rejection with the text as feedback. None if nothing is suspended or
    the text does not fit the call's resume schema (the text then goes to the session as a message)."""
    waiting = [p for p in snapshot.pending if p.kind == "suspension"]
    if not waiting:
        return None
    item = waiting[0]
    data: Any = text
    if item.tool_name == "submit_plan":
        approved = text.strip().lower().rstrip(".!") in PLAN_APPROVALS
        data = {"action": "approved"} if approved else {"action": "rejected", "feedback": text}
    try:
        accepted = await session.respond_to_tool_suspension(item.tool_call_id, data)
    except SessionError as err:
        log.info("A chat message did not answer %s (%s): sent as a message", item.tool_call_id, err)
        return None
    return _Answered(item.tool_call_id, accepted.run_id)


async def _channel_message(channels: Channels, platform: str, body: dict[str, Any]) -> ChannelMessage | None:
    """The platform's adapter reads the message: a callable, or an object with `parse`, taking the JSON body and
    returning a `ChannelMessage` (or None: an event that is not a message). `generic` reads
    `{threadId, text, userId?, isDm?}`."""
    adapter = channels.adapters.get(platform)
    if adapter is None:
        if platform != GENERIC:
            known = ", ".join(sorted({GENERIC, *channels.adapters}))
            raise not_found(f"No channel adapter for platform {platform!r} (known: {known})")
        try:
            given = GenericChannelBody.model_validate(body)
        except ValidationError as err:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in err.errors()]) from None
        return ChannelMessage(
            platform=platform,
            thread_id=given.thread_id,
            text=given.text,
            user_id=given.user_id,
            is_dm=given.is_dm,
            raw=body,
        )
    parse = adapter if callable(adapter) else getattr(adapter, "parse", None)
    if parse is None:
        raise TypeError(f"The channel adapter for {platform!r} is neither callable nor has a parse method")
    try:
        found = parse(body)
        if inspect.isawaitable(found):
            found = await found
    except (ValueError, KeyError, TypeError) as err:
        raise bad_request(f"The {platform} adapter could not read this event: {err}") from None
    if found is not None and not isinstance(found, ChannelMessage):
        raise TypeError(f"The channel adapter for {platform!r} returned {type(found).__name__}, not a ChannelMessage")
    if found is not None and (not found.thread_id or not found.text.strip()):
        raise bad_request("A channel message needs a thread id and text")
    return found


__all__ = ["channels_router", "router"]
