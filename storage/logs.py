"""The logs domain: the log records a worker keeps (`KEEL_LOGS`, `keel.client.log_handler`), each with the run, agent,
step and trace it was logged in, bounded by age and count, for Mastra's `/api/logs` routes and `keel logs`.

Records arrive in batches from every worker process; they are read back in the order they were logged (`logged_at`,
then the order they were written). Pruning happens on write, a bounded batch at a time, as for spans: records logged
more than `max_age` ago, then the oldest written beyond `max_records`.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

LogLevel = Literal["debug", "info", "warn", "error", "fatal"]
LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warn", "error", "fatal")
"""Mastra's levels, least severe first (Python's WARNING is `warn`, CRITICAL `fatal`)."""


@dataclass(frozen=True)
class StoredLog:
    """One log record as the store keeps it."""

    logged_at: datetime
    level: LogLevel
    message: str
    logger: str
    """The Python logger's name (`keel.activities.tools`, Temporal's activity logger, an app's own)."""
    run_id: str | None = None
    """The Keel run (or another Temporal workflow's id) the record was logged for, when known."""
    agent_id: str | None = None
    step: int | None = None
    thread_id: str | None = None
    trace_id: str | None = None
    """32 hex digits: the span current when it was logged (tracing on)."""
    span_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    """Everything else: the tool call, Temporal's activity or workflow, the exception, fields given as `extra`."""
    pid: int = 0
    hostname: str = ""
    service_name: str = "keel"
    seq: int | None = None
    """The store's write order (set by the store)."""


@dataclass(frozen=True)
class LogRetention:
    """How much the store keeps: what a write prunes."""

    max_age: timedelta = timedelta(hours=72)
    """Records logged longer ago are deleted."""
    max_records: int = 100_000
    """Beyond this many, the oldest written are deleted."""
    batch: int = 1_000
    """At most this many deleted per write and reason, so one write stays short; the next write goes on."""


@dataclass(frozen=True)
class LogQuery:
    """Which records `list_logs` returns; every field given must match."""

    run_id: str | None = None
    agent_id: str | None = None
    thread_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    logger: str | None = None
    levels: tuple[LogLevel, ...] | None = None
    """Any of these levels (None: any level)."""
    since: datetime | None = None
    """Logged at or after."""
    until: datetime | None = None
    """Logged at or before."""
    fields: Mapping[str, str] = field(default_factory=dict)
    """`field: value`, compared as text: a record's own fields by Mastra's names (`runId`, `agentId`, `name`, ...)
    or a key of its `data`."""
    matches_nothing: bool = False
    descending: bool = False
    """Newest first (default: in the order they were logged)."""


class LogStore(abc.ABC):
    """Log records, bounded by age and count."""

    @abc.abstractmethod
    async def save_logs(self, logs: Sequence[StoredLog], *, retention: LogRetention | None = None) -> int:
        """Store `logs` and, with `retention`, prune in the same transaction. Returns how many were pruned."""

    @abc.abstractmethod
    async def list_logs(self, query: LogQuery, *, offset: int = 0, limit: int = 100) -> tuple[list[StoredLog], int]:
        """The matching records from `offset` (at most `limit`), in the query's order, and how many match in all."""


# --- the rules both backends follow ----------------------------------------------------------------------------

LOG_COLUMNS = (
    "seq, logged_at, level, logger, message, run_id, agent_id, step, thread_id, trace_id, span_id, data, pid, "
    "hostname, service_name"
)
INSERT_COLUMNS = LOG_COLUMNS.removeprefix("seq, ") + ", created_at"

FIELD_COLUMNS = {
    "runId": "run_id",
    "agentId": "agent_id",
    "step": "step",
    "threadId": "thread_id",
    "traceId": "trace_id",
    "spanId": "span_id",
    "name": "logger",
    "level": "level",
    "msg": "message",
    "hostname": "hostname",
    "pid": "pid",
    "serviceName": "service_name",
}
"""A record's own fields by the names Mastra's records give them (`keel.client.log_records`)."""

_EQUAL = ("run_id", "agent_id", "thread_id", "trace_id", "span_id", "logger")

Dialect = Literal["sqlite", "postgres"]


def dumps(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


def row_values(log: StoredLog, at: Any, time: Callable[[datetime], Any]) -> tuple[Any, ...]:
    """The values of `INSERT_COLUMNS` for a record written at `at`."""
    return (
        time(log.logged_at), log.level, log.logger, log.message, log.run_id, log.agent_id, log.step, log.thread_id,
        log.trace_id, log.span_id, dumps(log.data), log.pid, log.hostname, log.service_name, at,
    )  # fmt: skip


class Row(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


def _time(value: Any) -> datetime:
    parsed = datetime.fromisoformat(value) if isinstance(value, str) else value
    assert isinstance(parsed, datetime)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def log_of(row: Row) -> StoredLog:
    """A row of `LOG_COLUMNS` (times as datetimes or ISO text, `data` as JSON text or a dict)."""
    data = row["data"]
    return StoredLog(
        seq=row["seq"],
        logged_at=_time(row["logged_at"]),
        level=row["level"],
        logger=row["logger"],
        message=row["message"],
        run_id=row["run_id"],
        agent_id=row["agent_id"],
        step=row["step"],
        thread_id=row["thread_id"],
        trace_id=row["trace_id"],
        span_id=row["span_id"],
        data=json.loads(data) if isinstance(data, str | bytes) else dict(data or {}),
        pid=row["pid"],
        hostname=row["hostname"],
        service_name=row["service_name"],
    )


def conditions(query: LogQuery, dialect: Dialect, param: Callable[[Any], str]) -> list[str]:
    """The WHERE conditions of `query` on `logs l`; `param(value)` adds a parameter and returns its placeholder."""
    found: list[str] = ["1 = 0"] if query.matches_nothing or query.levels == () else []
    for name in _EQUAL:
        value = getattr(query, name)
        if value is not None:
            found.append(f"l.{name} = {param(value)}")
    if query.levels:
        found.append(f"l.level IN ({', '.join(param(level) for level in query.levels)})")
    if query.since is not None:
        found.append(f"l.logged_at >= {param(query.since)}")
    if query.until is not None:
        found.append(f"l.logged_at <= {param(query.until)}")
    for key, value in query.fields.items():
        column = FIELD_COLUMNS.get(key)
        if column is not None:
            found.append(f"CAST(l.{column} AS TEXT) = {param(value)}")
        elif dialect == "sqlite":  # json_each, not a JSON path: any key, quotes and dots included
            each = "SELECT 1 FROM json_each(l.data) d WHERE d.key = {} AND CAST(d.value AS TEXT) = {}"
            found.append(f"EXISTS ({each.format(param(key), param(value))})")
        else:
            found.append(f"l.data ->> {param(key)} = {param(value)}")
    return found


def order(query: LogQuery) -> str:
    direction = "DESC" if query.descending else "ASC"
    return f"l.logged_at {direction}, l.seq {direction}"


def cutoff(retention: LogRetention) -> datetime:
    return datetime.now(UTC) - retention.max_age


__all__ = ["LEVELS", "LogLevel", "LogQuery", "LogRetention", "LogStore", "StoredLog"]
