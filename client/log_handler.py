"""A worker's log records kept in Keel's storage (`KEEL_LOGS=info`, or `debug`, `warn`, `error`), each with the run,
agent, step and trace it was logged in: the transport Mastra's `/api/logs` routes and `keel logs RUN` read.

    async with keeping_logs(storage, worker.task_queue):   # KeelPlugin does this for every worker it runs
        ...                                                 # records of `level` and above go to `storage`

Which records: every record of `level` and above that reaches the root logger, Keel's own (its `keel` loggers
are set to `level` while records are kept), Temporal's and the app's (at the level their loggers are set to).
What each carries (`RunContextFilter`, which a console handler can use too: `%(run_id)s`): the fields Keel's code
bound (`keel.protocol.log_context`: run, agent, step, thread, tool call), else the workflow of the Temporal activity
or workflow it was logged in (its id is the run id), and the current span's trace and span ids (tracing on).

How: one handler per process, on the root logger while any worker keeps records. `emit` only turns the record into
a `StoredLog` (in the logging thread, where the run's context is) and queues it for the worker whose task queue
logged it (a record of no worker's goes to each storage once); a task on the worker's event loop writes the queue
through the worker's own storage every `FLUSH_SECONDS` (or `BATCH` records), secrets redacted
(`keel.protocol.tracing.redacted`), pruning by age and count (`KEEL_LOG_RETENTION_HOURS`, `KEEL_LOG_MAX_RECORDS`).
At most `MAX_PENDING` records wait; beyond, they are counted and a record says how many were dropped. A batch the
storage refuses is dropped with one warning on stderr per problem; the storage's own records while it writes are
not kept (they would be written again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import threading
import traceback
from collections.abc import AsyncIterator, Mapping
from contextvars import ContextVar
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity, workflow

from keel.protocol import log_context, tracing
from keel.protocol.settings import load_settings
from keel.storage import LogRetention, Storage, StoredLog
from keel.storage.logs import LogLevel

FLUSH_SECONDS = 0.5
BATCH = 500
MAX_PENDING = 20_000
MAX_MESSAGE_CHARS = 16 * 1024
MAX_VALUE_CHARS = 4 * 1024
"""A field given as `extra`, or an exception's stack, is cut to this many characters."""

LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
ATTRIBUTES = ("run_id", "agent_id", "step", "thread_id", "trace_id", "span_id")
"""What `RunContextFilter` sets on every record (None when unknown; a value given as `extra` is kept)."""

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}
_TEMPORAL = ("temporal_activity", "temporal_workflow")
_OWN_LOGGER = "keel.log_handler"
_writing: ContextVar[bool] = ContextVar("keel_log_writing", default=False)
_problems = logging.getLogger(_OWN_LOGGER)


def level_of(levelno: int) -> LogLevel:
    """Mastra's level for a Python level."""
    if levelno >= logging.CRITICAL:
        return "fatal"
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warn"
    return "info" if levelno >= logging.INFO else "debug"


def run_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The run fields of a record: bound by Keel's code, else Temporal's activity or workflow it was logged in;
    plus `task_queue`, `activity` / `workflow` and the current span's `trace_id` and `span_id`."""
    found: dict[str, Any] = dict(log_context.current())
    details = next((d for k in _TEMPORAL if isinstance(d := getattr(record, k, None), Mapping)), None)
    if details is None:  # logged in an activity or a workflow, not through Temporal's logger adapters
        if activity.in_activity():
            info = activity.info()
            details = {"workflow_id": info.workflow_id, "activity_type": info.activity_type,
                       "attempt": info.attempt, "task_queue": info.task_queue}  # fmt: skip
        elif workflow.in_workflow():
            winfo = workflow.info()
            details = {"workflow_id": winfo.workflow_id, "workflow_type": winfo.workflow_type,
                       "task_queue": winfo.task_queue}  # fmt: skip
    if details is not None:
        if details.get("workflow_id"):
            found.setdefault("run_id", details["workflow_id"])
        for key in ("task_queue", "activity_type", "workflow_type", "attempt"):
            if details.get(key) is not None:
                found.setdefault(key, details[key])
    if "opentelemetry.trace" in sys.modules:  # tracing may be on: never imported here otherwise
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            found["trace_id"] = format(context.trace_id, "032x")
            found["span_id"] = format(context.span_id, "016x")
    return found


