"""Stored workflow definitions on both backends: versions on change, the same content is a no-op, any version
readable by number after edits and deletion, listing filters, concurrent savers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from keel.storage import Storage, open_storage
from keel.storage.definitions import definition_hash


@pytest.fixture
async def storage(store_url: str) -> AsyncIterator[Storage]:
    store = open_storage(store_url)
    await store.init()
    try:
        yield store
    finally:
        await store.close()


def definition(text: str) -> dict[str, object]:
    return {"id": "w", "inputSchema": {}, "outputSchema": {}, "graph": [{"type": "sleep", "id": text, "duration": 1}]}


async def test_a_changed_definition_is_a_new_version_and_the_same_one_is_not(storage: Storage) -> None:
    first = await storage.save_definition("w", definition("a"), author_id="ann")
    again = await storage.save_definition("w", definition("a"))
    second = await storage.save_definition("w", definition("b"))
    assert (first.version, again.version, second.version) == (1, 1, 2)
    assert first.hash == definition_hash(definition("a")) != second.hash
    assert second.author_id == "ann"  # kept when a later save names no author
    latest = await storage.get_definition("w")
    assert latest is not None and latest.version == 2 and latest.definition == definition("b")
    pinned = await storage.get_definition("w", 1)
    assert pinned is not None and pinned.definition == definition("a")


async def test_deleting_hides_a_workflow_but_its_versions_stay_readable_and_saving_brings_it_back(
    storage: Storage,
) -> None:
    await storage.save_definition("w", definition("a"))
    assert await storage.delete_definition("w") is True
    assert await storage.delete_definition("w") is False
    assert await storage.get_definition("w") is None
    assert await storage.list_definitions() == []
    hidden = await storage.get_definition("w", include_deleted=True)
    assert hidden is not None and hidden.deleted
    pinned = await storage.get_definition("w", 1)
    assert pinned is not None and pinned.definition == definition("a")
    back = await storage.save_definition("w", definition("c"))
    assert back.version == 2 and not back.deleted
    assert await storage.delete_definition("nope") is False


async def test_listing_filters_by_status_and_author(storage: Storage) -> None:
    await storage.save_definition("a", definition("1"), author_id="ann")
    await storage.save_definition("b", definition("2"), author_id="bob", status="archived")
    assert [d.workflow_id for d in await storage.list_definitions()] == ["a", "b"]
    assert [d.workflow_id for d in await storage.list_definitions(status="archived")] == ["b"]
    assert [d.workflow_id for d in await storage.list_definitions(author_id="ann")] == ["a"]


async def test_concurrent_savers_get_dense_versions(storage: Storage) -> None:
    await asyncio.gather(*(storage.save_definition("w", definition(str(i))) for i in range(8)))
    latest = await storage.get_definition("w")
    assert latest is not None and latest.version == 8
    versions = [await storage.get_definition("w", v) for v in range(1, 9)]
    assert all(v is not None for v in versions)


async def test_a_created_runs_resource_is_kept_until_it_is_older_than_the_cutoff(storage: Storage) -> None:
    await storage.remember_created_run("run-1", "w", "ann")
    await storage.remember_created_run("run-1", "w", "bea")  # created again: the later resource
    assert await storage.created_run_resource("run-1", "w") == "bea"
    assert await storage.created_run_resource("run-1", "other") is None  # another workflow's run of that id
    assert await storage.created_run_resource("run-2", "w") is None
    assert await storage.forget_created_runs(before=datetime.now(UTC) - timedelta(days=1)) == 0
    assert await storage.forget_created_runs(before=datetime.now(UTC) + timedelta(seconds=1)) == 1
    assert await storage.created_run_resource("run-1", "w") is None
