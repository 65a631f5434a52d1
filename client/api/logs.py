"""`/api/logs...` (Mastra's logger transports, seed 003's routes) and `/api/observability/logs`: the log records
workers keep in Keel's storage (`KEEL_LOGS`, `keel.client.log_handler`), in Mastra's shapes (`keel.client.log_records`).

    GET /logs/transports        listLogTransports: `{transports: ["keel"]}`, the storage transport
    GET /logs                   listLogs: `?transportId=keel` (required), records in the order they were logged
    GET /logs/:runId            getLogForRun: the same, of one run
    GET /observability/logs     listLogsVNext: Mastra's observability records, newest first, `{pagination, logs}`

The legacy routes answer as Mastra's file transport does: `page` from 1 (0 is 1), `perPage` 100 by default (at most
1000 here), `logLevel` one level exactly (`silent` matches none), `filters` as `key:value` compared with a record's
fields (`runId`, `agentId`, `traceId`, `name`, ...) or its context; a transport Keel does not have answers an empty
page, as Mastra's logger does. The observability route takes Mastra's filters (`level`, one or a JSON list, `runId`,
`traceId`, `spanId`, `threadId`, `serviceName`, `entityType=agent`, `entityName`, `timestamp` as JSON
`{start, end}`), `page` from 0 and `perPage` up to 100; a filter on what Keel's records never carry (a user, an
organization, tags, ...) matches nothing; delta polling (`mode=delta`) is answered 501, as for traces.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, get_args

from fastapi import APIRouter, Path, Query, Request

from keel.client.api.bodies import UtcTime
from keel.client.api.context import Ctx
from keel.client.api.errors import ApiError, bad_request
from keel.client.api.observability import MAX_PAGE, NEVER_CARRIED, _time_range
from keel.client.log_records import legacy_record, observability_record
from keel.storage import LogQuery
from keel.storage.logs import LEVELS, LogLevel

router = APIRouter(tags=["logs"])

TRANSPORT = "keel"
"""The one transport: the storage every worker writes its records to."""
DEFAULT_PER_PAGE = 100
MAX_PER_PAGE = 1000
MAX_OBSERVABILITY_PER_PAGE = 100
NEVER_CARRIED_HERE = (*NEVER_CARRIED, "executionSource", "parentEntityType", "parentEntityName", "rootEntityType",
                      "rootEntityName", "parentEntityVersionId", "rootEntityVersionId", "tags")  # fmt: skip


def _filters(given: list[str] | None) -> dict[str, str]:
    """Mastra's `filters`: `key:value` each (a value may hold colons; no colon is an empty value)."""
    found: dict[str, str] = {}
    for item in given or ():
        key, _, value = item.partition(":")
        found[key] = value
    return found


async def _legacy(
    ctx: Ctx,
    run_id: str | None,
    transport_id: str | None,
    from_date: datetime | None,
    to_date: datetime | None,
    log_level: str | None,
    filters: list[str] | None,
    page: int,
    per_page: int,
) -> dict[str, Any]:
    if not transport_id:
        raise bad_request('Argument "transportId" is required')
    page, per_page = page or 1, per_page or DEFAULT_PER_PAGE
    if transport_id != TRANSPORT:
        return {"logs": [], "total": 0, "page": page, "perPage": per_page, "hasMore": False}
    levels: tuple[LogLevel, ...] | None = None
    if log_level is not None:
        levels = tuple(level for level in LEVELS if level == log_level)  # `silent`: none
    query = LogQuery(run_id=run_id, levels=levels, since=from_date, until=to_date, fields=_filters(filters))
    logs, total = await ctx.storage.list_logs(query, offset=(page - 1) * per_page, limit=per_page)
    return {
        "logs": [legacy_record(log) for log in logs],
        "total": total,
        "page": page,
        "perPage": per_page,
        "hasMore": page * per_page < total,
    }


TransportId = Annotated[str | None, Query(alias="transportId")]
FromDate = Annotated[UtcTime | None, Query(alias="fromDate")]
ToDate = Annotated[UtcTime | None, Query(alias="toDate")]
LogLevelParam = Annotated[Literal["debug", "info", "warn", "error", "silent"] | None, Query(alias="logLevel")]
Filters = Annotated[list[str] | None, Query(description="key:value, repeatable")]
Page = Annotated[int, Query(ge=0, le=MAX_PAGE, description="from 1 (0 is 1)")]
PerPage = Annotated[int, Query(alias="perPage", ge=0, le=MAX_PER_PAGE, description="0 is 100")]


@router.get("/logs/transports")
async def list_log_transports() -> dict[str, Any]:
    return {"transports": [TRANSPORT]}


