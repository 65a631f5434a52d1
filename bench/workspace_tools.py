"""Workspace tool calls per second through `AgentRun`, against the same calls made directly (the floor).

    .venv/bin/python -m bench.workspace_tools [--pairs 50] [--reps 3] [--out bench/workspace_results.json]

One run: a fresh dev server, one in-process worker (`build_worker`, SQLite storage) with a plan-driven scripted
agent on a workspace in a temp dir. For each repetition, interleaved:

- **one per step**: a run of 2 x pairs model steps, each calling one tool (write_file, then read_file of the same
  file, pairs times);
- **parallel**: a run of 2 steps: pairs write_file calls in one step, then pairs read_file calls;
- **direct**: the same 2 x pairs calls on the workspace tools in this process, no Temporal (`WorkspaceTool.execute`:
  validation, write lock, read tracking, the filesystem), and **raw**: `LocalFilesystem.write_file` /
  `read_file` alone.

Reported: calls per second (median of the repetitions) and each Keel figure over the direct one. Mastra's
workspace tools (1000 write+read pairs in process, `@mastra/core` 1.71.0, the reference file) measured
760 calls/s on this machine: the in-process figure to set the direct one against.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import fresh_stack
from keel.app import App
from keel.client import KeelClient
from keel.worker import build_worker
from keel.workspace_providers import WORKSPACE_TOOLS, LocalFilesystem, Workspace
from keel.workspace_providers.tools import WorkspaceCall, workspace_tools
from tests.workspace.apps import plan_agent

FS = WORKSPACE_TOOLS.FILESYSTEM
MASTRA_IN_PROCESS_CALLS_PER_S = 760
CONTENT = "hello workspace\n" * 8


def one_per_step(pairs: int, tag: str) -> list[list[list[Any]]]:
    steps: list[list[list[Any]]] = []
    for i in range(pairs):
        path = f"{tag}/f{i}.txt"
        steps += [[[FS.WRITE_FILE, {"path": path, "content": CONTENT}]], [[FS.READ_FILE, {"path": path}]]]
    return steps


def parallel(pairs: int, tag: str) -> list[list[list[Any]]]:
    paths = [f"{tag}/f{i}.txt" for i in range(pairs)]
    return [
        [[FS.WRITE_FILE, {"path": p, "content": CONTENT}] for p in paths],
        [[FS.READ_FILE, {"path": p}] for p in paths],
    ]


async def through_runs(keel: KeelClient, plan: list[list[list[Any]]]) -> float:
    calls = sum(len(step) for step in plan)
    started = time.perf_counter()
    result = await keel.result(await keel.start_run("bench", json.dumps(plan)))
    elapsed = time.perf_counter() - started
    outputs = json.loads(result.text)
    assert len(outputs) == calls and all(isinstance(o, str) for o in outputs), outputs[:3]
    return calls / elapsed


async def direct(ws: Workspace, pairs: int, tag: str) -> float:
    tools = {t.name: t for t in await workspace_tools(ws)}
    write, read = tools[FS.WRITE_FILE], tools[FS.READ_FILE]
    started = time.perf_counter()
    for i in range(pairs):
        path = f"{tag}/f{i}.txt"
        await write.execute({"path": path, "content": CONTENT}, WorkspaceCall())
        await read.execute({"path": path}, WorkspaceCall())
    return 2 * pairs / (time.perf_counter() - started)


async def raw(fs: LocalFilesystem, pairs: int, tag: str) -> float:
    started = time.perf_counter()
    for i in range(pairs):
        path = f"{tag}/f{i}.txt"
        await fs.write_file(path, CONTENT)
        await fs.read_file(path, encoding="utf-8")
    return 2 * pairs / (time.perf_counter() - started)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, list[float]] = {"one_per_step": [], "parallel": [], "direct": [], "raw": []}
    async with fresh_stack("keel-bench-ws-") as stack:
        fs = LocalFilesystem(stack.tmp / "ws")
        ws = Workspace(id="bench", filesystem=fs)
        app = App.of(plan_agent("bench", ws, max_steps=2 * args.pairs + 1))
        queue = f"bench-ws-{uuid.uuid4()}"
        async with build_worker(stack.client, app, stack.storage, task_queue=queue):
            keel = KeelClient(stack.client, task_queue=queue, app=app)
            await through_runs(keel, one_per_step(2, "warm"))  # warm-up
            await through_runs(keel, parallel(4, "warm"))
            await direct(ws, 10, "warm")
            for rep in range(args.reps):
                print(f"repetition {rep + 1}/{args.reps}", file=sys.stderr, flush=True)
                figures["one_per_step"].append(await through_runs(keel, one_per_step(args.pairs, f"s{rep}")))
                figures["parallel"].append(await through_runs(keel, parallel(args.pairs, f"p{rep}")))
                figures["direct"].append(await direct(ws, args.pairs, f"d{rep}"))
                figures["raw"].append(await raw(fs, args.pairs, f"r{rep}"))
    medians = {k: statistics.median(v) for k, v in figures.items()}
    return {
        "pairs": args.pairs,
        "reps": args.reps,
        "calls_per_s": medians,
        "all": figures,
        "ratios": {
            "one_per_step/direct": medians["one_per_step"] / medians["direct"],
            "parallel/direct": medians["parallel"] / medians["direct"],
            "direct/mastra_in_process": medians["direct"] / MASTRA_IN_PROCESS_CALLS_PER_S,
        },
    }


def render(r: dict[str, Any]) -> str:
    c, q = r["calls_per_s"], r["ratios"]
    return "\n".join(
        [
            f"workspace tool calls/s ({r['pairs']} write+read pairs, median of {r['reps']}):",
            f"  through AgentRun, one call per step  {c['one_per_step']:8.1f}   /direct {q['one_per_step/direct']:.4f}",
            f"  through AgentRun, parallel in a step {c['parallel']:8.1f}   /direct {q['parallel/direct']:.4f}",
            f"  direct (workspace tools, no Temporal) {c['direct']:7.1f}   /Mastra {q['direct/mastra_in_process']:.2f}",
            f"  raw LocalFilesystem calls            {c['raw']:8.1f}",
            f"  Mastra workspace tools in process     {MASTRA_IN_PROCESS_CALLS_PER_S:7d}   (reference file)",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.workspace_tools", description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=50, help="write+read pairs per run (default 50)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--out", type=Path, default=Path("bench/workspace_results.json"), help="JSON figures")
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    args.out.write_text(json.dumps(result, indent=2))
    print(render(result))


if __name__ == "__main__":
    main()
