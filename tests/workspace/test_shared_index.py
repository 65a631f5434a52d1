"""A workspace's search index shared through Keel's storage: two workers (two `Workspace` objects on the same
files, each with its own connection to the same SQLite file or PostgreSQL database, as two processes have)
answer every query alike after an indexing on either; a restarted worker indexes nothing again that storage
holds with the same content; a changed file is indexed again and a deleted one leaves every worker's index.
Through Temporal too: `IndexWorkspace` on one worker process, the search tool on another."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from keel.activities.indexing import WorkspaceIndexing
from keel.app import App
from keel.client import KeelClient
from keel.client.devserver import DevServer
from keel.client.indexing import indexing_result, start_indexing
from keel.protocol.search_index import IndexedDocument, IndexVersion
from keel.storage import Storage, open_storage
from keel.workflows.contracts import IndexFilesInput, IndexWorkspaceResult
from keel.workspace_providers import InMemoryVectorStore, LocalFilesystem, Workspace
from tests.conftest import worker_subprocess

WORDS = "river stone lantern copper harbor meadow signal orbit velvet quartz ember willow".split()
QUERIES = ["river stone", "lantern", "copper harbor signal", "tie words", "orbit velvet ember", "chapter"]
WORKSPACE = "shared"


def make_files(root: Path, count: int = 30) -> list[str]:
    """`count` small files of words drawn from a short list (scores differ), three identical files (scores
    tie), and one past 4,000 characters (chunks)."""
    rng = random.Random(7)
    paths = []
    for i in range(count):
        path = f"notes/n{i:02d}.md"
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40))))
        paths.append(path)
    for name in ("a", "b", "c"):
        (root / f"ties/{name}.md").parent.mkdir(parents=True, exist_ok=True)
        (root / f"ties/{name}.md").write_text("tie words here")
        paths.append(f"ties/{name}.md")
    (root / "book.md").write_text("\n".join(f"chapter {i} " + " ".join(WORDS[i % 12 :]) for i in range(300)))
    return [*paths, "book.md"]


class PersistentVectors:
    """An in-memory vector store shared by the two workers that indexing cannot tell from a persistent one (it
    is not an `InMemoryVectorStore`): what PgVectorStore is across processes."""

    def __init__(self) -> None:
        self._store = InMemoryVectorStore()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class CountingEmbedder:
    """A cheap deterministic batch embedder counting the texts it embedded."""

    batch = True
    max_batch_size = 256

    def __init__(self) -> None:
        self.embedded = 0

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return [[1.0 + sum(map(ord, t)) % 7, 1.0 + len(t) % 5, 1.0] for t in texts]


@pytest.fixture
async def open_store(store_url: str) -> AsyncIterator[Callable[[], Storage]]:
    """Opens a new connection to one store (SQLite, then PostgreSQL) per call: one per worker."""
    opened: list[Storage] = []

    def open_one() -> Storage:
        opened.append(open_storage(store_url))
        return opened[-1]

    first = open_one()
    await first.init()
    yield open_one
    for store in opened:
        await store.close()


def worker(root: Path, store: Storage | None, **search: Any) -> Workspace:
    """A worker's workspace over `root`, its index in `store` (None: alone, in memory)."""
    ws = Workspace(id=WORKSPACE, filesystem=LocalFilesystem(root), auto_index_paths=["."], **({"bm25": True} | search))
    ws.share_search_index(store)
    return ws


async def answers(ws: Workspace, mode: str = "bm25") -> list[list[dict[str, Any]]]:
    return [[r.to_dict() for r in await ws.search(q, top_k=20, mode=mode)] for q in QUERIES]


