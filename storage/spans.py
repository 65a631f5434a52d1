"""The spans domain: the trace spans the storage exporter keeps (`OTEL_TRACES_EXPORTER=keel`), bounded by age and
count, for Mastra's observability routes and `keel trace`.

A span is stored as the exporter made it (`StoredSpan`: OpenTelemetry's fields, with Mastra's span type and
entity worked out from its name and attributes) and two things are kept up to date as spans arrive, in any
order and from several processes:

- which spans head their trace: its earliest agent or workflow run span (a run started over HTTP has the
  request's span above it); in a trace without one, `is_root` is set on a span whose parent is not stored (it
  has none, or it was made in a process that keeps its spans elsewhere, or it was pruned), and of those the
  earliest heads the trace;
- which agent a run's spans belong to: only the model and tool calls name their agent, so the spans of the same
  run (the workflow's and activities' own, from the Temporal interceptor) get it from them, whichever arrives
  first.

Pruning happens on write, a bounded batch at a time (`SpanRetention.batch`), and takes whole traces, so a trace
is kept whole or not at all (one cut at its oldest spans had lost its head and its early steps): the traces whose
every span started more than `max_age` ago, and the traces of the oldest written spans beyond `max_spans`.

Nothing here imports OpenTelemetry: the exporter (`keel.client.span_exporter`) turns its spans into these.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

SpanStatus = Literal["unset", "ok", "error"]
TraceStatus = Literal["success", "error", "running"]

AGENT_ENTITY = "agent"
"""The entity type of an agent run's spans (Mastra's `EntityType.AGENT`)."""


@dataclass(frozen=True)
class StoredSpan:
    """One finished span as the storage exporter keeps it."""

    trace_id: str
    """32 hex digits."""
    span_id: str
    """16 hex digits."""
    name: str
    started_at: datetime
    ended_at: datetime
    parent_span_id: str | None = None
    kind: str = "internal"
    """OpenTelemetry's span kind, lower case: internal, server, client, producer, consumer."""
    span_type: str = "generic"
    """Mastra's span type (`agent_run`, `model_generation`, `tool_call`, ...)."""
    status: SpanStatus = "unset"
    status_message: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str | None = None
    """The instrumentation scope that made the span (`keel`, Temporal's interceptor, ...)."""
    service_name: str | None = None
    run_id: str | None = None
    """The Keel run (or another Temporal workflow's id) the span belongs to, when it says."""
    entity_type: str | None = None
    entity_id: str | None = None
    entity_name: str | None = None
    thread_id: str | None = None
    created_at: datetime | None = None
    """When the store wrote it (set by the store)."""


@dataclass(frozen=True)
class SpanRetention:
    """How much the store keeps: what a write prunes."""

    max_age: timedelta = timedelta(hours=72)
    """A trace whose every span started longer ago is deleted."""
    max_spans: int = 100_000
    """Beyond this many spans, the traces of the oldest written are deleted (whole)."""
    batch: int = 1_000
    """Per write, the traces of at most this many of the oldest expired spans, and of at most this many spans
    beyond the count, are deleted (whole), so one write stays short; the next write goes on."""


@dataclass(frozen=True)
class TimeRange:
    start: datetime | None = None
    end: datetime | None = None
    start_exclusive: bool = False
    end_exclusive: bool = False


RUN_SPAN_TYPES = ("agent_run", "workflow_run")
"""A trace that holds a run's span is headed by its earliest: a run started over HTTP has the request's span at its
root, and Mastra's lists give (and filter) a trace by its agent or workflow run."""


@dataclass(frozen=True)
class SpanQuery:
    """Which spans `list_spans` returns; every field given must match."""

    roots_only: bool = False
    """One span per trace: the one that heads it (its earliest run span, else its earliest span whose parent is
    not stored)."""
    trace_id: str | None = None
    span_type: str | None = None
    entity_type: str | None = None
    entity_id: str | None = None
    entity_name: str | None = None
    run_id: str | None = None
    thread_id: str | None = None
    service_name: str | None = None
    scope: str | None = None
    name_prefix: str | None = None
    started: TimeRange | None = None
    ended: TimeRange | None = None
    status: TraceStatus | None = None
    """Finished spans only are stored: `running` matches none; `success` is any span without an error."""
    has_child_error: bool | None = None
    """Another span of the span's trace has (or has not) an error."""
    attributes: Mapping[str, str] = field(default_factory=dict)
    """Attribute values, compared as text."""
    matches_nothing: bool = False
    """A filter on something spans never carry was given: nothing matches."""
    order_by: Literal["started_at", "ended_at"] = "started_at"
    descending: bool = True


