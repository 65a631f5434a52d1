"""Record the histories that `tests/test_replay.py` replays: `make record-histories`.

Re-record only when a workflow change is meant to be incompatible *and* is guarded (workflow.patched); the old
files must keep replaying with the new code, so add new files rather than overwrite old ones.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client

from keel.client import KeelClient
from keel.client.devserver import DevServer, DevServerConfig
from keel.storage import SQLiteStorage
from keel.worker import build_worker
from keel.workflows import DATA_CONVERTER
from tests.apps import app
from tests.conftest import free_port

HISTORIES = Path(__file__).parent / "histories"


async def _approval(keel: KeelClient, run_id: str, approved: bool) -> None:
    while not (pending := await keel.pending_tool_calls(run_id)):
        await asyncio.sleep(0.05)
    await keel.approve(run_id, pending[0].tool_call_id, approved=approved)


async def _approved(keel: KeelClient, name: str) -> str:
    run_id = await keel.start_run("demo", "approve me", run_id=name)
    await _approval(keel, run_id, True)
    return run_id


async def _declined(keel: KeelClient, name: str) -> str:
    run_id = await keel.start_run("demo", "decline me", run_id=name)
    await _approval(keel, run_id, False)
    return run_id


async def _reused_ids(keel: KeelClient, name: str) -> str:
    run_id = await keel.start_run("reuser", "pay twice", run_id=name)
    for _ in range(2):
        await _approval(keel, run_id, True)
        while await keel.pending_tool_calls(run_id) or (await keel.describe(run_id)).status == "suspended":
            await asyncio.sleep(0.05)
    return run_id


async def _parallel_partial_approval(keel: KeelClient, name: str) -> str:
    run_id = await keel.start_run("payer", "pay both", run_id=name)
    await _approval(keel, run_id, False)
    return run_id


_SCENARIOS: dict[str, Callable[[KeelClient, str], Awaitable[str]]] = {
    "approved": _approved,
    "declined": _declined,
    "multi_step": lambda keel, name: keel.start_run("multi", "steps=3", run_id=name),
    "tool_errors": lambda keel, name: keel.start_run("mistakes", "go", run_id=name),
    "max_steps": lambda keel, name: keel.start_run("multi", "steps=5", max_steps=2, run_id=name),
    "reused_ids": _reused_ids,
    "parallel_partial_approval": _parallel_partial_approval,
}

GENERATIONS = ["", "_tools_then_model"]
"""One set of files per guarded workflow change (`workflow.patched`), named with its suffix: the files of
every generation must keep replaying. "" is the first: each tool call and model step its own activity."""

SCENARIOS = {name + gen: scenario for gen in GENERATIONS for name, scenario in _SCENARIOS.items()}
"""Each scenario starts a run named after it (and approves what it needs) and returns its id. Only missing files
are recorded, so only the newest generation's files are ever written."""


async def record() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["KEEL_DATA_DIR"] = tmp
        cfg = DevServerConfig(port=free_port(), ui_port=free_port(), state_dir=Path(tmp))
        server = await DevServer(cfg).start(reuse=False)
        storage = SQLiteStorage(Path(tmp) / "keel.db")
        await storage.init()
        try:
            client = await Client.connect(cfg.address, data_converter=DATA_CONVERTER)
            keel = KeelClient(client, task_queue="record", app=app)
            async with build_worker(client, app, storage, task_queue="record"):
                wanted = {name for name in SCENARIOS if not (HISTORIES / f"{name}.json").exists()}
                runs = {name: await SCENARIOS[name](keel, name) for name in sorted(wanted)}
                for run_id in runs.values():
                    await keel.result(run_id)
            HISTORIES.mkdir(exist_ok=True)
            for name, run_id in runs.items():
                history = await client.get_workflow_handle(run_id).fetch_history()
                (HISTORIES / f"{name}.json").write_text(history.to_json())
                print(f"recorded {name}: {len(history.events)} events")
        finally:
            await storage.close()
            server.stop()


if __name__ == "__main__":
    asyncio.run(record())
