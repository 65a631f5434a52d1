"""The AgentRun workflow against a real dev server: approval by update and signal, results, visibility."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from keel.app.demo import app as demo_app
from keel.client import KeelClient
from keel.client.errors import RunNotFound
from keel.storage import Storage
from tests.apps import app as test_app
from tests.conftest import running_worker


async def wait_for_pending(keel: KeelClient, run_id: str, timeout: float = 20) -> list[str]:
    async with asyncio.timeout(timeout):
        while True:
            pending = await keel.pending_tool_calls(run_id)
            if pending:
                return [p.tool_call_id for p in pending]
            await asyncio.sleep(0.05)


async def test_approved_demo_run_runs_the_tool_and_reports_its_result(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, demo_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "remember the milk")
        [call_id] = await wait_for_pending(keel, run_id)
        accepted = await keel.approve(run_id, call_id)
        assert accepted.tool_call_id == call_id
        result = await keel.result(run_id)
    assert result.finish_reason == "stop"
    assert "Tool result" in result.text and "demo.md" in result.text
    assert (data_dir / "notes" / "demo.md").read_text() == "remember the milk"
    assert [r.payload.result["bytes"] for r in result.tool_results] == [len("remember the milk")]


async def test_settle_answers_once_the_run_waits_on_a_person_or_has_ended(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, demo_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "settle me")
        settled = await keel.settle(run_id)  # right after the start: the update waits for the first step
        assert [(p.tool_name, p.step) for p in settled.pending] == [("save_note", 1)]
        assert not settled.ended and not settled.suspended
        assert await keel.settle(run_id) == settled  # still waiting: the same answer at once
        await keel.approve(run_id, settled.pending[0].tool_call_id)
        assert (await keel.settle(run_id)).ended  # waited through the tool and the last step
        assert (await keel.settle(run_id)).ended  # a closed run
        assert (await keel.result(run_id)).finish_reason == "stop"
        with pytest.raises(RunNotFound):
            await keel.settle("run-that-never-was")
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("multi", "steps=3")
        assert (await keel.settle(run_id)).ended  # no approval on the way: it ends, and says so
        assert (await keel.result(run_id)).text == "done after 3 tool calls"


async def test_declined_tool_call_never_runs_the_tool(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, demo_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "secret")
        [call_id] = await wait_for_pending(keel, run_id)
        await keel.decline(run_id, call_id)
        result = await keel.result(run_id)
    assert "declined" in result.text
    assert not (data_dir / "notes").exists()


async def test_multi_step_run_calls_the_tool_once_per_step_and_persists_the_conversation(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("multi", "steps=4", thread_id="t-multi", resource_id="user-1")
        result = await keel.result(run_id)
    assert result.text == "done after 4 tool calls"
    assert result.steps == 5 and result.finish_reason == "stop"
    assert [c.payload.tool_call_id for c in result.tool_calls] == ["call_1", "call_2", "call_3", "call_4"]
    assert [r.payload.result for r in result.tool_results] == [{"echo": f"#{i}"} for i in range(1, 5)]
    messages, total = await storage.list_messages("t-multi")
    assert total == 1 + 4 * 2 + 1  # user, (assistant + tool) per step, final assistant
    assert [m.role for m in messages[:3]] == ["user", "assistant", "tool"]
    thread = await storage.get_thread("t-multi")
    assert thread is not None and thread.resource_id == "user-1"


async def test_max_steps_stops_the_loop_with_finish_reason_tool_calls(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("multi", "steps=10", max_steps=3)
        result = await keel.result(run_id)
    assert result.finish_reason == "tool-calls"
    assert result.steps == 3 and len(result.tool_results) == 3
    events = await storage.read_events(run_id)
    assert events[-1].type == "finish"


async def test_unknown_tools_bad_arguments_and_tool_exceptions_go_back_to_the_model(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        result = await keel.result(await keel.start_run("mistakes", "go"))
    *failed, large = result.tool_results
    errors = [r.payload.result["error"] for r in failed]
    assert "Tool 'no_such_tool' not found" in errors[0]
    assert "Invalid arguments for tool 'boom'" in errors[1] and "n:" in errors[1]
    assert errors[2] == "RuntimeError: boom 7"
    assert all(r.payload.is_error for r in failed)
    assert large.payload.result == "x" * (3 * 1024 * 1024) and not large.payload.is_error  # by reference
    assert result.text.count("error") == 3


async def test_event_log_tells_the_run_in_order_and_reads_from_any_offset(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, demo_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "log me")
        [call_id] = await wait_for_pending(keel, run_id)
        await keel.approve(run_id, call_id)
        await keel.result(run_id)
    events = await storage.read_events(run_id)
    types = [e.type for e in events]
    assert types[0] == "start" and types[-1] == "finish"
    assert types.index("tool-call") < types.index("tool-call-approval") < types.index("tool-result")
    assert [e.offset for e in events] == list(range(len(events)))
    text = "".join(e.payload["text"] for e in events if e.type == "text-delta")
    assert text.startswith("I'll save that as a note.") and "Saved your note" in text
    tail = await storage.read_events(run_id, offset=5)
    assert tail == events[5:]


async def test_suspended_runs_are_listed_and_counted_from_temporal_visibility(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "count me", resource_id="counting-user")
        await wait_for_pending(keel, run_id)
        info = await keel.describe(run_id)
        assert info.status == "suspended" and info.resource_id == "counting-user"
        async with asyncio.timeout(10):
            while run_id not in [r.run_id for r in await keel.list_runs(status="suspended", agent_id="demo")]:
                await asyncio.sleep(0.1)
        counts = await keel.counts()
        assert counts["agents"]["demo"]["suspended"] >= 1
        assert set(counts["agents"]) == set(test_app.agents)
        [call_id] = [p.tool_call_id for p in await keel.pending_tool_calls(run_id)]
        await keel.approve(run_id, call_id)
        await keel.result(run_id)
        info = await keel.describe(run_id)
        assert info.status == "completed"
        async with asyncio.timeout(10):
            while run_id in [r.run_id for r in await keel.list_runs(status="suspended", agent_id="demo")]:
                await asyncio.sleep(0.1)


async def test_approval_can_depend_on_the_arguments_and_only_those_calls_wait(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("payer", "pay both")
        assert await wait_for_pending(keel, run_id) == ["large"]
        await keel.decline(run_id, "large", reason="too much")
        result = await keel.result(run_id)
    assert result.text == "small={'paid': 5}, large=too much"
    events = await storage.read_events(run_id)
    approvals = [e.payload["toolCallId"] for e in events if e.type == "tool-call-approval"]
    denied = [e.payload for e in events if e.type == "tool-output-denied"]
    assert approvals == ["large"]
    assert denied[0]["approval"] == {"id": "large", "approved": False, "reason": "too much"}


async def test_a_tool_call_id_reused_in_a_later_step_is_renamed_and_waits_for_its_own_approval(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("reuser", "pay twice", thread_id="t-reuse")  # the model says call_0 twice
        assert await wait_for_pending(keel, run_id) == ["call_0"]
        await keel.approve(run_id, "call_0")
        async with asyncio.timeout(20):
            while (await keel.describe(run_id)).status != "suspended" or not await keel.pending_tool_calls(run_id):
                await asyncio.sleep(0.05)
        assert [p.tool_call_id for p in await keel.pending_tool_calls(run_id)] == ["call_0-2"]
        await keel.approve(run_id, "call_0-2")
        result = await keel.result(run_id)
    assert result.text == "{'paid': 200}, {'paid': 201}"
    assert [c.payload.tool_call_id for c in result.tool_calls] == ["call_0", "call_0-2"]
    messages, _ = await storage.list_messages("t-reuse")
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]


async def test_production_workers_run_the_same_turns_without_the_sandbox(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    """The tests run Keel's workflows in Temporal's sandbox; production workers run them unsandboxed."""
    async with running_worker(client, test_app, storage, task_queue, sandboxed=False) as keel:
        multi = await keel.start_run("multi", "steps=3")
        demo = await keel.start_run("demo", "unsandboxed")
        [call_id] = await wait_for_pending(keel, demo)
        await keel.approve(demo, call_id)
        assert (await keel.result(multi)).text == "done after 3 tool calls"
        assert "Tool result" in (await keel.result(demo)).text
