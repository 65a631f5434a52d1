"""Reading a run's event log, the one way every reader does (the CLI, and the HTTP streams): from any offset,
following new events or not, and never showing a step twice: a retried attempt replaces the one before it."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

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

    A live reader may have shown a lost attempt's events before the retry began. The retry's events that repeat
    them (the same type and payload, in the same order: a step's `start` and `step-start`, the text a
    deterministic model streams again) are not shown again, so the reader sees what a reader of the finished run
    sees. Where the retry differs from what was shown, or goes past the first `ECHO_LIMIT` events shown (which
    are all that is remembered), the rest of it is shown, its first event marked as a retry (`is_retry`). A retry
    lost in turn is compared the same way: with what the reader was shown. State is kept for the
    `SOURCES_KEPT` sources seen last (a step's model call and tools; earlier steps have finished).
    """

    ECHO_LIMIT = 256
    SOURCES_KEPT = 64

    def __init__(self) -> None:
        self._latest: dict[str, int] = {}
        self._seen: OrderedDict[str, _Seen] = OrderedDict()

    def filter(self, batch: list[RunEvent]) -> list[tuple[RunEvent, bool]]:
        """The events to show, each with True if it is the first event shown of a retry attempt that differs
        from what this reader was shown of the attempts before."""
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
            seen = self._seen_of(source)
            if self._latest.get(source, 0) < event.attempt:  # the first event of a retry this reader meets
                self._latest[source] = event.attempt
                seen.echoing = seen.count > 0
                seen.repeated = 0
            is_retry = False
            if seen.echoing:
                if seen.repeats(event):
                    continue  # already shown, from an attempt before
                is_retry = True  # something shown before is not repeated
                seen.diverge()
            seen.record(event, self.ECHO_LIMIT)
            shown.append((event, is_retry))
        return shown

    def _seen_of(self, source: str) -> _Seen:
        seen = self._seen.get(source)
        if seen is None:
            seen = self._seen[source] = _Seen()
            if len(self._seen) > self.SOURCES_KEPT:
                self._seen.popitem(last=False)
        else:
            self._seen.move_to_end(source)
        return seen


@dataclass
class _Seen:
    """What a reader was shown of one source: how many events, the fingerprints of the first ones; and, while a
    retry repeats them, how many it has repeated."""

    marks: list[int] = field(default_factory=list)
    count: int = 0
    echoing: bool = False
    repeated: int = 0

    def repeats(self, event: RunEvent) -> bool:
        """Whether a retry's event repeats the next one the reader was shown (as far as remembered)."""
        if self.repeated < len(self.marks) and self.marks[self.repeated] == _fingerprint(event):
            self.repeated += 1
            if self.repeated == self.count:  # all it was shown, repeated: what follows is new
                self.echoing = False
            return True
        return False

    def diverge(self) -> None:
        """The retry differs from here on: what the reader was shown of the step is now the part it repeated,
        then what follows."""
        del self.marks[self.repeated :]
        self.count = self.repeated
        self.echoing = False

    def record(self, event: RunEvent, limit: int) -> None:
        if len(self.marks) < limit and len(self.marks) == self.count:
            self.marks.append(_fingerprint(event))
        self.count += 1


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
