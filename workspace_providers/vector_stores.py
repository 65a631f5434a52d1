"""Vector stores for workspace search: the `VectorStore` protocol (Mastra's `MastraVector`, snake_case) and
`InMemoryVectorStore`, the default. `keel.workspace_providers.pgvector.PgVectorStore` keeps vectors in PostgreSQL.

Scores are cosine similarities (1 is the same direction). Each vector's metadata is stored with it; Keel's search
puts the indexed text under `text` and the document id under `id`, as Mastra does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from keel.workspace_providers import vector_filter
from keel.workspace_providers.errors import SearchError

if TYPE_CHECKING:  # numpy is imported where vectors are (~80 ms): loading an app with a workspace needs none
    import numpy as np

INDEX_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_INDEX_NAME = 63


def check_index_name(name: str) -> str:
    """A name a SQL store can use as a table name: Mastra's rule for `searchIndexName`."""
    if not INDEX_NAME.fullmatch(name):
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


INDEXED_FIELDS = ("id", "sourceFile")
"""Metadata fields the in-memory store keeps an inverted map of: search removes a file's vectors by them, and a
scan of every vector per file would make re-indexing a tree quadratic."""


@dataclass
class _Index:
    dimension: int
    ids: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    vectors: list[np.ndarray] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)
    by_field: dict[str, dict[str, set[str]]] = field(default_factory=lambda: {f: {} for f in INDEXED_FIELDS})
    _matrix: np.ndarray | None = None

    def matrix(self) -> np.ndarray:
        """The vectors as unit rows (the vectors themselves are kept as given, for `include_vector`)."""
        import numpy as np

        if self._matrix is None:
            if not self.vectors:
                return np.zeros((0, self.dimension), dtype=np.float32)
            rows = np.vstack(self.vectors)
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            self._matrix = rows / np.where(norms == 0, 1, norms)
        return self._matrix

    def put(self, vector_id: str, vector: np.ndarray, meta: dict[str, Any]) -> None:
        at = self.rows.get(vector_id)
        if at is None:
            self.rows[vector_id] = len(self.ids)
            self.ids.append(vector_id)
            self.vectors.append(vector)
            self.metadata.append(meta)
        else:
            self._unmap(vector_id, self.metadata[at])
            self.vectors[at], self.metadata[at] = vector, meta
        for name in INDEXED_FIELDS:
            value = meta.get(name)
            if isinstance(value, str):
                self.by_field[name].setdefault(value, set()).add(vector_id)
        self._matrix = None

    def remove(self, vector_id: str) -> None:
        """Swap the last row into its place: O(1)."""
        at = self.rows.pop(vector_id)
        self._unmap(vector_id, self.metadata[at])
        last = len(self.ids) - 1
        if at != last:
            moved = self.ids[last]
            self.ids[at], self.vectors[at], self.metadata[at] = moved, self.vectors[last], self.metadata[last]
            self.rows[moved] = at
        self.ids.pop()
        self.vectors.pop()
        self.metadata.pop()
        self._matrix = None

    def _unmap(self, vector_id: str, meta: dict[str, Any]) -> None:
        for name in INDEXED_FIELDS:
            value = meta.get(name)
            if isinstance(value, str):
                holders = self.by_field[name].get(value)
                if holders is not None:
                    holders.discard(vector_id)
                    if not holders:
                        del self.by_field[name][value]

    def matching(self, filter: Mapping[str, Any]) -> set[str] | None:
        """The ids `filter` selects, from the inverted maps, when it only asks for indexed fields by value
        (`{"sourceFile": x}`, `{"id": {"$in": [...]}}`, an `$or` of those); None when it needs a scan."""
        if set(filter) == {"$or"} and isinstance(filter["$or"], list):
            found: set[str] = set()
            for part in filter["$or"]:
                ids = self.matching(part) if isinstance(part, Mapping) else None
                if ids is None:
                    return None
                found |= ids
            return found
        if len(filter) != 1:
            return None
        ((name, condition),) = filter.items()
        if name not in INDEXED_FIELDS:
            return None
        if isinstance(condition, str):
            values = [condition]
        elif (
            isinstance(condition, Mapping)
            and set(condition) == {"$in"}
            and all(isinstance(v, str) for v in condition["$in"])
        ):
            values = list(condition["$in"])
        else:
            return None
        return set().union(*(self.by_field[name].get(v, set()) for v in values))


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
        rows = [_row(vector, index.dimension) for vector in vectors]  # all checked before any is stored
        for vector_id, row, meta in zip(ids, rows, metadata, strict=True):
            index.put(vector_id, row, dict(meta))
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
        wanted = min(len(scores), top_k if not filter else max(4 * top_k, 64))
        hits = _hits(index, scores, _best_rows(scores, wanted), top_k, filter, include_vector)
        if len(hits) < top_k and wanted < len(scores):  # the filter is selective: rank them all
            hits = _hits(index, scores, _best_rows(scores, len(scores)), top_k, filter, include_vector)
        return hits

    async def delete_vector(self, index_name: str, id: str) -> None:
        index = self._indexes.get(index_name)
        if index is not None and id in index.rows:
            index.remove(id)

    async def delete_vectors(self, index_name: str, filter: Mapping[str, Any]) -> int:
        vector_filter.validate(filter)
        index = self._indexes.get(index_name)
        if index is None:
            return 0
        doomed = index.matching(filter)
        if doomed is None:
            doomed = {
                i for i, meta in zip(index.ids, index.metadata, strict=True) if vector_filter.matches(meta, filter)
            }
        for vector_id in doomed:
            index.remove(vector_id)
        return len(doomed)

    def _index(self, index_name: str) -> _Index:
        try:
            return self._indexes[index_name]
        except KeyError:
            raise SearchError(f'Vector index "{index_name}" does not exist') from None


