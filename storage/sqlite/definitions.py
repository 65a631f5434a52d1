"""SQLite: stored workflow definitions."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

from keel.storage.definitions import CREATED_RUN_DAYS, DefinitionStore, Status, StoredDefinition, definition_hash
from keel.storage.sqlite.connection import SQLiteConnection, now, ts

_COLUMNS = (
    "w.workflow_id, v.version, v.hash, v.definition, w.status, w.author_id, w.deleted, v.created_at, w.updated_at"
)
_JOIN = "workflow_definitions w JOIN workflow_definition_versions v ON v.workflow_id = w.workflow_id"


def _row(row: sqlite3.Row) -> StoredDefinition:
    return StoredDefinition(
        workflow_id=row[0],
        version=row[1],
        hash=row[2],
        definition=json.loads(row[3]),
        status=row[4],
        author_id=row[5],
        deleted=bool(row[6]),
        created_at=datetime.fromisoformat(row[7]),
        updated_at=datetime.fromisoformat(row[8]),
    )


class SQLiteDefinitions(SQLiteConnection, DefinitionStore):
    async def save_definition(
        self, workflow_id: str, definition: dict[str, Any], *, author_id: str | None = None, status: Status = "active"
    ) -> StoredDefinition:
        digest, body, at = definition_hash(definition), json.dumps(definition), now()

        def save(conn: sqlite3.Connection) -> StoredDefinition:
            current = conn.execute(
                f"SELECT v.version, v.hash FROM {_JOIN} WHERE w.workflow_id = ? AND v.version = w.latest_version",
                (workflow_id,),
            ).fetchone()
            version = 1 if current is None else current[0] + (current[1] != digest)
            if current is None or current[1] != digest:
                conn.execute(
                    "INSERT INTO workflow_definition_versions (workflow_id, version, hash, definition, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (workflow_id, version, digest, body, at),
                )
            conn.execute(
                "INSERT INTO workflow_definitions"
                " (workflow_id, latest_version, status, author_id, deleted, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, 0, ?, ?) ON CONFLICT (workflow_id) DO UPDATE SET latest_version = excluded."
                "latest_version, status = excluded.status, author_id = coalesce(excluded.author_id, author_id),"
                " deleted = 0, updated_at = excluded.updated_at",
                (workflow_id, version, status, author_id, at, at),
            )
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM {_JOIN} WHERE w.workflow_id = ? AND v.version = ?", (workflow_id, version)
            ).fetchone()
            return _row(row)

        return await self._write_tx(save)

    async def get_definition(
        self, workflow_id: str, version: int | None = None, *, include_deleted: bool = False
    ) -> StoredDefinition | None:
        def read(conn: sqlite3.Connection) -> sqlite3.Row | None:
            if version is not None:
                query = f"SELECT {_COLUMNS} FROM {_JOIN} WHERE w.workflow_id = ? AND v.version = ?"
                return conn.execute(query, (workflow_id, version)).fetchone()  # type: ignore[no-any-return]
            hidden = "" if include_deleted else " AND w.deleted = 0"
            query = f"SELECT {_COLUMNS} FROM {_JOIN} WHERE w.workflow_id = ? AND v.version = w.latest_version{hidden}"
            return conn.execute(query, (workflow_id,)).fetchone()  # type: ignore[no-any-return]

        row = await self._run(read)
        return None if row is None else _row(row)

    async def list_definitions(
        self, *, status: Status | None = None, author_id: str | None = None
    ) -> list[StoredDefinition]:
        def read(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            return conn.execute(
                f"SELECT {_COLUMNS} FROM {_JOIN} WHERE v.version = w.latest_version AND w.deleted = 0"
                " AND (? IS NULL OR w.status = ?) AND (? IS NULL OR w.author_id = ?) ORDER BY w.workflow_id",
                (status, status, author_id, author_id),
            ).fetchall()

        return [_row(r) for r in await self._run(read)]

    async def delete_definition(self, workflow_id: str) -> bool:
        at = now()

        def delete(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE workflow_definitions SET deleted = 1, updated_at = ? WHERE workflow_id = ? AND deleted = 0",
                (at, workflow_id),
            )
            return cursor.rowcount > 0

        return await self._write_tx(delete)

    async def remember_created_run(self, run_id: str, workflow_id: str, resource_id: str) -> None:
        at = datetime.now(UTC)

        def remember(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM created_runs WHERE created_at < ?", (ts(at - timedelta(days=CREATED_RUN_DAYS)),))
            conn.execute(
                "INSERT INTO created_runs (run_id, workflow_id, resource_id, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (run_id, workflow_id) DO UPDATE SET resource_id = excluded.resource_id,"
                " created_at = excluded.created_at",
                (run_id, workflow_id, resource_id, ts(at)),
            )

        await self._write_tx(remember)

    async def created_run_resource(self, run_id: str, workflow_id: str) -> str | None:
        def read(conn: sqlite3.Connection) -> sqlite3.Row | None:
            return conn.execute(  # type: ignore[no-any-return]
                "SELECT resource_id FROM created_runs WHERE run_id = ? AND workflow_id = ?", (run_id, workflow_id)
            ).fetchone()

        row = await self._run(read)
        return None if row is None else str(row[0])

    async def forget_created_runs(self, *, before: datetime) -> int:
        def forget(conn: sqlite3.Connection) -> int:
            return conn.execute("DELETE FROM created_runs WHERE created_at < ?", (ts(before),)).rowcount

        return await self._write_tx(forget)
