"""Reading a run's event log, the one way every reader does (the CLI, and the HTTP streams): from any offset,
following new events or not, and never showing a step twice: a retried attempt replaces the one before it."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from keel.storage import RunEvent, Storage

POLL_SECONDS = 0.05
"""How often a reader polls a store that cannot wake it."""
WATCHED_WAIT_SECONDS = 0.5
"""The backstop read of a store that wakes readers (a wake-up lost, e.g. its listener reconnecting)."""
IDLE_CHECK_SECONDS = 1.0


class AttemptFilter:
    """Drops events of an activity attempt once a later attempt of the same source is known.

    A retried activity re-emits its output under a higher `attempt`; an abandoned attempt (a zombie worker) may
    still write after it. Within each batch read, and from then on, only the highest attempt per source is kept:
    a reader that reads a finished run sees each step once.

    A live reader may have shown a lost attempt's first events before the retry began. The retry's events that
    repeat them (the same type and payload, in the same order: a step's `start` and `step-start`, the text a
    deterministic model streams again) are not shown again, so the reader sees what a reader of the finished run
    sees. Where the retry differs from what was shown, the rest of it is shown, its first event marked as a
    retry (`is_retry`). Only the first `ECHO_LIMIT` events of an attempt are remembered for this.
    """

    ECHO_LIMIT = 256

    def __init__(self) -> None:
        self._latest: dict[str, int] = {}
        self._shown: dict[str, list[int]] = {}  # per source: fingerprints of the latest attempt's shown events
        self._echo: dict[str, tuple[list[int], int]] = {}  # per source: a lost attempt's shown, how many repeated

    def filter(self, batch: list[RunEvent]) -> list[tuple[RunEvent, bool]]:
        """The events to show, each with True if it is the first event shown of a retry attempt that differs
        from what this reader was shown of the attempt before."""
        newest = dict(self._latest)
        for event in batch:
            if event.source is not None:
                newest[event.source] = max(newest.get(event.source, 0), event.attempt)
        shown = []
        for event in batch:
            source = event.source
            if source is None:
                shown.append((event, False))
                continue
            if event.attempt != newest[source]:
                continue
            if self._latest.get(source, 0) < event.attempt:  # the first event of a retry this reader meets
                lost = self._shown.pop(source, [])
                self._echo[source] = (lost, 0)
                self._latest[source] = event.attempt
            mark = _fingerprint(event)
            echo = self._echo.get(source)
            is_retry = False
            if echo is not None:
                lost, repeated = echo
                if repeated < len(lost) and lost[repeated] == mark:
                    self._echo[source] = (lost, repeated + 1)
                    self._remember(source, mark)
                    continue  # already shown, from the lost attempt
                del self._echo[source]
                is_retry = repeated < len(lost)  # something shown of the lost attempt is not repeated
            self._remember(source, mark)
            shown.append((event, is_retry))
        return shown

    def _remember(self, source: str, mark: int) -> None:
        marks = self._shown.setdefault(source, [])
        if len(marks) < self.ECHO_LIMIT:
            marks.append(mark)


def _fingerprint(event: RunEvent) -> int:
    return hash((event.type, json.dumps(event.payload, sort_keys=True, default=str)))


@dataclass(frozen=True)
class Shown:
    """An event a reader shows; `retry` marks the first event of an attempt that replaces an earlier one."""

    event: RunEvent
    retry: bool = False


async def read(storage: Storage, run_id: str, *, offset: int = 0) -> list[Shown]:
    """The events from `offset` on as they stand now, each step's superseded attempts left out."""
    return [Shown(e, retry) for e, retry in AttemptFilter().filter(await storage.read_events(run_id, offset=offset))]


async def follow(
    storage: Storage,
    run_id: str,
    *,
    offset: int = 0,
    until: frozenset[str] = frozenset({"finish"}),
    idle_check: Callable[[], Awaitable[bool]] | None = None,
) -> AsyncIterator[Shown]:
    """Yield events from `offset` on as they are appended, until an event whose type is in `until`.

    The reader waits on the store's watch on the run (woken by an append, in this process or another), so an
    event is yielded as soon as it is committed; a store that cannot wake readers is polled. `idle_check` is
    awaited when no event arrived for a while; if it returns True the stream ends (the run closed or suspended
    without writing a terminating event, e.g. it failed).
    """
    filt = AttemptFilter()
    wait = WATCHED_WAIT_SECONDS if storage.wakes_readers else POLL_SECONDS
    async with storage.watch_events(run_id) as watch:
        quiet_since = time.monotonic()
        while True:
            events = await storage.read_events(run_id, offset=offset)
            if events:
                offset = events[-1].offset + 1
                quiet_since = time.monotonic()
            for event, retry in filt.filter(events):
                yield Shown(event, retry)
                if event.type in until:
                    return
            if idle_check is not None and time.monotonic() - quiet_since >= IDLE_CHECK_SECONDS:
                quiet_since = time.monotonic()
                if await idle_check():
                    # What the run wrote before it ended or suspended, after the read above.
                    for event, retry in filt.filter(await storage.read_events(run_id, offset=offset)):
                        yield Shown(event, retry)
                        if event.type in until:
                            return
                    return
            await watch.wait(min(wait, IDLE_CHECK_SECONDS))
