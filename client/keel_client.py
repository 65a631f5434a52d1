"""The Python client: start runs, wait for results, approve tool calls, list and count runs.

Everything goes through Temporal: a run is a workflow execution, a suspension is a workflow waiting on a
signal or update, a count is a visibility query.

The workflows and their contract models are imported by the methods that send or receive them, not with this
module: listing and counting runs (`keel runs`, `keel counts`) needs only visibility, and building the contract
models is a tenth of such a command (tests/test_cli_imports.py, bench/cli_startup.py).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from temporalio.api.enums.v1 import TaskQueueType, WorkflowExecutionStatus
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    ActivityFailureError,
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionDescription,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.client import WorkflowExecutionStatus as ExecutionStatus
from temporalio.common import (
    RetryPolicy,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import (
    ApplicationError,
    CancelledError,
    FailureError,
    TerminatedError,
    WorkflowAlreadyStartedError,
)
from temporalio.exceptions import TimeoutError as TimeoutError_
from temporalio.service import RPCError, RPCStatusCode

from keel.client import tracing
from keel.client.connection import connect
from keel.client.connection import task_queue as default_task_queue
from keel.client.errors import (
    InvalidRunInput,
    KeelClientError,
    MessageRefused,
    NoWorker,
    RunClosed,
    RunFailed,
    RunIdInUse,
    RunNotFound,
    ToolCallRejected,
    ToolFailed,
)
from keel.client.outages import TemporalUnavailable, is_away
from keel.client.visibility import quoted
from keel.client.with_start import execute_update_with_start
from keel.protocol import names
from keel.workflows.search_attributes import (
    KEEL_AGENT_ID,
    KEEL_KIND,
    KEEL_RESOURCE_ID,
    KEEL_STATUS,
    KEEL_THREAD_ID,
)

if TYPE_CHECKING:
    from keel.app import App
    from keel.protocol.messages import Content
    from keel.workflows.contracts import (
        AgentRunInput,
        AgentRunResult,
        ApprovalAccepted,
        ExecuteToolResult,
        IfActive,
        IfIdle,
        PendingToolCall,
        RunSettled,
        ThreadSendResult,
    )

RunStatus = Literal["running", "suspended", "completed", "failed", "canceled", "terminated", "timed_out"]

MAX_RUN_INPUT_BYTES = 32 * 1024 * 1024
"""The largest run input (its messages, as JSON) a client sends; inputs of 256 KiB or more travel by reference."""

_STATUS_QUERIES: dict[str, str] = {
    # Open runs by CloseTime, not ExecutionStatus='Running': the same runs, and the SQLite visibility store then
    # counts through the agent's index instead of scanning every running execution (48 -> 12 ms at 10,000).
    "running": "CloseTime IS NULL AND KeelStatus='running'",
    "suspended": "CloseTime IS NULL AND KeelStatus='suspended'",
    "completed": "ExecutionStatus='Completed'",
    "failed": "ExecutionStatus='Failed'",
    "canceled": "ExecutionStatus='Canceled'",
    "terminated": "ExecutionStatus='Terminated'",
    "timed_out": "ExecutionStatus='TimedOut'",
}
_CLOSED: dict[int, RunStatus] = {
    WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_COMPLETED: "completed",
    WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_FAILED: "failed",
    WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_CANCELED: "canceled",
    WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_TERMINATED: "terminated",
    WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_TIMED_OUT: "timed_out",
}


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    agent_id: str | None
    status: RunStatus
    thread_id: str | None
    resource_id: str | None
    started_at: datetime | None
    closed_at: datetime | None
    task_queue: str | None = None

    def to_json(self) -> dict[str, Any]:
        """camelCase keys and ISO 8601 times, like every other JSON Keel prints."""
        return {
            "runId": self.run_id,
            "agentId": self.agent_id,
            "status": self.status,
            "threadId": self.thread_id,
            "resourceId": self.resource_id,
            "startedAt": self.started_at.isoformat() if self.started_at else None,
            "closedAt": self.closed_at.isoformat() if self.closed_at else None,
            "taskQueue": self.task_queue,
        }

    @classmethod
    def from_execution(cls, ex: Any) -> RunInfo:
        sa = ex.typed_search_attributes
        status = _CLOSED.get(ex.status) if ex.status else None
        if status is None:
            status = "suspended" if sa.get(KEEL_STATUS) == "suspended" else "running"
        return cls(
            run_id=ex.id,
            agent_id=sa.get(KEEL_AGENT_ID),
            status=status,
            thread_id=sa.get(KEEL_THREAD_ID),
            resource_id=sa.get(KEEL_RESOURCE_ID),
            started_at=ex.start_time,
            closed_at=ex.close_time,
            task_queue=ex.task_queue,
        )


@dataclass(frozen=True)
class Poller:
    """A worker process polling a task queue, as Temporal reports it."""

    identity: str
    seconds_since_poll: float


WORKER_SEEN_WITHIN = 75.0
"""A worker long-polls for up to about a minute between polls, so one seen this recently may still be there; one
not seen for longer (or never) is not. (Temporal keeps a stopped worker's last poll for minutes.)"""

WORKER_SEEN_RECENTLY = 2.0
"""`wait_for_worker` asks Temporal again only this long after it last saw a worker: a server starting many runs
a second does not describe the task queue for each (a worker that stops is noticed within this time)."""

WORKER_ANSWER_SECONDS = 30.0
"""How long a query or an update waits for a worker to answer (a worker seen polling may be busy or restarting)
before Keel says none did. Without any worker seen, Keel says so at once."""


SETTLE_TRIES = 5
"""How often `settle` asks again when the run's execution changed under it (continue-as-new, a reset)."""


class KeelClient:
    """Runs, approvals and counts over a connected Temporal client (with Keel's data converter).

    Runs are started with eager start requested (`eager_start`): when a worker of the task queue runs in this
    process on the same Temporal client (`keel dev`, `keel serve --worker`, a `KeelClient` beside its
    `build_worker`), Temporal hands the run's first workflow task back in the start's answer, to that worker,
    saving a round trip; otherwise the start is a plain one (the SDK asks only when a local worker has a free
    slot).
    """

    def __init__(
        self, client: Client, *, task_queue: str = "keel", app: App | None = None, eager_start: bool = True
    ) -> None:
        self.temporal = client
        self.task_queue = task_queue
        self.app = app
        self.eager_start = eager_start
        self._worker_seen_at = float("-inf")  # monotonic time a worker was last seen polling self.task_queue

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        *,
        namespace: str | None = None,
        task_queue: str | None = None,
        app: App | None = None,
    ) -> KeelClient:
        return cls(await connect(address, namespace), task_queue=task_queue or default_task_queue(), app=app)

    # --- runs ------------------------------------------------------------------------------------------

    async def start_run(
        self,
        agent_id: str,
        messages: str | Sequence[Mapping[str, Any]],
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        max_steps: int | None = None,
        request_context: Mapping[str, Any] | None = None,
    ) -> str:
        """Start an `AgentRun`; returns its run id (the workflow id).

        Raises:
            UnknownAgent: the app (when the client has one) defines no such agent.
            InvalidRunInput: the messages or options do not match the `AgentRun` contract.
        """
        from pydantic import ValidationError

        from keel.protocol.identifiers import attribute_problem, nul_problem, run_ids_problem, workflow_id_problem
        from keel.protocol.validation import describe_validation_error
        from keel.workflows.agent_run import AgentRun
        from keel.workflows.contracts import AgentRunInput

        if self.app is not None:
            self.app.agent(agent_id)  # raises UnknownAgent with the known ids
        fields: dict[str, object] = {"agentId": agent_id, "messages": messages, "threadId": thread_id}
        fields |= {"resourceId": resource_id, "maxSteps": max_steps, "requestContext": request_context}
        try:
            run_input = AgentRunInput.model_validate({k: v for k, v in fields.items() if v is not None})
        except ValidationError as err:
            raise InvalidRunInput(describe_validation_error(err)) from None
        size = len(run_input.model_dump_json())
        if size > MAX_RUN_INPUT_BYTES:
            raise InvalidRunInput(
                f"the run's input is {size / (1024 * 1024):.1f} MiB, more than the "
                f"{MAX_RUN_INPUT_BYTES // (1024 * 1024)} MiB a run takes"
            )
        run_id = run_id or f"run-{uuid.uuid4()}"
        unthreaded = "the run id (a run without a thread id is indexed under it)"
        problem = (
            run_ids_problem(run_input.thread_id, run_input.resource_id)
            or attribute_problem("the agent id (a run is indexed by it)", agent_id)
            or nul_problem("the run id", run_id)
            or workflow_id_problem("the run id", run_id)
            or (None if thread_id else attribute_problem(unthreaded, run_id))
        )
        if problem is not None:
            raise InvalidRunInput(problem)
        try:
            await self.temporal.start_workflow(
                AgentRun.run,
                run_input,
                id=run_id,
                task_queue=self.task_queue,
                search_attributes=_initial_attributes(run_input, run_id),
                memo={names.ATTRIBUTES_AT_START_MEMO: True},
                static_summary=_summary(run_input),
                # A run id names one run everywhere (its event log, its messages, its page in the UI).
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                request_eager_start=self.eager_start,
            )
        except WorkflowAlreadyStartedError:
            raise RunIdInUse(run_id) from None
        return run_id

    async def result(self, run_id: str) -> AgentRunResult:
        """Wait for the run to finish. Raises `RunFailed` with the run's error (`status` says whether it failed,
        was terminated, canceled or timed out)."""
        from keel.workflows.agent_run import AgentRun

        try:
            return await self.temporal.get_workflow_handle_for(AgentRun.run, run_id).result()
        except WorkflowFailureError as err:
            held = await self._holder(run_id) if _refused(err) else None
            if held is not None:  # a later execution under the run's id was refused it: the run is the holder's
                return await self._held_result(run_id, held)
            raise _run_failed(run_id, err) from None
        except RPCError as err:
            raise self._rpc_error(run_id, err) from None

    async def _held_result(self, run_id: str, execution: str) -> AgentRunResult:
        from keel.workflows.agent_run import AgentRun

        try:
            return await self.temporal.get_workflow_handle_for(AgentRun.run, run_id, run_id=execution).result()
        except WorkflowFailureError as err:
            raise _run_failed(run_id, err) from None
        except RPCError as err:
            raise self._rpc_error(run_id, err) from None

    async def _holder(self, run_id: str) -> str | None:
        """The execution that holds `run_id` when the latest one under it was refused it (a `temporal workflow
        start` that reused the id): the latest execution that kept Keel's search attributes (a refused one
        removes them). None if there is none."""
        query = f"WorkflowId='{quoted(run_id)}' AND KeelKind='agent'"
        latest: Any = None
        async for ex in self.temporal.list_workflows(query):
            if latest is None or (ex.start_time or datetime.min.replace(tzinfo=UTC)) > latest.start_time:
                latest = ex
        return latest.run_id if latest is not None else None

    async def cancel(self, run_id: str) -> None:
        """Ask the run to stop: it ends as canceled at its next workflow task (a running tool is cancelled)."""
        try:
            await self._handle(run_id).cancel()
        except RPCError as err:
            raise self._rpc_error(run_id, err) from None

    async def terminate(self, run_id: str, reason: str | None = None) -> None:
        """End the run at once, without running any more of it."""
        try:
            await self._handle(run_id).terminate(reason=reason or "terminated with keel terminate")
        except RPCError as err:
            raise self._rpc_error(run_id, err) from None

    async def workers(self, task_queue: str | None = None) -> list[Poller]:
        """The workers seen polling `task_queue` (default the client's) for workflow tasks recently."""
        queue = task_queue or self.task_queue
        response = await self.temporal.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self.temporal.namespace,
                task_queue=TaskQueue(name=queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            ),
            timeout=timedelta(seconds=WORKER_ANSWER_SECONDS),
        )
        now = datetime.now(UTC)
        found = [
            Poller(p.identity, (now - p.last_access_time.ToDatetime(tzinfo=UTC)).total_seconds())
            for p in response.pollers
        ]
        return [p for p in found if p.seconds_since_poll <= WORKER_SEEN_WITHIN and not _gone(p.identity)]

    async def require_worker(self, task_queue: str | None = None, *, signal_hint: str | None = None) -> None:
        """Raise `NoWorker` unless a worker polls `task_queue` (default the client's)."""
        queue = task_queue or self.task_queue
        if not await self.workers(queue):
            raise NoWorker(queue, signal_hint=signal_hint)

    async def wait_for_worker(self, seconds: float = 3.0) -> None:
        """`require_worker`, allowing a worker that has just started `seconds` to poll for the first time. An
        answer lost on the way (the server away, the connection dropped) is asked for again, at least once;
        still lost at the end: `TemporalUnavailable`."""
        if time.monotonic() - self._worker_seen_at < WORKER_SEEN_RECENTLY:
            return
        deadline = time.monotonic() + seconds
        lost: RPCError | None = None
        while True:
            retried = lost is not None
            try:
                if await self.workers():
                    self._worker_seen_at = time.monotonic()
                    return
                lost = None
            except RPCError as err:
                if not is_away(err):
                    raise
                lost = err
            if time.monotonic() >= deadline and (lost is None or retried):
                break
            await asyncio.sleep(0.1)
        if lost is not None:
            raise TemporalUnavailable(lost) from lost
        raise NoWorker(self.task_queue)

    async def run_task_queue(self, run_id: str) -> str:
        """The task queue a run is on (its workers are the ones that can answer about it)."""
        return (await self.describe(run_id)).task_queue or self.task_queue

    async def describe(self, run_id: str) -> RunInfo:
        try:
            desc: WorkflowExecutionDescription = await self._handle(run_id).describe()
            if _refused_execution(desc) and (held := await self._holder(run_id)) is not None:
                desc = await self.temporal.get_workflow_handle(run_id, run_id=held).describe()
        except RPCError as err:
            raise self._rpc_error(run_id, err) from None
        return RunInfo.from_execution(desc)

    async def pending_tool_calls(self, run_id: str) -> list[PendingToolCall]:
        """The run's calls waiting for a decision (a query: a worker answers it).

        Raises:
            NoWorker: no worker polls the run's task queue, or none answered in `WORKER_ANSWER_SECONDS`.
        """
        from keel.workflows.agent_run import AgentRun

        handle = self.temporal.get_workflow_handle_for(AgentRun.run, run_id)
        try:
            return await handle.query(AgentRun.pending_tool_calls, rpc_timeout=timedelta(seconds=WORKER_ANSWER_SECONDS))
        except RPCError as err:
            raise await self.worker_error(run_id, err) from None

    async def settle(self, run_id: str) -> RunSettled:
        """Wait until the run waits on a person or has ended, and say which: `pending` calls to approve or
        decline, `suspended` calls to resume, or `ended` (then `result()` has its outcome). It is the run's
        `settled` update, answered by the workflow the moment that happens: nothing polls.

        Raises:
            RunNotFound: no such run.
            NoWorker: no worker polls the run's task queue (or none answered in `WORKER_ANSWER_SECONDS`).
        """
        from keel.workflows.agent_run import AgentRun
        from keel.workflows.contracts import RunSettled

        handle = self.temporal.get_workflow_handle_for(AgentRun.run, run_id)
        tries = 0
        while tries < SETTLE_TRIES:  # each `continued` answer is progress (a long run's next execution)
            try:
                update = await handle.start_update(
                    names.RUN_SETTLED_UPDATE,
                    result_type=RunSettled,
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                    rpc_timeout=timedelta(seconds=WORKER_ANSWER_SECONDS),
                )
                settled: RunSettled = await update.result()
                if not settled.continued:
                    return settled
                continue
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                raise await self._no_answer(run_id, signal_hint=None) from None
            except (WorkflowUpdateFailedError, RPCError) as err:
                if isinstance(err, RPCError) and not isinstance(self._rpc_error(run_id, err), RunClosed):
                    raise self._rpc_error(run_id, err) from None
                # The run ended (or continued as new) while the update waited: ask the execution now current.
                if (await handle.describe()).status != ExecutionStatus.RUNNING:
                    return RunSettled(ended=True)
                tries += 1
        raise KeelClientError(f"Run {run_id!r} did not answer `settled` (is its worker an older Keel?)")

    async def approve(
        self,
        run_id: str,
        tool_call_id: str,
        *,
        approved: bool = True,
        reason: str | None = None,
        step: int | None = None,
        args_digest: str | None = None,
    ) -> ApprovalAccepted:
        """Approve (or decline) a pending tool call through the validated `approve_tool_call` update.

        `step` and `args_digest` (from `pending_tool_calls`) make the decision apply only to that step's call
        with those arguments: models reuse tool call ids, and a late approval must not decide a later call.
        With tracing on, the update is traced in the run's trace (`keel.client.tracing.run_trace`).

        Raises:
            RunNotFound, RunClosed: no such run, or it already finished.
            ToolCallRejected: the run has no pending call with this id (or not that step's, or not with those
                arguments), or it was already decided.
        """
        from keel.workflows.agent_run import AgentRun
        from keel.workflows.contracts import ToolApproval

        approval = ToolApproval(
            tool_call_id=tool_call_id, approved=approved, reason=reason, step=step, args_digest=args_digest
        )
        return await self._call_update(
            run_id, tool_call_id, AgentRun.approve_tool_call, approval, signal_hint=f"{run_id} {tool_call_id}"
        )

    async def resume_tool(self, run_id: str, tool_call_id: str, resume_data: Any) -> ApprovalAccepted:
        """Resume a tool call that suspended (`ctx.suspend`; listed by `settle` and the `suspended_tool_calls`
        query) with data matching its resume schema, through the validated `resume_tool_call` update.

        Raises:
            RunNotFound, RunClosed: no such run, or it already finished.
            ToolCallRejected: no such suspended call, it was already resumed, or the data does not match.
        """
        from keel.workflows.agent_run import AgentRun
        from keel.workflows.contracts import ToolResume

        resume = ToolResume(tool_call_id=tool_call_id, resume_data=resume_data)
        return await self._call_update(run_id, tool_call_id, AgentRun.resume_tool_call, resume, signal_hint=None)

    async def _call_update(
        self, run_id: str, tool_call_id: str, update: Any, arg: Any, *, signal_hint: str | None
    ) -> ApprovalAccepted:
        """A validated update deciding or resuming one tool call of the run (traced in the run's trace).

        A worker must accept it within `WORKER_ANSWER_SECONDS`; its outcome may come later: an approval that
        reaches the run while the model step asking for the call still runs waits for the step."""
        from keel.workflows.agent_run import AgentRun

        handle = self.temporal.get_workflow_handle_for(AgentRun.run, run_id)
        try:
            async with tracing.run_trace(self.temporal, run_id):
                started = await handle.start_update(
                    update,
                    arg,
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                    rpc_timeout=timedelta(seconds=WORKER_ANSWER_SECONDS),
                )
                accepted: ApprovalAccepted = await started.result()  # at once when it completed on acceptance
                return accepted
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            raise ToolCallRejected(run_id, tool_call_id, str(getattr(cause, "message", None) or cause)) from None
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            raise await self._no_answer(run_id, signal_hint=signal_hint) from None
        except RPCError as err:
            raise await self.worker_error(run_id, err, signal_hint=signal_hint) from None

    async def signal_approval(
        self,
        run_id: str,
        tool_call_id: str,
        *,
        approved: bool = True,
        reason: str | None = None,
        step: int | None = None,
        args_digest: str | None = None,
    ) -> None:
        """Send the decision as the `tool_approval` signal: accepted by Temporal at once, applied when a worker
        runs the workflow (no answer: a rejected one is recorded in the `rejected_signals` query)."""
        from keel.workflows.contracts import ToolApproval

        approval = ToolApproval(
            tool_call_id=tool_call_id, approved=approved, reason=reason, step=step, args_digest=args_digest
        )
        try:
            async with tracing.run_trace(self.temporal, run_id):
                await self._handle(run_id).signal(names.TOOL_APPROVAL_SIGNAL, approval)
        except RPCError as err:
            raise self._rpc_error(run_id, err) from None

    async def decline(
        self,
        run_id: str,
        tool_call_id: str,
        *,
        reason: str | None = None,
        step: int | None = None,
        args_digest: str | None = None,
    ) -> ApprovalAccepted:
        return await self.approve(
            run_id, tool_call_id, approved=False, reason=reason, step=step, args_digest=args_digest
        )

    async def send_message(
        self,
        agent_id: str,
        thread_id: str,
        resource_id: str,
        content: Content,
        *,
        if_active: IfActive = "deliver",
        if_idle: IfIdle = "wake",
        message_id: str | None = None,
        max_steps: int | None = None,
        request_context: dict[str, Any] | None = None,
    ) -> ThreadSendResult:
        """A user message for the agent's thread, through the thread's `AgentThread` entity (update-with-start:
        one call, and concurrent senders are ordered): delivered into its active run, queued for the next,
        persisted, or waking a run (`if_active`, `if_idle`)."""
        from keel.protocol.identifiers import attribute_problem, workflow_id_problem
        from keel.workflows.agent_thread import AgentThread, thread_workflow_id
        from keel.workflows.contracts import AgentThreadInput, ThreadMessage, ThreadSendResult

        if self.app is not None:
            self.app.agent(agent_id)
        problem = (
            attribute_problem("the thread id", thread_id)
            or attribute_problem("the resource id", resource_id)
            or workflow_id_problem("The agent and thread ids", thread_workflow_id(agent_id, thread_id))
        )
        if problem is not None:  # the thread's runs are indexed by both; its entity's id holds the thread id
            raise InvalidRunInput(problem)
        message = ThreadMessage(
            message_id=message_id or f"msg-{uuid.uuid4()}",
            content=content,
            if_active=if_active,
            if_idle=if_idle,
            active_run_id=await self.active_run_of_thread(agent_id, thread_id),
            max_steps=max_steps,
            request_context=request_context,
        )
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            AgentThread.run,
            AgentThreadInput(agent_id=agent_id, thread_id=thread_id, resource_id=resource_id),
            id=thread_workflow_id(agent_id, thread_id),
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"messages for {agent_id} on thread {thread_id}",
        )
        try:
            result: ThreadSendResult = await execute_update_with_start(
                self.temporal, names.SEND_MESSAGE_UPDATE, message, start=start, result_type=ThreadSendResult
            )
            return result
        except WorkflowUpdateFailedError as err:
            raise InvalidRunInput(str(getattr(err.cause, "message", None) or err.cause or err)) from None

    async def deliver(
        self, run_id: str, content: Content, *, message_id: str | None = None, confirm: bool = False
    ) -> str:
        """Deliver a user message into a running `AgentRun` (its `user_message` signal); the message's id. It
        returns at once, also while a step runs.

        A signal cannot answer its sender. With `confirm`, the run is asked afterwards whether it took the message
        (the `message_refusal` query, which sees every signal sent before it, but waits for the workflow task in
        flight: up to a whole step): `MessageRefused` when its unread messages were at their bound."""
        from keel.workflows.contracts import DeliveredMessage

        message_id = message_id or f"msg-{uuid.uuid4()}"
        info = await self.describe(run_id)
        if info.status not in ("running", "suspended"):
            raise RunClosed(run_id)
        handle = self._handle(run_id)
        try:
            await handle.signal(names.USER_MESSAGE_SIGNAL, DeliveredMessage(id=message_id, content=content))
            if not confirm:
                return message_id
            refusal = await handle.query(names.MESSAGE_REFUSAL_QUERY, message_id)
        except WorkflowQueryFailedError:  # a worker older than the query; or the run ended meanwhile
            return message_id
        except RPCError as err:
            raise self._rpc_error(run_id, err) from None
        if isinstance(refusal, str):
            raise MessageRefused(run_id, message_id, refusal)
        return message_id

    async def active_run_of_thread(self, agent_id: str, thread_id: str) -> str | None:
        """The newest open `AgentRun` of the agent on the thread, from visibility."""
        query = (
            f"WorkflowType='{names.AGENT_RUN}' AND KeelAgentId='{quoted(agent_id)}' "
            f"AND KeelThreadId='{quoted(thread_id)}' AND ExecutionStatus='Running'"
        )
        async for execution in self.temporal.list_workflows(query, limit=1):
            return execution.id
        return None

    async def execute_tool(
        self,
        agent_id: str | None,
        tool_name: str,
        args: dict[str, Any] | None = None,
        *,
        request_context: dict[str, Any] | None = None,
        timeout: timedelta = timedelta(minutes=10),
        workspace_id: str | None = None,
        vector_store: str | None = None,
    ) -> ExecuteToolResult:
        """Run one tool of an agent as a run would, outside any run: a standalone activity on a worker of the
        task queue (the Temporal UI lists it under Standalone Activities); with no agent, one of the app's tools
        (`App.tool`), with `workspace_id` one of the HTTP API's tools over that workspace
        (`keel.app.workspace_api_tools`), or with `vector_store` one over that vector store
        (`keel.app.vector_api_tools`). Tried once: a tool may not be idempotent. Raises `NoWorker` when none
        polls, `ToolFailed` when it cannot run (unknown agent or tool, bad arguments); an error the tool answers
        with comes back as `is_error`."""
        from keel.workflows.contracts import ExecuteToolInput, ExecuteToolResult

        await self.wait_for_worker()
        input = ExecuteToolInput(
            agent_id=agent_id or "",
            tool_name=tool_name,
            args=args or {},
            request_context=request_context,
            workspace_id=workspace_id or "",
            vector_store=vector_store or "",
        )
        owner = agent_id or (
            f"workspace-{workspace_id}" if workspace_id else f"vectors-{vector_store}" if vector_store else "app"
        )
        try:
            result: ExecuteToolResult = await self.temporal.execute_activity(
                names.EXECUTE_TOOL,
                input,
                id=f"keel-tool-{owner}-{tool_name}-{uuid.uuid4().hex[:12]}",
                task_queue=self.task_queue,
                result_type=ExecuteToolResult,
                start_to_close_timeout=timeout,
                schedule_to_start_timeout=timedelta(seconds=30),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=1),
                summary=f"{owner}: {tool_name}",
            )
        except ActivityFailureError as err:
            cause = err.cause
            while (
                isinstance(cause, FailureError) and cause.cause is not None and not isinstance(cause, ApplicationError)
            ):
                cause = cause.cause
            raise ToolFailed(tool_name, str(cause or err)) from None
        return result

    async def list_runs(
        self, *, status: RunStatus | None = None, agent_id: str | None = None, limit: int = 100
    ) -> list[RunInfo]:
        query = self._runs_query(status=status, agent_id=agent_id)
        runs = []
        async for ex in self.temporal.list_workflows(query, limit=limit):
            runs.append(RunInfo.from_execution(ex))
        return runs

    async def count_runs(self, *, status: RunStatus | None = None, agent_id: str | None = None) -> int:
        return (await self.temporal.count_workflows(self._runs_query(status=status, agent_id=agent_id))).count

    async def counts(self, agent_ids: Iterable[str] | None = None) -> dict[str, Any]:
        """Running and suspended runs per agent (the app's agents, or `agent_ids`) and in total.

        Only `count_workflows` visibility queries, sent at once, each counting through one agent's index: two per
        agent, so the cost does not grow with the number of open runs (bench/counts.py). This visibility store
        cannot `GROUP BY` a custom attribute, so an agent is counted only when named; `total` is the sum over the
        agents named, or, with none, a count of every agent run.
        """
        ids = list(agent_ids) if agent_ids is not None else list(self.app.agents) if self.app is not None else []
        statuses: tuple[RunStatus, ...] = ("running", "suspended")
        named: list[str | None] = list(ids) or [None]
        keys = [(agent_id, status) for agent_id in named for status in statuses]
        found = await asyncio.gather(*(self.count_runs(status=status, agent_id=a) for a, status in keys))
        agents: dict[str, dict[str, int]] = {}
        total = dict.fromkeys(statuses, 0)
        for (agent_id, status), count in zip(keys, found, strict=True):
            total[status] += count
            if agent_id is not None:
                agents.setdefault(agent_id, {})[status] = count
        return {"agents": agents, "workflows": {}, "total": total}

    async def runs_of_other_agents(self, *, limit: int = 1000) -> dict[str, int]:
        """Open runs on this client's task queue whose agent its app lacks, counted per agent (up to `limit`
        runs looked at): a worker of this app fails them (`UnknownAgent`) when they next run a step."""
        if self.app is None:
            return {}
        known = ", ".join(f"'{quoted(a)}'" for a in self.app.agents) or "''"
        query = (
            f"KeelKind='agent' AND ExecutionStatus='Running' AND TaskQueue='{quoted(self.task_queue)}' "
            f"AND KeelAgentId NOT IN ({known})"
        )
        found: dict[str, int] = {}
        async for ex in self.temporal.list_workflows(query, limit=limit):
            agent = RunInfo.from_execution(ex).agent_id or "?"
            found[agent] = found.get(agent, 0) + 1
        return found

    # --- helpers ---------------------------------------------------------------------------------------

    def _handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        return self.temporal.get_workflow_handle(run_id)

    @staticmethod
    def _runs_query(*, status: str | None, agent_id: str | None) -> str:
        # An open run is one execution; a run that continued as new leaves closed executions behind under the
        # same id, which a listing of closed runs skips. Only agent runs have KeelAgentId.
        clauses = [f"KeelAgentId='{quoted(agent_id)}'" if agent_id is not None else "KeelKind='agent'"]
        if status not in ("running", "suspended"):
            clauses.append("ExecutionStatus!='ContinuedAsNew'")
        if status is not None:
            try:
                clauses.append(_STATUS_QUERIES[status])
            except KeyError:
                raise KeelClientError(f"Unknown status {status!r} (use one of: {', '.join(_STATUS_QUERIES)})") from None
        return " AND ".join(clauses)

    async def worker_error(self, run_id: str, err: RPCError, *, signal_hint: str | None = None) -> KeelClientError:
        """A query's or update's failure; a timeout (or the server's "no poller seen") means no worker answered:
        say whether any polls at all."""
        if not no_worker_answered(err):
            return self._rpc_error(run_id, err)
        return await self._no_answer(run_id, signal_hint=signal_hint)

    async def no_answer(self, run_id: str) -> KeelClientError:
        """What an update or query of the run that no worker answered in time raises: `NoWorker`, saying
        whether any polls the run's task queue at all."""
        return await self._no_answer(run_id, signal_hint=None)

    async def _no_answer(self, run_id: str, *, signal_hint: str | None) -> KeelClientError:
        queue = await self.run_task_queue(run_id)
        if not await self.workers(queue):
            return NoWorker(queue, signal_hint=signal_hint)
        return NoWorker(queue, signal_hint=signal_hint, answered_within=WORKER_ANSWER_SECONDS)

    @staticmethod
    def _rpc_error(run_id: str, err: RPCError) -> KeelClientError:
        # "workflow execution already completed", "... closed", and an update racing the run's end: "workflow
        # update was aborted by closing workflow".
        closed = any(word in err.message.lower() for word in ("already completed", "closed", "closing"))
        if err.status == RPCStatusCode.NOT_FOUND:
            return RunClosed(run_id) if closed else RunNotFound(run_id)
        if err.status == RPCStatusCode.FAILED_PRECONDITION and closed:
            return RunClosed(run_id)
        return KeelClientError(f"Temporal error for run {run_id!r}: {err.message}")


