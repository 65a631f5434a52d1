"""A workspace's search index kept in Keel's storage, so every worker answers a query the same way: the records
and the `SearchIndexStore` interface that workspace search (`keel.workspace_providers.search`) writes and reads
through and the storage backends (`keel.storage.search_index`) implement. They meet here because neither layer
may import the other.

A workspace's stored index (keyed by the workspace id) is:

- its documents, each with the `source` it came from: a file's path (for the file's one document or each of its
  chunks ``<path>#chunk-<i>``), or its own id for a document indexed alone (`Workspace.index`);
- the content hash of every file indexed, so an indexing skips a file whose content has not changed (nothing
  read into the index again, nothing embedded again); a file whose hash is None was indexed without its vectors
  (the embedder was down) and is indexed again next time;
- a version, bumped by every write in the same transaction as the write. Writes to one workspace are serialised
  (the version row is locked until the write commits), so the version orders them, and every document records
  the version that wrote it and its place in that write (`seq`). The version row also holds a generation, drawn
  at random when the row is created: an index emptied and written again (`keel reset`) may reach the same
  version number, never the same generation.

A reader keeps the documents in memory (BM25 needs corpus-wide statistics); before each query it reads the
version (one primary-key lookup) and, when it moved, the documents written since the version it holds, in write
order. Documents ordered by (version, seq) are in the order a process that made those writes itself added them
(a replaced document moves to the end in both), so every worker has the same corpus in the same order, and ties
rank the same everywhere too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class IndexedDocument:
    """One document of a workspace's index as storage keeps it. `metadata` is JSON (stored as text, its key
    order kept)."""

    id: str
    source: str
    """The file it came from (its path), or the document's own id for one indexed alone."""
    content: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IndexVersion:
    """Where a workspace's index is: its generation (`""` before its first write) and version (0 then)."""

    generation: str = ""
    version: int = 0


@dataclass(frozen=True)
class IndexWrite:
    """What a write did: `previous` is the version it found, `version` the one it made (`previous + 1`), in
    `generation`. A reader holding `previous` of that generation may apply the write itself instead of reading
    it back."""

    generation: str
    previous: int
    version: int


@dataclass(frozen=True)
class IndexChanges:
    """What a reader holding version `since` needs: the generation and version now, how many documents there
    are, and those written after `since`, in write order (version, then place in the write). A reader of another
    generation reads everything again (`since` 0). When `count` differs from the reader's documents after
    applying these, some were removed: `search_index_ids` tells which."""

    generation: str
    version: int
    count: int
    documents: list[IndexedDocument]


class SearchIndexStore(Protocol):
    """Where a workspace's search documents, file hashes and version live (`keel.storage.Storage` is one)."""

    async def search_index_version(self, workspace_id: str) -> IndexVersion:
        """The workspace's index generation and version (`IndexVersion()`: nothing was ever written)."""
        ...

    async def search_index_changes(self, workspace_id: str, since: int) -> IndexChanges:
        """In one snapshot: the generation, the version, the document count and the documents written after version
        `since`."""
        ...

    async def search_index_ids(self, workspace_id: str) -> list[str]:
        """The ids of every document of the workspace's index."""
        ...

    async def search_index_files(self, workspace_id: str, paths: Sequence[str] | None = None) -> dict[str, str | None]:
        """The content hash of each file indexed (of those of `paths`, or all)."""
        ...

    async def write_search_index(
        self,
        workspace_id: str,
        *,
        remove: Sequence[str] = (),
        documents: Sequence[IndexedDocument] = (),
        files: Mapping[str, str | None] | None = None,
    ) -> IndexWrite:
        """In one transaction, bumping the version: delete the documents (and file hashes) of the sources
        `remove`, then insert or replace `documents` (by id, in this order) and set the hashes `files`."""
        ...


__all__ = ["IndexChanges", "IndexVersion", "IndexWrite", "IndexedDocument", "SearchIndexStore"]
