"""Reading the event log: a retried activity's lost attempt is not shown next to its retry."""

from __future__ import annotations

from keel.client.run_events import AttemptFilter, follow, read
from keel.protocol import EventRecord
from keel.storage import Storage


def text(*parts: str) -> list[EventRecord]:
    return [EventRecord(type="text-delta", payload={"text": p}) for p in parts]


async def test_a_finished_run_read_from_the_start_shows_only_the_last_attempt_of_each_step(storage: Storage) -> None:
    await storage.append_events("r", [EventRecord(type="start")])
    await storage.append_events("r", text("Hel"), source="model:1", attempt=1)  # the worker died here
    await storage.append_events("r", text("Hello", " there"), source="model:1", attempt=2)
    await storage.append_events("r", text("late"), source="model:1", attempt=1)  # a zombie attempt wakes up
    await storage.append_events("r", [EventRecord(type="finish")], source="model:2")
    followed = [s.event async for s in follow(storage, "r")]
    assert [e.payload.get("text", e.type) for e in followed] == ["start", "Hello", " there", "finish"]
    snapshot = [s.event for s in await read(storage, "r")]
    assert snapshot == followed


async def test_a_live_reader_is_told_when_a_retry_begins(storage: Storage) -> None:
    filt = AttemptFilter()
    await storage.append_events("r", text("Hel"), source="model:1", attempt=1)
    first = filt.filter(await storage.read_events("r"))
    await storage.append_events("r", text("Hello"), source="model:1", attempt=2)
    await storage.append_events("r", text("late"), source="model:1", attempt=1)
    second = filt.filter(await storage.read_events("r", offset=1))
    assert [(e.payload["text"], retry) for e, retry in first] == [("Hel", False)]
    assert [(e.payload["text"], retry) for e, retry in second] == [("Hello", True)]
