"""The run-events domain: each run's append-only log of stream chunks, readable from any offset, and which
execution a run id belongs to."""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import ClassVar

from keel.protocol import AgentChunk, EventRecord, parse_chunk


class RunEvent(EventRecord):
    """One entry of a run's append-only event log: a stored chunk.

    `offset` is dense from 0 per run. `source` names the activity that wrote it (e.g. `model:2`) and `attempt`
    its attempt number: a consumer that sees a higher attempt for a source ignores that source's lower attempts.
    """

    run_id: str
    offset: int
    source: str | None = None
    attempt: int = 1
    created_at: datetime

    def chunk(self) -> AgentChunk | None:
        """The typed Mastra chunk; None for a type or payload this version does not know."""
        return parse_chunk(self.run_id, self)


class EventWatch:
    """A reader's wake-up on one run's log: woken when the log may have grown.

    A reader takes the watch first, then reads, then waits: an append between its read and its wait has already
    woken the watch, so the wait returns at once and nothing is missed. A wake-up may be spurious (the reader
    then reads nothing new); the timeout is the backstop for a wake-up lost (e.g. a listener connection down).
    """

    def __init__(self, on_timeout: Callable[[], Awaitable[None]] | None = None) -> None:
        self._woken = asyncio.Event()
        self._on_timeout = on_timeout

    def wake(self) -> None:
        self._woken.set()

    async def wait(self, timeout: float) -> None:
        """Until a wake-up since the last wait, or `timeout` seconds."""
        try:
            async with asyncio.timeout(timeout):
                await self._woken.wait()
        except TimeoutError:
            if self._on_timeout is not None:
                await self._on_timeout()
        self._woken.clear()


class Watches:
    """The watches taken on one store, by run."""

    def __init__(self) -> None:
        self._by_run: dict[str, set[EventWatch]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_run)

    def runs(self) -> list[str]:
        return list(self._by_run)

    def add(self, run_id: str, watch: EventWatch) -> None:
        self._by_run.setdefault(run_id, set()).add(watch)

    def remove(self, run_id: str, watch: EventWatch) -> None:
        watches = self._by_run.get(run_id)
        if watches is not None:
            watches.discard(watch)
            if not watches:
                del self._by_run[run_id]

    def wake(self, run_id: str) -> None:
        for watch in self._by_run.get(run_id, ()):
            watch.wake()

    def wake_all(self) -> None:
        for watches in self._by_run.values():
            for watch in watches:
                watch.wake()


class EventStore(abc.ABC):
    """Per-run event logs."""

    wakes_readers: ClassVar[bool] = False
    """True if a watch is woken by appends from other processes too; otherwise readers must poll."""

    _event_watches: Watches | None = None

    @abc.abstractmethod
    async def append_events(
        self, run_id: str, events: list[EventRecord], *, source: str | None = None, attempt: int = 1
    ) -> list[int]:
        """Append events atomically at the end of the run's log; returns their offsets.

        Safe under concurrent appenders for the same run (offsets stay dense and unique).
        """

    @abc.abstractmethod
    async def claim_run(self, run_id: str, execution_id: str) -> str:
        """Record that `run_id` belongs to `execution_id` (Temporal's first execution run id, the same across
        continue-as-new) unless it already belongs to one; returns the owner. Idempotent."""

    @abc.abstractmethod
    async def log_end(self, run_id: str) -> int:
        """The offset just past the log's last event (0 for an empty log): where a reader of what comes next
        starts."""

    @abc.abstractmethod
    async def read_events(self, run_id: str, *, offset: int = 0, limit: int | None = None) -> list[RunEvent]:
        """Events with `offset >= offset`, in order. Another process may read while one appends."""

    @contextlib.asynccontextmanager
    async def watch_events(self, run_id: str) -> AsyncIterator[EventWatch]:
        """A watch on the run's log (see `EventWatch`): take it, read, then wait on it before reading again."""
        if self._event_watches is None:
            self._event_watches = Watches()
        watches = self._event_watches
        watch = EventWatch(self._watch_timed_out)
        watches.add(run_id, watch)
        try:
            await self._watching()
            yield watch
        finally:
            watches.remove(run_id, watch)

    def _appended(self, run_id: str) -> None:
        """After this store committed an append to the run's log: wakes this process's readers of it."""
        if self._event_watches is not None:
            self._event_watches.wake(run_id)

    async def _watching(self) -> None:
        """A watch was taken: the backend starts what wakes watches on other processes' appends."""
        return None

    async def _watch_timed_out(self) -> None:
        """A watch waited its whole timeout: the backend may restore a lost wake-up source."""
        return None
