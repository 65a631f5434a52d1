"""Readers never write: no schema change, no file created for a mistyped path, and clear errors when the
database is missing, not migrated or down."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from keel.protocol import EventRecord
from keel.storage import (
    DatabaseNotFound,
    PostgresStorage,
    SchemaError,
    SQLiteStorage,
    StorageUnavailable,
    open_storage,
)
from tests.conftest import free_port


async def test_a_reader_of_a_mistyped_sqlite_path_is_told_and_nothing_is_created(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "keel.db"
    store = SQLiteStorage(path)
    try:
        with pytest.raises(DatabaseNotFound, match=r"No Keel database at .*keel\.db"):
            await store.read_events("run-1")
        with pytest.raises(DatabaseNotFound):
            await store.check_schema()
    finally:
        await store.close()
    assert not (tmp_path / "no").exists()


async def test_a_reader_is_told_to_migrate_a_database_without_the_schema(store_url: str, tmp_path: Path) -> None:
    if store_url.startswith("sqlite"):
        Path(store_url.removeprefix("sqlite:///")).touch()  # a file, but no Keel schema
    store = open_storage(store_url)
    try:
        with pytest.raises(SchemaError, match="keel migrate"):
            await store.check_schema()
        await store.init()
        await store.check_schema()
    finally:
        await store.close()


async def test_a_read_only_postgres_role_reads_events_without_running_ddl(pg_dsn: str) -> None:
    name, role = f"t_{uuid.uuid4().hex[:12]}", f"reader_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(pg_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        await admin.execute(f"CREATE ROLE {role} LOGIN")
    finally:
        await admin.close()
    owner_url = urlsplit(pg_dsn)._replace(path=f"/{name}").geturl()
    writer = open_storage(owner_url)
    try:
        await writer.init()
        await writer.append_events("run-1", [EventRecord(type="start", payload={"id": "demo"})])
    finally:
        await writer.close()
    conn = await asyncpg.connect(owner_url)
    try:
        await conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    finally:
        await conn.close()

    reader = open_storage(
        urlsplit(owner_url)._replace(netloc=f"{role}@{urlsplit(owner_url).netloc.split('@')[1]}").geturl()
    )
    try:
        await reader.check_schema()
        [event] = await reader.read_events("run-1")
        assert event.payload == {"id": "demo"}
        with pytest.raises(Exception, match="permission denied"):
            await reader.init()  # the DDL a reader used to run, refused for this role
    finally:
        await reader.close()


async def test_postgres_that_cannot_be_reached_is_storage_unavailable() -> None:
    store = PostgresStorage(f"postgresql://postgres:secret@127.0.0.1:{free_port()}/keel")
    try:
        with pytest.raises(StorageUnavailable, match=r"PostgreSQL at postgresql://postgres:\*\*\*@127\.0\.0\.1"):
            await store.read_events("run-1")
    finally:
        await store.close()


async def keel_cli(*args: str, storage_url: str) -> tuple[int, str, str]:
    env = {**os.environ, "KEEL_STORAGE_URL": storage_url}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keel.cli", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_keel_events_says_in_one_line_when_storage_is_down_or_missing(tmp_path: Path) -> None:
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/keel"
    code, _, err = await keel_cli("events", "run-1", storage_url=down)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: PostgreSQL at "), err
    missing = tmp_path / "typo" / "keel.db"
    code, _, err = await keel_cli("events", "run-1", storage_url=f"sqlite:///{missing}")
    assert code == 2 and "No Keel database at" in err and err.count("\n") == 1, err
    assert not (tmp_path / "typo").exists()


async def test_keel_migrate_creates_the_schema_and_then_reports_it_up_to_date(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db' / 'keel.db'}"
    code, out, err = await keel_cli("migrate", storage_url=url)
    assert code == 0, err
    assert "storage schema at version" in out and "(was 0)" in out
    code, out, _ = await keel_cli("migrate", storage_url=url)
    assert code == 0 and "(up to date)" in out
