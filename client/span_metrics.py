"""Mastra's automatic metrics, worked out from the spans the storage exporter keeps (`OTEL_TRACES_EXPORTER=keel`), as
Mastra works them out from its spans when they end: what `/api/observability/metrics...` lists and aggregates.

    mastra_agent_duration_ms          an agent run: from its first kept span to its last   labels: status
    mastra_model_duration_ms          a model call (`chat {model}` span)                    labels: status
    mastra_model_total_input_tokens   its input tokens                                      labels: status
    mastra_model_total_output_tokens  its output tokens                                     labels: status
    mastra_tool_duration_ms           a tool call (`execute_tool {name}` span)              labels: status

Each event carries its span's trace, span, run, thread, service, entity (the agent; for a tool, the tool), and for
model calls the provider and model. Nothing is stored twice: the events are made from the spans a query's time
range holds (bounded by the spans' retention), and aggregated here.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from keel.storage import SpanQuery, Storage, StoredSpan, TimeRange

Aggregation = Literal["sum", "avg", "min", "max", "count", "count_distinct", "last"]
INTERVALS = {"1m": 60, "5m": 300, "15m": 900, "1h": 3600, "1d": 86400}
MAX_SPANS = 100_000
"""The most spans one query reads (the storage exporter keeps 100000 by default)."""
_PAGE = 5_000

AGENT_DURATION = "mastra_agent_duration_ms"
MODEL_DURATION = "mastra_model_duration_ms"
INPUT_TOKENS = "mastra_model_total_input_tokens"
OUTPUT_TOKENS = "mastra_model_total_output_tokens"
TOOL_DURATION = "mastra_tool_duration_ms"


@dataclass(frozen=True)
class MetricEvent:
    timestamp: datetime
    name: str
    value: float
    trace_id: str | None = None
    span_id: str | None = None
    entity_type: str | None = None
    entity_id: str | None = None
    entity_name: str | None = None
    run_id: str | None = None
    thread_id: str | None = None
    service_name: str | None = None
    provider: str | None = None
    model: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def dimension(self, key: str) -> str | None:
        """A field by Mastra's name (`entityName`, `model`, ...), else a label."""
        attribute = _FIELDS.get(key)
        if attribute is not None:
            value = getattr(self, attribute)
            return None if value is None else str(value)
        return self.labels.get(key)

    def record(self) -> dict[str, Any]:
        """Mastra's metric record (`GET /observability/metrics`)."""
        return {
            "metricId": f"{self.span_id or self.run_id}:{self.name}",
            "timestamp": self.timestamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "name": self.name,
            "value": self.value,
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "entityType": self.entity_type,
            "entityId": self.entity_id,
            "entityName": self.entity_name,
            "runId": self.run_id,
            "threadId": self.thread_id,
            "serviceName": self.service_name,
            "provider": self.provider,
            "model": self.model,
            "estimatedCost": None,
            "costUnit": None,
            "labels": self.labels,
        }


_FIELDS = {
    "name": "name",
    "traceId": "trace_id",
    "spanId": "span_id",
    "entityType": "entity_type",
    "entityId": "entity_id",
    "entityName": "entity_name",
    "runId": "run_id",
    "threadId": "thread_id",
    "serviceName": "service_name",
    "provider": "provider",
    "model": "model",
}


def _ms(span: StoredSpan) -> float:
    return (span.ended_at - span.started_at).total_seconds() * 1000


def _status(span: StoredSpan) -> dict[str, str]:
    return {"status": "error" if span.status == "error" else "ok"}


def _common(span: StoredSpan) -> dict[str, Any]:
    return {"trace_id": span.trace_id, "span_id": span.span_id, "run_id": span.run_id, "thread_id": span.thread_id,
            "service_name": span.service_name}  # fmt: skip


