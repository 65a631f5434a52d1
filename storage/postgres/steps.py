"""PostgreSQL: what each step of a run has done (`keel.storage.steps`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from keel.storage import rules
from keel.storage.postgres.pool import PostgresPool, guarded
from keel.storage.steps import StepRecord, StepStore


async def store_answer(conn: Any, run_id: str, message_id: str, answer: str) -> None:
    """Store a step's answer inside the caller's transaction (a re-execution's answer replaces it)."""
    await conn.execute(
        "INSERT INTO run_steps (run_id, key, answer, created_at) VALUES ($1, $2, $3::jsonb, $4)"
        " ON CONFLICT (run_id, key) DO UPDATE SET answer = excluded.answer",
        run_id,
        message_id,
        answer,
        datetime.now(UTC),
    )


class PostgresSteps(PostgresPool, StepStore):
    @guarded
    async def begin_step(
        self, run_id: str, *, answer_id: str | None = None, tool_ids: Sequence[str] = ()
    ) -> StepRecord:
        ids = list(dict.fromkeys(tool_ids))
        pool = await self._get_pool()
        # One statement: the answer and the stored tool messages (rows tagged by kind).
        read = f"""
            SELECT 'answer' AS kind, answer::text AS answer, NULL AS id, NULL AS thread_id, NULL AS resource_id,
                   NULL AS role, NULL AS content, NULL AS run_id, NULL::timestamptz AS created_at
            FROM run_steps WHERE run_id = $1 AND key = $2
            UNION ALL
            SELECT 'message', NULL, {rules.MESSAGE_COLUMNS} FROM messages WHERE id = ANY($3::text[])
        """
        async with pool.acquire() as conn:
            if not ids:
                text = await conn.fetchval(
                    "SELECT answer::text FROM run_steps WHERE run_id = $1 AND key = $2", run_id, answer_id
                )
                return StepRecord(answer=json.loads(text) if text is not None else None)
            async with conn.transaction():
                rows = await conn.fetch(read, run_id, answer_id, ids)
                stored = [rules.message(r) for r in rows if r["kind"] == "message"]
                done = {m.id for m in stored}
                started = await conn.fetch(
                    "INSERT INTO run_steps (run_id, key, starts, created_at)"
                    " SELECT $1, k, 1, $3 FROM unnest($2::text[]) AS k"
                    " ON CONFLICT (run_id, key) DO UPDATE SET starts = run_steps.starts + 1 RETURNING key, starts",
                    run_id,
                    [k for k in ids if k not in done],
                    datetime.now(UTC),
                )
        answer = next((r["answer"] for r in rows if r["kind"] == "answer"), None)
        return StepRecord(
            answer=json.loads(answer) if answer is not None else None,
            results={m.id: m for m in stored},
            attempts={r["key"]: int(r["starts"]) for r in started},
        )

    @guarded
    async def forget_steps(self, run_id: str, message_ids: Sequence[str]) -> int:
        if not message_ids:
            return 0
        ids = list(dict.fromkeys(message_ids))
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("DELETE FROM run_steps WHERE run_id = $1 AND key = ANY($2::text[])", run_id, ids)
            count = await conn.fetchval(
                "WITH d AS (DELETE FROM messages WHERE id = ANY($1::text[]) RETURNING 1) SELECT count(*) FROM d", ids
            )
        return int(count)
