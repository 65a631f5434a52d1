"""The real `temporal` CLI as an independent client: start, list suspended, query, approve by signal."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from keel.client.devserver import DevServer, wait_for_ui
from keel.storage import Storage
from tests.apps import app as test_app
from tests.conftest import running_worker
from tests.test_agent_run import wait_for_pending

TEMPORAL = str(Path(sys.executable).parent / "temporal")


async def temporal(dev_server: DevServer, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        TEMPORAL, *args, "--address", dev_server.cfg.address,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def start_and_wait_suspended(dev_server: DevServer, task_queue: str, message: str) -> tuple[str, str]:
    run_id = f"cli-{uuid.uuid4()}"
    await temporal(
        dev_server, "workflow", "start", "--type", "AgentRun", "--task-queue", task_queue, "--workflow-id", run_id,
        "--input", json.dumps({"agentId": "demo", "messages": message}),
    )  # fmt: skip
    query = f"KeelStatus='suspended' AND WorkflowId='{run_id}'"
    async with asyncio.timeout(20):
        while not json.loads(await temporal(dev_server, "workflow", "list", "--query", query, "-o", "json") or "[]"):
            await asyncio.sleep(0.1)
    pending = json.loads(
        await temporal(dev_server, "workflow", "query", "-w", run_id, "--type", "pending_tool_calls", "-o", "json")
    )
    [call] = pending["queryResult"][0]
    assert call["toolName"] == "save_note" and call["args"]["text"] == message
    return run_id, call["toolCallId"]


async def signal_and_wait(dev_server: DevServer, run_id: str, call_id: str, approved: bool) -> str:
    await temporal(
        dev_server, "workflow", "signal", "-w", run_id, "--name", "tool_approval",
        "--input", json.dumps({"toolCallId": call_id, "approved": approved}),
    )  # fmt: skip
    result = json.loads(await temporal(dev_server, "workflow", "result", "-w", run_id, "-o", "json"))
    return str(result["result"]["text"])


async def test_temporal_cli_starts_lists_queries_and_approves_by_signal(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue):
        run_id, call_id = await start_and_wait_suspended(dev_server, task_queue, "hello")
        text = await signal_and_wait(dev_server, run_id, call_id, approved=True)
    assert "Tool result" in text and '"bytes": 5' in text
    assert (data_dir / "notes" / "demo.md").read_text() == "hello"


async def test_temporal_cli_decline_completes_without_running_the_tool(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue):
        run_id, call_id = await start_and_wait_suspended(dev_server, task_queue, "do not save")
        text = await signal_and_wait(dev_server, run_id, call_id, approved=False)
    assert "declined" in text
    assert not (data_dir / "notes").exists()


async def test_the_temporal_ui_lists_a_suspended_run_and_serves_its_history(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue):
        run_id, _ = await start_and_wait_suspended(dev_server, task_queue, "look at me")
        assert await wait_for_ui(dev_server.cfg)
        api = f"{dev_server.cfg.ui_url}/api/v1/namespaces/default"
        async with httpx.AsyncClient(timeout=10) as http:
            listed = (await http.get(f"{api}/workflows", params={"query": "KeelStatus='suspended'"})).json()
            history = (await http.get(f"{api}/workflows/{run_id}/history")).json()
        await client.get_workflow_handle(run_id).terminate("test cleanup")
    assert run_id in [e["execution"]["workflowId"] for e in listed["executions"]]
    kinds = [e["eventType"] for e in history["history"]["events"]]
    assert "EVENT_TYPE_MARKER_RECORDED" in kinds or "MarkerRecorded" in kinds


async def test_temporal_cli_update_rejects_an_unknown_tool_call_and_accepts_the_pending_one(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue):
        run_id, call_id = await start_and_wait_suspended(dev_server, task_queue, "update me")
        update = ["workflow", "update", "execute", "-w", run_id, "--name", "approve_tool_call", "-o", "json"]
        proc = await asyncio.create_subprocess_exec(
            TEMPORAL, *update, "--address", dev_server.cfg.address,
            "--input", json.dumps({"toolCallId": "call_nope", "approved": True}),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await proc.communicate()
        assert proc.returncode != 0 and "no pending tool call 'call_nope'" in out.decode()
        accepted = await temporal(dev_server, *update, "--input", json.dumps({"toolCallId": call_id, "approved": True}))
        result = await client.get_workflow_handle(run_id).result()
    assert json.loads(accepted)["result"] == {"accepted": True, "toolCallId": call_id}
    assert "Tool result" in result["text"]


@asynccontextmanager
async def ui_api(dev_server: DevServer) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """An HTTP client of the Web UI's API (with the CSRF cookie its POSTs need), and the namespace's API root."""
    assert await wait_for_ui(dev_server.cfg)
    async with httpx.AsyncClient(timeout=10) as http:
        await http.get(f"{dev_server.cfg.ui_url}/")
        http.headers["X-CSRF-TOKEN"] = http.cookies.get("_csrf") or ""
        yield http, f"{dev_server.cfg.ui_url}/api/v1/namespaces/default"


def decoded(payload: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(payload["data"]))


async def test_the_ui_shows_what_a_suspended_run_waits_for_and_its_summary(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "please remember to buy the milk before friday")
        await wait_for_pending(keel, run_id)
        async with ui_api(dev_server) as (http, api):
            described = (await http.get(f"{api}/workflows/{run_id}")).json()
            metadata = (
                await http.post(
                    f"{api}/workflows/{run_id}/query/__temporal_workflow_metadata",
                    json={"query": {"queryType": "__temporal_workflow_metadata"}},
                )
            ).json()
        await keel.approve(run_id, "call_1")
        await keel.result(run_id)
    summary = decoded(described["executionConfig"]["userMetadata"]["summary"])
    assert summary == "demo: please remember to buy the milk before friday"
    details = decoded(metadata["queryResult"]["payloads"][0])["currentDetails"]
    assert "Waiting for approval" in details and "`save_note` (`call_1`)" in details
    assert f"keel approve {run_id} call_1" in details and "tool_approval" in details
