"""`TimeTravelling`: what a definition run needs for Mastra's time travel (`run.timeTravel`) on Temporal's reset.

Keel's client resets the run's execution to the workflow task in which the chosen step first started (the
`time_travel_point` query says which), so Temporal runs the run again from there in a new execution and keeps
the old one. A reset cannot change what the run reads, and a signal cannot be part of the reset (the server
Keel runs refuses a post-reset signal), so the client stores the instruction before the reset (a `run_steps`
answer of the run, `time_travel_key`) and the run reads it where it matters:

- It sees each reset in its history: core gives the run a new random seed at the reset point (the seed
  callback); a reset to the run's first workflow task gives none live (core sends its seed with the activation
  that starts the run, before the callback is registered), so a later execution whose first step starts live
  counts one there. A replay of the whole history does deliver those seeds, one per such reset (a run time
  travelled twice to a step it began in that task has two): a first step started in that task counts them as
  one too, as the run did live. Each reset seen passes a patch (`keel-time-travel-N`) that is recorded only
  when the run meets it live: so histories recorded before this module, and resets made before it, replay as
  they ran.
- At its next step start it asks a local activity (`keel.reset_origin`) whether Keel's time travel made the
  reset (the reset's reason says so), from which execution, and for the instruction stored for it. A plain
  reset (the Temporal UI's) goes on at once. Stored before the reset, the instruction survives a client that
  stops right after it: nothing is left for the run to wait for.
- The client also signals the instruction to the new execution just after the reset (`time_travel`). A run
  whose local activity found no stored instruction waits for that signal: a reset by a client of the version
  before (which only signalled), and the histories recorded then (tests/histories/definition_time_travelled
  .json). `restart` releases such a run whose signal was lost. Delete the signal, and this wait, once no
  client of that version resets runs and no run it reset is open, together with that history.
- The local activity's attempts are bounded (`RESET_ORIGIN_RETRY`): when all fail, the run goes on with a
  signalled instruction if one came, else as a plain reset (`LoadDefinitionResult.reset_origin_goes_on`; runs
  loaded before it ask `RESET_ORIGIN_FAILED_PATCH`).

The instruction carries Mastra's options for the step (`inputData`, `resumeData`, `requestContext`) and the
outputs of the steps before it that the reset's workflow task would otherwise run again: the idempotent steps
it had chained locally into that task, the step's parallel siblings. The run returns those instead of running
them, and runs the step and everything after it. Children it starts from then on get ids of their own (`-tN`),
so an agent step runs in a fresh thread instead of its earlier run's; the earlier runs stay, as the old
execution does.

All of it is in the history (the seed update, the patch marker, the local activity's result with the
instruction, the signal), so the new execution replays (a worker gives it its own execution id, which the run
compares with its first execution's; Temporal's standalone Replayer takes the id from the started event, which
a reset copies from the execution reset: replay an execution reset to a later task with its own id there, as
tests/http_api/test_workflow_time_travel.py's `replays` does); a run never reset meets none of it. Which of them a
run goes on with is decided by the local activity's recorded result alone, so no patch guards it: a result
recorded before it had an instruction replays the wait for the signal, as it ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as TemporalTimeout

from keel.protocol import names
from keel.protocol.workflow_definition import (
    ConditionalEntry,
    ForeachEntry,
    GraphEntry,
    LoopEntry,
    ParallelEntry,
)
from keel.workflows.contracts import ResetOrigin, ResetOriginInput, TimeTravel, TimeTravelPoint
from keel.workflows.graph_values import MISSING

RESET_ORIGIN_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=10
)
"""About two and a half minutes of attempts: then the run goes on without knowing (`_wait_for_instruction`)."""
RESET_ORIGIN_FAILED_PATCH = "keel-reset-origin-failed-goes-on"
"""Marks a run that went on after `keel.reset_origin` failed (before it, the run failed). Asked only by runs that
loaded their definition before `LoadDefinitionResult.reset_origin_goes_on`."""


def entry_step_ids(entry: GraphEntry) -> list[str]:
    """The step ids an entry runs, as Mastra's time travel addresses them (`getStepIds`)."""
    if isinstance(entry, ParallelEntry | ConditionalEntry):
        return [s.id for s in entry.steps]
    if isinstance(entry, ForeachEntry | LoopEntry):
        return [entry.step.id]
    return [entry.id]


@dataclass(frozen=True)
class _Point:
    entry: int
    task: int
    offset: int


