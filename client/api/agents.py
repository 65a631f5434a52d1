"""`/api/agents`: list and describe agents, run them (generate, stream), decide their tool calls, run their tools.

A run started here is an `AgentRun` like any other (the `temporal` CLI sees it, approves it, and this API
serves runs the CLI started); its stream is the run's event log from an offset."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import Field, model_validator

from keel.app import Agent, UnknownAgent, UnknownTool
from keel.app.agent_tools import agent_tool, agent_tools
from keel.client.api.bodies import Lenient
from keel.client.api.context import Ctx, QueryContext
from keel.client.api.errors import ApiError, bad_request, not_found
from keel.client.api.shapes import agent_details, full_output, suspended_output, tool_details
from keel.client.api.streams import agent_chunks, log_end, sse, thread_chunks
from keel.client.errors import RunFailed, RunNotFound
from keel.client.run_events import read
from keel.client.visibility import quoted
from keel.protocol import (
    Content,
    EventRecord,
    Part,
    StartChunk,
    StartPayload,
    TextPart,
    ToolCallApprovalChunk,
    ToolCallPart,
    ToolCallPayload,
    ToolResultPart,
    names,
    parse_chunk,
)
from keel.storage import Storage
from keel.workflows.contracts import IfActive, PendingToolCall

router = APIRouter(prefix="/agents", tags=["agents"])


class MemoryOption(Lenient):
    thread: str | dict[str, Any] | None = None
    resource: str | None = None


class RunBody(Lenient):
    messages: str | list[dict[str, Any]]
    memory: MemoryOption | None = None
    thread_id: str | None = Field(None, alias="threadId", min_length=1)
    resource_id: str | None = Field(None, alias="resourceId", min_length=1)
    run_id: str | None = Field(None, alias="runId", min_length=1)
    max_steps: int | None = Field(None, alias="maxSteps", ge=1, le=1000)
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")


class ToolCallDecision(Lenient):
    run_id: str = Field(alias="runId", min_length=1)
    tool_call_id: str = Field(alias="toolCallId", min_length=1)
    reason: str | None = None
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")


class ResumeData(Lenient):
    approved: bool
    reason: str | None = None


class ResumeBody(Lenient):
    run_id: str = Field(alias="runId", min_length=1)
    resume_data: ResumeData = Field(alias="resumeData")
    tool_call_id: str | None = Field(None, alias="toolCallId", min_length=1)


class ThreadApproval(Lenient):
    resource_id: str = Field(alias="resourceId", min_length=1)
    thread_id: str = Field(alias="threadId", min_length=1)
    tool_call_id: str = Field(alias="toolCallId", min_length=1)
    approved: bool
    reason: str | None = None


class ObserveBody(Lenient):
    run_id: str = Field(alias="runId", min_length=1)
    offset: int = Field(0, ge=0)


class IfActiveOption(Lenient):
    behavior: Literal["deliver", "persist", "discard"] = "deliver"


class IfIdleOption(Lenient):
    behavior: Literal["wake", "persist", "discard"] = "wake"
    stream_options: dict[str, Any] | None = Field(None, alias="streamOptions")


class DeliveryTarget(Lenient):
    """Where a message or signal goes: into one run (`runId`), or to a thread, with what to do if it is active
    or idle."""

    run_id: str | None = Field(None, alias="runId", min_length=1)
    resource_id: str | None = Field(None, alias="resourceId", min_length=1)
    thread_id: str | None = Field(None, alias="threadId", min_length=1)
    if_active: IfActiveOption | None = Field(None, alias="ifActive")
    if_idle: IfIdleOption | None = Field(None, alias="ifIdle")

    @model_validator(mode="after")
    def _has_a_target(self) -> DeliveryTarget:
        """Mastra's body schema: a `runId`, or both `resourceId` and `threadId` (its zod union refuses the rest
        as an invalid body)."""
        if self.run_id is None and not (self.resource_id and self.thread_id):
            raise ValueError("resourceId and threadId are required when runId is not given")
        return self


class MessageBody(DeliveryTarget):
    message: str | list[dict[str, Any]] | dict[str, Any]


class Signal(Lenient):
    contents: str | list[dict[str, Any]]
    type: Literal["user", "user-message", "system-reminder", "reactive", "state", "notification"]
    tag_name: str | None = Field(None, alias="tagName", pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    id: str | None = Field(None, min_length=1)
    attributes: dict[str, str | int | float | bool | None] | None = None


class SignalBody(DeliveryTarget):
    signal: Signal


class SubscribeBody(Lenient):
    resource_id: str = Field(alias="resourceId", min_length=1)
    thread_id: str = Field(alias="threadId", min_length=1)
    offset: int = Field(0, ge=0)


class ExecuteBody(Lenient):
    data: dict[str, Any] = Field(default_factory=dict)
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")


def _agent(ctx: Ctx, agent_id: str) -> Agent:
    try:
        return ctx.app.agent(agent_id)
    except UnknownAgent:
        raise not_found(f"Agent with id {agent_id} not found") from None


def _messages(messages: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Mastra's messages as `AgentRun` takes them: role and content (a string or parts) only."""
    if isinstance(messages, str):
        return messages
    return [{"role": m.get("role", "user"), "content": m.get("content", "")} for m in messages]


