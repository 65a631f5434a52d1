"""`/v1/responses`: Mastra's OpenAI-compatible Responses routes, an agent as the model, for the `openai` SDK and
`@mastra/client-js` alike. Create (streamed or not), retrieve and delete.

A response is an `AgentRun`, and its id is the run's id: the run answers in its conversation's thread
(`conversation_id`, or the thread of `previous_response_id`), or in a thread of its own. `agent_id` picks the
agent, as in Mastra; without it, `model` names the agent (the `openai` SDK always sends a model), and otherwise
it may only repeat the agent or its model (a Keel agent runs the model it is defined with). With `store: true`
the response is recorded (`response_records`) and can be retrieved and chained; a run waiting for a tool
approval answers `status: "incomplete"`, and is decided with the agent routes (`runId` = the response id)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import Field

from keel.app import Agent, UnknownAgent
from keel.app.agent_tools import agent_tools
from keel.client.api import response_records
from keel.client.api.bodies import Lenient
from keel.client.api.context import ApiContext, Ctx, QueryContext
from keel.client.api.errors import ApiError, bad_request, not_found
from keel.client.api.response_records import ResponseRecord
from keel.client.api.response_shapes import ResponseStatus, output_items, response_json
from keel.client.api.response_stream import ResponseEvents, sse_frame
from keel.client.api.streams import SSE_HEADERS, agent_chunks, idle_marked
from keel.client.errors import RunFailed, RunNotFound
from keel.protocol import Usage, names

router = APIRouter(prefix="/v1/responses", tags=["responses"])

KEEP_ALIVE_SECONDS = 15.0
"""A comment frame when a stream was quiet this long (a long tool call), so proxies keep it open."""


class InputPart(Lenient):
    type: Literal["input_text", "text", "output_text"]
    text: str


class InputMessage(Lenient):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[InputPart]


class PlainTextFormat(Lenient):
    """The default, sent by many OpenAI clients: accepted (Mastra's schema has only the two JSON formats)."""

    type: Literal["text"]


class JsonObjectFormat(Lenient):
    type: Literal["json_object"]


class JsonSchemaFormat(Lenient):
    type: Literal["json_schema"]
    name: str
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class TextOptions(Lenient):
    format: PlainTextFormat | JsonObjectFormat | JsonSchemaFormat = Field(discriminator="type")


class ConversationRef(Lenient):
    id: str = Field(min_length=1)


class CreateResponseBody(Lenient):
    model: str | None = None
    agent_id: str | None = Field(None, min_length=1)
    input: str | list[InputMessage]
    instructions: str | None = None
    text: TextOptions | None = None
    conversation_id: str | None = Field(None, min_length=1)
    conversation: str | ConversationRef | None = None
    """The `openai` SDK's name for `conversation_id`."""
    stream: bool = False
    store: bool = False
    previous_response_id: str | None = Field(None, min_length=1)
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")


def _messages(body: CreateResponseBody) -> list[dict[str, Any]]:
    """The run's input: `instructions` and a JSON `text` format as system messages first (a run has no
    instructions of its own: the agent's stay, and these are kept in the thread with the turn; Mastra too asks
    for JSON in the prompt for `json_object`), then the input (`developer` is a system message; a message's
    parts are joined into one text, as Mastra does)."""
    out = []
    if body.instructions:
        out.append({"role": "system", "content": body.instructions})
    if body.text is not None and not isinstance(body.text.format, PlainTextFormat):
        wanted = body.text.format
        ask = "Answer with one JSON object and nothing else"
        if isinstance(wanted, JsonSchemaFormat):
            ask += f", matching the JSON Schema {wanted.name!r}: {json.dumps(wanted.schema_)}"
        out.append({"role": "system", "content": ask + "."})
    given = [InputMessage(role="user", content=body.input)] if isinstance(body.input, str) else body.input
    for message in given:
        content = message.content if isinstance(message.content, str) else "".join(p.text for p in message.content)
        out.append({"role": "system" if message.role == "developer" else message.role, "content": content})
    return out


def _conversation(body: CreateResponseBody) -> str | None:
    given = body.conversation.id if isinstance(body.conversation, ConversationRef) else body.conversation
    if given and body.conversation_id and given != body.conversation_id:
        raise bad_request("conversation and conversation_id name different conversations")
    return body.conversation_id or given or None


def _agent(ctx: ApiContext, body: CreateResponseBody, previous: ResponseRecord | None) -> Agent:
    agent_id = body.agent_id or (previous.agent_id if previous else None) or body.model
    if not agent_id:
        raise bad_request("agent_id is required unless previous_response_id is provided (or model names the agent)")
    try:
        agent = ctx.app.agent(agent_id)
    except UnknownAgent:
        raise not_found(f"Agent with id {agent_id} not found") from None
    if previous is not None and previous.agent_id != agent.id:
        raise bad_request(f"Stored response {previous.id} belongs to agent {previous.agent_id}, not {agent.id}")
    if body.model not in (None, agent.id, agent.model.model_id):
        raise bad_request(
            f"Agent {agent.id} runs its own model ({agent.model.model_id}): model may name the agent or that model, "
            f"not {body.model}"
        )
    return agent


async def _previous(ctx: ApiContext, response_id: str) -> ResponseRecord:
    previous = await response_records.find(ctx.storage, response_id)
    if previous is None:
        raise not_found(f"Stored response {response_id} was not found")
    try:
        running = (await ctx.keel.describe(response_id)).status == "running"
    except RunNotFound:
        raise not_found(f"Stored response {response_id} was not found") from None
    if running:  # the next turn would not see its answer
        raise ApiError(409, f"Response {response_id} is still in progress")
    return previous


async def _record(ctx: ApiContext, body: CreateResponseBody) -> ResponseRecord:
    """What the response is asked for, and where it answers: the previous response's thread, the conversation,
    a new thread (`store`), or the run's own thread."""
    previous = await _previous(ctx, body.previous_response_id) if body.previous_response_id else None
    agent = _agent(ctx, body, previous)
    conversation = _conversation(body)
    response_id = f"resp-{uuid.uuid4()}"
    thread_id, resource_id = response_id, None
    if previous is not None:
        if conversation and conversation != previous.thread_id:
            raise bad_request(
                "conversation_id and previous_response_id must reference the same conversation thread when both "
                "are provided"
            )
        conversation, thread_id, resource_id = previous.thread_id, previous.thread_id, previous.resource_id
    elif conversation:
        thread = await ctx.storage.get_thread(conversation)
        if thread is None:
            raise not_found(f"Conversation {conversation} was not found")
        thread_id, resource_id = thread.id, thread.resource_id
    elif body.store:  # a new conversation, as Mastra's: the thread is its own resource
        conversation, resource_id = thread_id, thread_id
        await ctx.storage.create_thread(thread_id, resource_id)
    return ResponseRecord(
        id=response_id,
        agent_id=agent.id,
        model=body.model or agent.model.model_id,
        created_at=int(time.time()),
        thread_id=thread_id,
        resource_id=resource_id,
        conversation_id=conversation,
        instructions=body.instructions,
        text=body.text.model_dump(by_alias=True, exclude_none=True) if body.text else None,
        previous_response_id=body.previous_response_id,
        store=body.store,
        input_messages=len(_messages(body)),
    )


async def _tools(ctx: ApiContext, agent_id: str) -> list[dict[str, Any]]:
    """The agent's tools as Responses function tools (none for an agent the app no longer has)."""
    try:
        agent = ctx.app.agent(agent_id)
    except UnknownAgent:
        return []
    tools = []
    for tool in await agent_tools(ctx.app, agent):
        spec = tool.spec
        tools.append(
            {"type": "function", "name": spec.name, "parameters": spec.parameters}
            | ({"description": spec.description} if spec.description else {})
        )
    return tools


@dataclass(frozen=True)
class Outcome:
    status: ResponseStatus
    usage: Usage | None = None
    completed_at: int | None = None
    error: dict[str, Any] | None = None


async def _outcome(ctx: ApiContext, run_id: str, *, suspended: bool = False) -> Outcome:
    """Where the run stands: working (`in_progress`), waiting for an approval (`incomplete`, as Mastra's
    suspended answer), done, or failed (`failed`, with the run's error)."""
    if suspended:
        return Outcome("incomplete")
    info = await ctx.keel.describe(run_id)
    if info.status in ("running", "suspended"):
        return Outcome("in_progress" if info.status == "running" else "incomplete")
    closed = int(info.closed_at.timestamp()) if info.closed_at else None
    try:
        result = await ctx.keel.result(run_id)
    except RunFailed as err:
        return Outcome("failed", completed_at=closed, error={"code": "server_error", "message": str(err)})
    return Outcome("incomplete" if result.finish_reason == "error" else "completed", result.usage, closed)


async def _response(ctx: ApiContext, record: ResponseRecord, outcome: Outcome) -> dict[str, Any]:
    messages = await ctx.storage.run_messages(record.thread_id, record.id)
    given = {names.run_message_id(record.id, seq) for seq in range(1, (record.input_messages or 0) + 1)}
    messages = [m for m in messages if m.id not in given]  # an assistant message given as input is not output
    return response_json(
        record,
        status=outcome.status,
        output=output_items(messages, outcome.status),
        tools=await _tools(ctx, record.agent_id),
        usage=outcome.usage,
        completed_at=outcome.completed_at,
        error=outcome.error,
    )


async def _start(ctx: ApiContext, body: CreateResponseBody, request_context: dict[str, Any] | None) -> ResponseRecord:
    """Record the response (when stored) before its run starts, so there is never a stored run without it; a
    record whose run never started is not found."""
    record = await _record(ctx, body)
    if body.store:
        await response_records.save(ctx.storage, record)
    await ctx.keel.start_run(
        record.agent_id,
        _messages(body),
        run_id=record.id,
        thread_id=record.thread_id,
        resource_id=record.resource_id,
        request_context=request_context,
    )
    return record


def _stream(ctx: ApiContext, record: ResponseRecord, tools: list[dict[str, Any]]) -> StreamingResponse:
    async def frames() -> AsyncIterator[bytes]:
        events = ResponseEvents()
        created = response_json(record, status="in_progress", output=[], tools=tools)
        yield sse_frame(events.event("response.created", response=created))
        yield sse_frame(events.event("response.in_progress", response=created))
        last = None
        async for chunk in idle_marked(agent_chunks(ctx.keel, ctx.storage, record.id), KEEP_ALIVE_SECONDS):
            if chunk is None:
                yield b": keep-alive\n\n"
                continue
            last = chunk["type"]
            for event in events.of_chunk(chunk):
                yield sse_frame(event)
        outcome = await _outcome(ctx, record.id, suspended=last == "tool-call-approval")
        for event in events.close("completed" if outcome.status == "completed" else "incomplete"):
            yield sse_frame(event)
        final = await _response(ctx, record, outcome)
        kind = "response.failed" if outcome.status == "failed" else "response.completed"
        yield sse_frame(events.event(kind, response=final))

    headers = SSE_HEADERS | {"Content-Type": "text/event-stream; charset=utf-8"}
    return StreamingResponse(frames(), media_type="text/event-stream", headers=headers)


@router.post("", response_model=None)
async def create_response(
    ctx: Ctx, body: CreateResponseBody, request_context: QueryContext
) -> dict[str, Any] | StreamingResponse:
    """Run the agent on the input. Streamed, its events start once Temporal has accepted the run (it then runs
    whatever becomes of this request, and a stored response can be retrieved later). The request context comes
    in the body or, from `@mastra/client-js`, as `?requestContext=`."""
    record = await _start(ctx, body, body.request_context or request_context)
    if body.stream:
        return _stream(ctx, record, await _tools(ctx, record.agent_id))
    last = None
    async for chunk in agent_chunks(ctx.keel, ctx.storage, record.id):
        last = chunk["type"]
    return await _response(ctx, record, await _outcome(ctx, record.id, suspended=last == "tool-call-approval"))


async def _stored(ctx: ApiContext, response_id: str) -> ResponseRecord:
    record = await response_records.find(ctx.storage, response_id)
    if record is None:
        raise not_found(f"Stored response {response_id} was not found")
    return record


@router.get("/{response_id}")
async def get_response(ctx: Ctx, response_id: str) -> dict[str, Any]:
    """A stored response as its run stands now (`in_progress` while it works)."""
    record = await _stored(ctx, response_id)
    try:
        outcome = await _outcome(ctx, response_id)
    except RunNotFound:
        raise not_found(f"Stored response {response_id} was not found") from None
    return await _response(ctx, record, outcome)


@router.delete("/{response_id}")
async def delete_response(ctx: Ctx, response_id: str) -> dict[str, Any]:
    """Forget a stored response and take its turn out of the conversation (its messages); the run stays in
    Temporal's history. A response still working cannot be deleted (409)."""
    record = await _stored(ctx, response_id)
    try:
        running = (await ctx.keel.describe(response_id)).status == "running"
    except RunNotFound:
        running = False
    if running:
        raise ApiError(409, f"Response {response_id} is still in progress")
    messages = await ctx.storage.run_messages(record.thread_id, response_id)
    await ctx.storage.delete_messages([m.id for m in messages])
    await response_records.forget(ctx.storage, response_id)
    return {"id": response_id, "object": "response", "deleted": True}
