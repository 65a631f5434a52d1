"""Vector stores over HTTP with the real `@mastra/client-js`: the app's named stores listed, indexes created,
described and deleted, vectors upserted with metadata and queried with `topK`, metadata filters and
`includeVector`, each operation a standalone `keel.execute_tool` activity on the worker. The calls
(tests/http_api/js/vector_calls.mjs) are the ones bench/mastra/vector_http_record.mjs made to Mastra's own server
(tests/fixtures/mastra_vector_http.json): Keel answers them as it did, but with a 4xx where Mastra answers a
caller's mistake with a 500."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client

from keel.app import App, AppError, ToolContext
from keel.app.vector_api_tools import DESCRIBE_INDEX, vector_api_tool
from keel.app.workspace_api_tools import RouteError
from keel.client.api import create_api
from keel.client.api.server import serving
from keel.storage import Storage
from keel.workspace_providers import InMemoryVectorStore, LocalFilesystem, Workspace
from keel.workspace_providers.pgvector import PgVectorStore
from tests.conftest import free_port, running_worker
from tests.http_api.conftest import Api
from tests.http_api.vector_app import VECTORS, letters

ROOT = Path(__file__).resolve().parents[2]
CALLS = ROOT / "tests" / "http_api" / "js" / "vector_calls.mjs"
MASTRA = json.loads((ROOT / "tests" / "fixtures" / "mastra_vector_http.json").read_text())["calls"]
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")

KEEL_STATUS = {
    "create_other_dimension": 400,  # Mastra's LibSQLVector keeps the old dimension and answers success
    "upsert_wrong_dimension": 400,
    "query_wrong_dimension": 400,
    "query_unknown_operator": 400,
    "query_unknown_index": 404,
    "details_unknown_index": 404,
}
"""The calls Mastra's server answers with a 500 (or, for the first, a success) and Keel with the caller's 4xx."""


def _normal(value: Any) -> Any:
    return json.loads(UUID.sub("<uuid>", json.dumps(value)))


def _same_results(keel: Any, mastra: Any) -> None:
    """Query results: the same ids, metadata and vectors in the same order, scores equal to float32's precision."""
    assert [{k: v for k, v in r.items() if k != "score"} for r in keel] == [
        {k: v for k, v in r.items() if k != "score"} for r in mastra
    ]
    assert [r["score"] for r in keel] == pytest.approx([r["score"] for r in mastra], abs=1e-6)


def assert_answers_as_mastra(out: dict[str, Any], store_type: str) -> None:
    out = _normal(out)
    assert list(out) == list(MASTRA)
    listed = {v["name"]: v for v in out["list"]["vectors"]}
    assert listed["docs"] == {"id": "docs", "name": "docs", "type": store_type}
    assert MASTRA["list"]["vectors"] == [{"id": "docs-store", "name": "docs", "type": "LibSQLVector"}]
    for label, mastra in MASTRA.items():
        keel = out[label]
        if label == "list":
            continue
        if label in KEEL_STATUS:
            assert keel["status"] == KEEL_STATUS[label], (label, keel)
            assert set(keel["body"]) == {"error"} and keel["body"]["error"], (label, keel)
        elif label == "create_unknown_metric":  # zod's and pydantic's issue texts differ
            assert keel["status"] == mastra["status"] == 400
            assert keel["body"]["error"] == mastra["body"]["error"] == "Invalid request body"
            assert [i["field"] for i in keel["body"]["issues"]] == ["metric"]
        elif label.startswith("query_"):
            _same_results(keel, mastra)
        else:
            assert keel == mastra, label


async def test_client_js_vector_calls_are_answered_as_mastras_server_answers_them(api: Api, task_queue: str) -> None:
    store = VECTORS["docs"]  # the worker's store: it runs in this process
    for name in await store.list_indexes():  # what other tests of the session left (the routes' fuzzing)
        await store.delete_index(name)
    out = await api.js(
        "const {vectorCalls} = await import(vars.calls); return await vectorCalls(client, 'docs');", calls=str(CALLS)
    )
    assert_answers_as_mastra(out, "InMemoryVectorStore")
    assert out["query_unknown_index"]["body"] == {"error": 'Index "missing" not found in vector store "docs"'}
    assert out["upsert_wrong_dimension"]["body"] == {"error": "A vector of dimension 2 for an index of 3"}
    assert out["query_unknown_operator"]["body"] == {"error": "Unknown operator '$like' for field 'kind'"}
    # Each operation on the store ran on the worker as a standalone activity; what the API answers alone (the
    # list, an unknown store, a malformed body or filter) ran none.
    ran = len(MASTRA) - 5  # not the list, the zero dimension, the unknown metric and store, the bad filter
    for _ in range(50):  # the visibility store lists the last ones a moment later
        activities = [a async for a in api.keel.temporal.list_activities(f"TaskQueue = '{task_queue}'")]
        if len(activities) >= ran:
            break
        await asyncio.sleep(0.1)
    assert {a.activity_type for a in activities} == {"keel.execute_tool"}
    assert all(a.activity_id.startswith("keel-tool-vectors-docs-keel_vector_") for a in activities)
    assert len(activities) == ran


