"""Indexing a large tree is one long activity: it heartbeats its progress, and a worker killed with `kill -9`
halfway through 5,000 files leaves an indexing that the next worker finishes from the last heartbeat, each file
embedded once (but the batch in flight) and stored once (counted in pgvector)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from keel.activities.indexing import PROCESS, WorkspaceIndexing
from keel.app import App
from keel.client import KeelClient
from keel.client.devserver import DevServer
from keel.client.errors import RunFailed
from keel.client.indexing import indexing_progress, indexing_result, start_indexing
from keel.storage import Storage
from keel.workflows import IndexProgress
from keel.workflows.contracts import IndexFilesInput
from keel.workspace_providers import InMemoryVectorStore, LocalFilesystem, Workspace
from keel.workspace_providers.search_indexing import BATCH_FILES
from tests.apps import app as test_app
from tests.apps import search_workspace
from tests.conftest import running_worker, worker_subprocess
from tests.test_cli import Keel
from tests.workspace.index_apps import CountingEmbedder, make_app

FILES = 5000
STALL_AFTER = 2500
APP = "tests.workspace.index_apps:app"


def make_tree(root: Path, count: int) -> list[str]:
    paths = []
    for i in range(count):
        path = f"d{i // 100:02d}/f{i:04d}.txt"
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(f"file {i} of the tree\nword{i} appears here once\n")
        paths.append(path)
    return paths


def embedded_by_process(log: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in log.read_text().splitlines():
        pid, n = line.split()
        counts[pid] += int(n)
    return counts


async def wait_for_done(keel: KeelClient, workflow_id: str, at_least: int, timeout: float = 60) -> IndexProgress:
    async with asyncio.timeout(timeout):
        while True:
            _, progress = await indexing_progress(keel, workflow_id)
            if progress is not None and progress.done >= at_least:
                return progress
            await asyncio.sleep(0.1)


def kill9(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


async def test_a_worker_killed_halfway_through_5000_files_resumes_and_indexes_no_file_twice(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path, pg_dsn: str
) -> None:
    paths = make_tree(data_dir / "tree", FILES)
    index = f"big_{secrets.token_hex(4)}"
    env = {"KEEL_TEST_PG_DSN": pg_dsn, "KEEL_TEST_INDEX": index}
    keel = KeelClient(client, task_queue=task_queue)
    log = data_dir / "embedded.log"
    began = time.monotonic()
    stalling = {**env, "KEEL_TEST_EMBED_STALL_AFTER": str(STALL_AFTER)}
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, app=APP, env=stalling) as worker:
        handle = await start_indexing(
            keel, "big", ["."], workflow_id=f"index-{task_queue}", heartbeat_timeout_seconds=2
        )
        seen = await wait_for_done(keel, handle.id, STALL_AFTER)
        kill9(worker)  # mid-batch: the embedder is stuck in the batch after `seen.done`
    first = embedded_by_process(log)
    assert seen.total == FILES and seen.attempt == 1 and seen.done < FILES
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, app=APP, env=env):
        async with asyncio.timeout(90):
            result = await indexing_result(keel, handle.id)
    elapsed = time.monotonic() - began

    by_process = embedded_by_process(log)
    [(first_pid, before_kill)] = first.items()
    after_kill = sum(n for pid, n in by_process.items() if pid != first_pid)
    total = sum(by_process.values())
    print(
        f"\nembedded before the kill {before_kill} (heartbeat at {seen.done}), after {after_kill}, "
        f"total {total}; {result}; {elapsed:.1f} s"
    )
    assert (result.files, result.indexed, result.chunks, result.skipped) == (FILES, FILES, FILES, 0)
    assert result.attempts == 2 and result.resumed_from == seen.done
    assert before_kill <= seen.done + BATCH_FILES  # the batch in flight at most
    assert after_kill == FILES - seen.done  # the files done were not embedded again
    assert total <= FILES + BATCH_FILES < 2 * FILES
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch(f"SELECT id, metadata->>'id' AS doc FROM \"{index}\"")
    finally:
        await conn.close()
    assert len(rows) == FILES
    assert sorted(r["doc"] for r in rows) == sorted(r["id"] for r in rows) == sorted(paths)


@pytest.mark.parametrize(
    ("workspace_id", "error"),
    [
        ("nope", "Unknown workspace 'nope' (known workspaces: big, plain)"),
        ("plain", "Workspace 'plain' has no search configured"),
        ("big", "Workspace 'big' has no auto_index_paths"),
    ],
)
async def test_a_bad_indexing_request_fails_at_once_with_a_clear_message(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path, workspace_id: str, error: str
) -> None:
    app = make_app(tmp_path, "postgresql://127.0.0.1:1/unused", "unused")
    async with running_worker(client, app, storage, task_queue) as keel:
        handle = await start_indexing(keel, workspace_id, workflow_id=f"index-{task_queue}")
        with pytest.raises(RunFailed, match=error.replace("(", r"\(").replace(")", r"\)")):
            async with asyncio.timeout(20):
                await indexing_result(keel, handle.id)


class PersistentStore:
    """An in-memory store that the indexing cannot tell from a persistent one (it is not `InMemoryVectorStore`)."""

    def __init__(self) -> None:
        self._store = InMemoryVectorStore()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def resumed_environment(done: int, total: int, last: str, worker: str) -> tuple[ActivityEnvironment, list[Any]]:
    env = ActivityEnvironment()
    previous = IndexProgress(done=done, total=total, last=last, indexed=done, chunks=done, worker=worker)
    env.info = dataclasses.replace(
        env.info, attempt=2, heartbeat_details=[previous.model_dump(by_alias=True)], heartbeat_timeout=None
    )
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    return env, beats


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent vectors", "in-memory vectors"])
async def test_a_retry_in_another_process_re_adds_the_bm25_documents_of_the_files_done_without_embedding_them(
    tmp_path: Path, persistent: bool
) -> None:
    paths = make_tree(tmp_path / "tree", 200)
    embedder = CountingEmbedder(tmp_path / "embedded.log")
    store: Any = PersistentStore() if persistent else InMemoryVectorStore()
    workspace = Workspace(
        id="big", filesystem=LocalFilesystem(tmp_path / "tree"), bm25=True, vector_store=store, embedder=embedder
    )
    await workspace.init()
    env, beats = resumed_environment(128, 200, paths[127], worker="another-host-1-abc")
    result = await env.run(WorkspaceIndexing(App(workspaces={"big": workspace})).index_workspace, IndexFilesInput(
        workspace_id="big", paths=["."]
    ))  # fmt: skip
    assert (result.files, result.indexed, result.chunks, result.resumed_from) == (200, 200, 200, 128)
    assert embedder.embedded == (72 if persistent else 200)  # the files done are embedded again only in memory
    assert [b[0].done for b in beats] == [192, 200]
    assert beats[-1][0].worker == PROCESS
    hits = await workspace.search("word5", mode="bm25")  # a file the lost attempt indexed
    assert [h.id for h in hits] == ["d00/f0005.txt"]


async def test_keel_index_indexes_a_workspace_on_a_worker_and_prints_the_summary(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    root = Path(search_workspace.filesystem.base_path)
    for name in ("a", "b"):
        (root / "cli" / name).mkdir(parents=True, exist_ok=True)
        for i in range(70):
            (root / "cli" / name / f"{i}.txt").write_text(f"{name} {i}\n")
    keel = Keel(dev_server, task_queue, tmp_path, data_dir)
    async with running_worker(client, test_app, storage, task_queue):
        code, out, err = await keel(
            "index", "tests-search", "--path", "cli/a", "--path", "cli/b", "--run-id", task_queue
        )
        assert code == 0, err
        assert out.splitlines()[0] == f"indexing workspace tests-search: workflow {task_queue}"
        assert out.splitlines()[-1] == "indexed 140 of 140 files: 140 chunks, 0 skipped"
        code, _, err = await keel("index", "tests-workspace")
        assert code == 2 and "Workspace 'tests-workspace' has no search configured" in err
        code, _, err = await keel("index", "nope")
        assert code == 2 and "Unknown workspace 'nope'" in err