async def _start(ctx: Ctx, agent_id: str, body: RunBody) -> str:
    _agent(ctx, agent_id)
    thread, resource = body.thread_id, body.resource_id
    if body.memory is not None:
        given = body.memory.thread
        thread = (given.get("id") if isinstance(given, dict) else given) or thread
        resource = body.memory.resource or resource
    return await ctx.keel.start_run(
        agent_id,
        _messages(body.messages),
        run_id=body.run_id,
        thread_id=thread,
        resource_id=resource,
        max_steps=body.max_steps,
        request_context=body.request_context,
    )


async def _settle(ctx: Ctx, agent: Agent, run_id: str, offset: int = 0) -> dict[str, Any]:
    """Wait until the run finishes or waits for approval; Mastra's generate answer then."""
    text: list[str] = []
    approvals: list[ToolCallApprovalChunk] = []
    async for chunk in agent_chunks(ctx.keel, ctx.storage, run_id, offset):
        if chunk["type"] == "text-delta":
            text.append(str(chunk["payload"].get("text", "")))
        elif chunk["type"] == "tool-call-approval":
            parsed = parse_chunk(run_id, _record(chunk))
            if isinstance(parsed, ToolCallApprovalChunk):
                approvals.append(parsed)
    if approvals:
        # One approval: the call the run just suspended on (no query, which would cost the worker a task).
        # Several: some may be decided already, and the run says which are not.
        pending: Sequence[ToolCallPayload | PendingToolCall] = (
            [approvals[0].payload] if len(approvals) == 1 else await ctx.keel.pending_tool_calls(run_id)
        )
        out = suspended_output(run_id, agent.model.model_id, "".join(text), pending, approvals)
        used = await _usage_so_far(ctx.storage, run_id)  # the whole run's, as a finished run's answer says
        return out | ({"usage": used, "totalUsage": used} if used else {})
    try:
        result = await ctx.keel.result(run_id)
    except RunFailed as err:  # the run's outcome, not the caller's mistake nor ours: 200, no client retry
        out = suspended_output(run_id, agent.model.model_id, "".join(text), [], [])
        return out | {"finishReason": "error", "error": {"message": str(err), "status": err.status}}
    return full_output(run_id, agent.model.model_id, result)


async def _usage_so_far(storage: Storage, run_id: str) -> dict[str, int]:
    """What the run's steps so far used (their `step-finish`): a run waiting for an approval reports it as the
    trace and the metrics count it (it answered 0; the stream stops at the approval, before its step's
    `step-finish`)."""
    used: dict[str, int] = {}
    for shown in await read(storage, run_id):
        if shown.event.type == "step-finish":
            for key, value in ((shown.event.payload.get("output") or {}).get("usage") or {}).items():
                if isinstance(value, int):
                    used[key] = used.get(key, 0) + value
    return used


