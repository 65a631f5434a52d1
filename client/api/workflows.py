"""`/api/workflows` and `/api/stored/workflows`: code workflows and stored definitions, their runs (Temporal
executions of the definition's type), their streams (the run's `events` query) and the stored definitions.

`create-run` only names a run: the execution starts with `start`, `start-async` or `stream` (under that id).
A resource id given to `create-run` is kept in storage (for `CREATED_RUN_DAYS`), and the run starts as that
resource's when the start names none (client-js `start` never does); without one, nothing is left behind."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import Field
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from keel.client.api.bodies import IndexedId, Lenient, UtcTime
from keel.client.api.context import Ctx
from keel.client.api.errors import ApiError, bad_request, not_found
from keel.client.api.shapes import superjson, workflow_result
from keel.client.api.streams import record_stream, workflow_events
from keel.client.workflows import WorkflowNotFound, code_workflow_info
from keel.protocol import names
from keel.protocol.workflow_definition import schema_problems
from keel.workflows.contracts import WorkflowRunState
from keel.workflows.search_attributes import KEEL_RESOURCE_ID

router = APIRouter(tags=["workflows"])
RunIdQuery = Annotated[str | None, Query(alias="runId")]


class CreateRunBody(Lenient):
    resource_id: IndexedId | None = Field(None, alias="resourceId")


class StartBody(Lenient):
    input_data: Any = Field(None, alias="inputData")
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")
    resource_id: IndexedId | None = Field(None, alias="resourceId")


class ResumeBody(Lenient):
    step: str | list[str] | None = None
    resume_data: Any = Field(None, alias="resumeData")
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")


class UpsertBody(Lenient):
    id: str
    dependencies: list[dict[str, Any]] | None = None


async def _info(ctx: Ctx, workflow_id: str | None = None) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for w in await ctx.workflows.listing():
        if workflow_id is not None and w["id"] != workflow_id:
            continue
        steps: dict[str, Any] = {}
        if w["origin"] == "storage":
            stored = await ctx.workflows.get(w["id"])
            for entry in stored.definition.get("graph", []):
                if isinstance(entry, dict) and entry.get("id"):
                    steps[entry["id"]] = {"id": entry["id"], "description": entry.get("description")}
        found[w["id"]] = {
            "name": w["id"],
            "description": w.get("description"),
            "origin": "code" if w["origin"] == "code" else "dynamic",
            "steps": steps,
            "allSteps": steps,
            "stepGraph": [{"type": "step", "step": s} for s in steps.values()],
            "inputSchema": superjson(w.get("inputSchema") or {}),
            "outputSchema": superjson(w.get("outputSchema") or {}),
        }
    return found


async def _known(ctx: Ctx, workflow_id: str) -> None:
    """A 404 unless the app has the code workflow or the storage the definition (one lookup, no listing)."""
    if workflow_id not in ctx.app.code_workflows() and await ctx.storage.get_definition(workflow_id) is None:
        raise not_found(f"Workflow with id {workflow_id} not found")


async def _input(ctx: Ctx, workflow_id: str, body: StartBody) -> dict[str, Any]:
    """The inputData, checked against the workflow's input schema here (a 400, no run); a 404 for a workflow
    neither the app nor the storage has."""
    code = ctx.app.code_workflows().get(workflow_id)
    if code is not None:
        schema = code_workflow_info(workflow_id, code)["inputSchema"]
    else:
        stored = await ctx.storage.get_definition(workflow_id)
        if stored is None:
            raise not_found(f"Workflow with id {workflow_id} not found")
        schema = stored.definition.get("inputSchema")
    data = body.input_data if body.input_data is not None else {}
    if not isinstance(data, dict):
        raise bad_request("Invalid input data: the inputData must be a JSON object")
    problems = schema_problems(schema, data)
    if problems:
        raise bad_request("Invalid input data: \n- " + "\n- ".join(problems))
    return data


@router.get("/workflows")
async def list_workflows(ctx: Ctx) -> dict[str, Any]:
    return await _info(ctx)


@router.get("/workflows/run-counts")
async def run_counts(ctx: Ctx) -> dict[str, Any]:
    return await ctx.workflows.counts()


@router.get("/workflows/{workflow_id}")
async def get_workflow(ctx: Ctx, workflow_id: str) -> dict[str, Any]:
    found = await _info(ctx, workflow_id)
    if not found:
        raise not_found(f"Workflow with id {workflow_id} not found")
    return found[workflow_id]


@router.post("/workflows/{workflow_id}/create-run")
async def create_run(
    ctx: Ctx,
    workflow_id: str,
    body: CreateRunBody | None = None,
    run_id: RunIdQuery = None,
) -> dict[str, Any]:
    await _known(ctx, workflow_id)
    run_id = run_id or str(uuid.uuid4())
    if body is not None and body.resource_id:
        await ctx.workflows.storage.remember_created_run(run_id, workflow_id, body.resource_id)
    return {"runId": run_id}


@router.post("/workflows/{workflow_id}/start")
async def start(
    ctx: Ctx,
    workflow_id: str,
    body: StartBody,
    run_id: RunIdQuery = None,
) -> dict[str, Any]:
    data = await _input(ctx, workflow_id, body)
    await ctx.workflows.start(
        workflow_id, data, run_id=run_id, resource_id=body.resource_id, request_context=body.request_context
    )
    return {"message": "Workflow run started"}


@router.post("/workflows/{workflow_id}/start-async")
async def start_async(
    ctx: Ctx,
    workflow_id: str,
    body: StartBody,
    run_id: RunIdQuery = None,
) -> dict[str, Any]:
    data = await _input(ctx, workflow_id, body)
    status = await ctx.workflows.start_and_settle(
        workflow_id, data, run_id=run_id, resource_id=body.resource_id, request_context=body.request_context
    )
    return workflow_result(status.run_id, status.state, data)


@router.post("/workflows/{workflow_id}/stream")
async def stream(
    ctx: Ctx,
    workflow_id: str,
    body: StartBody,
    run_id: RunIdQuery = None,
) -> StreamingResponse:
    data = await _input(ctx, workflow_id, body)
    started = await ctx.workflows.start(
        workflow_id, data, run_id=run_id, resource_id=body.resource_id, request_context=body.request_context
    )
    return record_stream(workflow_events(ctx.keel.temporal.get_workflow_handle(started)))


def _step(body: ResumeBody) -> str:
    if body.step is None:
        raise bad_request("step is required: the suspended step to resume")
    return body.step if isinstance(body.step, str) else ".".join(body.step)


async def _run_handle(ctx: Ctx, workflow_id: str, run_id: str | None) -> Any:
    if not run_id:
        raise bad_request("runId is required")
    handle = ctx.keel.temporal.get_workflow_handle(run_id)
    try:
        described = await handle.describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise not_found(f"Workflow run {run_id} not found") from None
        raise
    if described.workflow_type != workflow_id:
        raise not_found(f"Workflow run {run_id} not found for workflow {workflow_id}")
    return handle


async def _resume(ctx: Ctx, workflow_id: str, run_id: str | None, body: ResumeBody) -> Any:
    handle = await _run_handle(ctx, workflow_id, run_id)
    if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
        raise ApiError(409, "This workflow run was not suspended")
    await ctx.workflows.resume(handle.id, _step(body), body.resume_data)
    return handle


@router.post("/workflows/{workflow_id}/resume")
async def resume(
    ctx: Ctx,
    workflow_id: str,
    body: ResumeBody,
    run_id: RunIdQuery = None,
) -> dict[str, Any]:
    await _resume(ctx, workflow_id, run_id, body)
    return {"message": "Workflow run resumed"}


@router.post("/workflows/{workflow_id}/resume-async")
async def resume_async(
    ctx: Ctx,
    workflow_id: str,
    body: ResumeBody,
    run_id: RunIdQuery = None,
) -> dict[str, Any]:
    handle = await _resume(ctx, workflow_id, run_id, body)
    status = await ctx.workflows.settled_or_running(handle.id)
    return workflow_result(handle.id, status.state)


@router.post("/workflows/{workflow_id}/resume-stream")
async def resume_stream(
    ctx: Ctx,
    workflow_id: str,
    body: ResumeBody,
    run_id: RunIdQuery = None,
) -> StreamingResponse:
    handle = await _run_handle(ctx, workflow_id, run_id)
    offset = len(await handle.query(names.EVENTS_QUERY, 0, result_type=list))
    await _resume(ctx, workflow_id, run_id, body)
    return record_stream(workflow_events(handle, offset))


@router.post("/workflows/{workflow_id}/observe")
async def observe(
    ctx: Ctx,
    workflow_id: str,
    run_id: RunIdQuery = None,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> StreamingResponse:
    handle = await _run_handle(ctx, workflow_id, run_id)
    return record_stream(workflow_events(handle, offset, through_suspensions=True))


@router.get("/workflows/{workflow_id}/runs")
async def list_runs(
    ctx: Ctx,
    workflow_id: str,
    from_date: Annotated[UtcTime | None, Query(alias="fromDate")] = None,
    to_date: Annotated[UtcTime | None, Query(alias="toDate")] = None,
    page: Annotated[int | None, Query(ge=0)] = None,
    per_page: Annotated[int | None, Query(alias="perPage", ge=1, le=1000)] = None,
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
    offset: Annotated[int | None, Query(ge=0)] = None,
    resource_id: Annotated[str | None, Query(alias="resourceId")] = None,
    status: Literal["running", "suspended", "success", "failed", "canceled"] | None = None,
) -> dict[str, Any]:
    await _known(ctx, workflow_id)
    size = per_page or limit or 50
    start = offset if offset is not None else (page or 0) * size
    runs, total = await asyncio.gather(
        ctx.workflows.runs(
            workflow_id,
            status=status,
            resource_id=resource_id,
            from_date=from_date,
            to_date=to_date,
            offset=start,
            limit=size,
        ),
        ctx.workflows.count_runs(
            workflow_id, status=status, resource_id=resource_id, from_date=from_date, to_date=to_date
        ),
    )
    shown = [
        {
            "workflowName": r["workflowName"],
            "runId": r["runId"],
            "snapshot": {"runId": r["runId"], "status": r["status"]},
            "createdAt": r["createdAt"],
            "updatedAt": r["updatedAt"],
            "resourceId": r.get("resourceId"),
        }
        for r in runs
    ]
    # Visibility's count may lag its list a moment: never fewer than the runs listed.
    return {"runs": shown, "total": max(total, start + len(shown)) if shown else total}


@router.get("/workflows/{workflow_id}/runs/{run_id}")
async def get_run(ctx: Ctx, workflow_id: str, run_id: str) -> dict[str, Any]:
    handle = await _run_handle(ctx, workflow_id, run_id)
    described = await handle.describe()
    state = await ctx.workflows.state(run_id)
    result = workflow_result(run_id, state)
    resource_id = described.typed_search_attributes.get(KEEL_RESOURCE_ID)
    return {
        "runId": run_id,
        "workflowName": workflow_id,
        **({"resourceId": resource_id} if resource_id else {}),
        "createdAt": described.start_time.isoformat() if described.start_time else None,
        "updatedAt": (described.close_time or described.start_time).isoformat() if described.start_time else None,
        "status": _status(described.status, state),
        "steps": result["steps"],
        **({"result": result["result"]} if "result" in result else {}),
        **({"error": result["error"]} if "error" in result else {}),
    }


def _status(execution: WorkflowExecutionStatus | None, state: WorkflowRunState) -> str:
    if execution in (None, WorkflowExecutionStatus.RUNNING):
        return "suspended" if state.status == "suspended" else "running"
    return {WorkflowExecutionStatus.COMPLETED: "success", WorkflowExecutionStatus.CANCELED: "canceled"}.get(
        execution, "failed"
    )


@router.post("/workflows/{workflow_id}/runs/{run_id}/cancel")
async def cancel_run(ctx: Ctx, workflow_id: str, run_id: str) -> dict[str, Any]:
    handle = await _run_handle(ctx, workflow_id, run_id)
    await handle.cancel()
    return {"message": "Workflow run cancelled"}


# --- stored definitions -------------------------------------------------------------------------------


def _stored_json(stored: Any) -> dict[str, Any]:
    return {
        **stored.definition,
        "status": stored.status,
        "source": "storage",
        "authorId": stored.author_id,
        "createdAt": stored.created_at.isoformat(),
        "updatedAt": stored.updated_at.isoformat(),
    }


@router.get("/stored/workflows")
async def list_stored(
    ctx: Ctx,
    status: Literal["active", "archived"] | None = None,
    author_id: Annotated[str | None, Query(alias="authorId")] = None,
) -> dict[str, Any]:
    found = []
    for d in await ctx.storage.list_definitions():
        if (status is None or d.status == status) and (author_id is None or d.author_id == author_id):
            found.append(_stored_json(d))
    return {"workflows": found, "total": len(found)}


@router.get("/stored/workflows/{workflow_id}")
async def get_stored(ctx: Ctx, workflow_id: str) -> dict[str, Any]:
    try:
        return _stored_json(await ctx.workflows.get(workflow_id))
    except WorkflowNotFound:
        raise not_found(f"Stored workflow {workflow_id} not found") from None


@router.post("/stored/workflows")
async def upsert_stored(ctx: Ctx, body: UpsertBody) -> dict[str, Any]:
    """Check and save the definition (and its helper `dependencies` first): it runs at once."""
    raw = body.model_dump(by_alias=True, exclude={"dependencies"}, exclude_none=True)
    dependencies = body.dependencies or []
    for dependency in dependencies:
        await ctx.workflows.save(dependency)
    await ctx.workflows.save(raw)
    out: dict[str, Any] = {"ok": True, "id": body.id}
    if dependencies:
        out["dependencyIds"] = [d.get("id") for d in dependencies]
    return out


@router.delete("/stored/workflows/{workflow_id}")
async def delete_stored(ctx: Ctx, workflow_id: str) -> dict[str, Any]:
    try:
        await ctx.workflows.delete(workflow_id)
    except WorkflowNotFound:
        raise not_found(f"Stored workflow {workflow_id} not found") from None
    return {"success": True, "message": f"Workflow {workflow_id} deleted"}
