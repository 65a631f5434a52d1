"""SQLite backend: one file shared by the worker that writes and the CLI that reads.

Every call runs on one dedicated thread per instance, so the asyncio loop never blocks on disk I/O and the
connection is only ever touched by the thread that created it. Writes use `BEGIN IMMEDIATE`: it takes the
file's write lock up front, so two processes never deadlock upgrading a read lock, and the busy timeout
(rather than an immediate `SQLITE_BUSY`) governs contention.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic_core import to_json

from keel.protocol import EventRecord
from keel.storage import codec
from keel.storage.base import RunEvent, Storage, StorageError, StoredMessage, Thread, ThreadNotFound

T = TypeVar("T")


_BUSY_TIMEOUT_MS = 5000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    resource_id TEXT NOT NULL,
    title       TEXT,
    metadata    TEXT,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS threads_resource_created ON threads (resource_id, created_at);
CREATE INDEX IF NOT EXISTS threads_created ON threads (created_at);

CREATE TABLE IF NOT EXISTS messages (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    thread_id   TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    role        TEXT NOT NULL,
    content     TEXT NOT NULL,
    run_id      TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_thread_order ON messages (thread_id, created_at, seq);

CREATE TABLE IF NOT EXISTS run_events (
    run_id     TEXT NOT NULL,
    "offset"   INTEGER NOT NULL,
    type       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    source     TEXT,
    attempt    INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, "offset")
) WITHOUT ROWID;
"""