def _record(chunk: dict[str, Any]) -> EventRecord:
    return EventRecord(type=chunk["type"], payload=chunk["payload"])


@router.get("")
async def list_agents(ctx: Ctx, request_context: QueryContext, partial: bool = False) -> dict[str, Any]:
    return {a.id: await agent_details(ctx.app, a, request_context, partial=partial) for a in ctx.app.agents.values()}


@router.get("/{agent_id}")
async def get_agent(
    ctx: Ctx,
    agent_id: str,
    request_context: QueryContext,
    status: Literal["draft", "published"] | None = None,
    version_id: Annotated[str | None, Query(alias="versionId")] = None,
) -> dict[str, Any]:
    """Code agents have one version: `status` and `versionId` are accepted and change nothing."""
    return await agent_details(ctx.app, _agent(ctx, agent_id), request_context)


@router.get("/{agent_id}/tools")
async def list_agent_tools(ctx: Ctx, agent_id: str, request_context: QueryContext) -> dict[str, Any]:
    return {t.id: tool_details(t) for t in await agent_tools(ctx.app, _agent(ctx, agent_id), request_context)}


@router.get("/{agent_id}/tools/{tool_id}")
async def get_agent_tool(ctx: Ctx, agent_id: str, tool_id: str, request_context: QueryContext) -> dict[str, Any]:
    try:
        return tool_details(await agent_tool(ctx.app, _agent(ctx, agent_id), tool_id, request_context))
    except UnknownTool:
        raise not_found("Tool not found") from None


@router.post("/{agent_id}/tools/{tool_id}/execute")
async def execute_agent_tool(ctx: Ctx, agent_id: str, tool_id: str, body: ExecuteBody) -> Any:
    """On a worker, as `keel tool` runs it (a standalone activity): never in the API process."""
    try:
        await agent_tool(ctx.app, _agent(ctx, agent_id), tool_id, body.request_context)
    except UnknownTool:
        raise not_found("Tool not found") from None
    result = await ctx.keel.execute_tool(agent_id, tool_id, body.data, request_context=body.request_context)
    return result.result


@router.post("/{agent_id}/generate")
async def generate(ctx: Ctx, agent_id: str, body: RunBody) -> dict[str, Any]:
    run_id = await _start(ctx, agent_id, body)
    return await _settle(ctx, _agent(ctx, agent_id), run_id)


@router.post("/{agent_id}/stream")
async def stream(ctx: Ctx, agent_id: str, body: RunBody) -> StreamingResponse:
    """The run's chunks as it goes. Its `start` chunk is sent once Temporal has accepted the run (it is then
    durable: it runs whatever becomes of this request); the same chunk in the log is not sent again."""
    run_id = await _start(ctx, agent_id, body)
    given = _messages(body.messages)
    first_answer = names.run_message_id(run_id, (1 if isinstance(given, str) else len(given)) + 1)
    start = StartChunk(run_id=run_id, payload=StartPayload(id=agent_id, run_id=run_id, message_id=first_answer))
    return sse(
        agent_chunks(
            ctx.keel, ctx.storage, run_id, start=start.model_dump(mode="json", by_alias=True, exclude_none=True)
        )
    )


@router.post("/{agent_id}/observe")
async def observe(ctx: Ctx, agent_id: str, body: ObserveBody) -> StreamingResponse:
    """The run's chunks after the first `offset` (a client that lost its stream reconnects with the number of
    chunks it has, and gets each of the rest once)."""
    _agent(ctx, agent_id)
    await ctx.keel.describe(body.run_id)  # 404 for an unknown run
    return sse(agent_chunks(ctx.keel, ctx.storage, body.run_id, skip=body.offset))


