"""The one heartbeat helper of Keel's activities."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio import activity


def heartbeat_interval(heartbeat_timeout: timedelta | None) -> timedelta | None:
    """Half the heartbeat timeout; None when the activity has none (then no heartbeat is ever sent)."""
    if not heartbeat_timeout:
        return None
    return heartbeat_timeout / 2


@contextlib.asynccontextmanager
async def heartbeating(details: Callable[[], Sequence[Any]] | None = None) -> AsyncIterator[None]:
    """Heartbeat every half heartbeat timeout while the block runs, starting one interval in: an activity that
    ends sooner sends none (each heartbeat is a server call). Nothing at all without a heartbeat timeout.

    `details` gives the details of each beat: the server keeps only the latest heartbeat's, so an activity that
    records its progress there must repeat it in every beat, or a retry would find an empty one."""
    interval = heartbeat_interval(activity.info().heartbeat_timeout)
    if interval is None:
        yield
        return
    beat = asyncio.create_task(_beat_every(interval.total_seconds(), details or tuple))
    try:
        yield
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat


async def _beat_every(seconds: float, details: Callable[[], Sequence[Any]]) -> None:
    while True:
        await asyncio.sleep(seconds)
        activity.heartbeat(*details())
