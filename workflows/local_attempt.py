"""One attempt of an activity as a local activity, the rule `AgentRun` and `DefinitionRun` share: run it once in
the workflow task; on a failure Temporal would retry, wait the retry delay and let the caller run it again as a
regular activity, whose attempts and last failure the UI shows under Pending Activities (a local activity's
retries happen inside the worker, out of the UI's sight). A failure Temporal would not retry is raised.

Retryable is Temporal's own rule for an activity's failure: a timeout, or an application error not marked
`non_retryable` (the activity's error itself, not an error it was raised from).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError
from temporalio.exceptions import TimeoutError as TemporalTimeout

from keel.workflows.cancellation import cancel_arrives, end_if_canceled, stopped_for_cancel

ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
R = TypeVar("R")


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
        if stopped_for_cancel(cause):  # the step saw its run's cancel first: here, so no caller takes it for a failure
            await cancel_arrives()
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


__all__ = ["ONE_ATTEMPT", "activity_cause", "once_locally", "retryable"]
