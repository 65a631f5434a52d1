"""Keel's `TracingInterceptor`: Temporal's (`temporalio.contrib.opentelemetry`), plus what a run's trace needs
that it does not make. Imported only with tracing on (`keel.client.tracing.interceptor()`).

- An activity's `RunActivity:...` span carries its attempt (`temporalActivityAttempt`): an attempt a killed
  worker lost and the next worker ran again shows as attempt 2, in the same trace.
- Workflow code hands it finished spans through an extern function (`keel.protocol.tracing.WorkflowSpan`, the
  wait for an approval): it makes them under the run's trace context, read from the workflow's headers. A span
  whose start this worker was told of runs from then to now, by its clock; one that started on another worker
  (the run was evicted, the worker restarted) runs between the workflow times given. Like Temporal's own workflow
  spans, they are made once, when a workflow task first runs, never on replay, and they change no command.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import opentelemetry.trace
import temporalio.activity
import temporalio.worker
from temporalio.contrib.opentelemetry import TracingInterceptor, TracingWorkflowInboundInterceptor

from keel.protocol import tracing

ATTEMPT_ATTRIBUTE = tracing.ATTEMPT_ATTRIBUTE
MAX_STARTED = 10_000
"""Workflow spans whose start this worker remembers: a wait that ends on another worker is forgotten here."""


class KeelTracingInterceptor(TracingInterceptor):
    def intercept_activity(
        self, next: temporalio.worker.ActivityInboundInterceptor
    ) -> temporalio.worker.ActivityInboundInterceptor:
        return super().intercept_activity(_MarkAttempt(next))

    def __init__(
        self, tracer: opentelemetry.trace.Tracer | None = None, *, always_create_workflow_spans: bool = False
    ) -> None:
        super().__init__(tracer, always_create_workflow_spans=always_create_workflow_spans)
        self._started: OrderedDict[str, int] = OrderedDict()  # workflow spans' keys -> when they started here

    def workflow_interceptor_class(
        self, input: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[TracingWorkflowInboundInterceptor]:
        input.unsafe_extern_functions[tracing.WORKFLOW_SPAN_START_EXTERN] = self._workflow_span_start
        input.unsafe_extern_functions[tracing.WORKFLOW_SPAN_EXTERN] = self._workflow_span
        return super().workflow_interceptor_class(input)

    def _workflow_span_start(self, key: str) -> None:
        self._started[key] = time.time_ns()
        self._started.move_to_end(key)
        while len(self._started) > MAX_STARTED:  # waits that never ended here (the run went to another worker)
            self._started.popitem(last=False)

    def _workflow_span(self, span: tracing.WorkflowSpan) -> None:
        """Make `span`, a child of the run's trace context (none, no span: a run started by a caller that did not
        trace, as Temporal's workflow spans do by default)."""
        started = self._started.pop(span.key, None)
        start, end = (started, time.time_ns()) if started is not None else (span.start_ns, span.end_ns)
        header = span.headers.get(self.header_key)
        carrier: dict[str, Any] | None = self.payload_converter.from_payloads([header])[0] if header else None
        if not carrier:
            return
        attributes: dict[str, Any] = dict(span.attributes)
        if tracing.capture_content():
            attributes.update(span.content)
        made = self.tracer.start_span(
            span.name,
            self.text_map_propagator.extract(carrier),
            kind=opentelemetry.trace.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=start,
        )
        made.end(end_time=max(start, end))


class _MarkAttempt(temporalio.worker.ActivityInboundInterceptor):
    """Inside Temporal's `RunActivity` span: puts the attempt on it."""

    async def execute_activity(self, input: temporalio.worker.ExecuteActivityInput) -> Any:
        span = opentelemetry.trace.get_current_span()
        if span.is_recording():
            span.set_attribute(ATTEMPT_ATTRIBUTE, temporalio.activity.info().attempt)
        return await super().execute_activity(input)


__all__ = ["ATTEMPT_ATTRIBUTE", "KeelTracingInterceptor"]
