"""Telling a Temporal server that is away from one that answered, and riding out the first.

An `RPCError` is either a definite answer (`DEFINITE`: no such execution, a bad request, not allowed) or the
server, or the way to it, being away: UNAVAILABLE, a dropped connection's UNKNOWN `transport error` or
CANCELLED `operation was canceled`, a deadline. A read or an idempotent write that meets the second is made
again (`through_outages`); the HTTP API answers what is left of it as a 503 (`TemporalUnavailable`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.service import RPCError, RPCStatusCode

from keel.client.errors import KeelClientError

T = TypeVar("T")

DEFINITE = frozenset(
    {
        RPCStatusCode.NOT_FOUND,
        RPCStatusCode.ALREADY_EXISTS,
        RPCStatusCode.OUT_OF_RANGE,
        RPCStatusCode.INVALID_ARGUMENT,
        RPCStatusCode.PERMISSION_DENIED,
        RPCStatusCode.UNAUTHENTICATED,
        RPCStatusCode.FAILED_PRECONDITION,
        RPCStatusCode.UNIMPLEMENTED,
    }
)
"""The server's answers; any other failure is the server or the way to it being away."""

OUTAGE_POLL_SECONDS = 5.0
"""The longest pause between two tries while the Temporal server does not answer."""


class TemporalUnavailable(KeelClientError):
    """The Temporal server did not answer (down, restarting, or the connection to it dropped)."""

    def __init__(self, err: RPCError) -> None:
        super().__init__(f"The Temporal server did not answer: {err.message}")
        self.err = err


def is_away(err: RPCError) -> bool:
    """Whether `err` is the server or the way to it being away, rather than an answer."""
    return err.status not in DEFINITE


async def through_outages(ask: Callable[[], Awaitable[T]], definite: Callable[[RPCError], Exception]) -> T:
    """`ask()`, made again (the pause growing to `OUTAGE_POLL_SECONDS`) while the server is away (an away
    `RPCError`, or `TemporalUnavailable` from a step of `ask` that asked again itself): until it answers, or
    answers a definite `RPCError`, raised as `definite(err)`. The caller gives up by cancelling."""
    delay = 0.5
    while True:
        try:
            return await ask()
        except TemporalUnavailable:
            pass
        except RPCError as err:
            if not is_away(err):
                raise definite(err) from None
        await asyncio.sleep(delay)  # the server is away (a restart, a network cut): ask again
        delay = min(delay * 2, OUTAGE_POLL_SECONDS)
