"""SQLite backend: one file shared by the worker that writes and the CLI that reads."""

from __future__ import annotations

import sqlite3

from pydantic_core import to_json

from keel.protocol import EventRecord
from keel.storage import rules
from keel.storage.base import Storage
from keel.storage.blobs import BlobStore, DirectoryBlobStore
from keel.storage.sqlite import events as sql_events
from keel.storage.sqlite import threads as sql_threads
from keel.storage.sqlite.connection import now
from keel.storage.sqlite.definitions import SQLiteDefinitions
from keel.storage.sqlite.events import SQLiteEvents
from keel.storage.sqlite.logs import SQLiteLogs
from keel.storage.sqlite.search_index import SQLiteSearchIndexes
from keel.storage.sqlite.spans import SQLiteSpans
from keel.storage.sqlite.steps import SQLiteSteps, store_answer
from keel.storage.sqlite.threads import SQLiteThreads
from keel.storage.steps import StepAnswer
from keel.storage.threads import StoredMessage


class SQLiteStorage(
    SQLiteThreads, SQLiteEvents, SQLiteSteps, SQLiteDefinitions, SQLiteSearchIndexes, SQLiteSpans, SQLiteLogs, Storage
):
    """Storage in one SQLite file (WAL mode), safe to share between processes.

    Args:
        path: The database file. `init()` creates it and its folder; nothing else does.
    """

    dialect = "sqlite"

    def payloads(self) -> BlobStore:
        return DirectoryBlobStore(self.path.parent / "payloads")

    async def begin_run(
        self, run_id: str, execution_id: str, thread_id: str, resource_id: str, *, announce: str | None = None
    ) -> str:
        at = now()
        started = sql_events.encode([rules.run_start(run_id)])

        def begin(conn: sqlite3.Connection) -> str:
            owner = sql_events.claim(conn, run_id, execution_id, at)
            if owner == execution_id:
                sql_threads.insert_thread(conn, thread_id, resource_id, None, None, at)
                if announce is not None:
                    sql_events.append(conn, announce, started, None, 1, at)
            return owner

        owner = await self._write_tx(begin, inline=True)
        if announce is not None and owner == execution_id:
            self._appended(announce)
        return owner

    async def write(
        self,
        run_id: str,
        *,
        messages: list[StoredMessage] | None = None,
        replace: bool = False,
        events: list[EventRecord] | None = None,
        source: str | None = None,
        attempt: int = 1,
        renumber: bool = False,
        answer: StepAnswer | None = None,
        also: tuple[str, list[EventRecord]] | None = None,
        once: bool = False,
    ) -> int:
        at = now()
        rows = sql_threads.message_rows(messages or [])
        encoded = sql_events.encode(events or [])
        answer_json = to_json(answer.answer).decode() if answer is not None else None
        other = (also[0], sql_events.encode(also[1])) if also is not None and also[1] else None
        if not rows and not encoded and answer is None and other is None:
            return attempt

        def write(conn: sqlite3.Connection) -> int:
            if rows:
                sql_threads.save(conn, rows, replace, at)
            if answer is not None and answer_json is not None:
                store_answer(conn, run_id, answer.message_id, answer_json, at)
            used = attempt
            if encoded and once and sql_events.written_attempt(conn, run_id, source):
                return 0
            if encoded:
                if renumber:
                    used = rules.next_attempt(sql_events.written_attempt(conn, run_id, source), attempt)
                sql_events.append(conn, run_id, encoded, source, used, at)
            if other is not None:
                sql_events.append(conn, other[0], other[1], f"{run_id}/{source}", used, at)
            return used

        used = await self._write_tx(write, inline=True)
        if encoded:
            self._appended(run_id)
        if other is not None:
            self._appended(other[0])
        return used


__all__ = ["SQLiteStorage"]