def events_of(spans: Iterable[StoredSpan]) -> list[MetricEvent]:
    """The metric events of `spans` (the runs' durations from the spans of each run among them)."""
    found: list[MetricEvent] = []
    runs: dict[str, list[StoredSpan]] = defaultdict(list)
    for span in spans:
        if span.run_id and span.entity_type == "agent":
            runs[span.run_id].append(span)
        attributes = span.attributes
        if span.span_type == "model_generation":
            model = attributes.get("gen_ai.response.model") or attributes.get("gen_ai.request.model")
            provider = attributes.get("gen_ai.provider.name") or attributes.get("gen_ai.system")
            entity = {"entity_type": span.entity_type, "entity_id": span.entity_id, "entity_name": span.entity_name}
            common = {**_common(span), **entity, "provider": provider, "model": model, "labels": _status(span)}
            found.append(MetricEvent(span.ended_at, MODEL_DURATION, _ms(span), **common))
            for name, key in (
                (INPUT_TOKENS, "gen_ai.usage.input_tokens"),
                (OUTPUT_TOKENS, "gen_ai.usage.output_tokens"),
            ):
                if isinstance(attributes.get(key), int | float):
                    found.append(MetricEvent(span.ended_at, name, float(attributes[key]), **common))
        elif span.span_type == "tool_call":
            tool = {"entity_type": "tool", "entity_id": span.entity_id, "entity_name": span.entity_name}
            found.append(MetricEvent(span.ended_at, TOOL_DURATION, _ms(span), **_common(span), **tool,
                                     labels=_status(span)))  # fmt: skip
    for run_id, kept in runs.items():
        first = min(kept, key=lambda s: s.started_at)
        ended = max(s.ended_at for s in kept)
        failed = any(s.status == "error" and s.span_type == "agent_run" for s in kept)
        found.append(
            MetricEvent(
                ended, AGENT_DURATION, (ended - first.started_at).total_seconds() * 1000, trace_id=first.trace_id,
                span_id=first.span_id, entity_type="agent", entity_id=first.entity_id, entity_name=first.entity_name,
                run_id=run_id, thread_id=first.thread_id, service_name=first.service_name,
                labels={"status": "error" if failed else "ok"},
            )
        )  # fmt: skip
    return found


@dataclass(frozen=True)
class MetricFilters:
    """Mastra's metric filters Keel can answer; `matches_nothing` for one on what its events never carry."""

    start: datetime | None = None
    end: datetime | None = None
    start_exclusive: bool = False
    end_exclusive: bool = False
    names: tuple[str, ...] = ()
    equal: Mapping[str, str] = field(default_factory=dict)
    """Mastra's field names (`traceId`, `entityName`, `model`, ...) to values."""
    trace_ids: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    matches_nothing: bool = False

    def shifted(self, by: timedelta) -> MetricFilters:
        """The same filters, their time range `by` earlier (a comparison period)."""
        start, end = (self.start - by if self.start else None), (self.end - by if self.end else None)
        return replace(self, start=start, end=end)

    def matches(self, event: MetricEvent) -> bool:
        if self.matches_nothing:
            return False
        at = event.timestamp
        if self.start is not None and (at <= self.start if self.start_exclusive else at < self.start):
            return False
        if self.end is not None and (at >= self.end if self.end_exclusive else at > self.end):
            return False
        if self.names and event.name not in self.names:
            return False
        if self.trace_ids and event.trace_id not in self.trace_ids:
            return False
        if any(event.dimension(k) != v for k, v in self.equal.items()):
            return False
        return all(event.labels.get(k) == v for k, v in self.labels.items())


async def events(storage: Storage, filters: MetricFilters) -> list[MetricEvent]:
    """The events the kept spans give in `filters`' time range, filtered, oldest first."""
    if filters.matches_nothing:
        return []
    ended = TimeRange(filters.start, filters.end) if filters.start or filters.end else None
    spans: list[StoredSpan] = []
    for page in range(MAX_SPANS // _PAGE):
        found, total = await storage.list_spans(SpanQuery(ended=ended, descending=False), page=page, per_page=_PAGE)
        spans += found
        if (page + 1) * _PAGE >= total:
            break
    return sorted((e for e in events_of(spans) if filters.matches(e)), key=lambda e: e.timestamp)


def aggregate(found: Sequence[MetricEvent], how: Aggregation, distinct: str | None = None) -> float | None:
    if how == "count":
        return float(len(found))
    if how == "count_distinct":
        return float(len({e.dimension(distinct or "runId") for e in found} - {None}))
    if not found:
        return None
    values = [e.value for e in found]
    reducers: dict[str, Callable[[list[float]], float]] = {
        "sum": math.fsum,
        "avg": lambda v: math.fsum(v) / len(v),
        "min": min,
        "max": max,
        "last": lambda v: v[-1],  # the events are oldest first
    }
    return reducers[how](values)


def bucket(at: datetime, interval: str) -> datetime:
    seconds = INTERVALS[interval]
    return datetime.fromtimestamp(math.floor(at.timestamp() / seconds) * seconds, UTC)


def percentile(values: Sequence[float], p: float) -> float:
    """Linear interpolation between the closest ranks (as numpy's default)."""
    ordered = sorted(values)
    rank = p * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


__all__ = [
    "AGENT_DURATION",
    "INPUT_TOKENS",
    "INTERVALS",
    "MODEL_DURATION",
    "OUTPUT_TOKENS",
    "TOOL_DURATION",
    "Aggregation",
    "MetricEvent",
    "MetricFilters",
    "aggregate",
    "bucket",
    "events",
    "events_of",
    "percentile",
]
