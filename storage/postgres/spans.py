"""PostgreSQL: trace spans (`keel.storage.spans`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from keel.storage import spans as rules
from keel.storage.postgres.pool import PostgresPool, guarded, utc
from keel.storage.spans import SpanQuery, SpanRetention, SpanStore, StoredSpan

_TRUE_FALSE = {"true": "TRUE", "false": "FALSE"}
_TRACES = "SELECT unnest($1::text[])"


def _where(query: SpanQuery) -> tuple[str, list[Any]]:
    values: list[Any] = []

    def param(value: Any) -> str:
        values.append(utc(value) if isinstance(value, datetime) else value)
        return f"${len(values)}"

    found = rules.conditions(query, "postgres", param)
    return (f" WHERE {' AND '.join(found)}" if found else ""), values


async def _known_entities(conn: Any, run_ids: list[str]) -> dict[str, StoredSpan]:
    if not run_ids:
        return {}
    rows = await conn.fetch(
        f"SELECT {rules.SPAN_COLUMNS} FROM spans WHERE run_id = ANY($1::text[]) AND entity_type = $2"
        " AND entity_id IS NOT NULL",
        run_ids,
        rules.AGENT_ENTITY,
    )
    return rules.run_entities([rules.span_of(r) for r in rows])


async def _prune(conn: Any, retention: SpanRetention) -> int:
    """Delete whole traces (`keel.storage.spans`): of the oldest batch of expired spans, those whose every span
    expired, and those of the oldest batch of spans beyond the count."""
    cutoff = rules.cutoff(retention)
    expired = rules.EXPIRED_TRACES.format(cutoff="$1", limit="$2")
    doomed = {r["trace_id"] for r in await conn.fetch(expired, cutoff, retention.batch)}
    bounds = await conn.fetchrow("SELECT max(seq) AS newest, min(seq) AS oldest FROM spans")
    # seq only grows and the oldest go first: max - min + 1 bounds the count, read from the index alone.
    if bounds["newest"] is not None and bounds["newest"] - bounds["oldest"] + 1 > retention.max_spans:
        last_kept = await conn.fetchval(
            "SELECT seq FROM spans ORDER BY seq DESC LIMIT 1 OFFSET $1", retention.max_spans - 1
        )
        if last_kept is not None:
            oldest = rules.OLDEST_TRACES.format(last="$1", limit="$2")
            doomed |= {r["trace_id"] for r in await conn.fetch(oldest, last_kept, retention.batch)}
    if not doomed:
        return 0
    result = await conn.execute("DELETE FROM spans WHERE trace_id = ANY($1::text[])", sorted(doomed))
    return int(result.split()[-1])


class PostgresSpans(PostgresPool, SpanStore):
    @guarded
    async def save_spans(self, spans: Sequence[StoredSpan], *, retention: SpanRetention | None = None) -> int:
        spans = list(spans)
        at = datetime.now(UTC)
        pool = await self._get_pool()
        marks = ", ".join(
            f"${i}::jsonb" if name.strip() in ("attributes", "events", "links", "resource") else f"${i}"
            for i, name in enumerate(rules.INSERT_COLUMNS.split(","), start=1)
        )
        async with pool.acquire() as conn, conn.transaction():
            known = rules.run_entities(spans)
            known |= await _known_entities(conn, rules.needing_entity(spans, known))
            if spans:
                await conn.executemany(
                    f"INSERT INTO spans ({rules.INSERT_COLUMNS}) VALUES ({marks})"
                    " ON CONFLICT (trace_id, span_id) DO NOTHING",
                    [rules.row_values(rules.with_entity(s, known), at, utc) for s in spans],
                )
                for run_id, source in rules.run_entities(spans).items():
                    await conn.execute(
                        "UPDATE spans SET entity_type = $1, entity_id = $2, entity_name = $3,"
                        " thread_id = coalesce(thread_id, $4) WHERE run_id = $5 AND entity_id IS NULL",
                        source.entity_type,
                        source.entity_id,
                        source.entity_name,
                        source.thread_id,
                        run_id,
                    )
                await conn.execute(
                    rules.ORPHANS_FOUND_PARENT.format(traces=_TRACES, **_TRUE_FALSE),
                    sorted({s.trace_id for s in spans}),
                )
            return await _prune(conn, retention) if retention is not None else 0

    @guarded
    async def list_spans(self, query: SpanQuery, *, page: int = 0, per_page: int = 10) -> tuple[list[StoredSpan], int]:
        where, values = _where(query)
        n = len(values)
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            total = await conn.fetchval(f"SELECT count(*) FROM spans s{where}", *values)
            rows = await conn.fetch(
                f"SELECT {rules.SPAN_COLUMNS} FROM spans s{where} ORDER BY {rules.order(query)}"
                f" LIMIT ${n + 1} OFFSET ${n + 2}",
                *values,
                per_page,
                page * per_page,
            )
        return [rules.span_of(r) for r in rows], int(total)

    @guarded
    async def trace_spans(self, trace_id: str) -> list[StoredSpan]:
        pool = await self._get_pool()
        rows = await pool.fetch(
            f"SELECT {rules.SPAN_COLUMNS} FROM spans WHERE trace_id = $1 ORDER BY started_at, seq", trace_id
        )
        return [rules.span_of(r) for r in rows]

    @guarded
    async def get_span(self, trace_id: str, span_id: str) -> StoredSpan | None:
        pool = await self._get_pool()
        row = await pool.fetchrow(
            f"SELECT {rules.SPAN_COLUMNS} FROM spans WHERE trace_id = $1 AND span_id = $2", trace_id, span_id
        )
        return None if row is None else rules.span_of(row)

    @guarded
    async def run_traces(self, run_id: str) -> list[str]:
        pool = await self._get_pool()
        rows = await pool.fetch(
            "SELECT trace_id FROM spans WHERE run_id = $1 GROUP BY trace_id ORDER BY min(started_at), trace_id", run_id
        )
        return [r["trace_id"] for r in rows]

    @guarded
    async def delete_traces(self, trace_ids: Sequence[str]) -> int:
        if not trace_ids:
            return 0
        pool = await self._get_pool()
        ids = sorted(set(trace_ids))
        async with pool.acquire() as conn, conn.transaction():
            result = await conn.execute("DELETE FROM spans WHERE trace_id = ANY($1::text[])", ids)
            await conn.execute("DELETE FROM logs WHERE trace_id = ANY($1::text[])", ids)  # Mastra's cascade
        return int(result.split()[-1])
