"""PostgreSQL: run events."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Any

from pydantic_core import to_json

from keel.protocol import EventRecord
from keel.storage import rules
from keel.storage.events import EventStore, RunEvent
from keel.storage.postgres.pool import RUN_LOCK_CLASS, PostgresPool, guarded

CHANNEL = "keel_run_events"
"""Each commit that appends to a run's log notifies this channel with the run id (`LISTEN/NOTIFY`)."""
LISTENER_CONNECT_SECONDS = 5.0
LISTENER_RETRY_SECONDS = 5.0
LISTENER_CHECK_SECONDS = 10.0
"""While readers wait past their backstop, the listener is checked at most this often: it notifies itself a
ping, and is replaced if the ping does not come back within `PING_SECONDS` (a connection dead without a FIN
would otherwise stay "open", and readers would poll at the backstop's pace until TCP gave up, hours later)."""
PING_SECONDS = 2.0
_PING = "keel-ping:"
_MAX_PAYLOAD = 7999  # NOTIFY's payload limit is 8000 bytes; a longer run id notifies '' (wake every reader)


def notice(run_id: str) -> str:
    return run_id if len(run_id.encode()) <= _MAX_PAYLOAD else ""


async def lock_run(conn: Any, run_id: str) -> None:
    # Appenders to one run queue here until the holder commits. The next statement takes a fresh
    # snapshot (READ COMMITTED), so it sees the holder's rows and max(offset) + 1 is free.
    await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", RUN_LOCK_CLASS, run_id)


async def append(conn: Any, run_id: str, events: list[EventRecord], source: str | None, attempt: int) -> list[int]:
    """Append inside the caller's transaction."""
    await lock_run(conn, run_id)
    rows = await conn.fetch(
        f"""
        WITH head AS (
            SELECT coalesce(max("offset") + 1, 0) AS start FROM run_events WHERE run_id = $1
        )
        INSERT INTO run_events ({rules.EVENT_COLUMNS})
        SELECT $1, head.start + u.ord - 1, u.type, u.payload, $4, $5, $6
        FROM head, unnest($2::text[], $3::jsonb[]) WITH ORDINALITY AS u(type, payload, ord)
        RETURNING "offset", pg_notify($7, $8)
        """,
        run_id,
        [e.type for e in events],
        [to_json(e.payload).decode() for e in events],
        source,
        attempt,
        datetime.now(UTC),
        CHANNEL,
        notice(run_id),
    )
    return sorted(int(r["offset"]) for r in rows)


async def written_attempt(conn: Any, run_id: str, source: str | None) -> int:
    """The highest attempt `source` wrote to the run's log (0 if none). Hold `lock_run` first."""
    written = await conn.fetchval(
        "SELECT coalesce(max(attempt), 0) FROM run_events WHERE run_id = $1 AND source IS NOT DISTINCT FROM $2",
        run_id,
        source,
    )
    return int(written)


async def claim(conn: Any, run_id: str, execution_id: str) -> str:
    """Claim the run id (in the caller's transaction, if any); returns its owner."""
    owner = await conn.fetchval(
        """
        WITH ins AS (
            INSERT INTO runs (run_id, execution_id, created_at) VALUES ($1, $2, $3)
            ON CONFLICT (run_id) DO NOTHING RETURNING execution_id
        )
        SELECT execution_id FROM ins UNION ALL SELECT execution_id FROM runs WHERE run_id = $1 LIMIT 1
        """,
        run_id,
        execution_id,
        datetime.now(UTC),
    )
    return str(owner)


