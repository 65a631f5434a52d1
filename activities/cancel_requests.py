"""Whether an activity's run was asked to cancel, asked of Temporal while a step runs.

A local activity holds its run's workflow task open, so a cancel (a session's abort, `keel cancel`, `temporal
workflow cancel`) reaches the run only when the step ends or the task heartbeats: the step asks instead, and stops.
A regular activity's run ends at once, and the activity hears of it with its next heartbeat: a model step that
stores its answer asks too, so no answer is stored in a run the user aborted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, NoReturn, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode

from keel.protocol import names

T = TypeVar("T")
logger = logging.getLogger(__name__)

CANCEL_CHECK_AFTER_SECONDS = 0.25
"""A step that has run this long starts asking Temporal whether its run was asked to cancel (then every
`CANCEL_POLL_SECONDS`), and stops if so (`until_cancel_requested`). A local step holds its workflow task open, so
a cancel reaches the run only when the step ends or the task's heartbeat comes (8 s in with Temporal's default
task timeout): before, a user's abort waited that long, while the model call or the tools went on. Quicker steps
ask nothing (no RPC). A fused agent step whose tools took this long also asks once before its model step."""
CANCEL_POLL_SECONDS = 1.0
"""How often a long local step asks (one `DescribeWorkflowExecution` each, as often as a regular activity with a
2 s heartbeat timeout would heartbeat)."""


REGULAR_WATCH_SECONDS = 30.0
"""A regular activity asks this long at most: past it, its heartbeats bring a cancel within seconds anyway."""
HEARTBEAT_CANCEL_SECONDS = 15.0
"""A regular activity stopped by the watch then heartbeats and waits this long for the SDK's own cancel (its run
has ended: the heartbeat finds the activity gone), which ends it quietly; a failure reported for an activity whose
run has ended makes the worker warn "Activity not found on completion"."""
TRANSIENT = {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.RESOURCE_EXHAUSTED}


async def cancel_requested() -> bool:
    """Whether this activity's run was asked to cancel (Temporal's `cancel_requested`, seen before the run does).
    False for a standalone activity (no run) or one with no client; raises `RPCError` when Temporal does not
    answer."""
    info = activity.info()
    if info.workflow_id is None:
        return False
    try:
        client = activity.client()
    except RuntimeError:  # none to ask with (an activity run outside a worker, as tests do)
        return False
    handle = client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    described = await handle.describe(rpc_timeout=timedelta(seconds=5))
    return described.raw_description.workflow_extended_info.cancel_requested


async def _cancel_seen() -> bool:
    """Asks every `CANCEL_POLL_SECONDS` until the run was asked to cancel (True), or until asking is of no use
    (False: Temporal refused the question, e.g. a worker not allowed to describe runs, said once in the log; or a
    regular activity asked for `REGULAR_WATCH_SECONDS`)."""
    info = activity.info()
    asked_for = 0.0
    while info.is_local or asked_for < REGULAR_WATCH_SECONDS:
        try:
            if await cancel_requested():
                return True
        except RPCError as err:
            if err.status not in TRANSIENT:
                logger.warning("Step %s cannot ask whether its run was asked to cancel: %s", info.activity_id, err)
                return False
        await asyncio.sleep(CANCEL_POLL_SECONDS)
        asked_for += CANCEL_POLL_SECONDS
    return False


def stopped() -> ApplicationError:
    # Benign: the worker logs it at DEBUG (a user's abort is not a warning) and counts no failure in its metrics.
    return ApplicationError(
        "the step stopped: its run was asked to cancel",
        type=names.STOPPED_FOR_CANCEL,
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    )


async def until_cancel_requested(step: Coroutine[Any, Any, T], *, regular_too: bool = False) -> T:
    """`step`'s result, unless its run is asked to cancel first: then `step` is cancelled (its tools' cleanup runs).
    A local activity then fails with `STOPPED_FOR_CANCEL`, which its run answers by waiting for the cancel. A
    regular one (watched only when `regular_too`: a step that stores what the model answers) waits for the SDK's
    own cancel, which its heartbeat brings.

    `step` runs in the caller's task, and a step that ends within `CANCEL_CHECK_AFTER_SECONDS` costs one timer:
    the watch starts only then."""
    local = activity.info().is_local
    if not local and not regular_too:
        return await step
    task = asyncio.current_task()
    assert task is not None
    watch: asyncio.Task[None] | None = None
    stopping = False

    async def watching() -> None:
        nonlocal stopping
        if await _cancel_seen():
            stopping = True
            task.cancel()

    def start() -> None:
        nonlocal watch
        watch = asyncio.ensure_future(watching())

    timer = asyncio.get_running_loop().call_later(CANCEL_CHECK_AFTER_SECONDS, start)
    try:
        result = await step
    except asyncio.CancelledError:
        if not (stopping and task.uncancel() == 0):  # the activity's own cancel (too)
            raise
    else:
        if stopping:  # the step took the watch's cancel and ended anyway: its result stands
            task.uncancel()
        return result
    finally:  # no await from here on: the watch cannot cancel the task after this
        timer.cancel()
        if watch is not None:
            watch.cancel()
    await stop_for_cancel()


async def stop_for_cancel() -> NoReturn:
    """End this activity, its run asked to cancel: a local one fails with `STOPPED_FOR_CANCEL`; a regular one's
    run has ended, so it heartbeats (which finds the activity gone) and waits for the SDK's own cancel, quiet."""
    if not activity.info().is_local:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_CANCEL_SECONDS)
    raise stopped()


__all__ = [
    "CANCEL_CHECK_AFTER_SECONDS",
    "CANCEL_POLL_SECONDS",
    "cancel_requested",
    "stop_for_cancel",
    "stopped",
    "until_cancel_requested",
]
