"""`keel trace RUN`: a run's spans as a tree in the terminal, from the storage the storage exporter writes to
(`OTEL_TRACES_EXPORTER=keel` on the worker, and on the command or API that started the run for its root span).

    keel trace run-6b11...          # each trace holding spans of the run: durations, tokens, tools
    keel trace 4bf92f3577b34da6...  # one trace, by id
    keel trace RUN --json           # the same spans as Mastra's span records (`/api/observability/traces/:id`)

A run's spans share one trace (`keel.client.tracing`); a call made to the run inside a trace of its own (an
approval sent during an HTTP request's trace) is a trace of its own, printed after it.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator, Sequence
from datetime import timedelta

from keel.client.span_records import SpanNode, parsed, span_record, tokens, tree
from keel.storage.spans import StoredSpan

_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
SUMMARY_CHARS = 80


def duration(value: timedelta) -> str:
    ms = value.total_seconds() * 1000
    if ms < 1000:
        return f"{ms:.1f} ms"
    return f"{ms / 1000:.2f} s" if ms < 60_000 else f"{int(ms // 60_000)} min {ms % 60_000 / 1000:.0f} s"


def summary(value: object, limit: int = SUMMARY_CHARS) -> str:
    """`value` on one line (as JSON unless a string), cut to `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def details(span: StoredSpan) -> list[str]:
    """What a line shows beside the span's name and duration."""
    found: list[str] = []
    attributes = span.attributes
    attempt = attributes.get("temporalActivityAttempt")
    if isinstance(attempt, int) and attempt > 1:  # a step retried, or executed again after its worker was lost
        found.append(f"attempt {attempt}")
    if span.span_type == "model_generation":
        if (counted := tokens(span)) is not None:
            found.append(f"tokens {counted[0]} in / {counted[1]} out")
        reasons = attributes.get("gen_ai.response.finish_reasons")
        if isinstance(reasons, list) and reasons:
            found.append(f"finish {reasons[0]}")
    elif span.span_type == "tool_call":
        if call := attributes.get("gen_ai.tool.call.id"):
            found.append(f"call {call}")
        if attributes.get("keel.tool.suspended"):
            found.append("suspended")
        if span.status != "error" and "gen_ai.tool.call.result" in attributes:
            found.append(f"-> {summary(parsed(attributes['gen_ai.tool.call.result']))}")
    elif span.span_type == "workspace_action" and isinstance(attributes.get("file.path"), str):
        found.append(str(attributes["file.path"]))
    if span.status == "error":
        found.append(f"ERROR {summary(span.status_message or attributes.get('error.type') or 'error')}")
    return found


def _lines(node: SpanNode, start: StoredSpan, prefix: str, last: bool, top: bool) -> Iterator[str]:
    span = node.span
    branch = "" if top else ("`-- " if last else "|-- ")
    took = span.ended_at - span.started_at
    at = span.started_at - start.started_at
    shown = [f"{prefix}{branch}{span.name}", duration(took), f"@{duration(at)}", *details(span)]
    yield "  ".join(shown)
    below = prefix if top else prefix + ("    " if last else "|   ")
    for i, child in enumerate(node.children):
        yield from _lines(child, start, below, i == len(node.children) - 1, False)


def render(trace_id: str, spans: Sequence[StoredSpan]) -> str:
    """One trace: a header (run, agent, span count, extent, model calls and tokens, tools), then its tree."""
    first = min(spans, key=lambda s: s.started_at)
    extent = max(s.ended_at for s in spans) - first.started_at
    runs = sorted({s.run_id for s in spans if s.run_id})
    agents = sorted({s.entity_id for s in spans if s.entity_type == "agent" and s.entity_id})
    models = [counted for s in spans if s.span_type == "model_generation" and (counted := tokens(s)) is not None]
    tools = [s for s in spans if s.span_type == "tool_call"]
    header = [f"trace {trace_id}", f"{len(spans)} spans", duration(extent)]
    if runs:
        header.append(f"run {', '.join(runs)}")
    if agents:
        header.append(f"agent {', '.join(agents)}")
    if models:
        header.append(
            f"{len(models)} model calls, tokens {sum(m[0] for m in models)} in / {sum(m[1] for m in models)} out"
        )
    if tools:
        header.append(f"{len(tools)} tool calls")
    lines = ["  ".join(header)]
    for root in tree(spans):
        lines.extend(_lines(root, first, "", True, True))
    return "\n".join(lines)


async def cmd_trace(args: argparse.Namespace) -> int:
    from keel.client.cli import CliError, open_store

    if not args.run_id.strip():
        raise CliError("Give a run id or a trace id (32 hex digits)")
    store = await open_store()
    try:
        trace_ids = await store.run_traces(args.run_id)
        if not trace_ids and _TRACE_ID.match(args.run_id.lower()):
            trace_ids = [args.run_id.lower()]  # as OpenTelemetry writes it
        traces = [(t, spans) for t in trace_ids if (spans := await store.trace_spans(t))]
    finally:
        await store.close()
    if not traces:
        raise CliError(
            f"No spans of {args.run_id} in storage: run the worker (and the command or API that starts runs) with "
            "OTEL_TRACES_EXPORTER=keel (or otlp,keel); spans are kept KEEL_TRACE_RETENTION_HOURS (72)"
        )
    if args.json:
        shown = [{"traceId": t, "spans": [span_record(s) for s in spans]} for t, spans in traces]
        print(json.dumps(shown, indent=2))
    else:
        print("\n\n".join(render(t, spans) for t, spans in traces))
    return 0


__all__ = ["cmd_trace", "render"]
