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
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

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


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-tracing-"))
    cfg = DevServerConfig(host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp / "temporal")
    server = DevServer(cfg)
    out: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "server": "tuned",
        "steps": [],
    }
    try:
        await server.start(reuse=False)
        for var in [k for k in os.environ if k.startswith("OTEL_")]:
            del os.environ[var]
        plain = await connect(cfg.address)  # tracing off: no interceptor
        with span_sink() as sink:
            os.environ.update(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=sink.endpoint)
            traced = await connect(cfg.address)  # tracing on in this process too: its starts are the roots
            otel = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint}
            async with contextlib.AsyncExitStack() as stack:
                pids: list[int] = []
                off_queue = await stack.enter_async_context(worker_process(cfg.address, tmp / "off", pids=pids))
                on_queue = await stack.enter_async_context(worker_process(cfg.address, tmp / "on", otel, pids=pids))
                workers = dict(zip(("off", "otlp"), pids, strict=True))
                sides = {
                    "off": KeelClient(plain, task_queue=off_queue),
                    "otlp": KeelClient(traced, task_queue=on_queue),
                }
                log("warm-up")
                for _ in range(3):
                    for keel in sides.values():
                        await timed_run(keel, 2)
                traced_runs: dict[int, list[str]] = {}
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
            tracing.flush()
            for row in out["steps"]:
                row["spans_per_run"] = statistics.median(sink.spans_of(r) for r in traced_runs[row["n"]])
            tracing.shutdown()
            out["sink"] = {"requests": sink.requests, "spans": sink.spans, "bytes": sink.bytes}
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
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
