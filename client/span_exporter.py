"""The storage exporter: `OTEL_TRACES_EXPORTER=keel` (or `otlp,keel`, ...) keeps every span in Keel's storage, where
Mastra's observability routes (`/api/observability/traces...`) and `keel trace RUN` read them.

Where the spans go: the storage `KEEL_STORAGE_URL` names, the one the worker, `keel serve` and `keel trace` use by
default, through a connection of the exporter's own. Not the worker's `Storage` object: that one lives on the
worker's event loop and is closed with it, while the SDK exports from its own thread, synchronously, and last when
the process shuts its tracer provider down, after the loop has ended. So every process that traces (the worker,
and a `keel run` or `keel serve` that starts a run) writes its own spans, and a run's trace comes together in one
place. A process that set its own tracer provider adds `redacting(StorageSpanExporter(url))` to it itself.

What is kept is bounded: spans that started more than `KEEL_TRACE_RETENTION_HOURS` (72) ago and the oldest beyond
`KEEL_TRACE_MAX_SPANS` (100000) are deleted as new ones are written (`keel.storage.spans`). The exporter never
migrates the schema (a worker or `keel migrate` does): a storage without the `spans` table, or none at all, loses
the batch with one warning. Like every exporter `configure()` sets up, it is wrapped in the redaction of secrets.

This module imports OpenTelemetry's SDK: it is loaded only when an exporter named `keel` is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from opentelemetry import context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from keel.protocol import names
from keel.protocol.settings import load_settings
from keel.storage.spans import AGENT_ENTITY, SpanRetention, SpanStatus, StoredSpan

if TYPE_CHECKING:
    from keel.storage import Storage

log = logging.getLogger("keel.tracing")

EXPORT_TIMEOUT_SECONDS = 30.0
"""How long one export may wait for the storage before the batch is given up."""

_MODEL_OPERATIONS = {"chat", "text_completion", "generate_content"}
_WORKFLOW_STARTS = {"StartWorkflow", "SignalWithStartWorkflow", "StartUpdateWithStartWorkflow", "RunWorkflow",
                    "StartChildWorkflow"}  # fmt: skip
_ACTIVITIES = {"StartActivity", "RunActivity"}
_EVENTS = {"SignalWorkflow", "SignalChildWorkflow", "SignalExternalWorkflow", "HandleSignal", "StartWorkflowUpdate",
           "ValidateUpdate", "HandleUpdate"}  # fmt: skip
"""Temporal's interceptor names its spans `<what>:<workflow, activity, signal or update>`."""


def span_type(name: str, attributes: Mapping[str, Any]) -> str:
    """Mastra's span type for a span: model and tool calls from their GenAI operation, Temporal's spans from the
    name the interceptor gave them (an `AgentRun` workflow is an agent run, another a workflow run, an activity a
    workflow step, a signal or an update, approvals among them, an event the workflow waits for)."""
    operation = attributes.get("gen_ai.operation.name")
    if operation in _MODEL_OPERATIONS:
        return "model_generation"
    if operation == "execute_tool":
        return "tool_call"
    if operation == "invoke_agent":
        return "agent_run"
    if "keel.workspace.id" in attributes:
        return "workspace_action"
    if "keel.approval.decision" in attributes:  # the wait for an approval (`keel.workflows.run_telemetry`)
        return "workflow_wait_event"
    what, _, target = name.partition(":")
    if target and what in _WORKFLOW_STARTS:
        return "agent_run" if target == names.AGENT_RUN else "workflow_run"
    if target and what in _ACTIVITIES:
        return "workflow_step"
    if target and what in _EVENTS:
        return "workflow_wait_event"
    return "generic"


def _hex(value: int, digits: int) -> str:
    return format(value, f"0{digits}x")


