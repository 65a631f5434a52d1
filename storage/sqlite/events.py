"""SQLite: run events."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from pydantic_core import to_json

from keel.protocol import EventRecord
from keel.storage import rules
from keel.storage.events import EventStore, RunEvent
from keel.storage.sqlite.connection import SQLiteConnection, now, sql_limit

EncodedEvent = tuple[str, str]


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


class SQLiteEvents(SQLiteConnection, EventStore):
    async def append_events(
        self, run_id: str, events: list[EventRecord], *, source: str | None = None, attempt: int = 1
    ) -> list[int]:
        if not events:
            return []
        encoded, at = encode(events), now()
        return await self._write_tx(lambda conn: append(conn, run_id, encoded, source, attempt, at))

    async def claim_run(self, run_id: str, execution_id: str) -> str:
        at = now()
        return await self._write_tx(lambda conn: claim(conn, run_id, execution_id, at))

    async def read_events(self, run_id: str, *, offset: int = 0, limit: int | None = None) -> list[RunEvent]:
        rules.check_page(offset, limit)

        def read(conn: sqlite3.Connection) -> Sequence[sqlite3.Row]:
            return conn.execute(
                f'SELECT {rules.EVENT_COLUMNS} FROM run_events WHERE run_id = ? AND "offset" >= ?'
                ' ORDER BY "offset" LIMIT ?',
                (run_id, offset, sql_limit(limit)),
            ).fetchall()

        return [rules.event(r) for r in await self._run(read)]
