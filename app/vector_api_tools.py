"""The tools behind the HTTP API's vector routes (`/api/vector/:vectorName/...`): index create, list, describe and
delete, upsert and query, over one of the app's named vector stores (`App.vectors`). Each runs on a worker as the
standalone `keel.execute_tool` activity, addressed by the store's name (`KeelClient.execute_tool(None, tool, args,
vector_store=name)`).

Why on a worker: an `InMemoryVectorStore` lives in the process that holds it, and the vectors a workspace's search
upserts are in the workers' copy of the app, never in the API's. A `PgVectorStore` could be reached from the API
too, but one path for every store keeps one behaviour (the same checks, errors and pool owner) and shows each
operation in the Temporal UI as an activity of its own. With several workers, each has its own in-memory stores:
an app that serves vectors from more than one worker wants a store they share (pgvector).

Each answers its Mastra route's JSON. A failure is a `RouteError` with the status of the caller's mistake where
Mastra's server answers 500 for all of them: an index the store does not have is 404, anything else the store
refuses (a vector of another dimension, a malformed filter, a metric it lacks) 400, and a store that cannot be
reached (a refusal caused by another error, a connection's) 503. It reaches the API as the tool's error text
``"{error_name}: {message}"`` (`route_status` maps it back).

Error tree (`keel.app.workspace_api_tools`'s)::

    AppError
     └── RouteError          400  BadRequestError
          ├── NotFound       404  NotFoundError
          └── Unavailable    503  UnavailableError
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from keel.app.definitions import App, Tool, ToolContext, UnknownTool
from keel.app.workspace_api_tools import NotFound, RouteError, Unavailable
from keel.workspace_providers import WorkspaceError, vector_filter
from keel.workspace_providers.errors import SearchError
from keel.workspace_providers.vector_stores import VectorStore


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoInput(_Input):
    pass


class IndexInput(_Input):
    index_name: str = Field(min_length=1)


class CreateIndexInput(IndexInput):
    dimension: int = Field(ge=1)
    metric: str = "cosine"


class UpsertInput(IndexInput):
    vectors: list[list[float]]
    metadata: list[dict[str, Any]] | None = None
    ids: list[str] | None = None


class QueryInput(IndexInput):
    query_vector: list[float]
    top_k: int = 10
    filter: dict[str, Any] | None = None
    include_vector: bool = False


def filter_error(filter: dict[str, Any] | None) -> str | None:
    """What is wrong with a metadata filter (`keel.workspace_providers.vector_filter`'s language, Mastra's), or
    None: the API answers a malformed one without a worker."""
    try:
        vector_filter.validate(filter)
    except SearchError as err:
        return str(err)
    return None


# --- the operations -----------------------------------------------------------------------------------------


async def create_index(store: VectorStore, args: CreateIndexInput) -> dict[str, Any]:
    await store.create_index(args.index_name, args.dimension, args.metric)
    return {"success": True}


async def list_indexes(store: VectorStore, args: NoInput) -> list[str]:
    return [name for name in await store.list_indexes() if name]


async def describe_index(store: VectorStore, args: IndexInput) -> dict[str, Any]:
    stats = await store.describe_index(args.index_name)
    return {"dimension": stats.dimension, "count": stats.count, "metric": stats.metric.lower()}


async def delete_index(store: VectorStore, args: IndexInput) -> dict[str, Any]:
    """An index the store does not have is deleted already (as the stores' `delete_index` has it)."""
    await store.delete_index(args.index_name)
    return {"success": True}


async def upsert(store: VectorStore, args: UpsertInput) -> dict[str, Any]:
    return {"ids": await store.upsert(args.index_name, args.vectors, args.metadata, args.ids)}


async def query(store: VectorStore, args: QueryInput) -> list[dict[str, Any]]:
    """Mastra's `QueryResult`s: `{id, score, metadata, vector?}`, best first."""
    hits = await store.query(args.index_name, args.query_vector, args.top_k, args.filter, args.include_vector)
    found = []
    for hit in hits:
        shown: dict[str, Any] = {"id": hit.id, "score": hit.score, "metadata": hit.metadata}
        if hit.vector is not None:
            shown["vector"] = hit.vector
        found.append(shown)
    return found


# --- the tools ----------------------------------------------------------------------------------------------

Operation = Callable[[VectorStore, Any], Awaitable[Any]]


@dataclass(frozen=True)
class _Route:
    input: type[BaseModel]
    run: Operation
    description: str
    on_index: bool = False
    """It works on an index that must exist: a refusal for an index the store lacks is a 404."""


CREATE_INDEX = "keel_vector_create_index"
LIST_INDEXES = "keel_vector_list_indexes"
DESCRIBE_INDEX = "keel_vector_describe_index"
DELETE_INDEX = "keel_vector_delete_index"
UPSERT = "keel_vector_upsert"
QUERY = "keel_vector_query"

_ROUTES: dict[str, _Route] = {
    CREATE_INDEX: _Route(CreateIndexInput, create_index, "POST /vector/:vectorName/create-index: create an index"),
    LIST_INDEXES: _Route(NoInput, list_indexes, "GET /vector/:vectorName/indexes: the store's indexes"),
    DESCRIBE_INDEX: _Route(
        IndexInput, describe_index, "GET /vector/:vectorName/indexes/:indexName: its size", on_index=True
    ),
    DELETE_INDEX: _Route(IndexInput, delete_index, "DELETE /vector/:vectorName/indexes/:indexName: drop it"),
    UPSERT: _Route(UpsertInput, upsert, "POST /vector/:vectorName/upsert: insert or replace vectors", on_index=True),
    QUERY: _Route(QueryInput, query, "POST /vector/:vectorName/query: the nearest vectors", on_index=True),
}
VECTOR_API_TOOLS = tuple(_ROUTES)


async def _route_error(
    store: VectorStore, store_name: str, route: _Route, args: Any, err: WorkspaceError
) -> RouteError:
    if err.__cause__ is not None:  # the store's own failure to reach its database, not the request's
        return Unavailable(str(err))
    if route.on_index and args.index_name not in await store.list_indexes():
        return NotFound(f'Index "{args.index_name}" not found in vector store "{store_name}"')
    return RouteError(str(err))


def vector_api_tool(app: App, store_name: str, name: str) -> Tool:
    """The HTTP API's tool `name` over the app's vector store `store_name`. Raises `AppError` for an unknown store,
    `UnknownTool` for an unknown name."""
    store = app.get_vector(store_name)
    route = _ROUTES.get(name)
    if route is None:
        raise UnknownTool(name, None)

    async def execute(args: BaseModel, ctx: ToolContext) -> Any:
        try:
            return await route.run(store, args)
        except WorkspaceError as err:  # a store's refusal (`SearchError`)
            raise await _route_error(store, store_name, route, args, err) from err

    return Tool(id=name, description=route.description, input_schema=route.input, execute=execute)


__all__ = [
    "CREATE_INDEX",
    "DELETE_INDEX",
    "DESCRIBE_INDEX",
    "LIST_INDEXES",
    "QUERY",
    "UPSERT",
    "VECTOR_API_TOOLS",
    "VectorStore",
    "filter_error",
    "vector_api_tool",
]
