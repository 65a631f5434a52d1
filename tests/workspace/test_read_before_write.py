"""Read-before-write through real runs: the run's workflow state records which file was read at which mtime, so
a write without a read, or after an external change, fails; and a worker killed between the read and the write
loses nothing."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from temporalio.client import Client

from keel.app import App
from keel.client import KeelClient
from keel.client.devserver import DevServer
from keel.storage import Storage
from tests.conftest import running_worker, worker_subprocess
from tests.test_agent_run import wait_for_pending
from tests.workspace.apps import FS, guarded_workspace, plan_agent


def plan(*steps: list[list[object]]) -> str:
    return json.dumps(list(steps))


def read(path: str) -> list[object]:
    return [FS.READ_FILE, {"path": path}]


def write(path: str, content: str) -> list[object]:
    return [FS.WRITE_FILE, {"path": path, "content": content}]


def edit(path: str, old: str, new: str) -> list[object]:
    return [FS.EDIT_FILE, {"path": path, "old_string": old, "new_string": new}]


def guarded_app() -> App:
    return App.of(plan_agent("guarded", guarded_workspace()))


async def approve_all(keel: KeelClient, run_id: str) -> list[object]:
    """Approve each pending write until the run ends; its result list."""
    while True:
        done = asyncio.ensure_future(keel.result(run_id))
        pending = asyncio.ensure_future(wait_for_pending(keel, run_id))
        finished, _ = await asyncio.wait({done, pending}, return_when=asyncio.FIRST_COMPLETED)
        if done in finished:
            pending.cancel()
            return list(json.loads(done.result().text))
        done.cancel()
        for call_id in pending.result():
            await keel.approve(run_id, call_id)


async def test_an_existing_file_cannot_be_written_or_edited_before_it_is_read(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    target = data_dir / "ws" / "notes.txt"
    target.parent.mkdir(parents=True)
    target.write_text("theirs\n")
    async with running_worker(client, guarded_app(), storage, task_queue) as keel:
        run_id = await keel.start_run("guarded", plan([write("notes.txt", "mine\n")], [edit("notes.txt", "a", "b")]))
        results = await approve_all(keel, run_id)
    unread = 'FileReadRequiredError: File "notes.txt" has not been read. You must read a file before writing to it.'
    assert results == [{"error": unread}, {"error": unread}]
    assert target.read_text() == "theirs\n"


async def test_a_new_file_needs_no_read_and_a_read_file_can_be_written_and_edited(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, guarded_app(), storage, task_queue) as keel:
        run_id = await keel.start_run(
            "guarded",
            plan(
                [write("new.txt", "one\n")],
                [read("new.txt")],
                [edit("new.txt", "one", "two")],
                [read("new.txt")],
                [write("new.txt", "three\n")],
                [write("new.txt", "four\n")],
            ),
        )
        results = await approve_all(keel, run_id)
    assert results[0] == "Wrote 4 bytes to new.txt"
    assert results[2] == "Replaced 1 occurrence in new.txt (lines 1)"
    assert results[4] == "Wrote 6 bytes to new.txt"
    # A write clears the record: the next write needs a new read.
    assert results[5] == {
        "error": 'FileReadRequiredError: File "new.txt" has not been read. You must read a file before writing to it.'
    }
    assert (data_dir / "ws" / "new.txt").read_text() == "three\n"


async def test_a_file_changed_outside_between_the_read_and_the_write_fails_the_write_as_stale(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    target = data_dir / "ws" / "shared.txt"
    target.parent.mkdir(parents=True)
    target.write_text("v1\n")
    async with running_worker(client, guarded_app(), storage, task_queue) as keel:
        run_id = await keel.start_run("guarded", plan([read("shared.txt")], [write("shared.txt", "mine\n")]))
        [call_id] = await wait_for_pending(keel, run_id)  # read done; the write waits for approval
        target.write_text("someone else's\n")
        os.utime(target, (1_700_000_000, 1_700_000_000))
        await keel.approve(run_id, call_id)
        results = json.loads((await keel.result(run_id)).text)
    error = results[1]["error"]
    assert error.startswith("StaleFileError: File was modified externally: shared.txt (expected mtime 20")
    assert error.endswith(", actual 2023-11-14T22:13:20.000Z)")
    assert target.read_text() == "someone else's\n"


async def test_a_worker_killed_between_the_read_and_the_write_still_knows_the_file_was_read(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    target = data_dir / "ws" / "kept.txt"
    target.parent.mkdir(parents=True)
    target.write_text("before\n")
    keel = KeelClient(client, task_queue=task_queue)
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, app="tests.workspace.apps:app"):
        run_id = await keel.start_run("guarded", plan([read("kept.txt")], [write("kept.txt", "after\n")]))
        [call_id] = await wait_for_pending(keel, run_id)
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, app="tests.workspace.apps:app"):
        await keel.approve(run_id, call_id)
        async with asyncio.timeout(60):
            results = json.loads((await keel.result(run_id)).text)
    assert results[1] == "Wrote 6 bytes to kept.txt"
    assert target.read_text() == "after\n"


async def test_a_step_retried_after_its_read_was_stored_still_knows_the_file_was_read(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    from keel.app import Agent
    from keel.model_providers import ModelRequest, ModelResponse, ModelRetryableError, ScriptedModel
    from keel.workspace_providers import LocalFilesystem, Workspace
    from tests.workspace.apps import plan_script

    (data_dir / "ws").mkdir(parents=True)
    (data_dir / "ws" / "a.txt").write_text("old\n")
    failed: list[int] = []

    def script(request: ModelRequest) -> ModelResponse:
        # The model call after the read fails once: the fused step is retried and reuses the stored read.
        if len(request.messages) == 3 and not failed:
            failed.append(1)
            raise ModelRetryableError("rate limited", retry_after=0.01)
        return plan_script(request)

    ws = Workspace(
        filesystem=LocalFilesystem(data_dir / "ws"), tools={FS.WRITE_FILE: {"require_read_before_write": True}}
    )
    app = App.of(Agent(id="a", model=ScriptedModel(script), workspace=ws, max_steps=5))
    async with running_worker(client, app, storage, task_queue) as keel:
        run_id = await keel.start_run("a", plan([read("a.txt")], [write("a.txt", "new\n")]))
        results = json.loads((await keel.result(run_id)).text)
    assert failed == [1]
    assert results[1] == "Wrote 4 bytes to a.txt"


async def test_a_later_run_on_the_thread_knows_what_the_earlier_ones_read_and_wrote(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    from keel.app import Agent
    from keel.model_providers import ScriptedModel
    from keel.workspace_providers import LocalFilesystem, Workspace
    from tests.workspace.apps import plan_script

    for name in ("a.txt", "b.txt", "c.txt"):
        (data_dir / "ws").mkdir(parents=True, exist_ok=True)
        (data_dir / "ws" / name).write_text("old\n")
    ws = Workspace(
        filesystem=LocalFilesystem(data_dir / "ws"), tools={FS.WRITE_FILE: {"require_read_before_write": True}}
    )
    app = App.of(Agent(id="a", model=ScriptedModel(plan_script), workspace=ws, max_steps=5))
    async with running_worker(client, app, storage, task_queue) as keel:
        first = await keel.start_run("a", plan([read("a.txt"), read("c.txt")], [write("c.txt", "new\n")]))
        await keel.result(first)
        second = await keel.start_run(
            "a",
            plan([write("a.txt", "new\n")], [write("b.txt", "new\n")], [write("c.txt", "newer\n")]),
            thread_id=first,
        )
        results = json.loads((await keel.result(second)).text)
    unread = 'FileReadRequiredError: File "{}" has not been read. You must read a file before writing to it.'
    assert results == ["Wrote 4 bytes to a.txt", {"error": unread.format("b.txt")}, {"error": unread.format("c.txt")}]
