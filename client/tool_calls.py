"""One tool of an agent called from outside any run (an MCP client's `tools/call`), as a durable `ToolCall`
workflow (`keel.workflows.tool_call`): the approval wait, when the tool's policy asks, and the tool itself are
in Temporal, not in the caller's process.

    calls = ToolCalls(keel)
    started = await calls.start("demo", tool, {"title": "t", "text": "hello"}, call_id="c-1")
    outcome = await calls.result(started)  # waits through the approval (`temporal workflow signal ...`)

The execution's id comes from the call's id (`tool_call_workflow_id`): starting the same call again attaches to
the execution already there, waiting (the same wait) or finished (its result), so a retried call, or one
repeated after the caller's process died, never runs the tool twice.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import TerminatedError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from keel.client.errors import CallIdInUse, InvalidRunInput, KeelClientError, RunNotFound
from keel.client.outages import through_outages
from keel.protocol import args_digest, names
from keel.workflows.search_attributes import KEEL_KIND, KEEL_STATUS

if TYPE_CHECKING:
    from keel.app import Tool
    from keel.client.keel_client import KeelClient
    from keel.workflows.contracts import ToolCallOutcome, ToolCallRequest

CALL_MEMO = "keelCall"
"""The memo of a call's execution: the agent, tool and argument digest the call id was first used for."""
CALL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
"""A caller's call id: it becomes part of a workflow id and the tool's `ctx.tool_call_id` (file names use it)."""


@dataclass(frozen=True)
class StartedToolCall:
    """A call's execution, started or found: where its result will be."""

    workflow_id: str
    tool_call_id: str
    tool_name: str
    requires_approval: bool

    def approval_command(self, approved: bool = True) -> str:
        """The `temporal` command that decides the call."""
        decision = json.dumps({"toolCallId": self.tool_call_id, "approved": approved})
        return (
            f"temporal workflow signal --workflow-id {self.workflow_id} "
            f"--name {names.TOOL_APPROVAL_SIGNAL} --input '{decision}'"
        )


