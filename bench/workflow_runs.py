"""Stored workflow definitions through the interpreter against a hand-written temporalio workflow doing the same
work, side by side in one run.

    .venv/bin/python -m bench.workflow_runs [--runs 100] [--cycles 30] [--reps 3]

- **runs/s**: a 3-step definition (mapping -> tool `double` -> mapping), `--runs` runs with at most 20 in
  flight, against `BareThree` (the same mapping in code, the same tool as an activity, the same mapping);
- **suspend->resume cycles/s**: a definition whose tool step suspends (`ask-human`), resumed by the `resume`
  signal once the run shows suspended, against `BareAsk` (an activity, a signal, the activity again);
  `--cycles` cycles with at most 10 in flight.

Both run on one fresh dev server, each on its own in-process worker and task queue, repetitions interleaved.
Mastra's engine, measured on this machine over HTTP (`@mastra/core` 1.71, LibSQL file storage; the issue's
figures): createRun+startAsync 61-79 runs/s, suspend+resume 44-51 cycles/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from bench.harness import fresh_stack
from keel.worker import build_worker
from keel.workflows.contracts import ResumeStep, WorkflowRunState
from keel.workflows.options import DEFAULT_OPTIONS
from tests.workflows_json.apps import app, definition, mapping, tool_step

THREE = definition(
    "three",
    [
        mapping("in", {"n": {"initData": True, "path": "n"}}),
        tool_step("twice", "double"),
        mapping("out", {"result": {"step": "twice", "path": "n"}}),
    ],
)
ASK = definition("ask", [mapping("q", {"question": {"value": "ok?"}}), tool_step("human", "ask-human")])
MASTRA = {"runs_per_s": (61, 79), "cycles_per_s": (44, 51)}


@dataclass
class Suspend:
    question: str


@activity.defn(name="bare.double")
async def bare_double(n: int) -> int:
    return n * 2


@activity.defn(name="bare.ask")
async def bare_ask(answer: str | None) -> dict[str, Any]:
    return {"answer": answer} if answer is not None else {"suspended": {"question": "ok?"}}


@workflow.defn(name="BareThree", sandboxed=False)
class BareThree:
    @workflow.run
    async def run(self, init: dict[str, Any]) -> dict[str, Any]:
        n = init["n"]
        doubled = await workflow.execute_activity(bare_double, n, start_to_close_timeout=timedelta(minutes=1))
        return {"result": doubled}


@workflow.defn(name="BareAsk", sandboxed=False)
class BareAsk:
    def __init__(self) -> None:
        self.answer: str | None = None
        self.suspended = False

    @workflow.signal
    def resume(self, answer: str) -> None:
        self.answer = answer

    @workflow.query
    def waiting(self) -> bool:
        return self.suspended

    @workflow.run
    async def run(self, init: dict[str, Any]) -> dict[str, Any]:
        first = await workflow.execute_activity(bare_ask, None, start_to_close_timeout=timedelta(minutes=1))
        assert "suspended" in first
        self.suspended = True
        await workflow.wait_condition(lambda: self.answer is not None)
        self.suspended = False
        done: dict[str, Any] = await workflow.execute_activity(
            bare_ask, self.answer, start_to_close_timeout=timedelta(minutes=1)
        )
        return done


async def bounded(count: int, in_flight: int, one: Any) -> float:
    slots = asyncio.Semaphore(in_flight)

    async def run(i: int) -> None:
        async with slots:
            await one(i)

    started = time.perf_counter()
    await asyncio.gather(*(run(i) for i in range(count)))
    return count / (time.perf_counter() - started)


async def keel_three(client: Client, queue: str, i: int) -> None:
    result = await client.execute_workflow("three", {"n": i}, id=f"three-{uuid.uuid4()}", task_queue=queue)
    assert result == {"result": i * 2}, result


async def bare_three(client: Client, queue: str, i: int) -> None:
    result = await client.execute_workflow(BareThree.run, {"n": i}, id=f"bare3-{uuid.uuid4()}", task_queue=queue)
    assert result == {"result": i * 2}


async def keel_cycle(client: Client, queue: str, i: int) -> None:
    handle = await client.start_workflow("ask", {}, id=f"ask-{uuid.uuid4()}", task_queue=queue)
    while (await handle.query("state", result_type=WorkflowRunState)).status != "suspended":
        await asyncio.sleep(0.005)
    await handle.signal("resume", ResumeStep(step="human", resume_data={"answer": "yes"}))
    assert await handle.result() == {"answer": "yes"}


async def bare_cycle(client: Client, queue: str, i: int) -> None:
    handle = await client.start_workflow(BareAsk.run, {}, id=f"bareask-{uuid.uuid4()}", task_queue=queue)
    while not await handle.query(BareAsk.waiting):
        await asyncio.sleep(0.005)
    await handle.signal(BareAsk.resume, "yes")
    assert await handle.result() == {"answer": "yes"}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, list[float]] = {"keel_runs": [], "bare_runs": [], "keel_cycles": [], "bare_cycles": []}
    async with fresh_stack("keel-bench-wf-") as stack:
        client = stack.client
        for raw in (THREE, ASK):
            await stack.storage.save_definition(raw["id"], raw)
        keel_q, bare_q = f"bench-wf-{uuid.uuid4()}", f"bench-bare-{uuid.uuid4()}"
        bare = Worker(client, task_queue=bare_q, workflows=[BareThree, BareAsk], activities=[bare_double, bare_ask])
        async with build_worker(client, app, stack.storage, task_queue=keel_q, options=DEFAULT_OPTIONS), bare:
            await bounded(10, 5, lambda i: keel_three(client, keel_q, i))  # warm-up
            await bounded(10, 5, lambda i: bare_three(client, bare_q, i))
            for rep in range(args.reps):
                print(f"repetition {rep + 1}/{args.reps}", file=sys.stderr, flush=True)
                order = [("keel", keel_q, keel_three, keel_cycle), ("bare", bare_q, bare_three, bare_cycle)]
                for who, queue, three, cycle in order if rep % 2 == 0 else order[::-1]:
                    figures[f"{who}_runs"].append(
                        await bounded(args.runs, 20, lambda i, t=three, q=queue: t(client, q, i))
                    )
                    figures[f"{who}_cycles"].append(
                        await bounded(args.cycles, 10, lambda i, c=cycle, q=queue: c(client, q, i))
                    )
    med = {k: statistics.median(v) for k, v in figures.items()}
    return {
        "runs": args.runs,
        "cycles": args.cycles,
        "reps": args.reps,
        "median": med,
        "all": figures,
        "ratios": {
            "runs keel/bare": med["keel_runs"] / med["bare_runs"],
            "cycles keel/bare": med["keel_cycles"] / med["bare_cycles"],
            "runs keel/mastra": med["keel_runs"] / statistics.mean(MASTRA["runs_per_s"]),
            "cycles keel/mastra": med["keel_cycles"] / statistics.mean(MASTRA["cycles_per_s"]),
        },
    }


def render(r: dict[str, Any]) -> str:
    m, q = r["median"], r["ratios"]
    return "\n".join(
        [
            f"3-step definition, {r['runs']} runs, 20 in flight (median of {r['reps']}):",
            f"  Keel interpreter {m['keel_runs']:7.1f} runs/s   hand-written {m['bare_runs']:7.1f}   "
            f"Keel/hand-written {q['runs keel/bare']:.3f}   Keel/Mastra {q['runs keel/mastra']:.2f}",
            f"suspend -> resume, {r['cycles']} cycles, 10 in flight:",
            f"  Keel interpreter {m['keel_cycles']:7.1f} cycles/s hand-written {m['bare_cycles']:7.1f}   "
            f"Keel/hand-written {q['cycles keel/bare']:.3f}   Keel/Mastra {q['cycles keel/mastra']:.2f}",
            "  (Mastra's engine over HTTP on this machine: 61-79 runs/s, 44-51 cycles/s)",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.workflow_runs", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/workflow_results.json"))
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    args.out.write_text(json.dumps(result, indent=2))
    print(render(result))


if __name__ == "__main__":
    main()
