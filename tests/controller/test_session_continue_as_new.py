"""A session continues as new when Temporal suggests it, between turns: its mode, state, grants and thread go
on in the new execution, its log's offsets go on where they were, and readers fold from the display-state
snapshot it stored first."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from keel import AgentController
from keel.client import KeelClient
from keel.client import controller as client_side
from keel.client.connection import connect
from keel.client.controller import SessionError
from keel.client.devserver import DevServer, DevServerConfig
from keel.storage import Storage
from keel.worker import build_worker
from keel.workflows import agent_session as session_side
from tests.conftest import free_port
from tests.controller.apps import app, controller
from tests.controller.conftest import collect
from tests.controller.test_sessions import wait_pending
from tests.test_continue_as_new import server_suggesting_continue_as_new


async def attached(client: Client, storage: Storage, task_queue: str) -> AgentController:
    """The test controller, bound to this server's client, the test's storage and task queue."""
    ctl = AgentController.__new__(AgentController)
    ctl.__dict__.update(controller.__dict__)
    ctl._client = None
    return await ctl.init(KeelClient(client, task_queue=task_queue, app=app), storage)


async def test_a_session_continues_as_new_and_keeps_everything(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    async with server_suggesting_continue_as_new(tmp_path) as client:
        async with build_worker(client, app, storage, task_queue=task_queue):
            ctl = await attached(client, storage, task_queue)
            session = await ctl.create_session(f"can-{uuid.uuid4().hex[:6]}")
            await session.mode.switch("build")
            await session.state.set({"project": "carried"})
            await session.send_message('tool save_note {"text": "granted"}')
            [call] = await wait_pending(session)
            await session.respond_to_tool_approval(call.tool_call_id, "always_allow_category")
            await session.settled()  # else the next message goes into this turn
            for i in range(3):
                await session.send_message(f"text turn {i}")
            executions = [e async for e in client.list_workflows(f"WorkflowId='{session.id}'")]
            assert len(executions) >= 2, "the session never continued as new"
            first = min(executions, key=lambda e: e.start_time)
            last_event = (await client.get_workflow_handle(session.id, run_id=first.run_id).fetch_history()).events[-1]
            assert last_event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW

            snapshot = await session.snapshot()
            assert (snapshot.mode_id, snapshot.state["project"]) == ("build", "carried")
            assert snapshot.permissions.granted_categories == ["edit"] and snapshot.snapshot_offset is not None
            await session.send_message('tool save_note {"text": "still granted"}')
            assert (await session.settled()).pending == []
            offsets, ends = [], 0
            async for event in session.events(offset=0, display_state=False):
                offsets.append(event["offset"])
                ends += event["type"] == "agent_end"
                if ends == 5:
                    break
            assert offsets == sorted(set(offsets))  # one log across executions, each event once
            shown = await session.display_state.get()
            assert shown["isRunning"] is False and shown["pendingApprovals"] == {}


async def test_a_message_sent_again_under_its_id_after_a_continue_as_new_is_still_one_send(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    # Temporal answers an update made again under its id only within one execution: the session remembers the
    # ids it was sent, so a client that sends again after the session continued as new does not send twice.
    async with server_suggesting_continue_as_new(tmp_path) as client:
        async with build_worker(client, app, storage, task_queue=task_queue):
            ctl = await attached(client, storage, task_queue)
            session = await ctl.create_session(f"once-{uuid.uuid4().hex[:6]}")
            first = await session.send_message("text once", message_id="m-once")
            for i in range(10):  # until Temporal suggests continuing as new and the session does
                if len([e async for e in client.list_workflows(f"WorkflowId='{session.id}'")]) >= 2:
                    break
                await session.send_message(f"text turn {i}")
            assert len([e async for e in client.list_workflows(f"WorkflowId='{session.id}'")]) >= 2
            again = await session.send_message("text once", message_id="m-once")
            assert again == first
            said = [m["content"] for m in await session.thread.list_messages() if m["role"] == "user"]
            assert said.count("text once") == 1


async def test_a_session_whose_queue_never_empties_still_continues_as_new_between_turns(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    """A goal queues its next turn as each turn ends (and so does a client that always sends a follow-up before
    the turn ends): the queue is never empty between turns. The session still continues as new when Temporal
    suggests it, carrying what waits, so its history stays bounded however long the run of turns (before, it grew
    turn after turn until the queue emptied, towards Temporal's limit of 51,200 events, where a session is
    terminated). A client waiting for a turn across the continue-as-new gets its answer from the new execution."""
    async with server_suggesting_continue_as_new(tmp_path) as client:
        async with build_worker(client, app, storage, task_queue=task_queue):
            ctl = await attached(client, storage, task_queue)
            session = await ctl.create_session(f"busy-{uuid.uuid4().hex[:6]}")
            await session.goal.set("keep echoing", max_runs=6)
            await session.send_message("text start", wait=False)
            follow_ups = [await session.follow_up(f"text follow-up {i}") for i in range(3)]
            last = await session.settled(follow_ups[-1].run_id)  # waits across the continues-as-new
            assert last.pending == []
            while (await session.snapshot()).running or (await session.snapshot()).queued:
                await session.settled()
            executions = [e async for e in client.list_workflows(f"WorkflowId='{session.id}'")]
            turns_per_execution, asked_again = [], 0
            for execution in executions:
                history = await client.get_workflow_handle(session.id, run_id=execution.run_id).fetch_history()
                started = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
                turns_per_execution.append(sum(e.event_type == started for e in history.events))
                asked_again += sum(
                    e.workflow_execution_update_completed_event_attributes.outcome.failure.application_failure_info.type
                    == session_side.CONTINUING
                    for e in history.events
                    if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
                )
            assert asked_again >= 1  # the `settled` above waited across a continue-as-new, and was answered
            assert sum(turns_per_execution) == 1 + 3 + 5  # the message, the follow-ups, five goal turns
            assert max(turns_per_execution) <= 2, turns_per_execution
            said = [m["content"] for m in await session.thread.list_messages() if m["role"] == "user"]
            sent = [m for m in said if not m.startswith("Continue working toward the goal")]
            assert sent == ["text start", *(f"text follow-up {i}" for i in range(3))] and len(said) == 9
    assert client_side.CONTINUING == session_side.CONTINUING  # the error the client asks again on


async def test_a_message_that_waits_for_its_turn_is_answered_once_that_turn_ends_across_continue_as_new(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    """A send that waits does so in its own update (one update per turn): when the session continues as new
    before the message's turn ends, it answers "not settled yet" and the client asks the new execution."""
    async with server_suggesting_continue_as_new(tmp_path) as client:
        async with build_worker(client, app, storage, task_queue=task_queue):
            ctl = await attached(client, storage, task_queue)
            session = await ctl.create_session(f"wait-{uuid.uuid4().hex[:6]}")
            await session.send_message("text start", wait=False)
            for i in range(3):
                await session.follow_up(f"text follow-up {i}")
            steered = await session.steer("text steered", wait=True)  # its turn comes after the follow-ups
            assert steered.settled is False  # the session continued as new before the turn ran
            messages = await session.thread.list_messages()
            said = [m.get("content") for m in messages]
            assert any(m["role"] == "assistant" for m in messages[said.index("text steered") + 1 :]), (
                "the send returned before its turn ended"
            )
            answers = []
            async for execution in client.list_workflows(f"WorkflowId='{session.id}'"):
                history = await client.get_workflow_handle(session.id, run_id=execution.run_id).fetch_history()
                answers += [
                    e.workflow_execution_update_completed_event_attributes.outcome.success.payloads[0].data
                    for e in history.events
                    if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
                    and e.workflow_execution_update_completed_event_attributes.outcome.HasField("success")
                ]
            waits = [a for a in answers if b'"settled":true' in a or b'"settled":false' in a]
            assert len(waits) == 1 and b'"settled":false' in waits[0], waits


