"""The one heartbeat helper of Keel's activities."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

from temporalio import activity


def heartbeat_interval(heartbeat_timeout: timedelta | None) -> timedelta | None:
    """Half the heartbeat timeout; None when the activity has none (then no heartbeat is ever sent)."""
    if not heartbeat_timeout:
        return None
    return heartbeat_timeout / 2


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat every half heartbeat timeout while the block runs, starting one interval in: an activity that
    ends sooner sends none (each heartbeat is a server call). Nothing at all without a heartbeat timeout."""
    interval = heartbeat_interval(activity.info().heartbeat_timeout)
    if interval is None:
        yield
        return
    beat = asyncio.create_task(_beat_every(interval.total_seconds()))
    try:
        yield
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat


async def _beat_every(seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        activity.heartbeat()
