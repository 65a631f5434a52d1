"""`/api/memory`: threads and their messages on the storage layer (SQLite or PostgreSQL), in Mastra's shapes.
Messages go out in Mastra's v2 format, `{format: 2, parts, content}`; `agentId` is accepted and not needed
(every agent shares the app's storage)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import Field

from keel.client.api.bodies import IndexedId, Lenient, NonEmptyIndexedId, StoredId, Title, UtcTime
from keel.client.api.context import ApiContext, Ctx
from keel.client.api.errors import bad_request, not_found
from keel.storage import StoredMessage, Thread, ThreadExists

router = APIRouter(prefix="/memory", tags=["memory"])

MAX_PAGE = 1_000_000
"""Pages beyond this are refused (400): page * perPage must fit the storage's 64-bit offsets."""


class CreateThreadBody(Lenient):
    resource_id: NonEmptyIndexedId = Field(alias="resourceId")
    title: Title | None = None
    metadata: dict[str, Any] | None = None
    thread_id: IndexedId | None = Field(None, alias="threadId")


class UpdateThreadBody(Lenient):
    title: Title | None = None
    metadata: dict[str, Any] | None = None
    resource_id: IndexedId | None = Field(None, alias="resourceId")


class MessageFilter(Lenient):
    start_date: UtcTime | None = Field(None, alias="startDate")
    end_date: UtcTime | None = Field(None, alias="endDate")
    message_ids: list[str] | None = Field(None, alias="messageIds")


class CloneOptions(Lenient):
    message_limit: int | None = Field(None, alias="messageLimit", ge=1)
    message_filter: MessageFilter | None = Field(None, alias="messageFilter")


class CloneBody(Lenient):
    new_thread_id: IndexedId | None = Field(None, alias="newThreadId")
    resource_id: IndexedId | None = Field(None, alias="resourceId")
    title: Title | None = None
    metadata: dict[str, Any] | None = None
    options: CloneOptions | None = None


class MessageIn(Lenient):
    id: StoredId | None = None
    role: Literal["user", "assistant", "system", "tool"]
    content: Any
    thread_id: str | None = Field(None, alias="threadId")
    resource_id: str | None = Field(None, alias="resourceId")
    created_at: UtcTime | None = Field(None, alias="createdAt")


class SaveMessagesBody(Lenient):
    messages: list[MessageIn]


class MessageRef(Lenient):
    id: str = Field(min_length=1)


class DeleteMessagesBody(Lenient):
    """`messageIds`: an id, a list of ids, `{id}`, or a list of `{id}` (all of Mastra's forms)."""

    message_ids: str | MessageRef | list[str | MessageRef] = Field(alias="messageIds")


def thread_json(thread: Thread) -> dict[str, Any]:
    return {
        "id": thread.id,
        "resourceId": thread.resource_id,
        "title": thread.title or "",
        "metadata": thread.metadata,
        "createdAt": thread.created_at.isoformat(),
        "updatedAt": thread.updated_at.isoformat(),
    }


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts = []
    for part in content:
        kind = part.type
        if kind == "text":
            parts.append({"type": "text", "text": part.text})
        elif kind == "tool-call":
            invocation = {"state": "call", "toolCallId": part.tool_call_id, "toolName": part.tool_name}
            parts.append({"type": "tool-invocation", "toolInvocation": invocation | {"args": part.args}})
        else:
            invocation = {"state": "result", "toolCallId": part.tool_call_id, "toolName": part.tool_name}
            parts.append({"type": "tool-invocation", "toolInvocation": invocation | {"result": part.result}})
    return parts


def message_json(message: StoredMessage) -> dict[str, Any]:
    text = message.content if isinstance(message.content, str) else None
    content: dict[str, Any] = {"format": 2, "parts": _parts(message.content)}
    if text is not None:
        content["content"] = text
    return {
        "id": message.id,
        "role": message.role,
        "content": content,
        "createdAt": message.created_at.isoformat(),
        "threadId": message.thread_id,
        "resourceId": message.resource_id,
        "type": "v2",
    }


