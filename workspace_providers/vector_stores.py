"""Vector stores for workspace search: the `VectorStore` protocol (Mastra's `MastraVector`, snake_case) and
`InMemoryVectorStore`, the default. `keel.workspace_providers.pgvector.PgVectorStore` keeps vectors in PostgreSQL.

Scores are cosine similarities (1 is the same direction). Each vector's metadata is stored with it; Keel's search
puts the indexed text under `text` and the document id under `id`, as Mastra does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from keel.workspace_providers import vector_filter
from keel.workspace_providers.errors import SearchError

INDEX_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_INDEX_NAME = 63


def check_index_name(name: str) -> str:
    """A name a SQL store can use as a table name: Mastra's rule for `searchIndexName`."""
    if not INDEX_NAME.match(name):
        raise SearchError(
            f'Invalid searchIndexName: "{name}". Must start with a letter or underscore, and contain only letters, '
            "numbers, or underscores."
        )
    if len(name) > MAX_INDEX_NAME:
        raise SearchError(f"searchIndexName exceeds {MAX_INDEX_NAME} characters (got {len(name)})")
    return name


@dataclass(frozen=True)
class VectorHit:
    id: str
    score: float
    metadata: dict[str, Any]
    vector: list[float] | None = None


@dataclass(frozen=True)
class IndexStats:
    dimension: int
    count: int
    metric: str = "cosine"


class VectorStore(Protocol):
    async def create_index(self, index_name: str, dimension: int, metric: str = "cosine") -> None:
        """Create the index; a no-op when it exists with this dimension, an error when with another."""

    async def list_indexes(self) -> list[str]: ...

    async def describe_index(self, index_name: str) -> IndexStats: ...

    async def delete_index(self, index_name: str) -> None: ...

    async def upsert(
        self,
        index_name: str,
        vectors: Sequence[Sequence[float]],
        metadata: Sequence[Mapping[str, Any]] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        """Insert or replace vectors by id; returns the ids."""

    async def query(
        self,
        index_name: str,
        query_vector: Sequence[float],
        top_k: int = 10,
        filter: Mapping[str, Any] | None = None,
        include_vector: bool = False,
    ) -> list[VectorHit]:
        """The `top_k` nearest vectors whose metadata matches `filter`, best first."""

    async def delete_vector(self, index_name: str, id: str) -> None: ...

    async def delete_vectors(self, index_name: str, filter: Mapping[str, Any]) -> int:
        """Delete the vectors whose metadata matches `filter`; returns how many."""


@dataclass
class _Index:
    dimension: int
    ids: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    vectors: list[np.ndarray] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)
    _matrix: np.ndarray | None = None

    def matrix(self) -> np.ndarray:
        if self._matrix is None:
            self._matrix = np.vstack(self.vectors) if self.vectors else np.zeros((0, self.dimension))
        return self._matrix


class InMemoryVectorStore:
    """Vectors in this process (lost when it ends): the default store. Cosine similarity by a matrix product."""

    def __init__(self) -> None:
        self._indexes: dict[str, _Index] = {}

    async def create_index(self, index_name: str, dimension: int, metric: str = "cosine") -> None:
        if metric != "cosine":
            raise SearchError(f"InMemoryVectorStore supports the cosine metric only, not {metric!r}")
        existing = self._indexes.get(index_name)
        if existing is not None:
            if existing.dimension != dimension:
                raise SearchError(f'Index "{index_name}" exists with dimension {existing.dimension}, not {dimension}')
            return
        self._indexes[index_name] = _Index(dimension)

    async def list_indexes(self) -> list[str]:
        return list(self._indexes)

    async def describe_index(self, index_name: str) -> IndexStats:
        index = self._index(index_name)
        return IndexStats(index.dimension, len(index.ids))

    async def delete_index(self, index_name: str) -> None:
        self._indexes.pop(index_name, None)

    async def upsert(
        self,
        index_name: str,
        vectors: Sequence[Sequence[float]],
        metadata: Sequence[Mapping[str, Any]] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        index = self._index(index_name)
        ids = list(ids) if ids is not None else [_new_id() for _ in vectors]
        metadata = list(metadata) if metadata is not None else [{} for _ in vectors]
        if not (len(ids) == len(vectors) == len(metadata)):
            raise SearchError("upsert needs as many ids and metadata entries as vectors")
        for vector_id, vector, meta in zip(ids, vectors, metadata, strict=True):
            row = _unit(vector, index.dimension)
            at = index.rows.get(vector_id)
            if at is None:
                index.rows[vector_id] = len(index.ids)
                index.ids.append(vector_id)
                index.vectors.append(row)
                index.metadata.append(dict(meta))
            else:
                index.vectors[at], index.metadata[at] = row, dict(meta)
        index._matrix = None
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
        index = self._index(index_name)
        if not index.ids or top_k <= 0:
            return []
        scores = index.matrix() @ _unit(query_vector, index.dimension)
        order = np.argsort(-scores, kind="stable")
        hits: list[VectorHit] = []
        for row in order:
            meta = index.metadata[row]
            if filter and not vector_filter.matches(meta, filter):
                continue
            vector = index.vectors[row].tolist() if include_vector else None
            hits.append(VectorHit(index.ids[row], float(scores[row]), dict(meta), vector))
            if len(hits) == top_k:
                break
        return hits

    async def delete_vector(self, index_name: str, id: str) -> None:
        index = self._indexes.get(index_name)
        if index is not None and id in index.rows:
            self._remove_rows(index, {index.rows[id]})

    async def delete_vectors(self, index_name: str, filter: Mapping[str, Any]) -> int:
        vector_filter.validate(filter)
        index = self._indexes.get(index_name)
        if index is None:
            return 0
        doomed = {row for row, meta in enumerate(index.metadata) if vector_filter.matches(meta, filter)}
        self._remove_rows(index, doomed)
        return len(doomed)

    def _remove_rows(self, index: _Index, rows: set[int]) -> None:
        if not rows:
            return
        keep = [i for i in range(len(index.ids)) if i not in rows]
        index.ids = [index.ids[i] for i in keep]
        index.vectors = [index.vectors[i] for i in keep]
        index.metadata = [index.metadata[i] for i in keep]
        index.rows = {vector_id: i for i, vector_id in enumerate(index.ids)}
        index._matrix = None

    def _index(self, index_name: str) -> _Index:
        try:
            return self._indexes[index_name]
        except KeyError:
            raise SearchError(f'Vector index "{index_name}" does not exist') from None


def _unit(vector: Sequence[float], dimension: int) -> np.ndarray:
    row = np.asarray(vector, dtype=np.float32)
    if row.shape != (dimension,):
        raise SearchError(f"A vector of dimension {row.shape[-1] if row.ndim else 0} for an index of {dimension}")
    norm = float(np.linalg.norm(row))
    return row / norm if norm else row


def _new_id() -> str:
    import uuid

    return str(uuid.uuid4())
