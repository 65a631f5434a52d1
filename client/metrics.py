"""A worker's metrics on one Prometheus endpoint (`KEEL_METRICS_PORT`, `http://KEEL_METRICS_HOST:PORT/metrics`): the
Temporal SDK's runtime metrics (`temporal_workflow_task_*`, `temporal_activity_*`, pollers, slots, the sticky
cache, ...) and Keel's own (`keel.protocol.metrics`: runs per agent, step latency, tokens, tool errors, approvals
waiting).

`configure()` makes the process's default Temporal runtime one that serves Prometheus there; it must run before the
process's first client connects (a client keeps the runtime it connected with): the worker (`keel worker`,
`worker.py`) and `keel dev` call it first thing. Keel's instruments are made through the OpenTelemetry metrics API
on a meter provider that records on that runtime's meter (`keel.client.metric_bridge`); it is set as the process's
OpenTelemetry meter provider, so an app's own instruments (`metrics.get_meter(...)`) land there too. A process that
set its own OpenTelemetry SDK meter provider keeps it: Keel's instruments go to it, and the endpoint has
Temporal's metrics alone.

Unset, nothing happens: no endpoint, no runtime of Keel's, and neither OpenTelemetry's metrics nor the bridge are
imported; Keel's recording calls return at once.
"""

from __future__ import annotations

import threading

from keel.protocol import metrics
from keel.protocol.settings import Settings, load_settings

_lock = threading.Lock()
_endpoint: str | None = None


def configure(settings: Settings | None = None) -> str | None:
    """With `KEEL_METRICS_PORT` set: serve the metrics there (once per process) and return the endpoint's URL;
    else None. Raises `RuntimeError` when the address cannot be bound."""
    global _endpoint
    settings = settings or load_settings()
    if settings.metrics_port is None:
        return None
    with _lock:
        if _endpoint is not None:
            return _endpoint
        from opentelemetry import metrics as otel
        from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

        from keel.client.metric_bridge import TemporalMeterProvider

        host = f"[{settings.metrics_host}]" if ":" in settings.metrics_host else settings.metrics_host
        address = f"{host}:{settings.metrics_port}"
        runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=address)))
        Runtime.set_default(runtime, error_if_already_set=False)
        provider = TemporalMeterProvider(runtime.metric_meter)
        current = otel.get_meter_provider()
        if type(current).__module__.startswith("opentelemetry.sdk."):  # the process's own pipeline: Keel joins it
            metrics.install(current.get_meter("keel"))
        else:
            otel.set_meter_provider(provider)
            metrics.install(provider.get_meter("keel"))
        local = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(host, host)
        _endpoint = f"http://{local}:{settings.metrics_port}/metrics"
        return _endpoint


__all__ = ["configure"]