def _best_rows(scores: np.ndarray, count: int) -> np.ndarray:
    """The rows of the `count` best scores, best first (equal scores by row): a partition, then a sort of those
    alone, not a sort of every score (at 100k vectors the full sort costs as much as the product)."""
    import numpy as np

    if count >= len(scores):
        return np.argsort(-scores, kind="stable")
    kth = np.partition(-scores, count - 1)[count - 1]
    part = np.flatnonzero(-scores <= kth)  # every row tied with the last one kept, so ties go by row
    return part[np.lexsort((part, -scores[part]))][:count]


def _hits(
    index: _Index,
    scores: np.ndarray,
    rows: np.ndarray,
    top_k: int,
    filter: Mapping[str, Any] | None,
    include_vector: bool,
) -> list[VectorHit]:
    hits: list[VectorHit] = []
    for row in rows:
        meta = index.metadata[row]
        if filter and not vector_filter.matches(meta, filter):
            continue
        # each float32 as its shortest decimal (0.9, not 0.8999999761581421), as pgvector and LibSQL print them
        vector = [float(str(x)) for x in index.vectors[row]] if include_vector else None
        hits.append(VectorHit(index.ids[row], float(scores[row]), dict(meta), vector))
        if len(hits) == top_k:
            break
    return hits


def _row(vector: Sequence[float], dimension: int) -> np.ndarray:
    import numpy as np

    try:
        row = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError):
        raise SearchError("A vector must be a list of numbers") from None
    if row.shape != (dimension,):
        raise SearchError(f"A vector of dimension {row.shape[-1] if row.ndim else 0} for an index of {dimension}")
    if not np.isfinite(row).all():
        raise SearchError("A vector's values must be finite numbers")
    return row


def _unit(vector: Sequence[float], dimension: int) -> np.ndarray:
    import numpy as np

    row = _row(vector, dimension)
    norm = float(np.linalg.norm(row))
    return row / norm if norm else row


def _new_id() -> str:
    import uuid

    return str(uuid.uuid4())
