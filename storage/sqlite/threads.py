"""SQLite: threads and messages."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from pydantic_core import to_json

from keel.storage import rules
from keel.storage.errors import ThreadExists, ThreadNotFound
from keel.storage.sqlite.connection import INLINE_ROWS, SQLiteConnection, now, sql_limit, ts
from keel.storage.threads import StoredMessage, Thread, ThreadStore

MessageRow = tuple[Any, ...]


def message_rows(messages: list[StoredMessage]) -> list[MessageRow]:
    """Rows for `save`; serialised outside the DB thread: CPU work that need not hold the write lock."""
    return [
        (m.id, m.thread_id, m.resource_id, m.role, rules.content_json(m.content), m.run_id, ts(m.created_at))
        for m in messages
    ]


def save(conn: sqlite3.Connection, rows: list[MessageRow], replace: bool, at: str) -> None:
    """Insert message rows inside the caller's write transaction."""
    # Touching updated_at doubles as the existence check, inside the same write lock.
    for thread_id in dict.fromkeys(row[1] for row in rows):
        cur = conn.execute("UPDATE threads SET updated_at = ? WHERE id = ?", (at, thread_id))
        if cur.rowcount == 0:
            raise ThreadNotFound(thread_id)
    conflict = rules.REPLACE_MESSAGE if replace else "DO NOTHING"
    conn.executemany(
        f"INSERT INTO messages ({rules.MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) {conflict}",
        rows,
    )


def insert_thread(
    conn: sqlite3.Connection,
    thread_id: str,
    resource_id: str,
    title: str | None,
    meta: str | None,
    at: str,
    *,
    new: bool = False,
) -> Thread:
    """Create the thread unless it exists, inside the caller's write transaction; returns it (with `new`, one
    that exists raises `ThreadExists`)."""
    inserted = conn.execute(
        "INSERT OR IGNORE INTO threads (id, resource_id, title, metadata, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (thread_id, resource_id, title, meta, at, at),
    )
    if new and inserted.rowcount == 0:
        raise ThreadExists(thread_id)
    row = conn.execute(f"SELECT {rules.THREAD_COLUMNS} FROM threads WHERE id = ?", (thread_id,)).fetchone()
    return rules.thread(row)


