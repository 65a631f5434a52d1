"""PostgreSQL: log records (`keel.storage.logs`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from keel.storage import logs as rules
from keel.storage.logs import LogQuery, LogRetention, LogStore, StoredLog
from keel.storage.postgres.pool import PostgresPool, guarded, utc


def _where(query: LogQuery) -> tuple[str, list[Any]]:
    values: list[Any] = []

    def param(value: Any) -> str:
        values.append(utc(value) if isinstance(value, datetime) else value)
        return f"${len(values)}"

    found = rules.conditions(query, "postgres", param)
    return (f" WHERE {' AND '.join(found)}" if found else ""), values


async def _prune(conn: Any, retention: LogRetention) -> int:
    """Delete at most a batch of expired records and a batch of the oldest beyond the count."""
    doomed = [
        r["seq"]
        for r in await conn.fetch(
            "SELECT seq FROM logs WHERE logged_at < $1 LIMIT $2", rules.cutoff(retention), retention.batch
        )
    ]
    bounds = await conn.fetchrow("SELECT max(seq) AS newest, min(seq) AS oldest FROM logs")
    # seq only grows and the oldest go first: max - min + 1 bounds the count, read from the index alone.
    if bounds["newest"] is not None and bounds["newest"] - bounds["oldest"] + 1 > retention.max_records:
        last_kept = await conn.fetchval(
            "SELECT seq FROM logs ORDER BY seq DESC LIMIT 1 OFFSET $1", retention.max_records - 1
        )
        if last_kept is not None:
            doomed += [
                r["seq"]
                for r in await conn.fetch(
                    "SELECT seq FROM logs WHERE seq < $1 ORDER BY seq LIMIT $2", last_kept, retention.batch
                )
            ]
    seqs = sorted(set(doomed))
    if seqs:
        await conn.execute("DELETE FROM logs WHERE seq = ANY($1::bigint[])", seqs)
    return len(seqs)


class PostgresLogs(PostgresPool, LogStore):
    @guarded
    async def save_logs(self, logs: Sequence[StoredLog], *, retention: LogRetention | None = None) -> int:
        at = datetime.now(UTC)
        marks = ", ".join(
            f"${i}::jsonb" if name.strip() == "data" else f"${i}"
            for i, name in enumerate(rules.INSERT_COLUMNS.split(","), start=1)
        )
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            if logs:
                await conn.executemany(
                    f"INSERT INTO logs ({rules.INSERT_COLUMNS}) VALUES ({marks})",
                    [rules.row_values(log, at, utc) for log in logs],
                )
            return await _prune(conn, retention) if retention is not None else 0

    @guarded
    async def list_logs(self, query: LogQuery, *, offset: int = 0, limit: int = 100) -> tuple[list[StoredLog], int]:
        where, values = _where(query)
        n = len(values)
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            total = await conn.fetchval(f"SELECT count(*) FROM logs l{where}", *values)
            rows = await conn.fetch(
                f"SELECT {rules.LOG_COLUMNS} FROM logs l{where} ORDER BY {rules.order(query)}"
                f" LIMIT ${n + 1} OFFSET ${n + 2}",
                *values,
                limit,
                offset,
            )
        return [rules.log_of(r) for r in rows], int(total)
