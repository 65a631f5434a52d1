"""Runs whose workflow task no worker can complete, reset to their last completed task: what an operator would do
with `temporal workflow reset --type LastWorkflowTask`, done by every worker for its task queue.

One known way in (temporalio 1.35, found by `make chaos`): a workflow task completed with a local activity's
result marker and nothing the workflow did next (the worker's task ended between them), while an update accepted
earlier still waits. The next worker replays the marker, the update completes, and the SDK sends the completion's
command without its message: the server refuses every attempt (`BadUpdateWorkflowExecutionMessage: ...
referenced absent message ID <update>/request/complete`) and the run never moves again. A reset to the last
completed task drops the lone marker; the local activity runs again (as after any crash in it) and the run goes
on. The update that waited fails ("the workflow completed before the update"); Keel's clients then ask the run
now current (`Workflows.settle`, `KeelClient.settle`, `Session.settled`); children keep running and report to
the new execution. Signals received after that task are reapplied by the reset.
Test: `tests/test_update_after_local_marker.py`.

How runs are found: Temporal marks a run whose workflow task keeps failing (`TemporalReportedProblems`, after
`system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute` failures: 5 by default, 2 on `keel dev`'s
server); every `HEAL_EVERY_SECONDS` each worker lists its queue's marked runs and resets those whose task is failing
now (attempt 2 or more) and whose history has the shape above (`reset_point`: the refusal itself is in no
history). At most `MAX_HEALS` resets per workflow id; two workers resetting the same run send the same request id,
so one reset happens. A server without the attribute (before 1.28) refuses the list: healing is then off, said
once in the log. `KEEL_HEAL_STUCK_TASKS=0` turns it off. Retire this module when the SDK sends the message (the
test says so when the run is no longer refused).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Iterable
from itertools import takewhile

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import (
    DescribeWorkflowExecutionRequest,
    GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from keel.client.temporal_reset import reset_to_task

HEAL_EVERY_SECONDS = 10.0
MAX_HEALS = 3
"""Resets of one workflow id by this healing at most: a run that keeps getting stuck is left for a person."""
REASON = "keel: stuck on a workflow task no worker can complete"
LOCAL_MARKER = "core_local_activity"
_RESET = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW
_BAD_UPDATE = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_BAD_UPDATE_WORKFLOW_EXECUTION_MESSAGE

log = logging.getLogger(__name__)


def enabled() -> bool:
    return os.environ.get("KEEL_HEAL_STUCK_TASKS", "1") not in ("0", "false", "no", "off")


async def _newest_first(client: Client, workflow_id: str, run_id: str) -> AsyncIterator[HistoryEvent]:
    execution = WorkflowExecution(workflow_id=workflow_id, run_id=run_id)
    token = b""
    while True:
        page = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace, execution=execution, maximum_page_size=500, next_page_token=token
            )
        )
        for event in page.history.events:
            yield event
        token = page.next_page_token
        if not token:
            return


async def reset_point(client: Client, workflow_id: str, run_id: str) -> int | None:
    """`reset_point_of` the run's history, read from the server newest first."""
    return reset_point_of([event async for event in _newest_first(client, workflow_id, run_id)])


def reset_point_of(newest_first: Iterable[HistoryEvent]) -> int | None:
    """The event id to reset the run to, if its history has the module's shape: the last completed workflow
    task recorded local activity markers and nothing else before the next task was scheduled; since then no task
    failed for another cause (the refusal itself may be in no history: the failed attempts after a timed-out one
    are not recorded) and no reset of ours was made (it did not help); an update accepted before it is still open;
    fewer than `MAX_HEALS` resets of ours in the history (a reset copies the events before its point)."""
    after: list[HistoryEvent] = []  # newer than the last completed task, newest first
    point: int | None = None
    completed: set[str] = set()
    still_open = False
    heals = 0
    for event in newest_first:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failed = event.workflow_task_failed_event_attributes
            ours = failed.cause == _RESET and failed.failure.message.startswith(REASON)
            heals += ours
            if point is None and (ours or failed.cause != _BAD_UPDATE):
                return None
        if point is None:
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                point = event.event_id
            else:
                after.append(event)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            completed.add(event.workflow_execution_update_completed_event_attributes.meta.update_id)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            accepted = event.workflow_execution_update_accepted_event_attributes.protocol_instance_id
            still_open = still_open or accepted not in completed
    recorded = list(takewhile(lambda e: e.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, reversed(after)))
    lone_markers = bool(recorded) and all(_is_local_marker(e) for e in recorded)
    if point is None or not lone_markers or not still_open or heals >= MAX_HEALS:
        return None
    return point


def _is_local_marker(event: HistoryEvent) -> bool:
    return (
        event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and event.marker_recorded_event_attributes.marker_name == LOCAL_MARKER
    )


async def _failing_task_attempt(client: Client, workflow_id: str, run_id: str) -> tuple[int, int]:
    """The run's pending workflow task's attempt (0: none) and its history length."""
    described = await client.workflow_service.describe_workflow_execution(
        DescribeWorkflowExecutionRequest(
            namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id)
        )
    )
    return described.pending_workflow_task.attempt, described.workflow_execution_info.history_length


_judged: dict[tuple[str, int], None] = {}
"""(run id, history length) of runs found not of the shape: not read again until their history grows."""


async def heal_once(client: Client, task_queue: str) -> list[str]:
    """Reset every running run of `task_queue` stuck as the module says; the ids of those reset. A run that
    cannot be looked at or reset is logged and left for the next pass."""
    if "'" in task_queue or "\\" in task_queue:
        return []  # not in a query's string as it is (no task queue Keel names has them)
    query = f"ExecutionStatus = 'Running' AND TaskQueue = '{task_queue}' AND TemporalReportedProblems IS NOT NULL"
    healed = []
    async for run in client.list_workflows(query, limit=100):
        try:
            attempt, length = await _failing_task_attempt(client, run.id, run.run_id)
            if attempt < 2 or (run.run_id, length) in _judged:
                continue  # its task is not failing now, or it was found not of the shape
            point = await reset_point(client, run.id, run.run_id)
            if point is None:
                if len(_judged) >= 10_000:
                    _judged.clear()
                _judged[(run.run_id, length)] = None
                continue
            reason = f"{REASON} (an update's completion sent without its message); reset to its last completed task"
            await reset_to_task(client, run.id, run.run_id, point, reason, request_id=f"keel-heal-{run.run_id}-{point}")
        except RPCError as err:
            log.warning("Run %s could not be looked at or reset (tried again later): %s", run.id, err.message)
            continue
        log.warning("Run %s was stuck on a workflow task no worker can complete; reset to event %d", run.id, point)
        healed.append(run.id)
    return healed


async def keep_healing(client: Client, task_queue: str, every: float = HEAL_EVERY_SECONDS) -> None:
    """`heal_once` every `every` seconds until cancelled; a failed pass is logged and the next one tried."""
    while True:
        await asyncio.sleep(every)
        try:
            await heal_once(client, task_queue)
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT and "TemporalReportedProblems" in err.message:
                log.warning("Stuck runs are not healed on this server: %s", err.message)  # before 1.28
                return
            log.warning("Looking for stuck runs failed (tried again in %.0f s): %s", every, err.message)
        except Exception:
            log.exception("Looking for stuck runs failed (tried again in %.0f s)", every)


__all__ = [
    "HEAL_EVERY_SECONDS",
    "MAX_HEALS",
    "REASON",
    "enabled",
    "heal_once",
    "keep_healing",
    "reset_point",
    "reset_point_of",
]
