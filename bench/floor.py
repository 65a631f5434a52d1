"""The engine's floor: what a run costs the Temporal server and the SDK before Keel does anything, side by side
with Keel's generate on the same server.

    .venv/bin/python -m bench.floor                  # 1 and 20 in flight, eager start on and off (~3 min)
    .venv/bin/python -m bench.floor --quick          # fewer runs
    .venv/bin/python -m bench.floor --quick --bounds # also Keel with its storage calls answered from memory

One tuned dev server, one process holding the client and the workers (the shape of `keel dev`: eager start
can hand a run's first workflow task straight to the worker). What runs, each started the way Keel's client
starts a run (the same search attributes, memo and summary):

- (a) `FloorEmpty`: a workflow that returns its input.
- (b) `FloorGenerate`: the commands of Keel's `steps=1` generate with no work in them: two local activities
  that return at once (Keel: the first model step, then the tool and the second model step), then the
  `KeelStatus=completed` upsert.
- (b+patch) `FloorGeneratePatched`: (b) plus one `workflow.patched` marker, which is how a Keel run pins its
  shape (the SDK upserts `TemporalChangeVersion` with it: a visibility write).
- (c) Keel's generate: `KeelClient.start_run("floor", "go")` + `result()`: a model step that asks for one call
  of `noop`, the tool (which returns at once, like the floor's activities), a second model step that answers;
  SQLite storage. Everything a run of Keel's keeps is written: its messages, its event log, each step's answer.

With `--bounds`, also Keel's generate on a second worker whose steps' storage calls are answered from memory
(`bench/memory_storage.py`): what Keel's generate would cost if its durable record were free, an upper bound on
what any cheaper storage could give. `(b+patch)/(b)` is what pinning a run's shape costs by itself.

Each at 1 in flight (ms per run, median) and 20 in flight (runs/s over a batch), repetitions interleaved, with
eager start requested and not. The dev server's CPU per run comes from its process's CPU time over each batch.
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from bench.harness import fresh_stack
from bench.memory_storage import RunCallsInMemory
from keel.app import Agent, App, ToolContext, tool
from keel.client import KeelClient
from keel.client.devserver import DevServer
from keel.model_providers import ModelRequest, ModelResponse, ModelToolCall, ScriptedModel, tool_results_since_last_user
from keel.plugin import keel_workflows_runner
from keel.protocol import names
from keel.storage import Storage
from keel.worker import build_worker
from keel.workflows.search_attributes import KEEL_STATUS


class Nothing(BaseModel):
    pass


@tool("noop")
async def noop_tool(args: Nothing, ctx: ToolContext) -> str:
    """Do nothing."""
    return "ok"


def floor_script(request: ModelRequest) -> ModelResponse:
    if tool_results_since_last_user(request):
        return ModelResponse(text="done")
    return ModelResponse(tool_calls=[ModelToolCall(id="call_1", name="noop", args={})])


app = App.of(Agent(id="floor", model=ScriptedModel(floor_script, name="floor"), tools=(noop_tool,), max_steps=2))

FLOOR_QUEUE = "floor"
KEEL_QUEUE = "keel-floor"
IN_MEMORY = "keel, storage in memory"
"""`--bounds`: Keel's generate with its steps' storage calls answered from memory (`bench/memory_storage.py`)."""


@activity.defn(name="floor.noop")
async def noop(step: int) -> int:
    return step


@workflow.defn(name="FloorEmpty", sandboxed=False)
class FloorEmpty:
    @workflow.run
    async def run(self, n: int) -> int:
        return n


@workflow.defn(name="FloorGenerate", sandboxed=False)
class FloorGenerate:
    @workflow.run
    async def run(self, n: int) -> int:
        for step in (1, 2):
            await workflow.execute_local_activity(noop, step, start_to_close_timeout=timedelta(seconds=10))
        workflow.upsert_search_attributes([KEEL_STATUS.value_set("completed")])
        return n


@workflow.defn(name="FloorGeneratePatched", sandboxed=False)
class FloorGeneratePatched:
    @workflow.run
    async def run(self, n: int) -> int:
        workflow.patched("floor-shape")
        for step in (1, 2):
            await workflow.execute_local_activity(noop, step, start_to_close_timeout=timedelta(seconds=10))
        workflow.upsert_search_attributes([KEEL_STATUS.value_set("completed")])
        return n


FLOORS = {"a": FloorEmpty, "b": FloorGenerate, "b+patch": FloorGeneratePatched}


@dataclass
class Kind:
    name: str
    run: Callable[[bool], Awaitable[None]]
    """One run to its end; the argument: request eager start."""


def server_cpu_seconds(server: DevServer) -> float:
    """The dev server process's CPU time so far (user + system), from /proc."""
    assert server.proc is not None
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kinds(client: Client, keel: KeelClient, in_memory: KeelClient | None = None) -> list[Kind]:
    attributes = keel_attributes()

    def floor(workflow_cls: Any) -> Callable[[bool], Awaitable[None]]:
        async def run(eager: bool) -> None:
            handle = await client.start_workflow(
                workflow_cls.run,
                1,
                id=f"floor-{uuid.uuid4()}",
                task_queue=FLOOR_QUEUE,
                search_attributes=attributes,
                memo={names.ATTRIBUTES_AT_START_MEMO: True},
                static_summary="floor: go",
                request_eager_start=eager,
            )
            await handle.result()

        return run

    def generate(keel: KeelClient) -> Callable[[bool], Awaitable[None]]:
        async def run(eager: bool) -> None:
            keel.eager_start = eager
            result = await keel.result(await keel.start_run("floor", "go"))
            if result.text != "done":
                raise RuntimeError(f"unexpected answer {result.text!r}")

        return run

    extra = [] if in_memory is None else [Kind(IN_MEMORY, generate(in_memory))]
    return [*(Kind(k, floor(w)) for k, w in FLOORS.items()), Kind("keel", generate(keel)), *extra]