async def test_the_store_keeps_documents_in_write_order_and_a_hash_per_file(
    open_store: Callable[[], Storage],
) -> None:
    store = open_store()
    assert await store.search_index_version(WORKSPACE) == IndexVersion()
    first = await store.write_search_index(
        WORKSPACE,
        documents=[
            IndexedDocument("a.md#chunk-0", "a.md", "one", {"sourceFile": "a.md", "z": 1, "b": [1.5, None]}),
            IndexedDocument("a.md#chunk-1", "a.md", "two", {"sourceFile": "a.md"}),
            IndexedDocument("memo", "memo", "first"),
            IndexedDocument("b.md", "b.md", "three"),
            IndexedDocument("memo", "memo", "again"),  # a repeated id: the last one, in the first one's place
        ],
        files={"a.md": "h1", "b.md": None},
    )
    assert (first.previous, first.version) == (0, 1) and first.generation
    changes = await store.search_index_changes(WORKSPACE, 0)
    assert (changes.generation, changes.version, changes.count) == (first.generation, 1, 4)
    assert [(d.id, d.content) for d in changes.documents] == [
        ("a.md#chunk-0", "one"), ("a.md#chunk-1", "two"), ("memo", "again"), ("b.md", "three"),
    ]  # fmt: skip
    assert list(changes.documents[0].metadata.items()) == [("sourceFile", "a.md"), ("z", 1), ("b", [1.5, None])]
    second = await store.write_search_index(
        WORKSPACE, remove=["a.md"], documents=[IndexedDocument("b.md", "b.md", "four")], files={"b.md": "h2"}
    )
    assert (second.generation, second.previous, second.version) == (first.generation, 1, 2)
    changes = await store.search_index_changes(WORKSPACE, 1)
    assert (changes.version, changes.count, [d.content for d in changes.documents]) == (2, 2, ["four"])
    assert sorted(await store.search_index_ids(WORKSPACE)) == ["b.md", "memo"]
    assert await store.search_index_files(WORKSPACE) == {"b.md": "h2"}
    assert await store.search_index_files(WORKSPACE, ["b.md", "c.md"]) == {"b.md": "h2"}
    assert await store.search_index_version("another") == IndexVersion()


async def test_the_other_worker_answers_every_query_as_the_one_that_indexed(
    tmp_path: Path, open_store: Callable[[], Storage]
) -> None:
    make_files(tmp_path)
    one, other = worker(tmp_path, open_store()), worker(tmp_path, open_store())
    alone = worker(tmp_path, None)
    assert len(await one.rebuild_search_index()) == 34
    await alone.rebuild_search_index()
    engine = other.search_engine
    assert engine is not None and len(engine) == 0  # it indexed nothing itself
    found = await answers(one)
    assert await answers(other) == found == await answers(alone)  # ids, scores, line ranges, metadata, ties
    assert [r["id"] for r in found[3]] == ["ties/a.md", "ties/b.md", "ties/c.md"]
    assert len({r["score"] for r in found[3]}) == 1
    assert one.search_engine is not None and engine.ids == one.search_engine.ids  # the same corpus, in the same order
    assert engine.count_by_prefix("book.md#chunk-") > 1


async def test_an_index_call_on_one_worker_is_found_by_the_other_with_the_same_score(
    tmp_path: Path, open_store: Callable[[], Storage]
) -> None:
    make_files(tmp_path)
    one, other = worker(tmp_path, open_store()), worker(tmp_path, open_store())
    await one.rebuild_search_index()
    await other.index("memo/today.md", "copper harbor at dawn", metadata={"team": "x", "a": [1, 2.5]})
    [hit] = await one.search("dawn", mode="bm25")
    assert hit.to_dict() == (await other.search("dawn", mode="bm25"))[0].to_dict()
    assert hit.metadata == {"team": "x", "a": [1, 2.5]}
    assert await answers(one) == await answers(other)
    await one.index("memo/today.md", "copper harbor at dusk")  # replaced, on the other worker this time
    assert [r.id for r in await other.search("dusk dawn", mode="bm25")] == ["memo/today.md"]
    assert await answers(one) == await answers(other)


async def test_a_restarted_worker_embeds_and_writes_nothing_for_unchanged_files_and_picks_up_a_changed_one(
    tmp_path: Path, open_store: Callable[[], Storage]
) -> None:
    make_files(tmp_path)
    vectors, embedder = PersistentVectors(), CountingEmbedder()
    first = worker(tmp_path, open_store(), vector_store=vectors, embedder=embedder)
    await first.init()
    documents = embedder.embedded
    assert documents > 34
    store = open_store()
    version = await store.search_index_version(WORKSPACE)

    restarted = worker(tmp_path, store, vector_store=vectors, embedder=embedder)
    await restarted.init()  # indexes auto_index_paths again
    assert embedder.embedded == documents  # nothing embedded again
    assert await store.search_index_version(WORKSPACE) == version  # nothing written
    assert await answers(restarted) == await answers(first)
    assert await answers(restarted, "hybrid") == await answers(first, "hybrid")

    (tmp_path / "notes/n03.md").write_text("a brand new quasar sentence")
    before = embedder.embedded  # (queries are embedded too)
    await restarted.rebuild_search_index()
    assert embedder.embedded == before + 1  # the changed file alone
    assert (await store.search_index_version(WORKSPACE)).version == version.version + 1  # in one write
    for ws in (first, restarted):
        assert [r.id for r in await ws.search("quasar", mode="bm25")] == ["notes/n03.md"]
    stored = {h.id: h.metadata["text"] for h in await vectors.query("shared_search", [1.0, 1.0, 1.0], top_k=1000)}
    assert stored["notes/n03.md"] == "a brand new quasar sentence"


