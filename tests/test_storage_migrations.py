"""Numbered schema migrations: a database made by the schema before versioning is upgraded in place, a fresh one
gets every migration, and a database newer than this Keel is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import asyncpg
import pytest

from keel.protocol import EventRecord
from keel.storage import SchemaError, Storage, StoredMessage, open_storage
from keel.storage.migrations import VERSION_TABLE, Dialect, latest

FIXTURES = Path(__file__).parent / "fixtures"
THREAD = ("t-old", "user-1", "2025-01-01T00:00:00.000000+00:00")
MESSAGE = ("m-old", "t-old", "user-1", "user", '"hello from before"', "run-old", "2025-01-01T00:00:01.000000+00:00")
EVENT = ("run-old", 0, "start", '{"id": "demo"}', "model:1", 1, "2025-01-01T00:00:01.000000+00:00")


def dialect(url: str) -> Dialect:
    return "sqlite" if url.startswith("sqlite") else "postgres"


def schema_before_migrations(url: str) -> list[str]:
    text = (FIXTURES / f"schema_before_migrations_{dialect(url)}.sql").read_text()
    return [s for s in text.split(";") if s.strip()]


async def create_with_old_schema(url: str) -> None:
    """A database exactly as the code before migrations left it, with a thread, a message and an event."""
    if dialect(url) == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            for statement in schema_before_migrations(url):
                db.execute(statement)
            db.execute(
                "INSERT INTO threads (id, resource_id, created_at, updated_at) VALUES (?, ?, ?, ?)",
                (*THREAD, THREAD[2]),
            )
            db.execute("INSERT INTO messages (id, thread_id, resource_id, role, content, run_id, created_at)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?)", MESSAGE)  # fmt: skip
            db.execute('INSERT INTO run_events (run_id, "offset", type, payload, source, attempt, created_at)'
                       " VALUES (?, ?, ?, ?, ?, ?, ?)", EVENT)  # fmt: skip
        return
    conn = await asyncpg.connect(url)
    try:
        for statement in schema_before_migrations(url):
            await conn.execute(statement)
        await conn.execute(
            "INSERT INTO threads (id, resource_id, created_at, updated_at)"
            " VALUES ($1, $2, $3::text::timestamptz, $3::text::timestamptz)",
            *THREAD,
        )
        await conn.execute(
            "INSERT INTO messages (id, thread_id, resource_id, role, content, run_id, created_at)"
            " VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7::text::timestamptz)",
            *MESSAGE,
        )
        await conn.execute(
            'INSERT INTO run_events (run_id, "offset", type, payload, source, attempt, created_at)'
            " VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7::text::timestamptz)",
            *EVENT,
        )
    finally:
        await conn.close()


async def indexes(url: str) -> set[str]:
    if dialect(url) == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    conn = await asyncpg.connect(url)
    try:
        return {r["indexname"] for r in await conn.fetch("SELECT indexname FROM pg_indexes")}
    finally:
        await conn.close()


async def test_a_database_made_before_migrations_is_upgraded_and_keeps_its_data(store_url: str) -> None:
    await create_with_old_schema(store_url)
    assert "run_events_source_attempt" not in await indexes(store_url)

    store = open_storage(store_url)
    try:
        assert await store.schema_version() == 0
        await store.init()
        assert await store.schema_version() == latest(dialect(store_url)) >= 2
        await store.init()  # idempotent: nothing left to apply
        assert await store.schema_version() == latest(dialect(store_url))

        [message], total = await store.list_messages("t-old")
        assert (total, message.id, message.content, message.run_id) == (1, "m-old", "hello from before", "run-old")
        [event] = await store.read_events("run-old")
        assert (event.type, event.payload, event.source) == ("start", {"id": "demo"}, "model:1")
        await assert_writable(store)
    finally:
        await store.close()
    assert "run_events_source_attempt" in await indexes(store_url)


async def assert_writable(store: Storage) -> None:
    new = StoredMessage(
        id="m-new", thread_id="t-old", resource_id="user-1", role="assistant", content="after the upgrade",
        created_at=(await store.list_messages("t-old"))[0][0].created_at,
    )  # fmt: skip
    used = await store.write("run-old", messages=[new], events=[EventRecord(type="finish")], source="model:1",
                             renumber=True)  # fmt: skip
    assert used == 2  # after the attempt the old code wrote
    assert [m.id for m in (await store.list_messages("t-old"))[0]] == ["m-old", "m-new"]


async def test_a_fresh_database_gets_every_migration_once(store_url: str) -> None:
    store = open_storage(store_url)
    try:
        await store.init()
        assert await store.schema_version() == latest(dialect(store_url))
    finally:
        await store.close()
    if dialect(store_url) == "sqlite":
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            versions = [r[0] for r in db.execute(f"SELECT version FROM {VERSION_TABLE} ORDER BY version")]
    else:
        conn = await asyncpg.connect(store_url)
        try:
            versions = [r["version"] for r in await conn.fetch(f"SELECT version FROM {VERSION_TABLE} ORDER BY version")]
        finally:
            await conn.close()
    assert versions == list(range(1, latest(dialect(store_url)) + 1))


async def test_a_database_newer_than_this_keel_is_refused_with_both_versions(store_url: str) -> None:
    store = open_storage(store_url)
    try:
        await store.init()
        await store.write("r", events=[EventRecord(type="x")])
        if dialect(store_url) == "sqlite":
            with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
                db.execute(f"INSERT INTO {VERSION_TABLE} VALUES (99, 'from_the_future', 'now')")
        else:
            conn = await asyncpg.connect(store_url)
            try:
                await conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES (99, 'from_the_future', now())")
            finally:
                await conn.close()
        with pytest.raises(
            SchemaError, match=rf"version 99, newer than this Keel knows \({latest(dialect(store_url))}\)"
        ):
            await store.init()
    finally:
        await store.close()