def _ts(value: datetime) -> str:
    """Fixed-width UTC ISO text, so that string order is time order. Naive datetimes are taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _sql_limit(limit: int | None) -> int:
    # SQLite spells "no limit" as a negative LIMIT.
    return -1 if limit is None else limit


class SQLiteStorage(Storage):
    """Storage in one SQLite file (WAL mode), safe to share between processes.

    Args:
        path: The database file. Its parent directory is created on first use.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="keel-sqlite")
        # Only ever read or written on the executor's thread.
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    # --- plumbing -----------------------------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StorageError("SQLiteStorage is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(self._call, fn))

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._conn is None:
            self._conn = self._connect()
        return fn(self._conn)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN ourselves, so the module never opens an implicit
        # (deferred) transaction behind our back.
        conn = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            # NORMAL is durable across application crashes in WAL mode; only an OS crash can lose the
            # last commits, and activities re-run then anyway.
            conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _write(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            # A failed COMMIT (e.g. disk full) leaves the transaction open; close it so the next call
            # on this connection can BEGIN again.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    @staticmethod
    def _read(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        # A deferred transaction pins one WAL snapshot, so a count and its page agree.
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    async def _write_tx(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._run(functools.partial(self._write, fn=fn))

    async def _read_tx(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._run(functools.partial(self._read, fn=fn))

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def init(self) -> None:
        def create(conn: sqlite3.Connection) -> None:
            # executescript would COMMIT first and run outside our transaction; split it instead so the
            # whole schema is created under one write lock.
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)

        await self._write_tx(create)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def close_conn() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, close_conn)
        finally:
            self._executor.shutdown(wait=True)

    # --- threads ------------------------------------------------------------------------------------------

    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Thread:
        now = _ts(datetime.now(UTC))
        meta = None if metadata is None else to_json(metadata).decode()

        def create(conn: sqlite3.Connection) -> Thread:
            conn.execute(
                "INSERT OR IGNORE INTO threads (id, resource_id, title, metadata, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (thread_id, resource_id, title, meta, now, now),
            )
            row = conn.execute(f"SELECT {codec.THREAD_COLUMNS} FROM threads WHERE id = ?", (thread_id,)).fetchone()
            return codec.thread(row)

        return await self._write_tx(create)

    async def get_thread(self, thread_id: str) -> Thread | None:
        def get(conn: sqlite3.Connection) -> Thread | None:
            row = conn.execute(f"SELECT {codec.THREAD_COLUMNS} FROM threads WHERE id = ?", (thread_id,)).fetchone()
            return None if row is None else codec.thread(row)

        return await self._run(get)

    async def list_threads(
        self, resource_id: str | None = None, *, offset: int = 0, limit: int | None = None
    ) -> tuple[list[Thread], int]:
        codec.check_page(offset, limit)
        where, params = ("WHERE resource_id = ?", (resource_id,)) if resource_id is not None else ("", ())

        def page(conn: sqlite3.Connection) -> tuple[list[Thread], int]:
            total: int = conn.execute(f"SELECT count(*) FROM threads {where}", params).fetchone()[0]
            rows = conn.execute(
                f"SELECT {codec.THREAD_COLUMNS} FROM threads {where}"
                " ORDER BY created_at DESC, seq DESC LIMIT ? OFFSET ?",
                (*params, _sql_limit(limit), offset),
            ).fetchall()
            return [codec.thread(r) for r in rows], total

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
        params: list[Any] = [_ts(datetime.now(UTC))]
        if title is not None:
            sets.append("title = ?")
            params.append(title)
        if metadata is not None:
            sets.append("metadata = ?")
            params.append(to_json(metadata).decode())
        if resource_id is not None:
            sets.append("resource_id = ?")
            params.append(resource_id)
        sql = f"UPDATE threads SET {', '.join(sets)} WHERE id = ? RETURNING {codec.THREAD_COLUMNS}"

        def update(conn: sqlite3.Connection) -> Thread:
            row = conn.execute(sql, (*params, thread_id)).fetchone()
            if row is None:
                raise ThreadNotFound(thread_id)
            return codec.thread(row)

        return await self._write_tx(update)

    async def delete_thread(self, thread_id: str) -> bool:
        def delete(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM messages WHERE thread_id = ?", (thread_id,))
            return conn.execute("DELETE FROM threads WHERE id = ?", (thread_id,)).rowcount > 0

        return await self._write_tx(delete)

    # --- messages -----------------------------------------------------------------------------------------

    async def save_messages(self, messages: list[StoredMessage], *, replace: bool = False) -> None:
        if messages:
            await self.write("", messages=messages, replace=replace)

    @staticmethod
    def _message_rows(messages: list[StoredMessage]) -> list[tuple[Any, ...]]:
        return [
            (
                m.id,
                m.thread_id,
                m.resource_id,
                m.role,
                codec.CONTENT.dump_json(m.content).decode(),
                m.run_id,
                _ts(m.created_at),
            )
            for m in messages
        ]

    @staticmethod
    def _save(conn: sqlite3.Connection, rows: list[tuple[Any, ...]], replace: bool, now: str) -> None:
        # Touching updated_at doubles as the existence check, inside the same write lock.
        for thread_id in dict.fromkeys(row[1] for row in rows):
            cur = conn.execute("UPDATE threads SET updated_at = ? WHERE id = ?", (now, thread_id))
            if cur.rowcount == 0:
                raise ThreadNotFound(thread_id)
        conflict = (
            "DO UPDATE SET role = excluded.role, content = excluded.content, run_id = excluded.run_id"
            if replace
            else "DO NOTHING"
        )
        conn.executemany(
            f"INSERT INTO messages ({codec.MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) {conflict}",
            rows,
        )

    async def list_messages(
        self, thread_id: str, *, offset: int = 0, limit: int | None = None
    ) -> tuple[list[StoredMessage], int]:
        codec.check_page(offset, limit)

        def page(conn: sqlite3.Connection) -> tuple[list[StoredMessage], int]:
            total: int = conn.execute("SELECT count(*) FROM messages WHERE thread_id = ?", (thread_id,)).fetchone()[0]
            rows = conn.execute(
                f"SELECT {codec.MESSAGE_COLUMNS} FROM messages WHERE thread_id = ?"
                " ORDER BY created_at, seq LIMIT ? OFFSET ?",
                (thread_id, _sql_limit(limit), offset),
            ).fetchall()
            return [codec.message(r) for r in rows], total

        return await self._read_tx(page)

    async def get_messages(self, ids: list[str]) -> list[StoredMessage]:
        if not ids:
            return []
        unique = list(dict.fromkeys(ids))

        def get(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            # json_each takes the whole id list as one parameter, so no SQLITE_MAX_VARIABLE_NUMBER limit.
            return conn.execute(
                f"SELECT {codec.MESSAGE_COLUMNS} FROM messages WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(unique),),
            ).fetchall()

        by_id = {m.id: m for m in map(codec.message, await self._run(get))}
        return [by_id[i] for i in ids if i in by_id]

    async def delete_messages(self, ids: list[str]) -> int:
        if not ids:
            return 0
        unique = json.dumps(list(dict.fromkeys(ids)))

        def delete(conn: sqlite3.Connection) -> int:
            return conn.execute("DELETE FROM messages WHERE id IN (SELECT value FROM json_each(?))", (unique,)).rowcount

        return await self._write_tx(delete)

    # --- run events ---------------------------------------------------------------------------------------

    async def append_events(
        self, run_id: str, events: list[EventRecord], *, source: str | None = None, attempt: int = 1
    ) -> list[int]:
        if not events:
            return []
        now = _ts(datetime.now(UTC))
        encoded = [(e.type, to_json(e.payload).decode()) for e in events]
        return await self._write_tx(lambda conn: self._append(conn, run_id, encoded, source, attempt, now))

    @staticmethod
    def _append(
        conn: sqlite3.Connection,
        run_id: str,
        encoded: list[tuple[str, str]],
        source: str | None,
        attempt: int,
        now: str,
    ) -> list[int]:
        # BEGIN IMMEDIATE holds the file's write lock, so no other process can take the same offsets
        # between this read and the insert.
        start: int = conn.execute(
            'SELECT coalesce(max("offset") + 1, 0) FROM run_events WHERE run_id = ?', (run_id,)
        ).fetchone()[0]
        offsets = list(range(start, start + len(encoded)))
        conn.executemany(
            'INSERT INTO run_events (run_id, "offset", type, payload, source, attempt, created_at)'
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (run_id, off, type_, payload, source, attempt, now)
                for off, (type_, payload) in zip(offsets, encoded, strict=True)
            ],
        )
        return offsets

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
        now = _ts(datetime.now(UTC))
        # Serialise outside the DB thread: it is CPU work that need not hold the write lock.
        rows = self._message_rows(messages or [])
        encoded = [(e.type, to_json(e.payload).decode()) for e in events or []]

        def write(conn: sqlite3.Connection) -> int:
            used = attempt
            if rows:
                self._save(conn, rows, replace, now)
            if encoded:
                if renumber:
                    written: int = conn.execute(
                        "SELECT coalesce(max(attempt), 0) FROM run_events WHERE run_id = ? AND source IS ?",
                        (run_id, source),
                    ).fetchone()[0]
                    used = attempt if written < attempt else written + 1
                self._append(conn, run_id, encoded, source, used, now)
            return used

        if not rows and not encoded:
            return attempt
        return await self._write_tx(write)

    async def read_events(self, run_id: str, *, offset: int = 0, limit: int | None = None) -> list[RunEvent]:
        codec.check_page(offset, limit)

        def read(conn: sqlite3.Connection) -> Sequence[sqlite3.Row]:
            return conn.execute(
                'SELECT run_id, "offset", type, payload, source, attempt, created_at FROM run_events'
                ' WHERE run_id = ? AND "offset" >= ? ORDER BY "offset" LIMIT ?',
                (run_id, offset, _sql_limit(limit)),
            ).fetchall()

        return [codec.event(r) for r in await self._run(read)]
