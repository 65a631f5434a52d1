"""The worker's thread cache returns exactly what storage holds, also after another process edits the thread."""

from __future__ import annotations

from datetime import UTC, datetime

from keel.activities.thread_cache import ThreadCache
from keel.storage import Storage, StoredMessage


def msg(i: int, thread: str = "t") -> StoredMessage:
    return StoredMessage(
        id=f"m{i}", thread_id=thread, resource_id="r", role="user", content=f"text {i}", created_at=datetime.now(UTC)
    )


async def test_new_messages_are_appended_and_an_edited_thread_is_reloaded(storage: Storage) -> None:
    await storage.create_thread("t", "r")
    cache = ThreadCache(storage)
    await storage.save_messages([msg(1), msg(2)])
    assert [m.id for m in await cache.messages("t")] == ["m1", "m2"]
    await storage.save_messages([msg(3)])
    assert [m.id for m in await cache.messages("t")] == ["m1", "m2", "m3"]
    await storage.delete_messages(["m1"])  # another process edits the thread
    await storage.save_messages([msg(4)])
    assert [m.id for m in await cache.messages("t")] == ["m2", "m3", "m4"]
    await storage.delete_messages(["m4"])
    assert [m.id for m in await cache.messages("t")] == ["m2", "m3"]


async def test_the_cache_keeps_only_the_most_recent_threads(storage: Storage) -> None:
    cache = ThreadCache(storage, max_threads=2)
    for t in ("a", "b", "c"):
        await storage.create_thread(t, "r")
        await storage.save_messages([msg(1, t)])
        await cache.messages(t)
    assert list(cache._threads) == ["b", "c"]