def _content_in(content: Any) -> Any:
    """Mastra's message content (a string, v2 `{format, parts}` or a parts list) as Keel stores it."""
    if isinstance(content, str):
        return content
    parts = content.get("parts") if isinstance(content, dict) else content
    if isinstance(content, dict) and not parts and isinstance(content.get("content"), str):
        return content["content"]
    if not isinstance(parts, list):
        raise bad_request("A message's content must be a string or {format: 2, parts: [...]}")
    texts = [p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    return [{"type": "text", "text": t} for t in texts] or ""


async def _thread(ctx: Ctx, thread_id: str) -> Thread:
    thread = await ctx.storage.get_thread(thread_id)
    if thread is None:
        raise not_found(f"Thread {thread_id} not found")
    return thread


@router.get("/threads")
async def list_threads(
    ctx: Ctx,
    resource_id: Annotated[str | None, Query(alias="resourceId")] = None,
    page: Annotated[int, Query(ge=0, le=MAX_PAGE)] = 0,
    per_page: Annotated[int, Query(alias="perPage", ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    threads, total = await ctx.storage.list_threads(resource_id, offset=page * per_page, limit=per_page)
    return {
        "threads": [thread_json(t) for t in threads],
        "total": total,
        "page": page,
        "perPage": per_page,
        "hasMore": (page + 1) * per_page < total,
    }


@router.post("/threads")
async def create_thread(ctx: Ctx, body: CreateThreadBody) -> dict[str, Any]:
    thread_id = body.thread_id or str(uuid.uuid4())
    return thread_json(await new_thread(ctx, thread_id, body.resource_id, body.title, body.metadata))


async def new_thread(
    ctx: ApiContext,
    thread_id: str,
    resource_id: str,
    title: str | None,
    metadata: dict[str, Any] | None,
    noun: str = "Thread",
) -> Thread:
    """The thread of an id the caller chose, made now: one that exists is a 400 (of requests racing to make one
    id, exactly one makes it)."""
    try:
        return await ctx.storage.create_thread(thread_id, resource_id, title, metadata, new=True)
    except ThreadExists:
        raise bad_request(f"{noun} {thread_id} already exists") from None


@router.get("/threads/{thread_id}")
async def get_thread(ctx: Ctx, thread_id: str) -> dict[str, Any]:
    return thread_json(await _thread(ctx, thread_id))


@router.patch("/threads/{thread_id}")
async def update_thread(ctx: Ctx, thread_id: str, body: UpdateThreadBody) -> dict[str, Any]:
    await _thread(ctx, thread_id)
    updated = await ctx.storage.update_thread(
        thread_id, title=body.title, metadata=body.metadata, resource_id=body.resource_id
    )
    return thread_json(updated)


@router.delete("/threads/{thread_id}")
async def delete_thread(ctx: Ctx, thread_id: str) -> dict[str, Any]:
    if not await ctx.storage.delete_thread(thread_id):
        raise not_found(f"Thread {thread_id} not found")
    return {"result": "Thread deleted"}


@router.get("/threads/{thread_id}/messages")
async def list_messages(
    ctx: Ctx,
    thread_id: str,
    page: Annotated[int, Query(ge=0, le=MAX_PAGE)] = 0,
    per_page: Annotated[int, Query(alias="perPage", ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    await _thread(ctx, thread_id)
    messages, total = await ctx.storage.list_messages(thread_id, offset=page * per_page, limit=per_page)
    return {
        "messages": [message_json(m) for m in messages],
        "total": total,
        "page": page,
        "perPage": per_page,
        "hasMore": (page + 1) * per_page < total,
        "uiMessages": None,
    }


async def _save(ctx: Ctx, messages: list[MessageIn], thread_id: str | None = None) -> list[dict[str, Any]]:
    stored = []
    now = datetime.now(UTC)
    for m in messages:
        target = thread_id or m.thread_id
        if not target:
            raise bad_request("Each message needs a threadId")
        thread = await _thread(ctx, target)
        stored.append(
            StoredMessage(
                id=m.id or str(uuid.uuid4()),
                thread_id=target,
                resource_id=m.resource_id or thread.resource_id,
                role=m.role,
                content=_content_in(m.content),
                created_at=m.created_at or now,
            )
        )
    await ctx.storage.save_messages(stored)
    return [message_json(m) for m in await ctx.storage.get_messages([m.id for m in stored])]


@router.post("/threads/{thread_id}/messages")
async def add_messages(ctx: Ctx, thread_id: str, body: SaveMessagesBody) -> dict[str, Any]:
    return {"messages": await _save(ctx, body.messages, thread_id)}


@router.post("/save-messages")
async def save_messages(ctx: Ctx, body: SaveMessagesBody) -> dict[str, Any]:
    return {"messages": await _save(ctx, body.messages)}


@router.post("/messages/delete")
async def delete_messages(ctx: Ctx, body: DeleteMessagesBody) -> dict[str, Any]:
    given = body.message_ids if isinstance(body.message_ids, list) else [body.message_ids]
    ids = [m.id if isinstance(m, MessageRef) else m for m in given]
    deleted = await ctx.storage.delete_messages(ids)
    noun = "message" if deleted == 1 else "messages"
    return {"success": True, "message": f"{deleted} {noun} deleted successfully"}


@router.post("/threads/{thread_id}/clone")
async def clone_thread(ctx: Ctx, thread_id: str, body: CloneBody) -> dict[str, Any]:
    source = await _thread(ctx, thread_id)
    messages, _ = await ctx.storage.list_messages(thread_id)
    options = body.options or CloneOptions.model_validate({})
    chosen = options.message_filter
    if chosen is not None:
        if chosen.message_ids is not None:
            messages = [m for m in messages if m.id in set(chosen.message_ids)]
        if chosen.start_date is not None:
            messages = [m for m in messages if m.created_at >= chosen.start_date]
        if chosen.end_date is not None:
            messages = [m for m in messages if m.created_at <= chosen.end_date]
    if options.message_limit is not None:
        messages = messages[-options.message_limit :]
    new_id = body.new_thread_id or str(uuid.uuid4())
    cloned_at = datetime.now(UTC)
    clone = {"sourceThreadId": thread_id, "clonedAt": cloned_at.isoformat()}
    if messages:
        clone["lastMessageId"] = messages[-1].id
    metadata = {**(source.metadata or {}), **(body.metadata or {}), "clone": clone}
    resource = body.resource_id or source.resource_id
    thread = await new_thread(ctx, new_id, resource, body.title or source.title, metadata)
    mapping = {m.id: str(uuid.uuid4()) for m in messages}
    copies = [
        m.model_copy(update={"id": mapping[m.id], "thread_id": new_id, "resource_id": resource, "run_id": None})
        for m in messages
    ]
    await ctx.storage.save_messages(copies)
    return {
        "thread": thread_json(thread),
        "messageIdMap": mapping,
        "clonedMessages": [message_json(m) for m in copies],
    }


@router.get("/status")
async def memory_status() -> dict[str, Any]:
    return {"result": True, "memoryType": "local"}
