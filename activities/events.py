"""What one activity execution writes: its messages and its stream chunks, in one storage transaction."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

from temporalio import activity

from keel.protocol import Chunk, EventRecord, MessageRecord
from keel.storage import Storage, StoredMessage

DELTA_FLUSH_SECONDS = 0.1
"""Streamed text deltas are written to the event log at most this often (one transaction per flush)."""


class Where(Protocol):
    """The run, thread and resource an activity input refers to."""

    run_id: str
    thread_id: str
    resource_id: str


def stored_messages(messages: list[MessageRecord], where: Where) -> list[StoredMessage]:
    now = datetime.now(UTC)
    return [
        StoredMessage(
            id=m.id,
            thread_id=where.thread_id,
            resource_id=where.resource_id,
            role=m.role,
            content=m.content,
            run_id=where.run_id,
            created_at=now,
        )
        for m in messages
    ]


class StepWriter:
    """The chunks and messages of one activity execution, tagged with a source and an attempt.

    Chunks are buffered and written with the step's messages in one storage transaction; a slow stream flushes
    its deltas on the way. The first write numbers the attempt after any earlier execution of the same source.
    """

    def __init__(self, storage: Storage, where: Where, source: str) -> None:
        self._storage = storage
        self._where = where
        self._source = source
        self._attempt: int | None = None
        self._buffer: list[EventRecord] = []
        self._last_flush = time.monotonic()

    @property
    def run_id(self) -> str:
        return self._where.run_id

    def add(self, chunk: Chunk) -> None:
        self._buffer.append(chunk.record())

    def add_records(self, records: list[EventRecord]) -> None:
        """Chunks the workflow decided (declined or failed calls), persisted by this activity."""
        self._buffer.extend(records)

    async def delta(self, chunk: Chunk) -> None:
        self.add(chunk)
        if time.monotonic() - self._last_flush >= DELTA_FLUSH_SECONDS:
            await self.flush()

    async def flush(self, messages: list[MessageRecord] | None = None, *, replace: bool = False) -> None:
        """Write the buffered chunks and `messages` (`replace`: this step owns them; the last attempt wins)."""
        self._last_flush = time.monotonic()
        if not self._buffer and not messages:
            return
        batch, self._buffer = _joined_deltas(self._buffer), []
        used = await self._storage.write(
            self.run_id,
            messages=stored_messages(messages, self._where) if messages else None,
            replace=replace,
            events=batch,
            source=self._source,
            attempt=self._attempt or activity.info().attempt,
            renumber=self._attempt is None,
        )
        if batch:
            self._attempt = used


def _joined_deltas(records: list[EventRecord]) -> list[EventRecord]:
    """Consecutive text deltas of one text joined into one: a flush writes one row for what streamed since the
    last, not one per token."""
    joined: list[EventRecord] = []
    for record in records:
        last = joined[-1] if joined else None
        if (
            last is not None
            and record.type == last.type == "text-delta"
            and record.payload.get("id") == last.payload.get("id")
        ):
            joined[-1] = EventRecord(
                type="text-delta", payload={**last.payload, "text": last.payload["text"] + record.payload["text"]}
            )
        else:
            joined.append(record)
    return joined
