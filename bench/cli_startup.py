"""What a `keel` command costs as a whole process, side by side with bare Python and temporalio doing the same RPC.

    .venv/bin/python -m bench.cli_startup [--reps 15] [--out bench/cli_startup.json] [--before DIR]

A fresh dev server (free ports, its own temp state dir) with a few open agent runs of the demo agent (no worker
polls their queue, so they stay running). Then every case below runs as a process of its own, `--reps` times,
interleaved (the order rotates each repetition, after one warm-up round that is not counted), each timed with a
process timer: wall time from spawning it to reaping it, and its CPU time (user + system) from `os.wait4`.
Medians are reported, and the ratios the acceptance of issue D3 asks for. Keel's modules are byte-compiled first
(`compile_sources`), as an installed package's are.

    python -c pass              the interpreter alone
    import temporalio.client    `python -c "import temporalio.client"`
    bare runs                   imports temporalio.client, connects, sends `keel runs`'s `list_workflows` query
    bare counts                 the same with `keel counts`'s `count_workflows` queries (all at once, as it sends
                                them)
    keel --version / runs / counts
    keel counts --reload        `keel counts` importing the app (as its first call, and after the app changed,
                                does: `keel.client.app_outline`)
    temporal --version          the Temporal CLI (a Go binary), for reference

`--before DIR` also runs the three `keel` commands from DIR, a copy of an earlier tree (`git archive <rev> | tar
-x -C DIR`), first on `PYTHONPATH`, so before and after are measured in the same run with the same interpreter.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import free_port
from keel.app import load_app
from keel.client import KeelClient
from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.storage import DirectoryBlobStore

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
OPEN_RUNS = 5
RUNS_LIMIT = 50  # `keel runs`' default --limit

BARE_RUNS = """
import asyncio, os, sys
from temporalio.client import Client

async def main():
    client = await Client.connect(os.environ["KEEL_TEMPORAL_ADDRESS"])
    async for ex in client.list_workflows(sys.argv[1], limit=int(sys.argv[2])):
        print(ex.id)

asyncio.run(main())
sys.stdout.flush()
os._exit(0)
"""

BARE_COUNTS = """
import asyncio, json, os, sys
from temporalio.client import Client

async def main():
    client = await Client.connect(os.environ["KEEL_TEMPORAL_ADDRESS"])
    counts = await asyncio.gather(*(client.count_workflows(q) for q in json.loads(sys.argv[1])))
    print([c.count for c in counts])

asyncio.run(main())
sys.stdout.flush()
os._exit(0)
"""


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    env: dict[str, str]
    expect: str = ""
    """Text its stdout must contain (checked in the warm-up round)."""


@dataclass(frozen=True)
class Sample:
    wall: float
    cpu: float


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_once(case: Case, cwd: Path) -> tuple[Sample, str]:
    """Run the case's process to its end; its wall time, its CPU time from `os.wait4`, and its stdout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(case.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=case.env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{case.name} exited with {proc.returncode}: {stderr.strip() or stdout.strip()}")
    return Sample(wall, usage.ru_utime + usage.ru_stime), stdout


def cases(address: str, data_dir: Path, run_ids: list[str], before: Path | None) -> list[Case]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_") and k != "PYTHONPATH"}
    env |= {"KEEL_TEMPORAL_ADDRESS": address, "KEEL_DATA_DIR": str(data_dir)}
    python, keel, temporal = str(BIN / "python"), str(BIN / "keel"), str(BIN / "temporal")
    runs_query = KeelClient._runs_query(status=None, agent_id=None)
    count_queries = [
        KeelClient._runs_query(status=status, agent_id=agent)
        for agent in load_app("keel.app.demo:app").agents  # the children's app: their environment has no KEEL_APP
        for status in ("running", "suspended")
    ]
    first = run_ids[0]
    found: list[Case] = [
        Case("python -c pass", [python, "-c", "pass"], env),
        Case("import temporalio.client", [python, "-c", "import temporalio.client"], env),
        Case("bare runs", [python, "-c", BARE_RUNS, runs_query, str(RUNS_LIMIT)], env, first),
        Case("bare counts", [python, "-c", BARE_COUNTS, json.dumps(count_queries)], env, str(len(run_ids))),
        Case("keel --version", [keel, "--version"], env, "keel "),
        Case("keel runs", [keel, "runs"], env, first),
        Case("keel counts", [keel, "counts"], env, f"running={len(run_ids)}"),
        Case("keel counts --reload", [keel, "counts", "--reload"], env, f"running={len(run_ids)}"),
        Case("temporal --version", [temporal, "--version"], env, "temporal version"),
    ]
    if before is not None:
        old = env | {"PYTHONPATH": str(before)}
        found += [
            Case("keel --version (before)", [keel, "--version"], old, "keel "),
            Case("keel runs (before)", [keel, "runs"], old, first),
            Case("keel counts (before)", [keel, "counts"], old, f"running={len(run_ids)}"),
        ]
    return found


async def open_runs(address: str, payloads: Path) -> list[str]:
    """A few running runs of the demo agent, on a queue no worker polls: what `keel runs` lists."""
    client = await connect(address, payloads=DirectoryBlobStore(payloads))
    keel = KeelClient(client, task_queue="bench-cli-startup")
    ids = [await keel.start_run("demo", f"hello {i}") for i in range(OPEN_RUNS)]
    while (await client.count_workflows("KeelKind='agent' AND CloseTime IS NULL")).count < OPEN_RUNS:
        await asyncio.sleep(0.2)  # visibility catches up
    return ids