class SQLiteThreads(SQLiteConnection, ThreadStore):
    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        new: bool = False,
    ) -> Thread:
        at = now()
        meta = None if metadata is None else to_json(metadata).decode()
        return await self._write_tx(lambda conn: insert_thread(conn, thread_id, resource_id, title, meta, at, new=new))

    async def get_thread(self, thread_id: str) -> Thread | None:
        def get(conn: sqlite3.Connection) -> Thread | None:
            row = conn.execute(f"SELECT {rules.THREAD_COLUMNS} FROM threads WHERE id = ?", (thread_id,)).fetchone()
            return None if row is None else rules.thread(row)

        return await self._run(get)

    async def list_threads(
        self, resource_id: str | None = None, *, offset: int = 0, limit: int | None = None
    ) -> tuple[list[Thread], int]:
        rules.check_page(offset, limit)
        where, params = ("WHERE resource_id = ?", (resource_id,)) if resource_id is not None else ("", ())

        def page(conn: sqlite3.Connection) -> tuple[list[Thread], int]:
            total: int = conn.execute(f"SELECT count(*) FROM threads {where}", params).fetchone()[0]
            rows = conn.execute(
                f"SELECT {rules.THREAD_COLUMNS} FROM threads {where}"
                " ORDER BY created_at DESC, seq DESC LIMIT ? OFFSET ?",
                (*params, sql_limit(limit), offset),
            ).fetchall()
            return [rules.thread(r) for r in rows], total

        return await self._read_tx(page)

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        resource_id: str | None = None,
    ) -> Thread:
        sets = ["updated_at = ?"]
        params: list[Any] = [now()]
        if title is not None:
            sets.append("title = ?")
            params.append(title)
        if metadata is not None:
            sets.append("metadata = ?")
            params.append(to_json(metadata).decode())
        if resource_id is not None:
            sets.append("resource_id = ?")
            params.append(resource_id)
        sql = f"UPDATE threads SET {', '.join(sets)} WHERE id = ? RETURNING {rules.THREAD_COLUMNS}"

        def update(conn: sqlite3.Connection) -> Thread:
            row = conn.execute(sql, (*params, thread_id)).fetchone()
            if row is None:
                raise ThreadNotFound(thread_id)
            return rules.thread(row)

        return await self._write_tx(update)

    async def merge_thread_metadata(self, thread_id: str, updates: dict[str, Any]) -> dict[str, Any]:
        at = now()

        def merge(conn: sqlite3.Connection) -> dict[str, Any]:
            row = conn.execute("SELECT metadata FROM threads WHERE id = ?", (thread_id,)).fetchone()
            if row is None:
                raise ThreadNotFound(thread_id)
            metadata = json.loads(row[0]) if row[0] else {}
            for key, value in updates.items():
                if value is None:
                    metadata.pop(key, None)
                else:
                    metadata[key] = value
            conn.execute(
                "UPDATE threads SET metadata = ?, updated_at = ? WHERE id = ?",
                (to_json(metadata).decode(), at, thread_id),
            )
            return dict(metadata)

        return await self._write_tx(merge)

    async def delete_thread(self, thread_id: str) -> bool:
        def delete(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM messages WHERE thread_id = ?", (thread_id,))
            return conn.execute("DELETE FROM threads WHERE id = ?", (thread_id,)).rowcount > 0

        return await self._write_tx(delete)

    async def save_messages(self, messages: list[StoredMessage], *, replace: bool = False) -> None:
        if not messages:
            return
        rows, at = message_rows(messages), now()
        await self._write_tx(lambda conn: save(conn, rows, replace, at), inline=len(rows) <= INLINE_ROWS)

    async def list_messages(
        self, thread_id: str, *, offset: int = 0, limit: int | None = None
    ) -> tuple[list[StoredMessage], int]:
        rules.check_page(offset, limit)
        if offset == 0 and limit is None:
            # A short thread (a new run's first step reads its whole thread) is read inline, as a page is: the
            # hand-off to the store's thread and back costs more than the read. A longer one is the thread's.
            def short(conn: sqlite3.Connection) -> tuple[list[StoredMessage], int] | None:
                longer = conn.execute(  # the index alone: no message's content is read to find out
                    "SELECT 1 FROM messages WHERE thread_id = ? ORDER BY created_at, seq LIMIT 1 OFFSET ?",
                    (thread_id, INLINE_ROWS),
                ).fetchone()
                if longer is not None:
                    return None
                rows = conn.execute(
                    f"SELECT {rules.MESSAGE_COLUMNS} FROM messages WHERE thread_id = ? ORDER BY created_at, seq",
                    (thread_id,),
                ).fetchall()
                return [rules.message(r) for r in rows], len(rows)

            if (whole := await self._read_tx(short, inline=True)) is not None:
                return whole

        def page(conn: sqlite3.Connection) -> tuple[list[StoredMessage], int]:
            total: int = conn.execute("SELECT count(*) FROM messages WHERE thread_id = ?", (thread_id,)).fetchone()[0]
            rows = conn.execute(
                f"SELECT {rules.MESSAGE_COLUMNS} FROM messages WHERE thread_id = ?"
                " ORDER BY created_at, seq LIMIT ? OFFSET ?",
                (thread_id, sql_limit(limit), offset),
            ).fetchall()
            return [rules.message(r) for r in rows], total

        # Inline only a page or a tail (a thread cache's new messages): a whole long thread is the thread's to read.
        return await self._read_tx(page, inline=offset > 0 or limit is not None)

    async def run_messages(self, thread_id: str, run_id: str) -> list[StoredMessage]:
        def rows(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            return conn.execute(
                f"SELECT {rules.MESSAGE_COLUMNS} FROM messages WHERE thread_id = ? AND run_id = ?"
                " ORDER BY created_at, seq",
                (thread_id, run_id),
            ).fetchall()

        return [rules.message(r) for r in await self._run(rows)]

    async def get_messages(self, ids: list[str]) -> list[StoredMessage]:
        if not ids:
            return []
        unique = list(dict.fromkeys(ids))

        def get(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            # json_each takes the whole id list as one parameter, so no SQLITE_MAX_VARIABLE_NUMBER limit.
            return conn.execute(
                f"SELECT {rules.MESSAGE_COLUMNS} FROM messages WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(unique),),
            ).fetchall()

        by_id = {m.id: m for m in map(rules.message, await self._run(get, inline=True))}
        return [by_id[i] for i in ids if i in by_id]

    async def delete_messages(self, ids: list[str]) -> int:
        if not ids:
            return 0
        unique = json.dumps(list(dict.fromkeys(ids)))

        def delete(conn: sqlite3.Connection) -> int:
            return conn.execute("DELETE FROM messages WHERE id IN (SELECT value FROM json_each(?))", (unique,)).rowcount

        return await self._write_tx(delete)