class PostgresEvents(PostgresPool, EventStore):
    """Readers are woken by `LISTEN` on one connection of the store's own (outside the pool), which every
    appending transaction notifies on commit; if that connection is lost, readers poll until a watch that timed
    out opens it again."""

    wakes_readers = True
    _listener: Any = None
    _listener_lock: asyncio.Lock | None = None
    _listener_retry_at = 0.0
    _listener_checked_at = 0.0
    _listener_check: asyncio.Task[None] | None = None
    _pings: dict[str, asyncio.Future[None]] | None = None

    @guarded
    async def append_events(
        self, run_id: str, events: list[EventRecord], *, source: str | None = None, attempt: int = 1
    ) -> list[int]:
        if not events:
            return []
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            offsets = await append(conn, run_id, events, source, attempt)
        self._appended(run_id)
        return offsets

    @guarded
    async def claim_run(self, run_id: str, execution_id: str) -> str:
        pool = await self._get_pool()
        async with pool.acquire() as conn:
            return await claim(conn, run_id, execution_id)

    @guarded
    async def log_end(self, run_id: str) -> int:
        pool = await self._get_pool()
        found = await pool.fetchval('SELECT coalesce(max("offset") + 1, 0) FROM run_events WHERE run_id = $1', run_id)
        return int(found)

    @guarded
    async def read_events(self, run_id: str, *, offset: int = 0, limit: int | None = None) -> list[RunEvent]:
        rules.check_page(offset, limit)
        pool = await self._get_pool()
        rows = await pool.fetch(
            f"SELECT {rules.EVENT_COLUMNS} FROM run_events"
            ' WHERE run_id = $1 AND "offset" >= $2 ORDER BY "offset" LIMIT $3',
            run_id,
            offset,
            limit,
        )
        return [rules.event(r) for r in rows]

    async def _watching(self) -> None:
        """Opens the listener if it is not open, unless another reader is opening it or an attempt failed in
        the last `LISTENER_RETRY_SECONDS` (readers then poll: they never wait on a server that does not answer)."""
        if self._listener is not None or self._closed or time.monotonic() < self._listener_retry_at:
            return
        if self._listener_lock is None:
            self._listener_lock = asyncio.Lock()
        if self._listener_lock.locked():
            return
        async with self._listener_lock:
            import asyncpg

            conn = None
            try:
                conn = await asyncpg.connect(self.dsn, timeout=LISTENER_CONNECT_SECONDS)
                await conn.add_listener(CHANNEL, self._notified)
            except BaseException as err:
                if conn is not None:
                    conn.terminate()
                if not isinstance(err, Exception):
                    raise
                self._listener_retry_at = time.monotonic() + LISTENER_RETRY_SECONDS
                return
            if self._closed:  # closed while connecting
                conn.terminate()
                return
            conn.add_termination_listener(self._listener_lost)
            self._listener = conn
        if self._event_watches is not None:
            self._event_watches.wake_all()  # what was appended before the listener was up

    async def _watch_timed_out(self) -> None:
        await self._watching()
        now = time.monotonic()
        checking = self._listener_check is not None and not self._listener_check.done()
        if self._listener is not None and not checking and now - self._listener_checked_at >= LISTENER_CHECK_SECONDS:
            self._listener_checked_at = now
            self._listener_check = asyncio.ensure_future(self._check_listener(self._listener))

    async def _check_listener(self, conn: Any) -> None:
        """Ping through `conn`; if the ping is not heard back, the listener is replaced."""
        token = f"{_PING}{id(self)}:{time.monotonic_ns()}"
        heard = asyncio.get_running_loop().create_future()
        self._pings = self._pings or {}
        self._pings[token] = heard
        try:
            await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, token, timeout=PING_SECONDS)
            await asyncio.wait_for(heard, PING_SECONDS)
        except Exception:  # no answer, or an error: either way this connection no longer wakes anyone
            if self._listener is conn:
                conn.terminate()  # its termination listener clears it and wakes the readers to reopen
                self._listener_lost(conn)
        finally:
            self._pings.pop(token, None)

    def _notified(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        if payload.startswith(_PING):
            heard = (self._pings or {}).get(payload)
            if heard is not None and not heard.done():
                heard.set_result(None)
            return  # another store's ping, or a late one
        if self._event_watches is None:
            return
        if payload:
            self._event_watches.wake(payload)
        else:
            self._event_watches.wake_all()

    def _listener_lost(self, conn: Any) -> None:
        self._listener = None
        if self._event_watches is not None:
            self._event_watches.wake_all()

    async def close(self) -> None:
        self._closed = True  # before the listener goes: no reader opens another
        if self._listener_check is not None:
            self._listener_check.cancel()
            with contextlib.suppress(BaseException):
                await self._listener_check
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(Exception):
                await listener.close()
        await super().close()
