"""Agents over HTTP with the real `@mastra/client-js`: listed and described, run by generate and stream (text
deltas, tool approvals both ways), their tools executed on a worker; every run is an `AgentRun` the Temporal
client sees."""

from __future__ import annotations

from typing import Any

from tests.http_api.conftest import Api


async def test_agents_are_listed_and_described_as_mastra_does(api: Api) -> None:
    out = await api.js("""
        const agents = await client.listAgents();
        const payer = await client.getAgent("payer").details();
        const demo = await client.getAgent("demo").details();
        let missing;
        try { await client.getAgent("nope").details(); } catch (e) { missing = {status: e.status, body: e.body}; }
        return {ids: Object.keys(agents), payer, demo, missing};
    """)
    assert {"payer", "writer", "demo"} <= set(out["ids"])
    payer = out["payer"]
    assert payer["id"] == "payer" and payer["modelId"] == "payer" and payer["source"] == "code"
    assert payer["tools"]["pay"]["requireApproval"] is True
    assert '"amount"' in payer["tools"]["pay"]["inputSchema"]  # superjson: {"json": <JSON Schema>}
    # The demo workspace's skill, and its workspace tools without the skill tools (Mastra lists those apart).
    assert out["demo"]["skills"] == [
        {
            "name": "keel-python",
            "description": "How the demo coder writes Python in the Keel workspace. Use it before writing or "
            "editing a .py file.",
            "license": "Apache-2.0",
            "path": "demo_skills/keel-python",
        }
    ]
    assert "mastra_workspace_search" in out["demo"]["workspaceTools"] and "skill" not in out["demo"]["workspaceTools"]
    assert out["missing"] == {"status": 404, "body": {"error": "Agent with id nope not found"}}


async def test_generate_answers_with_the_runs_text_and_the_run_is_a_temporal_execution(api: Api) -> None:
    out = await api.js("""
        return await client.getAgent("writer").generate("hello there");
    """)
    assert out["text"] == "draft: hello there" and out["finishReason"] == "stop"
    described = await api.keel.describe(out["runId"])
    assert described.status == "completed"


async def test_stream_delivers_text_deltas_then_finish(api: Api) -> None:
    out = await api.js("""
        return await chunksOf(await client.getAgent("writer").stream("stream me"));
    """)
    types = [c["type"] for c in out]
    assert types[0] == "start" and types[-1] == "finish"
    assert "".join(c["payload"]["text"] for c in out if c["type"] == "text-delta") == "draft: stream me"
    # The start chunk is sent as soon as Temporal accepted the run: it is the one the run writes to its log.
    observe = "return await chunksOf(await client.getAgent('writer').observe(vars));"
    logged = await api.js(observe, runId=out[0]["runId"])
    assert out == logged


async def _suspended_stream(api: Api) -> dict[str, Any]:
    out: dict[str, Any] = await api.js("""
        const chunks = await chunksOf(await client.getAgent("payer").stream("pay"));
        return {chunks, runId: chunks[0].runId};
    """)
    return out


async def test_a_tool_approval_through_the_stream_approves_and_declines(api: Api) -> None:
    first = await _suspended_stream(api)
    approval = [c for c in first["chunks"] if c["type"] == "tool-call-approval"]
    assert [a["payload"]["toolCallId"] for a in approval] == ["large"]
    assert (await api.keel.describe(first["runId"])).status == "suspended"
    out = await api.js(
        """return await chunksOf(await client.getAgent("payer").approveToolCall(vars));""",
        runId=first["runId"],
        toolCallId="large",
    )
    assert out[0]["type"] == "tool-result"  # as Mastra's: the stream goes on from the decided call
    results = {c["payload"]["toolCallId"]: c["payload"]["result"] for c in out if c["type"] == "tool-result"}
    assert results == {"small": {"paid": 5}, "large": {"paid": 500}}
    assert out[-1]["type"] == "finish"
    second = await _suspended_stream(api)
    declined = await api.js(
        """return await chunksOf(await client.getAgent("payer").declineToolCall(vars));""",
        runId=second["runId"],
        toolCallId="large",
    )
    denied = [c["payload"] for c in declined if c["type"] == "tool-output-denied"]
    assert [d["toolCallId"] for d in denied] == ["large"] and denied[0]["approval"]["approved"] is False
    assert declined[-1]["type"] == "finish"
    assert (await api.keel.describe(second["runId"])).status == "completed"


async def test_a_tool_approval_through_generate_approves_and_declines(api: Api) -> None:
    out = await api.js("""
        const agent = client.getAgent("payer");
        const first = await agent.generate("pay");
        const call = {runId: first.runId, toolCallId: first.suspendPayload.toolCallId};
        const approved = await agent.approveToolCallGenerate(call);
        const second = await agent.generate("pay");
        const declined = await agent.declineToolCallGenerate({runId: second.runId, toolCallId: "large"});
        let again;
        try { await agent.approveToolCallGenerate({runId: second.runId, toolCallId: "large"}); }
        catch (e) { again = e.status; }
        return {first, approved, declined, again};
    """)
    assert out["first"]["finishReason"] == "suspended"
    # The step that asked for the call used tokens, as the trace and the metrics count them: it answered 0.
    assert out["first"]["usage"]["inputTokens"] > 0 and out["first"]["usage"]["outputTokens"] > 0
    assert out["first"]["totalUsage"] == out["first"]["usage"]
    assert out["first"]["suspendPayload"]["toolName"] == "pay"
    assert out["first"]["suspendPayload"]["args"] == {"amount": 500}
    assert out["approved"]["finishReason"] == "stop" and "large={'paid': 500}" in out["approved"]["text"]
    assert out["declined"]["finishReason"] == "stop"
    assert out["again"] == 409  # a decided run: the caller's mistake, never retried


async def test_agent_tools_execute_on_a_worker(api: Api) -> None:
    out = await api.js("""
        const agent = client.getAgent("payer");
        const tool = await agent.getTool("pay");
        const result = await agent.executeTool("pay", {data: {amount: 7}});
        return {tool, result};
    """)
    assert out["tool"]["id"] == "pay" and out["result"] == {"paid": 7}


async def test_a_client_that_reconnects_with_an_offset_gets_the_rest_exactly_once(api: Api) -> None:
    out = await api.js("""
        const agent = client.getAgent("writer");
        const all = await chunksOf(await agent.stream("a long enough message to split"));
        const rest = await chunksOf(await agent.observe({runId: all[0].runId, offset: 3}));
        return {all, rest};
    """)
    assert out["rest"] == out["all"][3:]
