"""SQLite: trace spans (`keel.storage.spans`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from keel.storage import spans as rules
from keel.storage.spans import SpanQuery, SpanRetention, SpanStore, StoredSpan
from keel.storage.sqlite.connection import SQLiteConnection, now, ts

_TRUE_FALSE = {"true": "1", "false": "0"}


def _marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


def _where(query: SpanQuery) -> tuple[str, list[Any]]:
    values: list[Any] = []

    def param(value: Any) -> str:
        values.append(ts(value) if isinstance(value, datetime) else value)
        return "?"

    found = rules.conditions(query, "sqlite", param)
    return (f" WHERE {' AND '.join(found)}" if found else ""), values


def _known_entities(conn: sqlite3.Connection, run_ids: list[str]) -> dict[str, StoredSpan]:
    if not run_ids:
        return {}
    rows = conn.execute(
        f"SELECT {rules.SPAN_COLUMNS} FROM spans WHERE run_id IN ({_marks(run_ids)}) AND entity_type = ?"
        " AND entity_id IS NOT NULL",
        [*run_ids, rules.AGENT_ENTITY],
    ).fetchall()
    return rules.run_entities([rules.span_of(r) for r in rows])


def _prune(conn: sqlite3.Connection, retention: SpanRetention) -> int:
    """Delete whole traces (`keel.storage.spans`): of the oldest batch of expired spans, those whose every span
    expired, and those of the oldest batch of spans beyond the count."""
    cutoff = ts(rules.cutoff(retention))
    expired = rules.EXPIRED_TRACES.format(cutoff=":cutoff", limit=":limit")
    doomed = {r[0] for r in conn.execute(expired, {"cutoff": cutoff, "limit": retention.batch})}
    newest, oldest = conn.execute("SELECT max(seq), min(seq) FROM spans").fetchone()
    # seq only grows and the oldest go first: max - min + 1 bounds the count, read from the index alone.
    if newest is not None and newest - oldest + 1 > retention.max_spans:
        last_kept = conn.execute(
            "SELECT seq FROM spans ORDER BY seq DESC LIMIT 1 OFFSET ?", (retention.max_spans - 1,)
        ).fetchone()
        if last_kept is not None:
            oldest_traces = rules.OLDEST_TRACES.format(last="?", limit="?")
            doomed |= {r[0] for r in conn.execute(oldest_traces, (last_kept[0], retention.batch))}
    traces = sorted(doomed)
    deleted = 0
    for start in range(0, len(traces), 500):
        batch = traces[start : start + 500]
        deleted += conn.execute(f"DELETE FROM spans WHERE trace_id IN ({_marks(batch)})", batch).rowcount
    return deleted


class SQLiteSpans(SQLiteConnection, SpanStore):
    async def save_spans(self, spans: Sequence[StoredSpan], *, retention: SpanRetention | None = None) -> int:
        spans = list(spans)
        at = now()

        def save(conn: sqlite3.Connection) -> int:
            known = rules.run_entities(spans)
            known |= _known_entities(conn, rules.needing_entity(spans, known))
            if spans:
                conn.executemany(
                    f"INSERT INTO spans ({rules.INSERT_COLUMNS}) VALUES ({_marks(rules.INSERT_COLUMNS.split(','))})"
                    " ON CONFLICT (trace_id, span_id) DO NOTHING",
                    [rules.row_values(rules.with_entity(s, known), at, ts) for s in spans],
                )
                for run_id, source in rules.run_entities(spans).items():
                    conn.execute(
                        "UPDATE spans SET entity_type = ?, entity_id = ?, entity_name = ?,"
                        " thread_id = coalesce(thread_id, ?) WHERE run_id = ? AND entity_id IS NULL",
                        (source.entity_type, source.entity_id, source.entity_name, source.thread_id, run_id),
                    )
                traces = sorted({s.trace_id for s in spans})
                for start in range(0, len(traces), 500):
                    batch = traces[start : start + 500]
                    conn.execute(rules.ORPHANS_FOUND_PARENT.format(traces=_marks(batch), **_TRUE_FALSE), batch)
            return _prune(conn, retention) if retention is not None else 0

        return await self._write_tx(save)

    async def list_spans(self, query: SpanQuery, *, page: int = 0, per_page: int = 10) -> tuple[list[StoredSpan], int]:
        where, values = _where(query)

        def read(conn: sqlite3.Connection) -> tuple[list[StoredSpan], int]:
            total: int = conn.execute(f"SELECT count(*) FROM spans s{where}", values).fetchone()[0]
            rows = conn.execute(
                f"SELECT {rules.SPAN_COLUMNS} FROM spans s{where} ORDER BY {rules.order(query)} LIMIT ? OFFSET ?",
                [*values, per_page, page * per_page],
            ).fetchall()
            return [rules.span_of(r) for r in rows], total

        return await self._read_tx(read)

    async def trace_spans(self, trace_id: str) -> list[StoredSpan]:
        def read(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            return conn.execute(
                f"SELECT {rules.SPAN_COLUMNS} FROM spans WHERE trace_id = ? ORDER BY started_at, seq", (trace_id,)
            ).fetchall()

        return [rules.span_of(r) for r in await self._run(read)]

    async def get_span(self, trace_id: str, span_id: str) -> StoredSpan | None:
        def read(conn: sqlite3.Connection) -> sqlite3.Row | None:
            row: sqlite3.Row | None = conn.execute(
                f"SELECT {rules.SPAN_COLUMNS} FROM spans WHERE trace_id = ? AND span_id = ?", (trace_id, span_id)
            ).fetchone()
            return row

        row = await self._run(read)
        return None if row is None else rules.span_of(row)

    async def run_traces(self, run_id: str) -> list[str]:
        def read(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT trace_id FROM spans WHERE run_id = ? GROUP BY trace_id ORDER BY min(started_at), trace_id",
                (run_id,),
            ).fetchall()
            return [r[0] for r in rows]

        return await self._run(read)

    async def delete_traces(self, trace_ids: Sequence[str]) -> int:
        ids = sorted(set(trace_ids))

        def delete(conn: sqlite3.Connection) -> int:
            deleted = 0
            for start in range(0, len(ids), 500):
                batch = ids[start : start + 500]
                deleted += conn.execute(f"DELETE FROM spans WHERE trace_id IN ({_marks(batch)})", batch).rowcount
                conn.execute(f"DELETE FROM logs WHERE trace_id IN ({_marks(batch)})", batch)  # Mastra's cascade
            return deleted

        return await self._write_tx(delete) if ids else 0
