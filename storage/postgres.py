"""PostgreSQL backend on asyncpg, for deployments with several workers.

asyncpg is imported on first use, so `import storage` works where only the SQLite backend is installed.
JSON columns are passed as text both ways (asyncpg's default for jsonb): we serialise with pydantic, which
also knows how to dump the `Part` models and any datetimes inside payloads.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from keel.protocol import EventRecord
from keel.storage import codec
from keel.storage.base import (
    RunEvent,
    Storage,
    StorageConfigError,
    StorageError,
    StoredMessage,
    Thread,
    ThreadNotFound,
)

if TYPE_CHECKING:
    import asyncpg


# Advisory lock keys. The two-argument form lives in a different key space from the one-argument form, so
# per-run locks can never collide with the schema lock.
_SCHEMA_LOCK = 0x6B65656C_00000001
_RUN_LOCK_CLASS = 0x6B65656C  # "keel"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (
    id          TEXT PRIMARY KEY,
    seq         BIGINT GENERATED ALWAYS AS IDENTITY,
    resource_id TEXT NOT NULL,
    title       TEXT,
    metadata    JSONB,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS threads_resource_created ON threads (resource_id, created_at DESC, seq DESC);
CREATE INDEX IF NOT EXISTS threads_created ON threads (created_at DESC, seq DESC);

CREATE TABLE IF NOT EXISTS messages (
    id          TEXT PRIMARY KEY,
    seq         BIGINT GENERATED ALWAYS AS IDENTITY,
    thread_id   TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    resource_id TEXT NOT NULL,
    role        TEXT NOT NULL,
    content     JSONB NOT NULL,
    run_id      TEXT,
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_thread_order ON messages (thread_id, created_at, seq);

CREATE TABLE IF NOT EXISTS run_events (
    run_id     TEXT NOT NULL,
    "offset"   BIGINT NOT NULL,
    type       TEXT NOT NULL,
    payload    JSONB NOT NULL,
    source     TEXT,
    attempt    INTEGER NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, "offset")
);
"""


def _utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC (asyncpg would otherwise read them as local time)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


