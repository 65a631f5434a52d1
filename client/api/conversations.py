"""`/v1/conversations`: Mastra's OpenAI-compatible conversations, each a Keel thread (the conversation id is the
thread id), its items the thread's messages as OpenAI items. Every agent shares the app's storage, so `agent_id`
(which Mastra requires, and the `openai` SDK never sends) is checked when given and not needed."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import Field

from keel.app import UnknownAgent
from keel.client.api.bodies import Lenient, NonEmptyIndexedId, Title
from keel.client.api.context import ApiContext, Ctx
from keel.client.api.errors import not_found
from keel.client.api.memory import new_thread, thread_json
from keel.client.api.response_shapes import items
from keel.client.api.responses import InputMessage
from keel.storage import StoredMessage, Thread

router = APIRouter(prefix="/v1/conversations", tags=["responses"])

MAX_ITEMS = 1000
"""The messages listed as items, oldest first (Mastra's one page)."""


class CreateConversationBody(Lenient):
    agent_id: str | None = Field(None, min_length=1)
    conversation_id: NonEmptyIndexedId | None = None
    resource_id: NonEmptyIndexedId | None = None
    title: Title | None = None
    metadata: dict[str, Any] | None = None
    items: list[InputMessage] | None = Field(None, max_length=MAX_ITEMS)
    """The `openai` SDK's initial items: messages, stored in the new thread."""


def conversation_json(thread: Thread) -> dict[str, Any]:
    """Mastra's conversation, `{id, object, thread}`, with the `openai` SDK's `created_at` and `metadata`."""
    return {
        "id": thread.id,
        "object": "conversation",
        "created_at": int(thread.created_at.timestamp()),
        "metadata": thread.metadata or {},
        "thread": thread_json(thread),
    }


async def _thread(ctx: ApiContext, conversation_id: str) -> Thread:
    thread = await ctx.storage.get_thread(conversation_id)
    if thread is None:
        raise not_found(f"Conversation {conversation_id} was not found")
    return thread


@router.post("")
async def create_conversation(ctx: Ctx, body: CreateConversationBody) -> dict[str, Any]:
    if body.agent_id is not None:
        try:
            ctx.app.agent(body.agent_id)
        except UnknownAgent:
            raise not_found(f"Agent with id {body.agent_id} not found") from None
    thread_id = body.conversation_id or str(uuid.uuid4())
    resource_id = body.resource_id or thread_id
    thread = await new_thread(ctx, thread_id, resource_id, body.title, body.metadata, noun="Conversation")
    now = datetime.now(UTC)
    messages = [
        StoredMessage(
            id=str(uuid.uuid4()),
            thread_id=thread_id,
            resource_id=resource_id,
            role="system" if m.role == "developer" else m.role,
            content=m.content if isinstance(m.content, str) else "".join(p.text for p in m.content),
            created_at=now,
        )
        for m in body.items or []
    ]
    if messages:
        await ctx.storage.save_messages(messages)
    return conversation_json(thread)


@router.get("/{conversation_id}")
async def get_conversation(ctx: Ctx, conversation_id: str) -> dict[str, Any]:
    return conversation_json(await _thread(ctx, conversation_id))


@router.get("/{conversation_id}/items")
async def list_items(
    ctx: Ctx,
    conversation_id: str,
    limit: Annotated[int | None, Query(ge=1, le=MAX_ITEMS)] = None,
    order: Literal["asc", "desc"] = "asc",
    after: str | None = None,
) -> dict[str, Any]:
    """Every item, oldest first, as Mastra lists them; the `openai` SDK's `limit`, `order` and `after` (an item
    id) page them when given."""
    await _thread(ctx, conversation_id)
    messages, _ = await ctx.storage.list_messages(conversation_id, limit=MAX_ITEMS)
    listed = items(messages)
    if order == "desc":
        listed.reverse()
    if after is not None:
        ids = [item["id"] for item in listed]
        listed = listed[ids.index(after) + 1 :] if after in ids else []
    page = listed[:limit] if limit is not None else listed
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(page) < len(listed),
    }


@router.delete("/{conversation_id}")
async def delete_conversation(ctx: Ctx, conversation_id: str) -> dict[str, Any]:
    """The thread and its messages (the stored responses in it are gone with them)."""
    if not await ctx.storage.delete_thread(conversation_id):
        raise not_found(f"Conversation {conversation_id} was not found")
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}
