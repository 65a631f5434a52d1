"""Long runs continue-as-new when Temporal suggests it: the result still covers the whole run, and what each
execution hands the next stays a few KB, whatever the tools returned."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from keel.app import Agent, App
from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.model_providers import ScriptedModel
from keel.protocol import names
from keel.storage import Storage
from keel.workflows import agent_run
from tests.apps import app as test_app
from tests.apps import echo, steps_script
from tests.conftest import free_port, running_worker


@asynccontextmanager
async def server_suggesting_continue_as_new(tmp_path: Path) -> AsyncIterator[Client]:
    """A dev server that suggests continue-as-new after 12 history events."""
    cfg = DevServerConfig(
        port=free_port(),
        ui_port=free_port(),
        state_dir=tmp_path,
        extra_dynamic_config={"limit.historyCount.suggestContinueAsNew": "12"},
    )
    server = await DevServer(cfg).start(reuse=False)
    try:
        yield await connect(cfg.address)
    finally:
        server.stop()


async def carried_bytes(client: Client, run_id: str) -> list[int]:
    """The input each execution of the run that continued as new handed to the next."""
    carried = []
    executions = [r async for r in client.list_workflows(f"WorkflowId='{run_id}'")]
    for execution in executions[1:]:  # every execution but the newest ended by continuing as new
        last = (await client.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()).events[-1]
        assert last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        carried.append(last.workflow_execution_continued_as_new_event_attributes.input.ByteSize())
    return carried


async def test_a_run_continues_as_new_when_suggested_and_keeps_its_whole_result(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    async with server_suggesting_continue_as_new(tmp_path) as client:
        async with running_worker(client, test_app, storage, task_queue) as keel:
            # 20 steps: a workflow task chains 16 local steps, and a suggestion is seen when the next one starts.
            run_id = await keel.start_run("multi", "steps=20", thread_id="t-can")
            result = await keel.result(run_id)
            carried = await carried_bytes(client, run_id)
            listed = [r.run_id for r in await keel.list_runs(agent_id="multi")]
    assert len(carried) >= 1, "the run never continued as new"
    assert listed.count(run_id) == 1
    assert result.text == "done after 20 tool calls" and result.steps == 21
    assert [c.payload.tool_call_id for c in result.tool_calls] == [f"call_{i}" for i in range(1, 21)]
    messages, total = await storage.list_messages("t-can")
    assert total == 1 + 20 * 2 + 1
    assert len({m.id for m in messages}) == total


async def test_continuing_as_new_carries_a_few_kb_whatever_the_results(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    async with server_suggesting_continue_as_new(tmp_path) as client:
        async with running_worker(client, test_app, storage, task_queue) as keel:
            run_id = await keel.start_run("bulky", "steps=20 size=100000")
            result = await keel.result(run_id)
            carried = await carried_bytes(client, run_id)
    assert result.text == "saw 20 results of [100000] bytes" and len(result.tool_results) == 20
    assert carried and max(carried) < 4096, carried


async def test_a_client_settling_a_long_run_does_not_hold_back_its_continue_as_new(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    """Found by review: `settled` waited for the run to end or wait on a person, and continue-as-new waits for
    every handler to finish, so a client's `settle` froze the run for good at its first continue-as-new."""
    async with server_suggesting_continue_as_new(tmp_path) as client:
        async with running_worker(client, test_app, storage, task_queue) as keel:
            run_id = await keel.start_run("multi", "steps=40", thread_id="t-settle")
            settled = await asyncio.wait_for(keel.settle(run_id), 60)  # across every execution of the run
            result = await asyncio.wait_for(keel.result(run_id), 60)
            carried = await carried_bytes(client, run_id)
    assert len(carried) >= 2, "the run did not continue as new twice"
    assert settled.ended and not settled.continued
    assert result.text == "done after 40 tool calls"


async def test_every_message_a_run_took_while_it_continued_as_new_reaches_its_thread(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    """Messages delivered all along a run that continues as new every few steps: each one the run took (its
    delivery answered) is in the thread once, whichever execution took it."""
    chatty = Agent(id="chatty", model=ScriptedModel(steps_script, name="steps"), tools=(echo,), max_steps=10_000)
    async with server_suggesting_continue_as_new(tmp_path) as client:
        async with running_worker(client, App.of(chatty), storage, task_queue) as keel:
            run_id = await keel.start_run("chatty", "steps=1000", thread_id="t-deliver")
            taken = []
            for n in range(60):  # each message but the last asks for 1,000 more steps: the run outlives them
                content = f"steps={2 if n == 59 else 1000} m{n}"
                taken.append(await keel.deliver(run_id, content, message_id=f"m{n}"))
                await asyncio.sleep(0.02)
            await keel.result(run_id)
            carried = await carried_bytes(client, run_id)
    messages, _ = await storage.list_messages("t-deliver")
    heard = [str(m.content).split()[-1] for m in messages if m.role == "user"][1:]
    assert len(carried) >= 2, "the run did not continue as new twice"
    assert sorted(heard, key=lambda m: int(m[1:])) == taken


async def test_a_message_refused_before_a_continue_as_new_is_still_refused_to_its_sender_after_it(
    storage: Storage, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`deliver(confirm=True)` asks the run, after its signal, whether it took the message. A run that refused
    messages (its unread room full) and continued as new before the question told it "taken": the new execution
    had forgotten the refusals, and the sender believed a message the thread never got was delivered."""
    monkeypatch.setattr(agent_run, "MAX_INBOX", 1)
    chatty = Agent(id="chatty", model=ScriptedModel(steps_script, name="steps"), tools=(echo,), max_steps=10_000)
    async with server_suggesting_continue_as_new(tmp_path) as client:
        async with running_worker(client, App.of(chatty), storage, task_queue, sandboxed=False) as keel:
            run_id = await keel.start_run("chatty", "steps=1000", thread_id="t-refused")
            handle = client.get_workflow_handle(run_id)
            ids = [f"m{n}" for n in range(20)]
            await asyncio.gather(
                *(handle.signal(names.USER_MESSAGE_SIGNAL, {"id": i, "content": f"steps=1000 {i}"}) for i in ids)
            )
            refused = {i for i in ids if await handle.query(names.MESSAGE_REFUSAL_QUERY, i)}
            assert refused, "the run took all 20 messages at once: no refusal to carry"
            first_run = (await handle.describe()).run_id
            async with asyncio.timeout(30):
                while (await handle.describe()).run_id == first_run:
                    await asyncio.sleep(0.05)
            told = {i for i in ids if await client.get_workflow_handle(run_id).query(names.MESSAGE_REFUSAL_QUERY, i)}
            await handle.terminate("done")
    assert told == refused
