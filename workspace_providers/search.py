"""`SearchEngine`: BM25, vector and hybrid search over indexed documents, as Mastra's Workspace does it.

- BM25 (`bm25.BM25Index`) keeps documents in this process.
- Vector search embeds each document with the configured embedder and upserts it into the vector store, under
  the document's id, with its text and metadata (`{id, text, ...metadata}`); a query embeds the query and asks
  the store for the nearest, with an optional metadata filter (`vector_filter`).
- Hybrid fetches ``min(2·top_k, 50)`` from each, min-max normalises the BM25 scores (vector scores are cosine
  similarities already), combines ``vector_weight·vector + (1 - vector_weight)·bm25`` and applies `min_score`
  after combining.

A document may carry a `start_line_offset` (the file line a chunk starts at), which shifts the result's
`line_range` so it names lines of the file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from keel.workspace_providers import embedders
from keel.workspace_providers.bm25 import BM25Index, TokenizeOptions, find_line_range, tokenize
from keel.workspace_providers.errors import SearchError
from keel.workspace_providers.vector_stores import VectorStore

SearchMode = Literal["bm25", "vector", "hybrid"]
MAX_VECTORS_PER_UPSERT = 100
HYBRID_FETCH_LIMIT = 50
_OFFSET = "_startLineOffset"


@dataclass(frozen=True)
class SearchDocument:
    id: str
    content: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    start_line_offset: int | None = None


@dataclass(frozen=True)
class SearchResult:
    id: str
    content: str
    score: float
    line_range: tuple[int, int] | None
    metadata: dict[str, Any] | None
    score_details: dict[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        """Mastra's result shape: `{id, content, score, lineRange?, metadata?, scoreDetails}`."""
        out: dict[str, Any] = {"id": self.id, "content": self.content, "score": self.score}
        if self.line_range is not None:
            out["lineRange"] = {"start": self.line_range[0], "end": self.line_range[1]}
        if self.metadata is not None:
            out["metadata"] = self.metadata
        out["scoreDetails"] = {k: v for k, v in self.score_details.items() if v is not None}
        return out


@dataclass(frozen=True)
class BM25Config:
    k1: float = 1.5
    b: float = 0.75
    tokenize: TokenizeOptions = field(default_factory=TokenizeOptions)

    @classmethod
    def parse(cls, value: bool | Mapping[str, Any]) -> BM25Config:
        """`True`, or `{k1, b}` (Mastra also nests them: `{bm25: {k1, b}, tokenize: {...}}`)."""
        if value is True:
            return cls()
        if not isinstance(value, Mapping):
            raise SearchError(f"bm25 must be True or a mapping of k1/b, not {value!r}")
        params = dict(value.get("bm25") or {}) if "bm25" in value or "tokenize" in value else dict(value)
        unknown = set(params) - {"k1", "b"}
        if unknown:
            raise SearchError(f"Unknown bm25 option(s): {', '.join(sorted(unknown))} (known: k1, b)")
        tokenize_options = value.get("tokenize") or {}
        known = {"lowercase", "remove_punctuation", "min_length", "stopwords"}
        if set(tokenize_options) - known:
            raise SearchError(f"Unknown tokenize option(s): {', '.join(sorted(set(tokenize_options) - known))}")
        defaults = TokenizeOptions()
        tokens = TokenizeOptions(
            lowercase=bool(tokenize_options.get("lowercase", defaults.lowercase)),
            remove_punctuation=bool(tokenize_options.get("remove_punctuation", defaults.remove_punctuation)),
            min_length=int(tokenize_options.get("min_length", defaults.min_length)),
            stopwords=frozenset(tokenize_options.get("stopwords", defaults.stopwords)),
        )
        return cls(float(params.get("k1", 1.5)), float(params.get("b", 0.75)), tokens)


@dataclass(frozen=True)
class VectorConfig:
    store: VectorStore
    embedder: Any
    index_name: str


