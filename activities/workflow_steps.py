"""The activities of a workflow definition run: loading (and pinning) the stored definition with the run's input
checked against its input schema, running an app tool as a tool step, and telling a run just reset what reset it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_core import to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from keel.activities.cancel_requests import until_cancel_requested
from keel.activities.failures import translated
from keel.activities.heartbeat import heartbeating
from keel.activities.reset_origin import reset_origin
from keel.app import App, ToolContext
from keel.app.definitions import ToolSuspended
from keel.protocol import names, tracing
from keel.protocol.validation import describe_validation_error
from keel.protocol.workflow_definition import WorkflowDefinition, schema_problems
from keel.storage import StepRecord, Storage, StorageUnavailable
from keel.workflows.contracts import (
    ClassifierStepInput,
    LoadDefinitionInput,
    LoadDefinitionResult,
    ResetOrigin,
    ResetOriginInput,
    StepSuspension,
    TimeTravel,
    WorkflowToolInput,
    WorkflowToolResult,
    time_travel_key,
)

OUTAGE_WAIT_SECONDS = 300.0
"""How long a tool step waits for its storage to come back before its tool starts (a PostgreSQL restarting):
its attempts (its `retries`, a lost worker's) are for the tool, not for an outage of Keel's storage."""
T = TypeVar("T")


async def outage_waited(call: Callable[[], Awaitable[T]]) -> T:
    """`call`, made again through a storage outage with backoff (0.5 s doubling to 15 s) for up to
    `OUTAGE_WAIT_SECONDS`; the activity heartbeats meanwhile. Past it, the outage fails the attempt."""
    deadline = time.monotonic() + OUTAGE_WAIT_SECONDS
    delay = 0.5
    while True:
        try:
            return await call()
        except StorageUnavailable:
            if time.monotonic() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 15.0)


def _step_context(
    input: WorkflowToolInput | ClassifierStepInput, *, resume_data: Any = None, attempt: int = 1
) -> ToolContext:
    """What a workflow step's tool or classifier sees: the run as its thread, the workflow as its resource."""
    return ToolContext(
        run_id=input.run_id,
        tool_call_id=input.step_id,
        agent_id="",
        thread_id=input.run_id,
        resource_id=input.workflow_id,
        attempt=max(attempt, activity.info().attempt),
        request_context=input.request_context or {},
        resume_data=resume_data,
    )


def invalid(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


class WorkflowSteps:
    """The activities of workflow definition runs, for one app and one storage."""

    def __init__(self, app: App, storage: Storage) -> None:
        self._app = app
        self._storage = storage

    @activity.defn(name=names.LOAD_DEFINITION)
    async def load_definition(self, input: LoadDefinitionInput) -> LoadDefinitionResult:
        """The latest stored version of the workflow (the run pins it: this result is in its history), after
        checking the run's input against its input schema. Unknown workflow or bad input: non-retryable."""
        with translated():
            stored = await self._storage.get_definition(input.workflow_id)
            if stored is None:
                raise invalid(
                    "UnknownWorkflow",
                    f"No stored workflow definition {input.workflow_id!r}: save one with `keel workflows save FILE`",
                )
            try:
                WorkflowDefinition.model_validate(stored.definition)
            except ValidationError as err:
                problem = describe_validation_error(err)
                message = f"The stored definition {input.workflow_id!r} is invalid: {problem}"
                raise invalid("InvalidDefinition", message) from None
            problems = schema_problems(stored.definition.get("inputSchema"), input.input_data)
            if problems:
                raise invalid("InvalidWorkflowInput", "Invalid input: " + "; ".join(problems))
            tools = self._app.workflow_tools()
            return LoadDefinitionResult(
                workflow_id=stored.workflow_id,
                version=stored.version,
                hash=stored.hash,
                definition=stored.definition,
                idempotent_tools={tool_id: t.idempotent for tool_id, t in tools.items()},
                memo_version=False,
                local_tool_steps=True,
                temporal_retry_rule=True,
                foreach_lanes=True,
                start_budget=True,
                reset_origin_goes_on=True,
                re2_patterns=True,
            )

    @activity.defn(name=names.WORKFLOW_TOOL_STEP)
    async def tool_step(self, input: WorkflowToolInput) -> WorkflowToolResult:
        """Run the app tool `tool_id` with the step's input; a tool that suspends answers with its payload."""
        with translated():
            async with heartbeating():
                return await until_cancel_requested(self._tool_step(input))

    async def _tool_step(self, input: WorkflowToolInput) -> WorkflowToolResult:
        tool = self._app.workflow_tools().get(input.tool_id)
        if tool is None:
            raise invalid("UnknownTool", f"Step {input.step_id!r}: no tool {input.tool_id!r} in this app")
        try:
            args = tool.parse_args(input.input_data if isinstance(input.input_data, dict) else {})
        except ValidationError as err:
            problem = describe_validation_error(err)
            message = f"Step {input.step_id!r}: the input of tool {input.tool_id!r} is invalid: {problem}"
            raise invalid("InvalidStepInput", message) from None
        attempt = activity.info().attempt
        if input.call_key is not None:  # its starts, counted: a local attempt may run again at activity attempt 1
            call_key = input.call_key

            async def begin() -> StepRecord:
                return await self._storage.begin_step(input.run_id, tool_ids=[call_key])

            # A local attempt fails at once (the run goes on as a regular activity, seen in the UI), which waits.
            record = await (begin() if activity.info().is_local else outage_waited(begin))
            attempt = record.attempts.get(input.call_key, 1)
        context = _step_context(input, resume_data=input.resume_data, attempt=attempt)
        with tracing.tool_call(
            input.tool_id, input.step_id, run_id=input.run_id, attempt=context.attempt, workflow_id=input.workflow_id
        ) as span:
            span.arguments(input.input_data if isinstance(input.input_data, dict) else {})
            try:
                output = await tool.execute(args, context)
            except ToolSuspended as suspended:
                span.suspended()
                return WorkflowToolResult(
                    suspended=StepSuspension(payload=suspended.payload, resume_schema=suspended.resume_schema)
                )
            except ApplicationError:
                raise
            except Exception as err:  # tried again while the step's `retries` last, then the step fails, and the run
                span.failed(err)
                last = input.tries is None or attempt >= input.tries
                message = f"Step {input.step_id!r}: {type(err).__name__}: {err}"
                raise ApplicationError(message, type="StepFailed", non_retryable=last) from err
            result = WorkflowToolResult(output=to_jsonable_python(output, by_alias=True))
            span.result(result.output, is_error=False)
            return result

    @activity.defn(name=names.WORKFLOW_CLASSIFIER_STEP)
    async def classifier_step(self, input: ClassifierStepInput) -> dict[str, Any]:
        """Run the app's classifier on the step's state: Mastra's `{values, answers, usage}`."""
        with translated():
            classifier = self._app.classifiers.get(input.classifier_id)
            if classifier is None:
                raise invalid("UnknownClassifier", f"Step {input.step_id!r}: no classifier {input.classifier_id!r}")
            try:
                async with heartbeating():  # a classifier may ask a model: a lost worker is noticed in seconds
                    found = await classifier.classify(input.state, _step_context(input))
            except ApplicationError:
                raise
            except Exception as err:
                raise invalid("StepFailed", f"Step {input.step_id!r}: {type(err).__name__}: {err}") from err
            answers = {q: dict(a) if isinstance(a, dict) else {"value": a} for q, a in found.items()}
            return {
                "values": {q: a.get("value") for q, a in answers.items()},
                "answers": to_jsonable_python(answers),
                "usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0},
            }

    @activity.defn(name=names.RESET_ORIGIN)
    async def reset_origin(self, input: ResetOriginInput) -> ResetOrigin:
        """Whether Keel's time travel made the run's latest reset, from which execution, and the instruction
        its client stored before the reset (a local activity of the run's first step start after it)."""
        with translated():
            origin = await reset_origin(activity.client(), input)
            if not origin.time_travel or origin.base_execution_id is None:
                return origin
            key = time_travel_key(origin.base_execution_id)
            stored = (await self._storage.begin_step(input.workflow_id, answer_id=key)).answer
            if stored is None:  # reset by a client that only signals its instruction
                return origin
            return origin.model_copy(update={"instruction": TimeTravel.model_validate(stored)})

    def all(self) -> list[Any]:
        return [self.load_definition, self.tool_step, self.classifier_step, self.reset_origin]
