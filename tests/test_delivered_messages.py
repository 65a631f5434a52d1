"""A user message delivered into a running `AgentRun` (its `user_message` signal) is heard by a model step of the
run, whenever it arrives: while a model step runs, while a tool runs, or while the workflow task that would end
the run is in flight (the server then refuses the run's completion and the task runs again, with the message
before the steps it had run as local activities)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import Client

from keel.app import App
from keel.storage import Storage
from tests.apps import asker
from tests.conftest import running_worker
from tests.http_api.test_signals_as_mastra import listener


async def test_a_message_delivered_while_the_last_steps_tool_runs_is_heard_once_by_a_later_step(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, App.of(listener), storage, task_queue) as keel:
        run_id = await keel.start_run("listener", "pause")
        await asyncio.sleep(0.5)  # `pause` runs for 1.5 s, fused with the model step that ends the run
        await keel.deliver(run_id, "also this")
        result = await keel.result(run_id)
    assert result.text == "heard: pause | also this"
    messages, _ = await storage.list_messages(run_id)
    ids = [m.id for m in messages]
    assert len(ids) == len(set(ids))
    said = [(m.role, text(m.content)) for m in messages if m.role != "tool"]
    assert said == [
        ("user", "pause"),
        ("assistant", ""),  # the call to `pause`
        ("assistant", "heard: pause"),  # the answer the lost workflow task stored (and streamed)
        ("user", "also this"),
        ("assistant", "heard: pause | also this"),
    ]


def text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") for part in content)


async def test_a_message_delivered_before_a_step_whose_tool_suspends_is_heard_after_the_resume(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """The message waits in the run while it waits for the approval; the approved tool then runs with the next
    model step (one activity), and suspends: the message must still reach the thread and the model."""
    async with running_worker(client, App.of(asker), storage, task_queue) as keel:
        run_id = await keel.start_run("asker", "ask")
        assert (await keel.settle(run_id)).pending
        await keel.deliver(run_id, "also this")
        await keel.approve(run_id, "ask-1")
        settled = await keel.settle(run_id)
        assert [c.tool_call_id for c in settled.suspended] == ["ask-1"]
        await keel.resume_tool(run_id, "ask-1", {"answer": "that one"})
        result = await keel.result(run_id)
    assert result.text == "heard: ask | also this"
    messages, _ = await storage.list_messages(run_id)
    said = [(m.role, text(m.content)) for m in messages if m.role != "tool"]
    assert ("user", "also this") in said
