"""PostgreSQL killed for 10 s while a non-idempotent tool runs: the next model step, and another run's final
persist, ride out the outage; both runs complete with the tool run exactly once each, and nothing is lost (the
server keeps PostgreSQL's durability settings, as a crash test must)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from keel.client import RunFailed
from keel.client.workflows import Workflows
from keel.protocol import ToolResultPart
from keel.storage import PostgresStorage, Storage
from tests.apps import app as test_app
from tests.conftest import running_worker
from tests.pg import PostgresServer, postgres_cluster
from tests.test_agent_run import wait_for_pending
from tests.test_crash_recovery import wait_for_file_lines
from tests.workflows_json.apps import ASK
from tests.workflows_json.apps import app as definitions_app

OUTAGE_SECONDS = 10
DEFINITION_OUTAGE_SECONDS = 25  # past the 15 s of backoff of a step's five attempts


async def outage_while_the_tool_runs(server: PostgresServer, fired: Path, lines: int) -> None:
    await wait_for_file_lines(fired, lines)  # the tool has started; its result needs no storage
    await asyncio.to_thread(server.kill)
    await asyncio.sleep(OUTAGE_SECONDS)
    await asyncio.to_thread(server.start)


async def test_a_ten_second_postgres_outage_mid_run_and_at_the_final_persist_loses_and_repeats_nothing(
    client: Client, task_queue: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEL_TEST_TOOL_SECONDS", "2")
    with postgres_cluster(durable=True) as server:
        storage = PostgresStorage(server.dsn)
        await storage.init()
        try:
            async with running_worker(client, test_app, storage, task_queue) as keel:
                fired = data_dir / "fired.log"
                # Mid-run: the outage hits the model step that reads the tool's result.
                mid = await keel.start_run("once", "go", thread_id="t-mid")
                await outage_while_the_tool_runs(server, fired, 1)
                mid_result = await asyncio.wait_for(keel.result(mid), 120)
                # At the end: with maxSteps 1 the tool's result is stored by the final persist.
                end = await keel.start_run("once", "go", thread_id="t-end", max_steps=1)
                await outage_while_the_tool_runs(server, fired, 2)
                end_result = await asyncio.wait_for(keel.result(end), 120)
            mid_messages, _ = await storage.list_messages("t-mid")
            end_messages, _ = await storage.list_messages("t-end")
        finally:
            await storage.close()
    assert fired.read_text().splitlines() == ["1", "1"]  # each run's tool ran once, on its first attempt
    assert mid_result.text == "ok: {'fired': 'go'}"
    assert [m.role for m in mid_messages] == ["user", "assistant", "tool", "assistant"]
    assert end_result.finish_reason == "tool-calls"
    [tool_message] = [m for m in end_messages if m.role == "tool"]
    assert isinstance(tool_message.content, list) and isinstance(tool_message.content[0], ToolResultPart)
    assert tool_message.content[0].result == {"fired": "go"}
    assert [r.payload.result for r in end_result.tool_results] == [{"fired": "go"}]


async def test_a_step_refuses_a_thread_that_lost_what_an_earlier_step_wrote(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    """As after restoring an old backup, or a crash of a database without fsync: the model must not answer from
    a shorter conversation that looks plausible."""
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "lose me", thread_id="t-lost")
        [call_id] = await wait_for_pending(keel, run_id)
        assistant = next(m for m in (await storage.list_messages("t-lost"))[0] if m.role == "assistant")
        await storage.delete_messages([assistant.id])
        await keel.approve(run_id, call_id)
        with pytest.raises(RunFailed, match=rf"lacks message {assistant.id}, which an earlier step .* wrote"):
            await keel.result(run_id)


async def test_a_resumed_workflow_step_rides_out_a_postgres_outage_longer_than_its_retries_would_last(
    client: Client, task_queue: str
) -> None:
    """Found by the chaos run: the resumed `ask-human` step (an activity of five attempts, about 15 s of
    backoff) met PostgreSQL down and recovering for longer, and the run failed with the outage's
    ConnectionRefusedError. A step's `retries` bound the tool's own failures and lost attempts; an outage before
    the tool starts is waited out as the agent's steps wait it out."""
    with postgres_cluster(durable=True) as server:
        storage = PostgresStorage(server.dsn)
        await storage.init()
        try:
            await storage.save_definition(ASK["id"], ASK)
            async with running_worker(client, definitions_app, storage, task_queue) as keel:
                workflows = Workflows(storage, definitions_app, keel)
                suspended = await workflows.start_and_settle("ask", {"what": "db"})
                assert suspended.state.status == "suspended"
                await asyncio.to_thread(server.kill)
                await workflows.resume(suspended.run_id, "human", {"answer": "yes"})
                await asyncio.sleep(DEFINITION_OUTAGE_SECONDS)
                await asyncio.to_thread(server.start)
                done = await workflows.settle(suspended.run_id, timeout=120)
        finally:
            await storage.close()
    assert (done.state.status, done.state.result) == ("success", {"answer": "yes", "version": 1})
