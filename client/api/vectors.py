"""`/api/vectors` and `/api/vector/:vectorName/...`: the app's named vector stores (`App.vectors`: the ones it
registers, and each workspace's own under the workspace's id), their indexes, upserts and similarity queries with
metadata filters, in Mastra's shapes for `@mastra/client-js` (`client.listVectors()`, `client.getVector(name)`).

Listing the stores reads the app's configuration here. Every operation on a store runs on a worker as a standalone
`keel.execute_tool` activity (`keel.app.vector_api_tools`), where the stores live: the vectors a workspace's search
keeps in memory are in the worker, and each operation shows in the Temporal UI. What Mastra's routes answer
without the store (an unknown store, a malformed body or filter) is answered here, without a worker. An upsert
without `ids` gets its ids here, so the activity, were it run again, replaces what it wrote.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import Field

from keel.app import App
from keel.app import vector_api_tools as tools
from keel.app.vector_api_tools import VectorStore
from keel.app.workspace_api_tools import route_status
from keel.client.api.bodies import Lenient
from keel.client.api.context import Ctx
from keel.client.api.errors import ApiError, bad_request, not_found

router = APIRouter(tags=["vectors"])

MAX_DIMENSION = 16_000
"""The most dimensions an index may have: pgvector's `vector` type holds no more."""
MAX_TOP_K = 1_000_000

Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A JSON number (zod's `z.number()`): not a string or a boolean, not NaN or infinite."""


class UpsertBody(Lenient):
    index_name: str = Field(alias="indexName")
    vectors: list[list[Number]]
    metadata: list[dict[str, Any]] | None = None
    ids: list[str] | None = None


class CreateIndexBody(Lenient):
    index_name: str = Field(alias="indexName")
    dimension: Number
    metric: Literal["cosine", "euclidean", "dotproduct"] | None = None


class QueryBody(Lenient):
    index_name: str = Field(alias="indexName")
    query_vector: list[Number] = Field(alias="queryVector")
    top_k: Number | None = Field(None, alias="topK")
    filter: dict[str, Any] | None = None
    include_vector: bool | None = Field(None, alias="includeVector")


def _store(ctx: Ctx, vector_name: str) -> VectorStore:
    store = ctx.app.vectors.get(vector_name)
    if store is None:
        raise not_found(f"Vector with name {vector_name} not found")
    return store


def _listed(app: App, name: str, store: VectorStore) -> dict[str, Any]:
    own_id = getattr(store, "id", None)
    shown: dict[str, Any] = {"id": own_id if isinstance(own_id, str) and own_id else name, "name": name}
    shown["type"] = type(store).__name__
    ws = app.workspaces.get(name)
    engine = ws.search_engine if ws is not None else None
    if ws is not None and engine is not None and engine.vector is not None and engine.vector.store is store:
        shown["description"] = f"The vector search of workspace {ws.name}"
    return shown


async def _run(ctx: Ctx, vector_name: str, tool: str, args: dict[str, Any]) -> Any:
    """Run the route's tool on a worker; its error text as Mastra's `{error}` with the route's status."""
    _store(ctx, vector_name)
    outcome = await ctx.keel.execute_tool(None, tool, args, vector_store=vector_name)
    if not outcome.is_error:
        return outcome.result
    text = str(outcome.result.get("error") if isinstance(outcome.result, dict) else outcome.result)
    known = route_status(text)
    if known is None:
        raise ApiError(500, f"Internal error: {text}")
    raise ApiError(*known)


def _whole(value: float, what: str, least: int, most: int) -> int:
    if not value.is_integer() or not least <= value <= most:
        raise bad_request(f"{what} must be a whole number from {least} to {most}, not {value:g}")
    return int(value)


@router.get("/vectors")
async def list_vectors(ctx: Ctx) -> dict[str, Any]:
    return {"vectors": [_listed(ctx.app, name, store) for name, store in ctx.app.vectors.items()]}


@router.post("/vector/{vector_name}/create-index")
async def create_index(ctx: Ctx, vector_name: str, body: CreateIndexBody) -> Any:
    """Keel's stores have the cosine metric only: another is the store's 400."""
    if not body.index_name or body.dimension <= 0:
        raise bad_request("Invalid request index, indexName and positive dimension number are required.")
    _store(ctx, vector_name)
    args = {
        "index_name": body.index_name,
        "dimension": _whole(body.dimension, "dimension", 1, MAX_DIMENSION),
        "metric": body.metric or "cosine",
    }
    return await _run(ctx, vector_name, tools.CREATE_INDEX, args)


@router.post("/vector/{vector_name}/upsert")
async def upsert(ctx: Ctx, vector_name: str, body: UpsertBody) -> Any:
    if not body.index_name:
        raise bad_request("Invalid request index. indexName and vectors array are required.")
    _store(ctx, vector_name)
    ids = body.ids if body.ids is not None else [str(uuid.uuid4()) for _ in body.vectors]
    args = {"index_name": body.index_name, "vectors": body.vectors, "metadata": body.metadata, "ids": ids}
    return await _run(ctx, vector_name, tools.UPSERT, args)


@router.post("/vector/{vector_name}/query")
async def query(ctx: Ctx, vector_name: str, body: QueryBody) -> Any:
    """Results `{id, score, metadata, vector?}`, best first; `topK` defaults to 10, as in Mastra's stores."""
    if not body.index_name:
        raise bad_request("Invalid request query. indexName and queryVector array are required.")
    _store(ctx, vector_name)
    problem = tools.filter_error(body.filter)
    if problem is not None:
        raise bad_request(problem)
    args = {
        "index_name": body.index_name,
        "query_vector": body.query_vector,
        "top_k": 10 if body.top_k is None else _whole(body.top_k, "topK", 0, MAX_TOP_K),
        "filter": body.filter,
        "include_vector": bool(body.include_vector),
    }
    return await _run(ctx, vector_name, tools.QUERY, args)


@router.get("/vector/{vector_name}/indexes")
async def list_indexes(ctx: Ctx, vector_name: str) -> Any:
    return await _run(ctx, vector_name, tools.LIST_INDEXES, {})


@router.get("/vector/{vector_name}/indexes/{index_name}")
async def describe_index(ctx: Ctx, vector_name: str, index_name: str) -> Any:
    """`{dimension, count, metric}`; an index the store lacks is 404."""
    return await _run(ctx, vector_name, tools.DESCRIBE_INDEX, {"index_name": index_name})


@router.delete("/vector/{vector_name}/indexes/{index_name}")
async def delete_index(ctx: Ctx, vector_name: str, index_name: str) -> Any:
    return await _run(ctx, vector_name, tools.DELETE_INDEX, {"index_name": index_name})
