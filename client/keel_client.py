"""The Python client: start runs, wait for results, approve tool calls, list and count runs.

Everything goes through Temporal: a run is a workflow execution, a suspension is a workflow waiting on a
signal or update, a count is a visibility query.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError
from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from keel.app import App
from keel.client.connection import connect
from keel.client.connection import task_queue as default_task_queue
from keel.client.errors import (
    InvalidRunInput,
    KeelClientError,
    RunClosed,
    RunFailed,
    RunIdInUse,
    RunNotFound,
    ToolCallRejected,
)
from keel.protocol import describe_validation_error
from keel.workflows import AgentRun, AgentRunInput, AgentRunResult, ApprovalAccepted, PendingToolCall, ToolApproval
from keel.workflows.search_attributes import (
    KEEL_AGENT_ID,
    KEEL_KIND,
    KEEL_RESOURCE_ID,
    KEEL_STATUS,
    KEEL_THREAD_ID,
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
        )


class KeelClient:
    """Runs, approvals and counts over a connected Temporal client (with Keel's data converter)."""

    def __init__(self, client: Client, *, task_queue: str = "keel", app: App | None = None) -> None:
        self.temporal = client
        self.task_queue = task_queue
        self.app = app

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
        try:
            await self.temporal.start_workflow(
                AgentRun.run,
                run_input,
                id=run_id,
                task_queue=self.task_queue,
                search_attributes=_initial_attributes(run_input, run_id),
                # A run id names one run everywhere (its event log, its messages, its page in the UI).
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:
            raise RunIdInUse(run_id) from None
        return run_id

    async def result(self, run_id: str) -> AgentRunResult:
        """Wait for the run to finish. Raises `RunFailed` with the run's error."""
        try:
            return await self.temporal.get_workflow_handle_for(AgentRun.run, run_id).result()
        except WorkflowFailureError as err:
            cause = err.cause
            raise RunFailed(run_id, str(getattr(cause, "message", None) or cause or err)) from None
        except RPCError as err:
            raise self._rpc_error(run_id, err) from None

    async def describe(self, run_id: str) -> RunInfo:
        try:
            desc: WorkflowExecutionDescription = await self._handle(run_id).describe()
        except RPCError as err:
            raise self._rpc_error(run_id, err) from None
        return RunInfo.from_execution(desc)

    async def pending_tool_calls(self, run_id: str) -> list[PendingToolCall]:
        try:
            return await self.temporal.get_workflow_handle_for(AgentRun.run, run_id).query(AgentRun.pending_tool_calls)
        except RPCError as err:
            raise self._rpc_error(run_id, err) from None

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

        Raises:
            RunNotFound, RunClosed: no such run, or it already finished.
            ToolCallRejected: the run has no pending call with this id (or not that step's, or not with those
                arguments), or it was already decided.
        """
        approval = ToolApproval(
            tool_call_id=tool_call_id, approved=approved, reason=reason, step=step, args_digest=args_digest
        )
        try:
            return await self.temporal.get_workflow_handle_for(AgentRun.run, run_id).execute_update(
                AgentRun.approve_tool_call, approval
            )
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            raise ToolCallRejected(run_id, tool_call_id, str(getattr(cause, "message", None) or cause)) from None
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

    # --- helpers ---------------------------------------------------------------------------------------

    def _handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        return self.temporal.get_workflow_handle(run_id)

    @staticmethod
    def _runs_query(*, status: str | None, agent_id: str | None) -> str:
        # An open run is one execution; a run that continued as new leaves closed executions behind under the
        # same id, which a listing of closed runs skips. Only agent runs have KeelAgentId.
        clauses = [f"KeelAgentId='{_quote(agent_id)}'" if agent_id is not None else "KeelKind='agent'"]
        if status not in ("running", "suspended"):
            clauses.append("ExecutionStatus!='ContinuedAsNew'")
        if status is not None:
            try:
                clauses.append(_STATUS_QUERIES[status])
            except KeyError:
                raise KeelClientError(f"Unknown status {status!r} (use one of: {', '.join(_STATUS_QUERIES)})") from None
        return " AND ".join(clauses)

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


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


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


__all__ = ["KeelClient", "RunInfo", "RunStatus"]
