"""PostgreSQL: threads and messages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic_core import to_json

from keel.storage import rules
from keel.storage.errors import ThreadExists, ThreadNotFound
from keel.storage.postgres.pool import PostgresPool, guarded, utc
from keel.storage.threads import StoredMessage, Thread, ThreadStore


async def save(conn: Any, messages: list[StoredMessage], replace: bool) -> None:
    """Insert messages inside the caller's transaction."""
    thread_ids = list(dict.fromkeys(m.thread_id for m in messages))
    columns: tuple[list[Any], ...] = ([], [], [], [], [], [], [])
    for m in messages:
        row = (
            m.id,
            m.thread_id,
            m.resource_id,
            m.role,
            rules.content_json(m.content),
            m.run_id,
            utc(m.created_at),
        )
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    # Touching updated_at doubles as the existence check, and its row locks keep a concurrent
    # delete_thread from slipping in before the insert.
    touched = await conn.fetch(
        "UPDATE threads SET updated_at = $2 WHERE id = ANY($1::text[]) RETURNING id",
        thread_ids,
        datetime.now(UTC),
    )
    found = {r["id"] for r in touched}
    for thread_id in thread_ids:
        if thread_id not in found:
            raise ThreadNotFound(thread_id)
    conflict = rules.REPLACE_MESSAGE if replace else "DO NOTHING"
    # ORDER BY ord: identity values (the insertion order) follow the order of the list.
    await conn.execute(
        f"""
        INSERT INTO messages ({rules.MESSAGE_COLUMNS})
        SELECT {rules.MESSAGE_COLUMNS}
        FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::text[],
                    $7::timestamptz[])
             WITH ORDINALITY AS u(id, thread_id, resource_id, role, content, run_id, created_at, ord)
        ORDER BY ord
        ON CONFLICT (id) {conflict}
        """,
        *columns,
    )