@dataclass(frozen=True)
class _Done:
    key: str
    step_id: str
    entry: int
    task: int
    output: Any


class TimeTravelling:
    _tool_calls: int
    """The tool calls the run has made (`DefinitionRun`)."""
    _resume_schemas: dict[str, dict[str, Any]]
    """Step id → the resume schema it last suspended with (`Resumable`)."""
    _reset_origin_goes_on: bool
    """The run's load said so (`LoadDefinitionResult.reset_origin_goes_on`; `DefinitionRun`)."""

    def __init__(self) -> None:
        super().__init__()
        self._resets_seen = 0
        self._reset_origin_goes_on = False
        self._resets_gated = 0
        self._first_start_seen = False
        self._gating = False
        self._waiting_for: str | None = None
        self._travel_signals: list[TimeTravel] = []
        self._taken: set[str] = set()
        """The executions whose resets' instructions the run went on with."""
        self._travel: TimeTravel | None = None
        self._travels = 0
        self._recorded: dict[str, list[Any]] = {}
        self._target_reached = False
        self._resume_given = False
        self._input_for: str | None = None
        self._points: dict[str, _Point] = {}
        self._calls_at_task: dict[int, int] = {}
        self._done: list[_Done] = []
        self._gated_from: tuple[int, int] | None = None
        self._entry_index = -1
        self._first_task = workflow.info().get_current_history_length()
        """The workflow task the run's activation that starts it is in (its started event id)."""
        workflow.register_random_seed_callback(self._reset_seen)

    def _reset_seen(self, seed: int) -> None:
        self._resets_seen += 1

    # --- at each entry and step start -------------------------------------------------------------------

    async def travel_gate(self) -> None:
        """Before a step starts: if the run was reset since the last one, and Keel's time travel did it, take
        that reset's instruction (steps running together wait for the first one's answer)."""
        if not self._first_start_seen:
            self._first_start_seen = True
            info = workflow.info()
            if info.get_current_history_length() == self._first_task:
                # Every seed seen so far is a reset's to the run's first workflow task: live, their seeds came
                # with the run's start and none reached the callback; replayed, each does. Count one, as live.
                self._resets_seen = min(self._resets_seen, 1)
            if self._resets_seen == 0 and info.run_id != info.first_execution_run_id:
                self._resets_seen = 1  # a reset to the first workflow task, or the replay of a later one's start
        seen = self._resets_seen
        if seen > self._resets_gated:
            self._resets_gated = seen
            if workflow.patched(f"keel-time-travel-{seen}"):
                began = workflow.info().get_current_history_length()
                self._gating = True
                try:
                    await self._wait_for_instruction()
                finally:
                    self._gating = False
                # Steps that start in the task the signal came in count as started in the task the wait began
                # in: a time travel to one of them then resets the run to before this wait, never into the task
                # that delivers its signal again (with the new reset's, ahead of the new reset's seed update).
                self._gated_from = (workflow.info().get_current_history_length(), began)
        elif self._gating:
            await workflow.wait_condition(lambda: not self._gating)

    async def _wait_for_instruction(self) -> None:
        info = workflow.info()
        try:
            origin: ResetOrigin = await workflow.execute_local_activity(
                names.RESET_ORIGIN,
                ResetOriginInput(workflow_id=info.workflow_id, run_id=info.run_id),
                result_type=ResetOrigin,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RESET_ORIGIN_RETRY,
                summary="reset: by Keel's time travel?",
            )
        except (ActivityError, ApplicationError, TemporalTimeout) as err:  # a local activity may fail with its cause
            # Every attempt failed (they are bounded): the run cannot tell what reset it. It takes a `time_travel`
            # signal sent to it and not taken yet (the client before this one signalled its instruction), else
            # goes on as a plain reset (as `restart` lets it), rather than fail or wait for what may never come.
            # Runs that loaded their definition before `reset_origin_goes_on` ask the patch (before it, such a
            # failure failed the run, as it still does when such a history replays); delete the patch once no run
            # loaded before that field is open or kept (past retention).
            if not (self._reset_origin_goes_on or workflow.patched(RESET_ORIGIN_FAILED_PATCH)):
                raise
            unheard = [s for s in self._travel_signals if s.base_execution_id not in self._taken]
            workflow.logger.warning(
                "keel.reset_origin failed (%s): the run goes on %s",
                err.cause if isinstance(err, ActivityError) and err.cause is not None else err,
                "with the time travel signalled to it" if unheard else "as a plain reset",
            )
            if unheard:
                self._take(unheard[-1])
            return
        if not origin.time_travel or origin.base_execution_id is None:
            return
        base = origin.base_execution_id
        if origin.instruction is not None:  # stored by Keel's client before its reset
            self._take(origin.instruction)
            return
        # Reset by a client that only signalled the instruction after its reset (and histories recorded then).
        self._waiting_for = base
        await workflow.wait_condition(lambda: any(s.base_execution_id == base for s in self._travel_signals))
        self._waiting_for = None
        self._take(next(s for s in self._travel_signals if s.base_execution_id == base))

    def _take(self, travel: TimeTravel) -> None:
        """Go on with the time travel's instruction (`step` None: released without one, a plain reset)."""
        self._taken.add(travel.base_execution_id)
        if travel.step is None:
            return
        self._travel, self._travels = travel, self._travels + 1
        self._recorded = {key: list(outputs) for key, outputs in travel.recorded.items()}
        self._target_reached = self._resume_given = False

    def step_task(self, tool_calls: int) -> int:
        """The workflow task (its started event id) a step starts in; notes the tool calls made before it."""
        task = workflow.info().get_current_history_length()
        if self._gated_from is not None and task == self._gated_from[0]:
            task = self._gated_from[1]
        self._calls_at_task.setdefault(task, tool_calls)
        return task

    def entry_started(
        self, ids: list[str], index: int, *, inner: bool, events_offset: int, tool_calls: int
    ) -> TimeTravel | None:
        """Where each step of the entry first started; the instruction in force when the entry holds its step
        (once). `inner`: the ids are a parallel's or conditional's steps (the new input is the step's alone)."""
        task = self.step_task(tool_calls)
        self._entry_index = index
        for step_id in ids:
            self._points.setdefault(step_id, _Point(index, task, events_offset))
        travel = self._travel
        if travel is None or self._target_reached or travel.step not in ids:
            return None
        self._target_reached = True
        if inner and travel.has_input_data:
            self._input_for = travel.step
        return travel

    def input_override(self, step_id: str) -> Any:
        """The new input of a parallel's or conditional's step time travelled to (once), else MISSING."""
        if self._input_for != step_id or self._travel is None:
            return MISSING
        self._input_for = None
        return self._travel.input_data

    def recorded_output(self, key: str) -> Any:
        """The output the step had before the reset, when the instruction carries one for its next call."""
        outputs = self._recorded.get(key)
        return outputs.pop(0) if outputs else MISSING

    def travel_resume(self, key: str) -> Any:
        """The resume data the time travel gives the step's first call (once), else None."""
        travel = self._travel
        if travel is None or self._resume_given or travel.step != key or travel.resume_data is None:
            return None
        self._resume_given = True
        return travel.resume_data

    def step_done(self, key: str, step_id: str, task: int, output: Any) -> None:
        self._done.append(_Done(key, step_id, self._entry_index, task, output))

    def child_suffix(self) -> str:
        """Appended to the ids of children started after a time travel: their earlier runs keep theirs."""
        return f"-t{self._travels}" if self._travels else ""

    # --- handlers ---------------------------------------------------------------------------------------

    @workflow.signal(name=names.TIME_TRAVEL_SIGNAL)
    def time_travel(self, travel: TimeTravel) -> None:
        self._travel_signals.append(travel)

    @workflow.query(name=names.TIME_TRAVEL_POINT_QUERY)
    def time_travel_point(self, step: str) -> TimeTravelPoint | None:
        point = self._points.get(step)
        if point is None:
            return None
        recorded: dict[str, list[Any]] = {}
        for done in self._done:
            sibling = done.entry == point.entry and done.step_id != step
            if done.task >= point.task and (done.entry < point.entry or sibling):
                recorded.setdefault(done.key, []).append(done.output)
        calls_total = self._tool_calls
        return TimeTravelPoint(
            step=step,
            entry=point.entry,
            history_length=point.task,
            events_offset=point.offset,
            tool_calls=self._calls_at_task.get(point.task, calls_total),
            tool_calls_total=calls_total,
            recorded=recorded,
            resume_schema=self._resume_schemas.get(step),
        )

    @workflow.query(name=names.TIME_TRAVEL_WAITING_QUERY)
    def time_travel_waiting(self) -> str | None:
        """The execution whose reset's `time_travel` signal the run waits for, if it does."""
        return self._waiting_for
