"""Runs that used to hang or answer wrongly, through the entry points they were found with: the `temporal` CLI
(no input, two inputs, a reused run id), the client (reused ids, bad messages, approvals racing the end, late
approvals of a reused tool call id, counts) and a worker started before its server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecution

from keel.client import InvalidRunInput, KeelClient, RunClosed, RunIdInUse, ToolCallRejected
from keel.client.devserver import DevServer, DevServerConfig
from keel.storage import Storage
from keel.workflows import ToolApproval
from tests.apps import app as test_app
from tests.conftest import free_port, running_worker
from tests.test_agent_run import wait_for_pending
from tests.test_temporal_cli import TEMPORAL, temporal

ROOT = Path(__file__).resolve().parents[1]


async def temporal_failure(dev_server: DevServer, run_id: str) -> str:
    """The failure message of a run, as `temporal workflow result` shows it (the command itself fails)."""
    proc = await asyncio.create_subprocess_exec(
        TEMPORAL, "workflow", "result", "-w", run_id, "--address", dev_server.cfg.address, "-o", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    return out.decode()


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [([], "given 0"), (['{"agentId":"demo","messages":"a"}', '{"agentId":"demo","messages":"b"}'], "given 2")],
    ids=["no-input", "two-inputs"],
)
async def test_a_run_started_by_the_temporal_cli_with_no_or_two_inputs_fails_at_once_and_is_listed(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, inputs: list[str], expected: str
) -> None:
    run_id = f"cli-{uuid.uuid4()}"
    async with running_worker(client, test_app, storage, task_queue) as keel:
        args = [a for i in inputs for a in ("--input", i)]
        await temporal(
            dev_server, "workflow", "start", "--type", "AgentRun", "--task-queue", task_queue, "--workflow-id", run_id,
            *args,
        )  # fmt: skip
        failure = await temporal_failure(dev_server, run_id)
        assert "AgentRun takes one input" in failure and expected in failure
        history = await client.get_workflow_handle(run_id).fetch_history()
        failed_tasks = [e for e in history.events if e.HasField("workflow_task_failed_event_attributes")]
        assert failed_tasks == []  # the run failed; no workflow task was retried
        listed = [r.run_id for r in await keel.list_runs(status="failed")]
    assert run_id in listed


async def test_a_reused_run_id_is_refused_and_the_refused_execution_never_becomes_the_run(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("multi", "steps=1", run_id=f"reused-{uuid.uuid4()}")
        first = await keel.result(run_id)
        with pytest.raises(RunIdInUse, match="already used"):
            await keel.start_run("multi", "steps=2", run_id=run_id)

        await temporal(
            dev_server, "workflow", "start", "--type", "AgentRun", "--task-queue", task_queue, "--workflow-id", run_id,
            "--input", json.dumps({"agentId": "multi", "messages": "steps=2"}),
        )  # fmt: skip
        # Temporal runs the new execution, which fails at once saying why ...
        assert f"Run id '{run_id}' is already used by another run" in await temporal_failure(dev_server, run_id)
        # ... but it never becomes the run: its answer, status, listing and counts stay the first execution's.
        assert await keel.result(run_id) == first
        assert (await keel.describe(run_id)).status == "completed"
        for status in (None, "completed", "failed"):
            query = KeelClient._runs_query(status=status, agent_id="multi") + f" AND WorkflowId='{run_id}'"
            listed = [(ex.id, ex.status) for ex in await _listed(client, query)]
            counted = (await client.count_workflows(query)).count
            expected = 0 if status == "failed" else 1
            assert (len(listed), counted) == (expected, expected), (status, listed)
    messages, total = await storage.list_messages(run_id)  # the first run's thread, untouched
    assert first.text == "done after 1 tool calls" and total == 4
    assert all(m.run_id == run_id for m in messages)


async def _listed(client: Client, query: str) -> list[WorkflowExecution]:
    # Visibility is eventually consistent: wait until the refused execution's last update is in.
    await asyncio.sleep(1.0)
    return [ex async for ex in client.list_workflows(query)]


async def test_a_late_approval_never_decides_the_next_steps_call(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("reuser", "pay twice")  # the model says "call_0" at every step
        await wait_for_pending(keel, run_id)
        [first] = await keel.pending_tool_calls(run_id)
        await keel.approve(run_id, "call_0", step=first.step, args_digest=first.args_digest)
        async with asyncio.timeout(20):
            while (pending := await keel.pending_tool_calls(run_id)) == [] or pending[0].step == first.step:
                await asyncio.sleep(0.05)
        [second] = pending
        assert (first.step, second.step, second.tool_call_id) == (1, 2, "call_0-2")  # renamed: the id was taken
        assert second.args_digest != first.args_digest

        # The same approval again, late: refused by the update, recorded for the signal; step 2 still waits.
        with pytest.raises(ToolCallRejected, match="'call_0' was already approved"):
            await keel.approve(run_id, "call_0", step=first.step)
        with pytest.raises(ToolCallRejected, match="pending now is step 2's, not step 1's"):
            await keel.approve(run_id, "call_0-2", step=first.step)
        with pytest.raises(ToolCallRejected, match="arguments of digest"):
            await keel.approve(run_id, "call_0-2", args_digest=first.args_digest)
        handle = client.get_workflow_handle(run_id)
        await handle.signal("tool_approval", ToolApproval(tool_call_id="call_0-2", approved=True, step=first.step))
        rejected = await handle.query("rejected_signals", result_type=list[str])
        assert "not step 1's" in rejected[-1]
        assert [p.step for p in await keel.pending_tool_calls(run_id)] == [second.step]

        await keel.approve(run_id, "call_0-2")  # without step or digest: the pending call, as before
        result = await keel.result(run_id)
    assert result.text == "{'paid': 200}, {'paid': 201}"


async def test_the_client_rejects_messages_of_the_wrong_type_and_takes_a_5_mb_message(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        for bad in (42, None, [42], {"role": "user"}):
            with pytest.raises(InvalidRunInput, match="messages"):
                await keel.start_run("multi", bad)  # type: ignore[arg-type]
        big = "steps=1 " + "x" * (5 * 1000 * 1000)
        result = await keel.result(await keel.start_run("multi", big))
    assert result.text == "done after 1 tool calls"


async def test_an_approval_racing_the_runs_end_says_the_run_closed(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    outcomes: set[str] = set()
    async with running_worker(client, test_app, storage, task_queue) as keel:
        for _ in range(8):
            run_id = await keel.start_run("demo", "race")
            [call_id] = await wait_for_pending(keel, run_id)
            await client.get_workflow_handle(run_id).signal(
                "tool_approval", ToolApproval(tool_call_id=call_id, approved=True)
            )
            for _ in range(12):  # while the run finishes: already decided, then closing, then closed
                try:
                    await keel.approve(run_id, call_id)
                except (ToolCallRejected, RunClosed) as err:
                    outcomes.add(type(err).__name__)
                await asyncio.sleep(0.005)
    assert "RunClosed" in outcomes and outcomes <= {"RunClosed", "ToolCallRejected"}


async def test_counts_use_visibility_counts_only(
    client: Client, storage: Storage, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "count me")
        await wait_for_pending(keel, run_id)

        def no_listing(*args: object, **kwargs: object) -> None:
            raise AssertionError("counts() listed workflows")

        monkeypatch.setattr(keel.temporal, "list_workflows", no_listing)  # undone after the test: the client is shared
        counts = await keel.counts()
        await client.get_workflow_handle(run_id).terminate("test cleanup")
    assert counts["agents"]["demo"]["suspended"] >= 1 and set(counts["agents"]) == set(test_app.agents)
    assert counts["total"]["suspended"] >= counts["agents"]["demo"]["suspended"]


async def test_a_worker_started_before_temporal_waits_for_it_and_says_so(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "KEEL_TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
        "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
        "KEEL_DATA_DIR": str(tmp_path / "data"),
    }
    worker = subprocess.Popen(  # noqa: ASYNC220 (read from a thread below)
        [sys.executable, "-m", "keel.cli", "worker", "--app", "tests.apps:app", "--task-queue", "late"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    server = None
    try:
        assert worker.stderr is not None and worker.stdout is not None
        # Temporal starts only once the worker said it waits (a fixed sleep raced a slow start under load).
        said = await asyncio.wait_for(asyncio.to_thread(worker.stderr.readline), 60)
        assert f"keel worker: waiting for Temporal at 127.0.0.1:{port}" in said, said
        assert worker.poll() is None, worker.communicate()
        cfg = DevServerConfig(port=port, ui_port=free_port(), state_dir=tmp_path / "temporal")
        server = await DevServer(cfg).start(reuse=False)
        line = await asyncio.wait_for(asyncio.to_thread(worker.stdout.readline), 60)
        assert "keel worker: task queue 'late'" in line
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=20)
        if server is not None:
            server.stop()
    assert "Traceback" not in err


async def test_a_worker_started_before_its_database_waits_for_it_and_says_so(dev_server: DevServer) -> None:
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/keel"
    env = {**os.environ, "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address, "KEEL_STORAGE_URL": down}
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keel.cli", "worker", "--app", "tests.apps:app", "--task-queue", f"db-{uuid.uuid4()}",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert worker.stderr is not None
        line = (await asyncio.wait_for(worker.stderr.readline(), 30)).decode()
        assert line.startswith("keel worker: waiting for storage (PostgresStorage)") and "retrying in" in line, line
        await asyncio.sleep(1.5)
        assert worker.returncode is None  # still waiting, not exited
    finally:
        worker.terminate()
        await worker.wait()


async def test_keel_dev_warns_of_open_runs_whose_agent_its_app_lacks(client: Client, task_queue: str) -> None:
    """Another app served this queue before (the demo, then `keel dev --app mine` on the same data dir): its open
    runs fail with `UnknownAgent` at their next step on this app's worker, so `keel dev` names them at start."""
    from keel.dev_stack import other_agents_warning

    before = KeelClient(client, task_queue=task_queue)  # no worker polls: the runs stay open
    started = [await before.start_run(agent, "hi") for agent in ("ghost", "ghost", "spirit", "demo")]
    mine = KeelClient(client, task_queue=task_queue, app=test_app)
    elsewhere = KeelClient(client, task_queue=f"{task_queue}-other", app=test_app)
    try:
        async with asyncio.timeout(20):  # visibility is eventually consistent
            while (found := await mine.runs_of_other_agents()) != {"ghost": 2, "spirit": 1}:
                await asyncio.sleep(0.2)
        assert await elsewhere.runs_of_other_agents() == {}
        assert other_agents_warning(found, task_queue) == (
            f"warning: 3 open runs on task queue {task_queue!r} are of agents this app lacks (ghost, spirit): this "
            "worker fails them when they next run a step; serve them with their app (--app), or give this app "
            "another KEEL_DATA_DIR or --task-queue"
        )
    finally:
        for run_id in started:
            await client.get_workflow_handle(run_id).terminate()
