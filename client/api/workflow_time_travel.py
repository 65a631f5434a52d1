"""Mastra's time travel and restart of a workflow run: `POST /api/workflows/:workflowId/time-travel`,
`time-travel-async`, `time-travel-stream`, `restart` and `restart-async` (`?runId=RUN`), as the unmodified
`@mastra/client-js` calls them (`run.timeTravel`, `timeTravelAsync`, `timeTravelStream`, `restart`,
`restartAsync`).

Time travel runs a stored definition's run again from a step (`keel.client.workflow_time_travel`: its
instruction stored, then Temporal's reset). As in Mastra, `time-travel` answers `{message}` once the run is
under way again (with what the reset did), `time-travel-async` once it has ended or suspended (Mastra's
WorkflowResult; a run still going after `SETTLE_SECONDS` answers its state then, `running`, never a 5xx that
the client would send again as a second time travel), and `time-travel-stream` streams its chunks from the
step on (after the run's `workflow-start`), as `stream` does.

Restart, in Mastra, re-drives a run its process lost (its snapshot says running, nothing runs it). On Temporal
no active run is lost: a lost worker's workflow task and activities are retried on another, so there is
nothing to restart, and the answer says so: `restart` 200 with that message, `restart-async` the run's result
once it ends or suspends (Mastra's answer for a run it restarts). Keel's time travel stores its instruction
before its reset, so no run waits for one; a run reset by the version before (which signalled it after the
reset) waits for that signal, and if the API stopped before sending it, restart lets the run go on: with the
instruction if one is stored, else as a plain reset. Mastra's refusals stay: a suspended or canceled run "was
not active" (409, resume it instead); an ended one answers its result, as Mastra's does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import Field
from temporalio.client import WorkflowExecutionStatus

from keel.client.api.bodies import Lenient
from keel.client.api.context import Ctx
from keel.client.api.errors import ApiError, bad_request
from keel.client.api.shapes import workflow_result
from keel.client.api.streams import record_stream, workflow_events
from keel.client.api.workflows import RunIdQuery, _known, _run_handle
from keel.client.workflow_time_travel import RunStillRunning, WorkflowTimeTravel, release, time_travel
from keel.workflows.search_attributes import KEEL_STATUS

router = APIRouter(tags=["workflows"])


class TimeTravelBody(Lenient):
    step: str | list[str]
    """The step to run again from: its id, or Mastra's path of ids (`"a.b"`, `["a", "b"]`)."""
    input_data: Any = Field(None, alias="inputData")
    resume_data: Any = Field(None, alias="resumeData")
    initial_state: Any = Field(None, alias="initialState")
    context: dict[str, Any] | None = None
    nested_steps_context: dict[str, dict[str, Any]] | None = Field(None, alias="nestedStepsContext")
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")
    per_step: bool | None = Field(None, alias="perStep")


class RestartBody(Lenient):
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")


def _target(body: TimeTravelBody) -> str:
    path = body.step.split(".") if isinstance(body.step, str) else body.step
    if not path or any(not part for part in path):
        raise bad_request("Step is required and must be a valid step or array of steps")
    if len(path) > 1:
        raise bad_request(
            f"Step {'.'.join(path)!r} is inside nested workflow {path[0]!r}, which runs as a run of its own: time "
            "travel that run (or time travel this one to the nested workflow's step)"
        )
    if body.context or body.nested_steps_context:
        raise bad_request(
            "context and nestedStepsContext are not supported: the steps before the one time travelled to keep "
            "what the run recorded (give the step's new input as inputData)"
        )
    if body.initial_state is not None:
        raise bad_request("initialState is not supported: stored workflow definitions keep no run state")
    if body.per_step:
        raise bad_request("perStep is not supported: the run goes on from the step to its end or next suspension")
    return path[0]


