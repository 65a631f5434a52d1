"""Keel's agent loop against a bare temporalio workflow, per step, on the default and the tuned dev server.

    .venv/bin/python -m bench.agent_steps [--quick] [--out bench/results.json] [--mastra]

For each server config (default dev server, then `tuned=True`) a fresh dev server is started on free ports with
its own state dir, and one in-process worker each for Keel (bench + demo agents, SQLite storage on a temp file)
and for the bare workflow (`bench.bare`) on separate task queues. Keel and bare repetitions are interleaved on
the same server; medians are reported. See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import Any

import temporalio
from temporalio.api.history.v1 import History
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.apps import app as bench_app
from bench.bare import BareInput, BareResult, BareRun, build_bare_worker
from bench.harness import free_port
from bench.side_by_side import TimedRun, interleaved, timed_run, worker_process
from keel.client import KeelClient
from keel.client.connection import connect
from keel.client.devserver import TUNED_DYNAMIC_CONFIG, DevServer, DevServerConfig
from keel.plugin import SANDBOX_ENV, keel_workflows_runner
from keel.storage import SQLiteStorage
from keel.worker import build_worker

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MASTRA_DIR = HERE / "mastra"


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Runner:
    """Starts Keel and bare runs on one server and times them."""

    def __init__(self, keel: KeelClient, bare_client: Client, bare_queue: str) -> None:
        self.keel = keel
        self.bare_client = bare_client
        self.bare_queue = bare_queue

    async def keel_run(self, steps: int, *, queue: str | None = None) -> tuple[float, str]:
        keel = self.keel if queue is None else KeelClient(self.keel.temporal, task_queue=queue, app=self.keel.app)
        return await timed_run(keel, steps)

    async def bare_run(self, steps: int, *, model_local: bool = False, fused: bool = False) -> tuple[float, str]:
        wf_id = f"bare-{uuid.uuid4()}"
        t0 = time.perf_counter()
        handle = await self.bare_client.start_workflow(
            BareRun.run,
            BareInput(steps=steps, model_local=model_local, fused=fused),
            id=wf_id,
            task_queue=self.bare_queue,
        )
        result: BareResult = await handle.result()
        elapsed = time.perf_counter() - t0
        if result.steps != steps:
            raise RuntimeError(f"bare run {wf_id}: {result.steps} steps")
        return elapsed, wf_id

    async def history(self, client: Client, wf_id: str) -> tuple[int, int]:
        hist = await client.get_workflow_handle(wf_id).fetch_history()
        return len(hist.events), len(History(events=hist.events).SerializeToString())

    async def approve_latency(self) -> tuple[float, float]:
        """Demo agent: start, wait for the pending call, then time approve() and approve()+result()."""
        run_id = await self.keel.start_run("demo", "remember the milk")
        deadline = time.monotonic() + 30
        while True:
            pending = await self.keel.pending_tool_calls(run_id)
            if pending:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"demo run {run_id} never asked for approval")
            await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        await self.keel.approve(run_id, pending[0].tool_call_id)
        t1 = time.perf_counter()
        result = await self.keel.result(run_id)
        t2 = time.perf_counter()
        if "Saved your note" not in result.text:
            raise RuntimeError(f"demo run {run_id}: unexpected text {result.text!r}")
        return (t1 - t0), (t2 - t0)

    async def throughput(self, run: Callable[[], Awaitable[Any]], total: int, concurrency: int) -> float:
        sem = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with sem:
                await run()

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(total)))
        return total / (time.perf_counter() - t0)


async def bench_server(tuned: bool, args: argparse.Namespace) -> dict[str, Any]:
    label = "tuned" if tuned else "default"
    tmp = Path(tempfile.mkdtemp(prefix=f"keel-bench-{label}-"))
    os.environ["KEEL_DATA_DIR"] = str(tmp / "data")  # the demo agent's notes
    os.environ["KEEL_BENCH_DIR"] = str(tmp / "files")
    cfg = DevServerConfig(
        host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp / "temporal", tuned=tuned
    )
    log(f"[{label}] starting dev server on {cfg.address} (state {cfg.state_dir})")
    server = DevServer(cfg)
    out: dict[str, Any] = {
        "server": label,
        "dynamic_config": TUNED_DYNAMIC_CONFIG if tuned else {},
    }
    storage = SQLiteStorage(tmp / "keel.db")
    try:
        await server.start(reuse=False)
        keel_client = await connect(cfg.address, payloads=storage.payloads())
        bare_client = await Client.connect(cfg.address, data_converter=pydantic_data_converter)
        await storage.init()
        keel_queue, bare_queue = f"bench-keel-{uuid.uuid4()}", f"bench-bare-{uuid.uuid4()}"
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(build_worker(keel_client, bench_app, storage, task_queue=keel_queue))
            await stack.enter_async_context(build_bare_worker(bare_client, bare_queue))
            r = Runner(KeelClient(keel_client, task_queue=keel_queue, app=bench_app), bare_client, bare_queue)
            subprocess_queues: dict[str, str] = {}
            if args.baseline:
                # Before/after in the same run: this checkout's worker and the baseline checkout's, each in a
                # process of its own, driven by the same client side by side with the in-process workers.
                for who, checkout in (("keel_sub", REPO), ("baseline_sub", args.baseline)):
                    subprocess_queues[who] = await stack.enter_async_context(
                        worker_process(cfg.address, tmp / who, checkout=checkout)
                    )

            log(f"[{label}] warm-up")
            for _ in range(2):
                await r.keel_run(2)
                await r.bare_run(2)
                await r.bare_run(2, model_local=True)
                await r.bare_run(2, fused=True)
                for queue in subprocess_queues.values():
                    await r.keel_run(2, queue=queue)

            # --- ms per step -----------------------------------------------------------------------------
            steps_rows = []
            for n in args.steps:
                runners: dict[str, TimedRun] = {
                    "keel": partial(r.keel_run, n),
                    "bare": partial(r.bare_run, n),
                    "bare_la": partial(r.bare_run, n, model_local=True),
                    "bare_fused": partial(r.bare_run, n, fused=True),
                    **{who: partial(r.keel_run, n, queue=queue) for who, queue in subprocess_queues.items()},
                }
                secs, ids = await interleaved(runners, args.reps if n >= 50 else args.reps_small)
                keel_ev, keel_bytes = await r.history(keel_client, ids["keel"][-1])
                bare_ev, bare_bytes = await r.history(bare_client, ids["bare"][-1])
                bare_la_ev, bare_la_bytes = await r.history(bare_client, ids["bare_la"][-1])
                keel_ms, bare_ms, bare_la_ms, bare_fused_ms = (
                    med(secs[who]) * 1000 / n for who in ("keel", "bare", "bare_la", "bare_fused")
                )
                row = {
                    "n": n,
                    "keel_ms_per_step": keel_ms,
                    "bare_ms_per_step": bare_ms,
                    "keel_over_bare": keel_ms / bare_ms,
                    "bare_local_model_ms_per_step": bare_la_ms,
                    "keel_over_bare_local_model": keel_ms / bare_la_ms,
                    "bare_fused_ms_per_step": bare_fused_ms,
                    "keel_over_bare_fused": keel_ms / bare_fused_ms,
                    "keel_run_seconds": secs["keel"],
                    "bare_run_seconds": secs["bare"],
                    "bare_local_model_run_seconds": secs["bare_la"],
                    "bare_fused_run_seconds": secs["bare_fused"],
                    "keel_history_events": keel_ev,
                    "keel_history_bytes": keel_bytes,
                    "keel_events_per_step": keel_ev / n,
                    "keel_bytes_per_step": keel_bytes / n,
                    "bare_history_events": bare_ev,
                    "bare_history_bytes": bare_bytes,
                    "bare_local_model_history_events": bare_la_ev,
                    "bare_local_model_history_bytes": bare_la_bytes,
                }
                if subprocess_queues:
                    keel_sub, baseline_sub = (med(secs[w]) * 1000 / n for w in ("keel_sub", "baseline_sub"))
                    row |= {
                        "keel_subprocess_ms_per_step": keel_sub,
                        "baseline_subprocess_ms_per_step": baseline_sub,
                        "keel_over_baseline": keel_sub / baseline_sub,
                        "keel_subprocess_over_bare_fused": keel_sub / bare_fused_ms,
                        "baseline_subprocess_over_bare_fused": baseline_sub / bare_fused_ms,
                        "keel_subprocess_run_seconds": secs["keel_sub"],
                        "baseline_subprocess_run_seconds": secs["baseline_sub"],
                    }
                    log(
                        f"[{label}] N={n}: keel (own process) {keel_sub:.1f} ms/step, baseline {baseline_sub:.1f} "
                        f"(keel/baseline {keel_sub / baseline_sub:.3f})"
                    )
                steps_rows.append(row)
                log(
                    f"[{label}] N={n}: keel {keel_ms:.1f} ms/step, bare {bare_ms:.1f}, bare(LA model) "
                    f"{bare_la_ms:.1f}, bare(fused) {bare_fused_ms:.1f}; keel history {keel_ev} events / {keel_bytes} B"
                )
            out["steps"] = steps_rows
            if len(steps_rows) >= 2:
                lo, hi = steps_rows[0], steps_rows[-1]
                dn = hi["n"] - lo["n"]
                out["keel_marginal_per_step"] = {
                    "from_n": lo["n"],
                    "to_n": hi["n"],
                    "events": (hi["keel_history_events"] - lo["keel_history_events"]) / dn,
                    "bytes": (hi["keel_history_bytes"] - lo["keel_history_bytes"]) / dn,
                }
                out["bare_marginal_per_step"] = {
                    "events": (hi["bare_history_events"] - lo["bare_history_events"]) / dn,
                    "bytes": (hi["bare_history_bytes"] - lo["bare_history_bytes"]) / dn,
                }

            # --- approve to completion ----------------------------------------------------------------------
            approve_only, approve_total = [], []
            for _ in range(args.approvals):
                a, b = await r.approve_latency()
                approve_only.append(a)
                approve_total.append(b)
            out["approve"] = {
                "reps": args.approvals,
                "approve_ms": med(approve_only) * 1000,
                "approve_to_result_ms": med(approve_total) * 1000,
                "approve_to_result_ms_all": [x * 1000 for x in approve_total],
            }
            log(f"[{label}] approve->result {out['approve']['approve_to_result_ms']:.1f} ms")

            # --- throughput --------------------------------------------------------------------------------
            tp: dict[str, list[float]] = {"keel": [], "bare": []}
            for rep in range(args.tp_reps):
                pair = [("keel", lambda: r.keel_run(1)), ("bare", lambda: r.bare_run(1))]
                for who, fn in pair if rep % 2 == 0 else pair[::-1]:
                    tp[who].append(await r.throughput(fn, args.tp_runs, args.concurrency))
            out["throughput"] = {
                "runs": args.tp_runs,
                "concurrency": args.concurrency,
                "n": 1,
                "keel_runs_per_s": med(tp["keel"]),
                "bare_runs_per_s": med(tp["bare"]),
                "keel_over_bare": med(tp["keel"]) / med(tp["bare"]),
                "keel_all": tp["keel"],
                "bare_all": tp["bare"],
            }
            log(f"[{label}] throughput keel {med(tp['keel']):.1f} runs/s, bare {med(tp['bare']):.1f} runs/s")
    finally:
        await storage.close()
        server.stop()
        log(f"[{label}] dev server stopped")
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def run_mastra(steps: list[int], reps: int) -> dict[str, Any]:
    """npm install (if needed) and run bench/mastra/loop.mjs; returns its JSON or an error."""
    if not (MASTRA_DIR / "loop.mjs").exists():
        return {"error": "bench/mastra/loop.mjs is missing"}
    if shutil.which("node") is None or shutil.which("npm") is None:
        return {"error": "node/npm not found"}
    if not (MASTRA_DIR / "node_modules").exists():
        log("[mastra] npm install ...")
        proc = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund"],
            cwd=MASTRA_DIR,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            return {"error": f"npm install failed: {proc.stderr.strip()[-500:]}"}
    log("[mastra] node loop.mjs ...")
    proc = subprocess.run(
        ["node", "loop.mjs", "--steps", ",".join(map(str, steps)), "--reps", str(reps)],
        cwd=MASTRA_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        return {"error": f"node loop.mjs failed: {proc.stderr.strip()[-800:]}"}
    try:
        parsed: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return parsed
    except (ValueError, IndexError):
        return {"error": f"unparseable output: {proc.stdout[-500:]}"}


def render(results: dict[str, Any]) -> str:
    lines = [f"workflow runner (Keel and bare): {results['params']['workflow_runner']}"]
    for srv in results["servers"]:
        cfg = ", ".join(f"{k}={v}" for k, v in srv["dynamic_config"].items()) or "no dynamic config"
        lines.append(f"\n== {srv['server']} dev server ({cfg}) ==")
        lines.append(
            f"{'N':>4} | {'Keel ms/step':>12} | {'bare ms/step':>12} | {'Keel/bare':>9} | "
            f"{'bare(LA) ms/step':>16} | {'Keel/bare(LA)':>13} | {'bare(fused) ms/step':>19} | "
            f"{'Keel/bare(fused)':>16} | {'Keel ev/step':>12} | {'Keel B/step':>11}"
        )
        lines.append("-" * 155)
        for row in srv["steps"]:
            lines.append(
                f"{row['n']:>4} | {row['keel_ms_per_step']:>12.1f} | {row['bare_ms_per_step']:>12.1f} | "
                f"{row['keel_over_bare']:>9.2f} | {row['bare_local_model_ms_per_step']:>16.1f} | "
                f"{row['keel_over_bare_local_model']:>13.2f} | {row['bare_fused_ms_per_step']:>19.1f} | "
                f"{row['keel_over_bare_fused']:>16.2f} | {row['keel_events_per_step']:>12.1f} | "
                f"{row['keel_bytes_per_step']:>11.0f}"
            )
        m = srv.get("keel_marginal_per_step")
        if m:
            b = srv["bare_marginal_per_step"]
            lines.append(
                f"Keel history, marginal cost per extra step (N={m['from_n']}->{m['to_n']}): "
                f"{m['events']:.1f} events, {m['bytes']:.0f} bytes  "
                f"(bare: {b['events']:.1f} events, {b['bytes']:.0f} bytes)"
            )
        if any("keel_over_baseline" in row for row in srv["steps"]):
            lines.append(f"Before/after, each worker in its own process (baseline: {results['params']['baseline']}):")
            for row in srv["steps"]:
                lines.append(
                    f"  N={row['n']:>3}: Keel {row['keel_subprocess_ms_per_step']:.1f} ms/step, baseline "
                    f"{row['baseline_subprocess_ms_per_step']:.1f} -> Keel/baseline {row['keel_over_baseline']:.3f}; "
                    f"over bare(fused): Keel {row['keel_subprocess_over_bare_fused']:.2f}, baseline "
                    f"{row['baseline_subprocess_over_bare_fused']:.2f}"
                )
        a = srv["approve"]
        lines.append(
            f"Approve -> completion (demo agent, median of {a['reps']}): {a['approve_to_result_ms']:.1f} ms "
            f"(approve() update alone {a['approve_ms']:.1f} ms)"
        )
        t = srv["throughput"]
        lines.append(
            f"Throughput, {t['runs']} runs of N=1, {t['concurrency']} in flight (median of {len(t['keel_all'])}): "
            f"Keel {t['keel_runs_per_s']:.1f} runs/s, "
            f"bare {t['bare_runs_per_s']:.1f} runs/s (Keel/bare {t['keel_over_bare']:.2f})"
        )
    mastra = results.get("mastra")
    if mastra:
        lines.append("\n== Mastra (in-process Agent loop, mock model, no durability) ==")
        if "error" in mastra:
            lines.append(f"skipped: {mastra['error']}")
        else:
            lines.append(f"@mastra/core {mastra.get('mastra_version')}, node {mastra.get('node')}")
            by_n = {s["n"]: s for s in mastra["steps"]}
            for srv in results["servers"]:
                for row in srv["steps"]:
                    mrow = by_n.get(row["n"])
                    if mrow:
                        ratio = row["keel_ms_per_step"] / mrow["ms_per_step"]
                        lines.append(
                            f"N={row['n']:>3}: Mastra {mrow['ms_per_step']:.2f} ms/step; Keel ({srv['server']}) "
                            f"{row['keel_ms_per_step']:.1f} ms/step -> Keel/Mastra {ratio:.1f}x"
                        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "temporalio": temporalio.__version__,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "params": {
            "quick": args.quick,
            "steps": args.steps,
            "reps_n50": args.reps,
            "reps_n_below_50": args.reps_small,
            "approvals": args.approvals,
            "throughput_runs": args.tp_runs,
            "throughput_reps": args.tp_reps,
            "concurrency": args.concurrency,
            "workflow_runner": type(keel_workflows_runner()).__name__,
            "baseline": str(args.baseline) if args.baseline else None,
        },
        "servers": [],
    }
    t0 = time.perf_counter()
    for tuned in args.servers:
        results["servers"].append(await bench_server(tuned, args))
    if args.mastra:
        results["mastra"] = run_mastra(args.steps, args.reps_small)
    results["wall_seconds"] = time.perf_counter() - t0
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.agent_steps", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="N=1,10; 1 rep; fewer approvals and runs (~30 s)")
    parser.add_argument("--out", default=str(HERE / "results.json"), help="where to write the JSON results")
    parser.add_argument("--mastra", action="store_true", help="also run bench/mastra/loop.mjs (npm install first)")
    parser.add_argument("--server", choices=["both", "default", "tuned"], default="both")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of an earlier commit, installed (`make test-install`; `make install` before 530bc22): its "
        "worker and this one's, each in its own process, are measured side by side in the same run",
    )
    parser.add_argument(
        "--sandboxed", action="store_true", help="run both workers' workflows in Temporal's sandbox (as the tests do)"
    )
    args = parser.parse_args(argv)
    if args.sandboxed:
        os.environ[SANDBOX_ENV] = "1"
    if args.quick:
        args.steps, args.reps, args.reps_small, args.approvals, args.tp_runs, args.tp_reps = [1, 10], 1, 1, 3, 40, 1
    else:
        args.steps, args.reps, args.reps_small, args.approvals, args.tp_runs, args.tp_reps = (
            [1, 10, 50],
            3,
            5,
            5,
            100,
            2,
        )
    args.concurrency = 20
    args.servers = {"both": [False, True], "default": [False], "tuned": [True]}[args.server]
    results = asyncio.run(main_async(args))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(render(results))
    print(f"\n(total {results['wall_seconds']:.0f} s; JSON written to {args.out})", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # sdk-python#300: a Temporal client process can crash at interpreter exit


if __name__ == "__main__":
    main()