async def test_a_waited_message_adds_one_update_to_the_session_not_two(client: Client, ctl: AgentController) -> None:
    """`send_message` waits for its turn in the `send` update itself: a waited turn adds one update to the
    session's history (before, a `settled` update followed each send)."""
    session = await ctl.create_session(f"one-{uuid.uuid4().hex[:6]}")
    await session.send_message("text warm")
    handle = client.get_workflow_handle(session.id)
    before = len((await handle.fetch_history()).events)
    accepted = await session.send_message("text once more")
    assert accepted.settled is True and (await session.snapshot()).running is False
    added = (await handle.fetch_history()).events[before:]
    updates = [e for e in added if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]
    assert len(updates) == 1


async def test_settled_on_a_turn_whose_unread_message_got_a_turn_waits_for_that_turn_across_continue_as_new(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    """A message delivered into a turn that failed before reading it gets a turn of its own; `settled` on the
    failed turn follows to that turn's end, also when Temporal suggests continuing as new meanwhile."""
    async with server_suggesting_continue_as_new(tmp_path) as client:
        async with build_worker(client, app, storage, task_queue=task_queue):
            ctl = await attached(client, storage, task_queue)
            session = await ctl.create_session(f"fwd-{uuid.uuid4().hex[:6]}")
            await session.state.set({"yolo": True})
            first = await session.send_message("ask")  # waits on ask_user
            assert first.run_id is not None and (await session.snapshot()).pending
            assert (await session.send_message("text unread", wait=False)).delivered
            await session.follow_up("text later")
            await client.get_workflow_handle(first.run_id).terminate("the turn fails unread")
            while (await session.snapshot()).run_id == first.run_id:  # the session saw it end
                await asyncio.sleep(0.02)
            await session.settled(first.run_id)
            messages = await session.thread.list_messages()
            said = [m["content"] for m in messages if m["role"] == "user"]
            assert "text unread" in said
            after = messages[[m.get("content") for m in messages].index("text unread") + 1 :]
            assert any(m["role"] == "assistant" for m in after), "settled returned before the message's turn ended"


@asynccontextmanager
async def server_allowing_updates(tmp_path: Path, updates: int) -> AsyncIterator[Client]:
    """A dev server that takes at most `updates` updates per workflow execution (`history.maxTotalUpdates`)."""
    cfg = DevServerConfig(
        port=free_port(),
        ui_port=free_port(),
        state_dir=tmp_path,
        extra_dynamic_config={"history.maxTotalUpdates": str(updates)},
    )
    server = await DevServer(cfg).start(reuse=False)
    try:
        yield await connect(cfg.address)
    finally:
        server.stop()


async def used_up(session: client_side.Session) -> None:
    """Changes until the session refuses one: its execution has taken all the updates it may."""
    with pytest.raises(SessionError, match="limit on updates") as refused:
        for n in range(10):
            await session.state.set({"n": n})
    assert refused.value.kind == "UpdateLimit"


async def test_a_turns_call_is_still_decided_once_the_session_took_as_many_updates_as_temporal_allows(
    storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    """Temporal refuses an execution's updates past `history.maxTotalUpdates`, and a session continues as new
    only between turns. Past the limit during a turn, a change is refused saying so, and an approval or a decline
    still reaches the turn (the run's own update): the turn does not wait for good."""
    async with server_allowing_updates(tmp_path, 6) as client:
        async with build_worker(client, app, storage, task_queue=task_queue):
            ctl = await attached(client, storage, task_queue)
            session = await ctl.create_session(f"full-{uuid.uuid4().hex[:6]}")
            await session.send_message('tool save_note {"text": "one"}', wait=False)
            [pending] = await wait_pending(session)
            await used_up(session)
            with pytest.raises(SessionError) as unknown:
                await session.respond_to_tool_approval("call_nope", "approve")
            assert unknown.value.kind == "UnknownToolCall"
            await session.respond_to_tool_approval(pending.tool_call_id, "approve")
            with pytest.raises(SessionError) as again:
                await session.respond_to_tool_approval(pending.tool_call_id, "decline")
            assert again.value.kind in ("AlreadyDecided", "UnknownToolCall")  # (the turn may have ended)
            async with asyncio.timeout(30):
                while (snapshot := await session.snapshot()).running or snapshot.pending:
                    await asyncio.sleep(0.1)
                while True:  # the turn over, the session continues as new and takes changes again
                    try:
                        await session.state.set({"after": "the turn"})
                        break
                    except SessionError:
                        await asyncio.sleep(0.1)
            assert (await session.state.get())["after"] == "the turn"
    assert (data_dir / "notes.log").read_text() == "one\n"  # approved: the call ran


async def test_a_turns_question_is_still_answered_once_the_session_took_as_many_updates_as_temporal_allows(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    async with server_allowing_updates(tmp_path, 6) as client:
        async with build_worker(client, app, storage, task_queue=task_queue):
            ctl = await attached(client, storage, task_queue)
            session = await ctl.create_session(f"full-{uuid.uuid4().hex[:6]}")
            await session.state.set({"yolo": True})  # no approval first
            await session.send_message("ask", wait=False)
            [asked] = await wait_pending(session, "suspension")
            await used_up(session)
            with pytest.raises(SessionError, match="does not match its schema") as wrong:
                await session.respond_to_tool_suspension(asked.tool_call_id, {"not": "an answer"})
            assert wrong.value.kind == "InvalidResumeData"
            await session.respond_to_tool_suspension(asked.tool_call_id, "SQLite")
            async with asyncio.timeout(30):
                while (snapshot := await session.snapshot()).running or snapshot.pending:
                    await asyncio.sleep(0.1)
            found = await collect(session.events(offset=0, display_state=False), "agent_end")
    assert [e["reason"] for e in found if e["type"] == "agent_end"] == ["complete"]


async def test_a_turn_is_still_aborted_once_the_session_took_as_many_updates_as_temporal_allows(
    storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    async with server_allowing_updates(tmp_path, 6) as client:
        async with build_worker(client, app, storage, task_queue=task_queue):
            ctl = await attached(client, storage, task_queue)
            session = await ctl.create_session(f"full-{uuid.uuid4().hex[:6]}")
            await session.send_message('tool save_note {"text": "never"}', wait=False)
            await wait_pending(session)
            await used_up(session)
            await session.abort()
            async with asyncio.timeout(30):
                while (snapshot := await session.snapshot()).running or snapshot.pending:
                    await asyncio.sleep(0.1)
            found = await collect(session.events(offset=0, display_state=False), "agent_end")
    assert [e["reason"] for e in found if e["type"] == "agent_end"] == ["aborted"]
    assert not (data_dir / "notes.log").exists()


@asynccontextmanager
async def server_with_small_histories(tmp_path: Path) -> AsyncIterator[Client]:
    """A dev server that suggests continue-as-new at 1 MiB of history and ends an execution at 8 MiB (Temporal's
    defaults: 4 MiB and 50 MiB)."""
    cfg = DevServerConfig(
        port=free_port(),
        ui_port=free_port(),
        state_dir=tmp_path,
        extra_dynamic_config={
            "limit.historySize.suggestContinueAsNew": str(1024 * 1024),
            "limit.historySize.error": str(8 * 1024 * 1024),
        },
    )
    server = await DevServer(cfg).start(reuse=False)
    try:
        yield await connect(cfg.address)
    finally:
        server.stop()


async def test_changes_during_a_long_turn_never_grow_the_session_past_temporals_history_limit(
    storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    """A session continues as new only between turns, and each change during a turn adds to its history. Once
    Temporal suggests continuing as new, changes wait for the turn's end (refused, saying so), where before the
    server ended the session at its history limit, its turn and pending call lost. The turn's call is still
    decided, and after the turn the session takes changes again."""
    async with server_with_small_histories(tmp_path) as client:
        async with build_worker(client, app, storage, task_queue=task_queue):
            ctl = await attached(client, storage, task_queue)
            session = await ctl.create_session(f"long-{uuid.uuid4().hex[:6]}")
            await session.send_message('tool save_note {"text": "kept"}', wait=False)
            [pending] = await wait_pending(session)
            large = "x" * 200_000
            with pytest.raises(SessionError, match="until its turn ends") as refused:
                for n in range(60):  # 60 x 3 copies of 200 KB: 36 MB, past the limit many times over
                    await session.state.set({"large": f"{large}{n}"})
            assert refused.value.kind == "UpdateLimit"
            described = await client.get_workflow_handle(session.id).describe()
            assert described.status == WorkflowExecutionStatus.RUNNING
            # `open` and `settled` answer with the state: the session refuses them too, and the client does
            # without them (it opens the session without asking it, and reads its snapshot).
            assert (await ctl.create_session(session.resource_id)).id == session.id
            assert [p.tool_call_id for p in (await session.settled()).pending] == [pending.tool_call_id]
            await session.respond_to_tool_approval(pending.tool_call_id, "approve")
            snapshot = await asyncio.wait_for(session.settled(), 30)  # (the `settled_now` query, while refused)
            assert not snapshot.running and snapshot.pending == []
            await session.state.set({"after": "the turn"})
            assert (await session.state.get())["after"] == "the turn"
            found = await collect(session.events(offset=0, display_state=False), "agent_end")
    assert [e["reason"] for e in found if e["type"] == "agent_end"] == ["complete"]
    assert (data_dir / "notes.log").read_text() == "kept\n"
