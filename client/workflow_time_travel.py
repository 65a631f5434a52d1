"""Time travel of a stored workflow definition's run (Mastra's `run.timeTravel`): `keel workflows reset RUN
--to-step STEP` and `POST /api/workflows/:workflowId/time-travel?runId=RUN` run the run again from a step.

It is Temporal's reset (`keel.client.temporal_reset`), as for an agent run (`keel.client.reset`): the run's
execution is reset to the workflow task in which the step first started (the run's `time_travel_point` query
says which: it notes each step's task as it goes), so a new execution replays everything before that task and
runs the step and every later one again; the old execution stays in the run's history, and the Temporal UI
shows the reset. What Keel stored for those calls is forgotten first: the start counts of the tool calls made
from that task on (`forget_steps`), so the steps that run again tell their tools it is a first attempt.

Mastra's options cannot ride on the reset: a reset replays the run's own inputs, and the server refuses a
signal as part of a reset. So they are stored before the reset (a `run_steps` answer of the run, keyed by the
execution reset), and the run's new execution reads them at its next step start with a local activity, which
also tells it whether Keel's time travel made the reset (`keel.workflows.time_travel`): a plain reset from the
Temporal UI goes on at once. Nothing is sent to the new execution: a signal racing the steps it runs in its
first workflow task would fail that task's completion and run them again. The instruction carries:

- `inputData`: the step's new input (checked here against the tool's input model for a tool step);
- `resumeData`: given to the step's tool on its first call, as Mastra resumes a step time travelled to;
- `requestContext`: merged into the run's, from the step on;
- the outputs the steps before it had, for those the reset's workflow task would otherwise run again: steps
  chained locally into that task before it, and its parallel siblings. Only they need it: everything else
  before the step is replayed from the history, so nothing before the step runs again.

The reset, the local activity's result and what the run decides from them are all in the new execution's
history, so it replays. This was chosen over a new execution seeded with the earlier steps' results because
that would not be Temporal's reset: the UI would show a new run rather than the same run gone back to a step.

Not done, and refused with a reason: Mastra's `context` and `nestedStepsContext` (the steps before are
Temporal's record, not the caller's), `initialState` (definitions have no run state) and `perStep`. A step of
a nested workflow is its own run: time travel that run. A run with a step in flight is refused, as Mastra
refuses a running run; a suspended or ended one is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType, ResetReapplyExcludeType
from temporalio.client import WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.service import RPCError

from keel.client.errors import InvalidResumeData, KeelClientError, NoWorker, RunNotFound
from keel.client.temporal_reset import (
    ResetRefused,
    describe_run,
    reset_to_task,
    task_completed_after,
)
from keel.protocol import names
from keel.protocol.validation import describe_validation_error
from keel.protocol.workflow_definition import (
    ConditionalEntry,
    ForeachEntry,
    GraphEntry,
    LoopEntry,
    ParallelEntry,
    ToolEntry,
    WorkflowDefinition,
    resume_data_problem,
)
from keel.storage import StepAnswer
from keel.workflows.contracts import TimeTravel, TimeTravelPoint, time_travel_key
from keel.workflows.search_attributes import KEEL_KIND, KEEL_STATUS
from keel.workflows.time_travel import entry_step_ids

if TYPE_CHECKING:
    from keel.app import Tool
    from keel.client.keel_client import KeelClient
    from keel.storage import Storage

NOT_AGAIN = (
    ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_SIGNAL,
    ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_UPDATE,
    ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_CANCEL_REQUEST,
)
"""What the old execution received after the step is not applied to the new one: resumes of its later steps
(the step runs again, and suspends again if it does), and a cancellation (a canceled run may be time travelled)."""


class RunStillRunning(ResetRefused):
    """Mastra's refusal for a run with a step in flight (an HTTP 409)."""


@dataclass(frozen=True)
class WorkflowTimeTravel:
    """What a time travel did."""

    run_id: str
    workflow_id: str
    step: str
    base_execution: str
    """The execution reset: it stays in the run's history."""
    execution: str
    """The new execution, running the step and every later one again."""
    reset_event_id: int
    """The old execution's `WorkflowTaskCompleted` the new one replays up to (that task runs again)."""
    events_offset: int
    """The stream chunks before the step's entry: the new execution's chunks from it on are the step's."""
    reused: list[str] = field(default_factory=list)
    """Steps before it that the reset's task would have run again: they return their earlier outputs."""
    forgotten_calls: int = 0
    """Tool calls of the step and later ones whose start counts were forgotten."""

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "workflowId": self.workflow_id,
            "step": self.step,
            "baseExecutionId": self.base_execution,
            "executionId": self.execution,
            "resetEventId": self.reset_event_id,
            "eventsOffset": self.events_offset,
            "reusedSteps": self.reused,
            "forgottenToolCalls": self.forgotten_calls,
        }


