"""Stored workflow definitions through the interpreter, side by side in one run with hand-written temporalio
workflows doing the same work and with Mastra's engine running the same definitions.

    .venv/bin/python -m bench.workflow_runs [--runs 60] [--cycles 30] [--reps 8] [--no-mastra]

- **runs/s**: a 3-step definition (mapping -> tool `double` -> mapping), `--runs` runs with at most 20 in
  flight; against `BareThree` (the same mapping in code, the same tool as an activity, the same mapping);
- **suspend->resume cycles/s**: a definition whose tool step suspends (`ask-human`), started with the `settled`
  update (update-with-start: it answers once the run suspends) and resumed by the `resume` signal; against
  `BareAsk` (an activity, an update that answers once it waits, a signal, the activity again);
  `--cycles` cycles with at most 10 in flight.

The hand-written workflows run twice: **hand-written** keeps Keel's visibility contract (it starts marked as a
Keel run, and sets `KeelStatus` suspended, running again and completed, which a run must do to be counted and
listed), **minimal** does not (the least temporalio needs). Keel and both run on one fresh dev server, each on
an in-process worker, in short repetitions whose order rotates; each ratio is the median of the ratios within a
repetition. Then `bench/mastra/workflows.mjs` runs the same two definitions on Mastra's engine in process
(`@mastra/core` 1.71, LibSQL file storage, `createRun` + `start`, `resume`). The issue's figures for Mastra over
HTTP on this machine: createRun+startAsync 61-79 runs/s, suspend+resume 44-51 cycles/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.worker import Worker

from bench.harness import fresh_stack
from keel.worker import build_worker
from keel.workflows.contracts import ResumeStep, WorkflowRunState
from keel.workflows.options import DEFAULT_OPTIONS
from keel.workflows.resumable import start_attributes
from keel.workflows.search_attributes import KEEL_STATUS
from tests.workflows_json.apps import app, definition, mapping, tool_step


def obj(**props: str) -> dict[str, Any]:
    properties = {k: {"type": t} for k, t in props.items()}
    return {"type": "object", "properties": properties, "required": list(props)}


THREE = definition(
    "three",
    [
        mapping("in", {"n": {"initData": True, "path": "n"}}),
        tool_step("twice", "double"),
        mapping("out", {"result": {"step": "twice", "path": "n"}}),
    ],
    inputSchema=obj(n="integer"),
    outputSchema=obj(result="integer"),
)
ASK = definition(
    "ask",
    [mapping("q", {"question": {"value": "ok?"}}), tool_step("human", "ask-human")],
    outputSchema=obj(answer="string"),
)
"""The same two definitions run on Keel and on Mastra's engine (bench/mastra/workflows.mjs)."""
MASTRA = {"runs_per_s": (61, 79), "cycles_per_s": (44, 51)}
MASTRA_DIR = Path(__file__).parent / "mastra"


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
        if init.get("marks"):
            workflow.upsert_search_attributes([KEEL_STATUS.value_set("completed")])
        return {"result": doubled}


@workflow.defn(name="BareAsk", sandboxed=False)
class BareAsk:
    def __init__(self) -> None:
        self.answer: str | None = None
        self.waiting = False

    @workflow.signal
    def resume(self, answer: str) -> None:
        self.answer = answer

    @workflow.update
    async def suspended(self) -> bool:
        await workflow.wait_condition(lambda: self.waiting)
        return True

    @workflow.run
    async def run(self, init: dict[str, Any]) -> dict[str, Any]:
        first = await workflow.execute_activity(bare_ask, None, start_to_close_timeout=timedelta(minutes=1))
        assert "suspended" in first
        self.waiting = True
        if init.get("marks"):  # countable as suspended
            workflow.upsert_search_attributes([KEEL_STATUS.value_set("suspended")])
        await workflow.wait_condition(lambda: self.answer is not None)
        self.waiting = False
        if init.get("marks"):
            workflow.upsert_search_attributes([KEEL_STATUS.value_set("running")])
        done: dict[str, Any] = await workflow.execute_activity(
            bare_ask, self.answer, start_to_close_timeout=timedelta(minutes=1)
        )
        if init.get("marks"):
            workflow.upsert_search_attributes([KEEL_STATUS.value_set("completed")])
        return done