@router.get("/logs")
async def list_logs(
    ctx: Ctx,
    transport_id: TransportId = None,
    from_date: FromDate = None,
    to_date: ToDate = None,
    log_level: LogLevelParam = None,
    filters: Filters = None,
    page: Page = 0,
    per_page: PerPage = 0,
) -> dict[str, Any]:
    """Every run's records (and the workers' own), in the order they were logged."""
    return await _legacy(ctx, None, transport_id, from_date, to_date, log_level, filters, page, per_page)


RunId = Annotated[str, Path(min_length=1, pattern=r"^[^\x00]+$")]
"""A run id that is looked up: a NUL in it is a 400, as elsewhere (storage cannot look it up)."""


@router.get("/logs/{run_id}")
async def list_run_logs(
    ctx: Ctx,
    run_id: RunId,
    transport_id: TransportId = None,
    from_date: FromDate = None,
    to_date: ToDate = None,
    log_level: LogLevelParam = None,
    filters: Filters = None,
    page: Page = 0,
    per_page: PerPage = 0,
) -> dict[str, Any]:
    """One run's records, in the order they were logged."""
    return await _legacy(ctx, run_id, transport_id, from_date, to_date, log_level, filters, page, per_page)


def _levels(raw: list[str] | None) -> tuple[LogLevel, ...] | None:
    """`level=info`, `level=info&level=warn` or `level=["info","warn"]` (client-js sends a list as JSON)."""
    if not raw:
        return None
    given: list[Any] = []
    for item in raw:
        parsed = json.loads(item) if item.startswith("[") else item
        given.extend(parsed if isinstance(parsed, list) else [parsed])
    unknown = [g for g in given if g not in get_args(LogLevel)]
    if unknown:
        raise bad_request(f"Invalid level: {unknown[0]!r} (debug, info, warn, error or fatal)")
    return tuple(level for level in LEVELS if level in given)


@router.get("/observability/logs")
async def list_observability_logs(
    ctx: Ctx,
    request: Request,
    page: Annotated[int, Query(ge=0, le=MAX_PAGE)] = 0,
    per_page: Annotated[int, Query(alias="perPage", ge=1, le=MAX_OBSERVABILITY_PER_PAGE)] = 10,
    level: Annotated[list[str] | None, Query(description="a level, repeated or as a JSON list")] = None,
    run_id: Annotated[str | None, Query(alias="runId")] = None,
    trace_id: Annotated[str | None, Query(alias="traceId")] = None,
    span_id: Annotated[str | None, Query(alias="spanId")] = None,
    thread_id: Annotated[str | None, Query(alias="threadId")] = None,
    service_name: Annotated[str | None, Query(alias="serviceName")] = None,
    entity_type: Annotated[str | None, Query(alias="entityType")] = None,
    entity_name: Annotated[str | None, Query(alias="entityName")] = None,
    timestamp: Annotated[str | None, Query(description="JSON {start, end, startExclusive, endExclusive}")] = None,
    field: Annotated[Literal["timestamp"], Query()] = "timestamp",
    direction: Annotated[Literal["ASC", "DESC"], Query()] = "DESC",
) -> dict[str, Any]:
    """Mastra's observability logs: `{pagination, logs}`, newest first unless `direction=ASC`."""
    if request.query_params.get("mode") == "delta":
        raise ApiError(501, "Delta polling is not supported by the configured observability store for logs")
    try:
        levels = _levels(level)
    except ValueError:
        raise bad_request("level must be a level or a JSON list of levels") from None
    span = _time_range("timestamp", timestamp)
    since = until = None
    if span is not None:
        tick = timedelta(microseconds=1)
        try:
            since = span.start + tick if span.start and span.start_exclusive else span.start
            until = span.end - tick if span.end and span.end_exclusive else span.end
        except OverflowError:
            raise bad_request("timestamp is out of range") from None
    unsupported = any(request.query_params.get(key) not in (None, "", "[]") for key in NEVER_CARRIED_HERE)
    query = LogQuery(
        run_id=run_id or None,
        trace_id=trace_id or None,
        span_id=span_id or None,
        thread_id=thread_id or None,
        agent_id=entity_name or None,
        levels=levels,
        since=since,
        until=until,
        matches_nothing=unsupported or (entity_type not in (None, "", "agent")),
        descending=direction == "DESC",
    )
    if service_name:
        query = replace(query, fields={"serviceName": service_name})
    logs, total = await ctx.storage.list_logs(query, offset=page * per_page, limit=per_page)
    return {
        "pagination": {"total": total, "page": page, "perPage": per_page, "hasMore": (page + 1) * per_page < total},
        "logs": [observability_record(log) for log in logs],
    }


__all__ = ["TRANSPORT", "router"]
