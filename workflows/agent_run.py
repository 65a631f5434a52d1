"""`AgentRun`: one agent turn as a Temporal workflow.

model step -> tool policy -> (approval wait) -> tool activities -> model step ... -> finish or `maxSteps`.

The conversation lives in storage; the workflow passes references (thread id and message ids), so its history
grows by a constant per step. Tool approval is a wait on workflow state, released by the `tool_approval` signal
or the `approve_tool_call` update.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, ChildWorkflowError, TimeoutType
from temporalio.exceptions import TimeoutError as TemporalTimeout

from keel.protocol import (
    ApprovalDecision,
    FinishReason,
    InputMessage,
    MessageRecord,
    ToolCallChunk,
    ToolErrorChunk,
    ToolErrorPayload,
    ToolOutputDeniedChunk,
    ToolOutputDeniedPayload,
    ToolResultChunk,
    ToolResultPart,
    ToolResultPayload,
    args_digest,
    describe_validation_error,
    names,
)
from keel.protocol.controller_events import shown_args
from keel.protocol.identifiers import attribute_problem, run_ids_problem, workflow_id_problem
from keel.protocol.workflow_definition import schema_problems
from keel.workflows import run_telemetry
from keel.workflows.cancellation import cancel_arrives, end_if_canceled, mark_canceled, stopped_for_cancel
from keel.workflows.contracts import (
    ALL_SHAPES,
    LEGACY_LOCAL_STEPS_PER_TASK,
    LOCAL_STEP_BYTES_PER_TASK,
    MAX_FILE_READS,
    MAX_PROCESSES,
    RUN_GENERATION,
    AgentRunInput,
    AgentRunResult,
    ApprovalAccepted,
    DeliveredMessage,
    FinishRunInput,
    FinishRunResult,
    ForkThreadInput,
    KillProcessesInput,
    ModelStepInput,
    ModelStepResult,
    PendingToolCall,
    PendingWrites,
    PersistWritesInput,
    PlannedToolCall,
    RunCarry,
    RunSettled,
    RunShape,
    StepSuspension,
    SubagentPlan,
    SubagentTurn,
    SuspendedToolCall,
    ToolApproval,
    ToolCallInput,
    ToolCallResult,
    ToolResume,
    ToolsThenModelInput,
    ToolsThenModelResult,
    TurnConfig,
)
from keel.workflows.local_attempt import ONE_ATTEMPT, activity_cause, once_locally
from keel.workflows.options import options_for
from keel.workflows.search_attributes import (
    KEEL_AGENT_ID,
    KEEL_KIND,
    KEEL_RESOURCE_ID,
    KEEL_STATUS,
    KEEL_THREAD_ID,
)
from keel.workflows.task_budget import TaskBudget, input_bytes

KEEL_RUN_ATTRIBUTES = (KEEL_KIND, KEEL_STATUS, KEEL_AGENT_ID, KEEL_THREAD_ID, KEEL_RESOURCE_ID)
RUN_ID_REUSED = "RunIdReused"
"""The error type of a first model step that found its run id held by another execution."""

FUSED_STEPS_PATCH = "tools-then-model-activity"
"""Runs recorded before this patch ran every tool call and every model step as activities of their own. Only
runs whose history holds no `RunShape` marker (started before shapes were pinned) still consult it."""

PERSIST_BEFORE_CONTINUE_PATCH = "persist-before-continue-as-new"
"""Runs recorded before this patch carried the last step's tool results across continue-as-new."""

DELIVERED_IDS_PATCH = "delivered-message-ids"
"""Delivered user messages take ids of their own (`names.delivered_message_id`), no longer the run's next message
sequence number: a workflow task executed again (the server refused the run's completion because a message came
in) drains the message before a step it had run as a local activity, and that step must keep its answer's id.
Runs that drained a message before this patch keep the old ids; the patch may go once none is open (runs are
short-lived: a release after this one).
"""

SUSPENDED_STEP_KEEPS_WRITES_PATCH = "suspended-fused-step-keeps-writes"
"""A tool that suspends inside a fused step stops it before its model step, which was to store the run's pending
writes (delivered user messages, declined calls): they go back to the run, and the step after the resume stores
them. Runs that suspended so before this patch lost them; the patch may go once none of those is open (a run
suspended before this release may wait on a person for days: keep it a release or two, then cut the history)."""

REFUSED_RUN_UNLISTED_PATCH = "refused-run-unlisted"
"""An execution refused its run id (a `temporal workflow start` reusing a run's id) removes Keel's search
attributes, so `KeelKind='agent'` lists and counts never show it beside the run that holds the id. Executions
refused before this patch were left listed as failed runs; the patch may go once no such execution is open (a
refused execution fails in its first workflow task, so it never is: it can go with the next history cut)."""

SIGNAL_WAITS_FOR_STEP_PATCH = "approval-signal-waits-for-step"
"""A `tool_approval` signal for a call not seen yet, while a model step runs, waits for the step (as the update
does) and then decides the call or is recorded as rejected. Runs recorded before this patch rejected it at once;
the patch is asked only then, so it may go once no run that got such a signal before this release is open."""

APPROVAL_BEFORE_FIRST_STEP_PATCH = "approval-signal-before-first-step"
"""A `tool_approval` signal that reaches an execution before its first model step has started waits for that step
too. That is where one sent while the step ran lands when the step's workflow task was lost with its worker (the
next worker runs the execution from its start, the signal in its first activation, before `run`). Executions
recorded before this patch rejected it; the patch is asked only then, so it may go once no run that got such a
signal before this release is open (with `SIGNAL_WAITS_FOR_STEP_PATCH`)."""

LONG_IDS_PATCH = "keel-long-ids"
"""A run whose agent, thread or resource id (or run id, without a thread) is past what Temporal indexes fails at
once with `InvalidInput`. Before, the server terminated it at its first upsert. Asked only for such a run, at its
start, so no other run records it, and a run that went on past such an id (on a server whose bound was raised)
keeps its branch. It may go once no run started before it is open."""
TURN_CONFIG_BEFORE_RUN_PATCH = "turn-config-before-run"
"""A `turn_config` signal that reaches a turn's execution before `run` has begun is kept and applied when it
begins. That is where one sent during the turn's first step lands when that step's workflow task was lost with
its worker (signal handlers of the first activation run before `run`); executions recorded before this patch
dropped it, and their steps went on under the permissions the session had replaced. The patch is asked only
then; it may go once no turn that got such a signal before this release is open."""

RULES_IN_SHAPE = {
    PERSIST_BEFORE_CONTINUE_PATCH: 2,
    DELIVERED_IDS_PATCH: 2,
    SUSPENDED_STEP_KEEPS_WRITES_PATCH: 2,
    REFUSED_RUN_UNLISTED_PATCH: 2,
}
"""Each rule and the shape generation (`RunShape.generation`) from which a run takes it from its shape, asking no
patch. Runs of an earlier generation ask the rule's patch when they first need it, often in reaction to a local
step's result (a replay can meet that a workflow task before the one that recorded the marker, and fail). A new
rule comes with a new generation (`RUN_GENERATION`). The generation-1 branches may go
once no run pinned before generation 2 is open (runs waiting on a person may be open for days: keep them a
release or two)."""

