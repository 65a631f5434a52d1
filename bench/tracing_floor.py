"""What tracing costs a step on the named stack alone, with no Keel code, side by side with what it costs Keel's.

    .venv/bin/python -m bench.tracing_floor [--quick] [--out bench/tracing_floor_results.json]
    .venv/bin/python -m bench.tracing_floor --spans     # the SDK alone, no Temporal: CPU per span

Issue 23 asks for four spans per agent step (Temporal's `StartActivity` and `RunActivity`, the tool's
`execute_tool`, the model call's `chat`), made by `opentelemetry-sdk` and Temporal's `TracingInterceptor` and
exported over OTLP, and for OTLP on to cost a step at most 1.05 times tracing off. This bench asks what those four spans
cost when nothing but the SDK makes them.

One tuned dev server. Four workers, each in a process of its own on a task queue of its own, all started by
clients in this process:
- `keel-off`, `keel-otlp`: Keel's worker for the bench app (`bench/apps.py`), as in `bench/tracing_steps.py`;
- `floor-off`, `floor-otlp`: this module's worker (`--worker`), plain `temporalio` and `opentelemetry-sdk`. Its
  workflow runs Keel's step shape: one local activity per step, N+1 of them (the last step answers without a
  tool). Traced, the worker has Temporal's `TracingInterceptor` and the SDK's `TracerProvider`,
  `BatchSpanProcessor` at its defaults and `OTLPSpanExporter` (HTTP) to the receiver of `bench.tracing_steps`. Each
  local activity opens a `chat` span, and each but the last an `execute_tool` span, with the GenAI attributes
  Keel's carry. It does no other work.

The four sides' runs alternate (the order rotates each repetition). Reported per N, as in `bench.tracing_steps`:
each worker's CPU per step over the block (read from /proc before and after it: the export threads work while the
other sides run), and the median wall time per step. **floor added** is the floor's traced worker's CPU per step
less its untraced one's: what the four spans cost with nothing else. **bound** is
`(keel-off CPU + floor added) / keel-off CPU`: the least OTLP/off a Keel step could show with those spans on this
stack; **wall bound** the same from the median wall times per step. See bench/README.md, "Tracing: the stack's own
floor".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from bench.side_by_side import REPO, cpu_seconds, interleaved, timed_run, worker_process
from bench.tracing_steps import machine, traced_stack
from keel.client import KeelClient

HERE = Path(__file__).resolve().parent
READY = "floor worker:"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@activity.defn(name="floor.step")
async def step(args: tuple[int, bool]) -> int:
    """One step: a model call's span, and a tool call's unless it is the last step (no other work)."""
    index, last = args
    from opentelemetry import trace

    tracer = trace.get_tracer("keel.floor")
    with tracer.start_as_current_span("chat fake-model", kind=trace.SpanKind.CLIENT) as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.provider.name", "fake")
        span.set_attribute("gen_ai.request.model", "fake-model")
        span.set_attribute("gen_ai.response.finish_reasons", ["stop" if last else "tool_calls"])
        span.set_attribute("gen_ai.usage.input_tokens", 100 + index)
        span.set_attribute("gen_ai.usage.output_tokens", 20)
    if not last:
        with tracer.start_as_current_span("execute_tool nap", kind=trace.SpanKind.INTERNAL) as span:
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", "nap")
            span.set_attribute("gen_ai.tool.call.id", f"call-{index}")
    return index


@workflow.defn(name="TracingFloorSteps", sandboxed=False)
class TracingFloorSteps:
    @workflow.run
    async def run(self, steps: int) -> int:
        for index in range(steps + 1):
            await workflow.execute_local_activity(
                step, (index, index == steps), start_to_close_timeout=timedelta(seconds=30)
            )
        return steps


async def serve(address: str, queue: str, otlp: str | None) -> None:
    """This module's worker: untraced, or traced with nothing but the SDK and Temporal's interceptor."""
    interceptors: list[Any] = []
    provider = None
    if otlp:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from temporalio.contrib.opentelemetry import TracingInterceptor

        provider = TracerProvider(resource=Resource.create({"service.name": "tracing-floor"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp}/v1/traces")))
        trace.set_tracer_provider(provider)
        interceptors.append(TracingInterceptor())
    client = await Client.connect(address, interceptors=interceptors)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal

    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with Worker(client, task_queue=queue, workflows=[TracingFloorSteps], activities=[step]):
        print(f"{READY} {queue}", flush=True)
        await stop.wait()
    if provider is not None:
        provider.shutdown()  # exports what the batch processor still holds


@contextlib.asynccontextmanager
async def floor_worker(address: str, otlp: str | None, pids: list[int]) -> AsyncIterator[str]:
    queue = f"bench-floor-{uuid.uuid4()}"
    argv = [sys.executable, "-m", "bench.tracing_floor", "--worker", "--address", address, "--queue", queue]
    if otlp:
        argv += ["--otlp", otlp]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if READY.encode() not in line:
            raise RuntimeError(f"floor worker did not start: {line.decode()}{(await proc.stdout.read()).decode()}")
        pids.append(proc.pid)
        yield queue
    finally:
        proc.terminate()
        await proc.wait()


async def floor_run(client: Client, queue: str, steps: int) -> tuple[float, str]:
    run_id = f"tracing-floor-{uuid.uuid4()}"
    t0 = time.perf_counter()
    await client.execute_workflow(TracingFloorSteps.run, steps, id=run_id, task_queue=queue)
    return time.perf_counter() - t0, run_id


SIDES = ("keel-off", "keel-otlp", "floor-off", "floor-otlp")


def span_costs(spans: int = 10_000) -> dict[str, float]:
    """The SDK alone, no Temporal (`--spans`): CPU µs per span to make and end one with seven attributes, with no
    processor, and with a `BatchSpanProcessor` and `OTLPSpanExporter` at their defaults sending to the receiver
    in a process of its own (so its decoding is not counted here). Paced (a pause each 200 spans) so the batch
    processor keeps up and drops none."""
    import resource
    import subprocess

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    receiver = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom bench.tracing_steps import span_sink\nwith span_sink() as s:\n"
         "    print(s.endpoint, flush=True)\n    time.sleep(3600)"],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert receiver.stdout is not None
        endpoint = receiver.stdout.readline().strip()
        out: dict[str, float] = {}
        for mode in ("make", "make+export", "make", "make+export"):
            provider = TracerProvider(resource=Resource.create({"service.name": "tracing-floor"}))
            if mode == "make+export":
                provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
            tracer = provider.get_tracer("keel.floor")
            t0 = cpu()
            for i in range(spans):
                attributes = {"temporalWorkflowID": "run-a", "temporalRunID": "r-1", "temporalActivityID": str(i)}
                with tracer.start_as_current_span("RunActivity:step", attributes=attributes) as span:
                    span.set_attribute("gen_ai.operation.name", "chat")
                    span.set_attribute("gen_ai.request.model", "fake-model")
                    span.set_attribute("gen_ai.usage.input_tokens", 100)
                    span.set_attribute("gen_ai.usage.output_tokens", 20)
                if i % 200 == 199:
                    time.sleep(0.02)
            provider.shutdown()  # exports what is left
            us = (cpu() - t0) * 1e6 / spans
            out[mode] = min(out.get(mode, us), us)  # the better of two rounds
            log(f"{mode}: {us:.1f} µs CPU per span")
        return out
    finally:
        receiver.kill()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"machine": machine(), "server": "tuned", "steps": []}
    async with traced_stack("keel-bench-tracing-floor-") as ts, contextlib.AsyncExitStack() as stack:
        pids: list[int] = []
        keel_off = await stack.enter_async_context(worker_process(ts.address, ts.tmp / "off", pids=pids))
        keel_on = await stack.enter_async_context(worker_process(ts.address, ts.tmp / "on", ts.otel, pids=pids))
        floor_off = await stack.enter_async_context(floor_worker(ts.address, None, pids))
        floor_on = await stack.enter_async_context(floor_worker(ts.address, ts.sink.endpoint, pids))
        workers = dict(zip(SIDES, pids, strict=True))
        runners = {
            "keel-off": partial(timed_run, KeelClient(ts.plain, task_queue=keel_off)),
            "keel-otlp": partial(timed_run, KeelClient(ts.traced, task_queue=keel_on)),
            "floor-off": partial(floor_run, ts.plain, floor_off),
            "floor-otlp": partial(floor_run, ts.traced, floor_on),
        }
        log("warm-up")
        for _ in range(3):
            for run in runners.values():
                await run(2)
        for n in args.steps:
            reps = args.reps if n >= 50 else args.reps_small
            cpu0 = {who: cpu_seconds(pid) for who, pid in workers.items()}
            secs, _ = await interleaved({who: partial(run, n) for who, run in runners.items()}, reps)
            cpu = {who: (cpu_seconds(pid) - cpu0[who]) * 1000 / (reps * n) for who, pid in workers.items()}
            wall = {who: statistics.median(secs[who]) * 1000 / n for who in SIDES}
            added = cpu["floor-otlp"] - cpu["floor-off"]
            wall_added = wall["floor-otlp"] - wall["floor-off"]
            row = {
                "n": n,
                "reps": reps,
                "cpu_ms_per_step": cpu,
                "wall_ms_per_step": wall,
                "keel_cpu_otlp_over_off": cpu["keel-otlp"] / cpu["keel-off"],
                "keel_wall_otlp_over_off": wall["keel-otlp"] / wall["keel-off"],
                "keel_added_cpu_ms_per_step": cpu["keel-otlp"] - cpu["keel-off"],
                "floor_added_cpu_ms_per_step": added,
                "bound": (cpu["keel-off"] + added) / cpu["keel-off"],
                "floor_added_wall_ms_per_step": wall_added,
                "wall_bound": (wall["keel-off"] + wall_added) / wall["keel-off"],
            }
            out["steps"].append(row)
            log(
                f"N={n}: CPU ms/step "
                + ", ".join(f"{who} {cpu[who]:.2f}" for who in SIDES)
                + f"; Keel OTLP/off {row['keel_cpu_otlp_over_off']:.3f}, floor added {added:.2f} ms,"
                f" bound {row['bound']:.3f} (wall: Keel {row['keel_wall_otlp_over_off']:.3f},"
                f" bound {row['wall_bound']:.3f})"
            )
    # The workers have stopped and exported what they buffered
    sink = ts.sink
    out["sink"] = {"requests": sink.requests, "spans": sink.spans, "bytes": sink.bytes}
    # The floor's traced worker did export its spans (its runs' traces, by their StartWorkflow span)
    floor_runs = [r for r in sink.run_of_trace.values() if r.startswith("tracing-floor-")]
    out["floor_spans_per_run"] = statistics.median(sink.spans_of(r) for r in floor_runs) if floor_runs else 0
    log(f"floor runs traced: {len(floor_runs)}, spans per run (median): {out['floor_spans_per_run']}")
    return out


def table(out: dict[str, Any]) -> str:
    lines = [
        "|  N | worker CPU ms/step: Keel off / OTLP | floor off / OTLP | Keel added | floor added "
        "| Keel OTLP/off (CPU / wall) | bound (CPU / wall) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in out["steps"]:
        cpu = row["cpu_ms_per_step"]
        lines.append(
            f"| {row['n']:>2} | {cpu['keel-off']:.2f} / {cpu['keel-otlp']:.2f} | {cpu['floor-off']:.2f} / "
            f"{cpu['floor-otlp']:.2f} | {row['keel_added_cpu_ms_per_step']:.2f} | "
            f"{row['floor_added_cpu_ms_per_step']:.2f} | {row['keel_cpu_otlp_over_off']:.2f} / "
            f"{row['keel_wall_otlp_over_off']:.2f} | {row['bound']:.2f} / {row['wall_bound']:.2f} |"
        )
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="N=10,50 with 3 repetitions")
    parser.add_argument("--out", type=Path, default=HERE / "tracing_floor_results.json")
    parser.add_argument("--spans", action="store_true", help="the SDK alone: CPU per span made, and exported")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--queue", help=argparse.SUPPRESS)
    parser.add_argument("--otlp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(serve(args.address, args.queue, args.otlp))
        os._exit(0)  # sdk-python#300
    if args.spans:
        print(json.dumps(span_costs(), indent=2))
        return
    args.steps = [10, 50] if args.quick else [10, 50, 50]
    args.reps_small = 3 if args.quick else 7
    args.reps = 3 if args.quick else 5
    started = time.perf_counter()
    out = asyncio.run(main(args))
    out["wall_seconds"] = time.perf_counter() - started
    args.out.write_text(json.dumps(out, indent=2))
    print(table(out))
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300: a Temporal client process can crash at interpreter exit


if __name__ == "__main__":
    cli()