async def _travel(ctx: Ctx, workflow_id: str, run_id: str | None, body: TimeTravelBody) -> WorkflowTimeTravel:
    if not run_id:
        raise bad_request("runId required to time travel workflow")
    await _known(ctx, workflow_id)
    await _run_handle(ctx, workflow_id, run_id)
    step = _target(body)
    if workflow_id in ctx.app.code_workflows():
        raise bad_request(f"Workflow {workflow_id} is a code workflow: time travel re-runs stored definitions' runs")
    try:
        return await time_travel(
            ctx.keel,
            ctx.storage,
            run_id,
            step,
            workflow_id=workflow_id,
            input_data=body.input_data,
            resume_data=body.resume_data,
            request_context=body.request_context,
            tools=ctx.app.workflow_tools(),
        )
    except RunStillRunning as err:
        raise ApiError(409, str(err)) from None


@router.post("/workflows/{workflow_id}/time-travel")
async def time_travel_run(
    ctx: Ctx, workflow_id: str, body: TimeTravelBody, run_id: RunIdQuery = None
) -> dict[str, Any]:
    travel = await _travel(ctx, workflow_id, run_id, body)
    return {"message": "Workflow run time travel started", **travel.to_json()}


@router.post("/workflows/{workflow_id}/time-travel-async")
async def time_travel_async(
    ctx: Ctx, workflow_id: str, body: TimeTravelBody, run_id: RunIdQuery = None
) -> dict[str, Any]:
    travel = await _travel(ctx, workflow_id, run_id, body)
    status = await ctx.workflows.settled_or_running(travel.run_id)
    return workflow_result(travel.run_id, status.state)


@router.post("/workflows/{workflow_id}/time-travel-stream")
async def time_travel_stream(
    ctx: Ctx, workflow_id: str, body: TimeTravelBody, run_id: RunIdQuery = None
) -> StreamingResponse:
    travel = await _travel(ctx, workflow_id, run_id, body)
    handle = ctx.keel.temporal.get_workflow_handle(travel.run_id)
    return record_stream(_from_step(travel, workflow_events(handle, travel.events_offset)))


Chunks = AsyncIterator[dict[str, Any]]


async def _from_step(travel: WorkflowTimeTravel, events: Chunks) -> Chunks:
    """The run's `workflow-start`, then its chunks from the step's entry on (those before it are the old run's)."""
    payload = {"workflowId": travel.workflow_id}
    yield {"type": "workflow-start", "runId": travel.run_id, "from": "WORKFLOW", "payload": payload}
    async for event in events:
        yield event


async def _restart(ctx: Ctx, workflow_id: str, run_id: str | None) -> tuple[str, Any]:
    """What a restart finds: a message, and the handle of a run that is active or has ended."""
    if not run_id:
        raise bad_request("runId required to restart workflow")
    await _known(ctx, workflow_id)
    handle = await _run_handle(ctx, workflow_id, run_id)
    described = await handle.describe()
    if described.status == WorkflowExecutionStatus.RUNNING:
        if described.typed_search_attributes.get(KEEL_STATUS) == "suspended":
            raise ApiError(409, "This workflow run was not active: it is suspended, waiting to be resumed")
        released = await release(ctx.keel, ctx.storage, run_id)
        if released is not None:
            lost = "it had been reset by a time travel whose instruction was lost, and goes on as a plain reset"
            if released.step is not None:
                lost = "it had been reset by a time travel whose signal was lost, and goes on with its instruction"
            return f"Workflow run restarted: {lost}", handle
        return "Workflow run is active: Temporal keeps running it, so there was nothing to restart", handle
    if described.status == WorkflowExecutionStatus.CANCELED:
        raise ApiError(409, "This workflow run was not active: it was canceled")
    return "Workflow run has already ended: there was nothing to restart", handle


@router.post("/workflows/{workflow_id}/restart")
async def restart(
    ctx: Ctx, workflow_id: str, body: RestartBody | None = None, run_id: RunIdQuery = None
) -> dict[str, Any]:
    message, _ = await _restart(ctx, workflow_id, run_id)
    return {"message": message}


@router.post("/workflows/{workflow_id}/restart-async")
async def restart_async(
    ctx: Ctx, workflow_id: str, body: RestartBody | None = None, run_id: RunIdQuery = None
) -> dict[str, Any]:
    _, handle = await _restart(ctx, workflow_id, run_id)
    status = await ctx.workflows.settled_or_running(handle.id)
    return workflow_result(handle.id, status.state)
