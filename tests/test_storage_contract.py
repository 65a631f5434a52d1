"""The storage contract, run against every backend: SQLite on a temp file and a throwaway PostgreSQL server.

Each test gets an empty store: a fresh SQLite file, or a fresh PostgreSQL database on the session's server.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from keel.protocol import EventRecord, TextPart, ToolCallPart, ToolResultPart
from keel.storage import (
    PostgresStorage,
    SQLiteStorage,
    StepAnswer,
    StepRecord,
    Storage,
    StorageConfigError,
    StoredMessage,
    ThreadExists,
    ThreadNotFound,
    open_storage,
)

REPO = Path(__file__).resolve().parents[1]

# Appends events one call at a time from a separate interpreter: argv = url, run_id, count.
APPEND_SCRIPT = """
import asyncio, sys
from keel.storage import EventRecord, open_storage

async def main(url, run_id, count):
    storage = open_storage(url)
    try:
        await storage.init()
        for i in range(count):
            await storage.append_events(run_id, [EventRecord(type="child", payload={"i": i})], source="child")
    finally:
        await storage.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


@pytest.fixture
def url(store_url: str) -> str:
    """A storage URL naming an empty store (SQLite, then PostgreSQL)."""
    return store_url


@pytest.fixture
async def storage(url: str) -> AsyncIterator[Storage]:
    store = open_storage(url)
    await store.init()
    try:
        yield store
    finally:
        await store.close()


def at(seconds: int) -> datetime:
    return datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


def message(msg_id: str, *, thread_id: str = "t1", created_at: datetime | None = None) -> StoredMessage:
    return StoredMessage(
        id=msg_id,
        thread_id=thread_id,
        resource_id="user-1",
        role="user",
        content=f"text of {msg_id}",
        run_id="run-1",
        created_at=created_at or at(0),
    )


def ids(messages: list[StoredMessage]) -> list[str]:
    return [m.id for m in messages]


# --- threads ----------------------------------------------------------------------------------------------


async def test_init_is_idempotent_and_safe_from_several_instances(storage: Storage, url: str) -> None:
    others = [open_storage(url) for _ in range(3)]
    try:
        await asyncio.gather(storage.init(), *(o.init() for o in others))
    finally:
        for other in others:
            await other.close()
    assert await storage.list_threads() == ([], 0)


async def test_create_thread_is_idempotent_and_returns_the_existing_thread(storage: Storage) -> None:
    first = await storage.create_thread("t1", "user-1", title="First", metadata={"k": "v"})

    again = await storage.create_thread("t1", "user-2", title="Other", metadata={"k": "other"})

    assert again == first
    assert (first.id, first.resource_id, first.title, first.metadata) == ("t1", "user-1", "First", {"k": "v"})
    assert first.created_at.tzinfo is not None
    assert await storage.get_thread("t1") == first


async def test_a_thread_created_as_new_is_created_by_one_of_many_racing_and_refused_to_the_rest(
    storage: Storage,
) -> None:
    """A route that makes a thread of the caller's id (create, clone, a conversation) must not take one that
    exists: before, each asked `get_thread` first and then created, so 2 of 20 racing clones both copied their
    messages into the one new thread."""
    created = await asyncio.gather(
        *(storage.create_thread("t1", f"user-{i}", title=f"by {i}", new=True) for i in range(10)),
        return_exceptions=True,
    )
    [won] = [c for c in created if not isinstance(c, BaseException)]
    assert all(isinstance(c, ThreadExists) and "t1" in str(c) for c in created if c is not won)
    assert await storage.get_thread("t1") == won


async def test_get_thread_returns_none_for_a_missing_thread(storage: Storage) -> None:
    assert await storage.get_thread("nope") is None


