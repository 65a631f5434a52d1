"""Experiment: what re-importing Keel's contract models in the workflow sandbox costs per run.

    .venv/bin/python -m bench.sandbox_passthrough

The sandbox re-imports every non-passthrough module for each new workflow instance. `workflows.contracts`
defines ~30 pydantic models, so each `AgentRun` start rebuilds their schemas (~45 ms of CPU on this machine,
`python -X importtime -c "import workflows.contracts"`). This runs the bench agent on a tuned dev server twice:
with Keel's runner as shipped (`worker.workflow_runner()`), then with a runner that also passes the
deterministic `workflows.*` support modules through. Only this process is patched; no Keel file is changed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from temporalio.client import Client
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

import worker as worker_module
from bench.agent_steps import Runner, free_port
from bench.apps import app
from client import KeelClient
from client.devserver import DevServer, DevServerConfig
from storage import SQLiteStorage
from workflows import DATA_CONVERTER

PASSTHROUGH = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "workflows.contracts",
    "workflows.options",
    "workflows.search_attributes",
    "workflows.converter",
)


def passthrough_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH))


async def measure(
    client: Client, storage: SQLiteStorage, runner_factory: Callable[[], SandboxedWorkflowRunner], label: str
) -> dict[str, float]:
    queue = f"bench-sp-{uuid.uuid4()}"
    original = worker_module.workflow_runner
    worker_module.workflow_runner = runner_factory
    try:
        w = worker_module.build_worker(client, app, storage, task_queue=queue)
    finally:
        worker_module.workflow_runner = original
    async with w:
        r = Runner(KeelClient(client, task_queue=queue, app=app), client, "unused")
        for _ in range(3):
            await r.keel_run(2)
        n1 = [(await r.keel_run(1))[0] * 1000 for _ in range(7)]
        n10 = [(await r.keel_run(10))[0] * 100 for _ in range(3)]
        tp = [await r.throughput(lambda: r.keel_run(1), 100, 20) for _ in range(2)]
    out = {
        "n1_ms": statistics.median(n1),
        "n10_ms_per_step": statistics.median(n10),
        "runs_per_s_20_in_flight": statistics.median(tp),
    }
    print(
        f"{label:<40} N=1 {out['n1_ms']:6.1f} ms/run | N=10 {out['n10_ms_per_step']:5.1f} ms/step | "
        f"{out['runs_per_s_20_in_flight']:5.1f} runs/s (N=1, 20 in flight)",
        flush=True,
    )
    return out


async def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-sp-"))
    os.environ["KEEL_BENCH_DIR"] = str(tmp / "files")
    cfg = DevServerConfig(host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp / "t", tuned=True)
    server = DevServer(cfg)
    storage = SQLiteStorage(tmp / "keel.db")
    try:
        await server.start(reuse=False)
        await storage.init()
        client = await Client.connect(cfg.address, data_converter=DATA_CONVERTER)
        t0 = time.perf_counter()
        await measure(client, storage, worker_module.workflow_runner, "as shipped (contracts re-imported)")
        await measure(client, storage, passthrough_runner, "workflows.* support modules passed through")
        await measure(client, storage, worker_module.workflow_runner, "as shipped (again)")
        print(f"({time.perf_counter() - t0:.0f} s)")
    finally:
        await storage.close()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300