async def test_a_deleted_file_leaves_the_index_of_every_worker_and_the_vector_store(
    tmp_path: Path, open_store: Callable[[], Storage]
) -> None:
    make_files(tmp_path)
    vectors = PersistentVectors()
    one = worker(tmp_path, open_store(), vector_store=vectors, embedder=CountingEmbedder())
    other = worker(tmp_path, open_store(), vector_store=vectors, embedder=CountingEmbedder())
    await one.init()
    await other.index("memo.md", "kept: indexed by the tool, not from a file")
    assert "book.md#chunk-0" in {r.id for r in await other.search("chapter", mode="bm25", top_k=100)}
    (tmp_path / "book.md").unlink()
    (tmp_path / "ties/b.md").unlink()
    await one.rebuild_search_index()
    for ws in (one, other):
        assert not [r.id for r in await ws.search("chapter", mode="bm25", top_k=100)]
        assert [r.id for r in await ws.search("tie words", mode="bm25")] == ["ties/a.md", "ties/c.md"]
        assert [r.id for r in await ws.search("indexed tool", mode="bm25")] == ["memo.md"]
    left = {h.id for h in await vectors.query("shared_search", [1.0, 1.0, 1.0], top_k=1000)}
    assert not {i for i in left if i.startswith("book.md") or i == "ties/b.md"} and "ties/a.md" in left
    assert await answers(one) == await answers(other)


async def test_two_workers_writing_at_once_end_with_the_same_index(
    tmp_path: Path, open_store: Callable[[], Storage]
) -> None:
    one, other = worker(tmp_path, open_store()), worker(tmp_path, open_store())
    rng = random.Random(3)

    async def write(ws: Workspace, i: int) -> None:
        await ws.index(f"doc{i % 25}", " ".join(rng.choice(WORDS) for _ in range(12)))
        await ws.search("river", mode="bm25")  # reads in between: each catches up on the other's writes

    await asyncio.gather(*(write(one if i % 2 else other, i) for i in range(60)))
    assert await answers(one) == await answers(other)
    assert one.search_engine is not None and other.search_engine is not None
    assert one.search_engine.ids == other.search_engine.ids and len(one.search_engine) == 25


async def test_with_in_memory_vectors_a_restarted_worker_embeds_again_but_writes_nothing(tmp_path: Path) -> None:
    make_files(tmp_path)
    url = f"sqlite:///{tmp_path / 'keel.db'}"
    first_store, second_store = open_storage(url), open_storage(url)
    await first_store.init()
    try:
        embedder = CountingEmbedder()
        await worker(tmp_path, first_store, vector_store=InMemoryVectorStore(), embedder=embedder).init()
        documents, version = embedder.embedded, await first_store.search_index_version(WORKSPACE)
        vectors = InMemoryVectorStore()
        restarted = worker(tmp_path, second_store, vector_store=vectors, embedder=embedder)
        await restarted.init()
        assert embedder.embedded == 2 * documents  # its vectors died with the process: embedded again
        assert await second_store.search_index_version(WORKSPACE) == version  # the documents are stored
        assert (await vectors.describe_index("shared_search")).count == documents
        await restarted.rebuild_search_index()
        assert embedder.embedded == 2 * documents  # once per process
    finally:
        await first_store.close()
        await second_store.close()


