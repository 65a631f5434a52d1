"""History per step against the size of tool results, and the threshold above which a step returns them by
reference (`keel.activities.agent_loop.INLINE_TOOL_RESULT_BYTES`).

    .venv/bin/python -m bench.history                 # result sizes 100 B .. 30 KB, thresholds 0 .. 256 KiB
    .venv/bin/python -m bench.history --quick         # fewer steps and repetitions

One dev server and one in-process Keel worker (SQLite storage). Agent `sized`: each step calls `blob(size)` once
until it has N results, so a run is N+1 model steps and N tool steps. For each (result size, threshold) the bench
runs N steps and reports the history's bytes and events per step (the marginal cost between N and 1 step; bytes
without the last step's marker and the completion event, which carry the run's result lists) and the wall ms per
step (median of the repetitions, interleaved). The threshold is the activity module's constant,
set in this process between runs: it changes no command a run issues, only what a step's result carries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio.api.history.v1 import History

import keel.activities.agent_loop as agent_loop
from bench.harness import fresh_stack
from keel.app.definitions import Agent, App, ToolContext, tool
from keel.client import KeelClient
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from keel.worker import build_worker


class BlobInput(BaseModel):
    size: int


@tool("blob")
async def blob(args: BlobInput, ctx: ToolContext) -> str:
    """Return `size` characters."""
    return "x" * args.size


def sized_script(request: ModelRequest) -> ModelResponse:
    """`steps=N size=S`: one `blob(S)` call per step until N results, then a short answer."""
    spec = dict(re.findall(r"(\w+)=(\d+)", last_user_text(request)))
    done = len(tool_results_since_last_user(request))
    if done < int(spec["steps"]):
        call = ModelToolCall(id=f"call_{done + 1}", name="blob", args={"size": int(spec["size"])})
        return ModelResponse(text=f"step {done + 1}", tool_calls=[call])
    return ModelResponse(text=f"done after {done} calls")


app = App.of(Agent(id="sized", model=ScriptedModel(sized_script, name="sized"), tools=(blob,), max_steps=1000))

SIZES = (100, 1_000, 4_000, 30_000)
THRESHOLDS = (0, 256, 1024, 4096, 16 * 1024, 256 * 1024)


async def one_run(keel: KeelClient, steps: int, size: int) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    run_id = await keel.start_run("sized", f"steps={steps} size={size}", max_steps=steps + 1)
    result = await keel.result(run_id)
    elapsed = time.perf_counter() - t0
    if len(result.tool_results) != steps:
        raise RuntimeError(f"run {run_id}: {len(result.tool_results)} tool results, not {steps}")
    history = await keel.temporal.get_workflow_handle(run_id).fetch_history()
    # The run's result lists every tool result (Mastra's `toolResults`), in the last step's marker and in the
    # completion event: a cost of the result, not of the steps, so left out here.
    events = list(history.events)
    last_marker = max(i for i, e in enumerate(events) if e.HasField("marker_recorded_event_attributes"))
    kept = [e for i, e in enumerate(events) if i != last_marker and i != len(events) - 1]
    return elapsed, len(history.events), len(History(events=kept).SerializeToString())


async def measure(steps: int, reps: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with fresh_stack("keel-bench-history-") as stack:
        async with build_worker(stack.client, app, stack.storage, task_queue="history") as _:
            keel = KeelClient(stack.client, task_queue="history", app=app)
            agent_loop.INLINE_TOOL_RESULT_BYTES = 1024
            await one_run(keel, 2, 10)  # warm-up
            for size in SIZES:
                for threshold in THRESHOLDS:
                    agent_loop.INLINE_TOOL_RESULT_BYTES = threshold
                    times: list[float] = []
                    _, ev1, b1 = await one_run(keel, 1, size)
                    for _ in range(reps):
                        elapsed, ev, b = await one_run(keel, steps, size)
                        times.append(elapsed / steps)
                    row = {
                        "size": size,
                        "threshold": threshold,
                        "ms_per_step": statistics.median(times) * 1000,
                        "events_per_step": (ev - ev1) / (steps - 1),
                        "bytes_per_step": (b - b1) / (steps - 1),
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| result size | threshold | history B/step | events/step | ms/step |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['size']:,} B | {r['threshold']:,} B | {r['bytes_per_step']:,.0f} | {r['events_per_step']:.1f}"
            f" | {r['ms_per_step']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="20 steps, 1 repetition")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    steps, reps = (20, 1) if args.quick else (100, 3)
    rows = asyncio.run(measure(steps, reps))
    print(render(rows))
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
