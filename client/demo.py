"""`keel demo` / `make demo`: the demo agent end to end, once approved by update and once declined by signal;
then one `coder` run, which uses every workspace tool (its command approved when there is no bubblewrap)."""

from __future__ import annotations

import asyncio
import contextlib

from keel.app import App
from keel.client.devserver import DevServer
from keel.client.errors import RunClosed
from keel.client.keel_client import KeelClient
from keel.workflows import AgentRunResult, ToolApproval


async def _wait_for_pending(keel: KeelClient, run_id: str, timeout: float = 30.0) -> str:
    async with asyncio.timeout(timeout):
        while True:
            pending = await keel.pending_tool_calls(run_id)
            if pending:
                return pending[0].tool_call_id
            await asyncio.sleep(0.05)


async def _result_approving(keel: KeelClient, run_id: str) -> AgentRunResult:
    """The run's result, approving each call it waits for on the way (the demo's command, without bwrap)."""
    async with asyncio.timeout(60):
        while True:
            if (await keel.describe(run_id)).status not in ("running", "suspended"):
                return await keel.result(run_id)
            with contextlib.suppress(RunClosed):
                for call in await keel.pending_tool_calls(run_id):
                    print(f"run {run_id}: approving {call.tool_name}", flush=True)
                    await keel.approve(run_id, call.tool_call_id)
            await asyncio.sleep(0.05)


async def run_demo(keel: KeelClient, app: App, server: DevServer) -> int:
    ui = server.cfg.ui_url
    print(
        f"Temporal at {server.cfg.address} ({'started for the demo' if server.owned else 'reused'})",
        flush=True,
    )

    approved_id = await keel.start_run("demo", "Keel demo: approve me")
    call_id = await _wait_for_pending(keel, approved_id)
    print(f"run {approved_id}: suspended on tool call {call_id}; approving by update", flush=True)
    await keel.approve(approved_id, call_id)
    approved = await keel.result(approved_id)
    print(f"  -> {approved.text}", flush=True)

    declined_id = await keel.start_run("demo", "Keel demo: decline me")
    call_id = await _wait_for_pending(keel, declined_id)
    print(f"run {declined_id}: suspended on tool call {call_id}; declining by signal", flush=True)
    await keel.temporal.get_workflow_handle(declined_id).signal(
        "tool_approval", ToolApproval(tool_call_id=call_id, approved=False)
    )
    declined = await keel.result(declined_id)
    print(f"  -> {declined.text}", flush=True)

    coder_id = await keel.start_run("coder", "work on coder/hello.py")
    coder = await _result_approving(keel, coder_id)
    print(f"run {coder_id}: coder used {len(coder.tool_results)} workspace tools", flush=True)
    for line in coder.text.splitlines()[1:]:
        print(f"  {line}", flush=True)

    ok = "Tool result" in approved.text and "declined" in declined.text and coder.text.startswith("Done.")
    print("\nRun ids:")
    for run_id in (approved_id, declined_id, coder_id):
        print(f"  {run_id}  {ui}/namespaces/{keel.temporal.namespace}/workflows/{run_id}")
    print(f"Temporal UI: {ui}" + ("" if not server.owned else " (stopped with the demo; `make dev` keeps it up)"))
    print("demo " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1
