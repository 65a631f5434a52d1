"""SQLite: what each step of a run has done (`keel.storage.steps`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from keel.storage import rules
from keel.storage.sqlite.connection import SQLiteConnection, now
from keel.storage.steps import StepRecord, StepStore


def store_answer(conn: sqlite3.Connection, run_id: str, message_id: str, answer: str, at: str) -> None:
    """Store a step's answer inside the caller's write transaction (a re-execution's answer replaces it)."""
    conn.execute(
        "INSERT INTO run_steps (run_id, key, answer, created_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (run_id, key) DO UPDATE SET answer = excluded.answer",
        (run_id, message_id, answer, at),
    )


class SQLiteSteps(SQLiteConnection, StepStore):
    async def begin_step(
        self, run_id: str, *, answer_id: str | None = None, tool_ids: Sequence[str] = ()
    ) -> StepRecord:
        ids = list(dict.fromkeys(tool_ids))
        at = now()

        def read(conn: sqlite3.Connection) -> tuple[Any, list[sqlite3.Row]]:
            answer = None
            if answer_id is not None:
                row = conn.execute(
                    "SELECT answer FROM run_steps WHERE run_id = ? AND key = ?", (run_id, answer_id)
                ).fetchone()
                answer = row[0] if row is not None else None
            stored: list[sqlite3.Row] = []
            if ids:
                stored = conn.execute(
                    f"SELECT {rules.MESSAGE_COLUMNS} FROM messages WHERE id IN (SELECT value FROM json_each(?))",
                    (json.dumps(ids),),
                ).fetchall()
            return answer, stored

        def begin(conn: sqlite3.Connection) -> tuple[Any, list[sqlite3.Row], dict[str, int]]:
            answer, stored = read(conn)
            done = {r["id"] for r in stored}
            attempts: dict[str, int] = {}
            for key in ids:
                if key in done:
                    continue
                row = conn.execute(
                    "INSERT INTO run_steps (run_id, key, starts, created_at) VALUES (?, ?, 1, ?)"
                    " ON CONFLICT (run_id, key) DO UPDATE SET starts = starts + 1 RETURNING starts",
                    (run_id, key, at),
                ).fetchone()
                attempts[key] = int(row[0])
            return answer, stored, attempts

        if ids:
            answer, stored, attempts = await self._write_tx(begin, inline=True)
        else:
            answer, stored = await self._run(read, inline=True)
            attempts = {}
        return StepRecord(
            answer=json.loads(answer) if answer is not None else None,
            results={m.id: m for m in map(rules.message, stored)},
            attempts=attempts,
        )

    async def forget_steps(self, run_id: str, message_ids: Sequence[str]) -> int:
        if not message_ids:
            return 0
        ids = json.dumps(list(dict.fromkeys(message_ids)))

        def forget(conn: sqlite3.Connection) -> int:
            conn.execute(
                "DELETE FROM run_steps WHERE run_id = ? AND key IN (SELECT value FROM json_each(?))", (run_id, ids)
            )
            return conn.execute("DELETE FROM messages WHERE id IN (SELECT value FROM json_each(?))", (ids,)).rowcount

        return await self._write_tx(forget)