async def test_a_workspaces_search_vectors_are_served_under_the_workspaces_id(api: Api) -> None:
    out = await api.js("""
        const {vectors} = await client.listVectors();
        await client.getWorkspace("api-vectors").index({path: "notes/temporal.md", content: "temporal replays"});
        await client.getWorkspace("api-vectors").index({path: "notes/other.md", content: "nothing to see"});
        const store = client.getVector("api-vectors");
        const indexes = await store.getIndexes();
        const details = await store.details(indexes[0]);
        const found = await store.query({indexName: indexes[0], queryVector: vars.query, topK: 1});
        const filtered = await store.query(
            {indexName: indexes[0], queryVector: vars.query, filter: {id: {$in: ["notes/other.md"]}}});
        return {vectors, indexes, details, found, filtered};
    """, query=await letters("temporal"))  # fmt: skip
    assert {"id": "api-vectors", "name": "api-vectors", "type": "InMemoryVectorStore"}.items() <= next(
        v for v in out["vectors"] if v["name"] == "api-vectors"
    ).items()
    assert out["indexes"] == ["api_vectors_search"]
    assert out["details"] == {"dimension": 26, "count": 2, "metric": "cosine"}
    [hit] = out["found"]
    assert hit["id"] == "notes/temporal.md" and hit["metadata"]["text"] == "temporal replays"
    assert [h["id"] for h in out["filtered"]] == ["notes/other.md"]


async def test_bad_requests_are_answered_without_a_worker(api: Api) -> None:
    out = await api.js("""
        const failure = async (call) => {
            try { await call(); return null; } catch (e) { return {status: e.status, body: e.body}; }
        };
        const v = client.getVector("docs");
        return {
            fractionalDimension: await failure(() => v.createIndex({indexName: "x", dimension: 2.5})),
            hugeDimension: await failure(() => v.createIndex({indexName: "x", dimension: 1e9})),
            noIndexName: await failure(() => v.upsert({indexName: "", vectors: [[1]]})),
            stringVector: await failure(() => v.query({indexName: "x", queryVector: ["1"]})),
            negativeTopK: await failure(() => v.query({indexName: "x", queryVector: [1], topK: -1})),
            emptyAnd: await failure(() => v.query({indexName: "x", queryVector: [1], filter: {$and: []}})),
            unknownStoreQuery: await failure(() => client.getVector("nope").query({indexName: "x", queryVector: [1]})),
        };
    """)  # fmt: skip
    assert {k: v["status"] for k, v in out.items()} == {
        "fractionalDimension": 400,
        "hugeDimension": 400,
        "noIndexName": 400,
        "stringVector": 400,
        "negativeTopK": 400,
        "emptyAnd": 400,
        "unknownStoreQuery": 404,
    }
    assert out["emptyAnd"]["body"] == {"error": "$and takes a non-empty list of filters"}
    assert out["unknownStoreQuery"]["body"] == {"error": "Vector with name nope not found"}


@pytest.mark.timeout(120)
async def test_pgvector_answers_the_same_calls_as_mastra(
    client: Client, storage: Storage, task_queue: str, client_js: Path, pg_dsn: str
) -> None:
    schema = f"vectors_{secrets.token_hex(4)}"  # a schema of its own: the store lists every vector table in it
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")
    finally:
        await conn.close()
    store = PgVectorStore(pg_dsn, schema=schema)
    app = App.of(vectors={"docs": store})
    try:
        async with running_worker(client, app, storage, task_queue) as keel:
            async with serving(create_api(app, keel, storage), "127.0.0.1", free_port()) as url:
                out = await Api(url, keel, storage).js(
                    "const {vectorCalls} = await import(vars.calls); return await vectorCalls(client, 'docs');",
                    calls=str(CALLS),
                )
    finally:
        await store.close()
    assert_answers_as_mastra(out, "PgVectorStore")


def test_an_app_lists_each_workspaces_vector_store_once_under_the_workspaces_id(tmp_path: Path) -> None:
    shared, own = InMemoryVectorStore(), InMemoryVectorStore()

    def ws(id: str, store: InMemoryVectorStore) -> Workspace:
        return Workspace(id=id, filesystem=LocalFilesystem(tmp_path), vector_store=store, embedder=letters)

    app = App.of(workspace=ws("main", own), vectors={"shared": shared})
    assert App(workspaces={"a": ws("a", shared), "b": ws("b", own)}).vectors.keys() == {"a", "b"}
    assert app.vectors == {"shared": shared, "main": own}
    assert App(workspace=ws("w", shared), vectors={"shared": shared}).vectors == {"shared": shared}
    with pytest.raises(AppError, match="register the workspace's store under a name of its own"):
        App(workspace=ws("taken", own), vectors={"taken": shared})
    with pytest.raises(AppError, match=r"Unknown vector store 'nope' \(known vector stores: main, shared\)"):
        app.get_vector("nope")


async def test_a_store_that_cannot_reach_its_database_is_unavailable_not_the_callers_fault() -> None:
    store = PgVectorStore(f"postgresql://keel@127.0.0.1:{free_port()}/nowhere")  # nothing listens there
    tool = vector_api_tool(App.of(vectors={"pg": store}), "pg", DESCRIBE_INDEX)
    ctx = ToolContext(run_id="r", tool_call_id="c", agent_id="", thread_id="", resource_id="")
    with pytest.raises(RouteError) as failed:
        await tool.execute(tool.parse_args({"index_name": "docs"}), ctx)
    assert (failed.value.status, failed.value.error_name) == (503, "UnavailableError")
    assert "Cannot reach PostgreSQL" in str(failed.value)