@router.post("/{agent_id}/threads/subscribe")
async def subscribe_to_thread(ctx: Ctx, agent_id: str, body: SubscribeBody) -> StreamingResponse:
    """Every chunk of the agent's runs on the thread, and of each run that starts on it later (a send-message
    that wakes the thread, say): a stream that lasts until the client leaves. `offset`: how many chunks of the
    subscription the client already has."""
    _agent(ctx, agent_id)
    chunks = thread_chunks(ctx.keel, ctx.storage, agent_id, body.thread_id, skip=body.offset)
    return sse(chunks, keep_alive=15)


async def _decide(ctx: Ctx, run_id: str, tool_call_id: str, approved: bool, reason: str | None) -> int:
    """Apply the decision (the validated `approve_tool_call` update); the log offset from which what follows
    it is streamed."""
    offset = await log_end(ctx.storage, run_id)
    await ctx.keel.approve(run_id, tool_call_id, approved=approved, reason=reason)
    return offset


@router.post("/{agent_id}/approve-tool-call")
async def approve_tool_call(ctx: Ctx, agent_id: str, body: ToolCallDecision) -> StreamingResponse:
    _agent(ctx, agent_id)
    offset = await _decide(ctx, body.run_id, body.tool_call_id, True, None)
    return sse(agent_chunks(ctx.keel, ctx.storage, body.run_id, offset))


@router.post("/{agent_id}/decline-tool-call")
async def decline_tool_call(ctx: Ctx, agent_id: str, body: ToolCallDecision) -> StreamingResponse:
    _agent(ctx, agent_id)
    offset = await _decide(ctx, body.run_id, body.tool_call_id, False, body.reason)
    return sse(agent_chunks(ctx.keel, ctx.storage, body.run_id, offset))


@router.post("/{agent_id}/approve-tool-call-generate")
async def approve_tool_call_generate(ctx: Ctx, agent_id: str, body: ToolCallDecision) -> dict[str, Any]:
    agent = _agent(ctx, agent_id)
    offset = await _decide(ctx, body.run_id, body.tool_call_id, True, None)
    return await _settle(ctx, agent, body.run_id, offset)


@router.post("/{agent_id}/decline-tool-call-generate")
async def decline_tool_call_generate(ctx: Ctx, agent_id: str, body: ToolCallDecision) -> dict[str, Any]:
    agent = _agent(ctx, agent_id)
    offset = await _decide(ctx, body.run_id, body.tool_call_id, False, body.reason)
    return await _settle(ctx, agent, body.run_id, offset)


@router.post("/{agent_id}/resume-stream")
async def resume_stream(ctx: Ctx, agent_id: str, body: ResumeBody) -> StreamingResponse:
    """Resume a run waiting for an approval with `{approved, reason?}` (the approval's resume schema)."""
    _agent(ctx, agent_id)
    tool_call_id = body.tool_call_id
    if tool_call_id is None:
        pending = await ctx.keel.pending_tool_calls(body.run_id)
        if not pending:
            raise ApiError(409, f"Run {body.run_id} is not waiting for a tool approval")
        tool_call_id = pending[0].tool_call_id
    offset = await _decide(ctx, body.run_id, tool_call_id, body.resume_data.approved, body.resume_data.reason)
    return sse(agent_chunks(ctx.keel, ctx.storage, body.run_id, offset))


@router.post("/{agent_id}/send-tool-approval")
async def send_tool_approval(ctx: Ctx, agent_id: str, body: ThreadApproval) -> dict[str, Any]:
    """Decide a call of the thread's suspended run by the `tool_approval` signal; the rest arrives on the
    thread's subscription."""
    _agent(ctx, agent_id)
    run_id = await _suspended_run_of_thread(ctx, agent_id, body.thread_id, body.tool_call_id)
    await ctx.keel.signal_approval(run_id, body.tool_call_id, approved=body.approved, reason=body.reason)
    return {"accepted": True, "runId": run_id, "toolCallId": body.tool_call_id}


