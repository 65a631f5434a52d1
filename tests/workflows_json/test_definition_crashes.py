"""kill -9 of the worker during a foreach (concurrency 3) and during a sleep: the run completes with each item
processed once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError
from temporalio.worker import Replayer

from keel.client.devserver import DevServer
from keel.plugin import KeelPlugin
from keel.storage import SQLiteStorage
from keel.workflows.contracts import WorkflowRunState
from tests.conftest import worker_subprocess
from tests.workflows_json.apps import FOREACH_AND_SLEEP, SEND
from tests.workflows_json.test_definition_runs import wide_foreach


@contextmanager
def worker(dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path) -> Iterator[None]:
    app, env = "tests.workflows_json.apps:app", {"KEEL_TEST_TOOL_SECONDS": "1.5"}
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, app=app, env=env):  # SIGKILL on leaving
        yield


async def query_state(handle: Any) -> WorkflowRunState | None:
    """The run's state, or None while no live worker answers (the killed one's sticky queue times out)."""
    try:
        state: WorkflowRunState = await handle.query("state", result_type=WorkflowRunState)
    except RPCError:
        return None
    return state


async def lines(path: Path, n: int, timeout: float = 30) -> list[str]:
    async with asyncio.timeout(timeout):
        while not path.exists() or len(path.read_text().splitlines()) < n:
            await asyncio.sleep(0.05)
    return path.read_text().splitlines()


async def test_kill_9_during_a_foreach_and_during_a_sleep_completes_each_item_once(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    storage = SQLiteStorage(tmp_path / "keel.db")
    await storage.init()
    await storage.save_definition("crashy", FOREACH_AND_SLEEP)
    await storage.close()
    run_id = f"crashy-{uuid.uuid4()}"
    with worker(dev_server, task_queue, tmp_path, data_dir):
        handle = await client.start_workflow("crashy", {}, id=run_id, task_queue=task_queue)
        await lines(data_dir / "started.log", 3)  # three items in flight: kill -9 mid-foreach
    with worker(dev_server, task_queue, tmp_path, data_dir):
        async with asyncio.timeout(60):
            while (state := await query_state(handle)) is None or state.steps.get("nap") is None:
                await asyncio.sleep(0.1)  # the foreach is done and the 3 s sleep has begun: kill -9 again
        assert state.steps["nap"].status == "running"
    with worker(dev_server, task_queue, tmp_path, data_dir):
        assert await asyncio.wait_for(handle.result(), 60) == {"items": 6}
    recorded = (data_dir / "record.log").read_text().splitlines()
    assert sorted(line.split()[1] for line in recorded) == ["1", "2", "3", "4", "5", "6"]
    # An item whose attempt was lost with the worker ran again, and was told it is a later attempt (its step
    # may be a local activity, which Temporal starts at attempt 1 again when its workflow task was lost).
    starts: dict[str, list[int]] = {}
    for line in (data_dir / "started.log").read_text().splitlines():
        key, attempt = line.split()
        starts.setdefault(key, []).append(int(attempt.removeprefix("attempt=")))
    assert any(len(attempts) > 1 for attempts in starts.values())
    assert all(attempts == list(range(1, len(attempts) + 1)) for attempts in starts.values()), starts
    history = await handle.fetch_history()
    assert any(e.WhichOneof("attributes") == "timer_fired_event_attributes" for e in history.events)


async def test_kill_9_under_a_step_of_a_tool_that_is_not_idempotent_fails_the_step_without_starting_it_again(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    """A step waits out a storage outage before its tool starts without spending its attempts; a lost start of
    a tool that must not run twice (and may not be retried: no `retries`) fails the step, saying why."""
    storage = SQLiteStorage(tmp_path / "keel.db")
    await storage.init()
    await storage.save_definition("send", SEND)
    await storage.close()
    with worker(dev_server, task_queue, tmp_path, data_dir):
        handle = await client.start_workflow("send", {"n": 7}, id=f"send-{uuid.uuid4()}", task_queue=task_queue)
        await lines(data_dir / "sent.log", 1)  # started, not yet sent: kill -9
    with worker(dev_server, task_queue, tmp_path, data_dir):
        with pytest.raises(WorkflowFailureError) as failed:
            async with asyncio.timeout(90):
                await handle.result()
    assert str(failed.value.cause) == "StepFailed: " + (
        "Step 's': tool 'send' did not answer (its worker was lost or it ran too long; a tool that is not idempotent "
        "and has no retries is not started again)"
    )
    assert (data_dir / "sent.log").read_text().splitlines() == ["start 7 attempt=1"]


async def test_kill_9_while_a_wide_foreach_of_large_items_starts_them_over_several_tasks_completes_it(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    """60 items of 100 KB at once start over several workflow tasks (one task starts 2 MiB of inputs at most). A
    worker killed after the first started: the next one starts the rest, the run completes, and it replays."""
    storage = SQLiteStorage(tmp_path / "keel.db")
    await storage.init()
    await storage.save_definition("wide", wide_foreach("wide", {"type": "array"}))
    await storage.close()
    app, env = "tests.workflows_json.apps:app", {"KEEL_TEST_ECHO_SECONDS": "2"}
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, app=app, env=env):  # SIGKILL on leaving
        handle = await client.start_workflow("wide", {}, id=f"wide-{uuid.uuid4()}", task_queue=task_queue)
        before = await lines(data_dir / "echoed.log", 5)
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, app=app, env=env):
        result = await asyncio.wait_for(handle.result(), 90)
        history = await handle.fetch_history()
    assert len(before) < 60  # killed between the foreach's starts
    assert [item["echo"][:6] for item in result] == [f"{i:06d}" for i in range(60)]
    assert all(len(item["echo"]) == 100_000 for item in result)
    echoed = [line.split()[0] for line in (data_dir / "echoed.log").read_text().splitlines()]
    assert set(echoed) == {f"{i:06d}" for i in range(60)}
    await Replayer(workflows=[], plugins=[KeelPlugin()]).replay_workflow(history)
