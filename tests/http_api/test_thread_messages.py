"""send-message and queue-message with the real `@mastra/client-js`: a message to an active thread is
delivered into its run (the next model step reads it), one to an idle thread wakes a run, a queued one starts
the next run once the active one ends; all through the thread's `AgentThread` entity."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from keel.storage.threads import StoredMessage
from tests.http_api.conftest import Api


@pytest.fixture
def thread() -> dict[str, Any]:
    return {"resourceId": "ann", "threadId": f"t-{uuid.uuid4()}"}


async def _suspended(api: Api, run_id: str) -> None:
    async with asyncio.timeout(30):
        while (await api.keel.describe(run_id)).status != "suspended":
            await asyncio.sleep(0.05)


async def _thread_runs(api: Api, thread: dict[str, Any]) -> list[str]:
    query = f"WorkflowType='AgentRun' AND KeelThreadId='{thread['threadId']}'"
    return [e.id async for e in api.keel.temporal.list_workflows(query)]


async def test_send_message_wakes_an_idle_thread_and_delivers_into_an_active_one(
    api: Api, thread: dict[str, Any]
) -> None:
    woke = await api.js("return await client.getAgent('listener').sendMessage({...vars, message: 'hold'});", **thread)
    assert woke["accepted"] is True and woke["signal"]["type"] == "user"
    run_id = woke["runId"]
    await _suspended(api, run_id)
    delivered = await api.js(
        "return await client.getAgent('listener').sendMessage({...vars, message: 'also this'});", **thread
    )
    assert delivered["runId"] == run_id  # into the active run, not a new one
    done = await api.js(
        "return await client.getAgent('listener').approveToolCallGenerate({runId: vars.runId, toolCallId: 'hold-1'});",
        runId=run_id,
    )
    assert done["text"] == "heard: hold | also this"
    again = await api.js("return await client.getAgent('listener').sendMessage({...vars, message: 'hello'});", **thread)
    assert again["runId"] != run_id
    result = await api.keel.result(again["runId"])
    assert result.text == "heard: hold | also this | hello"  # the thread's whole conversation


async def test_queue_message_starts_the_next_turn_when_the_active_one_ends(api: Api, thread: dict[str, Any]) -> None:
    first = await api.js("return await client.getAgent('listener').sendMessage({...vars, message: 'hold'});", **thread)
    await _suspended(api, first["runId"])
    queued = await api.js(
        "return await client.getAgent('listener').queueMessage({...vars, message: 'after that'});", **thread
    )
    assert queued["accepted"] is True and queued["runId"] == first["runId"]
    assert len(await _thread_runs(api, thread)) == 1  # nothing started while the turn is active
    await api.keel.approve(first["runId"], "hold-1")
    async with asyncio.timeout(30):
        while len(runs := await _thread_runs(api, thread)) < 2:
            await asyncio.sleep(0.1)
    follow_up = next(r for r in runs if r != first["runId"])
    assert (await api.keel.result(follow_up)).text == "heard: hold | after that"


async def test_a_message_for_a_run_that_ended_is_refused(api: Api) -> None:
    out = await api.js("""
        const agent = client.getAgent("writer");
        const done = await agent.generate("hi");
        try { await agent.sendMessage({runId: done.runId, message: "late"}); }
        catch (e) { return {status: e.status, body: e.body}; }
    """)
    assert out["status"] == 409


async def test_a_thread_subscription_carries_every_run_and_one_going_on_after_send_tool_approval(
    api: Api, thread: dict[str, Any]
) -> None:
    """With `@mastra/client-js`'s own subscribeToThread: chunks after a send-tool-approval once went missing
    when the server followed each run by a count of chunks, which a retried step shifts (now by log offset)."""
    out = await api.js(
        """
        const agent = client.getAgent("listener");
        const thread = {resourceId: vars.resourceId, threadId: vars.threadId};
        const subscription = await agent.subscribeToThread(thread);
        const seen = [];
        const waiters = [];
        const until = (type) => new Promise((resolve) => waiters.push({type, resolve}));
        const reading = subscription.processDataStream({onChunk: async (chunk) => {
            seen.push(chunk);
            const waiter = waiters.find((w) => w.type === chunk.type);
            if (waiter) { waiters.splice(waiters.indexOf(waiter), 1); waiter.resolve(chunk); }
        }});
        let finished = until("finish");
        await agent.sendMessage({...thread, message: "hi"});
        await finished;
        finished = until("finish");
        const asked = until("tool-call-approval");
        await agent.sendMessage({...thread, message: "hold"});
        const call = await asked;
        await agent.sendToolApproval({...thread, toolCallId: call.payload.toolCallId, approved: true});
        await finished;
        subscription.unsubscribe();
        await reading.catch(() => {});
        return seen.filter((c) => c.type === "text-delta").map((c) => c.payload.text);
        """,
        **thread,
    )
    assert out == ["heard: hi", "heard: hi | hold"]


async def test_signals_reach_the_run_as_a_user_message_or_as_a_tagged_reminder(
    api: Api, thread: dict[str, Any]
) -> None:
    started = await api.js(
        "return await client.getAgent('listener')"
        ".sendSignal({...vars, signal: {type: 'user-message', contents: 'hold'}});",
        **thread,
    )
    assert started["accepted"] is True and started["signal"]["type"] == "user"
    run_id = started["runId"]
    await _suspended(api, run_id)
    reminded = await api.js(
        """return await client.getAgent('listener').sendSignal({runId: vars.runId,
            signal: {type: 'system-reminder', contents: 'be <brief>', attributes: {source: 'cron'}}});""",
        runId=run_id,
    )
    assert reminded["runId"] == run_id
    assert (reminded["signal"]["type"], reminded["signal"]["tagName"]) == ("reactive", "system-reminder")
    await api.keel.approve(run_id, "hold-1")
    result = await api.keel.result(run_id)
    assert result.text == 'heard: hold | <system-reminder source="cron">be &lt;brief&gt;</system-reminder>'
    refused = await api.js(
        """try { await client.getAgent('listener').sendSignal({...vars, signal: {type: 'shout', contents: 'x'}}); }
           catch (e) { return {status: e.status, body: e.body}; }""",
        **thread,
    )
    assert refused["status"] == 400


async def test_send_tool_approval_decides_the_run_waiting_on_the_call_and_refuses_a_call_no_run_waits_on(
    api: Api, thread: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decision goes to the agent's run of the thread that waits on the call. That run is named by the
    thread's stored messages, so a call no run waits on is refused at once (it once waited 5 s for visibility
    first); a call older than the messages read is looked for in visibility."""
    send = "return await client.getAgent('listener').sendMessage({...vars, message: 'hold'});"
    decide = """try { return await client.getAgent(vars.agent ?? 'listener').sendToolApproval(
                    {resourceId: vars.resourceId, threadId: vars.threadId, toolCallId: vars.call, approved: true}); }
                catch (e) { return {status: e.status, body: e.body}; }"""
    first = (await api.js(send, **thread))["runId"]
    await _suspended(api, first)
    assert (await api.js(decide, **thread, call="hold-1"))["runId"] == first
    assert (await api.keel.result(first)).text == "heard: hold"
    second = (await api.js(send, **thread))["runId"]
    await _suspended(api, second)
    [waiting] = await api.keel.pending_tool_calls(second)  # the model's `hold-1` again, made unique in the thread
    for call, agent, where in [
        ("hold-1", None, thread),  # decided: its run has ended
        ("hold-9", None, thread),  # no run ever made it
        (waiting.tool_call_id, "asker", thread),  # another agent's
        (waiting.tool_call_id, None, {**thread, "threadId": "t-none"}),  # another thread's
    ]:
        refused = await api.js(decide, **where, call=call, agent=agent)
        assert refused["status"] == 404 and "waits for tool call" in refused["body"]["error"], refused
    monkeypatch.setattr("keel.client.api.agents.CALLS_SCANNED", 1)  # the call is older than the newest message
    await api.storage.save_messages(
        [StoredMessage(id=f"m-{uuid.uuid4()}", thread_id=thread["threadId"], resource_id="ann", role="user",
                       content="later", created_at=datetime.now(UTC))]
    )  # fmt: skip
    decided = await api.js(decide, **thread, call=waiting.tool_call_id)
    assert decided.get("runId") == second, decided
    assert (await api.keel.result(second)).text.startswith("heard: hold | hold")
