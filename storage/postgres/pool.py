"""PostgreSQL plumbing: a small asyncpg pool, created on first use, and migrations under an advisory lock."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar
from urllib.parse import urlsplit

from keel.storage import migrations
from keel.storage.errors import SchemaError, StorageConfigError, StorageError, StorageUnavailable

if TYPE_CHECKING:
    import asyncpg

# Advisory lock keys. The two-argument form lives in a different key space from the one-argument form, so
# per-run locks can never collide with the schema lock.
SCHEMA_LOCK = 0x6B65656C_00000001
RUN_LOCK_CLASS = 0x6B65656C  # "keel"


P = ParamSpec("P")
T = TypeVar("T")


def guarded(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """Map asyncpg's and the socket's failures onto the storage error tree: connection problems become
    `StorageUnavailable` (retried by activities, waited out by workers), a missing table `SchemaError`."""

    @functools.wraps(method)
    async def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(self, *args, **kwargs)
        except StorageError:
            raise
        except Exception as err:
            translated = _translate(err, self.dsn)
            if translated is None:
                raise
            raise translated from err

    return call


NUL_IN_JSON = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")
"""JSON's escape of a NUL character, not one that escapes a backslash (`\\\\u0000` is a backslash, then text)."""


def _text(value: str) -> str:
    return value.replace("\x00", "\ufffd")


def _json(value: str) -> str:
    return NUL_IN_JSON.sub("\\1\\\\ufffd", value) if "\\u0000" in value else value


def _same(value: str) -> str:
    return value


async def without_nul(conn: asyncpg.Connection) -> None:
    """PostgreSQL's text and jsonb hold no NUL character, and a write of one fails ("invalid byte sequence for
    encoding UTF8: 0x00"): a command's output may hold NUL bytes, and with it a run's tool result, messages and
    events. Every text and JSON value written through this connection has U+FFFD in its place (SQLite keeps
    the character). Reads are as asyncpg's own."""
    for type_name, encode in (("text", _text), ("json", _json), ("jsonb", _json)):
        await conn.set_type_codec(type_name, schema="pg_catalog", encoder=encode, decoder=_same, format="text")


def _translate(err: Exception, dsn: str) -> StorageError | None:
    import asyncpg

    where = f"PostgreSQL at {_without_password(dsn)}"
    transient = (
        OSError,  # refused, reset, unreachable
        TimeoutError,
        asyncpg.PostgresConnectionError,  # SQLSTATE 08
        asyncpg.InterfaceError,  # "connection is closed", closed in the middle of an operation
        asyncpg.exceptions.OperatorInterventionError,  # 57: admin shutdown, cannot connect now
        asyncpg.exceptions.TransactionRollbackError,  # 40: serialization failure, deadlock
        asyncpg.exceptions.TooManyConnectionsError,
    )
    if isinstance(err, transient):
        return StorageUnavailable(f"{where}: {type(err).__name__}: {err}")
    if isinstance(err, asyncpg.exceptions.UndefinedTableError):
        return SchemaError(f"{where} has no Keel schema ({err}): start a worker, or run `keel migrate`")
    return None


def _without_password(dsn: str) -> str:
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


def utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC (asyncpg would otherwise read them as local time)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


class PostgresPool:
    """The connection pool of one PostgreSQL store.

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
                self._pool = await asyncpg.create_pool(
                    self.dsn, min_size=self._min_size, max_size=self._max_size, init=without_nul
                )
            return self._pool

    @guarded
    async def init(self) -> None:
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            # Concurrent initialisers queue on the lock; the next one finds every migration applied.
            await conn.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {migrations.VERSION_TABLE}"
                " (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL)"
            )
            for migration in migrations.pending("postgres", await self._version(conn)):
                await conn.execute(migration.sql)
                await conn.execute(
                    f"INSERT INTO {migrations.VERSION_TABLE} (version, name, applied_at) VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    datetime.now(UTC),
                )

    @guarded
    async def schema_version(self) -> int:
        pool = await self._get_pool()
        async with pool.acquire() as conn:
            return await self._version(conn)

    @staticmethod
    async def _version(conn: Any) -> int:
        exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", migrations.VERSION_TABLE)
        if not exists:
            return 0
        return int(await conn.fetchval(f"SELECT coalesce(max(version), 0) FROM {migrations.VERSION_TABLE}"))

    async def close(self) -> None:
        self._closed = True
        async with self._pool_lock:
            if self._pool is not None:
                await self._pool.close()
                self._pool = None