def no_worker_answered(err: RPCError) -> bool:
    """Whether a query's or update's failure means no worker answered it: a timeout, or the server's "no poller
    seen" (none polled the run's task queue recently)."""
    if err.status == RPCStatusCode.FAILED_PRECONDITION:
        return "no poller seen" in err.message
    return err.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED)


def _run_failed(run_id: str, err: WorkflowFailureError) -> RunFailed:
    cause = err.cause
    status: RunStatus = "failed"
    if isinstance(cause, TerminatedError):
        status = "terminated"
    elif isinstance(cause, CancelledError):
        status = "canceled"
    elif isinstance(cause, TimeoutError_):
        status = "timed_out"
    message = str(getattr(cause, "message", None) or cause or err)
    return RunFailed(run_id, message, status=status)


def _refused(err: WorkflowFailureError) -> bool:
    """Whether the execution failed because its run id was already held by another."""
    from keel.workflows.agent_run import RUN_ID_REUSED

    return isinstance(err.cause, ApplicationError) and err.cause.type == RUN_ID_REUSED


def _refused_execution(desc: WorkflowExecutionDescription) -> bool:
    """An `AgentRun` that failed without Keel's search attributes: one refused its run id removes them."""
    return (
        desc.workflow_type == names.AGENT_RUN
        and desc.status == ExecutionStatus.FAILED
        and desc.typed_search_attributes.get(KEEL_KIND) is None
    )


