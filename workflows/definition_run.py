"""`DefinitionRun`: one deterministic interpreter for every stored workflow definition. Registered as Temporal's
dynamic workflow, so a definition saved with id `X` runs as workflow type `X` (`temporal workflow start --type X
--input '{...}'` works without Keel's client).

The run's first (local) activity loads the latest version of the definition and checks the input against its
input schema; its result, in the history, pins that version: editing or deleting the definition never changes a run
in flight. Entries map to Temporal: tool steps are activities (an idempotent tool's first attempt a local one,
except right after a resume, whose update is answered when its workflow task completes), agent steps `AgentRun`
child workflows, nested workflows child workflows (of their own type), sleeps timers; mappings, predicates,
parallel, foreach, conditional and loop are workflow code. A tool that suspends makes the run wait
(`KeelStatus=suspended`) for the `resume` signal or the `resume_step` update, `{"step", "resumeData"}`, checked
against the step's resume schema.

Failure semantics: a failing step fails the run (non-retryable, saying which step); inside `parallel`, a
`conditional` or a `foreach`, the first failure fails the run once the siblings already running finish.

Time travel (Mastra's `run.timeTravel`): a Temporal reset to the workflow task a step first started in, then
the `time_travel` signal with the step's new input and what the steps before it returned
(`keel.workflows.time_travel`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, ChildWorkflowError, FailureError
from temporalio.exceptions import TimeoutError as TemporalTimeout

from keel.protocol import names
from keel.protocol.identifiers import workflow_id_problem
from keel.protocol.workflow_definition import (
    AgentEntry,
    ClassifierEntry,
    ConditionalEntry,
    ForeachEntry,
    GraphEntry,
    InnerStep,
    LoopEntry,
    MappingEntry,
    NestedWorkflowEntry,
    ParallelEntry,
    SleepEntry,
    SleepUntilEntry,
    ToolEntry,
    WorkflowDefinition,
    schema_problems,
)
from keel.workflows.cancellation import cancel_arrives, end_if_canceled, mark_canceled, stopped_for_cancel
from keel.workflows.contracts import (
    AgentRunInput,
    AgentRunResult,
    ClassifierStepInput,
    LoadDefinitionInput,
    LoadDefinitionResult,
    StepState,
    WorkflowToolInput,
    WorkflowToolResult,
)
from keel.workflows.graph_values import MISSING, RunData, get_path, holds, map_values
from keel.workflows.local_attempt import once_locally, retryable
from keel.workflows.resumable import Resumable, bounded_value
from keel.workflows.search_attributes import KEEL_STATUS
from keel.workflows.task_budget import TaskBudget, input_bytes
from keel.workflows.time_travel import TimeTravelling, entry_step_ids

MAX_LOOP_ITERATIONS = 1_000
MAX_FOREACH_ITEMS = 5_000
"""Both keep a run's history well under Temporal's 51,200 events (a tool step costs about 6)."""
TOOL_TIMEOUT = timedelta(minutes=10)
TOOL_HEARTBEAT = timedelta(seconds=10)
MAX_LOCAL_STEPS_PER_TASK = 4
"""Local tool steps a run chains before it runs one as an activity: their results travel in one workflow task
completion, so a foreach over many items still crosses workflow tasks (and sees a continue-as-new suggestion)."""
MAX_IN_FLIGHT = 500
"""Activities and child runs a run has running at once, whatever the foreach's `concurrency`: Temporal's server
fails every workflow task that would pass 2,000 pending activities (or child runs), again and again. Well under
it, as the more end while a workflow task runs, the more often the server closes that task to hand it what it
buffered (`FORCE_CLOSE_COMMAND`, redone at once): 8 times in a 2,500-item foreach at 1,000."""
LOCAL_RETRY_DELAY = timedelta(seconds=1)
"""After a tool step's local attempt fails: the wait before it is retried as an activity."""
NESTING_MEMO = "keelNesting"
"""How deep a nested workflow's run is (its parent's depth + 1), in the memo its parent starts it with."""
MAX_NESTING = 32
"""The deepest workflow steps nest. Stored definitions are checked for cycles, but two saved at once can each
pass and make one: its runs then started nested runs without end (121 in 6 s)."""
FOREACH_CANCEL_PATCH = "keel-foreach-ends-on-cancel"
"""A foreach item canceled with its run (an activity item's cancellation is its error) ends the foreach; before,
the lane took it for the item's failure and started the next item, as an activity no one canceled, and the
run stayed open until every item had run. Asked only then; it may go once no run canceled in a foreach before
this release is open."""
TEMPORAL_RETRY_RULE_PATCH = "keel-local-tool-step-temporal-retry-rule"
"""A tool step's failed local attempt is retried as an activity when Temporal would retry it (the activity's
error is retryable: the tool's error before its last try, a timeout), as an agent run's local steps are. Runs
before it judged by the innermost error, so a tool's first error was always tried once more. The old branch
(in `_local_retry_rule`) may go once no run started before this patch is open (runs are kept open at most by
their suspended steps: check `temporal workflow count --query "KeelKind='workflow' AND ExecutionStatus='Running'"`
for runs started before the release that carries it). Runs that load their definition now take the rule from the
load result (`LoadDefinitionResult.temporal_retry_rule`) and never ask it."""
LOAD_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


