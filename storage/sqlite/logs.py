"""SQLite: log records (`keel.storage.logs`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from keel.storage import logs as rules
from keel.storage.logs import LogQuery, LogRetention, LogStore, StoredLog
from keel.storage.sqlite.connection import SQLiteConnection, now, ts


def _where(query: LogQuery) -> tuple[str, list[Any]]:
    values: list[Any] = []

    def param(value: Any) -> str:
        values.append(ts(value) if isinstance(value, datetime) else value)
        return "?"

    found = rules.conditions(query, "sqlite", param)
    return (f" WHERE {' AND '.join(found)}" if found else ""), values


def _prune(conn: sqlite3.Connection, retention: LogRetention) -> int:
    """Delete at most a batch of expired records and a batch of the oldest beyond the count."""
    doomed = [
        r[0]
        for r in conn.execute(
            "SELECT seq FROM logs WHERE logged_at < ? LIMIT ?", (ts(rules.cutoff(retention)), retention.batch)
        )
    ]
    newest, oldest = conn.execute("SELECT max(seq), min(seq) FROM logs").fetchone()
    # seq only grows and the oldest go first: max - min + 1 bounds the count, read from the index alone.
    if newest is not None and newest - oldest + 1 > retention.max_records:
        last_kept = conn.execute(
            "SELECT seq FROM logs ORDER BY seq DESC LIMIT 1 OFFSET ?", (retention.max_records - 1,)
        ).fetchone()
        if last_kept is not None:
            doomed += [
                r[0]
                for r in conn.execute(
                    "SELECT seq FROM logs WHERE seq < ? ORDER BY seq LIMIT ?", (last_kept[0], retention.batch)
                )
            ]
    seqs = sorted(set(doomed))
    for start in range(0, len(seqs), 500):
        batch = seqs[start : start + 500]
        conn.execute(f"DELETE FROM logs WHERE seq IN ({','.join('?' * len(batch))})", batch)
    return len(seqs)


class SQLiteLogs(SQLiteConnection, LogStore):
    async def save_logs(self, logs: Sequence[StoredLog], *, retention: LogRetention | None = None) -> int:
        rows = [rules.row_values(log, now(), ts) for log in logs]
        marks = ",".join("?" * len(rules.INSERT_COLUMNS.split(",")))

        def save(conn: sqlite3.Connection) -> int:
            if rows:
                conn.executemany(f"INSERT INTO logs ({rules.INSERT_COLUMNS}) VALUES ({marks})", rows)
            return _prune(conn, retention) if retention is not None else 0

        return await self._write_tx(save)

    async def list_logs(self, query: LogQuery, *, offset: int = 0, limit: int = 100) -> tuple[list[StoredLog], int]:
        where, values = _where(query)

        def read(conn: sqlite3.Connection) -> tuple[list[StoredLog], int]:
            total: int = conn.execute(f"SELECT count(*) FROM logs l{where}", values).fetchone()[0]
            rows = conn.execute(
                f"SELECT {rules.LOG_COLUMNS} FROM logs l{where} ORDER BY {rules.order(query)} LIMIT ? OFFSET ?",
                [*values, limit, offset],
            ).fetchall()
            return [rules.log_of(r) for r in rows], total

        return await self._read_tx(read)
