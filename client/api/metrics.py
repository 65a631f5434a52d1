"""`/api/observability/metrics...` and the metric discovery routes: Mastra's automatic metrics (durations of agent
runs, model and tool calls; model tokens), worked out from the spans the storage exporter keeps
(`keel.client.span_metrics`; with `OTEL_TRACES_EXPORTER=keel`), as `@mastra/client-js` 1.47 asks for them.

    GET  /observability/metrics                  listMetrics: the events, newest first, `{pagination, metrics}`
    POST /observability/metrics/aggregate        getMetricAggregate: `{value, previousValue?, changePercent?}`
    POST /observability/metrics/breakdown        getMetricBreakdown: `{groups: [{dimensions, value}]}`
    POST /observability/metrics/timeseries       getMetricTimeSeries: `{series: [{name, points}]}`
    POST /observability/metrics/percentiles      getMetricPercentiles: `{series: [{percentile, points}]}`
    GET  /observability/discovery/metric-names   getMetricNames `{names}` (and `metric-label-keys` `{keys}`,
                                                 `metric-label-values` `{values}`)

Filters are Mastra's (`timestamp` as `{start, end, startExclusive, endExclusive}`, `name`, `traceId`, `traceIds`,
`spanId`, `entityType`, `entityName`, `runId`, `threadId`, `serviceName`, `provider`, `model`, `labels`); one on
what these events never carry (a user, an organization, an environment, tags, costs...) matches nothing. Costs
are not estimated: `estimatedCost` and `costUnit` are null. The worker's live counters (runs per agent, tool
errors, approvals waiting) are on its Prometheus endpoint (`KEEL_METRICS_PORT`), not here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import Field

from keel.client.api.bodies import Lenient, in_utc
from keel.client.api.context import Ctx
from keel.client.api.errors import ApiError, bad_request
from keel.client.api.observability import MAX_PAGE, NEVER_CARRIED
from keel.client.span_metrics import Aggregation, MetricEvent, MetricFilters, aggregate, bucket, events
from keel.client.span_metrics import percentile as percentile_of

router = APIRouter(tags=["observability"])

EQUAL = ("traceId", "spanId", "entityType", "entityName", "runId", "threadId", "serviceName", "provider", "model")
NEVER_HERE = (*NEVER_CARRIED, "parentEntityType", "parentEntityName", "rootEntityType", "rootEntityName",
              "parentEntityVersionId", "rootEntityVersionId", "executionSource", "costUnit")  # fmt: skip
Interval = Literal["1m", "5m", "15m", "1h", "1d"]
_PERIODS = {"previous_day": timedelta(days=1), "previous_week": timedelta(days=7)}


def _date(value: Any, name: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(f"{name} must be an ISO date, not {value!r}") from None
    try:
        return in_utc(parsed)
    except ValueError as err:
        raise bad_request(f"{name} {err}") from None


def _listed(value: Any) -> tuple[str, ...]:
    if value in (None, "", []):
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)


def filters_of(given: dict[str, Any] | None) -> MetricFilters:
    """Mastra's metric filters (a POST body's `filters`, or the query parameters of the list)."""
    given = given or {}
    span = given.get("timestamp") or {}
    if not isinstance(span, dict):
        raise bad_request("filters.timestamp must be {start?, end?, startExclusive?, endExclusive?}")
    labels = given.get("labels") or {}
    if not isinstance(labels, dict):
        raise bad_request("filters.labels must be an object of label -> value")
    return MetricFilters(
        start=_date(span.get("start"), "timestamp.start"),
        end=_date(span.get("end"), "timestamp.end"),
        start_exclusive=bool(span.get("startExclusive")),
        end_exclusive=bool(span.get("endExclusive")),
        names=_listed(given.get("name")),
        equal={k: str(given[k]) for k in EQUAL if given.get(k) not in (None, "")},
        trace_ids=_listed(given.get("traceIds")),
        labels={str(k): str(v) for k, v in labels.items()},
        matches_nothing=any(given.get(k) not in (None, "", []) for k in NEVER_HERE),
    )


def _query_filters(request: Request) -> MetricFilters:
    given: dict[str, Any] = {}
    for key, value in request.query_params.items():
        if key in ("timestamp", "labels", "name", "traceIds", "tags") and value.startswith(("{", "[")):
            try:
                given[key] = json.loads(value)
            except ValueError:
                raise bad_request(f"{key} must be JSON") from None
        else:
            given[key] = value
    return filters_of(given)


@router.get("/observability/metrics")
async def list_metrics(
    ctx: Ctx,
    request: Request,
    page: Annotated[int, Query(ge=0, le=MAX_PAGE)] = 0,
    per_page: Annotated[int, Query(alias="perPage", ge=1, le=100)] = 10,
    field: Annotated[Literal["timestamp"], Query()] = "timestamp",
    direction: Annotated[Literal["ASC", "DESC"], Query()] = "DESC",
) -> dict[str, Any]:
    """The metric events, newest first unless `direction=ASC`."""
    if request.query_params.get("mode") == "delta":
        raise ApiError(501, "Delta polling is not supported by the configured observability store for metrics")
    found = await events(ctx.storage, _query_filters(request))
    if direction == "DESC":
        found.reverse()
    shown = found[page * per_page : (page + 1) * per_page]
    return {
        "pagination": {"total": len(found), "page": page, "perPage": per_page,
                       "hasMore": (page + 1) * per_page < len(found)},
        "metrics": [e.record() for e in shown],
    }  # fmt: skip


class MetricsBody(Lenient):
    name: list[str] | str
    aggregation: Aggregation = "sum"
    distinct_column: str | None = Field(default=None, alias="distinctColumn")
    filters: dict[str, Any] | None = None

    def selected(self) -> MetricFilters:
        names = _listed(self.name)
        if not names:
            raise bad_request("name must name a metric")
        given = dict(self.filters or {})
        wanted = set(names) & set(_listed(given.get("name"))) if given.get("name") else set(names)
        return filters_of({**given, "name": sorted(wanted) or ["(none)"]})


class AggregateBody(MetricsBody):
    compare_period: Literal["previous_period", "previous_day", "previous_week"] | None = Field(
        default=None, alias="comparePeriod"
    )


@router.post("/observability/metrics/aggregate")
async def metric_aggregate(ctx: Ctx, body: AggregateBody) -> dict[str, Any]:
    selected = body.selected()
    value = aggregate(await events(ctx.storage, selected), body.aggregation, body.distinct_column)
    answer: dict[str, Any] = {"value": value, "estimatedCost": None, "costUnit": None}
    if body.compare_period is not None:
        shift = _PERIODS.get(body.compare_period)
        if shift is None and selected.start is not None and selected.end is not None:
            shift = selected.end - selected.start
        previous = None
        if shift is not None and (selected.start is not None or selected.end is not None):
            try:
                earlier = selected.shifted(shift)
            except OverflowError:  # a period before year 1: nothing was measured then
                earlier = replace(selected, matches_nothing=True)
            previous = aggregate(await events(ctx.storage, earlier), body.aggregation, body.distinct_column)
        answer["previousValue"] = previous
        answer["changePercent"] = (value - previous) / previous * 100 if value is not None and previous else None
    return answer


class BreakdownBody(MetricsBody):
    group_by: list[str] = Field(alias="groupBy", min_length=1)
    limit: int | None = Field(default=None, ge=1)
    order_direction: Literal["ASC", "DESC"] = Field(default="DESC", alias="orderDirection")


def _grouped(found: list[MetricEvent], group_by: list[str]) -> dict[tuple[str | None, ...], list[MetricEvent]]:
    groups: dict[tuple[str | None, ...], list[MetricEvent]] = defaultdict(list)
    for event in found:
        groups[tuple(event.dimension(key) for key in group_by)].append(event)
    return groups


@router.post("/observability/metrics/breakdown")
async def metric_breakdown(ctx: Ctx, body: BreakdownBody) -> dict[str, Any]:
    groups = _grouped(await events(ctx.storage, body.selected()), body.group_by)
    values = [
        (value, dict(zip(body.group_by, key, strict=True)))
        for key, grouped in groups.items()
        if (value := aggregate(grouped, body.aggregation, body.distinct_column)) is not None
    ]
    values.sort(key=lambda g: g[0], reverse=body.order_direction == "DESC")
    answered = [{"dimensions": d, "value": v, "estimatedCost": None, "costUnit": None} for v, d in values]
    return {"groups": answered[: body.limit] if body.limit else answered}


class TimeseriesBody(MetricsBody):
    interval: Interval
    group_by: list[str] | None = Field(default=None, alias="groupBy")


def _points(found: list[MetricEvent], interval: str, value: Any) -> list[dict[str, Any]]:
    buckets: dict[datetime, list[MetricEvent]] = defaultdict(list)
    for event in found:
        buckets[bucket(event.timestamp, interval)].append(event)
    return [
        {"timestamp": at.isoformat().replace("+00:00", "Z"), "value": v}
        for at, grouped in sorted(buckets.items())
        if (v := value(grouped)) is not None
    ]


@router.post("/observability/metrics/timeseries")
async def metric_timeseries(ctx: Ctx, body: TimeseriesBody) -> dict[str, Any]:
    found = await events(ctx.storage, body.selected())
    groups = _grouped(found, body.group_by) if body.group_by else _grouped(found, ["name"])
    series = [
        {
            "name": "|".join(k or "" for k in key),
            "costUnit": None,
            "points": _points(grouped, body.interval, lambda g: aggregate(g, body.aggregation, body.distinct_column)),
        }
        for key, grouped in sorted(groups.items(), key=lambda item: [k or "" for k in item[0]])
    ]
    return {"series": series}


class PercentilesBody(Lenient):
    name: str
    percentiles: list[Annotated[float, Field(ge=0, le=1)]] = Field(min_length=1)
    interval: Interval
    filters: dict[str, Any] | None = None


@router.post("/observability/metrics/percentiles")
async def metric_percentiles(ctx: Ctx, body: PercentilesBody) -> dict[str, Any]:
    found = await events(ctx.storage, filters_of({**(body.filters or {}), "name": [body.name]}))
    series = [
        {
            "percentile": p,
            "points": _points(found, body.interval, lambda g, p=p: percentile_of([e.value for e in g], p)),
        }
        for p in body.percentiles
    ]
    return {"series": series}


@router.get("/observability/discovery/metric-names")
async def metric_names(
    ctx: Ctx, prefix: str | None = None, limit: Annotated[int | None, Query(ge=1)] = None
) -> dict[str, Any]:
    names = sorted({e.name for e in await events(ctx.storage, MetricFilters())})
    names = [n for n in names if n.startswith(prefix or "")]
    return {"names": names[:limit] if limit else names}


@router.get("/observability/discovery/metric-label-keys")
async def metric_label_keys(ctx: Ctx, metric_name: Annotated[str, Query(alias="metricName")]) -> dict[str, Any]:
    found = await events(ctx.storage, MetricFilters(names=(metric_name,)))
    return {"keys": sorted({key for e in found for key in e.labels})}


@router.get("/observability/discovery/metric-label-values")
async def metric_label_values(
    ctx: Ctx,
    metric_name: Annotated[str, Query(alias="metricName")],
    label_key: Annotated[str, Query(alias="labelKey")],
    prefix: str | None = None,
    limit: Annotated[int | None, Query(ge=1)] = None,
) -> dict[str, Any]:
    found = await events(ctx.storage, MetricFilters(names=(metric_name,)))
    values = sorted({v for e in found if (v := e.labels.get(label_key)) is not None and v.startswith(prefix or "")})
    return {"values": values[:limit] if limit else values}


__all__ = ["router"]
