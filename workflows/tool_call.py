"""`ToolCall`: one tool of an agent called from outside any run (an MCP client's `tools/call`), as a workflow.

(approval wait, when the tool's policy asks) -> the tool as a `keel.execute_tool` activity -> its result.

The execution is the call: its id is derived from the call's id (`tool_call_workflow_id`), so a caller that
retries the call, or another API process after the first died, finds the same execution, waiting or finished,
and its result, and the tool never runs twice. The wait is released as an `AgentRun`'s is: the `tool_approval`
signal (`temporal workflow signal --name tool_approval --input '{"toolCallId": ..., "approved": true}'`) or the
`approve_tool_call` update; `pending_tool_calls` shows the call while it waits.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

from keel.protocol import args_digest, names
from keel.workflows.contracts import (
    ApprovalAccepted,
    ExecuteToolInput,
    ExecuteToolResult,
    PendingToolCall,
    ToolApproval,
    ToolCallOutcome,
    ToolCallRequest,
)
from keel.workflows.options import options_for
from keel.workflows.search_attributes import KEEL_STATUS

DECLINED_REASON = "Tool call was not approved by the user"
"""What a declined call answers (an `AgentRun` tells its model the same)."""

MAX_REJECTED_SIGNALS = 20


def tool_call_workflow_id(agent_id: str, tool_name: str, call_id: str) -> str:
    """The execution of one call: any API process derives the same id from the same call."""
    return f"keel-tool-call-{agent_id}-{tool_name}-{call_id}"


# Unsandboxed, as `AgentRun`: Keel's own code, running no app code (the tool runs in the activity). The test suite
# runs it in the sandbox too.
@workflow.defn(name=names.TOOL_CALL_WORKFLOW, sandboxed=False)
class ToolCall:
    @workflow.init
    def __init__(self, request: ToolCallRequest) -> None:
        # Pending from the start (`workflow.init`): a decision signaled with the start itself, which the workflow
        # reads before `run` begins, finds the call it decides.
        self._pending: PendingToolCall | None = None
        if request.requires_approval:
            self._pending = PendingToolCall(
                tool_call_id=request.tool_call_id,
                tool_name=request.tool_name,
                args=request.args,
                args_digest=args_digest(request.args),
            )
        self._decision: ToolApproval | None = None
        self._rejected: list[str] = []

    # --- handlers ------------------------------------------------------------------------------------

    @workflow.query(name=names.PENDING_TOOL_CALLS_QUERY)
    def pending_tool_calls(self) -> list[PendingToolCall]:
        return [self._pending] if self._pending is not None and self._decision is None else []

    @workflow.query(name=names.REJECTED_SIGNALS_QUERY)
    def rejected_signals(self) -> list[str]:
        """Why recent `tool_approval` signals were ignored (signals cannot answer their sender)."""
        return list(self._rejected)

    @workflow.signal(name=names.TOOL_APPROVAL_SIGNAL)
    def tool_approval(self, raw: RawValue) -> None:
        # Decoded by hand so a malformed payload is recorded and ignored instead of failing the task.
        try:
            approval = workflow.payload_converter().from_payload(raw.payload, ToolApproval)
        except Exception as err:
            self._reject(f"malformed tool_approval payload: {err}")
            return
        if not isinstance(approval, ToolApproval):
            self._reject("malformed tool_approval payload: expected a JSON object {toolCallId, approved}")
            return
        problem = self._approval_problem(approval)
        if problem:
            self._reject(problem)
            return
        self._decision = approval

    @workflow.update(name=names.APPROVE_TOOL_CALL_UPDATE)
    def approve_tool_call(self, approval: ToolApproval) -> ApprovalAccepted:
        self._decision = approval
        return ApprovalAccepted(tool_call_id=approval.tool_call_id)

    @approve_tool_call.validator
    def _validate_approval(self, approval: ToolApproval) -> None:
        if not isinstance(approval, ToolApproval):
            raise ValueError("approve_tool_call takes a JSON object {toolCallId, approved, reason?}")
        problem = self._approval_problem(approval)
        if problem:
            raise ValueError(problem)

    def _approval_problem(self, approval: ToolApproval) -> str | None:
        pending = self._pending
        if self._decision is not None:
            verdict = "approved" if self._decision.approved else "declined"
            return f"tool call {self._decision.tool_call_id!r} was already {verdict}"
        if pending is None or approval.tool_call_id != pending.tool_call_id:
            waiting = pending.tool_call_id if pending is not None else "none"
            return f"no pending tool call {approval.tool_call_id!r} (pending: {waiting})"
        if approval.args_digest is not None and approval.args_digest != pending.args_digest:
            return (
                f"tool call {pending.tool_call_id!r} pending now has arguments of digest {pending.args_digest}, "
                f"not {approval.args_digest}"
            )
        return None

    def _reject(self, why: str) -> None:
        self._rejected = [*self._rejected, why][-MAX_REJECTED_SIGNALS:]

    # --- the call ------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, request: ToolCallRequest) -> ToolCallOutcome:
        if request.requires_approval:
            workflow.upsert_search_attributes([KEEL_STATUS.value_set("suspended")])
            await workflow.wait_condition(lambda: self._decision is not None)
            decision = self._decision
            assert decision is not None
            workflow.upsert_search_attributes([KEEL_STATUS.value_set("running")])
            if not decision.approved:
                workflow.upsert_search_attributes([KEEL_STATUS.value_set("completed")])
                reason = decision.reason or DECLINED_REASON
                return self._outcome(request, {"error": reason}, is_error=True, declined=True, reason=reason)
        outcome = await self._execute(request)
        workflow.upsert_search_attributes([KEEL_STATUS.value_set("completed")])
        return outcome

    async def _execute(self, request: ToolCallRequest) -> ToolCallOutcome:
        options = options_for(workflow.info().task_queue)
        try:
            done: ExecuteToolResult = await workflow.execute_activity(
                names.EXECUTE_TOOL,
                ExecuteToolInput(
                    agent_id=request.agent_id,
                    tool_name=request.tool_name,
                    args=request.args,
                    request_context=request.request_context,
                ),
                result_type=ExecuteToolResult,
                # The tool's `ctx.tool_call_id` and `ctx.run_id` (the activity's id): this execution's id, unique
                # per agent, tool and call, so the tool's `ctx.idempotency_key` is too.
                activity_id=workflow.info().workflow_id,
                start_to_close_timeout=options.tool_start_to_close,
                heartbeat_timeout=options.tool_heartbeat,
                retry_policy=options.idempotent_tool_retry if request.idempotent else options.once_tool_retry,
                summary=f"{request.agent_id}: {request.tool_name}"[:200],
            )
        except ActivityError as err:
            cause: BaseException | None = err.cause
            while (
                isinstance(cause, FailureError) and cause.cause is not None and not isinstance(cause, ApplicationError)
            ):
                cause = cause.cause
            reason = f"Tool {request.tool_name} did not complete: {getattr(cause, 'message', None) or cause or err}"
            return self._outcome(request, {"error": reason}, is_error=True, reason=reason)
        return self._outcome(request, done.result, is_error=done.is_error)

    @staticmethod
    def _outcome(
        request: ToolCallRequest, result: object, *, is_error: bool, declined: bool = False, reason: str | None = None
    ) -> ToolCallOutcome:
        return ToolCallOutcome(
            tool_call_id=request.tool_call_id,
            tool_name=request.tool_name,
            result=result,
            is_error=is_error,
            declined=declined,
            reason=reason,
        )