class PostgresStorage(Storage):
    """Storage in a PostgreSQL database, through a small asyncpg connection pool.

    Args:
        dsn: A libpq-style URL, e.g. `postgresql://user:pass@host:5432/keel`.
        min_size: Connections the pool keeps open.
        max_size: Most connections the pool opens at once.
    """

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 5) -> None:
        self.dsn = dsn
        self._min_size = min_size
        self._max_size = max_size
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._closed = False

    # --- plumbing -----------------------------------------------------------------------------------------

    async def _get_pool(self) -> asyncpg.Pool:
        if self._closed:
            raise StorageError("PostgresStorage is closed")
        if self._pool is not None:
            return self._pool
        async with self._pool_lock:
            if self._pool is None:
                try:
                    import asyncpg
                except ImportError as exc:
                    raise StorageConfigError("PostgreSQL storage needs asyncpg: pip install 'keel[postgres]'") from exc
                self._pool = await asyncpg.create_pool(self.dsn, min_size=self._min_size, max_size=self._max_size)
            return self._pool

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def init(self) -> None:
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalogs; serialise them.
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
            await conn.execute(_SCHEMA)

    async def close(self) -> None:
        self._closed = True
        async with self._pool_lock:
            if self._pool is not None:
                await self._pool.close()
                self._pool = None

    # --- threads ------------------------------------------------------------------------------------------

    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Thread:
        pool = await self._get_pool()
        now = datetime.now(UTC)
        meta = None if metadata is None else to_json(metadata).decode()
        # One round trip: the CTE yields the new row, the UNION the existing one (its snapshot cannot see
        # the row the CTE inserts, so at most one side returns a row).
        row = await pool.fetchrow(
            f"""
            WITH ins AS (
                INSERT INTO threads (id, resource_id, title, metadata, created_at, updated_at)
                VALUES ($1, $2, $3, $4::jsonb, $5, $5)
                ON CONFLICT (id) DO NOTHING
                RETURNING {codec.THREAD_COLUMNS}
            )
            SELECT {codec.THREAD_COLUMNS} FROM ins
            UNION ALL
            SELECT {codec.THREAD_COLUMNS} FROM threads WHERE id = $1
            LIMIT 1
            """,
            thread_id,
            resource_id,
            title,
            meta,
            now,
        )
        if row is None:
            # A concurrent creator committed after our snapshot was taken; now it is visible.
            row = await pool.fetchrow(f"SELECT {codec.THREAD_COLUMNS} FROM threads WHERE id = $1", thread_id)
            if row is None:
                raise ThreadNotFound(thread_id)
        return codec.thread(row)

    async def get_thread(self, thread_id: str) -> Thread | None:
        pool = await self._get_pool()
        row = await pool.fetchrow(f"SELECT {codec.THREAD_COLUMNS} FROM threads WHERE id = $1", thread_id)
        return None if row is None else codec.thread(row)

    async def list_threads(
        self, resource_id: str | None = None, *, offset: int = 0, limit: int | None = None
    ) -> tuple[list[Thread], int]:
        codec.check_page(offset, limit)
        pool = await self._get_pool()
        where = "WHERE $1::text IS NULL OR resource_id = $1"
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            total = await conn.fetchval(f"SELECT count(*) FROM threads {where}", resource_id)
            rows = await conn.fetch(
                f"SELECT {codec.THREAD_COLUMNS} FROM threads {where}"
                " ORDER BY created_at DESC, seq DESC OFFSET $2 LIMIT $3",
                resource_id,
                offset,
                limit,
            )
        return [codec.thread(r) for r in rows], int(total)

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
            f"UPDATE threads SET {', '.join(sets)} WHERE id = $1 RETURNING {codec.THREAD_COLUMNS}", *params
        )
        if row is None:
            raise ThreadNotFound(thread_id)
        return codec.thread(row)

    async def delete_thread(self, thread_id: str) -> bool:
        pool = await self._get_pool()
        # Messages go with it through ON DELETE CASCADE.
        deleted = await pool.fetchval("DELETE FROM threads WHERE id = $1 RETURNING id", thread_id)
        return deleted is not None

    # --- messages -----------------------------------------------------------------------------------------

    async def save_messages(self, messages: list[StoredMessage], *, replace: bool = False) -> None:
        if messages:
            await self.write("", messages=messages, replace=replace)

    @staticmethod
    async def _save(conn: Any, messages: list[StoredMessage], replace: bool) -> None:
        thread_ids = list(dict.fromkeys(m.thread_id for m in messages))
        columns: tuple[list[Any], ...] = ([], [], [], [], [], [], [])
        for m in messages:
            row = (
                m.id,
                m.thread_id,
                m.resource_id,
                m.role,
                codec.CONTENT.dump_json(m.content).decode(),
                m.run_id,
                _utc(m.created_at),
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
        conflict = (
            "DO UPDATE SET role = excluded.role, content = excluded.content, run_id = excluded.run_id"
            if replace
            else "DO NOTHING"
        )
        # ORDER BY ord: identity values (the insertion order) follow the order of the list.
        await conn.execute(
            f"""
            INSERT INTO messages ({codec.MESSAGE_COLUMNS})
            SELECT {codec.MESSAGE_COLUMNS}
            FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::text[],
                        $7::timestamptz[])
                 WITH ORDINALITY AS u(id, thread_id, resource_id, role, content, run_id, created_at, ord)
            ORDER BY ord
            ON CONFLICT (id) {conflict}
            """,
            *columns,
        )

    async def list_messages(
        self, thread_id: str, *, offset: int = 0, limit: int | None = None
    ) -> tuple[list[StoredMessage], int]:
        codec.check_page(offset, limit)
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            total = await conn.fetchval("SELECT count(*) FROM messages WHERE thread_id = $1", thread_id)
            rows = await conn.fetch(
                f"SELECT {codec.MESSAGE_COLUMNS} FROM messages WHERE thread_id = $1"
                " ORDER BY created_at, seq OFFSET $2 LIMIT $3",
                thread_id,
                offset,
                limit,
            )
        return [codec.message(r) for r in rows], int(total)

    async def get_messages(self, ids: list[str]) -> list[StoredMessage]:
        if not ids:
            return []
        pool = await self._get_pool()
        rows = await pool.fetch(
            f"SELECT {codec.MESSAGE_COLUMNS} FROM messages WHERE id = ANY($1::text[])", list(set(ids))
        )
        by_id = {m.id: m for m in map(codec.message, rows)}
        return [by_id[i] for i in ids if i in by_id]

    async def delete_messages(self, ids: list[str]) -> int:
        if not ids:
            return 0
        pool = await self._get_pool()
        count = await pool.fetchval(
            "WITH d AS (DELETE FROM messages WHERE id = ANY($1::text[]) RETURNING 1) SELECT count(*) FROM d",
            list(set(ids)),
        )
        return int(count)

    # --- run events ---------------------------------------------------------------------------------------

    async def append_events(
        self, run_id: str, events: list[EventRecord], *, source: str | None = None, attempt: int = 1
    ) -> list[int]:
        if not events:
            return []
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            return await self._append(conn, run_id, events, source, attempt)

    @staticmethod
    async def _lock_run(conn: Any, run_id: str) -> None:
        # Appenders to one run queue here until the holder commits. The next statement takes a fresh
        # snapshot (READ COMMITTED), so it sees the holder's rows and max(offset) + 1 is free.
        await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", _RUN_LOCK_CLASS, run_id)

    @classmethod
    async def _append(
        cls, conn: Any, run_id: str, events: list[EventRecord], source: str | None, attempt: int
    ) -> list[int]:
        await cls._lock_run(conn, run_id)
        rows = await conn.fetch(
            """
            WITH head AS (
                SELECT coalesce(max("offset") + 1, 0) AS start FROM run_events WHERE run_id = $1
            )
            INSERT INTO run_events (run_id, "offset", type, payload, source, attempt, created_at)
            SELECT $1, head.start + u.ord - 1, u.type, u.payload, $4, $5, $6
            FROM head, unnest($2::text[], $3::jsonb[]) WITH ORDINALITY AS u(type, payload, ord)
            RETURNING "offset"
            """,
            run_id,
            [e.type for e in events],
            [to_json(e.payload).decode() for e in events],
            source,
            attempt,
            datetime.now(UTC),
        )
        return sorted(int(r["offset"]) for r in rows)

    async def write(
        self,
        run_id: str,
        *,
        messages: list[StoredMessage] | None = None,
        replace: bool = False,
        events: list[EventRecord] | None = None,
        source: str | None = None,
        attempt: int = 1,
        renumber: bool = False,
    ) -> int:
        if not messages and not events:
            return attempt
        pool = await self._get_pool()
        used = attempt
        async with pool.acquire() as conn, conn.transaction():
            if messages:
                await self._save(conn, messages, replace)
            if events:
                if renumber:
                    await self._lock_run(conn, run_id)
                    written = await conn.fetchval(
                        "SELECT coalesce(max(attempt), 0) FROM run_events"
                        " WHERE run_id = $1 AND source IS NOT DISTINCT FROM $2",
                        run_id,
                        source,
                    )
                    used = attempt if int(written) < attempt else int(written) + 1
                await self._append(conn, run_id, events, source, used)
        return used

    async def read_events(self, run_id: str, *, offset: int = 0, limit: int | None = None) -> list[RunEvent]:
        codec.check_page(offset, limit)
        pool = await self._get_pool()
        rows = await pool.fetch(
            'SELECT run_id, "offset", type, payload, source, attempt, created_at FROM run_events'
            ' WHERE run_id = $1 AND "offset" >= $2 ORDER BY "offset" LIMIT $3',
            run_id,
            offset,
            limit,
        )
        return [codec.event(r) for r in rows]