TOOL_BUDGET_GENERATION = 3
"""From this `RunShape.generation` a step's tool calls that run as activities of their own, and its subagents'
child runs, start as their inputs fit in the workflow task (`RUN_GENERATION`)."""

LEGACY_SHAPE = RunShape(model_as_local_activity=True, fuse_tools_with_next_model_step=True)
"""What every worker ran before shapes were pinned (fusing still gated by `FUSED_STEPS_PATCH`)."""

DECLINED_REASON = "Tool call was not approved by the user"

MAX_PENDING_RESULT_BYTES = 128 * 1024 * 1024
"""Tool results a step hands to the next one to persist (tools that ran as activities of their own); more become
errors for the model, so no activity input the workflow builds grows past what the payload store takes."""
MAX_REJECTED_SIGNALS = 20
MAX_INBOX = 100
"""User messages delivered into a run and not yet read by a model step; past it, one is refused (recorded)."""


# Unsandboxed: this is Keel's own code, and it runs no app code (agents and tools run in activities). Temporal's
# sandbox re-enters its module context for every payload of every workflow task (temporalio 1.35), which
# measured 3-6 ms of worker CPU per agent step, a quarter of its wall time (bench/README.md). The test suite runs
# it, and replays every recorded history, inside the sandbox as well (KeelPlugin(sandbox_keel_workflows=True)).
@workflow.defn(name=names.AGENT_RUN, sandboxed=False)
class AgentRun:
    def __init__(self) -> None:
        self._pending: dict[str, PendingToolCall] = {}  # the current step's calls awaiting a decision
        self._decisions: dict[str, ToolApproval] = {}  # decisions on those calls
        self._arrivals: dict[str, run_telemetry.Arrival] = {}  # how and when each of them arrived (for its span)
        # Verdicts of earlier steps, only for error messages: a model may reuse a tool call id in a later step.
        self._decided: dict[str, bool] = {}
        self._rejected: list[str] = []
        self._inbox: list[DeliveredMessage] = []  # delivered user messages no model step has read yet
        self._delivered: set[str] = set()  # their ids: a message delivered twice is read once
        self._refused: dict[str, str] = {}  # the last messages refused, by id: why (`message_refusal`)
        self._suspended: dict[str, SuspendedToolCall] = {}  # calls waiting for resume data
        self._resumes: dict[str, ToolResume] = {}  # resume data for them
        self._turn: TurnConfig | None = None  # a session's turn: its current mode and permissions
        self._ended = False  # the loop has returned: `settled` answers, then the run completes
        self._continuing = False  # about to continue as new: `settled` answers so the handlers can finish
        self._stepping = False  # a model step runs: the calls it will ask to approve are not known yet
        # `run` has begun. Before it, an execution's first model step is still to come: every execution starts
        # with one, reached without an await. Signals and updates of the first activation are handled first.
        self._begun = False
        self._early_turn: TurnConfig | None = None  # a `turn_config` that came before `run` began
        self._budget = TaskBudget()  # the tool calls' arguments started in the current workflow task

    # --- handlers ------------------------------------------------------------------------------------

    @workflow.query(name=names.PENDING_TOOL_CALLS_QUERY)
    def pending_tool_calls(self) -> list[PendingToolCall]:
        return [call for call_id, call in self._pending.items() if call_id not in self._decisions]

    @workflow.update(name=names.RUN_SETTLED_UPDATE, unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON)
    async def settled(self) -> RunSettled:
        """Once the run waits on a person (the calls to decide or to resume) or has ended: a client that
        started a run waits for it here instead of polling. No command: any run, of any shape, answers it. A run
        about to continue as new answers `continued` (it waits for its handlers to finish; the client asks the
        next execution), and one that fails or is canceled leaves it unanswered (the client sees it closed)."""
        waiting = self.pending_tool_calls
        await workflow.wait_condition(
            lambda: self._ended or self._continuing or bool(waiting()) or bool(self.suspended_tool_calls())
        )
        if self._ended:
            return RunSettled(ended=True)
        if self._continuing:
            return RunSettled(continued=True)
        return RunSettled(pending=self.pending_tool_calls(), suspended=self.suspended_tool_calls())

    @workflow.query(name=names.REJECTED_SIGNALS_QUERY)
    def rejected_signals(self) -> list[str]:
        """Why recent `tool_approval` signals were ignored (signals cannot answer their sender)."""
        return list(self._rejected)

    @workflow.query(name=names.MESSAGE_REFUSAL_QUERY)
    def message_refusal(self, message_id: str) -> str | None:
        """Why this execution refused the `user_message` of this id, if it did and has not taken it since: the
        sender asks after its signal (a query sees every signal sent before it)."""
        return self._refused.get(message_id)

    @workflow.signal(name=names.TOOL_APPROVAL_SIGNAL)
    async def tool_approval(self, raw: RawValue) -> None:
        # Decoded by hand so a malformed payload is recorded and ignored instead of failing the task.
        try:
            approval = workflow.payload_converter().from_payload(raw.payload, ToolApproval)
        except Exception as err:
            self._reject(f"malformed tool_approval payload: {err}")
            return
        if not isinstance(approval, ToolApproval):  # e.g. a binary/plain payload decodes to bytes
            self._reject("malformed tool_approval payload: expected a JSON object {toolCallId, approved}")
            return
        problem = self._approval_problem(approval)
        call_id = approval.tool_call_id
        if (
            problem
            and self._may_ask(call_id)
            and (self._begun or workflow.patched(APPROVAL_BEFORE_FIRST_STEP_PATCH))
            and workflow.patched(SIGNAL_WAITS_FOR_STEP_PATCH)
        ):
            await workflow.wait_condition(lambda: call_id in self._pending or self._past_step())
            problem = self._approval_problem(approval)
        if problem:
            self._reject(problem)
            return
        self._decisions[call_id] = approval
        self._arrivals[call_id] = run_telemetry.Arrival("signal", workflow.time_ns())

    def _may_ask(self, call_id: str) -> bool:
        """Whether the model step running now (or, before `run` has begun, the execution's first) may yet ask to
        approve `call_id`: the id is not one of this run's calls so far (the step streams and stores its
        `tool-call-approval` before the workflow has its answer, so a client approving from the stream can come
        first; and after a workflow task lost with its worker, the step runs again after the approval came)."""
        return (
            (self._stepping or not self._begun)
            and call_id not in self._pending
            and call_id not in self._decisions
            and (call_id not in self._decided)
        )

    def _past_step(self) -> bool:
        """The step an approval waits for (`_may_ask`) has answered: `run` has begun and no step runs."""
        return self._begun and not self._stepping

    @workflow.update(name=names.APPROVE_TOOL_CALL_UPDATE)
    async def approve_tool_call(self, approval: ToolApproval) -> ApprovalAccepted:
        call_id = approval.tool_call_id
        if call_id not in self._pending:  # accepted while the step that may ask for it ran (`_validate_approval`)
            await workflow.wait_condition(lambda: call_id in self._pending or self._past_step())
            problem = self._approval_problem(approval)
            if problem:
                raise ApplicationError(problem, type="ToolCallRejected", non_retryable=True)
        self._decisions[call_id] = approval
        self._arrivals[call_id] = run_telemetry.Arrival("update", workflow.time_ns())
        return ApprovalAccepted(tool_call_id=call_id)

    @approve_tool_call.validator
    def _validate_approval(self, approval: ToolApproval) -> None:
        """Refuses an approval that decides nothing, except one for a call not seen yet while a model step runs:
        the step streams and stores its `tool-call-approval` before the workflow has its answer, so a client
        approving from the stream can get here first, or in the workflow task that brings the answer (where the
        SDK applies updates before it). That one waits for the step (the handler), then decides the call or is
        refused. So does one that comes before `run` has begun (the execution's first step is still to come: a
        step lost with its worker runs again). Only new updates are validated; a replayed one's handler waits (or
        not) as it did when it was accepted."""
        if not isinstance(approval, ToolApproval):
            raise ValueError("approve_tool_call takes a JSON object {toolCallId, approved, reason?}")
        problem = self._approval_problem(approval)
        if problem and not self._may_ask(approval.tool_call_id):
            raise ValueError(problem)

    def _approval_problem(self, approval: ToolApproval) -> str | None:
        call_id = approval.tool_call_id
        pending = self._pending.get(call_id)
        if pending is not None and call_id not in self._decisions:
            if approval.step is not None and approval.step != pending.step:
                return f"tool call {call_id!r} pending now is step {pending.step}'s, not step {approval.step}'s"
            if approval.args_digest is not None and approval.args_digest != pending.args_digest:
                return (
                    f"tool call {call_id!r} pending now has arguments of digest {pending.args_digest}, "
                    f"not {approval.args_digest}"
                )
            return None
        earlier = self._decisions[call_id].approved if call_id in self._decisions else self._decided.get(call_id)
        if earlier is not None:
            return f"tool call {call_id!r} was already {'approved' if earlier else 'declined'}"
        waiting = sorted(c for c in self._pending if c not in self._decisions)
        return f"no pending tool call {call_id!r} (pending: {', '.join(waiting) or 'none'})"

    @workflow.query(name=names.SUSPENDED_TOOL_CALLS_QUERY)
    def suspended_tool_calls(self) -> list[SuspendedToolCall]:
        return [call for call_id, call in self._suspended.items() if call_id not in self._resumes]

    @workflow.signal(name=names.RESUME_TOOL_SIGNAL)
    def resume_tool(self, raw: RawValue) -> None:
        try:
            resume = workflow.payload_converter().from_payload(raw.payload, ToolResume)
        except Exception as err:
            self._reject(f"malformed resume_tool payload: {err}")
            return
        if not isinstance(resume, ToolResume):
            self._reject("malformed resume_tool payload: expected a JSON object {toolCallId, resumeData}")
            return
        problem = self._resume_problem(resume)
        if problem:
            self._reject(problem)
            return
        self._resumes[resume.tool_call_id] = resume

    @workflow.update(name=names.RESUME_TOOL_UPDATE)
    def resume_tool_call(self, resume: ToolResume) -> ApprovalAccepted:
        self._resumes[resume.tool_call_id] = resume
        return ApprovalAccepted(tool_call_id=resume.tool_call_id)

    @resume_tool_call.validator
    def _validate_resume(self, resume: ToolResume) -> None:
        if not isinstance(resume, ToolResume):
            raise ValueError("resume_tool_call takes a JSON object {toolCallId, resumeData}")
        problem = self._resume_problem(resume)
        if problem:
            raise ValueError(problem)

    def _resume_problem(self, resume: ToolResume) -> str | None:
        call = self._suspended.get(resume.tool_call_id)
        if call is None or resume.tool_call_id in self._resumes:
            waiting = sorted(c for c in self._suspended if c not in self._resumes)
            return f"no suspended tool call {resume.tool_call_id!r} (suspended: {', '.join(waiting) or 'none'})"
        # The tool's own schema (code), checked as recorded runs were: on Python's `re`.
        problems = schema_problems(call.resume_schema, resume.resume_data, on_re2=False) if call.resume_schema else []
        if problems:
            return f"resume data for {resume.tool_call_id!r} does not match its schema: {'; '.join(problems)}"
        return None

    @workflow.signal(name=names.TURN_CONFIG_SIGNAL)
    def turn_config(self, turn: TurnConfig) -> None:
        """From the session that runs this turn: its mode or permissions changed (later steps use them)."""
        if not isinstance(turn, TurnConfig):
            return
        if not self._begun:  # the first activation: `run` has not read the input's config yet
            self._early_turn = turn
        elif self._turn is not None and turn.session_id == self._turn.session_id:
            self._turn = turn

    @workflow.signal(name=names.USER_MESSAGE_SIGNAL)
    def user_message(self, raw: RawValue) -> None:
        try:
            message = workflow.payload_converter().from_payload(raw.payload, DeliveredMessage)
        except Exception as err:
            self._reject(f"malformed user_message payload: {err}")
            return
        if not isinstance(message, DeliveredMessage):
            self._reject("malformed user_message payload: expected a JSON object {id, content}")
            return
        if message.id in self._delivered:
            return
        if len(self._inbox) >= MAX_INBOX:
            reason = f"{MAX_INBOX} delivered messages are unread"
            self._reject(f"user_message {message.id!r} refused: {reason}")
            self._refused = {**dict(list(self._refused.items())[-(MAX_REJECTED_SIGNALS - 1) :]), message.id: reason}
            return
        self._refused.pop(message.id, None)
        self._delivered.add(message.id)
        self._inbox.append(message)

    def _reject(self, reason: str) -> None:
        workflow.logger.warning("Ignored tool_approval signal: %s", reason)
        self._rejected = [*self._rejected[-(MAX_REJECTED_SIGNALS - 1) :], reason]

    # --- the loop ------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, *inputs: Any) -> AgentRunResult:
        # Any number of inputs is accepted and checked here: a run started with none or two (the `temporal`
        # CLI allows both) fails at once with the reason, instead of failing its workflow task forever.
        self._begun = True
        input = _agent_run_input(inputs)
        run_id = workflow.info().workflow_id
        thread_id = input.thread_id or run_id
        resource_id = input.resource_id or input.agent_id
        attributes = [
            KEEL_KIND.value_set("agent"),
            KEEL_STATUS.value_set("running"),
            KEEL_AGENT_ID.value_set(input.agent_id),
            KEEL_THREAD_ID.value_set(thread_id),
            KEEL_RESOURCE_ID.value_set(resource_id),
        ]
        # Keel's client sets them at start; upserting the same values again would cost a visibility write. Runs
        # it started before it said so in the memo upserted them: their start events decide, so they replay.
        if not _set_at_start(attributes):
            workflow.upsert_search_attributes(attributes)
        self._turn = input.turn
        early = self._early_turn
        if early is not None and input.turn is not None and early.session_id == input.turn.session_id:
            if workflow.patched(TURN_CONFIG_BEFORE_RUN_PATCH):
                self._turn = early
        run_telemetry.started(run_id, input.agent_id, thread_id, continued=input.carry is not None)
        loop = _Loop(self, input, run_id, thread_id, resource_id)
        try:
            try:
                result = await loop.run()
            except (ActivityError, ApplicationError) as err:
                if isinstance(activity_cause(err), CancelledError):  # a step canceled with the run
                    end_if_canceled()
                if stopped_for_cancel(activity_cause(err)):  # a local step saw the cancel before the run could
                    await cancel_arrives()
                raise
        except asyncio.CancelledError:
            run_telemetry.ended("canceled")
            await loop.kill_processes()  # a canceled run leaves no command of its own running
            mark_canceled()
            raise
        except (ActivityError, ApplicationError) as err:
            cause = activity_cause(err)
            run_telemetry.ended("failed", cause)
            refused = isinstance(cause, ApplicationError) and cause.type == RUN_ID_REUSED
            if refused and loop.takes(REFUSED_RUN_UNLISTED_PATCH):
                # Not a run of its own: the run is the execution that holds the id (see the patch's note).
                workflow.upsert_search_attributes([key.value_unset() for key in KEEL_RUN_ATTRIBUTES])
            else:
                workflow.upsert_search_attributes([KEEL_STATUS.value_set("failed")])
            if isinstance(err, ApplicationError):
                raise
            raise ApplicationError(
                f"Agent run failed: {cause}", type=getattr(cause, "type", None), non_retryable=True
            ) from err
        workflow.upsert_search_attributes([KEEL_STATUS.value_set("completed")])
        run_telemetry.ended("completed")
        self._ended = True
        await workflow.wait_condition(workflow.all_handlers_finished)  # `settled` answered (no command)
        return result

    async def wait_for_decisions(self, calls: list[PlannedToolCall], step: int) -> dict[str, ToolApproval]:
        end_if_canceled()  # taken by a call beside these (its error): a wait would never see it again
        for call in calls:
            self._pending[call.tool_call_id] = PendingToolCall(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                args=call.args,
                step=step,
                args_digest=args_digest(call.args),
            )
        workflow.upsert_search_attributes([KEEL_STATUS.value_set("suspended")])
        workflow.set_current_details(_waiting_details(workflow.info().workflow_id, calls))
        await self._tell_session(names.TURN_WAITING_SIGNAL, [self._pending_item("approval", c) for c in calls])
        waited_from = workflow.time_ns()
        with run_telemetry.waiting(calls):
            await workflow.wait_condition(lambda: all(c.tool_call_id in self._decisions for c in calls))
        workflow.set_current_details("")
        workflow.upsert_search_attributes([KEEL_STATUS.value_set("running")])
        decided = {c.tool_call_id: self._decisions.pop(c.tool_call_id) for c in calls}
        arrivals = {c.tool_call_id: a for c in calls if (a := self._arrivals.pop(c.tool_call_id, None)) is not None}
        run_telemetry.decided(calls, decided, step=step, waited_from_ns=waited_from, arrivals=arrivals)
        for call_id, decision in decided.items():
            self._pending.pop(call_id, None)
            self._decided[call_id] = decision.approved
        await self._tell_session(names.TURN_DECIDED_SIGNAL, [c.tool_call_id for c in calls])
        return decided

    async def wait_for_resumes(self, calls: list[tuple[PlannedToolCall, StepSuspension]], step: int) -> dict[str, Any]:
        """Wait for resume data for each suspended call (the `resume_tool` signal or `resume_tool_call` update)."""
        end_if_canceled()  # as `wait_for_decisions`
        for call, suspension in calls:
            self._suspended[call.tool_call_id] = SuspendedToolCall(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                args=call.args,
                step=step,
                suspend_payload=suspension.payload,
                resume_schema=suspension.resume_schema,
            )
        workflow.upsert_search_attributes([KEEL_STATUS.value_set("suspended")])
        workflow.set_current_details(_suspended_details(workflow.info().workflow_id, calls))
        items = [self._pending_item("suspension", c, s) for c, s in calls]
        await self._tell_session(names.TURN_WAITING_SIGNAL, items)
        with run_telemetry.waiting([c for c, _ in calls], "resume data"):
            await workflow.wait_condition(lambda: all(c.tool_call_id in self._resumes for c, _ in calls))
        workflow.set_current_details("")
        workflow.upsert_search_attributes([KEEL_STATUS.value_set("running")])
        resumed = {c.tool_call_id: self._resumes.pop(c.tool_call_id).resume_data for c, _ in calls}
        for c, _ in calls:
            self._suspended.pop(c.tool_call_id, None)
        await self._tell_session(names.TURN_DECIDED_SIGNAL, [c.tool_call_id for c, _ in calls])
        return resumed

    def _pending_item(self, kind: str, call: PlannedToolCall, suspension: StepSuspension | None = None) -> Any:
        turn = self._turn
        return {
            "kind": kind,
            "runId": workflow.info().workflow_id,
            "toolCallId": call.tool_call_id,
            "toolName": call.tool_name,
            "args": shown_args(call.args),  # as the session shows them: its history holds them several times
            "category": call.category,
            "suspendPayload": suspension.payload if suspension else None,
            "resumeSchema": suspension.resume_schema if suspension else None,
            "subagent": turn.subagent.parent_tool_call_id if turn is not None and turn.subagent else None,
        }

    async def _tell_session(self, signal: str, payload: Any) -> None:
        """A session's turn tells its session what it waits on (best effort: a session that is gone cannot
        answer, and the calls stay answerable on this run directly)."""
        turn = self._turn
        if turn is None:
            return
        body = (
            {"items": payload}
            if signal == names.TURN_WAITING_SIGNAL
            else {
                "runId": workflow.info().workflow_id,
                "toolCallIds": payload,
            }
        )
        try:
            await workflow.get_external_workflow_handle(turn.session_id).signal(signal, body)
        except Exception as err:  # the session is gone: the run goes on without it
            workflow.logger.warning("Could not tell session %s (%s): %s", turn.session_id, signal, err)
        end_if_canceled()  # a cancel that came meanwhile went to the signal, and the run would wait on