def _gone(identity: str) -> bool:
    """Whether a poller is a process of this host that no longer exists (a worker that crashed or was killed:
    Temporal remembers its last poll for minutes). Identities are `pid@host`, the SDK's default."""
    pid, _, host = identity.partition("@")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _summary(run_input: AgentRunInput) -> str:
    """The run's summary in the UI: the agent, and the first words the user said."""
    messages = run_input.messages
    text = (
        messages
        if isinstance(messages, str)
        else next((m.content for m in reversed(messages) if m.role == "user" and isinstance(m.content, str)), "")
    )
    words = " ".join(text.split())
    return f"{run_input.agent_id}: {words[:77] + '...' if len(words) > 80 else words}"


def _initial_attributes(run_input: AgentRunInput, run_id: str) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [
            SearchAttributePair(KEEL_KIND, "agent"),
            SearchAttributePair(KEEL_STATUS, "running"),
            SearchAttributePair(KEEL_AGENT_ID, run_input.agent_id),
            SearchAttributePair(KEEL_THREAD_ID, run_input.thread_id or run_id),
            SearchAttributePair(KEEL_RESOURCE_ID, run_input.resource_id or run_input.agent_id),
        ]
    )


__all__ = ["KeelClient", "Poller", "RunInfo", "RunStatus"]