async def test_update_thread_changes_title_and_metadata(storage: Storage) -> None:
    created = await storage.create_thread("t1", "user-1", title="Old", metadata={"a": 1})

    updated = await storage.update_thread("t1", title="New", metadata={"b": [1, 2]})

    assert (updated.title, updated.metadata, updated.resource_id) == ("New", {"b": [1, 2]}, "user-1")
    assert updated.created_at == created.created_at
    assert updated.updated_at >= created.updated_at
    assert await storage.get_thread("t1") == updated
    moved = await storage.update_thread("t1", resource_id="user-2")
    assert (moved.title, moved.metadata, moved.resource_id) == ("New", {"b": [1, 2]}, "user-2")


async def test_updating_a_missing_thread_raises_thread_not_found(storage: Storage) -> None:
    with pytest.raises(ThreadNotFound):
        await storage.update_thread("nope", title="x")


async def test_list_threads_filters_by_resource_and_pages(storage: Storage) -> None:
    for i in range(5):
        await storage.create_thread(f"a{i}", "user-a")
    await storage.create_thread("b0", "user-b")

    threads, total = await storage.list_threads("user-a", offset=1, limit=2)

    assert total == 5
    assert [t.id for t in threads] == ["a3", "a2"]  # newest first
    everything, grand_total = await storage.list_threads()
    assert grand_total == 6
    assert [t.id for t in everything] == ["b0", "a4", "a3", "a2", "a1", "a0"]
    assert await storage.list_threads("user-a", offset=10) == ([], 5)
    assert await storage.list_threads("nobody") == ([], 0)


async def test_delete_thread_deletes_its_messages(storage: Storage) -> None:
    await storage.create_thread("t1", "user-1")
    await storage.create_thread("t2", "user-1")
    await storage.save_messages([message("m1"), message("m2"), message("keep", thread_id="t2")])

    assert await storage.delete_thread("t1") is True

    assert await storage.get_thread("t1") is None
    assert await storage.list_messages("t1") == ([], 0)
    assert ids(await storage.get_messages(["m1", "m2", "keep"])) == ["keep"]
    assert await storage.delete_thread("t1") is False


# --- messages ---------------------------------------------------------------------------------------------


async def test_saving_the_same_message_twice_keeps_one_copy(storage: Storage) -> None:
    await storage.create_thread("t1", "user-1")

    await storage.save_messages([message("m1")])
    await storage.save_messages([message("m1"), message("m2")])
    await storage.save_messages([message("m2"), message("m2")])

    messages, total = await storage.list_messages("t1")
    assert total == 2
    assert ids(messages) == ["m1", "m2"]


async def test_replacing_a_message_changes_its_content_and_keeps_its_place(storage: Storage) -> None:
    await storage.create_thread("t1", "user-1")
    await storage.save_messages([message("m1"), message("m2"), message("m3")])

    retried = message("m2").model_copy(update={"content": "second attempt", "created_at": at(99)})
    await storage.save_messages([retried], replace=True)
    await storage.save_messages([message("m3").model_copy(update={"content": "ignored"})])

    messages, total = await storage.list_messages("t1")
    assert (ids(messages), total) == (["m1", "m2", "m3"], 3)
    assert [m.content for m in messages] == ["text of m1", "second attempt", "text of m3"]


async def test_messages_come_back_in_insertion_order(storage: Storage) -> None:
    await storage.create_thread("t1", "user-1")
    # Equal timestamps fall back to insertion order, which is not id order here.
    await storage.save_messages([message(i, created_at=at(10)) for i in ("z", "b", "y")])
    await storage.save_messages([message("a", created_at=at(10)), message("early", created_at=at(5))])

    messages, total = await storage.list_messages("t1")

    assert total == 5
    assert ids(messages) == ["early", "z", "b", "y", "a"]
    page, page_total = await storage.list_messages("t1", offset=1, limit=3)
    assert (ids(page), page_total) == (["z", "b", "y"], 5)


