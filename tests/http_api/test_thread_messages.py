"""send-message and queue-message with the real `@mastra/client-js`: a message to an active thread is
delivered into its run (the next model step reads it), one to an idle thread wakes a run, a queued one starts
the next run once the active one ends; all through the thread's `AgentThread` entity."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
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
    """Read as SSE here: with `@mastra/client-js` 1.47's subscribeToThread, chunks after a send-tool-approval
    were sometimes missing; the server followed each run by a count of chunks, which a retried step shifts
    (now by log offset)."""
    seen: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=60) as http:
        url = f"{api.url}/api/agents/listener"
        async with http.stream("POST", f"{url}/threads/subscribe", json=thread) as subscription:
            lines = subscription.aiter_lines()

            async def until(kind: str) -> dict[str, Any]:
                async with asyncio.timeout(30):
                    async for line in lines:
                        if line.startswith("data: {"):
                            seen.append(json.loads(line[6:]))
                            if seen[-1]["type"] == kind:
                                return seen[-1]
                raise AssertionError(f"no {kind}: {[c['type'] for c in seen]}")

            await api.keel.send_message("listener", thread["threadId"], "ann", "hi")
            await until("finish")
            await api.keel.send_message("listener", thread["threadId"], "ann", "hold")
            asked = await until("tool-call-approval")
            body = {**thread, "toolCallId": asked["payload"]["toolCallId"], "approved": True}
            await http.post(f"{url}/send-tool-approval", json=body)
            await until("finish")
    texts = [c["payload"]["text"] for c in seen if c["type"] == "text-delta"]
    assert texts == ["heard: hi", "heard: hi | hold"]