PINNED: dict[str, dict[str, Any]] = {}
"""Each definition's version and hash, given in the memo at start as Keel's client does (`Workflows.start`)."""


def marks(workflow_type: str) -> TypedSearchAttributes:
    """Both kinds start marked as running Keel workflow runs (as Keel's clients start runs)."""
    return TypedSearchAttributes(start_attributes(workflow_type))


async def bounded(count: int, in_flight: int, one: Any) -> float:
    slots = asyncio.Semaphore(in_flight)

    async def run(i: int) -> None:
        async with slots:
            await one(i)

    started = time.perf_counter()
    await asyncio.gather(*(run(i) for i in range(count)))
    return count / (time.perf_counter() - started)


async def keel_three(client: Client, queue: str, i: int) -> None:
    result = await client.execute_workflow(
        "three",
        {"n": i},
        id=f"three-{uuid.uuid4()}",
        task_queue=queue,
        search_attributes=marks("three"),
        memo=PINNED["three"],
    )
    assert result == {"result": i * 2}, result


async def bare_three(client: Client, queue: str, i: int, *, contract: bool = True) -> None:
    result = await client.execute_workflow(
        BareThree.run,
        {"n": i, "marks": contract},
        id=f"bare3-{uuid.uuid4()}",
        task_queue=queue,
        search_attributes=marks("BareThree") if contract else TypedSearchAttributes.empty,
    )
    assert result == {"result": i * 2}


async def keel_cycle(client: Client, queue: str, i: int) -> None:
    start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
        "ask",
        {},
        id=f"ask-{uuid.uuid4()}",
        task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        search_attributes=marks("ask"),
        memo=PINNED["ask"],
    )
    state = await client.execute_update_with_start_workflow(
        "settled", start_workflow_operation=start, result_type=WorkflowRunState
    )
    assert state.status == "suspended"
    handle = await start.workflow_handle()
    await handle.signal("resume", ResumeStep(step="human", resume_data={"answer": "yes"}))
    assert await handle.result() == {"answer": "yes"}


async def bare_cycle(client: Client, queue: str, i: int, *, contract: bool = True) -> None:
    start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
        BareAsk.run,
        {"marks": contract},
        id=f"bareask-{uuid.uuid4()}",
        task_queue=queue,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        search_attributes=marks("BareAsk") if contract else TypedSearchAttributes.empty,
    )
    assert await client.execute_update_with_start_workflow(BareAsk.suspended, start_workflow_operation=start)
    handle = await start.workflow_handle()
    await handle.signal(BareAsk.resume, "yes")
    assert await handle.result() == {"answer": "yes"}


