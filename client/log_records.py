"""Stored log records in Mastra's shapes: the legacy logger transports' (`/api/logs`, `BaseLogMessage`) and the
observability store's (`/api/observability/logs`), and as `keel logs` prints them.

    {"level": "info", "msg": "Tool save_note finished in 3 ms", "time": "2025-06-01T12:00:00.123Z",
     "runId": "run-1", "pid": 4242, "hostname": "worker-1", "name": "keel.activities.tools",
     "context": {"agentId": "demo", "step": 1, "traceId": "4bf9...", "spanId": "00f0...", "toolName": "save_note", ...}}

A pino record (which Mastra's transports keep) has its fields at the top level; Mastra's schema for these routes
names `context` for them, so they are there, by Mastra's names (`agentId`, `traceId`, `toolCallId`, ...), beside
whatever the record was given as `extra`. Mastra's legacy levels have no `fatal`: a CRITICAL record is `error`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from keel.storage.logs import StoredLog

_CONTEXT_NAMES = {
    "tool_name": "toolName",
    "tool_call_id": "toolCallId",
    "task_queue": "taskQueue",
    "activity_type": "activityType",
    "workflow_type": "workflowType",
}


def iso(value: datetime) -> str:
    """As JavaScript's `Date.toISOString()` writes it: UTC, milliseconds, `Z`."""
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def context_of(log: StoredLog) -> dict[str, Any]:
    own = {"agentId": log.agent_id, "step": log.step, "threadId": log.thread_id, "traceId": log.trace_id,
           "spanId": log.span_id}  # fmt: skip
    data = {_CONTEXT_NAMES.get(key, key): value for key, value in log.data.items()}
    return {key: value for key, value in {**data, **own}.items() if value is not None}


def legacy_record(log: StoredLog) -> dict[str, Any]:
    """Mastra's `BaseLogMessage`."""
    record: dict[str, Any] = {
        "level": "error" if log.level == "fatal" else log.level,
        "msg": log.message,
        "time": iso(log.logged_at),
        "pid": log.pid,
        "hostname": log.hostname,
        "name": log.logger,
    }
    if log.run_id is not None:
        record["runId"] = log.run_id
    if context := context_of(log):
        record["context"] = context
    return record


def observability_record(log: StoredLog) -> dict[str, Any]:
    """Mastra's observability log record (`logRecordSchema`): the agent as the entity, the rest in `data`."""
    return {
        "logId": str(log.seq) if log.seq is not None else None,
        "timestamp": iso(log.logged_at),
        "level": log.level,
        "message": log.message,
        "data": {_CONTEXT_NAMES.get(key, key): value for key, value in log.data.items()} or None,
        "traceId": log.trace_id,
        "spanId": log.span_id,
        "entityType": "agent" if log.agent_id else None,
        "entityId": log.agent_id,
        "entityName": log.agent_id,
        "runId": log.run_id,
        "threadId": log.thread_id,
        "serviceName": log.service_name,
        "scope": {"name": log.logger},
        "metadata": {"step": log.step, "pid": log.pid, "hostname": log.hostname},
    }


def line(log: StoredLog) -> str:
    """One line for a terminal: time, level, step, logger, message, and the trace's id."""
    when = log.logged_at.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]
    step = f"step {log.step}" if log.step is not None else ""
    where = " ".join(part for part in (step, log.data.get("tool_name", "")) if part)
    shown = [when, f"{log.level.upper():5}", *([where] if where else []), f"[{log.logger}]", log.message]
    if log.trace_id:
        shown.append(f"(trace {log.trace_id})")
    return "  ".join(shown)


__all__ = ["context_of", "iso", "legacy_record", "line", "observability_record"]
