"""Keel's HTTP API against the real Mastra server, both driven by the same unmodified `@mastra/client-js`.

    .venv/bin/python -m bench.http_api [--reps 2] [--count 40] [--count-concurrent 200] [--ops generate,stream]

Keel: a fresh Temporal dev server and `keel serve --worker` (the API and a worker in one process of their own,
SQLite storage, so the API's runs start eagerly on that worker; `--keel serve`: `keel serve` alone, the worker in
this process) on `bench/http_apps.py`. Mastra: `bench/mastra/server.mjs` (`@mastra/core` 1.71 served by
`@mastra/hono`, LibSQL file storage) with the same scripted models, tools and stored definitions. For each
operation and concurrency (1 and 20 clients) `bench/mastra/http_load.mjs` drives each server in turn, the order
alternating per repetition; each Keel/Mastra ratio is the median of the ratios within a repetition.

Operations (each checked for the right answer): `generate` and `stream` (agent `bench`, `steps=1`: a tool call,
then text), `workflow-run` (createRun + startAsync of `three`), `workflow-cycle` (createRun + startAsync of
`ask`, which suspends, then resumeAsync), `approval-cycle` (generate on `approver`, which suspends for a tool
approval, then approveToolCallGenerate), `latency` (agent `ticker`: 20 deltas 20 ms apart, each stamped with
the time the model emitted it; the client's receipt time minus the stamp is the delta's latency, end to end:
model -> event log -> API -> SSE client; and the time to the stream's first chunk).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.harness import free_port, fresh_stack
from bench.http_apps import app
from bench.workflow_runs import ASK, THREE
from keel.worker import build_worker

ROOT = Path(__file__).resolve().parent.parent
MASTRA_DIR = ROOT / "bench" / "mastra"
KEEL = Path(sys.executable).parent / "keel"
OPS = ("generate", "stream", "workflow-run", "workflow-cycle", "approval-cycle", "latency")


@contextlib.contextmanager
def process(command: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def serving(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    async with httpx.AsyncClient() as http, asyncio.timeout(60):
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited {proc.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(f"{url}/api/agents")).status_code == 200:
                    return
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def keel_api(address: str, task_queue: str, db: Path, tmp: Path, *, worker: bool) -> AsyncIterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "KEEL_TEMPORAL_ADDRESS": address,
        "KEEL_TASK_QUEUE": task_queue,
        "KEEL_STORAGE_URL": f"sqlite:///{db}",
        "KEEL_APP": "bench.http_apps:app",
        "KEEL_API_PORT": str(port),
        "PYTHONPATH": str(ROOT),
    }
    log = tmp / "keel-api.log"
    command = [str(KEEL), "serve", *(["--worker"] if worker else [])]
    with process(command, cwd=ROOT, env=env, log=log) as proc:
        url = f"http://127.0.0.1:{port}"
        await serving(url, proc, log)
        yield url


@contextlib.asynccontextmanager
async def mastra_server(tmp: Path) -> AsyncIterator[str]:
    defs = tmp / "defs.json"
    defs.write_text(json.dumps([THREE, ASK]))
    port = free_port()
    log = tmp / "mastra-server.log"
    command = ["node", "server.mjs", "--port", str(port), "--definitions", str(defs)]
    with process(command, cwd=MASTRA_DIR, env=dict(os.environ), log=log) as proc:
        url = f"http://127.0.0.1:{port}"
        await serving(url, proc, log)
        yield url


async def drive(url: str, op: str, concurrency: int, count: int) -> dict[str, Any]:
    command = ["node", "http_load.mjs", "--base-url", url, "--op", op]
    command += ["--concurrency", str(concurrency), "--count", str(count), "--warmup", "5"]
    proc = await asyncio.create_subprocess_exec(
        *command, cwd=MASTRA_DIR, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {err.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def ensure_node_modules() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise SystemExit("node and npm are needed (the load driver is @mastra/client-js)")
    if not (MASTRA_DIR / "node_modules" / "@mastra" / "hono").exists():
        print("[mastra] npm ci ...", file=sys.stderr, flush=True)
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=MASTRA_DIR, check=True, timeout=900)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    ensure_node_modules()
    ops = args.ops.split(",")
    runs: list[dict[str, Any]] = []
    async with fresh_stack("keel-bench-http-") as stack:
        for raw in (THREE, ASK):
            await stack.storage.save_definition(raw["id"], raw)
        queue = f"bench-http-{uuid.uuid4()}"
        address = stack.client.service_client.config.target_host
        in_api = args.keel == "serve-worker"
        async with (
            contextlib.nullcontext() if in_api else build_worker(stack.client, app, stack.storage, task_queue=queue),
            keel_api(address, queue, stack.tmp / "keel.db", stack.tmp, worker=in_api) as keel_url,
            mastra_server(stack.tmp) as mastra_url,
        ):
            servers = {"keel": keel_url, "mastra": mastra_url}
            for rep in range(args.reps):
                for op in ops:
                    for concurrency, count in ((1, args.count), (20, args.count_concurrent)):
                        if op == "latency":
                            count = max(10, count // 4)
                        order = ("keel", "mastra") if (rep + ops.index(op)) % 2 == 0 else ("mastra", "keel")
                        for who in order:
                            print(f"rep {rep + 1} {op} c={concurrency} {who}", file=sys.stderr, flush=True)
                            figures = await drive(servers[who], op, concurrency, count)
                            runs.append({"rep": rep, "who": who, **figures})
    return {"runs": runs, "summary": summarise(runs)}


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for op in dict.fromkeys(r["op"] for r in runs):
        for concurrency in (1, 20):
            pairs = [
                (k, m)
                for k in runs
                for m in runs
                if k["who"] == "keel"
                and m["who"] == "mastra"
                and k["rep"] == m["rep"]
                and k["op"] == m["op"] == op
                and k["concurrency"] == m["concurrency"] == concurrency
            ]
            if not pairs:
                continue
            row: dict[str, Any] = {"op": op, "concurrency": concurrency}
            row["keel_per_s"] = statistics.median(k["per_s"] for k, _ in pairs)
            row["mastra_per_s"] = statistics.median(m["per_s"] for _, m in pairs)
            row["keel/mastra"] = statistics.median(k["per_s"] / m["per_s"] for k, m in pairs)
            if op == "latency":
                for name in ("ttfc", "ttft", "delta_latency"):
                    row[f"keel_{name}_p50"] = statistics.median(k[name]["p50"] for k, _ in pairs)
                    row[f"mastra_{name}_p50"] = statistics.median(m[name]["p50"] for _, m in pairs)
                row["ttfc keel/mastra"] = statistics.median(k["ttfc"]["p50"] / m["ttfc"]["p50"] for k, m in pairs)
            rows.append(row)
    return rows


def render(summary: list[dict[str, Any]]) -> str:
    lines = ["| operation | clients | Keel /s | Mastra /s | Keel/Mastra |", "|---|---|---|---|---|"]
    for row in summary:
        lines.append(
            f"| {row['op']} | {row['concurrency']} | {row['keel_per_s']:.1f} | {row['mastra_per_s']:.1f} |"
            f" {row['keel/mastra']:.2f} |"
        )
    for row in summary:
        if row["op"] == "latency":
            lines.append(
                f"\nlatency, {row['concurrency']} client(s): delta p50 Keel {row['keel_delta_latency_p50']:.1f} ms,"
                f" Mastra {row['mastra_delta_latency_p50']:.1f} ms; first chunk p50 Keel {row['keel_ttfc_p50']:.1f}"
                f" ms, Mastra {row['mastra_ttfc_p50']:.1f} ms (Keel/Mastra {row['ttfc keel/mastra']:.2f}); first"
                f" text-delta p50 Keel {row['keel_ttft_p50']:.1f} ms, Mastra {row['mastra_ttft_p50']:.1f} ms"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--count", type=int, default=40, help="operations per measurement with 1 client")
    parser.add_argument("--count-concurrent", type=int, default=200, help="operations with 20 clients")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument(
        "--keel",
        choices=("serve-worker", "serve"),
        default="serve-worker",
        help="Keel as `keel serve --worker` (the API and a worker in one process: runs start eagerly) or as "
        "`keel serve` with the worker in the bench's process",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "http_results.json")
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    args.out.write_text(json.dumps(result, indent=2))
    print(render(result["summary"]))


if __name__ == "__main__":
    main()
