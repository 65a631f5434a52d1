"""Tool execution: run a tool for a call (in an `execute_tool` span, a workspace tool's operation in a `workspace`
span under it), and store its result as the call's tool message and chunk."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_json, to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from keel.activities.events import StepWriter, mirror_of
from keel.activities.turn_tools import TurnTools
from keel.app import App, Tool, ToolContext, UnknownTool
from keel.app.agent_tools import agent_tool
from keel.app.definitions import ToolSuspended
from keel.app.vector_api_tools import vector_api_tool
from keel.app.workspace_api_tools import workspace_api_tool
from keel.protocol import (
    EventRecord,
    MessageRecord,
    ToolErrorChunk,
    ToolErrorPayload,
    ToolResultChunk,
    ToolResultPart,
    ToolResultPayload,
    log_context,
    metrics,
    tracing,
)
from keel.protocol.validation import describe_validation_error
from keel.storage import Storage, StoredMessage
from keel.workflows.contracts import (
    ExecuteToolInput,
    ExecuteToolResult,
    FileReadRecord,
    KillProcessesInput,
    StepSuspension,
    ToolCallInput,
    ToolCallResult,
    TurnConfig,
)
from keel.workspace_providers.errors import FilesystemUnavailable
from keel.workspace_providers.tools import ReadRecord

MAX_TOOL_RESULT_BYTES = 32 * 1024 * 1024
"""A tool result larger than this (as JSON) becomes a tool error for the model. Smaller results of 256 KiB or more
travel by reference (the payload store), never inline in the history."""


log = logging.getLogger("keel.activities.tools")


def error_text(err: BaseException) -> str:
    """`Name: message` as the model sees a failed call; workspace errors carry Mastra's names."""
    return f"{getattr(err, 'error_name', type(err).__name__)}: {err}"