class SearchEngine:
    def __init__(self, *, bm25: BM25Config | None = None, vector: VectorConfig | None = None) -> None:
        self._bm25 = BM25Index(bm25.k1, bm25.b, bm25.tokenize) if bm25 is not None else None
        self._tokenize = bm25.tokenize if bm25 is not None else TokenizeOptions()
        self._vector = vector
        self._vector_index_ready = False
        self._ids: dict[str, None] = {}
        self._chunks: dict[str, set[str]] = {}  # a file's path -> the ids of its chunks (`<path>#chunk-<i>`)

    @property
    def can_bm25(self) -> bool:
        return self._bm25 is not None

    @property
    def can_vector(self) -> bool:
        return self._vector is not None

    @property
    def can_hybrid(self) -> bool:
        return self.can_bm25 and self.can_vector

    @property
    def vector(self) -> VectorConfig | None:
        return self._vector

    def __len__(self) -> int:
        return len(self._ids)

    def count_by_prefix(self, prefix: str) -> int:
        return sum(1 for i in self._ids if i.startswith(prefix))

    # --- writing ------------------------------------------------------------------------------------------

    async def index(self, doc: SearchDocument) -> None:
        await self.index_many([doc])

    async def index_many(self, docs: Sequence[SearchDocument], *, vectors: bool = True) -> None:
        """BM25 per document, vectors embedded in batches and upserted at most 100 at a time. A repeated id
        keeps its last document.

        `vectors=False` adds the BM25 documents alone: for documents a persistent vector store already holds
        (an indexing resumed in another process), nothing is embedded again."""
        unique = list({d.id: d for d in docs}.values())
        merged = [(d, self._metadata(d)) for d in unique]
        for doc, metadata in merged:
            self._track(doc.id)
            if self._bm25 is not None:
                self._bm25.add(doc.id, doc.content, metadata)
        if self._vector is None or not merged or not vectors:
            return
        embedded = await embedders.embed_all(self._vector.embedder, [d.content for d, _ in merged])
        await self._ensure_vector_index(len(embedded[0]))
        for start in range(0, len(merged), MAX_VECTORS_PER_UPSERT):
            part = merged[start : start + MAX_VECTORS_PER_UPSERT]
            await self._vector.store.upsert(
                self._vector.index_name,
                embedded[start : start + MAX_VECTORS_PER_UPSERT],
                [{"id": d.id, "text": d.content, **m} for d, m in part],
                [d.id for d, _ in part],
            )

    async def _ensure_vector_index(self, dimension: int) -> None:
        if self._vector is not None and not self._vector_index_ready:
            await self._vector.store.create_index(self._vector.index_name, dimension)
            self._vector_index_ready = True

    def _metadata(self, doc: SearchDocument) -> dict[str, Any]:
        metadata = {k: v for k, v in doc.metadata.items() if v is not None}
        if doc.start_line_offset is not None:
            metadata[_OFFSET] = doc.start_line_offset
        return metadata

    def _track(self, doc_id: str) -> None:
        self._ids[doc_id] = None
        source = _chunk_source(doc_id)
        if source is not None:
            self._chunks.setdefault(source, set()).add(doc_id)

    def _untrack(self, doc_id: str) -> None:
        self._ids.pop(doc_id, None)
        source = _chunk_source(doc_id)
        chunks = self._chunks.get(source) if source is not None else None
        if chunks is not None:
            chunks.discard(doc_id)
            if not chunks:
                del self._chunks[source]  # type: ignore[arg-type]

    async def remove(self, doc_id: str) -> None:
        """Forget a document, here and in the vector store (which may hold it from an earlier process)."""
        self._untrack(doc_id)
        if self._bm25 is not None:
            self._bm25.remove(doc_id)
        if self._vector is not None:
            await self._vector.store.delete_vector(self._vector.index_name, doc_id)

    async def remove_source(self, source_id: str) -> None:
        """A file's document and all its chunks (`<path>#chunk-<i>`), here and in the vector store (also chunks
        a previous process wrote, by their `sourceFile`)."""
        await self.remove_sources([source_id])

    async def remove_sources(self, source_ids: Sequence[str], *, vectors: bool = True) -> None:
        """`remove_source` for many files at once: one vector store delete (by document id or `sourceFile`)
        for them all. `vectors=False` leaves the vector store alone."""
        sources = set(source_ids)
        if not sources:
            return
        for source in sources:
            for doc_id in [source, *self._chunks.get(source, ())]:
                self._untrack(doc_id)
                if self._bm25 is not None:
                    self._bm25.remove(doc_id)
        if vectors and self._vector is not None:  # a store that outlived an earlier process may hold them
            listed = sorted(sources)
            await self._vector.store.delete_vectors(
                self._vector.index_name, {"$or": [{"id": {"$in": listed}}, {"sourceFile": {"$in": listed}}]}
            )

    async def forget_vectors(self, doc_ids: Sequence[str]) -> None:
        """Delete these documents' vectors (documents a rebuild no longer found)."""
        if self._vector is not None and doc_ids:
            await self._vector.store.delete_vectors(self._vector.index_name, {"id": {"$in": sorted(doc_ids)}})

    @property
    def ids(self) -> list[str]:
        """The ids of the documents indexed here, in indexing order."""
        return list(self._ids)

    def clear(self) -> None:
        """Forget the BM25 documents and ids (a persistent vector store keeps its vectors, as in Mastra)."""
        self._ids.clear()
        self._chunks.clear()
        if self._bm25 is not None:
            self._bm25 = BM25Index(self._bm25.k1, self._bm25.b, self._bm25.tokenize_options)

    # --- reading ------------------------------------------------------------------------------------------

    def mode_for(self, requested: str | None) -> SearchMode:
        if requested is not None:
            if requested == "vector" and not self.can_vector:
                raise SearchError("Vector search requires vector configuration.")
            if requested == "bm25" and not self.can_bm25:
                raise SearchError("BM25 search requires BM25 configuration.")
            if requested == "hybrid" and not self.can_hybrid:
                raise SearchError("Hybrid search requires both vector and BM25 configuration.")
            if requested not in ("bm25", "vector", "hybrid"):
                raise SearchError(f"Unknown search mode {requested!r} (bm25, vector or hybrid)")
            return requested  # type: ignore[return-value]
        if self.can_hybrid:
            return "hybrid"
        if self.can_vector:
            return "vector"
        if self.can_bm25:
            return "bm25"
        raise SearchError("No search configuration available. Provide bm25 or vector config.")

    async def search(
        self,
        query: str,
        *,
        top_k: int = 10,
        min_score: float | None = None,
        mode: str | None = None,
        vector_weight: float = 0.5,
        filter: Mapping[str, Any] | None = None,
    ) -> list[SearchResult]:
        effective = self.mode_for(mode)
        if not math.isfinite(top_k):
            raise SearchError(f"top_k must be a finite number, not {top_k!r}")
        top_k = int(top_k)
        if top_k < 1:
            return []
        if effective == "bm25":
            return self._search_bm25(query, top_k, min_score)
        if effective == "vector":
            return await self._search_vector(query, top_k, min_score, filter)
        return await self._search_hybrid(query, top_k, min_score, vector_weight, filter)

    def _search_bm25(self, query: str, top_k: int, min_score: float | None) -> list[SearchResult]:
        assert self._bm25 is not None
        terms = tokenize(query, self._tokenize)
        results = []
        for hit in self._bm25.search(query, top_k, min_score or 0.0):
            metadata = dict(hit.metadata or {})
            offset = metadata.pop(_OFFSET, None)
            results.append(
                SearchResult(
                    hit.id,
                    hit.content,
                    hit.score,
                    _shifted(find_line_range(hit.content, terms, self._tokenize), offset),
                    metadata or None,
                    {"bm25": hit.score},
                )
            )
        return results

    async def _search_vector(
        self, query: str, top_k: int, min_score: float | None, filter: Mapping[str, Any] | None
    ) -> list[SearchResult]:
        assert self._vector is not None
        if not self._vector_index_ready:
            # Nothing indexed by this process yet: a persistent store may still hold this index.
            if self._vector.index_name not in await self._vector.store.list_indexes():
                return []
            self._vector_index_ready = True
        vector = await embedders.embed_one(self._vector.embedder, query)
        hits = await self._vector.store.query(self._vector.index_name, vector, top_k, filter)
        terms = tokenize(query, self._tokenize)
        results = []
        for hit in hits:
            if min_score is not None and hit.score < min_score:
                continue
            metadata = dict(hit.metadata)
            doc_id = str(metadata.pop("id", hit.id))
            content = str(metadata.pop("text", ""))
            offset = metadata.pop(_OFFSET, None)
            results.append(
                SearchResult(
                    doc_id,
                    content,
                    hit.score,
                    _shifted(find_line_range(content, terms, self._tokenize), offset),
                    metadata or None,
                    {"vector": hit.score},
                )
            )
        return results

    async def _search_hybrid(
        self,
        query: str,
        top_k: int,
        min_score: float | None,
        vector_weight: float,
        filter: Mapping[str, Any] | None,
    ) -> list[SearchResult]:
        fetch = min(top_k * 2, HYBRID_FETCH_LIMIT)
        vector_hits = {r.id: r for r in await self._search_vector(query, fetch, None, filter)}
        bm25_hits = self._search_bm25(query, fetch, None)
        scores = [r.score for r in bm25_hits]
        low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)
        normalised = {r.id: (1.0 if high == low else (r.score - low) / (high - low)) for r in bm25_hits}
        bm25_by_id = {r.id: r for r in bm25_hits}
        combined = []
        for doc_id in dict.fromkeys([*vector_hits, *bm25_by_id]):
            v, b = vector_hits.get(doc_id), bm25_by_id.get(doc_id)
            base = v or b
            assert base is not None
            score = vector_weight * (v.score if v else 0.0) + (1 - vector_weight) * normalised.get(doc_id, 0.0)
            combined.append(
                SearchResult(
                    doc_id,
                    base.content,
                    score,
                    (b.line_range if b else None) or (v.line_range if v else None),
                    base.metadata,
                    {"vector": v.score if v else None, "bm25": b.score if b else None},
                )
            )
        combined.sort(key=lambda r: -r.score)
        if min_score is not None:
            combined = [r for r in combined if r.score >= min_score]
        return combined[:top_k]


def _chunk_source(doc_id: str) -> str | None:
    """`a.md` for `a.md#chunk-3`; None for a document that is not a chunk."""
    source, sep, index = doc_id.rpartition("#chunk-")
    return source if sep and index.isdigit() else None


def _shifted(found: tuple[int, int] | None, offset: Any) -> tuple[int, int] | None:
    if found is None or not isinstance(offset, int):
        return found
    return found[0] + offset - 1, found[1] + offset - 1