class RunContextFilter(logging.Filter):
    """Sets `ATTRIBUTES` on every record (the fields of `run_fields`), so handlers and formats can use them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "keel_fields", None) is None:
            fields = run_fields(record)
            record.keel_fields = fields
            for name in ATTRIBUTES:
                if not hasattr(record, name):
                    setattr(record, name, fields.get(name))
        return True


def _message(record: logging.LogRecord) -> str:
    try:
        text = record.getMessage()
    except Exception:  # arguments that do not fit the format: the format and the arguments, as they are
        text = f"{record.msg} {record.args}"
    for key in _TEMPORAL:  # Temporal's adapters add their details to the message too: they are fields here
        details = getattr(record, key, None)
        if details is not None and text.endswith(suffix := f" ({details})"):
            text = text[: -len(suffix)]
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "…"


def _bounded(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value[:MAX_VALUE_CHARS] if isinstance(value, str) else value
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…"


def stored_log(record: logging.LogRecord, fields: Mapping[str, Any]) -> StoredLog:
    """A record as the store keeps it (not yet redacted: the writer does that, a batch at a time)."""
    data: dict[str, Any] = {
        key: fields[key]
        for key in ("tool_name", "tool_call_id", "task_queue", "activity_type", "workflow_type", "attempt")
        if fields.get(key) is not None
    }
    for key, value in record.__dict__.items():
        if (
            key not in _STANDARD
            and key not in _TEMPORAL
            and key not in ATTRIBUTES
            and not key.startswith(("_", "keel_"))
        ):
            data[key] = _bounded(value)
    if record.exc_info and record.exc_info[1] is not None:
        err = record.exc_info[1]
        stack = "".join(traceback.format_exception(err))
        data["error"] = {"type": type(err).__name__, "message": _bounded(str(err)), "stack": _bounded(stack)}
    step = fields.get("step")
    return StoredLog(
        logged_at=datetime.fromtimestamp(record.created, UTC),
        level=level_of(record.levelno),
        message=_message(record),
        logger=record.name,
        run_id=fields.get("run_id"),
        agent_id=fields.get("agent_id"),
        step=step if isinstance(step, int) else None,
        thread_id=fields.get("thread_id"),
        trace_id=fields.get("trace_id"),
        span_id=fields.get("span_id"),
        data=data,
        pid=_PID,
        hostname=_HOSTNAME,
        service_name=os.environ.get("OTEL_SERVICE_NAME") or tracing.DEFAULT_SERVICE_NAME,
    )


_PID = os.getpid()
_HOSTNAME = socket.gethostname()


def _redacted(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return tracing.redacted(value, secrets)
    if isinstance(value, dict):
        return {k: _redacted(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v, secrets) for v in value]
    return value


class LogSink:
    """The records kept in one worker's storage, written by a task on the worker's event loop."""

    def __init__(self, storage: Storage, task_queue: str, level: int, retention: LogRetention) -> None:
        self.storage = storage
        self.task_queue = task_queue
        self.level = level
        self.retention = retention
        self._loop = asyncio.get_running_loop()
        self._pending: list[StoredLog] = []
        self._dropped = 0
        self._lock = threading.Lock()
        self._wake = asyncio.Event()
        self._last_problem: str | None = None

    def put(self, log: StoredLog) -> None:
        """Queue a record (any thread)."""
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                self._dropped += 1
                return
            self._pending.append(log)
            full = len(self._pending) == BATCH
        if full:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the final flush took what it could
                self._loop.call_soon_threadsafe(self._wake.set)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), FLUSH_SECONDS)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
            dropped, self._dropped = self._dropped, 0
        if dropped:
            note = f"{dropped} log records were dropped: more than {MAX_PENDING} waited to be written"
            batch.append(StoredLog(datetime.now(UTC), "warn", note, _OWN_LOGGER, pid=_PID, hostname=_HOSTNAME))
        if not batch:
            return
        secrets = tracing.known_secrets()
        batch = [replace(log, message=tracing.redacted(log.message, secrets), data=_redacted(log.data, secrets))
                 for log in batch]  # fmt: skip
        token = _writing.set(True)
        try:
            await self.storage.save_logs(batch, retention=self.retention)
            self._last_problem = None
        except Exception as err:
            problem = f"{type(err).__name__}: {err}"
            if problem != self._last_problem:  # once per problem, not once per batch
                print(f"keel: {len(batch)} log records not kept: {problem}", file=sys.stderr, flush=True)
                self._last_problem = problem
        finally:
            _writing.reset(token)


class StorageLogHandler(logging.Handler):
    """The process's handler: each record to the sinks that keep it (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.addFilter(RunContextFilter())
        self.sinks: list[LogSink] = []
        self._saved_levels: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if _writing.get() or record.name == _OWN_LOGGER:
            return
        sinks = [s for s in self.sinks if record.levelno >= s.level]
        if not sinks:
            return
        fields = getattr(record, "keel_fields", None) or run_fields(record)
        queue = fields.get("task_queue")
        chosen = [s for s in sinks if s.task_queue == queue]
        if not chosen:  # no worker's own record: each storage once
            by_storage = {id(s.storage): s for s in reversed(sinks)}
            chosen = list(by_storage.values())
        try:
            log = stored_log(record, fields)
        except Exception:
            self.handleError(record)
            return
        for sink in chosen:
            sink.put(log)

    def add(self, sink: LogSink) -> None:
        self.sinks.append(sink)
        self.setLevel(min(s.level for s in self.sinks))
        keel = logging.getLogger("keel")
        if "keel" not in self._saved_levels:
            self._saved_levels["keel"] = keel.level
        if keel.getEffectiveLevel() > self.level:
            keel.setLevel(self.level)
        root = logging.getLogger()
        if self not in root.handlers:
            root.addHandler(self)

    def remove(self, sink: LogSink) -> None:
        self.sinks.remove(sink)
        if self.sinks:
            self.setLevel(min(s.level for s in self.sinks))
            return
        logging.getLogger().removeHandler(self)
        for name, level in self._saved_levels.items():
            logging.getLogger(name).setLevel(level)
        self._saved_levels.clear()