class ToolCalls:
    """Runs an app's tools against one storage. `host_queue` is the task queue that reaches this worker
    process alone: calls that start a background process report it, so their follow-ups are sent there."""

    def __init__(self, app: App, storage: Storage, host_queue: str | None = None) -> None:
        self._app = app
        self._storage = storage
        self._host_queue = host_queue

    async def call(
        self, input: ToolCallInput, attempt: int | None = None, tool: Tool | None = None
    ) -> tuple[Any, bool, dict[str, Any]]:
        """Run the tool (in an `execute_tool` span); returns its JSON-able result, whether it is an error, and what
        a workspace tool reported (`ToolContext.effects`). `attempt`: the call's attempt as the run's storage counts
        it (a step executed again from scratch is at activity attempt 1 again); the activity's own attempt if
        higher. `tool`: the tool to run, already resolved (else the one the call names).

        The tool's own exceptions become an error result for the model. An `ApplicationError` it raises is the
        tool asking Temporal for a retry (or, non-retryable, to give up) and propagates.
        """
        attempt = max(attempt or 1, activity.info().attempt)
        started_at = time.monotonic()
        context = log_context.bound(
            run_id=input.run_id, agent_id=input.agent_id, step=input.step or None, thread_id=input.thread_id,
            tool_name=input.tool_name, tool_call_id=input.tool_call_id,
        )  # fmt: skip
        with (
            context,
            tracing.tool_call(
                input.tool_name,
                input.tool_call_id,
                run_id=input.run_id or None,
                step=input.step or None,
                agent_id=input.agent_id or None,
                attempt=attempt,
            ) as span,
        ):
            span.arguments(input.args)
            result, is_error, effects = await self._call(input, attempt, span, tool)
            if isinstance(result, StepSuspension):
                span.suspended()
                log.info("Tool %s suspended: it waits for resume data", input.tool_name)
            else:
                span.result(result, is_error=is_error)
                _finished(input, result, is_error, attempt, (time.monotonic() - started_at) * 1000)
            return result, is_error, effects

    async def _call(
        self, input: ToolCallInput, attempt: int, span: tracing.ToolCall, tool: Tool | None = None
    ) -> tuple[Any, bool, dict[str, Any]]:
        try:
            tool = tool or await self._tool(input.agent_id, input.tool_name, input.request_context, input.turn)
        except UnknownTool as err:  # gone since the model step planned the call (an app redeployed): tell the model
            span.failed(err)
            return {"error": str(err)}, True, {}
        record = input.read_record
        ctx = ToolContext(
            run_id=input.run_id,
            tool_call_id=input.tool_call_id,
            agent_id=input.agent_id,
            thread_id=input.thread_id,
            resource_id=input.resource_id,
            attempt=attempt,
            request_context=input.request_context or {},
            read_record=ReadRecord(record.path, record.scope, record.modified_at_ms) if record else None,
            resume_data=input.resume_data,
            session=ThreadSession(self._storage, input) if input.turn is not None else None,
        )
        try:
            with _workspace_span(tool, input.args):
                result = to_jsonable_python(await tool.execute(tool.parse_args(input.args), ctx), by_alias=True)
            return result, False, ctx.effects
        except ToolSuspended as suspended:  # it waits for resume data: the run asks for it, then calls it again
            return StepSuspension(payload=suspended.payload, resume_schema=suspended.resume_schema), False, {}
        except ApplicationError:
            raise
        except FilesystemUnavailable as err:  # the store behind the files is down: wait it out, not tell the model
            span.failed(err)
            raise ApplicationError(
                str(err), type="FilesystemUnavailable", next_retry_delay=timedelta(seconds=min(2**attempt, 15))
            ) from err
        except Exception as err:  # a tool's own failure is an answer for the model, not a retry
            span.failed(err)
            return {"error": error_text(err)}, True, ctx.effects

    async def call_in_step(self, input: ToolCallInput, timeout: float, attempt: int) -> ToolCallResult:
        """Run and record a call inside a fused step: a timeout or a tool giving up becomes an error result;
        a retryable `ApplicationError` propagates (the step is retried, and this tool, unrecorded, runs again)."""
        effects: dict[str, Any] = {}
        try:
            result, is_error, effects = await asyncio.wait_for(self.call(input, attempt), timeout)
            if isinstance(result, StepSuspension):  # nothing recorded: the call runs again once resumed
                return ToolCallResult(tool_call_id=input.tool_call_id, tool_name=input.tool_name, suspended=result)
        except TimeoutError:
            result, is_error = {"error": f"Tool {input.tool_name} did not complete within {timeout:g} s"}, True
            _finished(input, result, is_error, attempt, timeout * 1000)
        except ApplicationError as err:
            outage_over = err.type == "FilesystemUnavailable" and max(attempt, activity.info().attempt) >= 6
            if not err.non_retryable and not outage_over:  # an outage: waited out ~45 s, then the model is told
                raise
            result, is_error = {"error": f"Tool {input.tool_name} did not complete: {err}"}, True
            _finished(input, result, is_error, attempt, 0)
        return await self.record(input, result, is_error, effects)

    async def call_bounded(self, input: ToolCallInput, tool: Tool | None = None) -> ToolCallResult:
        """Run the tool (a call of its own, not in a fused step); storage is left to the workflow's next step."""
        result, is_error, effects = await self.call(input, tool=tool)
        if isinstance(result, StepSuspension):
            return ToolCallResult(tool_call_id=input.tool_call_id, tool_name=input.tool_name, suspended=result)
        return self._with_effects(bounded(input, result, is_error), effects)

    async def execute(self, input: ExecuteToolInput) -> ExecuteToolResult:
        """Run one tool of an agent outside any run (no read records: a write tool that requires a read fails), or
        with `workspace_id` (`vector_store`) one of the HTTP API's tools over that workspace (vector store)."""
        if input.workspace_id:
            tool = workspace_api_tool(self._app, input.workspace_id, input.tool_name)
        elif input.vector_store:
            tool = vector_api_tool(self._app, input.vector_store, input.tool_name)
        else:
            tool = await self._tool(input.agent_id, input.tool_name, input.request_context)
        try:
            tool.parse_args(input.args)
        except ValidationError as err:
            raise ApplicationError(
                f"Invalid arguments for tool {input.tool_name!r}: {describe_validation_error(err)}",
                type="InvalidToolArgs",
                non_retryable=True,
            ) from None
        info = activity.info()
        call = ToolCallInput(
            run_id=info.activity_id,
            agent_id=input.agent_id,
            thread_id="",
            resource_id="",
            step=0,
            tool_call_id=info.activity_id,
            tool_name=input.tool_name,
            args=input.args,
            result_message_id="",
            request_context=input.request_context,
        )
        outcome = await self.call_bounded(call, tool)
        return ExecuteToolResult(result=outcome.result, is_error=outcome.is_error, host_queue=outcome.host_queue)

    async def _tool(
        self, agent_id: str, name: str, request_context: dict[str, Any] | None, turn: TurnConfig | None = None
    ) -> Tool:
        """An agent's tool (its workspace's included), or with no agent one of the app's; in a session's turn,
        one the turn may run (its mode's, not denied)."""
        if turn is not None:
            found = (await TurnTools(self._app, turn, request_context).load()).tool(name)
            if found is None:
                raise UnknownTool(name, agent_id)
            return found
        if not agent_id:
            return self._app.tool(name)
        return await agent_tool(self._app, self._app.agent(agent_id), name, request_context)

    async def kill_processes(self, input: KillProcessesInput) -> list[str]:
        workspace = self._app.workspace_of(self._app.agent(input.agent_id))
        sandbox = await workspace.resolve_sandbox(input.request_context) if workspace is not None else None
        if sandbox is None:
            return []
        return [pid for pid in input.pids if await sandbox.processes.kill(pid)]

    def _with_effects(self, outcome: ToolCallResult, effects: dict[str, Any]) -> ToolCallResult:
        read: ReadRecord | None = effects.get("read")
        if read is not None:
            outcome.file_read = FileReadRecord(path=read.path, scope=read.scope, modified_at_ms=read.modified_at_ms)
        outcome.file_cleared = effects.get("cleared")
        outcome.process_started = effects.get("process_started")
        if outcome.process_started is not None:
            outcome.host_queue = self._host_queue
        return outcome

    async def record(
        self, input: ToolCallInput, result: Any, is_error: bool, effects: dict[str, Any] | None = None
    ) -> ToolCallResult:
        """Store the call's tool message (with what a workspace tool reported) and its `tool-result` /
        `tool-error` chunk in one transaction."""
        outcome = self._with_effects(bounded(input, result, is_error), effects or {})
        result, is_error = outcome.result, outcome.is_error
        events = StepWriter(
            self._storage, input, f"tool:{input.step}:{input.tool_call_id}", mirror=mirror_of(input, input.turn)
        )
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
        kept = outcome.effects()
        part = ToolResultPart(
            tool_call_id=input.tool_call_id,
            tool_name=input.tool_name,
            result=result,
            is_error=is_error,
            provider_metadata={"keel": kept} if kept else None,
        )
        await events.flush([MessageRecord(id=input.result_message_id, role="tool", content=[part])], replace=True)
        return outcome