def measure(all_cases: list[Case], reps: int, cwd: Path) -> dict[str, list[Sample]]:
    samples: dict[str, list[Sample]] = {c.name: [] for c in all_cases}
    for case in all_cases:  # warm-up round (byte-code caches, page cache), checked, not counted
        _, stdout = run_once(case, cwd)
        if case.expect not in stdout:
            raise SystemExit(f"{case.name}: expected {case.expect!r} in its output, got {stdout!r}")
    for rep in range(reps):
        shift = rep % len(all_cases)
        for case in all_cases[shift:] + all_cases[:shift]:
            samples[case.name].append(run_once(case, cwd)[0])
        log(f"  repetition {rep + 1}/{reps}")
    return samples


def med(values: list[float]) -> float:
    return statistics.median(values)


def summarize(samples: dict[str, list[Sample]]) -> dict[str, Any]:
    medians = {
        name: {
            "wall_ms": med([s.wall for s in got]) * 1000,
            "cpu_ms": med([s.cpu for s in got]) * 1000,
        }
        for name, got in samples.items()
    }

    def ratio(a: str, b: str) -> dict[str, float] | None:
        if a not in medians or b not in medians:
            return None
        return {k: medians[a][k] / medians[b][k] for k in ("wall_ms", "cpu_ms")}

    ratios = {
        "keel runs / bare runs": ratio("keel runs", "bare runs"),
        "keel counts / bare counts": ratio("keel counts", "bare counts"),
        "keel counts --reload / bare counts": ratio("keel counts --reload", "bare counts"),
        "keel runs / import temporalio.client": ratio("keel runs", "import temporalio.client"),
        "keel --version / python -c pass": ratio("keel --version", "python -c pass"),
        "keel --version / temporal --version": ratio("keel --version", "temporal --version"),
        "keel --version: after / before": ratio("keel --version", "keel --version (before)"),
        "keel runs: after / before": ratio("keel runs", "keel runs (before)"),
        "keel counts: after / before": ratio("keel counts", "keel counts (before)"),
    }
    return {"medians": medians, "ratios": {k: v for k, v in ratios.items() if v is not None}}


def table(summary: dict[str, Any], reps: int) -> str:
    lines = [
        f"medians of {reps} processes each, interleaved",
        "",
        "| process | wall ms | CPU ms |",
        "|---|---:|---:|",
    ]
    for name, m in summary["medians"].items():
        lines.append(f"| {name} | {m['wall_ms']:.0f} | {m['cpu_ms']:.0f} |")
    lines += ["", "| ratio | wall | CPU |", "|---|---:|---:|"]
    for name, r in summary["ratios"].items():
        lines.append(f"| {name} | {r['wall_ms']:.2f} | {r['cpu_ms']:.2f} |")
    version = summary["medians"]["keel --version"]["wall_ms"]
    lines += [
        "",
        f"acceptance: keel --version {version:.0f} ms wall (<= 100 ms: {'yes' if version <= 100 else 'NO'}); "
        + "; ".join(
            f"{name} {summary['ratios'][name]['wall_ms']:.2f} wall (<= 1.2: "
            f"{'yes' if summary['ratios'][name]['wall_ms'] <= 1.2 else 'NO'})"
            for name in ("keel runs / bare runs", "keel counts / bare counts")
        ),
    ]
    return "\n".join(lines)


def compile_sources(*trees: Path) -> None:
    """Byte-compile Keel's modules in `trees`, as installing a package does: with PYTHONDONTWRITEBYTECODE set (as
    on these machines) an editable checkout is otherwise compiled from source by every process, while its
    dependencies load compiled (~20 ms of `keel runs`). Stale files are compiled again; nothing else changes."""
    for tree in trees:
        subprocess.run([str(BIN / "python"), "-m", "compileall", "-q", str(tree / "keel")], check=True)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    compile_sources(HERE.parent, *([args.before] if args.before else []))
    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-cli-"))
    cfg = DevServerConfig(host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp / "temporal")
    server = DevServer(cfg)
    try:
        await server.start(reuse=False)
        data_dir = tmp / "data"
        run_ids = await open_runs(cfg.address, data_dir / "payloads")
        all_cases = cases(cfg.address, data_dir, run_ids, args.before)
        log(f"dev server at {cfg.address}, {len(run_ids)} open runs; {len(all_cases)} cases x {args.reps} ...")
        t0 = time.perf_counter()
        samples = await asyncio.to_thread(measure, all_cases, args.reps, tmp)
        wall = time.perf_counter() - t0
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    summary = summarize(samples)
    return {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "params": {"reps": args.reps, "open_runs": OPEN_RUNS, "before": str(args.before) if args.before else None},
        **summary,
        "samples": {
            name: [{"wall_ms": s.wall * 1000, "cpu_ms": s.cpu * 1000} for s in got] for name, got in samples.items()
        },
        "wall_seconds": wall,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_startup", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--reps", type=int, default=15, help="processes per case (default 15)")
    parser.add_argument("--out", type=Path, default=HERE / "cli_startup.json", help="where to write the JSON")
    parser.add_argument("--before", type=Path, help="an earlier tree, measured side by side (its keel on PYTHONPATH)")
    args = parser.parse_args(argv)
    results = asyncio.run(main_async(args))
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results, args.reps))
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300


if __name__ == "__main__":
    main()