class SpanStore(abc.ABC):
    """Trace spans, bounded by age and count."""

    @abc.abstractmethod
    async def save_spans(self, spans: Sequence[StoredSpan], *, retention: SpanRetention | None = None) -> int:
        """Store `spans` (one already stored, by trace and span id, is kept as it was) and, with `retention`, prune
        in the same transaction. Returns how many spans were pruned."""

    @abc.abstractmethod
    async def list_spans(self, query: SpanQuery, *, page: int = 0, per_page: int = 10) -> tuple[list[StoredSpan], int]:
        """A page of the matching spans (pages from 0) in the query's order, and how many match in all."""

    @abc.abstractmethod
    async def trace_spans(self, trace_id: str) -> list[StoredSpan]:
        """Every stored span of a trace, the earliest first (empty for an unknown trace)."""

    @abc.abstractmethod
    async def get_span(self, trace_id: str, span_id: str) -> StoredSpan | None: ...

    @abc.abstractmethod
    async def run_traces(self, run_id: str) -> list[str]:
        """The traces holding spans of `run_id`, the earliest first (a run's trace, and those of calls made to it
        from a trace of their own, such as an approval sent inside an HTTP request's trace)."""

    @abc.abstractmethod
    async def delete_traces(self, trace_ids: Sequence[str]) -> int:
        """Delete every span of these traces, and the log records of them (Mastra's `deleteTraces` cascades to
        them); how many spans were deleted."""


# --- the rules both backends follow ----------------------------------------------------------------------------

SPAN_COLUMNS = (
    "trace_id, span_id, parent_span_id, name, kind, span_type, status, status_message, started_at, ended_at, "
    "run_id, entity_type, entity_id, entity_name, thread_id, service_name, scope, attributes, events, links, "
    "resource, created_at"
)
INSERT_COLUMNS = f"{SPAN_COLUMNS}, is_root"


def run_entities(spans: Sequence[StoredSpan]) -> dict[str, StoredSpan]:
    """Per run id, a span of it that names its agent."""
    found: dict[str, StoredSpan] = {}
    for span in spans:
        if span.run_id and span.entity_type == AGENT_ENTITY and span.entity_id and span.run_id not in found:
            found[span.run_id] = span
    return found


def needing_entity(spans: Sequence[StoredSpan], known: Mapping[str, StoredSpan]) -> list[str]:
    """The runs whose spans lack their entity and no span of `known` names it."""
    return sorted({s.run_id for s in spans if s.run_id and s.entity_id is None and s.run_id not in known})


def with_entity(span: StoredSpan, known: Mapping[str, StoredSpan]) -> StoredSpan:
    """`span` with its run's agent (and thread), when it has no entity of its own and the run's agent is known."""
    source = known.get(span.run_id or "")
    if source is None or span.entity_id is not None:
        return span
    return replace(
        span,
        entity_type=source.entity_type,
        entity_id=source.entity_id,
        entity_name=source.entity_name,
        thread_id=span.thread_id or source.thread_id,
    )


