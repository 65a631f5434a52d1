"""Keel's own metrics, made through the OpenTelemetry metrics API, and the calls that record them.

    keel_runs_started       counter         agent         an agent run began (counted once, never on replay)
    keel_runs_completed     counter         agent         ... ended with its answer
    keel_runs_failed        counter         agent         ... ended failed
    keel_runs_canceled      counter         agent         ... ended canceled
    keel_step_latency       histogram (ms)  agent, model  a model step: from its activity's start to its answer stored
    keel_model_tokens       counter         agent, model, type (input or output)
    keel_tool_calls         counter         agent, tool   a tool call finished (an error result included)
    keel_tool_errors        counter         agent, tool   ... whose result is an error (the tool's own, a timeout, ...)
    keel_approvals_waiting  up-down counter agent         tool calls waiting for a decision, in the runs a worker holds

Off until `install(meter)` is called (by `keel.client.metrics.configure()`, in a worker with `KEEL_METRICS_PORT` set):
then every call here returns at once and nothing imports OpenTelemetry. Runs are counted by the workflow
(`keel.workflows.run_telemetry`), which skips what it replays; `keel_approvals_waiting` is what each worker's cached
runs wait for, so the sum over the workers is the tool calls waiting (a run evicted from every cache, after a worker
restart, is counted again once it next runs).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, Meter, UpDownCounter

RunOutcome = Literal["completed", "failed", "canceled"]


@dataclass(frozen=True)
class _Instruments:
    runs_started: Counter
    runs_ended: dict[str, Counter]
    step_latency: Histogram
    model_tokens: Counter
    tool_calls: Counter
    tool_errors: Counter
    approvals_waiting: UpDownCounter


_instruments: _Instruments | None = None
_lock = threading.Lock()


def enabled() -> bool:
    """Whether Keel records its metrics in this process."""
    return _instruments is not None


def install(meter: Meter) -> None:
    """Record Keel's metrics on `meter` from now on (its instruments made once per process; a second call with
    another meter replaces them)."""
    global _instruments
    with _lock:
        _instruments = _Instruments(
            runs_started=meter.create_counter("keel_runs_started", "1", "Agent runs started"),
            runs_ended={
                outcome: meter.create_counter(f"keel_runs_{outcome}", "1", f"Agent runs {outcome}")
                for outcome in ("completed", "failed", "canceled")
            },
            step_latency=meter.create_histogram(
                "keel_step_latency", "ms", "A model step: from its activity's start to its answer stored"
            ),
            model_tokens=meter.create_counter("keel_model_tokens", "1", "Model tokens, input and output"),
            tool_calls=meter.create_counter("keel_tool_calls", "1", "Tool calls finished"),
            tool_errors=meter.create_counter("keel_tool_errors", "1", "Tool calls whose result is an error"),
            approvals_waiting=meter.create_up_down_counter(
                "keel_approvals_waiting", "1", "Tool calls waiting for a decision, in the runs this worker holds"
            ),
        )


def uninstall() -> None:
    """Stop recording (the instruments stay with their meter)."""
    global _instruments
    _instruments = None


def run_started(agent_id: str) -> None:
    if (found := _instruments) is not None:
        found.runs_started.add(1, {"agent": agent_id})


def run_ended(agent_id: str, outcome: RunOutcome) -> None:
    if (found := _instruments) is not None:
        found.runs_ended[outcome].add(1, {"agent": agent_id})


def model_step(agent_id: str, model: str, milliseconds: float, input_tokens: int, output_tokens: int) -> None:
    """A model step answered: its latency and the tokens its model call counted."""
    if (found := _instruments) is None:
        return
    found.step_latency.record(milliseconds, {"agent": agent_id, "model": model})
    for kind, count in (("input", input_tokens), ("output", output_tokens)):
        if count:
            found.model_tokens.add(count, {"agent": agent_id, "model": model, "type": kind})


def tool_call(agent_id: str, tool: str, *, is_error: bool) -> None:
    if (found := _instruments) is None:
        return
    attributes = {"agent": agent_id, "tool": tool}
    found.tool_calls.add(1, attributes)
    if is_error:
        found.tool_errors.add(1, attributes)


@contextlib.contextmanager
def approvals_waiting(agent_id: str, count: int) -> Iterator[None]:
    """Inside the block, `count` more tool calls of `agent_id` wait for a decision (left by any exit: decided,
    canceled, or the run evicted from the worker's cache)."""
    found = _instruments
    if found is None or count <= 0:
        yield
        return
    found.approvals_waiting.add(count, {"agent": agent_id})
    try:
        yield
    finally:
        found.approvals_waiting.add(-count, {"agent": agent_id})


__all__ = [
    "RunOutcome",
    "approvals_waiting",
    "enabled",
    "install",
    "model_step",
    "run_ended",
    "run_started",
    "tool_call",
    "uninstall",
]
