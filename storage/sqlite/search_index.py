"""SQLite: workspace search indexes (`keel.storage.search_index`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence

from keel.protocol.search_index import IndexChanges, IndexedDocument, IndexVersion, IndexWrite
from keel.storage.search_index import SearchIndexes, document, encode_metadata, new_generation
from keel.storage.sqlite.connection import SQLiteConnection


def _version(conn: sqlite3.Connection, workspace_id: str) -> IndexVersion:
    row = conn.execute(
        "SELECT generation, version FROM search_indexes WHERE workspace_id = ?", (workspace_id,)
    ).fetchone()
    return IndexVersion(row[0], int(row[1])) if row is not None else IndexVersion()


class SQLiteSearchIndexes(SQLiteConnection, SearchIndexes):
    async def search_index_version(self, workspace_id: str) -> IndexVersion:
        return await self._run(lambda conn: _version(conn, workspace_id))

    async def search_index_changes(self, workspace_id: str, since: int) -> IndexChanges:
        def read(conn: sqlite3.Connection) -> IndexChanges:
            count = conn.execute(
                "SELECT count(*) FROM search_index_documents WHERE workspace_id = ?", (workspace_id,)
            ).fetchone()[0]
            rows = conn.execute(
                "SELECT id, source, content, metadata FROM search_index_documents"
                " WHERE workspace_id = ? AND version > ? ORDER BY version, seq",
                (workspace_id, since),
            ).fetchall()
            at = _version(conn, workspace_id)
            return IndexChanges(at.generation, at.version, int(count), [document(*r) for r in rows])

        return await self._read_tx(read)

    async def search_index_ids(self, workspace_id: str) -> list[str]:
        def read(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute("SELECT id FROM search_index_documents WHERE workspace_id = ?", (workspace_id,))
            return [r[0] for r in rows]

        return await self._run(read)

    async def search_index_files(self, workspace_id: str, paths: Sequence[str] | None = None) -> dict[str, str | None]:
        def read(conn: sqlite3.Connection) -> dict[str, str | None]:
            query = "SELECT path, content_hash FROM search_index_files WHERE workspace_id = ?"
            if paths is None:
                rows = conn.execute(query, (workspace_id,))
            else:
                query += " AND path IN (SELECT value FROM json_each(?))"
                rows = conn.execute(query, (workspace_id, json.dumps(list(paths))))
            return {r[0]: r[1] for r in rows}

        return await self._run(read)

    async def write_search_index(
        self,
        workspace_id: str,
        *,
        remove: Sequence[str] = (),
        documents: Sequence[IndexedDocument] = (),
        files: Mapping[str, str | None] | None = None,
    ) -> IndexWrite:
        removed = json.dumps(list(remove))
        unique = list({d.id: d for d in documents}.values())  # a repeated id: its last document, at its first place
        rows = [(d.id, d.source, seq, d.content, encode_metadata(d.metadata)) for seq, d in enumerate(unique)]
        hashes = list((files or {}).items())

        def write(conn: sqlite3.Connection) -> IndexWrite:
            generation, version = conn.execute(
                "INSERT INTO search_indexes (workspace_id, generation, version) VALUES (?, ?, 1)"
                " ON CONFLICT (workspace_id) DO UPDATE SET version = version + 1 RETURNING generation, version",
                (workspace_id, new_generation()),
            ).fetchone()
            if remove:
                for table, column in (("search_index_documents", "source"), ("search_index_files", "path")):
                    conn.execute(
                        f"DELETE FROM {table} WHERE workspace_id = ? AND {column} IN (SELECT value FROM json_each(?))",
                        (workspace_id, removed),
                    )
            conn.executemany(
                "INSERT INTO search_index_documents (workspace_id, id, source, version, seq, content, metadata)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workspace_id, id) DO UPDATE SET source = excluded.source,"
                " version = excluded.version, seq = excluded.seq, content = excluded.content,"
                " metadata = excluded.metadata",
                [(workspace_id, id, source, version, seq, content, meta) for id, source, seq, content, meta in rows],
            )
            conn.executemany(
                "INSERT INTO search_index_files (workspace_id, path, content_hash) VALUES (?, ?, ?)"
                " ON CONFLICT (workspace_id, path) DO UPDATE SET content_hash = excluded.content_hash",
                [(workspace_id, path, digest) for path, digest in hashes],
            )
            return IndexWrite(generation, int(version) - 1, int(version))

        return await self._write_tx(write)