async def test_the_indexing_activity_skips_unchanged_files_and_removes_the_deleted_ones(tmp_path: Path) -> None:
    make_files(tmp_path)
    store = open_storage(f"sqlite:///{tmp_path / 'keel.db'}")
    await store.init()
    try:
        ws = worker(tmp_path, store)
        activity = WorkspaceIndexing(App(workspaces={WORKSPACE: ws})).index_workspace

        async def index(paths: list[str]) -> IndexWorkspaceResult:
            result: IndexWorkspaceResult = await ActivityEnvironment().run(
                activity, IndexFilesInput(workspace_id=WORKSPACE, paths=paths)
            )
            return result

        first = await index(["notes", "ties"])
        assert (first.indexed, first.unchanged, first.removed) == (33, 0, 0)
        (tmp_path / "notes/n00.md").write_text("changed")
        (tmp_path / "notes/n01.md").unlink()
        again = await index(["notes", "ties"])
        assert (again.files, again.indexed, again.unchanged, again.removed) == (32, 32, 31, 1)
        assert again.chunks == first.chunks - 1
        book = await index(["book.md"])  # other paths: the notes stay
        assert (book.indexed, book.unchanged, book.removed) == (1, 0, 0)
        assert sorted(await store.search_index_files(WORKSPACE)) == sorted(
            [f"notes/n{i:02d}.md" for i in range(30) if i != 1] + ["ties/a.md", "ties/b.md", "ties/c.md", "book.md"]
        )
    finally:
        await store.close()


async def test_a_store_emptied_under_a_worker_is_read_again_from_scratch(tmp_path: Path) -> None:
    make_files(tmp_path)
    url = f"sqlite:///{tmp_path / 'keel.db'}"
    stores = [open_storage(url), open_storage(url)]
    await stores[0].init()
    try:
        one, other = worker(tmp_path, stores[0]), worker(tmp_path, stores[1])
        await one.rebuild_search_index()
        assert await answers(other) == await answers(one)
        with sqlite3.connect(tmp_path / "keel.db") as conn:  # what a `keel reset` of the storage leaves
            for table in ("search_indexes", "search_index_documents", "search_index_files"):
                conn.execute(f"DELETE FROM {table}")
        await one.index("only.md", "river")
        for ws in (one, other):
            assert [r.id for r in await ws.search("river stone", mode="bm25", top_k=100)] == ["only.md"]
    finally:
        for store in stores:
            await store.close()


async def test_index_workspace_on_one_worker_process_and_search_on_another(
    client: Client, dev_server: DevServer, tmp_path: Path, data_dir: Path
) -> None:
    make_files(data_dir / "shared")
    queues = [f"test-{uuid.uuid4()}", f"test-{uuid.uuid4()}"]
    indexer, searcher = (KeelClient(client, task_queue=q) for q in queues)
    app = "tests.workspace.shared_index_app:app"
    with (
        worker_subprocess(dev_server, queues[0], tmp_path, data_dir, app=app),
        worker_subprocess(dev_server, queues[1], tmp_path, data_dir, app=app),
    ):
        handle = await start_indexing(indexer, WORKSPACE, ["."], workflow_id=f"index-{queues[0]}")
        async with asyncio.timeout(60):
            result = await indexing_result(indexer, handle.id)
        assert (result.indexed, result.unchanged) == (34, 0)

        async def search(keel: KeelClient, query: str) -> Any:
            args = {"query": query, "top_k": 20, "mode": "bm25"}
            found = await keel.execute_tool(None, "keel_workspace_search", args, workspace_id=WORKSPACE)
            assert not found.is_error, found.result
            return found.result

        for query in QUERIES:
            assert await search(searcher, query) == await search(indexer, query)
        assert [r["id"] for r in (await search(searcher, "tie words"))["results"]] == [
            "ties/a.md",
            "ties/b.md",
            "ties/c.md",
        ]
        args = {"path": "memo.md", "content": "a nebula over the harbor"}
        indexed = await searcher.execute_tool(None, "keel_workspace_index", args, workspace_id=WORKSPACE)
        assert not indexed.is_error, indexed.result
        assert [r["id"] for r in (await search(indexer, "nebula"))["results"]] == ["memo.md"]
        again = await start_indexing(searcher, WORKSPACE, ["."], workflow_id=f"index-{queues[1]}")
        async with asyncio.timeout(60):
            second = await indexing_result(searcher, again.id)
        assert (second.indexed, second.unchanged, second.removed) == (34, 34, 0)  # a restart re-indexes nothing