class _Loop:
    """The state of one run's loop; rebuilt from `RunCarry` after continue-as-new."""

    def __init__(self, wf: AgentRun, input: AgentRunInput, run_id: str, thread_id: str, resource_id: str) -> None:
        self.wf = wf
        self.input = input
        self.run_id = run_id
        self.thread_id = thread_id
        self.resource_id = resource_id
        self.opts = options_for(workflow.info().task_queue)  # live: timeouts and retry policies
        pinned = input.carry.shape if input.carry is not None else None
        if pinned is None:
            pinned = _pin_shape(self.opts.shape())
        self.shape = pinned or LEGACY_SHAPE
        self.legacy = pinned is None
        self.carry = input.carry or RunCarry(step=0, message_seq=0)
        # A refusal outlives continue-as-new (unless the message was taken since: signals come before this).
        carried = {i: why for i, why in self.carry.refused.items() if i not in self.wf._delivered}
        self.wf._refused = dict(list({**carried, **self.wf._refused}.items())[-MAX_REJECTED_SIGNALS:])
        self.local_in_task = 0  # local activities since the run last waited on the server (in this task)
        self.local_bytes_in_task = 0  # what they returned, as JSON (shapes past the legacy budget bound it)
        self.carry.shape = self.shape
        if input.carry is None:
            messages = input.messages
            if isinstance(messages, str):
                messages = [InputMessage(role="user", content=messages)]
            self.carry.pending = PendingWrites(
                messages=[MessageRecord(id=self._next_message_id(), role=m.role, content=m.content) for m in messages]
            )

    def _next_message_id(self) -> str:
        self.carry.message_seq += 1
        return names.run_message_id(self.run_id, self.carry.message_seq)

    async def run(self) -> AgentRunResult:
        c = self.carry
        step: ModelStepResult | None = None
        while True:
            end_if_canceled()
            if step is None:
                c.step += 1
                step = await self._model_step()
            self._note_heard(step)
            c.usage = c.usage.plus(step.usage)
            c.max_steps = self.input.max_steps or c.max_steps or step.max_steps
            if step.file_reads and not c.file_reads:  # what the thread's earlier runs read
                c.file_reads = dict(step.file_reads)
            c.last_message_id = step.message_id
            if not step.tool_calls:
                if self.wf._inbox or c.unheard:  # delivered while the model answered: the turn goes on, or keeps it
                    if c.step < c.max_steps:
                        step = None
                        continue
                    self._drain_inbox()
                    await self._persist_pending("persist messages delivered after the last step")
                return self._result(step.text, step.finish_reason, step.run_tool_calls, step.run_tool_results)
            answered = step
            step = await self._run_tools(answered)
            if step is not None:  # the tools ran together with the next model step
                continue
            if c.step >= c.max_steps:
                end_if_canceled()  # a tool's cancellation was its error: the run was canceled, not finished
                finished = await self._finish("tool-calls")
                lists = (finished.run_tool_calls, finished.run_tool_results) if finished else (None, None)
                return self._result(answered.text, "tool-calls", *lists)
            if workflow.info().is_continue_as_new_suggested():
                end_if_canceled()  # a cancel does not follow the run into its next execution
                self._drain_inbox()
                if (c.pending.messages or c.pending.events) and self.takes(PERSIST_BEFORE_CONTINUE_PATCH):
                    await self._persist_pending()
                self.wf._continuing = True
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._drain_inbox()  # delivered while the writes were stored: the next execution stores them
                c.refused = dict(self.wf._refused)
                workflow.continue_as_new(self.input.model_copy(update={"carry": c, "turn": self.wf._turn}))

    def takes(self, rule: str) -> bool:
        """Whether the run follows `rule` (a key of `RULES_IN_SHAPE`): from its shape, or for a run of an earlier
        generation, from the rule's patch."""
        return self.shape.generation >= RULES_IN_SHAPE[rule] or workflow.patched(rule)

    def _drain_inbox(self) -> int:
        """Delivered user messages join the pending writes (the next storage write stores them, in order); how
        many did."""
        if not self.wf._inbox:
            return 0
        own_ids = self.takes(DELIVERED_IDS_PATCH)
        for message in self.wf._inbox:
            message_id = names.delivered_message_id(self.run_id, message.id) if own_ids else self._next_message_id()
            self.carry.pending.messages.append(MessageRecord(id=message_id, role="user", content=message.content))
        drained = len(self.wf._inbox)
        self.wf._inbox.clear()
        return drained

    def _restore_pending(self, writes: PendingWrites, size: int) -> None:
        """Writes a step took and did not store go back before whatever the run added since."""
        later = self.carry.pending
        writes.messages.extend(later.messages)
        writes.events.extend(later.events)
        self.carry.pending, self.carry.pending_bytes = writes, size + self.carry.pending_bytes

    def _note_heard(self, step: ModelStepResult) -> None:
        """A step that answered from storage did not hear what came with it and was not in the thread when that
        answer was given (a message delivered since): the run goes on until a step that asks the model has, or
        one whose stored answer heard everything the thread holds (`heard_all`; see `RunCarry.unheard`)."""
        if not step.reused or step.heard_all:  # None in histories from before answers told it: as before
            self.carry.unheard = False
        elif step.unheard:
            self.carry.unheard = True

    def _next_model_input(self) -> ModelStepInput:
        self._drain_inbox()
        c = self.carry
        step_input = ModelStepInput(
            run_id=self.run_id,
            agent_id=self.input.agent_id,
            thread_id=self.thread_id,
            resource_id=self.resource_id,
            step=c.step,
            message_id=self._next_message_id(),
            writes=c.pending,
            request_context=self.input.request_context,
            usage_before=c.usage,
            requires=[c.last_message_id] if c.last_message_id else [],
            execution_id=workflow.info().first_execution_run_id,
            max_steps=self.input.max_steps or c.max_steps,
            turn=self.wf._turn,
        )
        c.pending = PendingWrites()
        c.pending_bytes = 0
        return step_input

    async def _model_step(self) -> ModelStepResult:
        self.wf._stepping = True  # no command: an approval's handler waits on it (`approve_tool_call`)
        try:
            return await self._ask_model()
        finally:
            self.wf._stepping = False

    async def _ask_model(self) -> ModelStepResult:
        # A model step of its own: the first one, or one after tools that ran apart (see `_fuse`). As a local
        # activity its result is recorded in the workflow task that schedules what follows (one round trip
        # fewer); a regular one is the choice for model calls that may outlive a workflow task timeout.
        step_input = self._next_model_input()
        summary = f"model step {self.carry.step}"
        # Shapes with the legacy budget ran every such step locally; later ones keep to their budget.
        within = self.shape.local_steps_per_task == LEGACY_LOCAL_STEPS_PER_TASK or self._local_step_allowed()
        if self.shape.model_as_local_activity and within:
            if self.legacy:
                legacy: ModelStepResult = await workflow.execute_local_activity(
                    names.MODEL_STEP,
                    step_input,
                    result_type=ModelStepResult,
                    start_to_close_timeout=self.opts.model_start_to_close,
                    retry_policy=self.opts.model_retry,
                    summary=summary,
                )
                return legacy
            self.local_in_task += 1
            local = await once_locally(
                names.MODEL_STEP,
                step_input,
                ModelStepResult,
                self.opts.model_start_to_close,
                summary,
                self.opts.model_retry.initial_interval,
            )
            if local is not None:
                self._count_local(local)
                return local
        result: ModelStepResult = await workflow.execute_activity(
            names.MODEL_STEP,
            step_input,
            result_type=ModelStepResult,
            start_to_close_timeout=self.opts.model_start_to_close,
            heartbeat_timeout=self.opts.model_heartbeat,
            retry_policy=self.opts.model_retry,
            summary=summary,
        )
        self._crossed_task()
        workflow.set_current_details("")
        return result

    def _local_step_allowed(self) -> bool:
        """Whether the next step may run locally in this workflow task (the pinned budget; see `RunShape`)."""
        if self.local_in_task >= self.shape.local_steps_per_task:
            return False
        legacy = self.shape.local_steps_per_task == LEGACY_LOCAL_STEPS_PER_TASK
        return legacy or self.local_bytes_in_task < LOCAL_STEP_BYTES_PER_TASK

    def _count_local(self, result: ModelStepResult | ToolsThenModelResult) -> None:
        if self.shape.local_steps_per_task != LEGACY_LOCAL_STEPS_PER_TASK:
            self.local_bytes_in_task += len(result.model_dump_json())

    def _crossed_task(self) -> None:
        """The run waited on the server: a new workflow task, and a fresh local budget."""
        self.local_in_task = 0
        self.local_bytes_in_task = 0

    async def _run_tools(self, step: ModelStepResult) -> ModelStepResult | None:
        """Run the step's tool calls and record their results; returns the next model step's result when it ran
        in the same activity as the tools (see `_fuse`), else None."""
        needs_approval = [t for t in step.tool_calls if t.requires_approval and t.error is None]
        decisions: dict[str, ToolApproval] = {}
        if needs_approval:
            decisions = await self.wf.wait_for_decisions(needs_approval, self.carry.step)
            self._crossed_task()
        outcomes: dict[str, ToolCallResult] = {}
        runnable: list[PlannedToolCall] = []
        for call in step.tool_calls:
            decision = decisions.get(call.tool_call_id)
            if call.error is not None:
                outcomes[call.tool_call_id] = self._tool_error(call, call.error)
            elif decision is not None and not decision.approved:
                outcomes[call.tool_call_id] = self._declined(call, decision.reason or DECLINED_REASON)
            else:
                runnable.append(call)
        subagents = [t for t in runnable if t.subagent is not None]
        next_step: ModelStepResult | None = None
        suspended: list[tuple[PlannedToolCall, StepSuspension]] = []
        if not subagents and self._fuse(runnable):
            # Right after an approval the step runs as an activity: the approving update is answered when the
            # workflow task completes, which a local step would hold back until it ends.
            before = (self.carry.pending, self.carry.pending_bytes)
            fused = await self._tools_then_model(runnable, locally=not needs_approval)
            by_id = {t.tool_call_id: t for t in runnable}
            for r in fused.tool_results:
                if r.suspended is not None:
                    suspended.append((by_id[r.tool_call_id], r.suspended))
                    continue
                outcomes[r.tool_call_id] = r
                self._track(r)
            if fused.model is None:  # a tool suspended: the model step waits for it (and did not run)
                self.carry.step -= 1
                if self.takes(SUSPENDED_STEP_KEEPS_WRITES_PATCH):  # unstored: the next step stores them
                    self._restore_pending(*before)
            next_step = fused.model
        else:
            # Each tool's outcome reaches the history; the next activity that writes storage (a model step, or
            # the final persist, both retried for minutes) persists it, so a storage outage never loses or
            # repeats a side effect. A session's subagent calls are child runs, beside the other tools.
            others = [t for t in runnable if t.subagent is None]
            results = await asyncio.gather(
                *(self._run_tool(t) for t in others), *(self._run_subagent(t) for t in subagents)
            )
            for call, result in zip([*others, *subagents], results, strict=True):
                if result.suspended is not None:
                    suspended.append((call, result.suspended))
                else:
                    outcomes[result.tool_call_id] = result
            self._crossed_task()
        while suspended:  # each waits for its resume data, then runs again with it (and may suspend again)
            resumed = await self.wf.wait_for_resumes(suspended, self.carry.step)
            self._crossed_task()
            calls = [call for call, _ in suspended]
            again = await asyncio.gather(*(self._run_tool(c, resumed[c.tool_call_id]) for c in calls))
            suspended = [(c, r.suspended) for c, r in zip(calls, again, strict=True) if r.suspended is not None]
        return next_step

    async def _run_subagent(self, call: PlannedToolCall) -> ToolCallResult:
        """A session's `subagent` call: a child `AgentRun` of the subagent kind (its own thread, or a copy of
        this run's when forked), whose answer is the call's result."""
        plan, turn = call.subagent, self.wf._turn
        assert plan is not None and turn is not None
        child_id = f"{self.run_id}-s{self.carry.step}-{call.tool_call_id}"
        thread_id = child_id
        if plan.forked:
            await workflow.execute_activity(
                names.FORK_THREAD,
                ForkThreadInput(source_thread_id=self.thread_id, thread_id=thread_id, resource_id=self.resource_id),
                start_to_close_timeout=self.opts.storage_start_to_close,
                retry_policy=self.opts.storage_retry,
                summary=f"fork thread {self.thread_id} for subagent {plan.agent_type}",
            )
        sub_turn = turn.model_copy(
            update={
                "subagent": SubagentTurn(
                    parent_tool_call_id=call.tool_call_id,
                    agent_type=plan.agent_type,
                    task=plan.task,
                    forked=plan.forked,
                    model_id=plan.model_id,
                ),
                "subagent_id": None if plan.forked else plan.agent_type,
                "model_id": plan.model_id or turn.model_id,
            }
        )
        # Checked after the fork: a run stuck here before this check (Temporal fails the workflow task of a child
        # start past its bound on ids, each retry) had forked already. Temporal's default bound: a run that went on
        # past such an id ran on a server whose bound was raised.
        too_long = workflow_id_problem("The run id, step and call id", child_id)
        if too_long is not None:
            message = f'Subagent "{plan.agent_type}" was not started: {too_long}'
            return self._tool_outcome(call, {"content": message, "isError": True}, is_error=True)
        child = AgentRunInput(
            agent_id=self.input.agent_id,
            messages=plan.task,
            thread_id=thread_id,
            resource_id=self.resource_id,
            max_steps=plan.max_steps,
            request_context=self.input.request_context,
            turn=sub_turn,
        )
        if self.shape.generation >= TOOL_BUDGET_GENERATION:
            await self.wf._budget.room_for(input_bytes(child))
        try:
            result: AgentRunResult = await workflow.execute_child_workflow(
                names.AGENT_RUN,
                child,
                id=child_id,
                result_type=AgentRunResult,
                static_summary=f"subagent {plan.agent_type}: {' '.join(plan.task.split())[:80]}",
                static_details=_subagent_details(plan),
            )
        except ChildWorkflowError as err:
            cause = err.cause.cause if isinstance(err.cause, ApplicationError) and err.cause.cause else err.cause
            message = f'Subagent "{plan.agent_type}" failed: {cause or err}'
            return self._tool_outcome(call, {"content": message, "isError": True}, is_error=True)
        return self._tool_outcome(call, {"content": result.text, "isError": False}, is_error=False)

    def _fuse(self, runnable: list[PlannedToolCall]) -> bool:
        """Whether the tool calls and the next model step run as one activity: one server round trip per step
        instead of two workflow activations and a round trip. Only idempotent tools qualify (a retry of the
        activity re-runs a tool whose result was not stored yet), and only when a next step will follow."""
        return (
            self.shape.fuse_tools_with_next_model_step
            and bool(runnable)
            and all(t.idempotent for t in runnable)
            and self.carry.step < (self.carry.max_steps or 0)
            and not workflow.info().is_continue_as_new_suggested()
            and (not self.legacy or workflow.patched(FUSED_STEPS_PATCH))
        )

    async def _tools_then_model(self, calls: list[PlannedToolCall], *, locally: bool) -> ToolsThenModelResult:
        self.wf._stepping = True
        try:
            return await self._run_then_ask(calls, locally=locally)
        finally:
            self.wf._stepping = False

    async def _run_then_ask(self, calls: list[PlannedToolCall], *, locally: bool) -> ToolsThenModelResult:
        tools = [self._tool_input(t) for t in calls]
        self.carry.step += 1
        ran = ", ".join(f"{t.tool_name} ({t.tool_call_id})" for t in calls)
        step_input = ToolsThenModelInput(
            tools=tools,
            tool_timeout_seconds=self.opts.tool_start_to_close.total_seconds(),
            model=self._next_model_input(),
        )
        timeout = self.opts.tool_start_to_close + self.opts.model_start_to_close
        summary = f"{ran}, then model step {self.carry.step}"
        if self.shape.fused_step_as_local_activity and locally and self._local_step_allowed():
            self.local_in_task += 1
            local = await once_locally(
                names.TOOLS_THEN_MODEL,
                step_input,
                ToolsThenModelResult,
                timeout,
                summary,
                self.opts.model_retry.initial_interval,
            )
            if local is not None:
                self._count_local(local)
                return local
        result: ToolsThenModelResult = await workflow.execute_activity(
            names.TOOLS_THEN_MODEL,
            step_input,
            result_type=ToolsThenModelResult,
            start_to_close_timeout=timeout,
            heartbeat_timeout=self.opts.tool_heartbeat,
            retry_policy=self.opts.model_retry,
            summary=summary,
        )
        self._crossed_task()
        workflow.set_current_details("")
        return result

    async def _run_tool(self, call: PlannedToolCall, resume_data: Any = None) -> ToolCallResult:
        """The call as an activity of its own. A suspended call comes back with `suspended` set and nothing
        recorded; `resume_data` runs it again after a suspension."""
        # A background process's follow-up goes to the worker host that runs it, and waits only so long for it.
        host = self.carry.processes.get(call.process_id) if call.process_id is not None else None
        tool_input = self._tool_input(call)
        if resume_data is not None:
            tool_input.resume_data = resume_data
        if self.shape.generation >= TOOL_BUDGET_GENERATION:  # see RUN_GENERATION
            await self.wf._budget.room_for(input_bytes(tool_input))
        try:
            result: ToolCallResult = await workflow.execute_activity(
                names.TOOL_CALL,
                tool_input,
                result_type=ToolCallResult,
                task_queue=host,
                schedule_to_start_timeout=self.opts.host_schedule_to_start if host else None,
                start_to_close_timeout=self.opts.tool_start_to_close,
                heartbeat_timeout=self.opts.tool_heartbeat,
                retry_policy=self.opts.idempotent_tool_retry if call.idempotent else self.opts.once_tool_retry,
                summary=f"{call.tool_name} ({call.tool_call_id})",
            )
        except ActivityError as err:
            # The tool's own exceptions come back as results; reaching here means attempts were lost
            # (crashed workers, timeouts). The model is told, and the run goes on.
            if (
                host is not None
                and isinstance(err.cause, TemporalTimeout)
                and err.cause.type == TimeoutType.SCHEDULE_TO_START
            ):
                return self._tool_error(
                    call,
                    f"Background process {call.process_id} is gone: the worker that started it (task queue {host}) "
                    "is no longer running",
                )
            return self._tool_error(call, f"Tool {call.tool_name} did not complete: {err.cause or err}")
        if result.suspended is not None:
            return result
        self._track(result)
        if self.carry.pending_bytes + result.result_bytes > MAX_PENDING_RESULT_BYTES:
            mib = result.result_bytes / (1024 * 1024)
            limit = MAX_PENDING_RESULT_BYTES // (1024 * 1024)
            return self._tool_error(
                call, f"Tool {call.tool_name} returned {mib:.1f} MiB: a step keeps at most {limit} MiB of tool results"
            )
        self.carry.pending_bytes += result.result_bytes
        return self._tool_outcome(call, result.result, is_error=result.is_error, effects=result.effects())

    async def kill_processes(self) -> None:
        """Kill the background processes the run started, each on its host (best effort: a host that has
        stopped took its processes with it)."""
        by_host: dict[str, list[str]] = {}
        for pid, host in self.carry.processes.items():
            by_host.setdefault(host, []).append(pid)
        kills = [
            workflow.execute_activity(
                names.KILL_PROCESSES,
                KillProcessesInput(agent_id=self.input.agent_id, pids=pids, request_context=self.input.request_context),
                task_queue=host,
                schedule_to_start_timeout=self.opts.host_schedule_to_start,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=ONE_ATTEMPT,
                summary=f"kill {len(pids)} background process(es)",
            )
            for host, pids in by_host.items()
        ]
        await asyncio.gather(*kills, return_exceptions=True)

    def _track(self, result: ToolCallResult) -> None:
        """Keep what a workspace tool reported: a file read (read-before-write), a cleared record, a process."""
        reads, processes = self.carry.file_reads, self.carry.processes
        if result.file_cleared is not None:
            reads.pop(result.file_cleared, None)
        if result.file_read is not None:
            reads.pop(result.file_read.path, None)
            reads[result.file_read.path] = result.file_read
            while len(reads) > MAX_FILE_READS:
                del reads[next(iter(reads))]
        if result.process_started is not None and result.host_queue is not None:
            processes[result.process_started] = result.host_queue
            while len(processes) > MAX_PROCESSES:
                del processes[next(iter(processes))]

    def _tool_input(self, call: PlannedToolCall) -> ToolCallInput:
        return ToolCallInput(
            read_record=self.carry.file_reads.get(call.file_path) if call.file_path is not None else None,
            run_id=self.run_id,
            agent_id=self.input.agent_id,
            thread_id=self.thread_id,
            resource_id=self.resource_id,
            step=self.carry.step,
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            args=call.args,
            result_message_id=self._tool_message_id(call),
            request_context=self.input.request_context,
            turn=self.wf._turn,
        )

    def _tool_message_id(self, call: PlannedToolCall) -> str:
        # Scoped by step: some models reuse tool call ids across steps.
        return f"{self.run_id}-s{self.carry.step}-{call.tool_call_id}"

    def _declined(self, call: PlannedToolCall, reason: str) -> ToolCallResult:
        self._write_tool_message(call, reason, is_error=False, denied=True)
        denied = ToolOutputDeniedChunk(
            run_id=self.run_id,
            payload=ToolOutputDeniedPayload(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                args=call.args,
                approval=ApprovalDecision(id=call.tool_call_id, approved=False, reason=reason),
            ),
        )
        self.carry.pending.events.append(denied.record())
        return ToolCallResult(tool_call_id=call.tool_call_id, tool_name=call.tool_name, result=reason)

    def _tool_error(self, call: PlannedToolCall, message: str) -> ToolCallResult:
        """A call that never ran (unknown tool, bad arguments, attempts lost): the model sees the error."""
        return self._tool_outcome(call, {"error": message}, is_error=True)

    def _tool_outcome(
        self, call: PlannedToolCall, result: Any, *, is_error: bool, effects: dict[str, Any] | None = None
    ) -> ToolCallResult:
        """Queue a call's tool message (with what a workspace tool reported) and its chunk for the next
        activity that writes storage."""
        self._write_tool_message(call, result, is_error=is_error, denied=False, effects=effects)
        if is_error:
            payload = ToolErrorPayload(
                tool_call_id=call.tool_call_id, tool_name=call.tool_name, args=call.args, error=result
            )
            self.carry.pending.events.append(ToolErrorChunk(run_id=self.run_id, payload=payload).record())
        else:
            ok = ToolResultPayload(
                tool_call_id=call.tool_call_id, tool_name=call.tool_name, args=call.args, result=result
            )
            self.carry.pending.events.append(ToolResultChunk(run_id=self.run_id, payload=ok).record())
        return ToolCallResult(
            tool_call_id=call.tool_call_id, tool_name=call.tool_name, result=result, is_error=is_error
        )

    def _write_tool_message(
        self, call: PlannedToolCall, result: Any, *, is_error: bool, denied: bool, effects: dict[str, Any] | None = None
    ) -> None:
        part = ToolResultPart(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            result=result,
            is_error=is_error,
            denied=denied,
            provider_metadata={"keel": effects} if effects else None,
        )
        self.carry.pending.messages.append(MessageRecord(id=self._tool_message_id(call), role="tool", content=[part]))

    async def _persist_pending(self, summary: str = "persist tool results before continuing as new") -> None:
        await workflow.execute_activity(
            names.PERSIST_WRITES,
            PersistWritesInput(
                run_id=self.run_id,
                thread_id=self.thread_id,
                resource_id=self.resource_id,
                step=self.carry.step,
                writes=self.carry.pending,
            ),
            start_to_close_timeout=self.opts.storage_start_to_close,
            retry_policy=self.opts.storage_retry,
            summary=summary,
        )
        self.carry.pending = PendingWrites()
        self.carry.pending_bytes = 0

    async def _finish(self, reason: FinishReason) -> FinishRunResult | None:
        """Persist what no later model step will (the last step's tool results at `maxSteps`), close the event
        log, and rebuild the run's result lists from storage. None from runs recorded before it returned them."""
        finished: FinishRunResult | None = await workflow.execute_activity(
            names.FINISH_RUN,
            FinishRunInput(
                run_id=self.run_id,
                thread_id=self.thread_id,
                resource_id=self.resource_id,
                writes=self.carry.pending,
                finish_reason=reason,
                usage=self.carry.usage,
            ),
            result_type=FinishRunResult,
            start_to_close_timeout=self.opts.storage_start_to_close,
            retry_policy=self.opts.storage_retry,
            summary="persist final messages",
        )
        self.carry.pending = PendingWrites()
        return finished

    def _result(
        self,
        text: str,
        reason: FinishReason,
        tool_calls: list[ToolCallChunk] | None,
        tool_results: list[ToolResultChunk] | None,
    ) -> AgentRunResult:
        """The run's result; its tool call and result lists come from storage, rebuilt by the last activity (the
        workflow carries none of them, so nothing it holds grows with the run)."""
        c = self.carry
        return AgentRunResult(
            run_id=self.run_id,
            text=text,
            finish_reason=reason,
            tool_calls=tool_calls or [],
            tool_results=tool_results or [],
            usage=c.usage,
            steps=c.step,
        )