def _time(nanoseconds: int) -> datetime:
    seconds, rest = divmod(nanoseconds, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=rest // 1000)


def _plain(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in (attributes or {}).items()}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def stored_span(span: ReadableSpan) -> StoredSpan:
    """A finished OpenTelemetry span as the store keeps it."""
    attributes = _plain(span.attributes)
    kind = span_type(span.name, attributes)
    entity: tuple[str | None, str | None, str | None] = (None, None, None)
    if kind == "model_generation" and (agent := _text(attributes.get("gen_ai.agent.id"))):
        entity = (AGENT_ENTITY, agent, _text(attributes.get("gen_ai.agent.name")) or agent)
    elif kind == "tool_call" and (tool := _text(attributes.get("gen_ai.tool.name"))):
        entity = ("tool", tool, tool)
    code = span.status.status_code
    status: SpanStatus = "error" if code == StatusCode.ERROR else "ok" if code == StatusCode.OK else "unset"
    resource = _plain(span.resource.attributes)
    started = span.start_time or 0
    assert span.context is not None
    return StoredSpan(
        trace_id=_hex(span.context.trace_id, 32),
        span_id=_hex(span.context.span_id, 16),
        parent_span_id=_hex(span.parent.span_id, 16) if span.parent is not None else None,
        name=span.name,
        kind=span.kind.name.lower(),
        span_type=kind,
        status=status,
        status_message=span.status.description,
        started_at=_time(started),
        ended_at=_time(span.end_time or started),
        attributes=attributes,
        events=[
            {"name": e.name, "timestamp": _time(e.timestamp).isoformat(), "attributes": _plain(e.attributes)}
            for e in span.events
        ],
        links=[
            {
                "traceId": _hex(link.context.trace_id, 32),
                "spanId": _hex(link.context.span_id, 16),
                "attributes": _plain(link.attributes),
            }
            for link in span.links
        ],
        resource=resource,
        scope=span.instrumentation_scope.name if span.instrumentation_scope is not None else None,
        service_name=_text(resource.get("service.name")),
        run_id=_text(attributes.get("keel.run.id")) or _text(attributes.get("temporalWorkflowID")),
        entity_type=entity[0],
        entity_id=entity[1],
        entity_name=entity[2],
        thread_id=_text(attributes.get("gen_ai.conversation.id")),
    )


class StorageSpanExporter(SpanExporter):
    """Spans written to Keel's storage, pruned by age and count as they are written.

    Args:
        storage_url: where (default `KEEL_STORAGE_URL`); opened on the first export, on a thread and event loop of
            the exporter's own, so `export` may be called from any thread (the SDK's batch thread, a flush).
        retention: what is kept (default `KEEL_TRACE_RETENTION_HOURS` and `KEEL_TRACE_MAX_SPANS`).
    """

    def __init__(self, storage_url: str | None = None, *, retention: SpanRetention | None = None) -> None:
        if storage_url is None or retention is None:
            settings = load_settings()
            storage_url = storage_url or settings.storage_url
            retention = retention or SpanRetention(
                max_age=timedelta(hours=settings.trace_retention_hours), max_spans=settings.trace_max_spans
            )
        self.storage_url = storage_url
        self.retention = retention
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._store: Storage | None = None
        self._closed = False
        self._last_problem: str | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="keel-span-exporter", daemon=True)
                self._thread.start()
            return self._loop

    async def _save(self, spans: list[StoredSpan]) -> None:
        # The store's own calls (asyncpg's, an instrumented driver's) must not make spans of their own: each
        # would be exported here again.
        token = context.attach(context.set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            if self._store is None:
                from keel.storage import open_storage

                self._store = open_storage(self.storage_url)
            await self._store.save_spans(spans, retention=self.retention)
        finally:
            context.detach(token)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        stored = [stored_span(s) for s in spans]
        try:
            asyncio.run_coroutine_threadsafe(self._save(stored), self._running_loop()).result(EXPORT_TIMEOUT_SECONDS)
        except Exception as err:
            problem = f"{type(err).__name__}: {err}"
            if problem != self._last_problem:  # once per problem, not once per batch
                log.warning("%d spans not kept in %s: %s", len(stored), self.storage_url, problem)
                self._last_problem = problem
            return SpanExportResult.FAILURE
        self._last_problem = None
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # nothing is buffered here: `export` has written when it returns

    def shutdown(self) -> None:
        with self._lock:
            self._closed, loop, thread, store = True, self._loop, self._thread, self._store
        if loop is None:
            return
        if store is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(store.close(), loop).result(EXPORT_TIMEOUT_SECONDS)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(EXPORT_TIMEOUT_SECONDS)
        if not loop.is_running():
            loop.close()


__all__ = ["StorageSpanExporter", "span_type", "stored_span"]