class StepFailed(Exception):
    """A step of the graph failed: the run fails with this message."""


@workflow.defn(dynamic=True, sandboxed=False)
class DefinitionRun(TimeTravelling, Resumable):
    def __init__(self) -> None:
        super().__init__()
        self._children = 0
        self._idempotent: dict[str, bool] = {}
        self._request_context: dict[str, Any] = {}
        self._local_tool_steps = False
        self._temporal_retry_rule = False
        self._foreach_lanes = False
        self._local_in_task = 0  # local tool steps since the run last waited on the server
        self._start_budget = False
        self._re2_patterns = False
        self._budget = TaskBudget()
        self._in_flight = 0  # activities and child runs started and not ended
        self._tool_calls = 0  # tool step calls so far (each call's storage key)

    # --- the run ----------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, args: Sequence[RawValue]) -> Any:
        try:
            return await self._run(args)
        except asyncio.CancelledError:
            # Its state and stream say so (no command: queries read them), so a reader's stream ends.
            self._state.status = "canceled"
            self.workflow_finished("canceled")
            mark_canceled()
            raise

    async def _run(self, args: Sequence[RawValue]) -> Any:
        info = workflow.info()
        self.mark_keel_run()
        try:
            input_data = _one_object(info.workflow_type, args)
            # A local activity: the run's first workflow task loads the definition and schedules the first step
            # (no server round trip of its own); its result, a marker in the history, pins the version.
            loaded: LoadDefinitionResult = await workflow.execute_local_activity(
                names.LOAD_DEFINITION,
                LoadDefinitionInput(workflow_id=info.workflow_type, input_data=input_data),
                result_type=LoadDefinitionResult,
                start_to_close_timeout=timedelta(minutes=1),
                retry_policy=LOAD_RETRY,
                summary=f"load definition {info.workflow_type}",
            )
            try:  # checked on load too: a definition stored without checks fails the run, not its workflow task
                definition = WorkflowDefinition.model_validate(loaded.definition)
            except ValidationError as err:
                raise StepFailed(f"The stored definition {info.workflow_type!r} is invalid: {err}") from None
            self._idempotent = loaded.idempotent_tools
            self._local_tool_steps = loaded.local_tool_steps
            self._temporal_retry_rule = loaded.temporal_retry_rule
            self._foreach_lanes = loaded.foreach_lanes
            self._start_budget = loaded.start_budget
            self._reset_origin_goes_on = loaded.reset_origin_goes_on
            self._re2_patterns = loaded.re2_patterns
            self._state.version, self._state.hash = loaded.version, loaded.hash
            if loaded.memo_version or workflow.memo_value("definitionHash", default=None) != loaded.hash:
                workflow.upsert_memo({"definitionVersion": loaded.version, "definitionHash": loaded.hash})
            workflow.set_current_details(f"definition {definition.id} v{loaded.version} ({loaded.hash})")
            # The request context rides in the memo (set by `Workflows.start`), so the input stays the inputData
            # alone and `temporal workflow start --input` works unchanged.
            context = workflow.memo_value("requestContext", default={})
            self._request_context = dict(context) if isinstance(context, dict) else {}
            data = RunData(init_data=input_data, input_data=input_data, request_context=self._request_context)
            for index, entry in enumerate(definition.graph):
                data.input_data = await self._entry(entry, data, index)
            # The caller's schema: on RE2 for runs that loaded their definition since (`re2_patterns`).
            problems = schema_problems(definition.output_schema, data.input_data, on_re2=self._re2_patterns)
            if problems:
                raise StepFailed("Invalid output: " + "; ".join(problems))
        except (StepFailed, ActivityError, ChildWorkflowError, ApplicationError) as err:
            if isinstance(_cause(err), CancelledError):  # a step canceled with the run: the run is canceled
                end_if_canceled()
            if stopped_for_cancel(_cause(err)):  # a local step saw the cancel before the run could
                await cancel_arrives()
            message = str(_cause(err)) if isinstance(err, FailureError) else str(err)
            self._state.status, self._state.error = "failed", message
            self.workflow_finished("failed")
            workflow.upsert_search_attributes([KEEL_STATUS.value_set("failed")])
            await self.finish_handlers()
            raise ApplicationError(message, type=type(_cause(err)).__name__, non_retryable=True) from None
        self._state.status, self._state.result = "success", data.input_data
        self.workflow_finished("success", data.input_data)
        workflow.upsert_search_attributes([KEEL_STATUS.value_set("completed")])
        await self.finish_handlers()
        return data.input_data

    async def _entry(self, entry: GraphEntry, data: RunData, index: int) -> Any:
        await self.travel_gate()
        inner = isinstance(entry, ParallelEntry | ConditionalEntry)
        travel = self.entry_started(
            entry_step_ids(entry), index, inner=inner, events_offset=len(self._events), tool_calls=self._tool_calls
        )
        if travel is not None:  # the entry holding the step a time travel runs the run again from
            if travel.request_context:
                self._request_context = data.request_context = {**self._request_context, **travel.request_context}
            if travel.has_input_data and not inner:
                data.input_data = travel.input_data
        if isinstance(entry, MappingEntry):
            return self._record(entry.id, map_values(entry, data), data)
        if isinstance(entry, SleepEntry):
            self._state.steps[entry.id] = StepState(status="running")
            try:
                duration = timedelta(milliseconds=entry.duration)
            except OverflowError:  # stored before such a duration was refused: it failed the workflow task, each retry
                raise StepFailed(f"Step {entry.id!r}: a sleep of {entry.duration} ms is longer than time") from None
            await workflow.sleep(duration)
            return self._record(entry.id, data.input_data, data)
        if isinstance(entry, SleepUntilEntry):
            self._state.steps[entry.id] = StepState(status="running")
            until = datetime.fromisoformat(entry.date.replace("Z", "+00:00"))
            if until.tzinfo is None:  # stored before such a date was refused (it failed the workflow task): UTC
                until = until.replace(tzinfo=UTC)
            delay = (until - workflow.now()).total_seconds()
            if delay > 0:
                await workflow.sleep(delay)
            return self._record(entry.id, data.input_data, data)
        if isinstance(entry, ParallelEntry):
            outputs = await _all(self._step(s, data.input_data, data) for s in entry.steps)
            return {s.id: out for s, out in zip(entry.steps, outputs, strict=True)}
        if isinstance(entry, ConditionalEntry):
            chosen = [s for s, p in zip(entry.steps, entry.predicates, strict=True) if holds(p, data)]
            outputs = await _all(self._step(s, data.input_data, data) for s in chosen)
            return {s.id: out for s, out in zip(chosen, outputs, strict=True)}
        if isinstance(entry, ForeachEntry):
            return await self._foreach(entry, data)
        if isinstance(entry, LoopEntry):
            return await self._loop(entry, data)
        return await self._step(entry, data.input_data, data)

    async def _foreach(self, entry: ForeachEntry, data: RunData) -> list[Any]:
        items = data.input_data
        if not isinstance(items, list):
            raise StepFailed(f"Step {entry.step.id!r}: foreach needs an array as its input, got {_kind(items)}")
        if len(items) > MAX_FOREACH_ITEMS:
            raise StepFailed(f"Step {entry.step.id!r}: {len(items)} items; foreach takes at most {MAX_FOREACH_ITEMS}")
        if not self._foreach_lanes:
            return await self._foreach_waking(entry, data, items)
        width = min(entry.opts.concurrency if entry.opts else 1, len(items))
        # `concurrency` lanes, each taking the next item as soon as its last one ends, in the same coroutine: an
        # item's start follows the end of the one before it in its lane in every reading of the run's events (a
        # new item woken in a task of its own would start after whatever else its activation resolved, an order
        # that differs between the live run and its replay, and a reader's offset would skip or repeat events).
        results: list[Any] = [None] * len(items)
        taken = 0

        async def lane() -> None:
            nonlocal taken
            while taken < len(items):
                index, taken = taken, taken + 1
                key = f"{entry.step.id}[{index}]"
                try:
                    results[index] = await self._step(entry.step, items[index], data, key=key)
                except Exception as err:  # every item still runs; the first failure (by index) fails the step
                    if _canceled_item(err):  # the run's cancel, not the item's failure: no item starts after it
                        raise asyncio.CancelledError() from None
                    results[index] = _Failed(err)

        await asyncio.gather(*(lane() for _ in range(width)))
        for result in results:
            if isinstance(result, _Failed):
                raise result.error
        self._record(entry.step.id, results, data)
        return results

    async def _foreach_waking(self, entry: ForeachEntry, data: RunData, items: list[Any]) -> list[Any]:
        """The foreach of runs that loaded their definition before `LoadDefinitionResult.foreach_lanes`: a task per
        item, woken by a semaphore. Delete once no such run is open or within the namespace's retention."""
        slots = asyncio.Semaphore(entry.opts.concurrency if entry.opts else 1)

        async def one(index: int, item: Any) -> Any:
            async with slots:
                return await self._step(entry.step, item, data, key=f"{entry.step.id}[{index}]")

        outputs = await _all(one(i, item) for i, item in enumerate(items))
        self._record(entry.step.id, outputs, data)
        return outputs

    async def _loop(self, entry: LoopEntry, data: RunData) -> Any:
        value = data.input_data
        for _ in range(MAX_LOOP_ITERATIONS):
            value = await self._step(entry.step, value, data)
            data.input_data = value
            done = holds(entry.predicate, data)
            if (entry.loop_type == "dowhile" and not done) or (entry.loop_type == "dountil" and done):
                return value
        raise StepFailed(f"Step {entry.step.id!r}: the loop ran {MAX_LOOP_ITERATIONS} times without ending")

    async def _step(self, step: InnerStep | GraphEntry, value: Any, data: RunData, *, key: str | None = None) -> Any:
        await self.travel_gate()
        step_id = str(getattr(step, "id", ""))
        task = self.step_task(self._tool_calls)
        if key is None and (new_input := self.input_override(step_id)) is not MISSING:
            value = new_input
        self._state.steps[key or step_id] = StepState(status="running")
        self.step_started(key or step_id, value)
        recorded = self.recorded_output(key or step_id)
        if recorded is not MISSING:  # a step before the one time travelled to: what it returned before
            output = recorded
        elif isinstance(step, ToolEntry):
            output = await self._tool(step, value, key or step_id)
        elif isinstance(step, AgentEntry):
            output = await self._agent(step, value)
        elif isinstance(step, NestedWorkflowEntry):
            output = await self._nested(step, value)
        elif isinstance(step, ClassifierEntry):
            output = await self._classifier(step, value, data)
        else:
            raise StepFailed(f"Step {step_id!r}: cannot run a {getattr(step, 'type', '?')} entry here")
        self._state.steps[key or step_id] = StepState(status="success", output=bounded_value(output))
        self.step_finished(key or step_id, value, output)
        self.step_done(key or step_id, step_id, task, output)
        if key is None:
            data.step_results[step_id] = output
        return output

    def _record(self, step_id: str, output: Any, data: RunData) -> Any:
        """A step run in workflow code (a mapping, a sleep, a foreach's whole result): its result, its chunks."""
        data.step_results[step_id] = output
        self._state.steps[step_id] = StepState(status="success", output=bounded_value(output))
        self.step_started(step_id, data.input_data)
        self.step_finished(step_id, data.input_data, output)
        return output

    async def _tool(self, step: ToolEntry, value: Any, key: str) -> Any:
        retries = step.options.retries if step.options and step.options.retries is not None else 0
        idempotent = self._idempotent.get(step.tool_id, False)
        resume_data: Any = self.travel_resume(key)
        while True:  # each call: the first, then one per resume
            # A tool's own error: tried `retries` times more (the activity says when it is the last); a lost
            # worker or a timeout: an idempotent tool at least five times in all.
            attempts = max(5, retries + 1) if idempotent else retries + 1
            self.step_task(self._tool_calls)
            self._tool_calls += 1
            step_input = WorkflowToolInput(
                run_id=workflow.info().workflow_id,
                workflow_id=workflow.info().workflow_type,
                step_id=key,
                tool_id=step.tool_id,
                input_data=value,
                resume_data=resume_data,
                request_context=self._request_context or None,
                call_key=f"{workflow.info().first_execution_run_id}/{self._tool_calls}",
                tries=retries + 1,
            )
            summary = f"{key}: {step.tool_id}"
            result: WorkflowToolResult | None = None
            if (
                self._local_tool_steps
                and idempotent
                and resume_data is None
                and self._local_in_task < MAX_LOCAL_STEPS_PER_TASK
            ):
                # Not counted per workflow task (by the history's length): a replay may resolve a local step in
                # the task after the one that ran it live (when that task was completed while the step ran), and
                # then decide another step differently (a nondeterminism error, found by a kill -9 test).
                self._local_in_task += 1
                # The run's details name its definition version: the UI's Pending Activities say the rest.
                result = await once_locally(
                    names.WORKFLOW_TOOL_STEP, step_input, WorkflowToolResult, TOOL_TIMEOUT, summary,
                    LOCAL_RETRY_DELAY, say_so=False,
                    rule=retryable if self._temporal_retry_rule else _local_retry_rule,
                )  # fmt: skip
                if result is None:
                    self._local_in_task = 0
                attempts -= result is None  # the local attempt counts
            if result is None:
                try:
                    async with self._starting(step_input):
                        result = await workflow.execute_activity(
                            names.WORKFLOW_TOOL_STEP,
                            step_input,
                            result_type=WorkflowToolResult,
                            start_to_close_timeout=TOOL_TIMEOUT,
                            heartbeat_timeout=TOOL_HEARTBEAT,
                            retry_policy=RetryPolicy(maximum_attempts=attempts),
                            summary=summary,
                        )
                except ActivityError as err:
                    if not isinstance(err.cause, TemporalTimeout):
                        raise
                    why = "its worker was lost or it ran too long"
                    if not idempotent and retries == 0:
                        why += "; a tool that is not idempotent and has no retries is not started again"
                    raise StepFailed(f"Step {key!r}: tool {step.tool_id!r} did not answer ({why})") from None
                self._local_in_task = 0
            if result.suspended is None:
                return result.output
            resume_data = await self.suspend(key, result.suspended.payload, result.suspended.resume_schema)
            self._local_in_task = 0

    async def _classifier(self, step: ClassifierEntry, value: Any, data: RunData) -> Any:
        state = value
        if step.state is not None:
            root, _, path = step.state.path.partition(".")
            state = get_path(data.roots().get(root), path) if root in data.roots() else None
        attempts = (step.options.retries if step.options and step.options.retries else 0) + 1
        step_input = ClassifierStepInput(
            run_id=workflow.info().workflow_id,
            workflow_id=workflow.info().workflow_type,
            step_id=step.id,
            classifier_id=step.classifier_id,
            state=None if state is MISSING else state,
            request_context=self._request_context or None,
        )
        async with self._starting(step_input):
            return await workflow.execute_activity(
                names.WORKFLOW_CLASSIFIER_STEP,
                step_input,
                start_to_close_timeout=TOOL_TIMEOUT,
                heartbeat_timeout=TOOL_HEARTBEAT,
                retry_policy=RetryPolicy(maximum_attempts=attempts),
                summary=f"{step.id}: {step.classifier_id}",
            )

    async def _agent(self, step: AgentEntry, value: Any) -> Any:
        prompt = value.get("prompt") if isinstance(value, dict) else value
        if not isinstance(prompt, str) or not prompt:
            raise StepFailed(f"Step {step.id!r}: an agent step takes {{prompt: string}}, got {_kind(value)}")
        child = AgentRunInput(agent_id=step.agent_id, messages=prompt)
        async with self._starting(child):
            result: AgentRunResult = await workflow.execute_child_workflow(
                names.AGENT_RUN,
                child,
                id=self._child_id(step.id),
                result_type=AgentRunResult,
            )
        return {"text": result.text}

    async def _nested(self, step: NestedWorkflowEntry, value: Any) -> Any:
        depth = _nesting(workflow.memo_value(NESTING_MEMO, 0))
        if depth >= MAX_NESTING:
            raise StepFailed(
                f"Step {step.id!r}: workflows nest {depth} deep here, at most {MAX_NESTING}: do the definitions "
                f"reach {step.workflow_id!r} again? (each was checked for cycles when stored, but two saved at "
                "once can make one)"
            )
        async with self._starting(value):
            return await workflow.execute_child_workflow(
                step.workflow_id, value, id=self._child_id(step.id), memo={NESTING_MEMO: depth + 1}
            )

    @contextlib.asynccontextmanager
    async def _starting(self, value: Any) -> AsyncIterator[None]:
        """Around an activity or child run whose whole input is `value`: it starts once the current workflow task
        has room for it (`keel.workflows.task_budget`) and fewer than `MAX_IN_FLIGHT` are running; else it waits
        for a later task. Runs that loaded their definition before `LoadDefinitionResult.start_budget` started
        every step at once."""
        if not self._start_budget:
            yield
            return
        size = input_bytes(value)
        while not (self._budget.fits(size) and self._in_flight < MAX_IN_FLIGHT):
            await self._budget.next_task()
        self._budget.spend(size)
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1

    def _child_id(self, step_id: str) -> str:
        self._children += 1
        child_id = f"{workflow.info().workflow_id}-{step_id}-{self._children}{self.child_suffix()}"
        # Temporal fails the workflow task of a child start past its bound on ids, each retry: no run went past
        # such an id (on a server with the default bound), so the check needs no patch. A patch would not do here:
        # asked after a local step's result, a replay can meet it a workflow task before the one that recorded it.
        problem = workflow_id_problem("The run id and step id", child_id)
        if problem is not None:
            raise StepFailed(f"Step {step_id!r} was not started: {problem}")
        return child_id