def _pin_shape(preferred: RunShape) -> RunShape | None:
    """The run's shape as its history records it; None for a run started before shapes were pinned.

    A run's first workflow task records the starting worker's `preferred` shape as a `workflow.patched` marker.
    Replaying, `patched` is true only for the marker the history holds and adds no command for the others, so a
    worker that prefers another shape finds the recorded one and issues the same commands. Shapes of earlier
    generations (`RunShape.generation`) are looked for after the current one's, the newest first: only runs started
    before the current generation hold them.
    """
    earlier = (
        s.model_copy(update={"generation": generation})
        for generation in range(RUN_GENERATION - 1, 0, -1)
        for s in (preferred, *ALL_SHAPES)
    )
    candidates = dict.fromkeys((preferred, *ALL_SHAPES, *earlier))  # the preferred (any budget) first
    return next((s for s in candidates if workflow.patched(s.marker())), None)


def _agent_run_input(inputs: tuple[Any, ...]) -> AgentRunInput:
    """The one `AgentRunInput` of a run, or a non-retryable `InvalidInput` failure naming what is wrong (the run
    is marked `KeelKind=agent`, `KeelStatus=failed`, so `keel runs` and visibility queries show it)."""
    problem: str | None = None
    if len(inputs) != 1:
        problem = f"AgentRun takes one input, a JSON object {{agentId, messages, ...}}; it was given {len(inputs)}"
    elif not isinstance(inputs[0], AgentRunInput | dict):
        problem = f"AgentRun input must be a JSON object {{agentId, messages, ...}}, not {type(inputs[0]).__name__}"
    else:
        try:
            run_input = inputs[0] if isinstance(inputs[0], AgentRunInput) else AgentRunInput.model_validate(inputs[0])
        except ValidationError as err:
            problem = f"Invalid AgentRunInput: {describe_validation_error(err)}"
        else:
            problem = _unindexable(run_input)
            if problem is None or not workflow.patched(LONG_IDS_PATCH):
                return run_input
    attributes = [KEEL_KIND.value_set("agent"), KEEL_STATUS.value_set("failed")]
    agent_id = inputs[0].get("agentId") if len(inputs) == 1 and isinstance(inputs[0], dict) else None
    if isinstance(agent_id, str) and agent_id and attribute_problem("an agent id", agent_id) is None:
        attributes.append(KEEL_AGENT_ID.value_set(agent_id))
    workflow.upsert_search_attributes(attributes)
    raise ApplicationError(problem, type="InvalidInput", non_retryable=True)


