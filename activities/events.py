"""What one activity execution writes: its messages and its stream chunks, in one storage transaction."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol

from temporalio import activity

from keel.activities.turn_events import TurnEvents
from keel.protocol import Chunk, EventRecord, MessageRecord
from keel.storage import StepAnswer, Storage, StoredMessage
from keel.workflows.contracts import TurnConfig

DELTA_FLUSH_SECONDS = 0.01
"""Streamed text deltas are written to the event log at most this often: a delta after a quiet spell is
written at once, the ones that follow within this time together (one transaction per flush, not per token)."""


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


def mirror_of(where: Where, turn: TurnConfig | None) -> TurnEvents | None:
    """The session event translation of a turn's step (None outside sessions)."""
    return TurnEvents(turn, where.run_id, where.thread_id) if turn is not None else None


class StepWriter:
    """The chunks and messages of one activity execution, tagged with a source and an attempt.

    Chunks are buffered and written with the step's messages in one storage transaction. Text deltas are
    written on the way, in the background (the model's stream never waits for storage): at once after a quiet
    spell, else at most every `DELTA_FLUSH_SECONDS`. A failed background write fails the next `delta` or
    `flush`. The first write numbers the attempt after any earlier execution of the same source.
    """

    def __init__(self, storage: Storage, where: Where, source: str, *, mirror: TurnEvents | None = None) -> None:
        self._storage = storage
        self._where = where
        self._source = source
        self._mirror = mirror  # a session turn's step: its chunks as the session's events, in the same write
        self._attempt: int | None = None
        self._buffer: list[EventRecord] = []
        self._last_flush = 0.0
        self._writing = asyncio.Lock()
        self._due: asyncio.TimerHandle | None = None
        self._background: asyncio.Task[None] | None = None
        self._failed: BaseException | None = None

    @property
    def run_id(self) -> str:
        return self._where.run_id

    def add(self, chunk: Chunk) -> None:
        self._buffer.append(chunk.record())

    def add_records(self, records: list[EventRecord]) -> None:
        """Chunks the workflow decided (declined or failed calls), persisted by this activity."""
        self._buffer.extend(records)

    async def delta(self, chunk: Chunk) -> None:
        self._raise_failed()
        self.add(chunk)
        self._schedule()

    def _schedule(self) -> None:
        if self._due is not None or (self._background is not None and not self._background.done()):
            return  # a write is due or under way; what it does not take, it schedules
        wait = max(0.0, self._last_flush + DELTA_FLUSH_SECONDS - time.monotonic())
        self._due = asyncio.get_running_loop().call_later(wait, self._start_background)

    def _start_background(self) -> None:
        self._due = None
        self._background = asyncio.ensure_future(self._write_deltas())

    async def _write_deltas(self) -> None:
        try:
            async with self._writing:
                # Only delta writes pace deltas: a step's first delta goes out at once, even right after the
                # step wrote its input messages.
                self._last_flush = time.monotonic()
                await self._write()
        except Exception as err:  # raised by the step's next delta or flush
            self._failed = err
            return
        finally:
            self._background = None
        if self._buffer:  # deltas that came during the write
            self._schedule()

    def stop(self) -> None:
        """The step is over (however it ended): no write of this writer starts or goes on after it."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
        if self._background is not None:
            self._background.cancel()
            self._background = None

    def _raise_failed(self) -> None:
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed

    async def flush(
        self, messages: list[MessageRecord] | None = None, *, replace: bool = False, answer: StepAnswer | None = None
    ) -> None:
        """Write the buffered chunks and `messages` (`replace`: this step owns them; the last attempt wins), and
        a model step's `answer`, in one transaction."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
        async with self._writing:
            self._raise_failed()
            await self._write(messages, replace=replace, answer=answer)

    async def _write(
        self, messages: list[MessageRecord] | None = None, *, replace: bool = False, answer: StepAnswer | None = None
    ) -> None:
        if not self._buffer and not messages and answer is None:
            return
        batch, self._buffer = _joined_deltas(self._buffer), []
        also = None
        if self._mirror is not None and batch:
            also = (self._mirror.turn.session_id, self._mirror.translate(batch))
        used = await self._storage.write(
            self.run_id,
            messages=stored_messages(messages, self._where) if messages else None,
            replace=replace,
            events=batch,
            source=self._source,
            attempt=self._attempt or activity.info().attempt,
            renumber=self._attempt is None,
            answer=answer,
            also=also,
        )
        if batch:
            self._attempt = used


def _joined_deltas(records: list[EventRecord]) -> list[EventRecord]:
    """Consecutive text deltas of one text joined into one: a flush writes one row for what streamed since the
    last, not one per token. Linear in the text: a long answer may come as many thousands of deltas."""
    joined: list[EventRecord] = []
    texts: list[str] = []  # the run of deltas joined[-1] stands for, joined once it ends

    def close_run() -> None:
        if len(texts) > 1:
            joined[-1] = EventRecord(type="text-delta", payload={**joined[-1].payload, "text": "".join(texts)})
        texts.clear()

    for record in records:
        last = joined[-1] if joined else None
        if (
            last is not None
            and texts
            and record.type == last.type == "text-delta"
            and record.payload.get("id") == last.payload.get("id")
        ):
            texts.append(record.payload["text"])
            continue
        close_run()
        joined.append(record)
        if record.type == "text-delta":
            texts.append(record.payload["text"])
    close_run()
    return joined