def _contents(message: str | list[dict[str, Any]] | dict[str, Any]) -> Content:
    """Mastra's message (a string, text parts, or `{contents, attributes?, ...}`) as a message's content."""
    contents = message.get("contents") if isinstance(message, dict) else message
    if isinstance(contents, str):
        return contents
    if not isinstance(contents, list) or not contents:
        raise bad_request("message must be a string, a list of parts, or {contents}")
    parts: list[Part] = []
    for part in contents:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise bad_request("Only text parts are supported in a message ({type: 'text', text})")
        parts.append(TextPart(text=part["text"]))
    return parts


# Mastra's signal types, with the type and tag each stands for (a user message, or a reminder the model reads).
_SIGNAL_KINDS: dict[str, tuple[str, str]] = {
    "user": ("user", "user"),
    "user-message": ("user", "user"),
    "system-reminder": ("reactive", "system-reminder"),
    "reactive": ("reactive", "system-reminder"),
    "state": ("state", "state"),
    "notification": ("notification", "notification"),
}
_XML_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def _escape(text: str, *, attribute: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace('"', "&quot;") if attribute else text


def _signal_content(signal: Signal, tag: str) -> Content:
    """A user signal is the message itself; any other is shown to the model as `<tag attrs>contents</tag>`, as
    Mastra renders it."""
    content = _contents(signal.contents)
    if _SIGNAL_KINDS[signal.type][0] == "user":
        return content
    text = content if isinstance(content, str) else "".join(part.text for part in content if isinstance(part, TextPart))
    attributes = ""
    for key, value in (signal.attributes or {}).items():
        if value is None:
            continue
        if not _XML_NAME.match(key):
            raise bad_request(f"Invalid signal XML attribute name: {key}")
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        attributes += f' {key}="{_escape(shown, attribute=True)}"'
    return f"<{tag}{attributes}>{_escape(text)}</{tag}>" if text else f"<{tag}{attributes} />"


async def _send(
    ctx: Ctx,
    agent_id: str,
    body: DeliveryTarget,
    content: Content,
    *,
    queue: bool,
    message_id: str,
) -> str | None:
    """The run the message went into (or woke, or waits for); None when it was discarded or persisted."""
    _agent(ctx, agent_id)
    if body.run_id is not None:  # to one run: delivered into it (it must be running)
        await ctx.keel.deliver(body.run_id, content, message_id=message_id)
        return body.run_id
    if not body.thread_id or not body.resource_id:
        raise bad_request("resourceId and threadId are required when runId is not given")
    if_active: IfActive = "queue" if queue else (body.if_active.behavior if body.if_active else "deliver")
    if queue and body.if_active is not None and body.if_active.behavior != "deliver":
        if_active = body.if_active.behavior
    options = body.if_idle.stream_options if body.if_idle and body.if_idle.stream_options else {}
    sent = await ctx.keel.send_message(
        agent_id,
        body.thread_id,
        body.resource_id,
        content,
        if_active=if_active,
        if_idle=body.if_idle.behavior if body.if_idle else "wake",
        message_id=message_id,
        max_steps=options.get("maxSteps"),
        request_context=options.get("requestContext"),
    )
    return sent.run_id if sent.outcome in ("delivered", "queued", "woke") else None


def _accepted(run_id: str, signal: dict[str, Any]) -> dict[str, Any]:
    """Mastra's answer to a message or signal it took: `accepted` is always true (what it refuses is an error), and
    `runId` the run it went into or woke, else (discarded or persisted on an idle thread) the signal's own id."""
    return {"accepted": True, "runId": run_id, "signal": signal}


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


async def _send_message(ctx: Ctx, agent_id: str, body: MessageBody, *, queue: bool) -> dict[str, Any]:
    message_id = str(uuid.uuid4())
    run_id = await _send(ctx, agent_id, body, _contents(body.message), queue=queue, message_id=message_id)
    now = _now()
    signal = {
        "contents": body.message.get("contents") if isinstance(body.message, dict) else body.message,
        "type": "user",
        "tagName": "user",
        "id": message_id,
        "acceptedAt": now,
        "createdAt": now,
        "__isCreatedSignal": True,
    }
    return _accepted(run_id or message_id, signal)


@router.post("/{agent_id}/send-message")
async def send_message(ctx: Ctx, agent_id: str, body: MessageBody) -> dict[str, Any]:
    """Into the thread's active run (`ifActive`: deliver | persist | discard), or waking one (`ifIdle`: wake |
    persist | discard); through the thread's `AgentThread` entity, so concurrent senders are ordered."""
    return await _send_message(ctx, agent_id, body, queue=False)


@router.post("/{agent_id}/queue-message")
async def queue_message(ctx: Ctx, agent_id: str, body: MessageBody) -> dict[str, Any]:
    """For the thread's next turn: a run starts with the queued messages once the active one ends (at once if
    the thread is idle)."""
    return await _send_message(ctx, agent_id, body, queue=True)


@router.post("/{agent_id}/signals")
async def send_signal(ctx: Ctx, agent_id: str, body: SignalBody) -> dict[str, Any]:
    """A signal into a run or a thread, like send-message: a `user` (or `user-message`) signal is a user message;
    a `system-reminder`, `reactive`, `state` or `notification` signal reaches the model as `<tag>contents</tag>`."""
    kind, default_tag = _SIGNAL_KINDS[body.signal.type]
    tag = body.signal.tag_name or default_tag
    message_id = body.signal.id or str(uuid.uuid4())
    content = _signal_content(body.signal, tag)
    run_id = await _send(ctx, agent_id, body, content, queue=False, message_id=message_id)
    now = _now()
    signal = {
        **body.signal.model_dump(by_alias=True, exclude_none=True),
        "type": kind,
        "tagName": tag,
        "id": message_id,
        "acceptedAt": now,
        "createdAt": now,
        "__isCreatedSignal": True,
    }
    return _accepted(run_id or message_id, signal)


@router.get("/{agent_id}/suspended-runs")
async def suspended_runs(
    ctx: Ctx,
    agent_id: str,
    thread_id: Annotated[str | None, Query(alias="threadId")] = None,
    resource_id: Annotated[str | None, Query(alias="resourceId")] = None,
    page: Annotated[int, Query(ge=0)] = 0,
    per_page: Annotated[int, Query(alias="perPage", ge=1, le=100)] = 20,
) -> dict[str, Any]:
    """The agent's runs waiting for a tool approval (started anywhere: here, the CLI, `temporal`)."""
    _agent(ctx, agent_id)
    clauses = [
        f"KeelKind='agent' AND KeelAgentId='{quoted(agent_id)}'",
        "KeelStatus='suspended' AND ExecutionStatus='Running'",
    ]
    if thread_id is not None:
        clauses.append(f"KeelThreadId='{quoted(thread_id)}'")
    if resource_id is not None:
        clauses.append(f"KeelResourceId='{quoted(resource_id)}'")
    query = " AND ".join(clauses)
    total = (await ctx.keel.temporal.count_workflows(query)).count
    runs = []
    index = 0
    async for execution in ctx.keel.temporal.list_workflows(query, limit=(page + 1) * per_page):
        index += 1
        if index <= page * per_page:
            continue
        attributes = {p.key.name: p.value for p in execution.typed_search_attributes}
        pending = await ctx.keel.pending_tool_calls(execution.id)
        runs.append(
            {
                "runId": execution.id,
                "status": "suspended",
                "threadId": attributes.get("KeelThreadId"),
                "resourceId": attributes.get("KeelResourceId"),
                "suspendedAt": execution.start_time.isoformat() if execution.start_time else None,
                "toolCalls": [
                    {"toolCallId": p.tool_call_id, "toolName": p.tool_name, "args": p.args, "requiresApproval": True}
                    for p in pending
                ],
            }
        )
    return {"runs": runs, "total": total}


async def _suspended_run_of_thread(ctx: Ctx, agent_id: str, thread_id: str, tool_call_id: str) -> str:
    """The agent's open run of the thread whose pending calls include `tool_call_id` (its `pending_tool_calls`
    query decides).

    The runs to ask come from the thread's newest messages: a model step stores its answer, the call's assistant
    message, before its run waits on the call, so storage names the run as soon as a client can know the call's
    id, and a call that no message holds (or that has its result stored) gets its 404 at once. A run named there
    may not list the call yet (its step has stored the answer but not yet returned to the run: a client approving
    from the stream can be that quick), so it is asked again for a few seconds. Visibility, whose index may lag a
    run that has just suspended, is searched (for a few seconds too) only for a call older than the messages
    read."""
    runs = await _runs_calling(ctx.storage, thread_id, tool_call_id)
    if runs is None:
        return await _visible_suspended_run(ctx, agent_id, thread_id, tool_call_id)
    waiting = []
    for run_id in runs:
        try:
            info = await ctx.keel.describe(run_id)
        except RunNotFound:  # its messages outlived it (a deleted history)
            continue
        if info.agent_id == agent_id and info.closed_at is None:
            waiting.append(run_id)
    for _ in range(SUSPENDED_LOOKUP_TRIES if waiting else 0):
        for run_id in waiting:
            if any(p.tool_call_id == tool_call_id for p in await ctx.keel.pending_tool_calls(run_id)):
                return run_id
        await asyncio.sleep(0.25)
    raise not_found(f"No run of thread {thread_id} waits for tool call {tool_call_id}")


CALLS_SCANNED = 200
"""The newest messages of a thread a decision by thread reads for its call (a run waits on a call of its latest
model step, so a waiting call is among them unless the thread went on by this many messages meanwhile)."""


async def _runs_calling(storage: Storage, thread_id: str, tool_call_id: str) -> list[str] | None:
    """The runs that may wait on `tool_call_id`, newest first: those whose stored assistant messages on the thread
    call it, with no result of theirs stored for it, among its `CALLS_SCANNED` newest messages. None if the
    thread has older messages and none of the newest holds the call.

    Keel makes a call id unique in its thread (`hold-1`, then `hold-1-2`); one repeats only when runs step on
    one thread at once. A call of a long thread's older run hidden by such a repeat among the newest messages is
    not found (a 404)."""
    _, total = await storage.list_messages(thread_id, limit=1)
    offset = max(0, total - CALLS_SCANNED)
    newest, _ = await storage.list_messages(thread_id, offset=offset)  # to the end, whatever came meanwhile
    runs: list[str] = []
    answered: set[str] = set()  # runs that stored a result for the call: decided and run, or declined
    seen = False
    for message in reversed(newest):  # a result is stored after its call
        if message.run_id is None or isinstance(message.content, str):
            continue
        for part in message.content:
            if isinstance(part, ToolResultPart) and part.tool_call_id == tool_call_id:
                answered.add(message.run_id)
            elif isinstance(part, ToolCallPart) and part.tool_call_id == tool_call_id:
                seen = True
                if message.run_id not in answered and message.run_id not in runs:
                    runs.append(message.run_id)
    return None if not seen and offset > 0 else runs


async def _visible_suspended_run(ctx: Ctx, agent_id: str, thread_id: str, tool_call_id: str) -> str:
    """`_suspended_run_of_thread` for a call older than the messages it reads: the thread's open runs of the
    agent, from visibility, tried for a few seconds (its index may lag)."""
    query = (
        f"KeelKind='agent' AND KeelAgentId='{quoted(agent_id)}' AND KeelThreadId='{quoted(thread_id)}' "
        "AND ExecutionStatus='Running'"
    )
    for _ in range(SUSPENDED_LOOKUP_TRIES):
        async for execution in ctx.keel.temporal.list_workflows(query, limit=20):
            pending = await ctx.keel.pending_tool_calls(execution.id)
            if any(p.tool_call_id == tool_call_id for p in pending):
                return execution.id
        await asyncio.sleep(0.25)
    raise not_found(f"No run of thread {thread_id} waits for tool call {tool_call_id}")


SUSPENDED_LOOKUP_TRIES = 20
