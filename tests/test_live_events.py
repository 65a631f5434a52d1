"""Live reading of the event log: a reader is woken by an append (from this process or another: SQLite's
`data_version`, PostgreSQL's LISTEN/NOTIFY) instead of polling, and a model's delta is written while the model
still streams, without one transaction per token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
from temporalio.testing import ActivityEnvironment

from keel.activities import AgentActivities
from keel.app import Agent, App
from keel.client import run_events
from keel.client.run_events import follow
from keel.model_providers import ChatModel, ModelRequest, ModelResponse
from keel.model_providers.base import OnDelta
from keel.protocol import EventRecord, MessageRecord
from keel.storage import Storage, open_storage
from keel.storage.postgres import PostgresStorage
from keel.workflows.contracts import ModelStepInput, PendingWrites


@pytest.fixture
async def two_stores(store_url: str) -> AsyncIterator[tuple[Storage, Storage]]:
    """Two stores on one database, each with its own connections: what a worker and an API process have."""
    reader, writer = open_storage(store_url), open_storage(store_url)
    await writer.init()
    yield reader, writer
    await reader.close()
    await writer.close()


@pytest.fixture
def no_backstop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that is never woken waits a minute: only a wake-up gets it the next event in time."""
    monkeypatch.setattr(run_events, "WATCHED_WAIT_SECONDS", 60.0)
    monkeypatch.setattr(run_events, "IDLE_CHECK_SECONDS", 60.0)


def finish() -> list[EventRecord]:
    return [EventRecord(type="finish")]


async def next_event(events: AsyncIterator[run_events.Shown]) -> EventRecord:
    async with asyncio.timeout(10):
        return (await anext(events)).event


