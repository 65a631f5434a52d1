"""`PgVectorStore`: workspace search vectors in PostgreSQL with pgvector, over asyncpg.

Each index is a table ``<index_name>(id text primary key, embedding vector(<dimension>), metadata jsonb)`` with an
HNSW index on cosine distance; a query orders by ``embedding <=> query`` (score = 1 - distance, the cosine
similarity) and filters on the metadata with `vector_filter`'s language translated to jsonb operators. Filtered
queries use pgvector's iterative index scan, so a selective filter still fills `top_k`.

    store = PgVectorStore("postgresql://localhost/keel")      # or PgVectorStore(pool=an_asyncpg_pool)
    Workspace(..., vector_store=store, embedder=SentenceTransformerEmbedder())
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from keel.workspace_providers import vector_filter
from keel.workspace_providers.errors import SearchError
from keel.workspace_providers.vector_stores import IndexStats, VectorHit, check_index_name


class PgVectorStore:
    def __init__(self, url: str | None = None, *, pool: Any = None, schema: str = "public") -> None:
        if (url is None) == (pool is None):
            raise SearchError("PgVectorStore needs a connection URL or an asyncpg pool (one of them)")
        self._url = url
        self._pool = pool
        self._owns_pool = pool is None
        self.schema = check_index_name(schema)
        self._ready = asyncio.Lock()
        self._extension = False

    async def _get_pool(self) -> Any:
        async with self._ready:
            if self._pool is None:
                try:
                    import asyncpg
                except ImportError:
                    raise SearchError("PgVectorStore needs asyncpg: pip install 'keel[postgres]'") from None
                try:
                    self._pool = await asyncpg.create_pool(self._url, min_size=1, max_size=4)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as err:
                    raise SearchError(f"Cannot reach PostgreSQL for vectors ({type(err).__name__}: {err})") from err
            if not self._extension:
                async with self._pool.acquire() as conn:
                    await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                self._extension = True
            return self._pool

    async def close(self) -> None:
        if self._owns_pool and self._pool is not None:
            await self._pool.close()
            self._pool = None
            self._extension = False

    def _table(self, index_name: str) -> str:
        return f'"{self.schema}"."{check_index_name(index_name)}"'

    async def create_index(self, index_name: str, dimension: int, metric: str = "cosine") -> None:
        if metric != "cosine":
            raise SearchError(f"PgVectorStore supports the cosine metric only, not {metric!r}")
        if not isinstance(dimension, int) or dimension < 1:
            raise SearchError(f"A vector index needs a positive dimension, not {dimension!r}")
        pool = await self._get_pool()
        existing = await self._dimension(pool, index_name)
        if existing is not None:
            if existing != dimension:
                raise SearchError(f'Index "{index_name}" exists with dimension {existing}, not {dimension}')
            return
        table = self._table(index_name)
        hnsw = f'"{index_name[:58]}_hnsw"'
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"keel-vector:{index_name}")
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {table} "
                f"(id text PRIMARY KEY, embedding vector({dimension}) NOT NULL, metadata jsonb NOT NULL DEFAULT '{{}}')"
            )
            await conn.execute(f"CREATE INDEX IF NOT EXISTS {hnsw} ON {table} USING hnsw (embedding vector_cosine_ops)")
        existing = await self._dimension(pool, index_name)
        if existing != dimension:
            raise SearchError(f'Index "{index_name}" exists with dimension {existing}, not {dimension}')

    async def _dimension(self, pool: Any, index_name: str) -> int | None:
        value = await pool.fetchval(
            "SELECT a.atttypmod FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = 'embedding' AND NOT a.attisdropped",
            self.schema,
            check_index_name(index_name),
        )
        return int(value) if value is not None else None

    async def list_indexes(self) -> list[str]:
        pool = await self._get_pool()
        rows = await pool.fetch(
            "SELECT table_name FROM information_schema.columns "
            "WHERE table_schema = $1 AND column_name = 'embedding' AND udt_name = 'vector' ORDER BY table_name",
            self.schema,
        )
        return [r["table_name"] for r in rows]

    async def describe_index(self, index_name: str) -> IndexStats:
        pool = await self._get_pool()
        dimension = await self._dimension(pool, index_name)
        if dimension is None:
            raise SearchError(f'Vector index "{index_name}" does not exist')
        count = await pool.fetchval(f"SELECT count(*) FROM {self._table(index_name)}")
        return IndexStats(dimension, int(count))

    async def delete_index(self, index_name: str) -> None:
        pool = await self._get_pool()
        await pool.execute(f"DROP TABLE IF EXISTS {self._table(index_name)}")

    async def upsert(
        self,
        index_name: str,
        vectors: Sequence[Sequence[float]],
        metadata: Sequence[Mapping[str, Any]] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        import uuid

        ids = list(ids) if ids is not None else [str(uuid.uuid4()) for _ in vectors]
        metadata = list(metadata) if metadata is not None else [{} for _ in vectors]
        if not (len(ids) == len(vectors) == len(metadata)):
            raise SearchError("upsert needs as many ids and metadata entries as vectors")
        try:
            rows = [(i, _vector_text(v), json.dumps(dict(m))) for i, v, m in zip(ids, vectors, metadata, strict=True)]
        except (TypeError, ValueError) as err:
            raise SearchError(f"Vector metadata must be JSON: {err}") from None
        async with _translated(f'Cannot upsert into vector index "{index_name}"'):
            pool = await self._get_pool()
            await pool.executemany(
                f"INSERT INTO {self._table(index_name)} (id, embedding, metadata) "
                "VALUES ($1, $2::vector, $3::text::jsonb) "
                "ON CONFLICT (id) DO UPDATE SET embedding = EXCLUDED.embedding, metadata = EXCLUDED.metadata",
                rows,
            )
        return ids

    async def query(
        self,
        index_name: str,
        query_vector: Sequence[float],
        top_k: int = 10,
        filter: Mapping[str, Any] | None = None,
        include_vector: bool = False,
    ) -> list[VectorHit]:
        vector_filter.validate(filter)
        if top_k <= 0:
            return []
        params: list[Any] = [_vector_text(query_vector), int(top_k)]
        where = to_sql(filter, params) if filter else "TRUE"
        columns = "id, 1 - (embedding <=> $1::vector) AS score, metadata::text AS metadata" + (
            ", embedding::text AS vector" if include_vector else ""
        )
        async with _translated(f'Cannot query vector index "{index_name}"'):
            pool = await self._get_pool()
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(f"SET LOCAL hnsw.ef_search = {max(40, min(int(top_k), 1000))}")
                if filter:
                    await conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
                rows = await conn.fetch(
                    f"SELECT {columns} FROM {self._table(index_name)} WHERE {where} "
                    "ORDER BY embedding <=> $1::vector LIMIT $2",
                    *params,
                )
        return [
            VectorHit(
                r["id"],
                float(r["score"]),
                json.loads(r["metadata"]),
                json.loads(r["vector"]) if include_vector else None,
            )
            for r in rows
        ]

    async def delete_vector(self, index_name: str, id: str) -> None:
        async with _translated(f'Cannot delete from vector index "{index_name}"', missing_ok=True):
            pool = await self._get_pool()
            await pool.execute(f"DELETE FROM {self._table(index_name)} WHERE id = $1", id)

    async def delete_vectors(self, index_name: str, filter: Mapping[str, Any]) -> int:
        vector_filter.validate(filter)
        params: list[Any] = []
        where = to_sql(filter, params)
        status = "DELETE 0"
        async with _translated(f'Cannot delete from vector index "{index_name}"', missing_ok=True):
            pool = await self._get_pool()
            status = await pool.execute(f"DELETE FROM {self._table(index_name)} WHERE {where}", *params)
        return int(status.rsplit(" ", 1)[-1])


def _vector_text(vector: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


@contextlib.asynccontextmanager
async def _translated(what: str, *, missing_ok: bool = False) -> AsyncIterator[None]:
    """PostgreSQL's refusals as `SearchError`s that say what was being done (a missing index is nothing to do
    for a delete, `missing_ok`)."""
    import asyncpg

    try:
        yield
    except asyncpg.UndefinedTableError:
        if not missing_ok:
            raise SearchError(f"{what}: the vector index does not exist") from None
    except (asyncpg.DataError, asyncpg.SyntaxOrAccessError) as err:
        raise SearchError(f"{what}: {err}") from None
    except (OSError, asyncpg.InterfaceError, asyncpg.CannotConnectNowError) as err:
        raise SearchError(f"{what}: Cannot reach PostgreSQL ({type(err).__name__}: {err})") from err


def to_sql(filter: Mapping[str, Any], params: list[Any]) -> str:
    """A `vector_filter` filter as a SQL condition on `metadata`, its values appended to `params` (as text cast
    to jsonb, so a pool with its own jsonb codec changes nothing)."""

    def param(value: Any, cast: str) -> str:
        params.append(value)
        return f"${len(params)}::{cast}"

    parts = []
    for key, condition in filter.items():
        if key in ("$and", "$or"):
            joiner = " AND " if key == "$and" else " OR "
            parts.append("(" + joiner.join(to_sql(part, params) for part in condition) + ")")
            continue
        if key == "$not":
            parts.append(f"NOT ({to_sql(condition, params)})")
            continue
        parts += _field_sql(key, condition, param)
    return " AND ".join(parts) or "TRUE"


def _field_sql(key: str, condition: Any, param: Callable[[Any, str], str]) -> list[str]:
    path: str | None = None

    def value() -> str:
        nonlocal path
        if path is None:  # added on first use: a parameter the query does not use is an error
            path = f"(metadata #> {param(key.split('.'), 'text[]')})"
        return path

    if not (isinstance(condition, Mapping) and any(k.startswith("$") for k in condition)):
        condition = {"$eq": condition}
    parts = []
    for op, operand in condition.items():
        if op == "$exists":
            parts.append(f"{value()} IS {'NOT ' if operand else ''}NULL")
        elif op == "$eq":
            parts.append(f"COALESCE({value()} = {param(json.dumps(operand), 'text::jsonb')}, false)")
        elif op == "$ne":
            parts.append(f"{value()} IS DISTINCT FROM {param(json.dumps(operand), 'text::jsonb')}")
        elif op in ("$in", "$nin"):
            listed = param([json.dumps(o) for o in operand], "text[]::jsonb[]")
            found = f"COALESCE({value()} = ANY({listed}), false)"
            parts.append(found if op == "$in" else f"NOT {found}")
        elif isinstance(operand, bool) or not isinstance(operand, int | float | str):
            parts.append("false")  # as in memory: only numbers and strings compare
        else:
            sql_op = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[op]
            kind = "number" if isinstance(operand, int | float) else "string"
            compared = f"{value()} {sql_op} {param(json.dumps(operand), 'text::jsonb')}"
            parts.append(f"COALESCE(jsonb_typeof({value()}) = '{kind}' AND {compared}, false)")
    return parts
