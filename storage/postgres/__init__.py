"""PostgreSQL backend (asyncpg), for installs where several hosts share storage."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic_core import to_json

from keel.protocol import EventRecord
from keel.storage import rules
from keel.storage.base import Storage
from keel.storage.blobs import BlobStore
from keel.storage.postgres import events as sql_events
from keel.storage.postgres import threads as sql_threads
from keel.storage.postgres.blobs import PostgresBlobs
from keel.storage.postgres.definitions import PostgresDefinitions
from keel.storage.postgres.events import PostgresEvents
from keel.storage.postgres.logs import PostgresLogs
from keel.storage.postgres.pool import guarded
from keel.storage.postgres.search_index import PostgresSearchIndexes
from keel.storage.postgres.spans import PostgresSpans
from keel.storage.postgres.steps import PostgresSteps, store_answer
from keel.storage.postgres.threads import PostgresThreads
from keel.storage.steps import StepAnswer
from keel.storage.threads import StoredMessage


class PostgresStorage(
    PostgresThreads,
    PostgresEvents,
    PostgresSteps,
    PostgresDefinitions,
    PostgresBlobs,
    PostgresSearchIndexes,
    PostgresSpans,
    PostgresLogs,
    Storage,
):
    """Storage in a PostgreSQL database, through a small asyncpg connection pool.

    Args:
        dsn: A libpq-style URL, e.g. `postgresql://user:pass@host:5432/keel`.
        min_size: Connections the pool keeps open.
        max_size: Most connections the pool opens at once.
    """

    dialect = "postgres"

    def payloads(self) -> BlobStore:
        return self

    @guarded
    async def begin_run(
        self, run_id: str, execution_id: str, thread_id: str, resource_id: str, *, announce: str | None = None
    ) -> str:
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            owner = await sql_events.claim(conn, run_id, execution_id)
            if owner == execution_id:
                await conn.execute(
                    "INSERT INTO threads (id, resource_id, created_at, updated_at) VALUES ($1, $2, $3, $3)"
                    " ON CONFLICT (id) DO NOTHING",
                    thread_id,
                    resource_id,
                    datetime.now(UTC),
                )
                if announce is not None:
                    await sql_events.append(conn, announce, [rules.run_start(run_id)], None, 1)
        if announce is not None and owner == execution_id:
            self._appended(announce)
        return owner

    @guarded
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
        if also is not None and not also[1]:
            also = None
        if not messages and not events and answer is None and also is None:
            return attempt
        pool = await self._get_pool()
        used = attempt
        async with pool.acquire() as conn, conn.transaction():
            if messages:
                await sql_threads.save(conn, messages, replace)
            if answer is not None:
                await store_answer(conn, run_id, answer.message_id, to_json(answer.answer).decode())
            if events and once:
                await sql_events.lock_run(conn, run_id)
                if await sql_events.written_attempt(conn, run_id, source):
                    return 0
            if events:
                if renumber:
                    await sql_events.lock_run(conn, run_id)
                    used = rules.next_attempt(await sql_events.written_attempt(conn, run_id, source), attempt)
                await sql_events.append(conn, run_id, events, source, used)
            if also is not None:
                await sql_events.append(conn, also[0], also[1], f"{run_id}/{source}", used)
        if events:
            self._appended(run_id)
        if also is not None:
            self._appended(also[0])
        return used


__all__ = ["PostgresStorage"]
