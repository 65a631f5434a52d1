"""SQLite plumbing: two connections per store, its own thread, transactions, and migrations.

A call runs on the store's own thread, so the asyncio loop never waits on another process's lock or a slow disk.
The calls of a run's every step (its claim, its step record, its messages and answer: `inline=True`) are small
indexed transactions that take ~0.1 ms, less than the hand-off to the thread and back; they run on the calling
loop, on a second connection whose busy timeout is 0, when that is free to do: nothing else uses that connection,
and the file's lock is taken at once. Anything else, a lock held by another connection included, goes to the
thread, where the busy timeout governs contention. The WAL is checkpointed on the thread, passively
(auto-checkpoint is off on both connections), so no loop waits for a checkpoint's copy or fsync.

Writes use `BEGIN IMMEDIATE`: it takes the file's write lock up front, so two processes never deadlock upgrading
a read lock, and an inline write that cannot have the lock at once has done nothing when it hands over.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from keel.storage import migrations
from keel.storage.errors import DatabaseNotFound, SchemaError, StorageError, StorageUnavailable

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
INLINE_ROWS = 32
"""Rows a write may hold and still run inline: a step's messages do; a thread's copy goes to the thread."""
CHECKPOINT_WRITES = 64
"""Write transactions between two passive checkpoints on the store's thread (SQLite's own auto-checkpoint, off
on these connections, runs in the committing call, fsync included). A step's transaction writes ~12 pages."""
WAL_KEPT_BYTES = 2**20
"""`journal_size_limit`: once checkpointed, the WAL starts over and is cut to this size."""
WAL_LIMIT_BYTES = 16 * 2**20
"""A WAL this large after a passive checkpoint (others always held the file when it was to be truncated) is
truncated after waiting up to `CHECKPOINT_BUSY_MS` for them."""
CHECKPOINT_BUSY_MS = 100


TRANSIENT_CODES = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_READONLY,  # a WAL being recovered, or a file whose permissions change back
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PROTOCOL,
    }
)
"""Primary result codes of an `OperationalError` that the same call may not meet later: `StorageUnavailable`
(retried by activities, a 503 over HTTP), as PostgreSQL's connection failures are. A missing table is a
`SchemaError`; any other code (a missing column, a syntax error) is raised as it is."""


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
        # Both opened on the executor's thread. `_conn` is only ever used there; `_inline_conn` (busy timeout 0)
        # by whichever thread holds `_lock`, which the loop never waits for (only the executor's thread does:
        # a truncation past the WAL's limit holds it to keep inline writes out).
        self._conn: sqlite3.Connection | None = None
        self._inline_conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._writes = 0
        self._page_bytes = 4096
        self._checkpointing = False
        self._closed = False

    async def _run(self, fn: Callable[[sqlite3.Connection], T], *, create: bool = False, inline: bool = False) -> T:
        if self._closed:
            raise StorageError("SQLiteStorage is closed")
        try:
            if inline and self._inline_conn is not None and self._lock.acquire(blocking=False):
                try:
                    if (conn := self._inline_conn) is not None:  # (closed meanwhile by another thread: None)
                        return self._inline(conn, fn)
                except _Busy:
                    pass
                finally:
                    self._lock.release()
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, functools.partial(self._call, fn, create))
        except sqlite3.OperationalError as err:
            if err.sqlite_errorcode & 0xFF in TRANSIENT_CODES:
                # Locked past the busy timeout, disk I/O, a file that went away: the same call may work later.
                raise StorageUnavailable(f"SQLite database {self.path}: {err}") from err
            if str(err).startswith("no such table"):
                raise SchemaError(
                    f"SQLite database {self.path} has no Keel schema ({err}): start a worker, or run `keel migrate`"
                ) from err
            raise  # a statement's own fault (a missing column, a syntax error): a defect, not an outage

    def _call(self, fn: Callable[[sqlite3.Connection], T], create: bool) -> T:
        if self._closed:  # queued before `close()` ran: no connection is opened again
            raise StorageError("SQLiteStorage is closed")
        if self._conn is None:
            self._conn = self._connect(create, BUSY_TIMEOUT_MS)
        if self._inline_conn is None:
            try:
                inline_conn = self._connect(False, 0)
            except sqlite3.Error:  # busy at once (another process setting the file up): the next call tries again
                pass
            else:
                with self._lock:
                    self._inline_conn = inline_conn
        return fn(self._conn)

    @staticmethod
    def _inline(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` on the caller's thread, unless the file is locked (`_Busy`: `fn` has done nothing then; inline
        calls are reads, or writes that begin with `BEGIN IMMEDIATE`)."""
        try:
            return fn(conn)
        except sqlite3.OperationalError as err:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if err.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise _Busy from err
            raise

    def _committed(self) -> None:
        """After every `CHECKPOINT_WRITES`th write, a checkpoint on the store's thread (one at a time)."""
        self._writes += 1
        if self._writes % CHECKPOINT_WRITES == 0 and not self._checkpointing and not self._closed:
            self._checkpointing = True
            self._executor.submit(self._call, self._checkpoint, False)

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL into the database without holding anyone up (writes, inline ones included, go on), then
        copy what came meanwhile and truncate the WAL, if no one holds the file at that instant: that step holds
        writers for the copy of a few pages and an fsync. A WAL past `WAL_LIMIT_BYTES` (someone always held it)
        waits up to `CHECKPOINT_BUSY_MS` for its turn instead."""
        try:
            _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            wait_ms = CHECKPOINT_BUSY_MS if frames * self._page_bytes > WAL_LIMIT_BYTES else 0
            conn.execute(f"PRAGMA busy_timeout = {wait_ms}")
            try:
                # Past the limit, this process's inline writes go to this thread meanwhile (queued behind the
                # truncation): back to back on the loop, they held the file at nearly every instant it was asked
                # for, and a loaded machine's WAL grew past 40 MiB. Below it, they go on (a truncation every
                # `CHECKPOINT_WRITES` that held them would cost each write ~0.08 ms).
                with self._lock if wait_ms else contextlib.nullcontext():
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except sqlite3.Error:  # busy or I/O: the next one catches up
            pass
        finally:
            self._checkpointing = False

    def _connect(self, create: bool, busy_timeout_ms: int) -> sqlite3.Connection:
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
        conn = sqlite3.connect(self.path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            # NORMAL is durable across application crashes in WAL mode; only an OS crash can lose the
            # last commits, and activities re-run then anyway.
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # checkpoints run on the thread: `_checkpoint`
            conn.execute(f"PRAGMA journal_size_limit = {WAL_KEPT_BYTES}")
            self._page_bytes = int(conn.execute("PRAGMA page_size").fetchone()[0])
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
                for conn in (self._conn, self._inline_conn):
                    if conn is not None:
                        conn.close()
                self._conn = self._inline_conn = None

        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, close_conn)
        finally:
            self._executor.shutdown(wait=True)
