"""`/api/observability/traces...` and the legacy `/api/telemetry...`: the spans the storage exporter keeps
(`OTEL_TRACES_EXPORTER=keel`, `keel.client.span_exporter`), in Mastra's shapes (`keel.client.span_records`).

    GET  /observability/traces                          listTraces (and the legacy getTraces): traces by their root span
    GET  /observability/traces/light                    listTracesLight: the same rows, light, with an inputPreview
    GET  /observability/traces/:traceId                 getTrace: every span, each with its status
    GET  /observability/traces/:traceId/light           getTraceLight: the timeline fields of every span
    GET  /observability/traces/:traceId/spans/:spanId   getSpan: `{span}`
    POST /observability/traces/delete                   deleteTraces: `{traceIds}` -> `{success: true}`
    GET  /telemetry                                     Mastra 0.x: `{traces: [spans]}`, `mastra_traces` rows
    GET  /telemetry/traces[/:traceId[/spans]]           the same rows by trace (seed 003 lists these routes)

A trace is listed by the span that heads it: its root, or, when the root was made in a process that keeps its
spans elsewhere, the earliest span whose parent is not stored. The filters are Mastra's query parameters as
client-js sends them (`startedAt`, `endedAt` and `dateRange` as JSON, `page` from 0, `perPage` up to 100, `field`
and `direction`); a filter on what Keel's spans never carry (a user, an organization, tags, ...) matches nothing,
as it matches no span without it in Mastra's stores. Delta polling (`mode=delta`) is answered 501, as Mastra
answers it for a store without it. Mastra's telemetry routes of 1.x have no handler to copy: `/telemetry/traces`
lists root rows with a `pagination`, `/telemetry/traces/:traceId` is `{traceId, spans}`. FastAPI traces every
request it serves but these (`untraced`): reading the kept traces adds none.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, MutableMapping
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from pydantic import Field

from keel.client.api.bodies import Lenient, UtcTime, in_utc
from keel.client.api.context import Ctx
from keel.client.api.errors import ApiError, bad_request, not_found
from keel.client.span_records import legacy_row, light_record, span_record, trace_record
from keel.storage import SpanQuery, StoredSpan, TimeRange

router = APIRouter(tags=["observability"])

SPAN_TYPES = frozenset(
    "agent_run scorer_run scorer_step generic model_generation model_step model_inference model_chunk mcp_tool_call "
    "mcp_server_request processor_run tool_call client_tool_call provider_tool_call workflow_run workflow_step "
    "workflow_conditional workflow_conditional_eval workflow_parallel workflow_loop workflow_sleep "
    "workflow_wait_event memory_operation workspace_action rag_ingestion rag_embedding rag_vector_operation "
    "rag_action graph_action mapping skill_resolution skill_action agent_signal".split()
)
ENTITY_TYPES = frozenset(
    "agent scorer rag_ingestion trajectory input_processor input_step_processor output_processor "
    "output_step_processor tool_result_processor workflow_step tool mcp_server workflow_run memory".split()
)
NEVER_CARRIED = ("userId", "organizationId", "resourceId", "sessionId", "requestId", "environment", "source",
                 "entityVersionId", "experimentId", "metadata")  # fmt: skip
"""Filters on what no span Keel stores carries: given, they match nothing (Mastra's stores compare them as null)."""
MAX_PER_PAGE = 100
MAX_PAGE = 1_000_000
_LEGACY_NAME = re.compile(r"^(agent|workflow) run: '([^']+)'$")


UNTRACED_PREFIXES = ("/api/observability/", "/api/telemetry", "/api/logs", "/api/openapi.json", "/api/docs", "/codec/")
"""What FastAPI's request spans leave out: the reads of kept traces, logs and metrics (a UI polling them filled
the span store with its own reads, pushing the runs' spans out), the API's own description, and the Temporal
UI's payload codec (a call per payload it shows)."""


def untraced(scope: MutableMapping[str, Any]) -> bool:
    """FastAPI's own request spans leave these routes out (`UNTRACED_PREFIXES`): reading what Keel keeps makes no
    trace to keep."""
    return str(scope.get("path", "")).startswith(UNTRACED_PREFIXES)


def fastapi_options() -> dict[str, Any]:
    """`FastAPI(...)`'s options that leave these routes out of its request spans (`untraced`), when this FastAPI
    traces requests itself (its `telemetry` option; older releases have none)."""
    if "telemetry" not in inspect.signature(FastAPI).parameters:
        return {}
    return {"telemetry": {"exclude": untraced}}


def _time_range(name: str, raw: str | None) -> TimeRange | None:
    """`{"start": ISO, "end": ISO, "startExclusive": bool, "endExclusive": bool}` (JSON, as client-js sends it)."""
    if raw is None or raw == "":
        return None
    try:
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise ValueError("not an object")
        start, end = (in_utc(datetime.fromisoformat(value[k])) if value.get(k) else None for k in ("start", "end"))
        return TimeRange(start, end, bool(value.get("startExclusive")), bool(value.get("endExclusive")))
    except (ValueError, TypeError, OverflowError) as err:
        shape = "{start?, end?, startExclusive?, endExclusive?}"
        raise bad_request(f"{name} must be JSON {shape} of ISO dates: {err}") from None


def _choice(name: str, value: str | None, allowed: frozenset[str] | tuple[str, ...]) -> str | None:
    if value is None or value == "":
        return None
    if value not in allowed:
        raise bad_request(f"Invalid {name}: {value!r}")
    return value


def _given(request: Request, name: str) -> bool:
    value = request.query_params.get(name)
    return value is not None and value not in ("", "null", "[]", "{}")


def traces_query(
    request: Request,
    page: Annotated[int, Query(ge=0, le=MAX_PAGE)] = 0,
    per_page: Annotated[int, Query(alias="perPage", ge=1, le=MAX_PER_PAGE)] = 10,
    span_type: Annotated[str | None, Query(alias="spanType")] = None,
    trace_id: Annotated[str | None, Query(alias="traceId")] = None,
    entity_type: Annotated[str | None, Query(alias="entityType")] = None,
    entity_id: Annotated[str | None, Query(alias="entityId")] = None,
    entity_name: Annotated[str | None, Query(alias="entityName")] = None,
    run_id: Annotated[str | None, Query(alias="runId")] = None,
    thread_id: Annotated[str | None, Query(alias="threadId")] = None,
    service_name: Annotated[str | None, Query(alias="serviceName")] = None,
    status: Annotated[Literal["success", "error", "running"] | None, Query()] = None,
    has_child_error: Annotated[bool | None, Query(alias="hasChildError")] = None,
    started_at: Annotated[str | None, Query(alias="startedAt", description="JSON {start, end, ...}")] = None,
    ended_at: Annotated[str | None, Query(alias="endedAt", description="JSON {start, end, ...}")] = None,
    date_range: Annotated[str | None, Query(alias="dateRange", description="legacy: startedAt")] = None,
    name: Annotated[str | None, Query(description="legacy: \"agent run: 'id'\" filters by entity")] = None,
    field: Annotated[Literal["startedAt", "endedAt"], Query()] = "startedAt",
    direction: Annotated[Literal["ASC", "DESC"], Query()] = "DESC",
) -> tuple[SpanQuery, int, int]:
    """Mastra's listTraces query parameters: the query, the page and its size."""
    if request.query_params.get("mode") == "delta":
        raise ApiError(501, "Delta polling is not supported by the configured observability store for traces")
    if entity_type == "workflow":
        entity_type = "workflow_run"
    if name is not None and entity_id is None and (legacy := _LEGACY_NAME.match(name)):
        entity_type = "agent" if legacy.group(1) == "agent" else "workflow_run"
        entity_id = legacy.group(2)
    scope = request.query_params.get("scope")
    scope_name: str | None = None
    unsupported = any(_given(request, key) for key in (*NEVER_CARRIED, "tags"))
    if scope and scope not in ("null", "{}"):
        try:
            wanted = json.loads(scope)
        except ValueError:
            raise bad_request("scope must be a JSON object") from None
        if not isinstance(wanted, dict):
            raise bad_request("scope must be a JSON object")
        scope_name = wanted.get("name") if set(wanted) == {"name"} else None
        unsupported = unsupported or scope_name is None
    query = SpanQuery(
        roots_only=True,
        trace_id=trace_key(trace_id) if trace_id else None,
        span_type=_choice("spanType", span_type, SPAN_TYPES),
        entity_type=_choice("entityType", entity_type, ENTITY_TYPES),
        entity_id=entity_id or None,
        entity_name=entity_name or None,
        run_id=run_id or None,
        thread_id=thread_id or None,
        service_name=service_name or None,
        scope=scope_name,
        started=_time_range("startedAt", started_at) or _time_range("dateRange", date_range),
        ended=_time_range("endedAt", ended_at),
        status=status,
        has_child_error=has_child_error,
        matches_nothing=unsupported,
        order_by="ended_at" if field == "endedAt" else "started_at",
        descending=direction == "DESC",
    )
    return query, page, per_page


TracesQuery = Annotated[tuple[SpanQuery, int, int], Depends(traces_query)]


def _page(total: int, page: int, per_page: int) -> dict[str, Any]:
    return {"total": total, "page": page, "perPage": per_page, "hasMore": (page + 1) * per_page < total}


async def _listed(
    ctx: Ctx, listed: tuple[SpanQuery, int, int], record: Callable[[StoredSpan], dict[str, Any]]
) -> dict[str, Any]:
    query, page, per_page = listed
    spans, total = await ctx.storage.list_spans(query, page=page, per_page=per_page)
    return {"pagination": _page(total, page, per_page), "spans": [record(s) for s in spans]}


async def _trace(ctx: Ctx, trace_id: str) -> list[StoredSpan]:
    spans = await ctx.storage.trace_spans(trace_key(trace_id))
    if not spans:
        shown = trace_id if len(trace_id) <= MAX_SHOWN_ID_CHARS else trace_id[:MAX_SHOWN_ID_CHARS] + "..."
        raise not_found(f"Trace with ID '{shown}' not found")
    return spans


MAX_SHOWN_ID_CHARS = 64
"""An id an error quotes is cut to this (a 404 echoed a 20,000-character id whole)."""
_HEX = re.compile(r"[0-9a-fA-F]+")


def trace_key(trace_id: str) -> str:
    """A trace id as stored: hex digits in lower case, as OpenTelemetry writes them (upper case found nothing)."""
    return trace_id.lower() if _HEX.fullmatch(trace_id) else trace_id


@router.get("/observability/traces")
async def list_traces(ctx: Ctx, listed: TracesQuery) -> dict[str, Any]:
    """Traces by the span that heads each, newest first: `{pagination, spans}`."""
    return await _listed(ctx, listed, trace_record)


@router.get("/observability/traces/light")
async def list_traces_light(ctx: Ctx, listed: TracesQuery) -> dict[str, Any]:
    """As `/observability/traces`, each row light: no attributes, input or output, an `inputPreview`."""
    return await _listed(ctx, listed, light_record)


class DeleteTracesBody(Lenient):
    trace_ids: list[str] = Field(alias="traceIds", max_length=1000)


@router.post("/observability/traces/delete")
async def delete_traces(ctx: Ctx, body: DeleteTracesBody) -> dict[str, Any]:
    await ctx.storage.delete_traces([trace_key(t) for t in body.trace_ids])
    return {"success": True}


@router.get("/observability/traces/{trace_id}")
async def get_trace(ctx: Ctx, trace_id: str) -> dict[str, Any]:
    """Every span of the trace, the earliest first, each with its status."""
    return {"traceId": trace_id, "spans": [trace_record(s) for s in await _trace(ctx, trace_id)]}


@router.get("/observability/traces/{trace_id}/light")
async def get_trace_light(ctx: Ctx, trace_id: str) -> dict[str, Any]:
    return {"traceId": trace_id, "spans": [light_record(s, preview=False) for s in await _trace(ctx, trace_id)]}


@router.get("/observability/traces/{trace_id}/spans/{span_id}")
async def get_span(ctx: Ctx, trace_id: str, span_id: str) -> dict[str, Any]:
    span = await ctx.storage.get_span(trace_key(trace_id), trace_key(span_id))
    if span is None:
        raise not_found("Span not found")
    return {"span": span_record(span)}


# --- Mastra 0.x's telemetry --------------------------------------------------------------------------------------


def telemetry_query(
    name: Annotated[str | None, Query(description="spans whose name starts with this")] = None,
    scope: Annotated[str | None, Query(description="the instrumentation scope")] = None,
    page: Annotated[int, Query(ge=0, le=MAX_PAGE)] = 0,
    per_page: Annotated[int, Query(alias="perPage", ge=1, le=1000)] = 100,
    attribute: Annotated[list[str] | None, Query(description="key:value, repeatable")] = None,
    from_date: Annotated[UtcTime | None, Query(alias="fromDate")] = None,
    to_date: Annotated[UtcTime | None, Query(alias="toDate")] = None,
) -> tuple[SpanQuery, int, int]:
    attributes: dict[str, str] = {}
    for given in attribute or ():
        key, found, value = given.partition(":")
        if not found or not key:
            raise bad_request(f"attribute must be key:value, not {given!r}")
        attributes[key] = value
    started = TimeRange(from_date, to_date) if from_date or to_date else None
    query = SpanQuery(name_prefix=name or None, scope=scope or None, attributes=attributes, started=started)
    return query, page, per_page


TelemetryQuery = Annotated[tuple[SpanQuery, int, int], Depends(telemetry_query)]


@router.get("/telemetry")
async def telemetry(ctx: Ctx, listed: TelemetryQuery) -> dict[str, Any]:
    """Mastra 0.x's `GET /api/telemetry`: spans (not traces), newest first, as `mastra_traces` rows."""
    query, page, per_page = listed
    spans, _ = await ctx.storage.list_spans(query, page=page, per_page=per_page)
    return {"traces": [legacy_row(s) for s in spans]}


@router.get("/telemetry/traces")
async def telemetry_traces(ctx: Ctx, listed: TelemetryQuery) -> dict[str, Any]:
    """The spans that head their traces, as `mastra_traces` rows, newest first."""
    query, page, per_page = listed
    spans, total = await ctx.storage.list_spans(replace(query, roots_only=True), page=page, per_page=per_page)
    return {"traces": [legacy_row(s) for s in spans], "pagination": _page(total, page, per_page)}


@router.get("/telemetry/traces/{trace_id}")
async def telemetry_trace(ctx: Ctx, trace_id: str) -> dict[str, Any]:
    return {"traceId": trace_id, "spans": [legacy_row(s) for s in await _trace(ctx, trace_id)]}


@router.get("/telemetry/traces/{trace_id}/spans")
async def telemetry_trace_spans(
    ctx: Ctx,
    trace_id: str,
    page: Annotated[int, Query(ge=0, le=MAX_PAGE)] = 0,
    per_page: Annotated[int, Query(alias="perPage", ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    spans = await _trace(ctx, trace_id)
    shown = spans[page * per_page : (page + 1) * per_page]
    return {
        "traceId": trace_id,
        "spans": [legacy_row(s) for s in shown],
        "pagination": _page(len(spans), page, per_page),
    }


__all__ = ["fastapi_options", "router", "untraced"]
