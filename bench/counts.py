"""What `KeelClient.counts()` costs with many open runs, side by side with one visibility count and with the way it
counted before (sequential counts per agent; without the app, a listing of every open run).

    .venv/bin/python -m bench.counts [--runs 10000] [--agents 7]

A fresh tuned dev server; `--runs` runs are started across `--agents` agents and left open (no worker polls the
queue, so each stays running with its search attributes set at start). Medians of 7 repetitions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.harness import free_port
from keel.app import Agent, App
from keel.client import KeelClient
from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.model_providers import ModelResponse, ScriptedModel
from keel.storage import DirectoryBlobStore

REPS = 7


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-counts-"))
    agents = [Agent(id=f"agent-{i}", model=ScriptedModel(lambda r: ModelResponse(text=""))) for i in range(args.agents)]
    app = App.of(*agents)
    cfg = DevServerConfig(port=free_port(), ui_port=free_port(), state_dir=tmp / "temporal")
    server = await DevServer(cfg).start(reuse=False)
    try:
        client = await connect(cfg.address, payloads=DirectoryBlobStore(tmp / "payloads"))
        keel = KeelClient(client, task_queue="no-worker", app=app)
        log(f"starting {args.runs} runs across {args.agents} agents ...")
        sem = asyncio.Semaphore(64)
        t0 = time.perf_counter()

        async def start(i: int) -> None:
            async with sem:
                await keel.start_run(f"agent-{i % args.agents}", "hi")

        await asyncio.gather(*(start(i) for i in range(args.runs)))
        log(f"started in {time.perf_counter() - t0:.0f} s; waiting for visibility to catch up ...")
        while (await client.count_workflows("KeelKind='agent' AND ExecutionStatus='Running'")).count < args.runs:
            await asyncio.sleep(0.5)
        bare = KeelClient(client, task_queue="no-worker")

        def old_query(agent: str, status: str) -> str:  # what count_runs sent before
            return (
                f"KeelKind='agent' AND ExecutionStatus!='ContinuedAsNew' AND KeelAgentId='{agent}'"
                f" AND ExecutionStatus='Running' AND KeelStatus='{status}'"
            )

        async def before_with_app() -> None:  # the old counts(): 2 counts per agent, one after the other
            for agent in app.agents:
                for status in ("running", "suspended"):
                    await client.count_workflows(old_query(agent, status))

        async def before_without_app() -> None:  # the old counts() without an app: list every open run first
            seen = {
                ex.typed_search_attributes.get(keel_agent_id)
                async for ex in client.list_workflows("KeelKind='agent' AND ExecutionStatus='Running'")
            }
            for agent in seen:
                for status in ("running", "suspended"):
                    await client.count_workflows(old_query(str(agent), status))

        from keel.workflows.search_attributes import KEEL_AGENT_ID as keel_agent_id

        results = {
            "runs": args.runs,
            "agents": args.agents,
            "one_count_ms": await timed(lambda: client.count_workflows("KeelKind='agent'")),
            "counts_with_app_ms": await timed(keel.counts),
            "counts_without_app_ms": await timed(bare.counts),
            "before_with_app_ms": await timed(before_with_app),
            "before_without_app_ms": await timed(before_without_app),
        }
        counted = await keel.counts()
        assert sum(a["running"] for a in counted["agents"].values()) == args.runs, counted
    finally:
        server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.counts", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=7)
    parser.add_argument("--out", default=str(Path(__file__).parent / "counts.json"))
    results = asyncio.run(main_async(parser.parse_args()))
    Path(parser.parse_args().out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
