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
