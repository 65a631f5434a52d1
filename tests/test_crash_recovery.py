"""Crashes: kill -9 the worker while a run waits and during a tool; kill -9 the dev server while suspended."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Replayer

from keel.client import KeelClient
from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.client.run_events import follow, read
from keel.plugin import KeelPlugin
from keel.protocol import names
from keel.storage import Storage
from keel.workflows.search_attributes import KEEL_STATUS
from tests.apps import app as test_app
from tests.conftest import free_port, running_worker, worker_subprocess
from tests.test_agent_run import wait_for_pending


@contextmanager
def worker_process(
    dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, env={"KEEL_TEST_TOOL_SECONDS": "4"}) as p:
        yield p


def kill9(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


async def wait_for_file_lines(path: Path, n: int, timeout: float = 30) -> list[str]:
    async with asyncio.timeout(timeout):
        while not path.exists() or len(path.read_text().splitlines()) < n:
            await asyncio.sleep(0.05)
    return path.read_text().splitlines()


async def live_chunks(storage: Storage, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(s.event.type, s.event.payload) async for s in follow(storage, run_id)]


async def test_killed_worker_resumes_a_waiting_run_and_a_lost_tool_attempt_completes_once(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    keel = KeelClient(client, task_queue=task_queue, app=test_app)
    with worker_process(dev_server, task_queue, tmp_path, data_dir) as worker:
        run_id = await keel.start_run("ledger", "entry-1")
        [call_id] = await wait_for_pending(keel, run_id)
        kill9(worker)
    with worker_process(dev_server, task_queue, tmp_path, data_dir) as worker:
        await keel.approve(run_id, call_id)
        await wait_for_file_lines(data_dir / "started.log", 1)
        kill9(worker)  # mid-tool: the attempt is lost before it completes
    assert not (data_dir / "ledger.log").exists()
    with worker_process(dev_server, task_queue, tmp_path, data_dir):
        async with asyncio.timeout(60):
            result = await keel.result(run_id)
    assert result.text == "ledger: {'lines': 1}"
    assert (data_dir / "ledger.log").read_text().splitlines() == [f"{run_id}/{call_id} entry-1"]
    assert [line.split()[1] for line in (data_dir / "started.log").read_text().splitlines()] == [
        "attempt=1",
        "attempt=2",
    ]


async def test_a_non_idempotent_tool_is_not_re_run_after_a_lost_attempt(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    keel = KeelClient(client, task_queue=task_queue, app=test_app)
    with worker_process(dev_server, task_queue, tmp_path, data_dir) as worker:
        run_id = await keel.start_run("once", "go")
        await wait_for_file_lines(data_dir / "fired.log", 1)
        kill9(worker)
    with worker_process(dev_server, task_queue, tmp_path, data_dir):
        async with asyncio.timeout(60):
            result = await keel.result(run_id)
    assert result.text.startswith("error: ") and "fire_once did not complete" in result.text
    assert (data_dir / "fired.log").read_text().splitlines() == ["1"]


async def test_a_step_lost_with_its_worker_keeps_its_plan_and_re_runs_only_unfinished_tools_as_retries(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path, storage: Storage
) -> None:
    # The first model step and the step of its three tools run as local activities in one workflow task: a
    # worker killed there loses the task, and the next worker executes both steps again from the start.
    keel = KeelClient(client, task_queue=task_queue, app=test_app)
    with worker_process(dev_server, task_queue, tmp_path, data_dir) as worker:
        run_id = await keel.start_run("napper", "nap")
        naps = await wait_for_file_lines(data_dir / "naps.log", 4)  # c1 started and done, c2 and c3 started
        assert "done c1" in naps
        # c1's result stored (its tool-result chunk is written with it): a kill between the tool's return and
        # that write would rightly run c1 again, and on a loaded machine the write can come a while after
        async with asyncio.timeout(30):
            while not any(
                e.type == "tool-result" and e.payload.get("result") == "c1 slept"
                for e in await storage.read_events(run_id)
            ):
                await asyncio.sleep(0.05)
        assert len((data_dir / "naps.log").read_text().splitlines()) == 4, "c2 or c3 ended before the kill"
        kill9(worker)
    with worker_process(dev_server, task_queue, tmp_path, data_dir):
        async with asyncio.timeout(90):
            result = await keel.result(run_id)
    # The model saw the three results of the plan it made once, not a lost plan's as well.
    assert result.text == "woke after 3 naps"
    assert (data_dir / "model.log").read_text().splitlines() == ["asked with 0 results", "asked with 3 results"]
    naps = (data_dir / "naps.log").read_text().splitlines()
    # c1 finished before the kill: its stored result is used. c2 and c3 run again, told it is attempt 2.
    assert sorted(n for n in naps if n.startswith("start")) == [
        "start c1 attempt=1",
        "start c2 attempt=1",
        "start c2 attempt=2",
        "start c3 attempt=1",
        "start c3 attempt=2",
    ]
    assert sorted(n for n in naps if n.startswith("done")) == ["done c1", "done c2", "done c3"]
    assert [c.payload.tool_call_id for c in result.tool_calls] == [r.payload.tool_call_id for r in result.tool_results]
    assert len(result.tool_results) == 3


async def test_a_run_canceled_then_its_worker_killed_ends_canceled_and_runs_nothing_again(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    """The cancel is asked while the run's first step (the model's plan and its three naps, one local activity)
    runs, and the worker is killed at once, before it could end the run: the next worker ends it canceled, asks
    the model nothing more and starts no nap again."""
    keel = KeelClient(client, task_queue=task_queue, app=test_app)
    with worker_process(dev_server, task_queue, tmp_path, data_dir) as worker:
        run_id = await keel.start_run("napper", "nap")
        await wait_for_file_lines(data_dir / "naps.log", 4)  # c1 started and done, c2 and c3 started
        await keel.cancel(run_id)
        kill9(worker)
    with worker_process(dev_server, task_queue, tmp_path, data_dir):
        handle = client.get_workflow_handle(run_id)
        async with asyncio.timeout(60):
            while (described := await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await asyncio.sleep(0.1)
        await asyncio.sleep(1)  # a nap started again would have noted it by now
    assert described.status == WorkflowExecutionStatus.CANCELED
    assert described.typed_search_attributes.get(KEEL_STATUS) == "canceled"
    assert (data_dir / "model.log").read_text().splitlines() == ["asked with 0 results"]
    starts = [n for n in (data_dir / "naps.log").read_text().splitlines() if n.startswith("start")]
    assert sorted(starts) == ["start c1 attempt=1", "start c2 attempt=1", "start c3 attempt=1"]


async def test_a_live_reader_of_a_step_lost_mid_stream_is_not_shown_what_its_retry_streams_again(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path, storage: Storage
) -> None:
    keel = KeelClient(client, task_queue=task_queue, app=test_app)
    with worker_process(dev_server, task_queue, tmp_path, data_dir) as worker:
        run_id = await keel.start_run("drawler", "talk")
        live = asyncio.ensure_future(live_chunks(storage, run_id))  # a reader watching as the answer streams
        async with asyncio.timeout(30):
            while not any(e.type == "text-delta" for e in await storage.read_events(run_id)):
                await asyncio.sleep(0.05)
        kill9(worker)  # mid-stream: the step's start, step-start and first words are out, its answer is not
    with worker_process(dev_server, task_queue, tmp_path, data_dir):
        async with asyncio.timeout(90):
            result = await keel.result(run_id)
            watched = await live
    assert result.text == "one two three four five six seven eight"
    assert (data_dir / "drawl.log").read_text().splitlines() == ["asked", "asked"]
    # The retry streamed the step again from its start; the reader was shown each chunk once, as a reader of
    # the finished run is.
    assert watched == [(s.event.type, s.event.payload) for s in await read(storage, run_id)]
    assert "".join(p.get("text", "") for t, p in watched if t == "text-delta") == result.text
    assert [t for t, _ in watched].count("step-start") == 1


async def test_a_model_step_lost_with_its_worker_as_a_regular_activity_is_retried_within_seconds(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path, storage: Storage
) -> None:
    # A model step that runs as a regular activity (its local attempt was rate limited) heartbeats: its worker
    # killed mid-stream, it is retried once the heartbeat timeout (seconds) passes, not its 5-minute timeout.
    keel = KeelClient(client, task_queue=task_queue, app=test_app)
    with worker_process(dev_server, task_queue, tmp_path, data_dir) as worker:
        run_id = await keel.start_run("stumbler", "talk")
        await wait_for_file_lines(data_dir / "stumble.log", 2)
        async with asyncio.timeout(30):
            while not any(e.type == "text-delta" for e in await storage.read_events(run_id)):
                await asyncio.sleep(0.05)
        kill9(worker)
    with worker_process(dev_server, task_queue, tmp_path, data_dir):
        async with asyncio.timeout(60):
            result = await keel.result(run_id)
    assert result.text == "one two three four five six seven eight"
    assert (data_dir / "stumble.log").read_text().splitlines() == ["asked"] * 3


@pytest.mark.parametrize("by", ["update", "signal"])
async def test_an_approval_waiting_for_its_step_decides_the_call_once_the_step_lost_with_its_worker_asks_again(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path, by: str
) -> None:
    """An approval sent from the stream while the step that asks for it runs waits for that step (stop 39). With
    the worker killed under both, the next worker runs the execution from its start, the approval in its first
    activation, before the step has begun: it was refused ("no pending tool call 'call_1' (pending: none)"), by
    update and by signal (the `temporal` CLI's way), and the run waited for an approval already given. Now it
    waits for the step run again and decides the call it asks for; the tool runs once."""
    keel = KeelClient(client, task_queue=task_queue, app=test_app)
    with worker_process(dev_server, task_queue, tmp_path, data_dir) as worker:
        run_id = await keel.start_run("slowpayer", "pay")
        await wait_for_file_lines(data_dir / "slowpay.log", 1)
        handle = client.get_workflow_handle(run_id)
        if by == "update":
            approving = asyncio.create_task(keel.approve(run_id, "call_1"))
        else:
            await handle.signal(names.TOOL_APPROVAL_SIGNAL, {"toolCallId": "call_1", "approved": True})
        await asyncio.sleep(1)  # the approval has reached the server; the step runs for 3 s more
        kill9(worker)
    with worker_process(dev_server, task_queue, tmp_path, data_dir):
        if by == "update":
            assert (await asyncio.wait_for(approving, 60)).tool_call_id == "call_1"
        result = await asyncio.wait_for(keel.result(run_id), 60)
        rejected = await handle.query(names.REJECTED_SIGNALS_QUERY)
    assert result.text == "{'paid': 500}", result.text
    assert rejected == []
    assert (data_dir / "slowpay.log").read_text().splitlines() == [
        "asked with 0 results",
        "asked with 0 results",
        "asked with 1 results",
    ]


async def test_killed_dev_server_keeps_a_suspended_run_on_restart(
    storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    cfg = DevServerConfig(port=free_port(), ui_port=free_port(), state_dir=tmp_path / "temporal")
    server = await DevServer(cfg).start(reuse=False)
    try:
        client = await connect(cfg.address)
        async with running_worker(client, test_app, storage, task_queue) as keel:
            run_id = await keel.start_run("demo", "survive")
            [call_id] = await wait_for_pending(keel, run_id)
        assert server.proc is not None
        kill9(server.proc)
        server = await DevServer(cfg).start(reuse=False)
        client = await connect(cfg.address)
        async with running_worker(client, test_app, storage, task_queue) as keel:
            assert (await keel.describe(run_id)).status == "suspended"
            assert [p.tool_call_id for p in await keel.pending_tool_calls(run_id)] == [call_id]
            await keel.approve(run_id, call_id)
            result = await keel.result(run_id)
        assert "Tool result" in result.text
    finally:
        server.stop()


async def test_a_step_whose_calls_start_as_they_fit_survives_a_kill_9_between_its_starts(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    """40 calls of a non-idempotent tool with 120 KB of arguments each start over several workflow tasks (what
    one task starts stays under 2 MiB). A worker killed after the first ones started: the next worker starts the
    rest, no call runs twice, the run completes, and each of its executions replays."""
    env = {"KEEL_TEST_POST_SECONDS": "3"}
    keel = KeelClient(client, task_queue=task_queue, app=test_app)
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, env=env) as worker:
        run_id = await keel.start_run("poster", "posts=40 size=120000")
        await wait_for_file_lines(data_dir / "posted.log", 5)
        kill9(worker)
    before = {line.split()[1] for line in (data_dir / "posted.log").read_text().splitlines()}
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, env=env):
        async with asyncio.timeout(120):
            result = await keel.result(run_id)
    started = [line.split()[1] for line in (data_dir / "posted.log").read_text().splitlines() if "start" in line]
    assert len(before) < 40  # killed between the step's starts
    assert len(started) == len(set(started))  # no call ran twice
    assert sorted(r.payload.tool_call_id for r in result.tool_results) == sorted(f"p{i}" for i in range(40))
    posted = {r.payload.tool_call_id for r in result.tool_results if r.payload.result == 120000}
    lost = [r for r in result.tool_results if r.payload.result != 120000]  # taken by the worker that died
    assert posted <= set(started) - before and len(lost) >= len(before)
    assert all("did not complete" in str(r.payload.result) for r in lost), lost[:1]
    assert result.text == f"posted 40 texts of [120000] bytes, {len(lost)} failed"
    executions = [e.run_id async for e in client.list_workflows(f"WorkflowId='{run_id}'")]
    for execution in executions:
        history = await client.get_workflow_handle(run_id, run_id=execution).fetch_history()
        await Replayer(workflows=[], plugins=[KeelPlugin()]).replay_workflow(history)