class ToolCalls:
    """Starts, follows and decides `ToolCall` executions over a `KeelClient`."""

    def __init__(self, keel: KeelClient) -> None:
        self.keel = keel

    async def start(
        self,
        agent_id: str,
        tool: Tool,
        args: Mapping[str, Any],
        *,
        call_id: str | None = None,
        request_context: Mapping[str, Any] | None = None,
        caller: str | None = None,
    ) -> StartedToolCall:
        """Start the call's execution, or find the one already under its id. The tool's approval policy is
        decided here, with the arguments (the app is at hand), and recorded in the execution's input.

        Raises:
            InvalidRunInput: `call_id` is not a valid call id.
            NoWorker: no worker polls the task queue (nothing would run the call).
        """
        from keel.workflows.contracts import ToolCallRequest
        from keel.workflows.tool_call import tool_call_workflow_id

        if call_id is not None and not CALL_ID.fullmatch(call_id):
            raise InvalidRunInput(
                f"call id {call_id!r}: up to 128 letters, digits and _ . : - (starting with a letter or digit)"
            )
        caller_chose_id = call_id is not None
        call_id = call_id or f"call-{uuid.uuid4().hex}"
        request = ToolCallRequest(
            agent_id=agent_id,
            tool_name=tool.id,
            tool_call_id=call_id,
            args=dict(args),
            request_context=dict(request_context) if request_context is not None else None,
            requires_approval=await tool.needs_approval(args),
            idempotent=tool.idempotent,
            caller=caller,
        )
        workflow_id = tool_call_workflow_id(agent_id, tool.id, call_id)
        call = {"agentId": agent_id, "toolName": tool.id, "argsDigest": args_digest(dict(args))}

        sent = False

        async def start() -> None:
            nonlocal sent
            if not sent:  # once the start may have reached the server, its execution exists: no worker check
                await self.keel.wait_for_worker()
            sent = True
            await self._start(request, workflow_id, call, caller_chose_id=caller_chose_id)

        # Made again while the server is away: the call's id is its execution's, so a start that reached the
        # server before it went attaches to that execution. A definite refusal is raised as the server gave it.
        await through_outages(start, lambda err: err)
        return StartedToolCall(workflow_id, call_id, tool.id, request.requires_approval)

    async def _start(
        self, request: ToolCallRequest, workflow_id: str, call: dict[str, str], *, caller_chose_id: bool
    ) -> None:
        from keel.workflows.tool_call import ToolCall

        try:
            handle = await self.keel.temporal.start_workflow(
                ToolCall.run,
                request,
                id=workflow_id,
                task_queue=self.keel.task_queue,
                search_attributes=TypedSearchAttributes(
                    [SearchAttributePair(KEEL_KIND, "tool"), SearchAttributePair(KEEL_STATUS, "running")]
                ),
                static_summary=f"{request.caller or 'call'}: {request.agent_id} {request.tool_name}"[:200],
                # The same call again attaches: to the execution still running, or (refused a second one once it
                # closed) to the one that finished, whose result stands.
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                request_eager_start=self.keel.eager_start,
                memo={CALL_MEMO: call},
            )
        except WorkflowAlreadyStartedError:
            handle = self.keel.temporal.get_workflow_handle(workflow_id)
        if caller_chose_id:  # the execution under the id may be another call's: then this one is refused
            await self._same_call(handle, request.tool_call_id, call)

    async def _same_call(self, handle: WorkflowHandle[Any, Any], call_id: str, call: dict[str, str]) -> None:
        recorded = (await (await handle.describe()).memo()).get(CALL_MEMO)
        if not isinstance(recorded, dict):
            return  # an execution started before calls were recorded: nothing to compare with
        if (recorded.get("agentId"), recorded.get("toolName")) != (call["agentId"], call["toolName"]):
            what = f"tool {recorded.get('toolName')!r} of agent {recorded.get('agentId')!r}"
            raise CallIdInUse(call_id, handle.id, what)
        if recorded.get("argsDigest") != call["argsDigest"]:
            raise CallIdInUse(call_id, handle.id, "the same tool with other arguments")

    async def result(self, call: StartedToolCall) -> ToolCallOutcome:
        """Wait for the call's outcome (through its approval wait, and through Temporal outages: the execution
        keeps the call, so the wait goes on until the server answers again or the caller gives up). An
        execution that ended without an outcome (terminated, canceled, timed out) answers an error outcome
        that says so.

        Raises:
            RunNotFound: no execution has the call's workflow id.
        """
        from keel.workflows.contracts import ToolCallOutcome

        handle = self.keel.temporal.get_workflow_handle(call.workflow_id, result_type=ToolCallOutcome)

        async def outcome() -> ToolCallOutcome:
            try:
                found: ToolCallOutcome = await handle.result()
                return found
            except WorkflowFailureError as err:
                return self._ended_without_outcome(call, err)

        return await through_outages(outcome, lambda err: self._rpc_error(call.workflow_id, err))

    async def closed(self, call: StartedToolCall) -> bool:
        """Whether the call's execution has closed (asked again while the server is away)."""
        from temporalio.client import WorkflowExecutionStatus

        async def status() -> WorkflowExecutionStatus | None:
            return (await self.keel.temporal.get_workflow_handle(call.workflow_id).describe()).status

        found = await through_outages(status, lambda err: self._rpc_error(call.workflow_id, err))
        return found not in (None, WorkflowExecutionStatus.RUNNING)

    @staticmethod
    def _ended_without_outcome(call: StartedToolCall, err: WorkflowFailureError) -> ToolCallOutcome:
        from keel.workflows.contracts import ToolCallOutcome

        how = "was terminated" if isinstance(err.cause, TerminatedError) else "failed"
        why = f"The execution of tool call {call.tool_call_id} ({call.workflow_id}) {how}: {err.cause or err}"
        return ToolCallOutcome(
            tool_call_id=call.tool_call_id, tool_name=call.tool_name, result={"error": why}, is_error=True, reason=why
        )

    @staticmethod
    def _rpc_error(workflow_id: str, err: RPCError) -> KeelClientError:
        if err.status == RPCStatusCode.NOT_FOUND:
            return RunNotFound(workflow_id)
        return KeelClientError(f"Temporal error for tool call {workflow_id!r}: {err.message}")


__all__ = ["CALL_ID", "StartedToolCall", "ToolCalls"]
