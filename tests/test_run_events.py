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


async def test_a_retry_that_repeats_what_a_live_reader_was_shown_goes_on_where_it_left_off(storage: Storage) -> None:
    filt = AttemptFilter()
    step = [EventRecord(type="step-start", payload={"step": 1}), *text("Hel")]
    await storage.append_events("r", step, source="model:1", attempt=1)  # shown; then the worker died
    first = filt.filter(await storage.read_events("r"))
    await storage.append_events("r", [*step, *text("lo")], source="model:1", attempt=2)
    second = filt.filter(await storage.read_events("r", offset=2))
    live = [(e.type, e.payload) for e, _ in first + second]
    assert live == [(s.event.type, s.event.payload) for s in await read(storage, "r")]
    assert [retry for _, retry in first + second] == [False, False, False]


async def test_a_retry_that_streams_otherwise_is_shown_from_where_it_differs_marked_as_a_retry(
    storage: Storage,
) -> None:
    filt = AttemptFilter()
    step = [EventRecord(type="step-start", payload={"step": 1})]
    await storage.append_events("r", [*step, *text("Hel")], source="model:1", attempt=1)
    first = filt.filter(await storage.read_events("r"))
    await storage.append_events("r", [*step, *text("Goodbye", "!")], source="model:1", attempt=2)
    second = filt.filter(await storage.read_events("r", offset=2))
    assert [(e.payload.get("text", e.type), retry) for e, retry in second] == [("Goodbye", True), ("!", False)]
    assert [e.payload.get("text", e.type) for e, _ in first] == ["step-start", "Hel"]


async def test_a_reader_that_was_shown_nothing_of_a_lost_attempt_is_not_told_of_a_retry(storage: Storage) -> None:
    await storage.append_events("r", text("Hel"), source="model:1", attempt=1)
    await storage.append_events("r", text("Hello"), source="model:1", attempt=2)
    assert [(s.event.payload["text"], s.retry) for s in await read(storage, "r")] == [("Hello", False)]


async def test_a_retry_repeating_more_than_is_remembered_is_shown_from_there_marked_as_a_retry(
    storage: Storage,
) -> None:
    # The first ECHO_LIMIT events shown are remembered: past them, a repeat cannot be told from new text, so the
    # rest is shown, marked, rather than passed over unmarked or shown twice unmarked.
    filt = AttemptFilter()
    words = [f"w{n} " for n in range(AttemptFilter.ECHO_LIMIT + 10)]
    await storage.append_events("r", text(*words), source="model:1", attempt=1)
    first = filt.filter(await storage.read_events("r"))
    await storage.append_events("r", text(*words, "end"), source="model:1", attempt=2)
    second = filt.filter(await storage.read_events("r", offset=len(words)))
    assert len(first) == len(words)
    assert [(e.payload["text"], retry) for e, retry in second][:2] == [
        (f"w{AttemptFilter.ECHO_LIMIT} ", True),
        (f"w{AttemptFilter.ECHO_LIMIT + 1} ", False),
    ]
    assert second[-1][0].payload["text"] == "end"


async def test_a_retry_lost_while_it_repeated_leaves_the_next_one_to_repeat_all_that_was_shown(
    storage: Storage,
) -> None:
    filt = AttemptFilter()
    step = text("a", "b", "c", "d")
    await storage.append_events("r", step, source="model:1", attempt=1)
    first = filt.filter(await storage.read_events("r"))
    await storage.append_events("r", step[:2], source="model:1", attempt=2)  # repeated two, then lost
    second = filt.filter(await storage.read_events("r", offset=4))
    await storage.append_events("r", [*step, *text("e")], source="model:1", attempt=3)
    third = filt.filter(await storage.read_events("r", offset=6))
    live = [e.payload["text"] for e, _ in first + second + third]
    assert live == ["a", "b", "c", "d", "e"] == [s.event.payload["text"] for s in await read(storage, "r")]
    assert not any(retry for _, retry in first + second + third)
