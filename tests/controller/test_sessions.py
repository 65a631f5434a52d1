"""AgentController sessions through the Python API: turns, events, modes, permissions, approvals."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from keel import AgentController
from keel.client.controller import Session, SessionError
from keel.workflows.session_contracts import PendingItem
from tests.controller.conftest import collect


def user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


async def test_a_plain_turn_streams_mastras_events_in_order(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    await session.send_message("text hello")
    events = await collect(session.events(offset=0, display_state=False), "agent_end")
    assert events[0]["type"] == "thread_created"  # a new session on a resource without threads makes one
    events = events[1:]
    types = [e["type"] for e in events]
    assert types[:3] == ["agent_start", "message_start", "message_end"]  # the user's message
    assert types[3] == "message_start" and events[3]["message"]["role"] == "assistant"
    assert "message_update" in types and types[-3:] == ["usage_update", "message_end", "agent_end"]
    text = "".join(e["event"]["delta"] for e in events if e["type"] == "message_update")
    assert text == "echo: text hello"
    assert events[-1]["reason"] == "complete"


async def wait_pending(session: Session, kind: str = "approval", timeout: float = 20) -> list[PendingItem]:
    async with asyncio.timeout(timeout):
        while True:
            found = [p for p in (await session.snapshot()).pending if p.kind == kind]
            if found:
                return found
            await asyncio.sleep(0.05)


async def test_every_tool_asks_by_default_and_an_approval_runs_it(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    await session.send_message('tool save_note {"text": "buy milk"}')  # returns once it waits on a person
    [pending] = await wait_pending(session)
    assert (pending.tool_name, pending.category) == ("save_note", "edit")
    shown = await session.display_state.get()
    assert shown["pendingApproval"]["toolCallId"] == pending.tool_call_id and shown["isRunning"]
    await session.respond_to_tool_approval(pending.tool_call_id, "approve")
    final = await session.settled()
    assert not final.running and final.pending == []
    events = await collect(session.events(offset=0, display_state=False), "agent_end")
    required = [e for e in events if e["type"] == "tool_approval_required"]
    ended = [e for e in events if e["type"] == "tool_end"]
    assert [e["toolName"] for e in required] == ["save_note"]
    assert ended[0]["result"] == {"saved": "buy milk"} and not ended[0]["isError"]


async def test_a_declined_call_never_runs_and_the_model_is_told(ctl: AgentController, data_dir: Path) -> None:
    session = await ctl.create_session(user())
    await session.send_message('tool save_note {"text": "nope"}')
    [pending] = await wait_pending(session)
    await session.respond_to_tool_approval(pending.tool_call_id, "decline")
    await session.settled()
    assert not (data_dir / "notes.log").exists()
    events = await collect(session.events(offset=0, display_state=False), "agent_end")
    [ended] = [e for e in events if e["type"] == "tool_end"]
    assert ended["denied"] is True and ended["result"] == "Tool call was not approved by the user"


async def test_always_allow_category_lasts_for_the_session(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    await session.send_message('tool save_note {"text": "one"}')
    [pending] = await wait_pending(session)
    await session.respond_to_tool_approval(pending.tool_call_id, "always_allow_category")
    await session.settled()
    assert (await session.permissions.grants())["categories"] == ["edit"]
    await session.send_message('tool save_note {"text": "two"}')  # edit is allowed now: no approval
    snapshot = await session.settled()
    assert snapshot.pending == [] and not snapshot.running


async def test_decisions_on_unknown_or_decided_calls_are_refused(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    with pytest.raises(SessionError, match="No tool call 'nope' is waiting for approval"):
        await session.respond_to_tool_approval("nope", "approve")
    await session.send_message('tool save_note {"text": "x"}')
    [pending] = await wait_pending(session)
    await session.respond_to_tool_approval(pending.tool_call_id, "approve")
    with pytest.raises(SessionError, match="already decided"):
        await session.respond_to_tool_approval(pending.tool_call_id, "decline")


async def test_modes_switch_with_their_models_and_an_unknown_mode_is_refused(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    assert await session.mode.get() == "plan"
    with pytest.raises(SessionError, match="Mode not found: nope"):
        await session.mode.switch("nope")
    await session.mode.switch("build")
    await session.model.switch("mock/build-choice")
    await session.mode.switch("plan")
    await session.model.switch("mock/plan-choice")
    await session.mode.switch("build")
    assert (await session.mode.get(), await session.model.get()) == ("build", "mock/build-choice")
    await session.send_message("instructions")
    messages = await session.thread.list_messages()
    assert messages[-1]["content"][0]["text"].endswith("Controller instructions.\nBuild mode instructions.")


async def test_a_denied_tool_is_never_offered_nor_run(ctl: AgentController, data_dir: Path) -> None:
    session = await ctl.create_session(user())
    await session.permissions.set_for_tool("save_note", "deny")
    await session.send_message("offered")
    offered = (await session.thread.list_messages())[-1]["content"][0]["text"].split(",")
    assert "save_note" not in offered and "search_docs" in offered and "ask_user" in offered
    await session.send_message('tool save_note {"text": "sneaky"}')
    snapshot = await session.settled()
    assert snapshot.pending == []
    assert not (data_dir / "notes.log").exists()
    last = (await session.thread.list_messages())[-1]["content"][0]["text"]
    assert "denied by this session's permissions" in last


async def test_state_is_checked_against_the_schema_and_merged(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    assert (await session.state.get())["project"] == "demo"  # the schema's defaults, then initial_state
    await session.state.set({"project": "docs"})
    await session.state.set({"counter": 2})
    with pytest.raises(SessionError, match="Invalid state update"):
        await session.state.set({"counter": "many"})
    state = await session.state.get()
    assert (state["project"], state["counter"]) == ("docs", 2)  # unchanged by the refused update


async def test_ask_user_suspends_and_the_answer_reaches_the_model(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    await session.state.set({"yolo": True})  # no approval first
    await session.send_message("ask")
    [pending] = await wait_pending(session, "suspension")
    assert pending.suspend_payload["question"] == "Which database?"
    with pytest.raises(SessionError, match="does not match its schema"):
        await session.respond_to_tool_suspension(pending.tool_call_id, {"not": "an answer"})
    await session.respond_to_tool_suspension(pending.tool_call_id, "SQLite")
    await session.settled()
    last = (await session.thread.list_messages())[-1]["content"][0]["text"]
    assert "User answered: SQLite" in last


async def test_an_approved_plan_switches_to_the_modes_transition(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    await session.state.set({"yolo": True})
    await session.send_message("plan plans/cli.md")
    [pending] = await wait_pending(session, "suspension")
    assert pending.suspend_payload == {"toolId": "submit_plan", "path": "plans/cli.md"}
    await session.respond_to_tool_suspension(pending.tool_call_id, {"action": "approved"})
    await session.settled()
    assert await session.mode.get() == "build"
    last = (await session.thread.list_messages())[-1]["content"][0]["text"]
    assert "Plan approved" in last