def dumps(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


def row_values(span: StoredSpan, at: Any, time: Callable[[datetime], Any]) -> tuple[Any, ...]:
    """The values of `INSERT_COLUMNS` for a span written at `at` (a new span heads its trace until its parent is
    found)."""
    return (
        span.trace_id, span.span_id, span.parent_span_id, span.name, span.kind, span.span_type, span.status,
        span.status_message, time(span.started_at), time(span.ended_at), span.run_id, span.entity_type,
        span.entity_id, span.entity_name, span.thread_id, span.service_name, span.scope, dumps(span.attributes),
        dumps(span.events), dumps(span.links), dumps(span.resource), at, True,
    )  # fmt: skip


def _time(value: Any) -> datetime:
    parsed = datetime.fromisoformat(value) if isinstance(value, str) else value
    assert isinstance(parsed, datetime)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


class Row(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


def span_of(row: Row) -> StoredSpan:
    """A row of `SPAN_COLUMNS` (times as datetimes or ISO text, JSON as text)."""
    return StoredSpan(
        trace_id=row["trace_id"],
        span_id=row["span_id"],
        parent_span_id=row["parent_span_id"],
        name=row["name"],
        kind=row["kind"],
        span_type=row["span_type"],
        status=row["status"],
        status_message=row["status_message"],
        started_at=_time(row["started_at"]),
        ended_at=_time(row["ended_at"]),
        run_id=row["run_id"],
        entity_type=row["entity_type"],
        entity_id=row["entity_id"],
        entity_name=row["entity_name"],
        thread_id=row["thread_id"],
        service_name=row["service_name"],
        scope=row["scope"],
        attributes=_loads(row["attributes"]),
        events=_loads(row["events"]),
        links=_loads(row["links"]),
        resource=_loads(row["resource"]),
        created_at=_time(row["created_at"]),
    )


Dialect = Literal["sqlite", "postgres"]

_EQUAL = ("trace_id", "span_type", "entity_type", "entity_id", "entity_name", "run_id", "thread_id", "service_name",
          "scope")  # fmt: skip


def conditions(query: SpanQuery, dialect: Dialect, param: Callable[[Any], str]) -> list[str]:
    """The WHERE conditions of `query` on `spans s`; `param(value)` adds a parameter and returns its placeholder."""
    true = "1" if dialect == "sqlite" else "TRUE"
    found: list[str] = ["1 = 0"] if query.matches_nothing or query.status == "running" else []
    for name in _EQUAL:
        value = getattr(query, name)
        if value is not None:
            found.append(f"s.{name} = {param(value)}")
    if query.name_prefix:
        escaped = query.name_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        found.append(f"s.name LIKE {param(escaped + '%')} ESCAPE '\\'")
    for column, span in (("started_at", query.started), ("ended_at", query.ended)):
        if span is not None and span.start is not None:
            found.append(f"s.{column} {'>' if span.start_exclusive else '>='} {param(span.start)}")
        if span is not None and span.end is not None:
            found.append(f"s.{column} {'<' if span.end_exclusive else '<='} {param(span.end)}")
    if query.status == "error":
        found.append("s.status = 'error'")
    elif query.status == "success":
        found.append("s.status <> 'error'")
    if query.has_child_error is not None:
        child = "SELECT 1 FROM spans c WHERE c.trace_id = s.trace_id AND c.status = 'error' AND c.span_id <> s.span_id"
        found.append(f"{'' if query.has_child_error else 'NOT '}EXISTS ({child})")
    for key, value in query.attributes.items():
        if dialect == "sqlite":  # json_each, not a JSON path: any key, quotes and dots included
            each = "SELECT 1 FROM json_each(s.attributes) a WHERE a.key = {} AND CAST(a.value AS TEXT) = {}"
            found.append(f"EXISTS ({each.format(param(key), param(value))})")
        else:
            found.append(f"s.attributes ->> {param(key)} = {param(value)}")
    if query.roots_only:
        before = "(r.started_at < s.started_at OR (r.started_at = s.started_at AND r.seq < s.seq))"
        runs = ", ".join(f"'{t}'" for t in RUN_SPAN_TYPES)
        run_in_trace = f"SELECT 1 FROM spans r WHERE r.trace_id = s.trace_id AND r.span_type IN ({runs})"
        earlier_root = f"SELECT 1 FROM spans r WHERE r.trace_id = s.trace_id AND r.is_root = {true} AND {before}"
        found.append(
            f"((s.span_type IN ({runs}) AND NOT EXISTS ({run_in_trace} AND {before}))"
            f" OR (s.is_root = {true} AND NOT EXISTS ({earlier_root}) AND NOT EXISTS ({run_in_trace})))"
        )
    return found


def order(query: SpanQuery) -> str:
    direction = "DESC" if query.descending else "ASC"
    return f"s.{query.order_by} {direction}, s.seq {direction}"


ORPHANS_FOUND_PARENT = (
    "UPDATE spans SET is_root = {false} WHERE trace_id IN ({traces}) AND is_root = {true}"
    " AND parent_span_id IS NOT NULL"
    " AND EXISTS (SELECT 1 FROM spans p WHERE p.trace_id = spans.trace_id AND p.span_id = spans.parent_span_id)"
)
"""Spans of the written traces whose parent is now stored no longer head their trace."""

EXPIRED_TRACES = (
    "SELECT DISTINCT trace_id FROM (SELECT trace_id FROM spans WHERE started_at < {cutoff} ORDER BY started_at"
    " LIMIT {limit}) o WHERE NOT EXISTS (SELECT 1 FROM spans n WHERE n.trace_id = o.trace_id"
    " AND n.started_at >= {cutoff})"
)
"""Of the traces of the oldest `limit` spans started before `cutoff`, those whose every span did (a bounded scan
by time, then one index probe per trace: `spans_by_trace_time`)."""

OLDEST_TRACES = (
    "SELECT DISTINCT trace_id FROM (SELECT trace_id FROM spans WHERE seq < {last} ORDER BY seq LIMIT {limit}) o"
)
"""The traces of the oldest written spans before the one of seq `last` (at most `limit` spans)."""


def cutoff(retention: SpanRetention) -> datetime:
    return datetime.now(UTC) - retention.max_age


__all__ = [
    "AGENT_ENTITY",
    "SpanQuery",
    "SpanRetention",
    "SpanStatus",
    "SpanStore",
    "StoredSpan",
    "TimeRange",
    "TraceStatus",
]
