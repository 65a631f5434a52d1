"""What tracing costs an agent step: the same bench runs on a worker with tracing off and on one exporting over
OTLP/HTTP, side by side in one run, as a ratio.

    .venv/bin/python -m bench.tracing_steps [--quick] [--out bench/tracing_results.json]

One tuned dev server (free ports, temp state dir); two Keel workers for the bench app (`bench/apps.py`), each
`python worker.py` in a process of its own on a task queue of its own: `off` (no `OTEL_*` variable) and `otlp`
(`OTEL_TRACES_EXPORTER=otlp` to an OTLP/HTTP receiver in this process that decodes and counts the spans, the SDK's
batch processor at its defaults). Runs on the two alternate (the order rotates each repetition); the `otlp` side's
runs are started by a client that traces too (its start is the trace's root, so the worker makes its workflow
spans), the `off` side's by one that does not. Reported per N: each side's median ms per step, and each worker's
CPU time per step over the whole block (read from /proc before and after it). See bench/README.md, "Tracing".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from temporalio.client import Client

from bench.harness import free_port
from bench.side_by_side import cpu_seconds, interleaved, timed_run, worker_process
from keel.client import KeelClient
from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.protocol import tracing

HERE = Path(__file__).resolve().parent


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class SpanSink(ThreadingHTTPServer):
    """An OTLP/HTTP traces receiver on loopback that decodes each request and counts its spans, by trace, and
    which run each trace is (its `StartWorkflow` span's workflow id)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SinkHandler)
        self.spans = 0
        self.requests = 0
        self.bytes = 0
        self.by_trace: Counter[bytes] = Counter()
        self.run_of_trace: dict[bytes, str] = {}
        self.lock = threading.Lock()

    def spans_of(self, run_id: str) -> int:
        return sum(self.by_trace[t] for t, run in self.run_of_trace.items() if run == run_id)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _SinkHandler(BaseHTTPRequestHandler):
    server: SpanSink

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        body = self.rfile.read(int(self.headers["content-length"]))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        spans = [span for r in request.resource_spans for s in r.scope_spans for span in s.spans]
        sink = self.server
        with sink.lock:
            sink.spans += len(spans)
            sink.requests += 1
            sink.bytes += len(body)
            for span in spans:
                sink.by_trace[span.trace_id] += 1
                if span.name.startswith("StartWorkflow:"):
                    run = [a.value.string_value for a in span.attributes if a.key == "temporalWorkflowID"]
                    sink.run_of_trace[span.trace_id] = run[0] if run else ""
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def span_sink() -> Iterator[SpanSink]:
    sink = SpanSink()
    thread = threading.Thread(target=sink.serve_forever, daemon=True)
    thread.start()
    try:
        yield sink
    finally:
        sink.shutdown()
        sink.server_close()
        thread.join()


@dataclass
class TracedStack:
    tmp: Path
    address: str
    plain: Client
    """A client of this process with tracing off (no `OTEL_*` variable: no interceptor)."""
    traced: Client
    """One with tracing on, to `sink`: its starts are the roots of the traced runs' traces."""
    sink: SpanSink
    otel: dict[str, str]
    """The `OTEL_*` variables a traced worker takes."""


@contextlib.asynccontextmanager
async def traced_stack(prefix: str) -> AsyncIterator[TracedStack]:
    """One tuned dev server (free ports, state in a temp dir), the OTLP/HTTP receiver and the two clients. Once the
    caller's workers have stopped (a traced one exporting what it buffered), this process's tracing is flushed and
    shut down on leaving; the sink keeps its counts. The server is stopped and the temp dir removed."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    cfg = DevServerConfig(host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp / "temporal")
    server = DevServer(cfg)
    try:
        await server.start(reuse=False)
        for var in [k for k in os.environ if k.startswith("OTEL_")]:
            del os.environ[var]
        plain = await connect(cfg.address)
        with span_sink() as sink:
            otel = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint}
            os.environ.update(otel)
            traced = await connect(cfg.address)
            yield TracedStack(tmp, cfg.address, plain, traced, sink, otel)
            tracing.flush()
            tracing.shutdown()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version()}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"machine": machine(), "server": "tuned", "steps": []}
    traced_runs: dict[int, list[str]] = {}
    async with traced_stack("keel-bench-tracing-") as ts, contextlib.AsyncExitStack() as stack:
        pids: list[int] = []
        off_queue = await stack.enter_async_context(worker_process(ts.address, ts.tmp / "off", pids=pids))
        on_queue = await stack.enter_async_context(worker_process(ts.address, ts.tmp / "on", ts.otel, pids=pids))
        workers = dict(zip(("off", "otlp"), pids, strict=True))
        sides = {
            "off": KeelClient(ts.plain, task_queue=off_queue),
            "otlp": KeelClient(ts.traced, task_queue=on_queue),
        }
        log("warm-up")
        for _ in range(3):
            for keel in sides.values():
                await timed_run(keel, 2)
        for n in args.steps:
            runs = {who: partial(timed_run, keel, n) for who, keel in sides.items()}
            reps = args.reps if n >= 50 else args.reps_small
            cpu0 = {who: cpu_seconds(pid) for who, pid in workers.items()}
            secs, ids = await interleaved(runs, reps)
            # Each worker's CPU over the whole block (its export thread works while the other side runs)
            cpu = {who: (cpu_seconds(pid) - cpu0[who]) * 1000 / (reps * n) for who, pid in workers.items()}
            traced_runs[n] = ids["otlp"]
            off_ms, on_ms = (statistics.median(secs[who]) * 1000 / n for who in ("off", "otlp"))
            out["steps"].append(
                {
                    "n": n,
                    "off_ms_per_step": off_ms,
                    "otlp_ms_per_step": on_ms,
                    "otlp_over_off": on_ms / off_ms,
                    "off_worker_cpu_ms_per_step": cpu["off"],
                    "otlp_worker_cpu_ms_per_step": cpu["otlp"],
                    "cpu_otlp_over_off": cpu["otlp"] / cpu["off"],
                    "off_run_seconds": secs["off"],
                    "otlp_run_seconds": secs["otlp"],
                }
            )
            log(
                f"N={n}: off {off_ms:.1f} ms/step, otlp {on_ms:.1f} ms/step ({on_ms / off_ms:.3f}); worker "
                f"CPU off {cpu['off']:.2f}, otlp {cpu['otlp']:.2f} ms/step ({cpu['otlp'] / cpu['off']:.3f})"
            )
    # The workers have stopped, the traced one after exporting what it buffered: count each run's spans.
    sink = ts.sink
    for row in out["steps"]:
        row["spans_per_run"] = statistics.median(sink.spans_of(r) for r in traced_runs[row["n"]])
    out["sink"] = {"requests": sink.requests, "spans": sink.spans, "bytes": sink.bytes}
    rows = out["steps"]
    if len(rows) >= 2:
        lo, hi = rows[0], rows[-1]
        out["marginal_spans_per_step"] = (hi["spans_per_run"] - lo["spans_per_run"]) / (hi["n"] - lo["n"])
    return out


def table(out: dict[str, Any]) -> str:
    lines = [
        "|  N | off ms/step | OTLP ms/step | OTLP/off | worker CPU off / OTLP ms/step | CPU OTLP/off | spans/run |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in out["steps"]:
        lines.append(
            f"| {row['n']:>2} | {row['off_ms_per_step']:.1f} | {row['otlp_ms_per_step']:.1f} | "
            f"{row['otlp_over_off']:.2f} | {row['off_worker_cpu_ms_per_step']:.2f} / "
            f"{row['otlp_worker_cpu_ms_per_step']:.2f} | {row['cpu_otlp_over_off']:.2f} | {row['spans_per_run']:g} |"
        )
    if "marginal_spans_per_step" in out:
        lines.append(f"\nMarginal spans per step: {out['marginal_spans_per_step']:.1f}")
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="N=1,10 with 3 repetitions")
    parser.add_argument("--out", type=Path, default=HERE / "tracing_results.json")
    args = parser.parse_args()
    args.steps = [1, 10] if args.quick else [1, 10, 50]
    args.reps_small = 3 if args.quick else 7
    args.reps = 5
    started = time.perf_counter()
    out = asyncio.run(main(args))
    out["wall_seconds"] = time.perf_counter() - started
    args.out.write_text(json.dumps(out, indent=2))
    print(table(out))
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300: a Temporal client process can crash at interpreter exit


if __name__ == "__main__":
    cli()