async def time_travel(
    keel: KeelClient,
    storage: Storage,
    run_id: str,
    step: str,
    *,
    workflow_id: str | None = None,
    input_data: Any = None,
    resume_data: Any = None,
    request_context: dict[str, Any] | None = None,
    tools: Mapping[str, Tool] | None = None,
    reason: str | None = None,
) -> WorkflowTimeTravel:
    """Run the run again from step `step` (an id in its definition's graph): a reset, then its instruction.

    Args:
        workflow_id: when given, the run must be one of this workflow's (`RunNotFound` otherwise).
        input_data: the step's new input (None: the input it had).
        tools: the app's workflow tools, to check `input_data` against a tool step's input model.
        reason: shown in the Temporal UI with the reset, after Keel's own.

    Raises:
        RunNotFound: no run (of `workflow_id`) has this id.
        RunStillRunning: a step of the run is in flight.
        ResetRefused: not a definition run; no such step in its graph, or the run never reached it; bad input.
    """
    desc = await describe_run(keel, run_id)
    kind = desc.workflow_type
    if workflow_id is not None and kind != workflow_id:
        raise RunNotFound(run_id)
    attributes = desc.typed_search_attributes
    memo = await desc.memo()
    version, pinned = memo.get("definitionVersion"), memo.get("definitionHash")
    if attributes.get(KEEL_KIND) != "workflow" or not isinstance(version, int):
        raise ResetRefused(
            f"Run {run_id!r} is not a run of a stored workflow definition ({kind}): time travel re-runs those "
            "(an agent run: keel reset)"
        )
    if desc.status == WorkflowExecutionStatus.RUNNING and attributes.get(KEEL_STATUS) != "suspended":
        raise RunStillRunning("This workflow run is still running, cannot time travel")
    stored = await storage.get_definition(kind, version)
    if stored is None:
        raise ResetRefused(f"Run {run_id!r} ran version {version} of workflow {kind!r}, which storage no longer has")
    entry = _entry_of(WorkflowDefinition.model_validate(stored.definition), step)
    if resume_data is not None and isinstance(entry, ForeachEntry):
        raise ResetRefused(
            f"Cannot time travel run {run_id!r} to step {step!r} with resumeData: it is a foreach step, which runs "
            "once per item, and resumeData goes to one call. Time travel without it, then resume the item that "
            f"suspends (step '{step}[i]')"
        )
    if input_data is not None:
        _check_input(entry, step, input_data, tools)

    execution = keel.temporal.get_workflow_handle(run_id, run_id=desc.run_id)
    point = await _point(keel, execution, run_id, step, desc.task_queue or keel.task_queue)
    if resume_data is not None and (problem := resume_data_problem(step, point.resume_schema, resume_data)):
        raise InvalidResumeData(problem)  # as a resume's is
    history = await execution.fetch_history()
    reset_event = task_completed_after(history.events, point.history_length)
    if reset_event is None:
        raise ResetRefused(f"Cannot time travel run {run_id!r} to step {step!r}: its workflow task did not complete")
    if not _definition_loaded_before(history.events, reset_event):  # the run's first task loads it again
        latest = await storage.get_definition(kind)
        if latest is None or latest.hash != pinned:
            raise ResetRefused(
                f"Cannot time travel run {run_id!r} to step {step!r}: the run started it in its first workflow "
                f"task, which loads workflow {kind!r} again, and it changed since the run started (version "
                f"{version}): start a new run instead"
            )

    first = history.events[0].workflow_execution_started_event_attributes.first_execution_run_id or desc.run_id
    calls = [f"{first}/{n}" for n in range(point.tool_calls + 1, point.tool_calls_total + 1)]
    await storage.forget_steps(run_id, calls)
    instruction = TimeTravel(
        base_execution_id=desc.run_id,
        step=step,
        input_data=input_data,
        has_input_data=input_data is not None,
        resume_data=resume_data,
        request_context=request_context or None,
        recorded=point.recorded,
    )
    # Stored before the reset, where the new execution's `keel.reset_origin` reads it: a client that stops
    # right after the reset leaves nothing for the run to wait for.
    key = time_travel_key(desc.run_id)
    await storage.write(run_id, answer=StepAnswer(key, instruction.model_dump(mode="json")))
    told = f"{names.TIME_TRAVEL_REASON}: run {run_id} again from step {step!r}"
    try:
        new = await reset_to_task(
            keel.temporal, run_id, desc.run_id, reset_event, f"{told} ({reason})" if reason else told, exclude=NOT_AGAIN
        )
    except RPCError as err:
        raise KeelClientError(f"Temporal refused to reset run {run_id!r} ({err.message})") from None
    return WorkflowTimeTravel(
        run_id=run_id,
        workflow_id=kind,
        step=step,
        base_execution=desc.run_id,
        execution=new,
        reset_event_id=reset_event,
        events_offset=point.events_offset,
        reused=sorted(point.recorded),
        forgotten_calls=len(calls),
    )