@pytest.mark.parametrize("count", [31, 32, 33, 100])
async def test_a_whole_thread_comes_back_whole_and_in_order_short_or_long(storage: Storage, count: int) -> None:
    """SQLite reads a thread of up to 32 messages on the caller's loop and a longer one on its thread: both
    whole, in order, with the right total."""
    await storage.create_thread("t1", "user-1")
    made = [f"m{n:03d}" for n in range(count)]
    await storage.save_messages([message(m, created_at=at(n)) for n, m in enumerate(made)])

    messages, total = await storage.list_messages("t1")

    assert (ids(messages), total) == (made, count)


async def test_saving_a_message_to_a_missing_thread_raises_thread_not_found(storage: Storage) -> None:
    await storage.create_thread("t1", "user-1")

    with pytest.raises(ThreadNotFound) as raised:
        await storage.save_messages([message("m1"), message("m2", thread_id="missing")])

    assert raised.value.thread_id == "missing"
    assert await storage.get_messages(["m1", "m2"]) == []  # the batch is all or nothing


async def test_saving_messages_touches_the_thread_updated_at(storage: Storage) -> None:
    created = await storage.create_thread("t1", "user-1")
    await asyncio.sleep(0.01)

    await storage.save_messages([message("m1")])

    thread = await storage.get_thread("t1")
    assert thread is not None
    assert thread.updated_at > created.updated_at


async def test_get_messages_follows_the_order_of_ids_and_skips_unknown_ones(storage: Storage) -> None:
    await storage.create_thread("t1", "user-1")
    await storage.save_messages([message("m1"), message("m2"), message("m3")])

    found = await storage.get_messages(["m3", "unknown", "m1"])

    assert ids(found) == ["m3", "m1"]
    assert found[1] == message("m1")
    assert await storage.get_messages([]) == []


async def test_delete_messages_returns_how_many_existed(storage: Storage) -> None:
    await storage.create_thread("t1", "user-1")
    await storage.save_messages([message("m1"), message("m2"), message("m3")])

    assert await storage.delete_messages(["m1", "m3", "unknown", "m1"]) == 2

    assert ids((await storage.list_messages("t1"))[0]) == ["m2"]
    assert await storage.delete_messages(["m1"]) == 0


async def test_content_parts_round_trip(storage: Storage) -> None:
    await storage.create_thread("t1", "user-1")
    assistant = StoredMessage(
        id="m1",
        thread_id="t1",
        resource_id="user-1",
        role="assistant",
        content=[
            TextPart(text="Let me look that up."),
            ToolCallPart(tool_call_id="c1", tool_name="search", args={"q": "keel", "n": 3}),
        ],
        run_id="run-1",
        created_at=at(1),
    )
    tool = StoredMessage(
        id="m2",
        thread_id="t1",
        resource_id="user-1",
        role="tool",
        content=[
            ToolResultPart(tool_call_id="c1", tool_name="search", result={"hits": [1, 2.5, None, "x"]}, is_error=False),
            ToolResultPart(tool_call_id="c2", tool_name="rm", result="denied", is_error=True, denied=True),
        ],
        created_at=at(2),
    )

    await storage.save_messages([assistant, tool])

    assert (await storage.list_messages("t1"))[0] == [assistant, tool]


# --- run events -------------------------------------------------------------------------------------------


async def test_appended_events_keep_type_payload_source_and_attempt(storage: Storage) -> None:
    offsets = await storage.append_events(
        "run-1",
        [EventRecord(type="text-delta", payload={"text": "hi", "n": [1, {"x": None}]}), EventRecord(type="finish")],
        source="model:2",
        attempt=3,
    )

    events = await storage.read_events("run-1")

    assert offsets == [0, 1]
    assert [(e.run_id, e.offset, e.type, e.source, e.attempt) for e in events] == [
        ("run-1", 0, "text-delta", "model:2", 3),
        ("run-1", 1, "finish", "model:2", 3),
    ]
    assert events[0].payload == {"text": "hi", "n": [1, {"x": None}]}
    assert events[1].payload == {}
    assert await storage.append_events("run-1", []) == []
    assert await storage.read_events("other-run") == []


