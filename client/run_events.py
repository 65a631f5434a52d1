"""Reading a run's event log: from any offset, following new events, without showing a retried attempt twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from storage import RunEvent, Storage

POLL_SECONDS = 0.05


class AttemptFilter:
    """Drops events of an activity attempt once a later attempt of the same source has written.

    A retried activity re-emits its output under a higher `attempt`; an abandoned attempt (a zombie worker) may
    still write after it. Keep, per source, only events of the highest attempt seen so far.
    """

    def __init__(self) -> None:
        self._latest: dict[str, int] = {}

    def keep(self, event: RunEvent) -> bool:
        if event.source is None:
            return True
        latest = self._latest.get(event.source, 0)
        if event.attempt < latest:
            return False
        self._latest[event.source] = event.attempt
        return True


async def follow(
    storage: Storage,
    run_id: str,
    *,
    offset: int = 0,
    until: frozenset[str] = frozenset({"finish"}),
    idle_check: Callable[[], Awaitable[bool]] | None = None,
) -> AsyncIterator[RunEvent]:
    """Yield events from `offset` on, polling for new ones, until an event whose type is in `until`.

    `idle_check` is awaited when no event arrived for a while; if it returns True the stream ends (the run
    closed or suspended without writing a terminating event, e.g. it failed).
    """
    filt = AttemptFilter()
    idle = 0.0
    while True:
        events = await storage.read_events(run_id, offset=offset)
        for event in events:
            offset = event.offset + 1
            if not filt.keep(event):
                continue
            yield event
            if event.type in until:
                return
        if events:
            idle = 0.0
            continue
        idle += POLL_SECONDS
        if idle_check is not None and idle >= 1.0:
            idle = 0.0
            if await idle_check():
                return
        await asyncio.sleep(POLL_SECONDS)
