"""The AgentRun workflow against a real dev server: approval by update and signal, results, visibility."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from app.demo import app as demo_app
from client import KeelClient
from storage import Storage
from tests.conftest import running_worker


async def wait_for_pending(keel: KeelClient, run_id: str, timeout: float = 20) -> list[str]:
    async with asyncio.timeout(timeout):
        while True:
            pending = await keel.pending_tool_calls(run_id)
            if pending:
                return [p.tool_call_id for p in pending]
            await asyncio.sleep(0.05)


async def test_approved_demo_run_runs_the_tool_and_reports_its_result(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, demo_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "remember the milk")
        [call_id] = await wait_for_pending(keel, run_id)
        accepted = await keel.approve(run_id, call_id)
        assert accepted.tool_call_id == call_id
        result = await keel.result(run_id)
    assert result.finish_reason == "stop"
    assert "Tool result" in result.text and "demo.md" in result.text
    assert (data_dir / "notes" / "demo.md").read_text() == "remember the milk"
    assert [r.payload.result["bytes"] for r in result.tool_results] == [len("remember the milk")]


async def test_declined_tool_call_never_runs_the_tool(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, demo_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "secret")
        [call_id] = await wait_for_pending(keel, run_id)
        await keel.decline(run_id, call_id)
        result = await keel.result(run_id)
    assert "declined" in result.text
    assert not (data_dir / "notes").exists()
