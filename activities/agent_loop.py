"""The agent loop's activities: a model step, a tool call, a step's tools then the next model step, and the final
persist. Each takes one contract model and delegates to the model step (`model_step.py`) or the tool runner
(`tools.py`); what they write goes through `events.py`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from keel.activities.cancel_requests import (
    CANCEL_CHECK_AFTER_SECONDS,
    cancel_requested,
    stop_for_cancel,
    until_cancel_requested,
)
from keel.activities.events import StepWriter
from keel.activities.failures import translated
from keel.activities.heartbeat import heartbeating
from keel.activities.indexing import WorkspaceIndexing
from keel.activities.model_step import ModelSteps
from keel.activities.run_lists import run_lists
from keel.activities.session import SessionActivities
from keel.activities.tools import ToolCalls, stored_result
from keel.activities.workflow_steps import WorkflowSteps
from keel.app import App
from keel.protocol import FinishChunk, FinishPayload, StepResult, names, tracing
from keel.storage import Storage, StoredMessage
from keel.workflows.contracts import (
    ExecuteToolInput,
    ExecuteToolResult,
    FinishRunInput,
    FinishRunResult,
    KillProcessesInput,
    ModelStepInput,
    ModelStepResult,
    PersistWritesInput,
    RunClosedInput,
    ThreadAppendInput,
    ToolCallInput,
    ToolCallResult,
    ToolsThenModelInput,
    ToolsThenModelResult,
)

INLINE_TOOL_RESULT_BYTES = 256
"""A fused step's tool results up to this size (as JSON) come back to the workflow inline, so the Temporal UI
shows them in the step's result; larger ones by reference to their tool message (bench/history.py measured the
history per step against this threshold)."""


async def _asked_to_cancel() -> bool:
    try:
        return await cancel_requested()
    except RPCError:  # unknown: go on as before
        return False


class AgentActivities:
    """Activities bound to one app and one storage; the worker registers `all()`."""

    def __init__(self, app: App, storage: Storage, *, host_queue: str | None = None) -> None:
        self._storage = storage
        self._model = ModelSteps(app, storage)
        self._tools = ToolCalls(app, storage, host_queue)
        self._workflow_steps = WorkflowSteps(app, storage)
        self._indexing = WorkspaceIndexing(app)
        self._sessions = SessionActivities(app, storage)

    @activity.defn(name=names.MODEL_STEP)
    async def model_step(self, input: ModelStepInput) -> ModelStepResult:
        with translated():
            async with heartbeating():  # as a regular activity: a lost worker is noticed in seconds
                return await until_cancel_requested(self._model.run(input), regular_too=True)

    @activity.defn(name=names.TOOL_CALL)
    async def tool_call(self, input: ToolCallInput) -> ToolCallResult:
        """One tool call, alone: its outcome goes back to the workflow, which has the next model step (or the
        final persist) store it; so a storage outage cannot turn a finished side effect into a lost one."""
        with translated():
            async with heartbeating():
                return await self._tools.call_bounded(input)

    @activity.defn(name=names.EXECUTE_TOOL)
    async def execute_tool(self, input: ExecuteToolInput) -> ExecuteToolResult:
        """One tool of an agent, outside any run (a standalone activity: `keel tool`). Bad arguments are a
        non-retryable `InvalidToolArgs`; the tool's own errors come back as an error result."""
        with translated():
            async with heartbeating():
                return await self._tools.execute(input)

    @activity.defn(name=names.KILL_PROCESSES)
    async def kill_processes(self, input: KillProcessesInput) -> list[str]:
        """Kill background processes (a canceled run's) on this host; returns the ones that were running."""
        with translated():
            return await self._tools.kill_processes(input)

    @activity.defn(name=names.TOOLS_THEN_MODEL)
    async def tools_then_model(self, input: ToolsThenModelInput) -> ToolsThenModelResult:
        """A step's decided tool calls (concurrently), then the model step that reads their results.

        Each tool result is stored before the model is called; a retry of this activity (a lost worker, a
        rate-limited model) reuses the stored results and runs only the tools that had not finished.
        """
        with translated():
            return await until_cancel_requested(self._tools_then_model(input), regular_too=True)

    async def _tools_then_model(self, input: ToolsThenModelInput) -> ToolsThenModelResult:
        async with heartbeating():
            # Whatever attempt Temporal says (a local activity lost with its workflow task runs again at attempt
            # 1), storage knows what an earlier execution of this step did: the results it stored, how often
            # each other tool started, and the model answer if it got that far.
            record = await self._storage.begin_step(
                input.model.run_id,
                answer_id=input.model.message_id,
                tool_ids=[t.result_message_id for t in input.tools],
            )
            stored = {key: r for key, message in record.results.items() if (r := stored_result(message)) is not None}
            if record.results or record.answer is not None or any(a > 1 for a in record.attempts.values()):
                tracing.mark_attempt(max(activity.info().attempt, 2, *record.attempts.values()))  # it ran before
            began = time.monotonic()
            # Every tool finishes (and stores its result) before a failure is raised: a retry then re-runs only
            # the tool that failed, and no tool is left running after this attempt ends.
            outcomes = await asyncio.gather(
                *(
                    _already(stored[t.result_message_id])
                    if t.result_message_id in stored
                    else self._tools.call_in_step(
                        t, input.tool_timeout_seconds, record.attempts.get(t.result_message_id, 1)
                    )
                    for t in input.tools
                ),
                return_exceptions=True,
            )
            if time.monotonic() - began >= CANCEL_CHECK_AFTER_SECONDS and await _asked_to_cancel():
                # Asked to stop while the tools ran (and the watch did not see it yet): the model is not asked.
                await stop_for_cancel()
            results: list[ToolCallResult] = []
            for call, outcome in zip(input.tools, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    raise outcome
                if outcome.result_bytes > INLINE_TOOL_RESULT_BYTES:  # stored: the workflow needs only its effects
                    outcome = outcome.by_reference(call.result_message_id)
                results.append(outcome)
            if any(r.suspended is not None for r in results):  # the model waits until the run resumes it
                return ToolsThenModelResult(tool_results=results)
            model = await self._model.run(input.model, record=record)
        return ToolsThenModelResult(tool_results=results, model=model)

    @activity.defn(name=names.FINISH_RUN)
    async def finish_run(self, input: FinishRunInput) -> FinishRunResult:
        with translated():
            events = StepWriter(self._storage, input, "finish")
            events.add_records(input.writes.events)
            step_result = StepResult(reason=input.finish_reason, is_continued=False)
            finish = FinishPayload(step_result=step_result, usage=input.usage)
            events.add(FinishChunk(run_id=input.run_id, payload=finish))
            await events.flush(input.writes.messages)
            calls, results = await run_lists(self._storage, input.thread_id, input.run_id)
            return FinishRunResult(run_tool_calls=calls, run_tool_results=results)

    @activity.defn(name=names.PERSIST_WRITES)
    async def persist_writes(self, input: PersistWritesInput) -> None:
        with translated():
            events = StepWriter(self._storage, input, f"persist:{input.step}")
            events.add_records(input.writes.events)
            await events.flush(input.writes.messages)

    @activity.defn(name=names.APPEND_THREAD_MESSAGE)
    async def append_thread_message(self, input: ThreadAppendInput) -> None:
        """A user message stored in its thread (made if missing), no run reading it. Idempotent by id."""
        with translated():
            await self._storage.create_thread(input.thread_id, input.resource_id)
            message = StoredMessage(
                id=input.message_id,
                thread_id=input.thread_id,
                resource_id=input.resource_id,
                role="user",
                content=input.content,
                created_at=datetime.now(UTC),
            )
            await self._storage.save_messages([message])

    @activity.defn(name=names.WAIT_RUN_CLOSED)
    async def wait_run_closed(self, input: RunClosedInput) -> None:
        """Return once the run has ended, however it ended (heartbeating while it runs)."""
        handle = activity.client().get_workflow_handle(input.run_id)
        while True:
            try:
                status = (await handle.describe()).status
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return
                raise
            if status != WorkflowExecutionStatus.RUNNING:
                return
            activity.heartbeat()
            await asyncio.sleep(1)

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.append_thread_message,
            self.wait_run_closed,
            self.model_step,
            self.tool_call,
            self.tools_then_model,
            self.finish_run,
            self.persist_writes,
            self.execute_tool,
            self.kill_processes,
            *self._workflow_steps.all(),
            *self._indexing.all(),
            *self._sessions.all(),
        ]


async def _already(result: ToolCallResult) -> ToolCallResult:
    return result
