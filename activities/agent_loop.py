"""The agent loop's activities: a model step, a tool call, and the final persist.

Thin adapters between the workflow and the providers: they load what the workflow referenced from storage,
call the model or the tool, write messages and run events, and map failures to retryable or non-retryable
`ApplicationError`s.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pydantic import ValidationError
from pydantic_core import to_json, to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from keel.activities.thread_cache import ThreadCache
from keel.app import Agent, App, ToolContext, UnknownAgent
from keel.model_providers import ModelError, ModelRequest, ModelRetryableError
from keel.storage import NewEvent, Storage, StoredMessage
from keel.workflows.agent_run import FINISH_RUN, MODEL_STEP, TOOL_CALL, TOOLS_THEN_MODEL
from keel.workflows.contracts import (
    EventRecord,
    FinishRunInput,
    MessageRecord,
    ModelStepInput,
    ModelStepResult,
    PlannedToolCall,
    TextPart,
    ToolCallInput,
    ToolCallPart,
    ToolCallResult,
    ToolResultPart,
    ToolsThenModelInput,
    ToolsThenModelResult,
    Usage,
)
from keel.workflows.converter import describe_validation_error

MAX_TOOL_RESULT_BYTES = 1024 * 1024
"""A tool result larger than this (as JSON) becomes a tool error: Temporal rejects payloads near 2 MB."""

DELTA_FLUSH_SECONDS = 0.1
"""Streamed text deltas are written to the event log at most this often (one transaction per flush)."""


class _StepWriter:
    """What one activity execution writes: its messages and its events, tagged with a source and an attempt.

    Events are buffered and written with the step's messages in one storage transaction; a slow stream flushes
    its deltas on the way. The first write numbers the attempt after any earlier execution of the same source.
    """

    def __init__(self, storage: Storage, run_id: str, source: str) -> None:
        self._storage = storage
        self._run_id = run_id
        self._source = source
        self._attempt: int | None = None
        self._buffer: list[NewEvent] = []
        self._last_flush = time.monotonic()

    def add(self, type: str, payload: dict[str, Any]) -> None:
        self._buffer.append(NewEvent(type=type, payload=payload))

    def add_records(self, records: list[EventRecord]) -> None:
        self._buffer.extend(NewEvent(type=r.type, payload=r.payload) for r in records)

    async def delta(self, type: str, payload: dict[str, Any]) -> None:
        self.add(type, payload)
        if time.monotonic() - self._last_flush >= DELTA_FLUSH_SECONDS:
            await self.flush()

    async def flush(self, messages: list[StoredMessage] | None = None, *, replace: bool = False) -> None:
        self._last_flush = time.monotonic()
        if not self._buffer and not messages:
            return
        batch, self._buffer = self._buffer, []
        used = await self._storage.write(
            self._run_id,
            messages=messages,
            replace=replace,
            events=batch,
            source=self._source,
            attempt=self._attempt or activity.info().attempt,
            renumber=self._attempt is None,
        )
        if batch:
            self._attempt = used


class AgentActivities:
    """Activities bound to one app and one storage; the worker registers the bound methods."""

    def __init__(self, app: App, storage: Storage) -> None:
        self._app = app
        self._storage = storage
        self._threads = ThreadCache(storage)

    def _agent(self, agent_id: str) -> Agent:
        try:
            return self._app.agent(agent_id)
        except UnknownAgent as err:
            raise ApplicationError(str(err), type="UnknownAgent", non_retryable=True) from None

    @activity.defn(name=MODEL_STEP)
    async def model_step(self, input: ModelStepInput) -> ModelStepResult:
        return await self._model_step(input)

    async def _model_step(self, input: ModelStepInput) -> ModelStepResult:
        agent = self._agent(input.agent_id)
        events = _StepWriter(self._storage, input.run_id, f"model:{input.step}")
        if input.step == 1:
            await self._storage.create_thread(input.thread_id, input.resource_id)
            events.add("start", {"id": agent.id, "runId": input.run_id, "messageId": input.message_id})
        events.add_records(input.writes.events)
        events.add("step-start", {"messageId": input.message_id, "step": input.step})
        if input.writes.messages:  # the caller's messages, or declined calls' results: context for this step
            await events.flush(self._stored(input.writes.messages, input))
        request = ModelRequest(
            instructions=agent.instructions,
            messages=await self._threads.messages(input.thread_id, before=input.message_id),
            tools=[t.spec for t in agent.tools],
        )
        text_id = f"{input.message_id}-text"
        started = False

        async def on_delta(text: str) -> None:
            nonlocal started
            if not started:
                started = True
                events.add("text-start", {"id": text_id})
            await events.delta("text-delta", {"id": text_id, "text": text})

        try:
            response = await agent.model.generate(request, on_delta)
        except ModelRetryableError as err:
            await events.flush()
            delay = timedelta(seconds=err.retry_after) if err.retry_after is not None else None
            raise ApplicationError(str(err), type="ModelRetryableError", next_retry_delay=delay) from err
        except ModelError as err:
            await events.flush()
            raise ApplicationError(str(err), type="ModelRequestError", non_retryable=True) from err
        if started:
            events.add("text-end", {"type": "text-end", "id": text_id})

        planned = [await self._plan(agent, c.id, c.name, c.args) for c in response.tool_calls]
        _make_ids_unique(planned)
        parts: list[TextPart | ToolCallPart | ToolResultPart] = []
        if response.text:
            parts.append(TextPart(text=response.text))
        parts.extend(ToolCallPart(tool_call_id=p.tool_call_id, tool_name=p.tool_name, args=p.args) for p in planned)
        assistant = MessageRecord(id=input.message_id, role="assistant", content=parts)
        for p in planned:
            call = {"toolCallId": p.tool_call_id, "toolName": p.tool_name, "args": p.args}
            events.add("tool-call", call)
            if p.requires_approval and p.error is None:
                events.add("tool-call-approval", {**call, "resumeSchema": _APPROVAL_SCHEMA})
        finish_reason = "tool-calls" if planned else response.finish_reason
        step_finish = {
            "messageId": input.message_id,
            "stepResult": {"reason": finish_reason, "isContinued": bool(planned)},
            "output": {"text": response.text, "usage": to_jsonable_python(response.usage, by_alias=True)},
        }
        events.add("step-finish", step_finish)
        if not planned:
            total = (input.usage_before or Usage()).plus(response.usage)
            events.add("finish", {**step_finish, "usage": to_jsonable_python(total, by_alias=True)})
        # This step owns its message: replacing it makes a re-execution's answer the one the workflow records.
        await events.flush(self._stored([assistant], input), replace=True)
        return ModelStepResult(
            message_id=input.message_id,
            text=response.text,
            tool_calls=planned,
            finish_reason=finish_reason,
            usage=response.usage,
            max_steps=agent.max_steps,
        )

    async def _plan(self, agent: Agent, call_id: str, name: str, args: dict[str, Any]) -> PlannedToolCall:
        """Resolve a requested call's tool and policy; problems become an `error` the model will see."""
        planned = PlannedToolCall(tool_call_id=call_id, tool_name=name, args=args)
        tool = next((t for t in agent.tools if t.id == name), None)
        if tool is None:
            planned.error = f"Tool {name!r} not found. Available tools: {', '.join(t.id for t in agent.tools)}"
            return planned
        try:
            tool.parse_args(args)
        except ValidationError as err:
            planned.error = f"Invalid arguments for tool {name!r}: {describe_validation_error(err)}"
            return planned
        planned.idempotent = tool.idempotent
        planned.requires_approval = await tool.needs_approval(args)
        return planned

    @activity.defn(name=TOOL_CALL)
    async def tool_call(self, input: ToolCallInput) -> ToolCallResult:
        heartbeat = _start_heartbeat()
        try:
            result, is_error = await self._call_tool(input)
        finally:
            heartbeat.cancel()
        return await self._record_tool_result(input, result, is_error)

    @activity.defn(name=TOOLS_THEN_MODEL)
    async def tools_then_model(self, input: ToolsThenModelInput) -> ToolsThenModelResult:
        """A step's decided tool calls (concurrently), then the model step that reads their results.

        Each tool result is stored before the model is called; a retry of this activity (a lost worker, a
        rate-limited model) reuses the stored results and runs only the tools that had not finished.
        """
        heartbeat = _start_heartbeat()
        try:
            stored = await self._stored_tool_results(input.tools) if activity.info().attempt > 1 else {}
            # Every tool finishes (and stores its result) before a failure is raised: a retry then re-runs only
            # the tool that failed, and no tool is left running after this attempt ends.
            outcomes = await asyncio.gather(
                *(
                    _already(stored[t.result_message_id])
                    if t.result_message_id in stored
                    else self._run_tool_in_step(t, input.tool_timeout_seconds)
                    for t in input.tools
                ),
                return_exceptions=True,
            )
            results: list[ToolCallResult] = []
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
                results.append(outcome)
            model = await self._model_step(input.model)
        finally:
            heartbeat.cancel()
        return ToolsThenModelResult(tool_results=results, model=model)

    async def _run_tool_in_step(self, input: ToolCallInput, timeout: float) -> ToolCallResult:
        try:
            result, is_error = await asyncio.wait_for(self._call_tool(input), timeout)
        except TimeoutError:
            result, is_error = {"error": f"Tool {input.tool_name} did not complete within {timeout:g} s"}, True
        except ApplicationError as err:
            if not err.non_retryable:
                raise  # the step is retried; this tool's result was not stored, so it runs again
            result, is_error = {"error": f"Tool {input.tool_name} did not complete: {err}"}, True
        return await self._record_tool_result(input, result, is_error)

    async def _stored_tool_results(self, calls: list[ToolCallInput]) -> dict[str, ToolCallResult]:
        found: dict[str, ToolCallResult] = {}
        for message in await self._storage.get_messages([c.result_message_id for c in calls]):
            parts = message.content if isinstance(message.content, list) else []
            part = next((p for p in parts if isinstance(p, ToolResultPart)), None)
            if part is not None:
                found[message.id] = ToolCallResult(
                    tool_call_id=part.tool_call_id, tool_name=part.tool_name, result=part.result, is_error=part.is_error
                )
        return found

    async def _call_tool(self, input: ToolCallInput) -> tuple[Any, bool]:
        """Run the tool; its own exceptions become an error result for the model. An `ApplicationError` it
        raises is the tool asking Temporal for a retry (or, non-retryable, to give up) and propagates."""
        agent = self._agent(input.agent_id)
        tool = agent.tool(input.tool_name)
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

    async def _record_tool_result(self, input: ToolCallInput, result: Any, is_error: bool) -> ToolCallResult:
        size = len(to_json(result))
        if size > MAX_TOOL_RESULT_BYTES:
            # Deterministic: re-running would produce the same oversized result and Temporal would refuse it
            # (payload limit) on every attempt. The model is told instead.
            result = {"error": f"Tool {input.tool_name} returned {size} bytes, more than {MAX_TOOL_RESULT_BYTES}"}
            is_error = True
        payload: dict[str, Any] = {
            "toolCallId": input.tool_call_id,
            "toolName": input.tool_name,
            "args": input.args,
        }
        payload["error" if is_error else "result"] = result
        part = ToolResultPart(
            tool_call_id=input.tool_call_id, tool_name=input.tool_name, result=result, is_error=is_error
        )
        result_message = MessageRecord(id=input.result_message_id, role="tool", content=[part])
        events = _StepWriter(self._storage, input.run_id, f"tool:{input.step}:{input.tool_call_id}")
        events.add("tool-error" if is_error else "tool-result", payload)
        await events.flush(self._stored([result_message], input), replace=True)
        return ToolCallResult(
            tool_call_id=input.tool_call_id, tool_name=input.tool_name, result=result, is_error=is_error
        )

    @activity.defn(name=FINISH_RUN)
    async def finish_run(self, input: FinishRunInput) -> None:
        events = _StepWriter(self._storage, input.run_id, "finish")
        events.add_records(input.writes.events)
        usage = to_jsonable_python(input.usage, by_alias=True)
        events.add("finish", {"stepResult": {"reason": input.finish_reason, "isContinued": False}, "usage": usage})
        await events.flush(self._stored(input.writes.messages, input))

    @staticmethod
    def _stored(messages: list[MessageRecord], where: _Where) -> list[StoredMessage]:
        now = datetime.now(UTC)
        return [
            StoredMessage(
                id=m.id,
                thread_id=where.thread_id,
                resource_id=where.resource_id,
                role=m.role,
                content=m.content,
                run_id=where.run_id,
                created_at=now,
            )
            for m in messages
        ]

    def all(self) -> list[Any]:
        return [self.model_step, self.tool_call, self.tools_then_model, self.finish_run]


_APPROVAL_SCHEMA = (
    '{"type":"object","properties":{"approved":{"type":"boolean"},"reason":{"type":"string"}},"required":["approved"]}'
)


def _start_heartbeat() -> asyncio.Task[None]:
    interval = (activity.info().heartbeat_timeout or timedelta(seconds=20)) / 2
    return asyncio.create_task(_heartbeat_every(interval))


async def _already(result: ToolCallResult) -> ToolCallResult:
    return result


async def _heartbeat_every(interval: timedelta) -> None:
    # Not at once: an activity that ends within the interval needs no heartbeat (each one is a server call).
    while True:
        await asyncio.sleep(interval.total_seconds())
        activity.heartbeat()


def _make_ids_unique(calls: list[PlannedToolCall]) -> None:
    """Approval and results are keyed by tool call id: a model that repeats an id within one answer gets
    the repeats renamed (`id-2`, `id-3`, ...), in the message it is shown later too."""
    seen: set[str] = set()
    for call in calls:
        base, n = call.tool_call_id, 1
        while call.tool_call_id in seen:
            n += 1
            call.tool_call_id = f"{base}-{n}"
        seen.add(call.tool_call_id)


class _Where(Protocol):
    run_id: str
    thread_id: str
    resource_id: str
