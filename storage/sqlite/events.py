"""SQLite: run events."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Sequence

from pydantic_core import to_json

from keel.protocol import EventRecord
from keel.storage import rules
from keel.storage.events import EventStore, RunEvent
from keel.storage.sqlite.connection import SQLiteConnection, now, sql_limit

EncodedEvent = tuple[str, str]

CHANGE_POLL_SECONDS = 0.005
"""How often a store with watches asks SQLite whether another connection committed (`PRAGMA data_version`:
no table read); only then does it read the watched runs' heads."""
CHANGE_RETRY_SECONDS = 0.5
_HEADS_BATCH = 500


def encode(events: list[EventRecord]) -> list[EncodedEvent]:
    return [(e.type, to_json(e.payload).decode()) for e in events]


def append(
    conn: sqlite3.Connection, run_id: str, encoded: list[EncodedEvent], source: str | None, attempt: int, at: str
) -> list[int]:
    """Append inside the caller's write transaction."""
    # BEGIN IMMEDIATE holds the file's write lock, so no other process can take the same offsets
    # between this read and the insert.
    start: int = conn.execute(
        'SELECT coalesce(max("offset") + 1, 0) FROM run_events WHERE run_id = ?', (run_id,)
    ).fetchone()[0]
    offsets = list(range(start, start + len(encoded)))
    conn.executemany(
        f"INSERT INTO run_events ({rules.EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (run_id, off, type_, payload, source, attempt, at)
            for off, (type_, payload) in zip(offsets, encoded, strict=True)
        ],
    )
    return offsets


def written_attempt(conn: sqlite3.Connection, run_id: str, source: str | None) -> int:
    """The highest attempt `source` wrote to the run's log (0 if none)."""
    written: int = conn.execute(
        "SELECT coalesce(max(attempt), 0) FROM run_events WHERE run_id = ? AND source IS ?", (run_id, source)
    ).fetchone()[0]
    return written


def claim(conn: sqlite3.Connection, run_id: str, execution_id: str, at: str) -> str:
    """Claim the run id inside the caller's write transaction; returns its owner."""
    conn.execute(
        "INSERT OR IGNORE INTO runs (run_id, execution_id, created_at) VALUES (?, ?, ?)", (run_id, execution_id, at)
    )
    owner: str = conn.execute("SELECT execution_id FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]
    return owner


def heads(conn: sqlite3.Connection, run_ids: list[str]) -> dict[str, int]:
    """Each run's last offset (runs with no events left out)."""
    found: dict[str, int] = {}
    for start in range(0, len(run_ids), _HEADS_BATCH):
        batch = run_ids[start : start + _HEADS_BATCH]
        found.update(
            conn.execute(
                f'SELECT run_id, max("offset") FROM run_events WHERE run_id IN ({",".join("?" * len(batch))})'
                " GROUP BY run_id",
                batch,
            ).fetchall()
        )
    return found


class SQLiteEvents(SQLiteConnection, EventStore):
    """Readers in this process are woken by this store's appends at once, and by other connections' (other
    processes) within `CHANGE_POLL_SECONDS`: SQLite has no notifications, and `PRAGMA data_version` is the
    cheap question of whether anything was committed since."""

    wakes_readers = True
    _change_poller: asyncio.Task[None] | None = None

    async def append_events(
        self, run_id: str, events: list[EventRecord], *, source: str | None = None, attempt: int = 1
    ) -> list[int]:
        if not events:
            return []
        encoded, at = encode(events), now()
        offsets = await self._write_tx(lambda conn: append(conn, run_id, encoded, source, attempt, at), inline=True)
        self._appended(run_id)
        return offsets

    async def claim_run(self, run_id: str, execution_id: str) -> str:
        at = now()
        return await self._write_tx(lambda conn: claim(conn, run_id, execution_id, at), inline=True)

    async def log_end(self, run_id: str) -> int:
        def end(conn: sqlite3.Connection) -> int:
            found: int = conn.execute(
                'SELECT coalesce(max("offset") + 1, 0) FROM run_events WHERE run_id = ?', (run_id,)
            ).fetchone()[0]
            return found

        return await self._run(end)

    async def read_events(self, run_id: str, *, offset: int = 0, limit: int | None = None) -> list[RunEvent]:
        rules.check_page(offset, limit)

        def read(conn: sqlite3.Connection) -> Sequence[sqlite3.Row]:
            return conn.execute(
                f'SELECT {rules.EVENT_COLUMNS} FROM run_events WHERE run_id = ? AND "offset" >= ?'
                ' ORDER BY "offset" LIMIT ?',
                (run_id, offset, sql_limit(limit)),
            ).fetchall()

        return [rules.event(r) for r in await self._run(read)]

    async def _watching(self) -> None:
        if self._change_poller is None or self._change_poller.done():
            self._change_poller = asyncio.create_task(self._poll_changes(), name=f"keel-sqlite-changes {self.path}")

    async def _poll_changes(self) -> None:
        """While any watch is taken: wake the watches of each run whose head moved since the last look."""
        watches = self._event_watches
        assert watches is not None
        version: int | None = None
        seen: dict[str, int] = {}

        def look(conn: sqlite3.Connection) -> tuple[int, dict[str, int] | None]:
            now_version: int = conn.execute("PRAGMA data_version").fetchone()[0]
            runs = watches.runs()
            if now_version == version and all(r in seen for r in runs):
                return now_version, None
            return now_version, heads(conn, runs)

        while watches:
            try:
                version, found = await self._run(look)
            except Exception:  # unavailable for now (busy, I/O): the watches' timeouts cover the gap
                if self._closed:
                    return
                await asyncio.sleep(CHANGE_RETRY_SECONDS)
                continue
            if found is not None:
                for run_id in watches.runs():
                    head = found.get(run_id, -1)
                    if seen.get(run_id) != head:
                        watches.wake(run_id)
                seen = {run_id: found.get(run_id, -1) for run_id in watches.runs()}
            await asyncio.sleep(CHANGE_POLL_SECONDS)

    async def close(self) -> None:
        if self._change_poller is not None:
            self._change_poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._change_poller
        await super().close()
