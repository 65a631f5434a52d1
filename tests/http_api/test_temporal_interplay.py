"""One run, every client: a run started over HTTP is suspended in Temporal's visibility and approved by the
`temporal` CLI's signal; a run started by the `temporal` CLI is listed and approved over HTTP; 20 streams at
once all finish."""

from __future__ import annotations

import asyncio
import json
import uuid

from keel.client.devserver import DevServer
from tests.http_api.conftest import Api
from tests.test_temporal_cli import temporal


async def test_a_run_started_over_http_is_approved_by_the_temporal_cli(api: Api, dev_server: DevServer) -> None:
    out = await api.js("""
        const chunks = await chunksOf(await client.getAgent("payer").stream("pay"));
        return chunks[0].runId;
    """)
    listed = await temporal(dev_server, "workflow", "list", "--query", f"KeelStatus='suspended' AND WorkflowId='{out}'")
    assert out in listed
    await temporal(
        dev_server, "workflow", "signal", "--workflow-id", out, "--name", "tool_approval",
        "--input", json.dumps({"toolCallId": "large", "approved": True}),
    )  # fmt: skip
    result = await asyncio.wait_for(api.keel.result(out), 30)
    assert result.finish_reason == "stop" and "large={'paid': 500}" in result.text


async def test_a_run_started_by_the_temporal_cli_is_listed_and_approved_over_http(
    api: Api, dev_server: DevServer
) -> None:
    run_id = f"cli-{uuid.uuid4()}"
    await temporal(
        dev_server, "workflow", "start", "--type", "AgentRun", "--task-queue", api.keel.task_queue,
        "--workflow-id", run_id, "--input", json.dumps({"agentId": "payer", "messages": "pay"}),
    )  # fmt: skip
    async with asyncio.timeout(30):
        while (await api.keel.describe(run_id)).status != "suspended":
            await asyncio.sleep(0.05)
    out = await api.js(
        """
        const agent = client.getAgent("payer");
        const suspended = await agent.listSuspendedRuns();
        const done = await agent.approveToolCallGenerate({runId: vars.runId, toolCallId: "large"});
        return {suspended, done};
        """,
        runId=run_id,
    )
    mine = [r for r in out["suspended"]["runs"] if r["runId"] == run_id]
    assert mine and mine[0]["toolCalls"][0]["toolCallId"] == "large"
    assert out["done"]["finishReason"] == "stop" and "large={'paid': 500}" in out["done"]["text"]


async def test_twenty_streams_at_once_all_finish(api: Api) -> None:
    out = await api.js(
        """
        const agent = client.getAgent("writer");
        return await Promise.all(Array.from({length: 20}, async (_, i) => {
            const chunks = await chunksOf(await agent.stream(`n${i}`));
            const text = chunks.filter((c) => c.type === "text-delta").map((c) => c.payload.text).join("");
            return {text, last: chunks[chunks.length - 1].type};
        }));
        """,
        timeout=120,
    )
    assert out == [{"text": f"draft: n{i}", "last": "finish"} for i in range(20)]
