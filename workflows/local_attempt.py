"""One attempt of an activity as a local activity, the rule `AgentRun` and `DefinitionRun` share: run it once in
the workflow task; on a failure Temporal would retry, wait the retry delay and let the caller run it again as a
regular activity, whose attempts and last failure the UI shows under Pending Activities (a local activity's
retries happen inside the worker, out of the UI's sight). A failure Temporal would not retry is raised.

Retryable is Temporal's own rule for an activity's failure: a timeout, or an application error not marked
`non_retryable` (the activity's error itself, not an error it was raised from).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError
from temporalio.exceptions import TimeoutError as TemporalTimeout

from keel.workflows.search_attributes import KEEL_STATUS

ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
R = TypeVar("R")

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


CANCELED_STATUS_PATCH = "canceled-status"
"""A run that ends canceled by request says so in `KeelStatus` (`canceled`); before, it kept `running` or
`suspended`, the values of an open run, and a query on `KeelStatus` alone listed it. Asked only as such a run
ends; it may go once no run canceled before this release is open."""


def mark_canceled() -> None:
    """`KeelStatus=canceled` for a run ending canceled by request (`CANCELED_STATUS_PATCH`)."""
    if workflow.cancellation_reason() is not None and workflow.patched(CANCELED_STATUS_PATCH):
        workflow.upsert_search_attributes([KEEL_STATUS.value_set("canceled")])


async def once_locally(
    name: str,
    arg: Any,
    result_type: type[R],
    timeout: timedelta,
    summary: str,
    retry_after: timedelta,
    *,
    say_so: bool = True,
    rule: Callable[[FailureError], bool] | None = None,
) -> R | None:
    """The local attempt's result; None after a retryable failure, once the retry delay has passed (the
    failure's `next_retry_delay` if it gave one, e.g. a provider's retry-after, else `retry_after`). `say_so`:
    the run's current details tell the UI why the step goes on as an activity (a caller whose details say
    something else passes False). `rule`: whether a failure is retried, if not by Temporal's rule (runs
    recorded under another)."""
    try:
        result: R = await workflow.execute_local_activity(
            name, arg, result_type=result_type, start_to_close_timeout=timeout, retry_policy=ONE_ATTEMPT,
            summary=summary,
        )  # fmt: skip
        return result
    except (ActivityError, ApplicationError, TemporalTimeout) as err:  # a local activity fails with its cause
        cause = activity_cause(err)
        if isinstance(cause, CancelledError):  # canceled with its run, not failed
            end_if_canceled()
        if not (rule or retryable)(err):
            raise
        if say_so:
            workflow.set_current_details(
                f"{summary} failed once ({cause}); retrying it as an activity: see Pending Activities"
            )
        delay = cause.next_retry_delay if isinstance(cause, ApplicationError) else None
        await workflow.sleep(delay or retry_after)
        return None


def activity_cause(err: FailureError) -> FailureError | BaseException:
    """What an activity failed with: the cause of an `ActivityError`, else the error itself."""
    return err.cause if isinstance(err, ActivityError) and err.cause is not None else err


def retryable(err: FailureError) -> bool:
    """Whether Temporal would retry the activity's failure."""
    cause = activity_cause(err)
    return not (isinstance(cause, ApplicationError) and cause.non_retryable)


__all__ = [
    "CANCELED_STATUS_PATCH",
    "CANCEL_ENDS_RUN_PATCH",
    "ONE_ATTEMPT",
    "activity_cause",
    "canceled_by_request",
    "end_if_canceled",
    "mark_canceled",
    "once_locally",
    "retryable",
]