def keel_attributes() -> Any:
    from keel.client.keel_client import _initial_attributes
    from keel.workflows import AgentRunInput

    return _initial_attributes(AgentRunInput(agent_id="floor", messages="go"), "floor")


async def latency(kind: Kind, eager: bool, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await kind.run(eager)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


async def throughput(kind: Kind, eager: bool, runs: int, in_flight: int, server: DevServer) -> tuple[float, float]:
    """Runs/s with `in_flight` at a time, and the dev server's CPU ms per run over the batch."""
    gate = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with gate:
            await kind.run(eager)

    cpu0, t0 = server_cpu_seconds(server), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(runs)))
    elapsed, cpu = time.perf_counter() - t0, server_cpu_seconds(server) - cpu0
    return runs / elapsed, cpu / runs * 1000


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"latency_ms": {}, "per_s": {}, "server_cpu_ms": {}}
    async with fresh_stack("keel-bench-floor-") as stack:
        floor_worker = Worker(
            stack.client,
            task_queue=FLOOR_QUEUE,
            workflows=list(FLOORS.values()),
            activities=[noop],
            workflow_runner=keel_workflows_runner(),
        )
        in_memory = cast(Storage, RunCallsInMemory(stack.storage))
        async with (
            floor_worker,
            build_worker(stack.client, app, stack.storage, task_queue=KEEL_QUEUE),
            build_worker(stack.client, app, in_memory, task_queue=f"{KEEL_QUEUE}-memory")
            if args.bounds
            else contextlib.nullcontext(),
        ):
            keel = KeelClient(stack.client, task_queue=KEEL_QUEUE, app=app)
            bound = KeelClient(stack.client, task_queue=f"{KEEL_QUEUE}-memory", app=app) if args.bounds else None
            todo = kinds(stack.client, keel, bound)
            for kind in todo:  # warm-up
                for eager in (False, True):
                    for _ in range(5):
                        await kind.run(eager)
            for rep in range(args.reps):
                order = todo[rep % len(todo) :] + todo[: rep % len(todo)]
                for kind in order:
                    for eager in (rep % 2 == 0, rep % 2 == 1):
                        key = f"{kind.name}{' eager' if eager else ''}"
                        ms = await latency(kind, eager, args.latency_runs)
                        per_s, cpu = await throughput(kind, eager, args.runs, 20, stack.server)
                        results["latency_ms"].setdefault(key, []).append(ms)
                        results["per_s"].setdefault(key, []).append(per_s)
                        results["server_cpu_ms"].setdefault(key, []).append(cpu)
                        print(
                            f"rep {rep} {key}: {ms:.1f} ms, {per_s:.1f}/s, server {cpu:.1f} ms CPU/run", file=sys.stderr
                        )
    return results


def render(results: dict[str, Any]) -> str:
    med = {
        m: {k: statistics.median(v) for k, v in results[m].items()} for m in ("latency_ms", "per_s", "server_cpu_ms")
    }
    lines = [
        "| run | eager | ms per run (1 in flight) | runs/s (20 in flight) | server CPU ms/run |",
        "|---|---|---|---|---|",
    ]
    for key in med["latency_ms"]:
        name, eager = key.removesuffix(" eager"), key.endswith(" eager")
        lines.append(
            f"| {name} | {'yes' if eager else 'no'} | {med['latency_ms'][key]:.1f} | {med['per_s'][key]:.1f} |"
            f" {med['server_cpu_ms'][key]:.1f} |"
        )
    lines.append("")
    for eager in ("", " eager"):
        keel, floor = f"keel{eager}", f"b{eager}"
        lines.append(
            f"Keel/(b){eager or ' (no eager)'}: runs/s {med['per_s'][keel] / med['per_s'][floor]:.2f}, "
            f"latency {med['latency_ms'][floor] / med['latency_ms'][keel]:.2f} (floor ms / Keel ms)"
        )
    for name in ("b+patch", IN_MEMORY):
        if f"{name} eager" in med["per_s"]:
            lines.append(
                f"({name})/(b) eager: runs/s {med['per_s'][name + ' eager'] / med['per_s']['b eager']:.2f}, "
                f"latency {med['latency_ms']['b eager'] / med['latency_ms'][name + ' eager']:.2f}"
            )
    for name in ("keel", "b"):
        lines.append(
            f"eager start, {name}: runs/s x{med['per_s'][name + ' eager'] / med['per_s'][name]:.2f}, "
            f"ms per run x{med['latency_ms'][name + ' eager'] / med['latency_ms'][name]:.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument(
        "--bounds", action="store_true", help="also Keel's generate with its storage calls answered from memory"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/floor-results.json"))
    args = parser.parse_args(argv)
    args.reps = args.reps or (2 if args.quick else 4)
    args.runs = 60 if args.quick else 200
    args.latency_runs = 10 if args.quick else 30
    results = asyncio.run(measure(args))
    args.out.write_text(json.dumps(results, indent=2))
    print(render(results))


if __name__ == "__main__":
    main()