def _unindexable(run_input: AgentRunInput) -> str | None:
    """Why the run cannot be indexed by its ids (`KeelAgentId`, `KeelThreadId`, `KeelResourceId`), or None."""
    agent = attribute_problem("an agent id", run_input.agent_id)
    problem = run_ids_problem(run_input.thread_id, run_input.resource_id) or (agent and f"agentId: {agent}")
    if problem is not None:
        return f"Invalid AgentRunInput: {problem}"
    if run_input.thread_id:
        return None
    problem = attribute_problem("a run id", workflow.info().workflow_id)
    return None if problem is None else f"{problem} (a run without a thread id is indexed under its run id)"


def _set_at_start(attributes: list[Any]) -> bool:
    """Whether the run was started with these search attribute values, by a client that says so in the memo."""
    if workflow.memo_value(names.ATTRIBUTES_AT_START_MEMO, default=False) is not True:
        return False
    given = workflow.info().typed_search_attributes
    return all(given.get(update.key) == update.value for update in attributes)


def _suspended_details(run_id: str, calls: list[tuple[PlannedToolCall, StepSuspension]]) -> str:
    """What the UI shows while calls wait for resume data."""
    lines = ["**Waiting for resume data**", ""]
    for call, suspension in calls:
        payload = json.dumps(suspension.payload)[:300]
        lines.append(
            f"- `{call.tool_name}` (`{call.tool_call_id}`) asks `{payload}`: resume with the update "
            f"`resume_tool_call` or the signal `resume_tool` "
            f'`{{"toolCallId": "{call.tool_call_id}", "resumeData": ...}}`'
        )
    return "\n".join(lines)


def _waiting_details(run_id: str, calls: list[PlannedToolCall]) -> str:
    """What the UI shows on the run's page while it waits for decisions (Markdown, as the UI renders it)."""
    lines = ["**Waiting for approval**", ""]
    for call in calls:
        lines.append(
            f"- `{call.tool_name}` (`{call.tool_call_id}`): approve with `keel approve {run_id} {call.tool_call_id}`"
            f" (`--decline` to decline), or signal `tool_approval` "
            f'`{{"toolCallId": "{call.tool_call_id}", "approved": true}}`'
        )
    return "\n".join(lines)


def _subagent_details(plan: SubagentPlan) -> str:
    """What the Temporal UI shows of a subagent's child run: its kind, model and the only tools it has."""
    tools = ", ".join(f"`{t}`" for t in plan.tools) or "none"
    kind = "forked (the parent's thread, prompt and tools)" if plan.forked else "its own instructions"
    return f"**{plan.agent_type}** subagent, {kind}; model {plan.model_id or 'the session default'}\n\ntools: {tools}"
