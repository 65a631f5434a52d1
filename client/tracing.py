"""Temporal's `TracingInterceptor` for Keel's clients and workers, and the run's trace for the calls that reach
a run later (an approval).

With tracing on (`keel.protocol.tracing.enabled()`), the interceptor puts the caller's trace context into the
headers of what a client starts, signals and updates, and a worker makes spans from them: the workflow's run,
its activities and local activities, child workflows, signals and updates, so a run's spans share one trace across
processes. Its workflow part makes each span once, when a workflow task first runs, never on replay, and it
changes no command, so histories replay the same with tracing on or off. Keel's subclass
(`keel.client.tracing_interceptor`) adds each activity's attempt to its span and makes the spans workflow code
hands it (the wait for an approval). With tracing off nothing is installed.

An approval arrives long after the run started, from another process. `run_trace` makes the run's own trace
current for it (read from the headers of the run's first history event), so the decision's client span is in
that trace too, unless the caller is inside a trace of its own (an HTTP request's, say).

`OTEL_TRACES_EXPORTER=keel` names the storage exporter (`keel.client.span_exporter`), registered here: the spans
go to Keel's storage, for Mastra's observability routes and `keel trace`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from keel.protocol import tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from temporalio.client import Client
    from temporalio.contrib.opentelemetry import TracingInterceptor


def storage_exporter() -> SpanExporter:
    """The exporter `OTEL_TRACES_EXPORTER=keel` names: spans kept in `KEEL_STORAGE_URL`'s storage."""
    from keel.client.span_exporter import StorageSpanExporter

    return StorageSpanExporter()


tracing.register_exporter("keel", storage_exporter)


def interceptor() -> TracingInterceptor | None:
    """A new `TracingInterceptor` (Keel's: `keel.client.tracing_interceptor`) when tracing is on (the process's
    tracer provider configured first), else None. `TracingInterceptor` is imported only then."""
    if not tracing.enabled():
        return None
    tracing.configure()
    from keel.client.tracing_interceptor import KeelTracingInterceptor

    return KeelTracingInterceptor()


def find_interceptor(interceptors: Sequence[Any]) -> TracingInterceptor | None:
    """The `TracingInterceptor` among `interceptors`, if one is (without importing it when none could be)."""
    for candidate in interceptors:
        if any(c.__name__ == "TracingInterceptor" for c in type(candidate).__mro__):  # a subclass counts too
            from temporalio.contrib.opentelemetry import TracingInterceptor

            if isinstance(candidate, TracingInterceptor):
                return candidate
    return None


def with_interceptor(interceptors: Sequence[Any]) -> list[Any]:
    """`interceptors` and, when tracing is on and none of them is one, a `TracingInterceptor`."""
    found = list(interceptors)
    if find_interceptor(found) is None and (added := interceptor()) is not None:
        found.append(added)
    return found


@contextlib.asynccontextmanager
async def run_trace(client: Client, run_id: str) -> AsyncIterator[None]:
    """Inside the block, the trace of run `run_id` is current (when the client traces and no span is current),
    so what the block sends the run is traced in the run's trace. Costs one history read, only with tracing on.
    """
    found = find_interceptor(client.config(active_config=True)["interceptors"]) if tracing.enabled() else None
    if found is None:
        yield
        return
    from opentelemetry import context, trace

    if trace.get_current_span().get_span_context().is_valid:
        yield
        return
    carrier: dict[str, Any] | None = None
    with contextlib.suppress(Exception):  # no such run, no access: the call itself reports it
        async for event in client.get_workflow_handle(run_id).fetch_history_events(page_size=1):
            header = event.workflow_execution_started_event_attributes.header.fields.get(found.header_key)
            if header is not None:
                carrier = found.payload_converter.from_payloads([header])[0]
            break
    if not carrier:
        yield
        return
    token = context.attach(found.text_map_propagator.extract(carrier))
    try:
        yield
    finally:
        context.detach(token)


__all__ = ["find_interceptor", "interceptor", "run_trace", "storage_exporter", "with_interceptor"]