async def test_write_saves_messages_and_events_together(storage: Storage) -> None:
    await storage.create_thread("t1", "user-1")
    used = await storage.write(
        "run-1", messages=[message("m1")], events=[EventRecord(type="a"), EventRecord(type="b")], source="s", attempt=2
    )
    assert used == 2
    assert ids((await storage.list_messages("t1"))[0]) == ["m1"]
    assert [(e.type, e.source, e.attempt) for e in await storage.read_events("run-1")] == [
        ("a", "s", 2),
        ("b", "s", 2),
    ]


async def test_a_nul_character_in_any_text_is_stored_never_a_failed_write(storage: Storage, url: str) -> None:
    """A command's output may hold NUL bytes (`find -print0`, a binary file), and so the tool result, message
    and events a run stores. SQLite keeps the character; PostgreSQL's text and jsonb hold none, so it is stored
    as U+FFFD there. Before, each such write failed on PostgreSQL ("invalid byte sequence for encoding UTF8:
    0x00"), and with it the step that made it."""
    kept = "\ufffd" if url.startswith("postgres") else "\x00"
    said, escaped = "a\x00b", "a\\u0000b"  # the character, and the six characters JSON writes for it
    await storage.create_thread("t1", "user-1", title=said, metadata={said: said, "text": escaped})
    stored = message("m1").model_copy(update={"content": [TextPart(text=said)]})
    await storage.write("run-1", messages=[stored], events=[EventRecord(type="tool-result", payload={"out": said})])
    thread = await storage.get_thread("t1")
    assert thread is not None and thread.title == f"a{kept}b"
    assert thread.metadata == {f"a{kept}b": f"a{kept}b", "text": escaped}
    [back] = await storage.get_messages(["m1"])
    assert back.content == [TextPart(text=f"a{kept}b")]
    [event] = await storage.read_events("run-1")
    assert event.payload == {"out": f"a{kept}b"}


async def test_write_to_a_missing_thread_writes_nothing(storage: Storage) -> None:
    with pytest.raises(ThreadNotFound):
        await storage.write("run-1", messages=[message("m1", thread_id="nope")], events=[EventRecord(type="a")])
    assert await storage.read_events("run-1") == []


async def test_renumbered_writes_come_after_the_attempts_a_source_already_wrote(storage: Storage) -> None:
    first = await storage.write("run-1", events=[EventRecord(type="a")], source="model:1", attempt=1, renumber=True)
    again = await storage.write("run-1", events=[EventRecord(type="a")], source="model:1", attempt=1, renumber=True)
    retry = await storage.write("run-1", events=[EventRecord(type="a")], source="model:1", attempt=5, renumber=True)
    other = await storage.write("run-1", events=[EventRecord(type="a")], source="model:2", attempt=1, renumber=True)
    elsewhere = await storage.write("run-2", events=[EventRecord(type="a")], source="model:1", attempt=1, renumber=True)
    assert (first, again, retry, other, elsewhere) == (1, 2, 5, 1, 1)


async def test_read_events_from_an_offset_returns_the_rest_in_order(storage: Storage) -> None:
    for i in range(5):
        await storage.append_events("run-1", [EventRecord(type="e", payload={"i": i})])
    await storage.append_events("run-2", [EventRecord(type="other")])

    rest = await storage.read_events("run-1", offset=2)

    assert [(e.offset, e.payload["i"]) for e in rest] == [(2, 2), (3, 3), (4, 4)]
    assert [e.offset for e in await storage.read_events("run-1", offset=1, limit=2)] == [1, 2]
    assert await storage.read_events("run-1", offset=5) == []


