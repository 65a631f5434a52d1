"""Stored responses (`store: true`): what each was asked for, kept in Keel's storage so any API process, after
any restart, answers `GET /v1/responses/:id` and chains `previous_response_id` from it. The rest of a response
(status, output, usage) is its run's: the response id is the `AgentRun`'s run id.

Each stored response has an event log of its own, `keel-response:<id>` (a name no run has): a `response` event
holding its `ResponseRecord`, then, once deleted, a `response-deleted` event. A response whose conversation
(thread) was deleted is gone with it, as in Mastra, where the record lives on the thread's message."""

from __future__ import annotations

from typing import Any

from keel.protocol import EventRecord, WireModel
from keel.storage import Storage

RESPONSE_EVENT = "response"
DELETED_EVENT = "response-deleted"


def response_log(response_id: str) -> str:
    """The log of a stored response's record. Fixed contract: stored records are found by this name."""
    return f"keel-response:{response_id}"


class ResponseRecord(WireModel):
    """A response as it was asked for: enough, with its run, to answer it again."""

    id: str
    """The response id: its `AgentRun`'s run id."""
    agent_id: str
    model: str
    created_at: int
    """Unix seconds."""
    thread_id: str
    """The thread the run answers in (its own, the run id, when the caller chose none)."""
    resource_id: str | None = None
    conversation_id: str | None = None
    """The thread, when the caller continues or stores one (Mastra's `conversation_id`); None otherwise."""
    instructions: str | None = None
    text: dict[str, Any] | None = None
    previous_response_id: str | None = None
    store: bool = False
    input_messages: int | None = None
    """How many messages the run was given: its first ones, never its output. None in records from before it
    was kept (their output then holds an assistant message given as input)."""


async def save(storage: Storage, record: ResponseRecord) -> None:
    await storage.append_events(
        response_log(record.id), [EventRecord(type=RESPONSE_EVENT, payload=record.model_dump())]
    )


async def find(storage: Storage, response_id: str) -> ResponseRecord | None:
    """The stored response; None if it never was, was deleted, or its conversation was."""
    events = await storage.read_events(response_log(response_id))
    if not events or events[0].type != RESPONSE_EVENT or any(e.type == DELETED_EVENT for e in events):
        return None
    record = ResponseRecord.model_validate(events[0].payload)
    if await storage.get_thread(record.thread_id) is None:
        return None
    return record


async def forget(storage: Storage, response_id: str) -> None:
    await storage.append_events(response_log(response_id), [EventRecord(type=DELETED_EVENT)])
