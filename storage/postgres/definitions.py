"""PostgreSQL: stored workflow definitions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from keel.storage.definitions import CREATED_RUN_DAYS, DefinitionStore, Status, StoredDefinition, definition_hash
from keel.storage.postgres.pool import RUN_LOCK_CLASS, PostgresPool, guarded

_COLUMNS = (
    "w.workflow_id, v.version, v.hash, v.definition, w.status, w.author_id, w.deleted, v.created_at, w.updated_at"
)
_JOIN = "workflow_definitions w JOIN workflow_definition_versions v ON v.workflow_id = w.workflow_id"


def _row(row: Any) -> StoredDefinition:
    definition = row["definition"]
    return StoredDefinition(
        workflow_id=row["workflow_id"],
        version=row["version"],
        hash=row["hash"],
        definition=json.loads(definition) if isinstance(definition, str) else definition,
        status=row["status"],
        author_id=row["author_id"],
        deleted=row["deleted"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


class PostgresDefinitions(PostgresPool, DefinitionStore):
    @guarded
    async def save_definition(
        self, workflow_id: str, definition: dict[str, Any], *, author_id: str | None = None, status: Status = "active"
    ) -> StoredDefinition:
        digest, body, at = definition_hash(definition), json.dumps(definition), datetime.now(UTC)
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            # Savers of one workflow queue here, so versions stay dense.
            await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", RUN_LOCK_CLASS + 1, workflow_id)
            current = await conn.fetchrow(
                f"SELECT v.version, v.hash FROM {_JOIN} WHERE w.workflow_id = $1 AND v.version = w.latest_version",
                workflow_id,
            )
            version = 1 if current is None else current["version"] + (current["hash"] != digest)
            if current is None or current["hash"] != digest:
                await conn.execute(
                    "INSERT INTO workflow_definition_versions (workflow_id, version, hash, definition, created_at)"
                    " VALUES ($1, $2, $3, $4::jsonb, $5)",
                    workflow_id,
                    version,
                    digest,
                    body,
                    at,
                )
            await conn.execute(
                "INSERT INTO workflow_definitions"
                " (workflow_id, latest_version, status, author_id, deleted, created_at, updated_at)"
                " VALUES ($1, $2, $3, $4, FALSE, $5, $5) ON CONFLICT (workflow_id) DO UPDATE SET latest_version ="
                " excluded.latest_version, status = excluded.status, author_id = coalesce(excluded.author_id,"
                " workflow_definitions.author_id), deleted = FALSE, updated_at = excluded.updated_at",
                workflow_id,
                version,
                status,
                author_id,
                at,
            )
            row = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM {_JOIN} WHERE w.workflow_id = $1 AND v.version = $2", workflow_id, version
            )
        return _row(row)

    @guarded
    async def get_definition(
        self, workflow_id: str, version: int | None = None, *, include_deleted: bool = False
    ) -> StoredDefinition | None:
        pool = await self._get_pool()
        if version is not None:
            row = await pool.fetchrow(
                f"SELECT {_COLUMNS} FROM {_JOIN} WHERE w.workflow_id = $1 AND v.version = $2", workflow_id, version
            )
        else:
            hidden = "" if include_deleted else " AND NOT w.deleted"
            row = await pool.fetchrow(
                f"SELECT {_COLUMNS} FROM {_JOIN} WHERE w.workflow_id = $1 AND v.version = w.latest_version{hidden}",
                workflow_id,
            )
        return None if row is None else _row(row)

    @guarded
    async def list_definitions(
        self, *, status: Status | None = None, author_id: str | None = None
    ) -> list[StoredDefinition]:
        pool = await self._get_pool()
        rows = await pool.fetch(
            f"SELECT {_COLUMNS} FROM {_JOIN} WHERE v.version = w.latest_version AND NOT w.deleted"
            " AND ($1::text IS NULL OR w.status = $1) AND ($2::text IS NULL OR w.author_id = $2)"
            " ORDER BY w.workflow_id",
            status,
            author_id,
        )
        return [_row(r) for r in rows]

    @guarded
    async def delete_definition(self, workflow_id: str) -> bool:
        pool = await self._get_pool()
        result = await pool.execute(
            "UPDATE workflow_definitions SET deleted = TRUE, updated_at = $2 WHERE workflow_id = $1 AND NOT deleted",
            workflow_id,
            datetime.now(UTC),
        )
        return bool(result.endswith(" 1"))

    @guarded
    async def remember_created_run(self, run_id: str, workflow_id: str, resource_id: str) -> None:
        at = datetime.now(UTC)
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("DELETE FROM created_runs WHERE created_at < $1", at - timedelta(days=CREATED_RUN_DAYS))
            await conn.execute(
                "INSERT INTO created_runs (run_id, workflow_id, resource_id, created_at) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (run_id, workflow_id) DO UPDATE SET resource_id = excluded.resource_id,"
                " created_at = excluded.created_at",
                run_id,
                workflow_id,
                resource_id,
                at,
            )

    @guarded
    async def created_run_resource(self, run_id: str, workflow_id: str) -> str | None:
        pool = await self._get_pool()
        found = await pool.fetchval(
            "SELECT resource_id FROM created_runs WHERE run_id = $1 AND workflow_id = $2", run_id, workflow_id
        )
        return None if found is None else str(found)

    @guarded
    async def forget_created_runs(self, *, before: datetime) -> int:
        pool = await self._get_pool()
        result = await pool.execute("DELETE FROM created_runs WHERE created_at < $1", before)
        return int(result.split()[-1])