HANDLER = StorageLogHandler()
"""The process's one handler (on the root logger while any worker keeps its records)."""


@contextlib.asynccontextmanager
async def keeping_logs(
    storage: Storage, task_queue: str, *, level: str | None = None, retention: LogRetention | None = None
) -> AsyncIterator[None]:
    """While inside, the records of `level` and above (default `KEEL_LOGS`; `off`: none) logged for the worker on
    `task_queue`, and those of no worker, go to `storage` (which must stay open until the block has left)."""
    settings = load_settings() if level is None or retention is None else None
    level = level or (settings.logs if settings is not None else "off")
    if level == "off":
        yield
        return
    if level not in LEVELS:
        raise ValueError(f"Unknown log level {level!r}: use one of {', '.join(LEVELS)} or off")
    if retention is None:
        assert settings is not None
        retention = LogRetention(
            max_age=timedelta(hours=settings.log_retention_hours), max_records=settings.log_max_records
        )
    sink = LogSink(storage, task_queue, LEVELS[level], retention)
    HANDLER.add(sink)
    writer = asyncio.create_task(sink.run(), name=f"keel-logs-{task_queue}")
    try:
        yield
    finally:
        HANDLER.remove(sink)
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
        await sink.flush()  # what the worker logged last, the shutdown included


__all__ = [
    "ATTRIBUTES",
    "HANDLER",
    "LEVELS",
    "LogSink",
    "RunContextFilter",
    "StorageLogHandler",
    "keeping_logs",
    "level_of",
    "run_fields",
    "stored_log",
]
