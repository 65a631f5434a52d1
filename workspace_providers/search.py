"""`SearchEngine`: BM25, vector and hybrid search over indexed documents, as Mastra's Workspace does it.

- BM25 (`bm25.BM25Index`) keeps documents in this process. With a `SearchIndexStore` attached (`attach`: a
  worker attaches Keel's storage), the documents live in the store and what this process holds is a copy:
  every write goes to the store first (then to the copy, when nobody wrote in between), and every BM25 or
  hybrid query first compares the store's version with the copy's (one primary-key read) and, when another
  worker wrote since, reads the documents written since (`keel.protocol.search_index`). Every worker then
  scores from the same documents, added in the same order: the same answer, scores and ties everywhere.
- Vector search embeds each document with the configured embedder and upserts it into the vector store, under
  the document's id, with its text and metadata (`{id, text, ...metadata}`); a query embeds the query and asks
  the store for the nearest, with an optional metadata filter (`vector_filter`).
- Hybrid fetches ``min(2·top_k, 50)`` from each, min-max normalises the BM25 scores (vector scores are cosine
  similarities already), combines ``vector_weight·vector + (1 - vector_weight)·bm25`` and applies `min_score`
  after combining.
- Files (`replace_files`) carry a content hash (`content_hash`: the text with what shapes its documents and
  vectors: the chunk sizes and the vector index), kept by the store (or in memory without one), so an indexing
  skips a file whose hash is unchanged: nothing chunked into the index, nothing embedded again.

A document may carry a `start_line_offset` (the file line a chunk starts at), which shifts the result's
`line_range` so it names lines of the file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from keel.protocol.search_index import IndexChanges, IndexedDocument, IndexVersion, SearchIndexStore
from keel.workspace_providers import embedders
from keel.workspace_providers.bm25 import (
    MAX_CHUNK_CHARS,
    OVERLAP_LINES,
    BM25Index,
    TokenizeOptions,
    find_line_range,
    tokenize,
)
from keel.workspace_providers.errors import SearchError
from keel.workspace_providers.vector_stores import InMemoryVectorStore, VectorStore

logger = logging.getLogger(__name__)
SearchMode = Literal["bm25", "vector", "hybrid"]
MAX_VECTORS_PER_UPSERT = 100
HYBRID_FETCH_LIMIT = 50
_OFFSET = "_startLineOffset"
HASH_FORMAT = "keel-search-1"
"""Part of every content hash: a change to how files become documents changes it, and every file is indexed
again."""


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


@dataclass(frozen=True)
class IndexedFile:
    """A file's documents (its one document or its chunks) and its `SearchEngine.content_hash`."""

    path: str
    content_hash: str
    documents: list[SearchDocument]


