"""Temporal's reset of one execution of a run to one of its workflow tasks: what both kinds of time travel share,
an agent run's (`keel.client.reset`) and a workflow definition run's (`keel.client.workflow_time_travel`).

Temporal's reset makes a new execution of the run (same workflow id, new execution id) that replays the old
one's history up to the chosen workflow task, then runs that task again; the old execution stays in the run's
history (completed, or terminated by the reset if it was open), and the UI shows the reset on both.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, ResetReapplyExcludeType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError, RPCStatusCode

from keel.client.errors import KeelClientError, RunNotFound

if TYPE_CHECKING:
    from keel.client.keel_client import KeelClient


class ResetRefused(KeelClientError):
    """A reset that cannot be done: no such step, a run with a step in flight, a thread that went on after it."""


async def describe_run(keel: KeelClient, run_id: str) -> WorkflowExecutionDescription:
    """The run's latest execution (`RunNotFound` when there is none)."""
    try:
        return await keel.temporal.get_workflow_handle(run_id).describe()
    except RPCError as err:
        raise rpc_error(run_id, err) from None


def task_completed_before(events: Sequence[HistoryEvent], event_id: int) -> int:
    """The last `WorkflowTaskCompleted` before event `event_id`: the task that made it (its command's event)."""
    completed = [
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and e.event_id < event_id
    ]
    return completed[-1]


def task_completed_after(events: Sequence[HistoryEvent], started_id: int) -> int | None:
    """The `WorkflowTaskCompleted` of the task whose `WorkflowTaskStarted` is `started_id` (the first after it)."""
    return next(
        (
            e.event_id
            for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and e.event_id > started_id
        ),
        None,
    )


async def reset_to_task(
    temporal: Client,
    run_id: str,
    execution: str,
    completed_event_id: int,
    reason: str,
    *,
    exclude: Sequence[ResetReapplyExcludeType.ValueType] = (),
    request_id: str | None = None,
) -> str:
    """Reset execution `execution` of the run to the workflow task completed by `completed_event_id` (that task
    runs again); the new execution's id. `exclude`: what the old execution received after that task and the new
    one is not to get again (by default Temporal applies its signals and updates again). Resets sent with the same
    `request_id` are one reset (default: a new id each call)."""
    request = ResetWorkflowExecutionRequest(
        namespace=temporal.namespace,
        workflow_execution=WorkflowExecution(workflow_id=run_id, run_id=execution),
        reason=reason,
        workflow_task_finish_event_id=completed_event_id,
        request_id=request_id or str(uuid.uuid4()),
        reset_reapply_exclude_types=list(exclude),
        identity=temporal.identity,
    )
    response = await temporal.workflow_service.reset_workflow_execution(request)
    return str(response.run_id)


def rpc_error(run_id: str, err: RPCError) -> KeelClientError:
    if err.status == RPCStatusCode.NOT_FOUND:
        return RunNotFound(run_id)
    return KeelClientError(f"Temporal error for run {run_id!r}: {err.message}")


__all__ = [
    "ResetRefused",
    "describe_run",
    "reset_to_task",
    "rpc_error",
    "task_completed_after",
    "task_completed_before",
]
