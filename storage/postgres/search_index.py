"""PostgreSQL: workspace search indexes (`keel.storage.search_index`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from keel.protocol.search_index import IndexChanges, IndexedDocument, IndexVersion, IndexWrite
from keel.storage.postgres.pool import PostgresPool, guarded
from keel.storage.search_index import SearchIndexes, document, encode_metadata, new_generation

_VERSION = "SELECT generation, version FROM search_indexes WHERE workspace_id = $1"


async def _version(conn: Any, workspace_id: str) -> IndexVersion:
    row = await conn.fetchrow(_VERSION, workspace_id)
    return IndexVersion(row[0], int(row[1])) if row is not None else IndexVersion()


class PostgresSearchIndexes(PostgresPool, SearchIndexes):
    @guarded
    async def search_index_version(self, workspace_id: str) -> IndexVersion:
        pool = await self._get_pool()
        async with pool.acquire() as conn:
            return await _version(conn, workspace_id)

    @guarded
    async def search_index_changes(self, workspace_id: str, since: int) -> IndexChanges:
        pool = await self._get_pool()
        # Repeatable read: the version, the count and the documents from one snapshot.
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            at = await _version(conn, workspace_id)
            count = int(
                await conn.fetchval("SELECT count(*) FROM search_index_documents WHERE workspace_id = $1", workspace_id)
            )
            rows = await conn.fetch(
                "SELECT id, source, content, metadata FROM search_index_documents"
                " WHERE workspace_id = $1 AND version > $2 ORDER BY version, seq",
                workspace_id,
                since,
            )
        return IndexChanges(at.generation, at.version, count, [document(*r) for r in rows])

    @guarded
    async def search_index_ids(self, workspace_id: str) -> list[str]:
        pool = await self._get_pool()
        async with pool.acquire() as conn:
            rows = await conn.fetch("SELECT id FROM search_index_documents WHERE workspace_id = $1", workspace_id)
        return [r[0] for r in rows]

    @guarded
    async def search_index_files(self, workspace_id: str, paths: Sequence[str] | None = None) -> dict[str, str | None]:
        pool = await self._get_pool()
        query = "SELECT path, content_hash FROM search_index_files WHERE workspace_id = $1"
        async with pool.acquire() as conn:
            if paths is None:
                rows = await conn.fetch(query, workspace_id)
            else:
                rows = await conn.fetch(query + " AND path = ANY($2::text[])", workspace_id, list(paths))
        return {r[0]: r[1] for r in rows}

    @guarded
    async def write_search_index(
        self,
        workspace_id: str,
        *,
        remove: Sequence[str] = (),
        documents: Sequence[IndexedDocument] = (),
        files: Mapping[str, str | None] | None = None,
    ) -> IndexWrite:
        pool = await self._get_pool()
        hashes = dict(files or {})
        documents = list({d.id: d for d in documents}.values())  # a repeated id: its last document, at its first place
        async with pool.acquire() as conn, conn.transaction():
            # The upsert locks the workspace's row until the commit: writers of one workspace queue here.
            row = await conn.fetchrow(
                "INSERT INTO search_indexes (workspace_id, generation, version) VALUES ($1, $2, 1)"
                " ON CONFLICT (workspace_id) DO UPDATE SET version = search_indexes.version + 1"
                " RETURNING generation, version",
                workspace_id,
                new_generation(),
            )
            generation, version = str(row[0]), int(row[1])
            if remove:
                await conn.execute(
                    "DELETE FROM search_index_documents WHERE workspace_id = $1 AND source = ANY($2::text[])",
                    workspace_id,
                    list(remove),
                )
                await conn.execute(
                    "DELETE FROM search_index_files WHERE workspace_id = $1 AND path = ANY($2::text[])",
                    workspace_id,
                    list(remove),
                )
            if documents:
                await conn.execute(
                    "INSERT INTO search_index_documents (workspace_id, id, source, version, seq, content, metadata)"
                    " SELECT $1, d.id, d.source, $2, d.seq - 1, d.content, d.metadata"
                    " FROM unnest($3::text[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY"
                    " AS d (id, source, content, metadata, seq)"
                    " ON CONFLICT (workspace_id, id) DO UPDATE SET source = excluded.source,"
                    " version = excluded.version, seq = excluded.seq, content = excluded.content,"
                    " metadata = excluded.metadata",
                    workspace_id,
                    version,
                    [d.id for d in documents],
                    [d.source for d in documents],
                    [d.content for d in documents],
                    [encode_metadata(d.metadata) for d in documents],
                )
            if hashes:
                await conn.execute(
                    "INSERT INTO search_index_files (workspace_id, path, content_hash)"
                    " SELECT $1, f.path, f.content_hash FROM unnest($2::text[], $3::text[]) AS f (path, content_hash)"
                    " ON CONFLICT (workspace_id, path) DO UPDATE SET content_hash = excluded.content_hash",
                    workspace_id,
                    list(hashes),
                    list(hashes.values()),
                )
        return IndexWrite(generation, version - 1, version)