def _finished(input: ToolCallInput, result: Any, is_error: bool, attempt: int, milliseconds: float) -> None:
    """A finished call's log record and metrics (an error result at WARNING, with its message)."""
    metrics.tool_call(input.agent_id, input.tool_name, is_error=is_error)
    if not log.isEnabledFor(logging.WARNING if is_error else logging.INFO):
        return
    extra = {"attempt": attempt, "duration_ms": round(milliseconds, 1), "is_error": is_error}
    if is_error:
        message = tracing.redacted(str(result.get("error") if isinstance(result, dict) else result))  # a console too
        log.warning("Tool %s failed in %.0f ms: %s", input.tool_name, milliseconds, message, extra=extra)
    else:
        log.info("Tool %s finished in %.0f ms", input.tool_name, milliseconds, extra=extra)


def _workspace_span(tool: Tool, args: Mapping[str, Any]) -> contextlib.AbstractContextManager[object]:
    """A workspace tool's call in its own `workspace {operation}` span (under the tool's), else nothing."""
    wt = tool.workspace_tool
    if wt is None:
        return contextlib.nullcontext()
    return tracing.workspace_operation(
        wt.workspace_tool_name, workspace_id=wt.workspace.id, capability=wt.kind.needs, path=args.get("path")
    )


def stored_result(message: StoredMessage) -> ToolCallResult | None:
    """The outcome an earlier execution of a step stored as the call's tool message (None if it holds none)."""
    parts = message.content if isinstance(message.content, list) else []
    part = next((p for p in parts if isinstance(p, ToolResultPart)), None)
    if part is None:
        return None
    kept = (part.provider_metadata or {}).get("keel", {})
    result = ToolCallResult.model_validate(
        {**kept, "toolCallId": part.tool_call_id, "toolName": part.tool_name, "result": part.result}
        | {"isError": part.is_error}
    )
    result.result_bytes = len(to_json(part.result))
    return result


class ThreadSession:
    """`ToolContext.session` of a turn's tool call: its thread's settings in storage (the thread's metadata) and
    the session's event log."""

    def __init__(self, storage: Storage, input: ToolCallInput) -> None:
        assert input.turn is not None
        self._storage = storage
        self._input = input
        self._log = input.turn.session_id

    async def get_thread_setting(self, key: str) -> Any:
        thread = await self._storage.get_thread(self._input.thread_id)
        return (thread.metadata or {}).get(key) if thread is not None else None

    async def set_thread_setting(self, key: str, value: Any) -> None:
        await self._storage.merge_thread_metadata(self._input.thread_id, {key: value})

    async def emit(self, event: Mapping[str, Any]) -> None:
        source = f"{self._input.run_id}/tool:{self._input.step}:{self._input.tool_call_id}"
        record = EventRecord(type=str(event["type"]), payload=dict(event))
        await self._storage.append_events(self._log, [record], source=source, attempt=activity.info().attempt)


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
