"""SQLite plumbing: one connection on one dedicated thread per store, transactions, and migrations.

Every call runs on the store's own thread, so the asyncio loop never blocks on disk I/O and the connection is
only ever touched by the thread that created it. Writes use `BEGIN IMMEDIATE`: it takes the file's write lock
up front, so two processes never deadlock upgrading a read lock, and the busy timeout (rather than an immediate
`SQLITE_BUSY`) governs contention.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from keel.storage import migrations
from keel.storage.errors import DatabaseNotFound, StorageError, StorageUnavailable

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000


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
        # Only ever read or written on the executor's thread.
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    async def _run(self, fn: Callable[[sqlite3.Connection], T], *, create: bool = False) -> T:
        if self._closed:
            raise StorageError("SQLiteStorage is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(self._call, fn, create))
        except sqlite3.OperationalError as err:
            # Locked past the busy timeout, disk I/O, a file that went away: the same call may work later.
            raise StorageUnavailable(f"SQLite database {self.path}: {err}") from err

    def _call(self, fn: Callable[[sqlite3.Connection], T], create: bool) -> T:
        if self._conn is None:
            self._conn = self._connect(create)
        return fn(self._conn)

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
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
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

    async def _write_tx(self, fn: Callable[[sqlite3.Connection], T], *, create: bool = False) -> T:
        return await self._run(functools.partial(self._write, fn=fn), create=create)

    async def _read_tx(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._run(functools.partial(self._read, fn=fn))

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
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, close_conn)
        finally:
            self._executor.shutdown(wait=True)
