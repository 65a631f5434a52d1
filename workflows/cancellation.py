"""A cancel request ends a run wherever it lands, the rule `AgentRun` and `DefinitionRun` share.

An await that receives the cancel makes its own outcome of it: a local activity's cancellation is its error
(`once_locally` would retry it), a signal in flight is canceled and the task's cancellation cleared, a tool's or
child's cancellation becomes the step's error. So the runs ask `end_if_canceled` where that may have happened.
"""

from __future__ import annotations

import asyncio
from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from keel.protocol import names
from keel.workflows.search_attributes import KEEL_STATUS

CANCEL_ENDS_RUN_PATCH = "cancel-ends-run"
"""A cancel request ends the run wherever it lands. Before, an await that received it made its own outcome of
it and the run went on: a local step's cancellation was a failure to retry (the step ran again as an activity),
a signal to a turn's session was sent anyway (or canceled) and the turn went on to wait for its approvals. A
session's `abort` sent while its turn's first step ran hung for good. Asked only once a cancel has come
(`end_if_canceled`), by `AgentRun` and `DefinitionRun`; it may go once no run canceled before this release is
open (those that went on are stuck: terminate them)."""


def canceled_by_request() -> bool:
    """Whether a cancel of this run has come, for a run that takes `CANCEL_ENDS_RUN_PATCH`."""
    return workflow.cancellation_reason() is not None and workflow.patched(CANCEL_ENDS_RUN_PATCH)


def end_if_canceled() -> None:
    """Raises `asyncio.CancelledError` once a cancel of this run has come (`canceled_by_request`): asked where
    an await may have taken the cancel for its own outcome."""
    if canceled_by_request():
        raise asyncio.CancelledError()


STOPPED_FOR_CANCEL = names.STOPPED_FOR_CANCEL
"""The failure type of a local step that stopped because its run was asked to cancel. A local step holds the
run's workflow task open, so the cancel reaches the run only once the step ends (or the task's heartbeat comes,
8 s in with Temporal's default task timeout): the step asks Temporal while it runs, and stops. The run then waits
for the cancel (`cancel_arrives`), which comes with the next workflow task. Runs recorded before this failure
existed never meet it, so no patch guards it."""


def stopped_for_cancel(cause: BaseException) -> bool:
    """Whether a step's failure (its cause) is `STOPPED_FOR_CANCEL` (Keel's: benign and non-retryable too, so a
    tool's own error of that name is not taken for it)."""
    return (
        isinstance(cause, ApplicationError)
        and cause.type == STOPPED_FOR_CANCEL
        and cause.non_retryable
        and cause.category == ApplicationErrorCategory.BENIGN
    )


async def cancel_arrives() -> NoReturn:
    """Wait for the cancel a step saw requested (`STOPPED_FOR_CANCEL`), then raise `asyncio.CancelledError`: it
    comes with the next workflow task (or came already). No command: the task that recorded the step completes
    with nothing else."""
    await workflow.wait_condition(lambda: workflow.cancellation_reason() is not None)
    raise asyncio.CancelledError()


CANCELED_STATUS_PATCH = "canceled-status"
"""A run that ends canceled by request says so in `KeelStatus` (`canceled`); before, it kept `running` or
`suspended`, the values of an open run, and a query on `KeelStatus` alone listed it. Asked only as such a run
ends; it may go once no run canceled before this release is open."""


def mark_canceled() -> None:
    """`KeelStatus=canceled` for a run ending canceled by request (`CANCELED_STATUS_PATCH`)."""
    if workflow.cancellation_reason() is not None and workflow.patched(CANCELED_STATUS_PATCH):
        workflow.upsert_search_attributes([KEEL_STATUS.value_set("canceled")])


__all__ = [
    "CANCELED_STATUS_PATCH",
    "CANCEL_ENDS_RUN_PATCH",
    "STOPPED_FOR_CANCEL",
    "cancel_arrives",
    "end_if_canceled",
    "mark_canceled",
    "stopped_for_cancel",
]