def _nesting(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass
class _Failed:
    """A foreach item's failure, kept until every item has run."""

    error: Exception


async def _all(coros: Any) -> list[Any]:
    """Run steps together; the first failure is raised once every sibling has finished (none left running)."""
    results = await asyncio.gather(*coros, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return list(results)


def _one_object(workflow_type: str, args: Sequence[RawValue]) -> dict[str, Any]:
    if len(args) != 1:
        raise ApplicationError(
            f"Workflow {workflow_type!r} takes one input, a JSON object (its inputData); got {len(args)} inputs",
            type="InvalidWorkflowInput",
            non_retryable=True,
        )
    try:
        value = workflow.payload_converter().from_payload(args[0].payload)
    except Exception as err:
        raise ApplicationError(
            f"Workflow {workflow_type!r}: its input could not be read: {err}",
            type="InvalidWorkflowInput",
            non_retryable=True,
        ) from None
    if not isinstance(value, dict):
        raise ApplicationError(
            f"Workflow {workflow_type!r} takes a JSON object as input (its inputData); got {_kind(value)}",
            type="InvalidWorkflowInput",
            non_retryable=True,
        )
    return value


def _local_retry_rule(err: FailureError) -> bool:
    """Whether a tool step's failed local attempt is retried as an activity, in runs that loaded their definition
    before `LoadDefinitionResult.temporal_retry_rule`. Asked only after a failure (the patch marker, and the search
    attribute upsert that comes with it, only in runs that had one)."""
    if workflow.patched(TEMPORAL_RETRY_RULE_PATCH):
        return retryable(err)
    cause = _cause(err)  # the rule before: the innermost error's flag
    return not (isinstance(cause, ApplicationError) and cause.non_retryable)


def _canceled_item(err: BaseException) -> bool:
    """Whether a foreach item's error is its cancellation by the run's cancel (`FOREACH_CANCEL_PATCH`)."""
    canceled = isinstance(_cause(err), CancelledError) and workflow.cancellation_reason() is not None
    return canceled and workflow.patched(FOREACH_CANCEL_PATCH)


def _cause(err: BaseException) -> BaseException:
    while isinstance(err, FailureError) and err.cause is not None:
        err = err.cause
    return err


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", type(None): "nothing"}.get(
        type(value), type(value).__name__
    )
