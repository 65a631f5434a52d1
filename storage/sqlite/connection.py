"""SQLite plumbing: one connection per store, its own thread, transactions, and migrations.

A call runs on the store's own thread, so the asyncio loop never waits on another process's lock or a slow disk.
The calls of a run's every step (its claim, its step record, its messages and answer: `inline=True`) are small
indexed transactions that take ~0.1 ms, less than the hand-off to the thread and back; they run on the calling
loop when that is free to do: the connection is not in use, and the file's lock is taken at once (a busy
timeout of 0 for the `BEGIN`). Anything else, a lock held by another process included, goes to the thread, where
the busy timeout governs contention. The WAL is checkpointed on the thread too (auto-checkpoint is off on this
connection), so a loop never waits for the checkpoint's fsync.

Writes use `BEGIN IMMEDIATE`: it takes the file's write lock up front, so two processes never deadlock upgrading
a read lock, and an inline write that cannot have the lock at once has done nothing when it hands over.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from keel.storage import migrations
from keel.storage.errors import DatabaseNotFound, StorageError, StorageUnavailable

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
CHECKPOINT_BYTES = 4 * 2**20
"""The WAL's size at which the store's thread checkpoints it, as SQLite's own auto-checkpoint (off on this
connection) would at 1,000 pages of 4 KiB."""
CHECKPOINT_BUSY_MS = 100
"""How long a checkpoint waits for another process's readers or writer before it leaves the rest for later."""


class _Busy(Exception):
    """An inline call could not have the file at once: nothing was done, and the thread does it."""


def ts(value: datetime) -> str:
    """Fixed-width UTC ISO text, so that string order is time order. Naive datetimes are taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def now() -> str:
    return ts(datetime.now(UTC))


def sql_limit(limit: int | None) -> int:
    # SQLite spells "no limit" as a negative LIMIT.
    return -1 if limit is None else limit


class SQLiteConnection:
    """The connection of one SQLite store (WAL mode), safe to share the file between processes.

    Args:
        path: The database file. Its parent directory is created on first use.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="keel-sqlite")
        # Created on the executor's thread; used by whoever holds `_lock` (that thread, or a loop inline).
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._checkpoint_at = CHECKPOINT_BYTES  # the WAL's size that calls for a checkpoint
        self._checkpointing = False
        self._closed = False

    async def _run(self, fn: Callable[[sqlite3.Connection], T], *, create: bool = False, inline: bool = False) -> T:
        if self._closed:
            raise StorageError("SQLiteStorage is closed")
        try:
            if inline and self._conn is not None and self._lock.acquire(blocking=False):
                try:
                    return self._inline(self._conn, fn)
                except _Busy:
                    pass
                finally:
                    self._lock.release()
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, functools.partial(self._call, fn, create))
        except sqlite3.OperationalError as err:
            # Locked past the busy timeout, disk I/O, a file that went away: the same call may work later.
            raise StorageUnavailable(f"SQLite database {self.path}: {err}") from err

    def _call(self, fn: Callable[[sqlite3.Connection], T], create: bool) -> T:
        with self._lock:
            if self._conn is None:
                self._conn = self._connect(create)
            return fn(self._conn)

    def _inline(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` on the caller's thread, unless the file is locked (`_Busy`: `fn` has done nothing then; inline
        calls are reads, or writes that begin with `BEGIN IMMEDIATE`)."""
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            result = fn(conn)
        except sqlite3.OperationalError as err:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if err.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise _Busy from err
            raise
        finally:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return result

    def _wal_bytes(self) -> int:
        try:
            return os.stat(f"{self.path}-wal").st_size
        except OSError:
            return 0

    def _committed(self) -> None:
        """After each write: past `CHECKPOINT_BYTES`, a checkpoint on the store's thread (one at a time)."""
        if not self._checkpointing and not self._closed and self._wal_bytes() >= self._checkpoint_at:
            self._checkpointing = True
            self._executor.submit(self._call, self._checkpoint, False)

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL into the database and truncate it, so its size measures what is left to copy. It holds
        the connection (inline calls go to the thread meanwhile), so nothing is appended while it copies. A
        reader or writer of another process can hold it up: then what could be copied is, and the next try
        waits until the WAL has grown by `CHECKPOINT_BYTES` again."""
        try:
            conn.execute(f"PRAGMA busy_timeout = {CHECKPOINT_BUSY_MS}")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error:
            pass
        finally:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._checkpoint_at = self._wal_bytes() + CHECKPOINT_BYTES
            self._checkpointing = False

    def _connect(self, create: bool) -> sqlite3.Connection:
        """Only `init()` creates the file (and its folder): a reader of a mistyped path is told, not given an
        empty database."""
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.exists():
            raise DatabaseNotFound(
                f"No Keel database at {self.path}: check KEEL_STORAGE_URL, or create it by starting a worker "
                "or with `keel migrate`"
            )
        # isolation_level=None: we issue BEGIN ourselves, so the module never opens an implicit
        # (deferred) transaction behind our back.
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            # NORMAL is durable across application crashes in WAL mode; only an OS crash can lose the
            # last commits, and activities re-run then anyway.
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # checkpoints run on the thread: `_checkpoint`
        except BaseException:
            conn.close()
            raise
        return conn

    def _write(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
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
        self._committed()
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

    async def _write_tx(
        self, fn: Callable[[sqlite3.Connection], T], *, create: bool = False, inline: bool = False
    ) -> T:
        return await self._run(functools.partial(self._write, fn=fn), create=create, inline=inline)

    async def _read_tx(self, fn: Callable[[sqlite3.Connection], T], *, inline: bool = False) -> T:
        return await self._run(functools.partial(self._read, fn=fn), inline=inline)

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def init(self) -> None:
        def migrate(conn: sqlite3.Connection) -> None:
            # One write transaction for every pending migration: the file's write lock keeps a concurrent
            # initialiser waiting, and it then finds nothing left to apply. (executescript would COMMIT first.)
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {migrations.VERSION_TABLE}"
                " (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            for migration in migrations.pending("sqlite", self._version(conn)):
                for statement in migration.statements():
                    conn.execute(statement)
                conn.execute(
                    f"INSERT INTO {migrations.VERSION_TABLE} (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, now()),
                )

        await self._write_tx(migrate, create=True)

    async def schema_version(self) -> int:
        return await self._read_tx(self._version)

    @staticmethod
    def _version(conn: sqlite3.Connection) -> int:
        table = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (migrations.VERSION_TABLE,)
        ).fetchone()
        if table is None:
            return 0
        version: int = conn.execute(f"SELECT coalesce(max(version), 0) FROM {migrations.VERSION_TABLE}").fetchone()[0]
        return version

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def close_conn() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, close_conn)
        finally:
            self._executor.shutdown(wait=True)
