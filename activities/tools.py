"""Tool execution: run a tool for a call, and store its result as the call's tool message and chunk."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_core import to_json, to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from keel.activities.events import StepWriter
from keel.app import App, ToolContext, UnknownTool
from keel.protocol import (
    MessageRecord,
    ToolErrorChunk,
    ToolErrorPayload,
    ToolResultChunk,
    ToolResultPart,
    ToolResultPayload,
)
from keel.storage import Storage
from keel.workflows.contracts import ToolCallInput, ToolCallResult

MAX_TOOL_RESULT_BYTES = 32 * 1024 * 1024
"""A tool result larger than this (as JSON) becomes a tool error for the model. Smaller results of 256 KiB or more
travel by reference (the payload store), never inline in the history."""


class ToolCalls:
    """Runs an app's tools against one storage."""

    def __init__(self, app: App, storage: Storage) -> None:
        self._app = app
        self._storage = storage

    async def call(self, input: ToolCallInput) -> tuple[Any, bool]:
        """Run the tool; returns its JSON-able result and whether it is an error.

        The tool's own exceptions become an error result for the model. An `ApplicationError` it raises is the
        tool asking Temporal for a retry (or, non-retryable, to give up) and propagates.
        """
        agent = self._app.agent(input.agent_id)
        try:
            tool = agent.tool(input.tool_name)
        except UnknownTool as err:  # gone since the model step planned the call (an app redeployed): tell the model
            return {"error": str(err)}, True
        ctx = ToolContext(
            run_id=input.run_id,
            tool_call_id=input.tool_call_id,
            agent_id=input.agent_id,
            thread_id=input.thread_id,
            resource_id=input.resource_id,
            attempt=activity.info().attempt,
            request_context=input.request_context or {},
        )
        try:
            return to_jsonable_python(await tool.execute(tool.parse_args(input.args), ctx), by_alias=True), False
        except ApplicationError:
            raise
        except Exception as err:  # a tool's own failure is an answer for the model, not a retry
            return {"error": f"{type(err).__name__}: {err}"}, True

    async def call_in_step(self, input: ToolCallInput, timeout: float) -> ToolCallResult:
        """Run and record a call inside a fused step: a timeout or a tool giving up becomes an error result;
        a retryable `ApplicationError` propagates (the step is retried, and this tool, unrecorded, runs again)."""
        try:
            result, is_error = await asyncio.wait_for(self.call(input), timeout)
        except TimeoutError:
            result, is_error = {"error": f"Tool {input.tool_name} did not complete within {timeout:g} s"}, True
        except ApplicationError as err:
            if not err.non_retryable:
                raise
            result, is_error = {"error": f"Tool {input.tool_name} did not complete: {err}"}, True
        return await self.record(input, result, is_error)

    async def call_bounded(self, input: ToolCallInput) -> ToolCallResult:
        """Run the tool (a call of its own, not in a fused step); storage is left to the workflow's next step."""
        result, is_error = await self.call(input)
        return bounded(input, result, is_error)

    async def record(self, input: ToolCallInput, result: Any, is_error: bool) -> ToolCallResult:
        """Store the call's tool message and its `tool-result` / `tool-error` chunk in one transaction."""
        outcome = bounded(input, result, is_error)
        result, is_error = outcome.result, outcome.is_error
        events = StepWriter(self._storage, input, f"tool:{input.step}:{input.tool_call_id}")
        if is_error:
            error = ToolErrorPayload(
                tool_call_id=input.tool_call_id, tool_name=input.tool_name, args=input.args, error=result
            )
            events.add(ToolErrorChunk(run_id=input.run_id, payload=error))
        else:
            ok = ToolResultPayload(
                tool_call_id=input.tool_call_id, tool_name=input.tool_name, args=input.args, result=result
            )
            events.add(ToolResultChunk(run_id=input.run_id, payload=ok))
        part = ToolResultPart(
            tool_call_id=input.tool_call_id, tool_name=input.tool_name, result=result, is_error=is_error
        )
        await events.flush([MessageRecord(id=input.result_message_id, role="tool", content=[part])], replace=True)
        return outcome

    async def stored_results(self, calls: list[ToolCallInput]) -> dict[str, ToolCallResult]:
        """Results an earlier attempt of the same step already stored, by result message id."""
        found: dict[str, ToolCallResult] = {}
        for message in await self._storage.get_messages([c.result_message_id for c in calls]):
            parts = message.content if isinstance(message.content, list) else []
            part = next((p for p in parts if isinstance(p, ToolResultPart)), None)
            if part is not None:
                found[message.id] = ToolCallResult(
                    tool_call_id=part.tool_call_id, tool_name=part.tool_name, result=part.result, is_error=part.is_error
                )
        return found


def bounded(input: ToolCallInput, result: Any, is_error: bool) -> ToolCallResult:
    """The call's outcome, with a result over `MAX_TOOL_RESULT_BYTES` replaced by an error for the model (it is
    deterministic: re-running the tool would return the same)."""
    size = len(to_json(result))
    if size > MAX_TOOL_RESULT_BYTES:
        limit = MAX_TOOL_RESULT_BYTES // (1024 * 1024)
        result = {"error": f"Tool {input.tool_name} returned {size / (1024 * 1024):.1f} MiB, more than {limit} MiB"}
        is_error, size = True, len(to_json(result))
    return ToolCallResult(
        tool_call_id=input.tool_call_id, tool_name=input.tool_name, result=result, is_error=is_error, result_bytes=size
    )
