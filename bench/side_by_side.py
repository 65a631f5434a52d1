"""Sides measured in one run (bench/agent_steps.py, bench/tracing_steps.py): a Keel worker for the bench app in a
process of its own, the bench agent's run timed, and the sides' repetitions interleaved."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

from keel.client import KeelClient

REPO = Path(__file__).resolve().parent.parent

TimedRun = Callable[[], Awaitable[tuple[float, str]]]
"""One run of a side: its seconds and its id."""


@contextlib.asynccontextmanager
async def worker_process(
    address: str,
    state: Path,
    env: Mapping[str, str] | None = None,
    *,
    checkout: Path = REPO,
    pids: list[int] | None = None,
) -> AsyncIterator[str]:
    """A Keel worker for the bench app (`bench/apps.py`) in a process of its own, on a task queue of its own, its
    storage and files in `state`; yields the queue (and appends its pid to `pids`). Run from `checkout`: this one
    on this interpreter, another on its own `.venv`. Its environment is this process's without `OTEL_*` (it traces
    only when `env` says so), then `env`. Stopped with SIGTERM: a clean stop, a traced worker exports what it still
    buffers."""
    queue = f"bench-sub-{uuid.uuid4()}"
    state.mkdir(parents=True, exist_ok=True)
    python = sys.executable if checkout == REPO else str(checkout / ".venv" / "bin" / "python")
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "KEEL_TEMPORAL_ADDRESS": address,
        "KEEL_STORAGE_URL": f"sqlite:///{state / 'keel.db'}",
        "KEEL_DATA_DIR": str(state / "data"),
        "KEEL_BENCH_DIR": str(state / "files"),
        **(env or {}),
    }
    proc = await asyncio.create_subprocess_exec(
        python, "worker.py", "--app", "bench.apps:app", "--task-queue", queue,
        cwd=checkout, env=full_env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if b"keel worker:" not in line:
            raise RuntimeError(
                f"worker from {checkout} did not start: {line.decode()}{(await proc.stdout.read()).decode()}"
            )
        if pids is not None:
            pids.append(proc.pid)
        yield queue
    finally:
        proc.terminate()
        await proc.wait()


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user + system, all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed_run(keel: KeelClient, steps: int) -> tuple[float, str]:
    """The bench agent's run of `steps` tool steps (and a last model step), start to result: seconds and run id."""
    t0 = time.perf_counter()
    run_id = await keel.start_run("bench", f"steps={steps}", max_steps=steps + 1)
    result = await keel.result(run_id)
    elapsed = time.perf_counter() - t0
    if result.steps != steps + 1 or len(result.tool_results) != steps:
        raise RuntimeError(f"keel run {run_id}: {result.steps} steps, {len(result.tool_results)} tool results")
    return elapsed, run_id


async def interleaved(sides: Mapping[str, TimedRun], reps: int) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    """Each side's run `reps` times, the sides interleaved and their order rotating each repetition (so no side
    always runs first after a pause); the seconds and the ids of each side's runs, in order."""
    secs: dict[str, list[float]] = {who: [] for who in sides}
    ids: dict[str, list[str]] = {who: [] for who in sides}
    for rep in range(reps):
        order = list(sides)
        order = order[rep % len(order) :] + order[: rep % len(order)]
        for who in order:
            elapsed, run_id = await sides[who]()
            secs[who].append(elapsed)
            ids[who].append(run_id)
    return secs, ids


__all__ = ["REPO", "TimedRun", "interleaved", "timed_run", "worker_process"]