CONTENDERS = ("keel", "bare", "minimal")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, list[float]] = {f"{who}_{what}": [] for who in CONTENDERS for what in ("runs", "cycles")}
    async with fresh_stack("keel-bench-wf-") as stack:
        client = stack.client
        for raw in (THREE, ASK):
            stored = await stack.storage.save_definition(raw["id"], raw)
            PINNED[raw["id"]] = {"definitionVersion": stored.version, "definitionHash": stored.hash}
        keel_q, bare_q = f"bench-wf-{uuid.uuid4()}", f"bench-bare-{uuid.uuid4()}"
        bare = Worker(client, task_queue=bare_q, workflows=[BareThree, BareAsk], activities=[bare_double, bare_ask])
        three = {
            "keel": lambda i: keel_three(client, keel_q, i),
            "bare": lambda i: bare_three(client, bare_q, i),
            "minimal": lambda i: bare_three(client, bare_q, i, contract=False),
        }
        cycle = {
            "keel": lambda i: keel_cycle(client, keel_q, i),
            "bare": lambda i: bare_cycle(client, bare_q, i),
            "minimal": lambda i: bare_cycle(client, bare_q, i, contract=False),
        }
        async with build_worker(client, app, stack.storage, task_queue=keel_q, options=DEFAULT_OPTIONS), bare:
            for who in CONTENDERS:  # warm-up
                await bounded(10, 5, three[who])
            # Short repetitions, the order rotating: the server slows as its database grows, so each Keel
            # figure is compared with the hand-written ones measured next to it.
            for rep in range(args.reps):
                print(f"repetition {rep + 1}/{args.reps}", file=sys.stderr, flush=True)
                order = CONTENDERS[rep % 3 :] + CONTENDERS[: rep % 3]
                for who in order:
                    figures[f"{who}_runs"].append(await bounded(args.runs, 20, three[who]))
                for who in order[::-1]:
                    figures[f"{who}_cycles"].append(await bounded(args.cycles, 10, cycle[who]))
    mastra = run_mastra(args) if args.mastra else {"error": "not run (--no-mastra)"}
    med = {k: statistics.median(v) for k, v in figures.items()}
    pairs = {
        f"{what} keel/{other}": [
            k / b for k, b in zip(figures[f"keel_{what}"], figures[f"{other}_{what}"], strict=True)
        ]
        for what in ("runs", "cycles")
        for other in ("bare", "minimal")
    }
    ratios = {name: statistics.median(values) for name, values in pairs.items()}
    if "error" not in mastra:
        med["mastra_runs"] = statistics.median(mastra["runs_per_s"])
        med["mastra_cycles"] = statistics.median(mastra["cycles_per_s"])
        ratios["runs keel/mastra"] = med["keel_runs"] / med["mastra_runs"]
        ratios["cycles keel/mastra"] = med["keel_cycles"] / med["mastra_cycles"]
    ratios["runs keel/mastra over HTTP (issue's figures)"] = med["keel_runs"] / statistics.mean(MASTRA["runs_per_s"])
    ratios["cycles keel/mastra over HTTP (issue's figures)"] = med["keel_cycles"] / statistics.mean(
        MASTRA["cycles_per_s"]
    )
    return {
        "runs": args.runs,
        "cycles": args.cycles,
        "reps": args.reps,
        "median": med,
        "all": figures,
        "pair_ratios": pairs,
        "ratios": ratios,
        "mastra": mastra,
    }


def run_mastra(args: argparse.Namespace) -> dict[str, Any]:
    """Mastra's engine on the same definitions, in process (bench/mastra/workflows.mjs), after Keel's figures."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return {"error": "node/npm not found"}
    if not (MASTRA_DIR / "node_modules" / "@mastra" / "libsql").exists():
        print("[mastra] npm install ...", file=sys.stderr, flush=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=MASTRA_DIR, check=True, timeout=600)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as defs:
        json.dump([THREE, ASK], defs)
        defs.flush()
        print("[mastra] node workflows.mjs ...", file=sys.stderr, flush=True)
        command = ["node", "workflows.mjs", "--definitions", defs.name, "--runs", str(args.runs)]
        command += ["--cycles", str(args.cycles), "--reps", str(args.reps)]
        proc = subprocess.run(command, cwd=MASTRA_DIR, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"error": f"node workflows.mjs failed: {proc.stderr.strip()[-800:]}"}
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return figures


def render(r: dict[str, Any]) -> str:
    m, q = r["median"], r["ratios"]

    def row(what: str, unit: str) -> str:
        mastra = f"{m[f'mastra_{what}']:6.1f}" if f"mastra_{what}" in m else "   n/a"
        return (
            f"  Keel {m[f'keel_{what}']:6.1f} {unit}   hand-written {m[f'bare_{what}']:6.1f}   "
            f"minimal {m[f'minimal_{what}']:6.1f}   Mastra in process {mastra}"
        )

    lines = [
        f"3-step definition, {r['runs']} runs, 20 in flight (medians of {r['reps']}; ratios: median of pairs):",
        row("runs", "runs/s  "),
        f"suspend -> resume, {r['cycles']} cycles, 10 in flight:",
        row("cycles", "cycles/s"),
        "ratios:",
        *(f"  {name:48} {value:.3f}" for name, value in q.items()),
    ]
    if "error" in r["mastra"]:
        lines.append(f"Mastra: {r['mastra']['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.workflow_runs", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--no-mastra", dest="mastra", action="store_false", help="skip Mastra's engine")
    parser.add_argument("--out", type=Path, default=Path("bench/workflow_results.json"))
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    args.out.write_text(json.dumps(result, indent=2))
    print(render(result))


if __name__ == "__main__":
    main()
