"""Whether an activity's run was asked to cancel, asked of Temporal while a local step runs.

A local activity holds its run's workflow task open, so a cancel (a session's abort, `keel cancel`, `temporal
workflow cancel`) reaches the run only when the step ends or the task heartbeats: the step asks instead, and stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError

from keel.protocol import names

T = TypeVar("T")

CANCEL_CHECK_AFTER_SECONDS = 0.25
"""A step that has run this long starts asking Temporal whether its run was asked to cancel (then every
`CANCEL_POLL_SECONDS`), and stops if so (`until_cancel_requested`). A local step holds its workflow task open, so
a cancel reaches the run only when the step ends or the task's heartbeat comes (8 s in with Temporal's default
task timeout): before, a user's abort waited that long, while the model call or the tools went on. Quicker steps
ask nothing (no RPC). A fused agent step whose tools took this long also asks once before its model step."""
CANCEL_POLL_SECONDS = 1.0
"""How often a long local step asks (one `DescribeWorkflowExecution` each, as often as a regular activity with a
2 s heartbeat timeout would heartbeat)."""


async def cancel_requested() -> bool:
    """Whether this activity's run was asked to cancel (Temporal's `cancel_requested`, seen before the run does)."""
    info = activity.info()
    if info.workflow_id is None:  # a standalone activity: no run
        return False
    try:
        handle = activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
        described = await handle.describe(rpc_timeout=timedelta(seconds=5))
    except (RPCError, RuntimeError):  # unknown: go on as before
        return False
    return described.raw_description.workflow_extended_info.cancel_requested


def stopped() -> ApplicationError:
    # Benign: the worker logs it at DEBUG (a user's abort is not a warning) and counts no failure in its metrics.
    return ApplicationError(
        "the step stopped: its run was asked to cancel",
        type=names.STOPPED_FOR_CANCEL,
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    )


async def until_cancel_requested(step: Coroutine[Any, Any, T]) -> T:
    """`step`'s result, unless its run is asked to cancel first: then `step` is cancelled (its tools' cleanup runs)
    and the activity fails with `STOPPED_FOR_CANCEL`. A local step's run answers that by waiting for the cancel. A
    regular activity's run has ended already (its cancel reached it at once); the activity would hear of it only
    with its next heartbeat, seconds later, and a model that answered meanwhile had its answer stored in the
    thread of a run the user had aborted.

    `step` runs in the caller's task, and a step that ends within `CANCEL_CHECK_AFTER_SECONDS` costs one timer:
    the watch starts only then."""
    task = asyncio.current_task()
    assert task is not None
    watch: asyncio.Task[None] | None = None
    stopping = False

    async def watching() -> None:
        nonlocal stopping
        while not await cancel_requested():
            await asyncio.sleep(CANCEL_POLL_SECONDS)
        stopping = True
        task.cancel()

    def start() -> None:
        nonlocal watch
        watch = asyncio.ensure_future(watching())

    timer = asyncio.get_running_loop().call_later(CANCEL_CHECK_AFTER_SECONDS, start)
    try:
        result = await step
    except asyncio.CancelledError:
        if stopping and task.uncancel() == 0:  # only the watch canceled it (not the activity's own cancel)
            raise stopped() from None
        raise
    finally:  # no await from here on: the watch cannot cancel the task after this
        timer.cancel()
        if watch is not None:
            watch.cancel()
    if stopping:  # the step took the watch's cancel and ended anyway: its result stands
        task.uncancel()
    return result


__all__ = ["CANCEL_CHECK_AFTER_SECONDS", "CANCEL_POLL_SECONDS", "cancel_requested", "stopped", "until_cancel_requested"]
