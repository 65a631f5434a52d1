"""An OpenTelemetry `MeterProvider` whose instruments record on a Temporal runtime's metric meter: what is recorded
through the OpenTelemetry metrics API lands on the same Prometheus endpoint as the Temporal SDK's own metrics.

    provider = TemporalMeterProvider(runtime.metric_meter)
    provider.get_meter("keel").create_counter("keel_runs_started").add(1, {"agent": "demo"})

Counters, up-down counters, histograms and gauges are bridged; observable instruments (read by callbacks at
collection time, which Temporal's meter has no hook for) are no-ops. Temporal counts integers: a counter's
fractional amount is rounded, a negative one ignored (the API forbids it). An up-down counter is a gauge holding
the running total per attribute set. Attribute values other than text, numbers and booleans are sent as text.

Loaded only when metrics are on (`keel.client.metrics.configure`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.metrics import (
    CallbackT,
    Counter,
    Histogram,
    Meter,
    MeterProvider,
    NoOpObservableCounter,
    NoOpObservableGauge,
    NoOpObservableUpDownCounter,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.metrics._internal.instrument import Gauge
from opentelemetry.util.types import Attributes
from temporalio.common import MetricAttributes, MetricMeter

__all__ = ["TemporalMeterProvider", "prometheus_name"]

_NOT_IN_A_NAME = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(name: str) -> str:
    """`name` as Prometheus (and Temporal's meter) takes it: OpenTelemetry's dots (`http.server.request.duration`,
    what the HTTP instrumentations record) and any other character outside `[a-zA-Z0-9_]` as `_`, and a leading
    digit after one (Temporal refused such a name, logging an error at each recording, and dropped its values)."""
    cleaned = _NOT_IN_A_NAME.sub("_", name)
    return f"_{cleaned}" if cleaned[:1].isdigit() else cleaned


def _attributes(attributes: Attributes) -> MetricAttributes | None:
    if not attributes:
        return None
    return {prometheus_name(k): v if isinstance(v, str | int | float | bool) else str(v) for k, v in attributes.items()}


class _Counter(Counter):
    def __init__(self, meter: MetricMeter, name: str, unit: str, description: str) -> None:
        self._counter = meter.create_counter(name, description or None, unit or None)

    def add(self, amount: float, attributes: Attributes = None, context: Context | None = None) -> None:
        if amount >= 0:
            self._counter.add(round(amount), _attributes(attributes))


class _UpDownCounter(UpDownCounter):
    def __init__(self, meter: MetricMeter, name: str, unit: str, description: str) -> None:
        self._gauge = meter.create_gauge_float(name, description or None, unit or None)
        self._totals: dict[frozenset[tuple[str, Any]], float] = {}
        self._lock = threading.Lock()

    def add(self, amount: float, attributes: Attributes = None, context: Context | None = None) -> None:
        converted = _attributes(attributes)
        key = frozenset((converted or {}).items())
        with self._lock:  # the total and the gauge move together, whichever thread adds
            total = self._totals[key] = self._totals.get(key, 0.0) + amount
            self._gauge.set(total, converted)


class _Histogram(Histogram):
    def __init__(self, meter: MetricMeter, name: str, unit: str, description: str) -> None:
        self._histogram = meter.create_histogram_float(name, description or None, unit or None)

    def record(self, amount: float, attributes: Attributes = None, context: Context | None = None) -> None:
        self._histogram.record(float(amount), _attributes(attributes))


class _Gauge(Gauge):
    def __init__(self, meter: MetricMeter, name: str, unit: str, description: str) -> None:
        self._gauge = meter.create_gauge_float(name, description or None, unit or None)

    def set(self, amount: float, attributes: Attributes = None, context: Context | None = None) -> None:
        self._gauge.set(float(amount), _attributes(attributes))


class _Meter(Meter):
    """Each instrument made once per name (the API's rule: the same name is the same instrument)."""

    def __init__(self, meter: MetricMeter, name: str, version: str | None, schema_url: str | None) -> None:
        super().__init__(name, version, schema_url)
        self._meter = meter
        self._made: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _instrument(self, kind: Callable[[MetricMeter, str, str, str], Any], name: str, unit: str, desc: str) -> Any:
        with self._lock:
            found = self._made.get(name)
            if found is None:
                found = self._made[name] = kind(self._meter, prometheus_name(name), unit, desc)
            return found

    def create_counter(self, name: str, unit: str = "", description: str = "") -> Counter:
        made: Counter = self._instrument(_Counter, name, unit, description)
        return made

    def create_up_down_counter(self, name: str, unit: str = "", description: str = "") -> UpDownCounter:
        made: UpDownCounter = self._instrument(_UpDownCounter, name, unit, description)
        return made

    def create_histogram(
        self,
        name: str,
        unit: str = "",
        description: str = "",
        *,
        explicit_bucket_boundaries_advisory: Sequence[float] | None = None,
    ) -> Histogram:
        made: Histogram = self._instrument(_Histogram, name, unit, description)
        return made

    def create_gauge(self, name: str, unit: str = "", description: str = "") -> Gauge:
        made: Gauge = self._instrument(_Gauge, name, unit, description)
        return made

    def create_observable_counter(
        self, name: str, callbacks: Sequence[CallbackT] | None = None, unit: str = "", description: str = ""
    ) -> ObservableCounter:
        return NoOpObservableCounter(name, callbacks, unit, description)

    def create_observable_gauge(
        self, name: str, callbacks: Sequence[CallbackT] | None = None, unit: str = "", description: str = ""
    ) -> ObservableGauge:
        return NoOpObservableGauge(name, callbacks, unit, description)

    def create_observable_up_down_counter(
        self, name: str, callbacks: Sequence[CallbackT] | None = None, unit: str = "", description: str = ""
    ) -> ObservableUpDownCounter:
        return NoOpObservableUpDownCounter(name, callbacks, unit, description)


class TemporalMeterProvider(MeterProvider):
    """Meters whose instruments record on `meter` (a Temporal runtime's `metric_meter`)."""

    def __init__(self, meter: MetricMeter) -> None:
        self._meter = meter
        self._meters: dict[tuple[str, str | None, str | None], _Meter] = {}
        self._lock = threading.Lock()

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> Meter:
        with self._lock:
            key = (name, version, schema_url)
            found = self._meters.get(key)
            if found is None:
                found = self._meters[key] = _Meter(self._meter, name, version, schema_url)
            return found