async def test_a_reader_is_woken_by_another_connections_append(
    two_stores: tuple[Storage, Storage], no_backstop: None
) -> None:
    reader, writer = two_stores
    followed = follow(reader, "r")
    first = asyncio.ensure_future(next_event(followed))
    await asyncio.sleep(0.2)  # the reader has read the empty log and waits
    assert not first.done()
    await writer.append_events("r", [EventRecord(type="start")])
    assert (await first).type == "start"
    await writer.append_events("r", finish())
    assert (await next_event(followed)).type == "finish"


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_a_reader_gets_its_listener_back_after_postgres_drops_it(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader, writer = PostgresStorage(store_url), PostgresStorage(store_url)
    await writer.init()
    try:
        monkeypatch.setattr(run_events, "WATCHED_WAIT_SECONDS", 0.2)
        followed = follow(reader, "r")
        first = asyncio.ensure_future(next_event(followed))
        await asyncio.sleep(0.2)
        listener = reader._listener
        assert listener is not None
        admin = await asyncpg.connect(store_url)
        try:
            await admin.execute("SELECT pg_terminate_backend($1)", listener.get_server_pid())
        finally:
            await admin.close()
        await writer.append_events("r", [EventRecord(type="start")])
        assert (await first).type == "start"  # the backstop read, while the listener was down
        async with asyncio.timeout(10):
            while reader._listener is None or reader._listener is listener:
                await asyncio.sleep(0.05)
        monkeypatch.setattr(run_events, "WATCHED_WAIT_SECONDS", 60.0)
        monkeypatch.setattr(run_events, "IDLE_CHECK_SECONDS", 60.0)
        nxt = asyncio.ensure_future(next_event(followed))
        await asyncio.sleep(0.5)  # past the backstop the reader was waiting on; now only a wake-up will do
        await writer.append_events("r", finish())
        assert (await nxt).type == "finish"
    finally:
        await reader.close()
        await writer.close()


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_a_listener_that_silently_stops_hearing_is_replaced(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listener connection can die without a word (no FIN: a dropped route, a frozen peer), or stop
    listening. The store pings itself through it while readers wait, and replaces it when no answer comes."""
    from keel.storage.postgres import events as pg_events

    monkeypatch.setattr(pg_events, "LISTENER_CHECK_SECONDS", 0.5)
    reader, writer = PostgresStorage(store_url), PostgresStorage(store_url)
    await writer.init()
    try:
        monkeypatch.setattr(run_events, "WATCHED_WAIT_SECONDS", 0.2)
        followed = follow(reader, "r")
        first = asyncio.ensure_future(next_event(followed))
        await asyncio.sleep(0.3)
        listener = reader._listener
        assert listener is not None
        await listener.execute("UNLISTEN *")  # alive, answering, and deaf
        async with asyncio.timeout(10):
            while reader._listener is None or reader._listener is listener:
                await asyncio.sleep(0.05)
        assert listener.is_closed()
        monkeypatch.setattr(run_events, "WATCHED_WAIT_SECONDS", 60.0)
        monkeypatch.setattr(run_events, "IDLE_CHECK_SECONDS", 60.0)
        await asyncio.sleep(0.5)  # past the backstop the reader was waiting on; now only a wake-up will do
        await writer.append_events("r", [EventRecord(type="start")])
        assert (await asyncio.wait_for(first, 5)).type == "start"
    finally:
        await reader.close()
        await writer.close()


class HeldModel(ChatModel):
    """Streams `Hel`, then holds until released, then `lo`; or, with `tokens`, that many `x` deltas (letting
    the loop run between them, as a network stream does), then holds, then ends."""

    model_id = "test/held"

    def __init__(self, tokens: int = 0) -> None:
        self.release = asyncio.Event()
        self._tokens = tokens

    async def generate(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        if self._tokens:
            for _ in range(self._tokens):
                await on_delta("x")
                await asyncio.sleep(0)
            await self.release.wait()
            return ModelResponse(text="x" * self._tokens)
        await on_delta("Hel")
        await self.release.wait()
        await on_delta("lo")
        return ModelResponse(text="Hello")


def step_input() -> ModelStepInput:
    return ModelStepInput(
        run_id="r1",
        agent_id="a",
        thread_id="t1",
        resource_id="u1",
        step=1,
        message_id="r1-m2",
        writes=PendingWrites(messages=[MessageRecord(id="r1-m1", role="user", content="hi")]),
    )


async def test_a_delta_is_in_the_log_while_the_model_still_streams(storage: Storage, no_backstop: None) -> None:
    model = HeldModel()
    activities = AgentActivities(App.of(Agent(id="a", model=model)), storage)
    step = asyncio.ensure_future(ActivityEnvironment().run(activities.model_step, step_input()))
    async with asyncio.timeout(10):
        async for shown in follow(storage, "r1"):
            if shown.event.type == "text-delta":
                assert shown.event.payload["text"] == "Hel"
                break
    assert not step.done()  # the model has not gone on: it waits for this reader
    model.release.set()
    assert (await step).text == "Hello"


async def test_deltas_streamed_back_to_back_are_all_written_while_the_model_holds(
    storage: Storage, no_backstop: None
) -> None:
    """The deltas that come while a write is under way are written by the next one, not left for the end; and
    together: a row per write, not per token."""
    model = HeldModel(tokens=500)
    activities = AgentActivities(App.of(Agent(id="a", model=model)), storage)
    step = asyncio.ensure_future(ActivityEnvironment().run(activities.model_step, step_input()))
    text = ""
    async with asyncio.timeout(10):
        async for shown in follow(storage, "r1"):
            if shown.event.type == "text-delta":
                text += shown.event.payload["text"]
                if len(text) == 500:
                    break
    assert not step.done()  # all of it is in the log while the model still holds
    model.release.set()
    await step
    deltas = [e for e in await storage.read_events("r1") if e.type == "text-delta"]
    assert "".join(e.payload["text"] for e in deltas) == "x" * 500
    assert len(deltas) < 100  # one row per write, not per token


async def test_what_a_run_wrote_just_before_it_suspended_is_shown(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a loaded server makes likely: the reader reads nothing, the run writes its approval chunk and
    suspends, then the reader's idle check sees it suspended. The chunk must still be shown."""
    monkeypatch.setattr(run_events, "IDLE_CHECK_SECONDS", 0.0)

    async def suspended_meanwhile() -> bool:
        await storage.append_events("r", [EventRecord(type="tool-call-approval", payload={"toolCallId": "c1"})])
        return True

    shown = [s.event.type async for s in follow(storage, "r", idle_check=suspended_meanwhile)]
    assert shown == ["tool-call-approval"]
