"""The search-index domain: each workspace's search documents, the content hash of each file indexed, and a
version bumped by every write, so every worker searches the same corpus (the model and the rules are
`keel.protocol.search_index`'s; `Storage` is a `SearchIndexStore`).

Both backends store the metadata as JSON text (PostgreSQL's `jsonb` would reorder its keys, and a result's
metadata must read the same on every worker) and order documents by (version, seq).
"""

from __future__ import annotations

import abc
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from keel.protocol.search_index import IndexChanges, IndexedDocument, IndexVersion, IndexWrite


def encode_metadata(metadata: Mapping[str, Any]) -> str:
    return json.dumps(dict(metadata), ensure_ascii=False, separators=(",", ":"))


def new_generation() -> str:
    """A new index's generation: random, so an index emptied and created again never has its old one."""
    return secrets.token_hex(8)


def document(id: str, source: str, content: str, metadata: str) -> IndexedDocument:
    return IndexedDocument(id, source, content, json.loads(metadata))


class SearchIndexes(abc.ABC):
    @abc.abstractmethod
    async def search_index_version(self, workspace_id: str) -> IndexVersion:
        """The workspace's index generation and version (`IndexVersion()`: nothing was ever written)."""

    @abc.abstractmethod
    async def search_index_changes(self, workspace_id: str, since: int) -> IndexChanges:
        """In one snapshot: the generation, the version, the document count and the documents written after
        version `since`, in write order."""

    @abc.abstractmethod
    async def search_index_ids(self, workspace_id: str) -> list[str]:
        """The ids of every document of the workspace's index."""

    @abc.abstractmethod
    async def search_index_files(self, workspace_id: str, paths: Sequence[str] | None = None) -> dict[str, str | None]:
        """The content hash of each file indexed (of those of `paths`, or all)."""

    @abc.abstractmethod
    async def write_search_index(
        self,
        workspace_id: str,
        *,
        remove: Sequence[str] = (),
        documents: Sequence[IndexedDocument] = (),
        files: Mapping[str, str | None] | None = None,
    ) -> IndexWrite:
        """In one transaction, bumping the version (the bump locks the workspace's row first, so concurrent
        writers of one workspace queue; a new row gets a new random generation): delete the documents and file
        hashes of the sources `remove`, then insert or replace `documents` (by id, `seq` their place here) and
        set the hashes `files`."""
