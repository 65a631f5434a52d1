"""send-message and queue-message with the real `@mastra/client-js`: a message to an active thread is
delivered into its run (the next model step reads it), one to an idle thread wakes a run, a queued one starts
the next run once the active one ends; all through the thread's `AgentThread` entity."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

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