async def test_concurrent_appenders_get_dense_unique_offsets(storage: Storage, url: str) -> None:
    # A second instance on the same store: for SQLite a second connection to the file, so only the file
    # lock keeps the two apart; for PostgreSQL a second pool.
    other = open_storage(url)
    try:

        async def appender(store: Storage, task: int) -> list[int]:
            offsets: list[int] = []
            for i in range(20):
                batch = [EventRecord(type="e", payload={"task": task, "i": i})] * (1 + i % 2)
                offsets += await store.append_events("run-1", batch, source=f"task:{task}")
            return offsets

        results = await asyncio.gather(*(appender(storage if t % 2 else other, t) for t in range(10)))
    finally:
        await other.close()

    events = await storage.read_events("run-1")
    total = sum(len(r) for r in results)
    assert total == 10 * 30
    assert sorted(o for r in results for o in r) == list(range(total))
    assert [e.offset for e in events] == list(range(total))
    for task, offsets in enumerate(results):
        assert offsets == sorted(offsets)
        mine = [e.payload["i"] for e in events if e.payload["task"] == task]
        assert mine == sorted(mine)  # each appender's events stay in its own order


async def test_events_written_by_another_process_are_readable(storage: Storage, url: str) -> None:
    await storage.append_events("run-1", [EventRecord(type="parent")])

    async def parent_appends() -> None:
        for _ in range(30):
            await storage.append_events("run-1", [EventRecord(type="parent")])

    child = asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", APPEND_SCRIPT, url, "run-1", "30"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    result, _ = await asyncio.gather(child, parent_appends())

    assert result.returncode == 0, result.stderr
    events = await storage.read_events("run-1")
    assert [e.offset for e in events] == list(range(61))
    child_events = [e for e in events if e.type == "child"]
    assert [e.payload["i"] for e in child_events] == list(range(30))
    assert {e.source for e in child_events} == {"child"}


# --- open_storage -----------------------------------------------------------------------------------------


def test_open_storage_maps_sqlite_urls_to_relative_and_absolute_paths() -> None:
    relative = open_storage("sqlite:///data/keel.db")
    absolute = open_storage("sqlite:////var/lib/keel.db")

    assert isinstance(relative, SQLiteStorage) and relative.path == Path("data/keel.db")
    assert isinstance(absolute, SQLiteStorage) and absolute.path == Path("/var/lib/keel.db")


def test_open_storage_reads_keel_storage_url_then_defaults_to_the_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KEEL_STORAGE_URL", "postgres://u@db/keel")
    from_env = open_storage()
    monkeypatch.delenv("KEEL_STORAGE_URL")
    monkeypatch.delenv("KEEL_DATA_DIR", raising=False)
    default = open_storage()
    monkeypatch.setenv("KEEL_DATA_DIR", str(tmp_path / "data"))
    in_data_dir = open_storage()

    assert isinstance(from_env, PostgresStorage) and from_env.dsn == "postgres://u@db/keel"
    assert isinstance(default, SQLiteStorage) and default.path == Path.cwd() / ".keel" / "keel.db"
    assert isinstance(in_data_dir, SQLiteStorage) and in_data_dir.path == tmp_path / "data" / "keel.db"


def test_open_storage_maps_postgresql_urls_to_postgres_storage() -> None:
    store = open_storage("postgresql://u:p@localhost:5432/keel")

    assert isinstance(store, PostgresStorage)


@pytest.mark.parametrize("url", ["mysql://u@h/db", "sqlite://relative.db", "sqlite:///", "keel.db"])
def test_open_storage_rejects_urls_it_cannot_serve(url: str) -> None:
    with pytest.raises(StorageConfigError, match="URL"):
        open_storage(url)


async def test_sqlite_creates_the_parent_directory_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "keel.db"
    store = SQLiteStorage(path)
    try:
        await store.init()
    finally:
        await store.close()

    assert path.exists()
    assert path.read_bytes()[18:20] == b"\x02\x02"  # file format bytes 2/2 mean WAL


# --- runs ---------------------------------------------------------------------------------------------------