class PostgresThreads(PostgresPool, ThreadStore):
    @guarded
    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        new: bool = False,
    ) -> Thread:
        pool = await self._get_pool()
        now = datetime.now(UTC)
        meta = None if metadata is None else to_json(metadata).decode()
        # One round trip: the CTE yields the new row, the UNION the existing one (its snapshot cannot see
        # the row the CTE inserts, so at most one side returns a row); `made` says which.
        row = await pool.fetchrow(
            f"""
            WITH ins AS (
                INSERT INTO threads (id, resource_id, title, metadata, created_at, updated_at)
                VALUES ($1, $2, $3, $4::jsonb, $5, $5)
                ON CONFLICT (id) DO NOTHING
                RETURNING {rules.THREAD_COLUMNS}
            )
            SELECT {rules.THREAD_COLUMNS}, TRUE AS made FROM ins
            UNION ALL
            SELECT {rules.THREAD_COLUMNS}, FALSE AS made FROM threads WHERE id = $1
            LIMIT 1
            """,
            thread_id,
            resource_id,
            title,
            meta,
            now,
        )
        if new and (row is None or not row["made"]):
            raise ThreadExists(thread_id)
        if row is None:
            # A concurrent creator committed after our snapshot was taken; now it is visible.
            row = await pool.fetchrow(f"SELECT {rules.THREAD_COLUMNS} FROM threads WHERE id = $1", thread_id)
            if row is None:
                raise ThreadNotFound(thread_id)
        return rules.thread(row)

    @guarded
    async def get_thread(self, thread_id: str) -> Thread | None:
        pool = await self._get_pool()
        row = await pool.fetchrow(f"SELECT {rules.THREAD_COLUMNS} FROM threads WHERE id = $1", thread_id)
        return None if row is None else rules.thread(row)

    @guarded
    async def list_threads(
        self, resource_id: str | None = None, *, offset: int = 0, limit: int | None = None
    ) -> tuple[list[Thread], int]:
        rules.check_page(offset, limit)
        pool = await self._get_pool()
        where = "WHERE $1::text IS NULL OR resource_id = $1"
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            total = await conn.fetchval(f"SELECT count(*) FROM threads {where}", resource_id)
            rows = await conn.fetch(
                f"SELECT {rules.THREAD_COLUMNS} FROM threads {where}"
                " ORDER BY created_at DESC, seq DESC OFFSET $2 LIMIT $3",
                resource_id,
                offset,
                limit,
            )
        return [rules.thread(r) for r in rows], int(total)

    @guarded
    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        resource_id: str | None = None,
    ) -> Thread:
        pool = await self._get_pool()
        params: list[Any] = [thread_id, datetime.now(UTC)]
        sets = ["updated_at = $2"]
        for column, value, cast in (
            ("title", title, ""),
            ("metadata", None if metadata is None else to_json(metadata).decode(), "::jsonb"),
            ("resource_id", resource_id, ""),
        ):
            if value is not None:
                params.append(value)
                sets.append(f"{column} = ${len(params)}{cast}")
        row = await pool.fetchrow(
            f"UPDATE threads SET {', '.join(sets)} WHERE id = $1 RETURNING {rules.THREAD_COLUMNS}", *params
        )
        if row is None:
            raise ThreadNotFound(thread_id)
        return rules.thread(row)

    @guarded
    async def merge_thread_metadata(self, thread_id: str, updates: dict[str, Any]) -> dict[str, Any]:
        pool = await self._get_pool()
        removed = [k for k, v in updates.items() if v is None]
        kept = {k: v for k, v in updates.items() if v is not None}
        found = await pool.fetchval(
            "UPDATE threads SET metadata = (coalesce(metadata, '{}'::jsonb) - $3::text[]) || $2::jsonb,"
            " updated_at = $4 WHERE id = $1 RETURNING metadata::text",
            thread_id,
            to_json(kept).decode(),
            removed,
            datetime.now(UTC),
        )
        if found is None:
            raise ThreadNotFound(thread_id)
        metadata: dict[str, Any] = json.loads(found)
        return metadata

    @guarded
    async def delete_thread(self, thread_id: str) -> bool:
        pool = await self._get_pool()
        # Messages go with it through ON DELETE CASCADE.
        deleted = await pool.fetchval("DELETE FROM threads WHERE id = $1 RETURNING id", thread_id)
        return deleted is not None

    # --- messages -----------------------------------------------------------------------------------------

    @guarded
    async def save_messages(self, messages: list[StoredMessage], *, replace: bool = False) -> None:
        if not messages:
            return
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            await save(conn, messages, replace)

    @guarded
    async def list_messages(
        self, thread_id: str, *, offset: int = 0, limit: int | None = None
    ) -> tuple[list[StoredMessage], int]:
        rules.check_page(offset, limit)
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            total = await conn.fetchval("SELECT count(*) FROM messages WHERE thread_id = $1", thread_id)
            rows = await conn.fetch(
                f"SELECT {rules.MESSAGE_COLUMNS} FROM messages WHERE thread_id = $1"
                " ORDER BY created_at, seq OFFSET $2 LIMIT $3",
                thread_id,
                offset,
                limit,
            )
        return [rules.message(r) for r in rows], int(total)

    @guarded
    async def run_messages(self, thread_id: str, run_id: str) -> list[StoredMessage]:
        pool = await self._get_pool()
        rows = await pool.fetch(
            f"SELECT {rules.MESSAGE_COLUMNS} FROM messages WHERE thread_id = $1 AND run_id = $2"
            " ORDER BY created_at, seq",
            thread_id,
            run_id,
        )
        return [rules.message(r) for r in rows]

    @guarded
    async def get_messages(self, ids: list[str]) -> list[StoredMessage]:
        if not ids:
            return []
        pool = await self._get_pool()
        rows = await pool.fetch(
            f"SELECT {rules.MESSAGE_COLUMNS} FROM messages WHERE id = ANY($1::text[])", list(set(ids))
        )
        by_id = {m.id: m for m in map(rules.message, rows)}
        return [by_id[i] for i in ids if i in by_id]

    @guarded
    async def delete_messages(self, ids: list[str]) -> int:
        if not ids:
            return 0
        pool = await self._get_pool()
        count = await pool.fetchval(
            "WITH d AS (DELETE FROM messages WHERE id = ANY($1::text[]) RETURNING 1) SELECT count(*) FROM d",
            list(set(ids)),
        )
        return int(count)