async def release(keel: KeelClient, storage: Storage, run_id: str) -> TimeTravel | None:
    """Let a run waiting for its time travel's `time_travel` signal go on (reset by the client of the version
    before, which only signalled the instruction, and stopped before it could): with the instruction if one is
    stored for its reset, else as a plain reset (`step` None). What it was sent; None when it does not wait."""
    handle = keel.temporal.get_workflow_handle(run_id)
    try:
        waiting = await handle.query(names.TIME_TRAVEL_WAITING_QUERY)
    except (WorkflowQueryFailedError, RPCError):  # a code workflow has no such query; an ended run waits for none
        return None
    if not isinstance(waiting, str):
        return None
    stored = (await storage.begin_step(run_id, answer_id=time_travel_key(waiting))).answer
    travel = TimeTravel.model_validate(stored) if stored is not None else TimeTravel(base_execution_id=waiting)
    await handle.signal(names.TIME_TRAVEL_SIGNAL, travel)
    return travel


def _entry_of(definition: WorkflowDefinition, step: str) -> GraphEntry:
    for entry in definition.graph:
        if step in entry_step_ids(entry):
            return entry
    raise ResetRefused(f"Time travel target step not found in execution graph: {step!r}. Verify the step id/path.")


def _check_input(entry: GraphEntry, step: str, input_data: Any, tools: Mapping[str, Tool] | None) -> None:
    if isinstance(entry, ForeachEntry) and not isinstance(input_data, list):
        raise ResetRefused(f"Invalid inputData: foreach step {step!r} takes an array (the items it runs over)")
    inner: Any = entry
    if isinstance(entry, ParallelEntry | ConditionalEntry):
        inner = next(s for s in entry.steps if s.id == step)
    elif isinstance(entry, ForeachEntry | LoopEntry):
        inner = entry.step
    if not isinstance(inner, ToolEntry) or tools is None or inner.tool_id not in tools:
        return
    items = input_data if isinstance(entry, ForeachEntry) else [input_data]
    for item in items:
        try:
            tools[inner.tool_id].parse_args(item if isinstance(item, dict) else {})
        except ValidationError as err:
            raise ResetRefused(f"Invalid inputData: {describe_validation_error(err)}") from None


async def _point(keel: KeelClient, execution: Any, run_id: str, step: str, queue: str) -> TimeTravelPoint:
    """Where `step` began, asked of the run (a query: a worker answers it). No worker polling the run's queue is
    `NoWorker` at once (a 503), not the server's "no poller" 30 s later (it was a 500 and a traceback)."""
    from keel.client.keel_client import WORKER_ANSWER_SECONDS

    if not await keel.workers(queue):
        raise NoWorker(queue)
    try:
        raw = await execution.query(
            names.TIME_TRAVEL_POINT_QUERY, step, rpc_timeout=timedelta(seconds=WORKER_ANSWER_SECONDS)
        )
    except WorkflowQueryFailedError as err:
        raise KeelClientError(f"Run {run_id!r} cannot say where step {step!r} began: {err}") from None
    except RPCError as err:  # a timeout: none of the workers seen answered in time
        raise await keel.worker_error(run_id, err) from None
    if raw is None:
        raise ResetRefused(f"Cannot time travel run {run_id!r} to step {step!r}: the run never reached it")
    return TimeTravelPoint.model_validate(raw)


def _definition_loaded_before(events: Any, event_id: int) -> bool:
    """Whether the run's definition was loaded (its first local activity recorded) before event `event_id`."""
    return any(
        e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
        and e.event_id < event_id
        for e in events
    )


__all__ = ["RunStillRunning", "WorkflowTimeTravel", "release", "time_travel"]
