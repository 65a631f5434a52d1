"""A user message delivered into a running `AgentRun` (its `user_message` signal) is heard by a model step of the
run, whenever it arrives: while a model step runs, while a tool runs, or while the workflow task that would end
the run is in flight (the server then refuses the run's completion and the task runs again, with the message
before the steps it had run as local activities)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client

from keel.app import App
from keel.client.errors import MessageRefused
from keel.storage import Storage
from keel.workflows import agent_run
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


async def test_a_message_past_the_runs_unread_room_is_refused_to_its_sender(
    client: Client, storage: Storage, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run keeps at most `MAX_INBOX` delivered messages unread. A signal cannot answer its sender; with
    `confirm` the client asks the run afterwards whether it took the message: past the room, `deliver` raises
    saying so, where before the sender could only find the refusal in `rejected_signals`."""
    monkeypatch.setattr(agent_run, "MAX_INBOX", 2)
    async with running_worker(client, App.of(asker), storage, task_queue, sandboxed=False) as keel:
        run_id = await keel.start_run("asker", "ask")
        assert (await keel.settle(run_id)).pending  # waits for an approval: nothing reads the inbox
        await keel.deliver(run_id, "one", message_id="m1")
        await keel.deliver(run_id, "two", message_id="m2")
        with pytest.raises(MessageRefused, match="2 delivered messages are unread"):
            await keel.deliver(run_id, "three", message_id="m3", confirm=True)
        await keel.deliver(run_id, "two", message_id="m2", confirm=True)  # delivered again: already taken, not refused
        await client.get_workflow_handle(run_id).terminate("done")  # no run left waiting for other tests to list