async def test_a_run_id_belongs_to_the_first_execution_that_claims_it(storage: Storage) -> None:
    assert await storage.claim_run("run-1", "exec-a") == "exec-a"
    assert await storage.claim_run("run-1", "exec-a") == "exec-a"  # a retried step
    assert await storage.claim_run("run-1", "exec-b") == "exec-a"  # a second run under the same id


async def test_beginning_a_run_claims_it_and_creates_its_thread_in_one_write(storage: Storage) -> None:
    assert await storage.begin_run("run-1", "exec-a", "t1", "user-1") == "exec-a"
    thread = await storage.get_thread("t1")
    assert thread is not None and thread.resource_id == "user-1"
    assert await storage.begin_run("run-1", "exec-a", "t1", "user-1") == "exec-a"
    assert await storage.begin_run("run-1", "exec-b", "t2", "user-2") == "exec-a"
    assert await storage.get_thread("t2") is None  # the refused run creates nothing


async def test_beginning_a_run_announces_it_on_the_log_it_names_and_wakes_its_readers(storage: Storage) -> None:
    async with storage.watch_events("thread-log") as watch:
        await storage.begin_run("run-1", "exec-a", "t1", "user-1", announce="thread-log")
        await asyncio.wait_for(watch.wait(60), 10)  # woken by the append, not by the wait running out
    await storage.begin_run("run-2", "exec-c", "t1", "user-1", announce="thread-log")
    await storage.begin_run("run-1", "exec-b", "t1", "user-1", announce="thread-log")  # refused: not announced
    events = await storage.read_events("thread-log")
    assert [(e.type, e.payload) for e in events] == [
        ("run-start", {"runId": "run-1"}),
        ("run-start", {"runId": "run-2"}),
    ]


# --- steps ----------------------------------------------------------------------------------------------------


async def test_a_step_begun_again_finds_its_answer_its_stored_results_and_counts_tool_starts(storage: Storage) -> None:
    await storage.create_thread("t1", "user-1")
    first = await storage.begin_step("run-1", answer_id="run-1-m2", tool_ids=["run-1-s1-a", "run-1-s1-b"])
    assert first == StepRecord(attempts={"run-1-s1-a": 1, "run-1-s1-b": 1})

    # Tool a stores its result; then the step is executed again from scratch (its workflow task was lost).
    await storage.write("run-1", messages=[message("run-1-s1-a")])
    again = await storage.begin_step("run-1", answer_id="run-1-m2", tool_ids=["run-1-s1-a", "run-1-s1-b"])
    assert list(again.results) == ["run-1-s1-a"] and again.answer is None
    assert again.attempts == {"run-1-s1-b": 2}

    # The model answer, stored with its message in one write, is what a later execution gets.
    answer = {"messageId": "run-1-m2", "text": "done", "toolCalls": [{"toolCallId": "c", "toolName": "x"}]}
    await storage.write("run-1", messages=[message("run-1-m2")], answer=StepAnswer("run-1-m2", answer))
    assert (await storage.begin_step("run-1", answer_id="run-1-m2")).answer == answer
    assert (await storage.begin_step("run-2", answer_id="run-1-m2")).answer is None  # another run's step
    # A re-execution that found no answer stores its own: the last one wins.
    await storage.write("run-1", answer=StepAnswer("run-1-m2", {**answer, "text": "redone"}))
    stored = (await storage.begin_step("run-1", answer_id="run-1-m2")).answer
    assert stored is not None and stored["text"] == "redone"


async def test_begin_step_without_tools_writes_nothing(storage: Storage) -> None:
    assert await storage.begin_step("run-1", answer_id="run-1-m2") == StepRecord()
    assert await storage.begin_step("run-1", tool_ids=["k"]) == StepRecord(attempts={"k": 1})
    assert await storage.begin_step("run-1", tool_ids=["k", "k"]) == StepRecord(attempts={"k": 2})