class SearchEngine:
    def __init__(self, *, bm25: BM25Config | None = None, vector: VectorConfig | None = None) -> None:
        self._bm25 = BM25Index(bm25.k1, bm25.b, bm25.tokenize) if bm25 is not None else None
        self._tokenize = bm25.tokenize if bm25 is not None else TokenizeOptions()
        self._vector = vector
        self._vector_index_ready = False
        self._ids: dict[str, None] = {}
        self._by_source: dict[str, dict[str, None]] = {}  # a source (file path, else the id) -> its documents' ids
        self._files: dict[str, str | None] = {}  # without a store: the content hash of each file indexed
        self._vectored: set[str] = set()  # sources this process upserted vectors of (what an in-memory store has)
        self._store: SearchIndexStore | None = None
        self._key = ""
        self._at = IndexVersion()  # the store generation and version the documents held here are at
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        vectors = vector.index_name if vector is not None else "-"
        self._fingerprint = f"{HASH_FORMAT};chunks={MAX_CHUNK_CHARS},{OVERLAP_LINES};vectors={vectors}\n"

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

    @property
    def store(self) -> SearchIndexStore | None:
        """Where the documents live, when not in this process alone (`attach`)."""
        return self._store

    @property
    def vectors_persist(self) -> bool:
        """Whether the vectors outlive this process (any store but `InMemoryVectorStore`)."""
        return self._vector is not None and not isinstance(self._vector.store, InMemoryVectorStore)

    def __len__(self) -> int:
        return len(self._ids)

    def count_by_prefix(self, prefix: str) -> int:
        return sum(1 for i in self._ids if i.startswith(prefix))

    @property
    def ids(self) -> list[str]:
        """The ids of the documents held here, in indexing order (with a store: as of the last query or
        `refresh`)."""
        return list(self._ids)

    # --- the store ----------------------------------------------------------------------------------------

    def attach(self, store: SearchIndexStore | None, key: str) -> None:
        """Keep the documents and file hashes in `store` under `key` (a workspace id) from now on: the documents
        held here are forgotten, and the first query reads the store's. None detaches (documents in memory
        again, starting empty). Attaching the same store again keeps what is held."""
        if store is self._store and key == self._key:
            return
        self._store, self._key = store, key
        self.clear()

    def _guard(self) -> asyncio.Lock:
        """The lock of the documents held here (one per event loop: a workspace may outlive a loop)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def refresh(self) -> None:
        """Bring the documents held here up to the store's version: one read of the version, and, when another
        process wrote since, the documents written since (in write order) and, when some were removed, the ids
        of those left. Nothing to do without a store or without BM25 (vectors are searched in their store)."""
        store = self._store
        if store is None or self._bm25 is None:
            return
        if await store.search_index_version(self._key) == self._at:
            return
        async with self._guard():
            if store is not self._store:
                return  # attached elsewhere meanwhile
            changes = await store.search_index_changes(self._key, self._at.version)
            if changes.generation != self._at.generation:  # created anew (emptied by `keel reset`): read it all
                since = self._at.version
                self.clear()
                if since:
                    changes = await store.search_index_changes(self._key, 0)
            if IndexVersion(changes.generation, changes.version) != self._at:
                await self._catch_up(store, changes)

    async def _catch_up(self, store: SearchIndexStore, changes: IndexChanges) -> None:
        # What is held is at `self._at`, in write order; every document written since has a later version, so
        # removing the changed ones and appending them in write order keeps the held ones in write order.
        self._apply((), changes.documents)
        if changes.count != len(self._ids):
            kept = set(await store.search_index_ids(self._key))
            for doc_id in [i for i in self._ids if i not in kept]:
                self._drop(doc_id)
        self._at = IndexVersion(changes.generation, changes.version)

    def content_hash(self, content: str) -> str:
        """The hash a file's text is indexed under: SHA-256 of the text and of what shapes its documents and
        vectors (the hash format, the chunk sizes, the vector index name)."""
        digest = hashlib.sha256(self._fingerprint.encode())
        digest.update(content.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    async def file_hashes(self, paths: Sequence[str] | None = None) -> dict[str, str | None]:
        """The content hash each file was indexed with (of `paths`, or every file indexed); None for a file
        indexed without its vectors (indexed again next time)."""
        if self._store is not None:
            return await self._store.search_index_files(self._key, paths)
        if paths is None:
            return dict(self._files)
        return {p: self._files[p] for p in paths if p in self._files}

    def vectors_missing(self, path: str) -> bool:
        """Whether the vectors of a file indexed before are not in the vector store: an in-memory store holds
        only what this process upserted."""
        return self._vector is not None and not self.vectors_persist and path not in self._vectored

    # --- writing ------------------------------------------------------------------------------------------

    async def index(self, doc: SearchDocument) -> None:
        await self.index_many([doc])

    async def index_many(self, docs: Sequence[SearchDocument], *, vectors: bool = True) -> None:
        """BM25 per document, vectors embedded in batches and upserted at most 100 at a time. A repeated id
        keeps its last document.

        `vectors=False` adds the BM25 documents alone: for documents a persistent vector store already holds
        (an indexing resumed in another process), nothing is embedded again."""
        unique = list({d.id: d for d in docs}.values())
        if not unique:
            return
        await self._write(documents=unique)
        if self._vector is not None and vectors:
            await self._upsert_vectors(unique)
            self._vectored.update(_source_of(d.id) for d in unique)

    async def replace_files(
        self, files: Sequence[IndexedFile], *, vectors: bool = True, keep_going: bool = False
    ) -> None:
        """Each file's documents replace its old ones (here, in the store, in the vector store) and its hash is
        recorded, in one write. Vectors go first: a hash is recorded only once they are stored, so a crash in
        between indexes the file again. `vectors=False` leaves the vector store alone (it has them already).
        `keep_going`: vectors that fail (the embedder or the store down) are logged, the BM25 documents still
        written, and the hash left None so that the next indexing does the file again."""
        if not files:
            return
        sources = [f.path for f in files]
        documents = list({d.id: d for f in files for d in f.documents}.values())
        complete = True
        if self._vector is not None and vectors:
            try:
                await self._delete_vectors(sources)
                await self._upsert_vectors(documents)
                self._vectored.update(sources)
            except Exception as err:
                if not keep_going:
                    raise
                complete = False
                logger.warning(
                    "search index: vectors of %d files not indexed (%s: %s)", len(files), type(err).__name__, err
                )
        hashes = {f.path: f.content_hash if complete else None for f in files}
        await self._write(remove=sources, documents=documents, files=hashes)

    async def add_vectors(self, files: Sequence[IndexedFile], *, keep_going: bool = False) -> None:
        """Embed and upsert the vectors of files whose documents are indexed already (`vectors_missing`)."""
        if self._vector is None or not files:
            return
        sources = [f.path for f in files]
        try:
            await self._delete_vectors(sources)
            await self._upsert_vectors(list({d.id: d for f in files for d in f.documents}.values()))
            self._vectored.update(sources)
        except Exception as err:
            if not keep_going:
                raise
            logger.warning(
                "search index: vectors of %d files not indexed (%s: %s)", len(files), type(err).__name__, err
            )

    async def _upsert_vectors(self, docs: Sequence[SearchDocument]) -> None:
        assert self._vector is not None
        if not docs:
            return
        merged = [(d, self._metadata(d)) for d in docs]
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

    async def _delete_vectors(self, sources: Sequence[str]) -> None:
        """Every vector of these sources: by document id or `sourceFile` (a store that outlived an earlier
        process may hold chunks this one never indexed)."""
        assert self._vector is not None
        listed = sorted(set(sources))
        if listed:
            await self._vector.store.delete_vectors(
                self._vector.index_name, {"$or": [{"id": {"$in": listed}}, {"sourceFile": {"$in": listed}}]}
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

    async def _write(
        self,
        *,
        remove: Sequence[str] = (),
        documents: Sequence[SearchDocument] = (),
        files: Mapping[str, str | None] | None = None,
    ) -> None:
        """Remove the documents of the sources `remove`, add `documents` and record the file hashes `files`:
        in the store (one transaction), then here, when the store was at the version held here (else the next
        query reads the write back, with any other process's)."""
        store = self._store
        records = [IndexedDocument(d.id, _source_of(d.id), d.content, self._metadata(d)) for d in documents]
        if store is None:
            self._apply(remove, records)
            for path in remove:
                self._files.pop(path, None)
            self._files.update(files or {})
            return
        # What another process reads back is the metadata as JSON: hold the same here.
        records = [IndexedDocument(r.id, r.source, r.content, _as_json(r.metadata)) for r in records]
        write = await store.write_search_index(self._key, remove=remove, documents=records, files=files)
        async with self._guard():
            held = self._at if self._at.version else IndexVersion(write.generation)  # nothing held: any generation
            if store is self._store and held == IndexVersion(write.generation, write.previous):
                self._apply(remove, records)
                self._at = IndexVersion(write.generation, write.version)

    def _apply(self, remove: Sequence[str], documents: Sequence[IndexedDocument]) -> None:
        for source in remove:
            for doc_id in list(self._by_source.get(source, ())):
                self._drop(doc_id)
        for doc in documents:
            self._drop(doc.id)  # a replaced document goes to the end, as it does in the store's write order
            self._ids[doc.id] = None
            self._by_source.setdefault(doc.source, {})[doc.id] = None
            if self._bm25 is not None:
                self._bm25.add(doc.id, doc.content, dict(doc.metadata))

    def _drop(self, doc_id: str) -> None:
        if doc_id not in self._ids:
            return
        del self._ids[doc_id]
        source = _source_of(doc_id)
        ids = self._by_source.get(source)
        if ids is not None:
            ids.pop(doc_id, None)
            if not ids:
                del self._by_source[source]
        if self._bm25 is not None:
            self._bm25.remove(doc_id)

    async def remove_sources(self, source_ids: Sequence[str], *, vectors: bool = True) -> None:
        """Files' documents (or documents indexed alone, by id) and all their chunks (`<path>#chunk-<i>`), in the
        vector store (also chunks a previous process wrote, by their `sourceFile`: one delete for them all),
        then in the store and here. `vectors=False` leaves the vector store alone."""
        sources = sorted(set(source_ids))
        if not sources:
            return
        if vectors and self._vector is not None:  # first: a failure leaves the files indexed, to be removed again
            await self._delete_vectors(sources)
        self._vectored.difference_update(sources)
        await self._write(remove=sources)

    async def forget_vectors(self, doc_ids: Sequence[str]) -> None:
        """Delete these documents' vectors (documents a rebuild no longer found)."""
        if self._vector is not None and doc_ids:
            await self._vector.store.delete_vectors(self._vector.index_name, {"id": {"$in": sorted(doc_ids)}})

    def clear(self) -> None:
        """Forget the documents and file hashes held here (a store keeps its own, read again by the next query;
        a persistent vector store keeps its vectors, as in Mastra)."""
        self._ids.clear()
        self._by_source.clear()
        self._files.clear()
        self._at = IndexVersion()
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
        if effective != "vector":
            await self.refresh()
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


def _source_of(doc_id: str) -> str:
    """What a document came from: `a.md` for `a.md#chunk-3`, else the document itself."""
    return _chunk_source(doc_id) or doc_id


def _as_json(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata as it reads back from a store (JSON), or a `SearchError` when it is not JSON."""
    try:
        value: dict[str, Any] = json.loads(json.dumps(dict(metadata), ensure_ascii=False))
    except (TypeError, ValueError) as err:
        raise SearchError(f"Search metadata must be JSON to be stored: {err}") from None
    return value


def _chunk_source(doc_id: str) -> str | None:
    """`a.md` for `a.md#chunk-3`; None for a document that is not a chunk."""
    source, sep, index = doc_id.rpartition("#chunk-")
    return source if sep and index.isdigit() else None


def _shifted(found: tuple[int, int] | None, offset: Any) -> tuple[int, int] | None:
    if found is None or not isinstance(offset, int):
        return found
    return found[0] + offset - 1, found[1] + offset - 1
