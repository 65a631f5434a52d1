"""AgentController sessions through the Python API: turns, events, modes, permissions, approvals."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError

from keel import AgentController
from keel.client.controller import Session, SessionError, SessionNotFound
from keel.client.temporal_reset import reset_to_task
from keel.protocol import names
from keel.protocol.identifiers import MAX_TITLE_CHARS
from keel.storage import Storage
from keel.workflows import agent_session as session_side
from keel.workflows.agent_session import MAX_DECIDED, MAX_QUEUED, MAX_SENT
from keel.workflows.contracts import ToolResume
from keel.workflows.session_contracts import Accepted, PendingItem, SendMessage, TurnDecided
from tests.controller.conftest import bound_controller, collect
from tests.history_counts import patches_after_first_local_step


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


async def test_a_listener_subscribed_before_a_message_sees_its_whole_turn(ctl: AgentController) -> None:
    """Mastra's quick start: `subscribe`, then `send_message` at once: nothing of the turn is missed, and the
    same (resource, scope) is the same session."""
    session = await ctl.create_session(user())
    assert session == await ctl.create_session(session.resource_id) != await ctl.create_session(user())
    await session.send_message("text before")  # a turn the listener must not see
    seen: list[dict[str, Any]] = []
    unsubscribe = session.subscribe(seen.append)
    await session.send_message("text after")
    async with asyncio.timeout(10):
        while not any(e["type"] == "agent_end" for e in seen):
            await asyncio.sleep(0.02)
    unsubscribe()
    assert seen[0]["type"] == "agent_start"
    text = "".join(e["event"]["delta"] for e in seen if e["type"] == "message_update")
    assert text == "echo: text after"


async def wait_pending(session: Session, kind: str = "approval", timeout: float = 20) -> list[PendingItem]:
    async with asyncio.timeout(timeout):
        while True:
            found = [p for p in (await session.snapshot()).pending if p.kind == kind]
            if found:
                return found
            await asyncio.sleep(0.05)


async def answers(session: Session) -> list[str]:
    """The text of each assistant message in the session's thread."""
    messages = await session.thread.list_messages()
    return ["".join(p.get("text", "") for p in m["content"]) for m in messages if m["role"] == "assistant"]


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
    with pytest.raises(SessionError, match="at most 256 characters"):  # kept in thread settings
        await session.model.switch("mock/" + "m" * 300)
    await session.mode.switch("build")
    assert (await session.mode.get(), await session.model.get()) == ("build", "mock/build-choice")
    resolved = await session.mode.resolve()
    assert (resolved["name"], resolved["instructions"]) == ("Build", "Build mode instructions.")
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


@pytest.mark.parametrize(
    "rules",
    [
        {"permissionRules": {"categories": {"read": "maybe"}}},
        {"permissionRules": {"tools": {"x": 5}}},
        {"permissionRules": "garbage"},
        {"permissionRules": {"tools": {"x": "allow"}, "extra": 1}},
        {"yolo": "yes"},
    ],
    ids=["category-policy", "tool-policy", "not-an-object", "unknown-key", "yolo-not-a-boolean"],
)
async def test_permission_rules_set_as_state_are_checked_and_a_bad_one_changes_nothing(
    ctl: AgentController, rules: dict[str, Any]
) -> None:
    """Found from outside: a policy that is not allow, ask or deny was stored, then every read of the session
    answered 500 (its snapshot could not be made) until a good one was set; other shapes were taken and
    ignored."""
    session = await ctl.create_session(user())
    await session.permissions.set_for_tool("save_note", "deny")
    with pytest.raises(SessionError, match=r"permissionRules|yolo") as refused:
        await session.state.set(rules)
    assert refused.value.kind == "InvalidState"
    state = await session.state.get()
    assert state["permissionRules"]["tools"] == {"save_note": "deny"} and state["yolo"] is False
    await session.state.set({"permissionRules": {"categories": {"read": "allow"}}, "yolo": True})
    assert (await session.snapshot()).state["yolo"] is True


async def test_a_state_or_goal_past_its_bound_is_refused_and_a_state_shrinking_is_taken(
    client: Client, storage: Storage, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's state is copied into every `state_changed` event and every answer: it holds at most
    `MAX_STATE_BYTES` of JSON (256 KiB), the permission rules included. A state already past it (the bound
    lowered) takes a change that shrinks it. A goal's objective is bounded too."""
    monkeypatch.setattr(session_side, "MAX_STATE_BYTES", 10 * 1024)
    async with bound_controller(client, storage, task_queue, sandboxed=False) as ctl:
        session = await ctl.create_session(user())
        half = "x" * 6000
        await session.state.set({"a": half})
        with pytest.raises(SessionError, match="at most 10 KiB") as refused:
            await session.state.set({"b": half})
        assert refused.value.kind == "InvalidState"
        with pytest.raises(SessionError, match="at most 10 KiB"):  # the rules count too
            await session.state.set({"permissionRules": {"tools": {half: "allow"}}})
        with pytest.raises(SessionError, match="at most 10 KiB"):
            await session.permissions.set_for_tool(half, "allow")
        state = await session.state.get()
        assert "b" not in state and half not in state["permissionRules"]["tools"]  # unchanged by the refusals
        monkeypatch.setattr(session_side, "MAX_STATE_BYTES", 3 * 1024)  # the state is past the bound now
        await session.state.set({"a": "x" * 4000})  # smaller than it was: taken
        with pytest.raises(SessionError, match="at most 3 KiB"):
            await session.state.set({"b": "y"})  # larger: refused
        assert (await session.state.get())["a"] == "x" * 4000
        with pytest.raises(SessionError, match="objective holds at most 32 KiB"):  # the judge reads it each turn
            await session.goal.set("y" * (session_side.MAX_OBJECTIVE_BYTES + 1))
        assert await session.goal.get() is None


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


async def test_a_subagent_runs_as_a_child_run_with_only_its_allowed_tools(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    await session.permissions.set_for_tool("subagent", "allow")
    await session.send_message("sub explore offered")  # the subagent says which tools it was offered
    snapshot = await session.settled()
    assert snapshot.pending == [] and not snapshot.running
    last = (await session.thread.list_messages())[-1]["content"][0]["text"]
    assert "mastra_workspace_list_files" in last and "search_docs" in last
    assert "save_note" not in last and "ask_user" not in last
    events = await collect(session.events(offset=0, display_state=False), "agent_end")
    kinds = [e["type"] for e in events]
    assert "subagent_start" in kinds and "subagent_end" in kinds
    [start] = [e for e in events if e["type"] == "subagent_start"]
    assert (start["agentType"], start["toolCallId"]) == ("explore", "sub_1")
    child = ctl.client.keel.temporal.get_workflow_handle(f"{snapshot.session_id}-turn-1-s1-sub_1")
    described = await child.describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED  # a child workflow in the UI, with its tools
    assert (await described.static_details() or "").endswith("tools: `mastra_workspace_list_files`, `search_docs`")


async def test_a_subagents_approval_waits_in_the_parent_session_and_is_answered_there(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    await session.permissions.set_for_tool("subagent", "allow")
    await session.send_message('sub explore tool search_docs {"text": "retries"}')
    [pending] = await wait_pending(session)
    assert (pending.tool_name, pending.subagent) == ("search_docs", "sub_1")
    shown = await session.display_state.get()
    assert shown["pendingApprovals"][pending.tool_call_id]["subagent"] == "sub_1"
    await session.respond_to_tool_approval(pending.tool_call_id, "approve")
    await session.settled()
    last = (await session.thread.list_messages())[-1]["content"][0]["text"]
    assert "docs about retries" in last


async def test_two_sessions_never_see_each_others_events_state_mode_or_grants(ctl: AgentController) -> None:
    resource = user()
    web = await ctl.create_session(resource, "web")
    worker = await ctl.create_session(resource, "worker")
    assert web.id != worker.id and (await ctl.create_session(resource, "web")).id == web.id
    assert await web.thread.get_id() != await worker.thread.get_id()  # a scope's conversation is its own
    await web.mode.switch("build")
    await web.state.set({"project": "web-only"})
    await web.send_message('tool save_note {"text": "web"}')
    [call] = await wait_pending(web)
    await web.respond_to_tool_approval(call.tool_call_id, "always_allow_category")
    await web.settled()
    await worker.send_message("text from the worker")
    assert await worker.mode.get() == "plan"
    assert (await worker.state.get())["project"] == "demo"
    assert (await worker.permissions.grants())["categories"] == []
    web_events = await collect(web.events(offset=0, display_state=False), "agent_end")
    worker_events = await collect(worker.events(offset=0, display_state=False), "agent_end", limit=50)
    assert not any("from the worker" in str(e) for e in web_events)
    assert not any("web" in str(e.get("result", "")) for e in worker_events)


async def test_fifty_sessions_each_run_a_turn_at_once(ctl: AgentController) -> None:
    sessions = await asyncio.gather(*(ctl.create_session(user()) for _ in range(50)))
    await asyncio.gather(*(s.send_message(f"text number {i}") for i, s in enumerate(sessions)))
    for i, session in enumerate(sessions):
        last = (await session.thread.list_messages())[-1]["content"][0]["text"]
        assert last == f"echo: text number {i}"


async def test_threads_are_made_switched_renamed_cloned_and_deleted(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    first = await session.thread.get_id()
    assert first is not None
    await session.send_message("text in the first thread")
    created = await session.thread.create("Second")
    assert await session.thread.get_id() == created["id"] and created["title"] == "Second"
    await session.thread.rename("Renamed")
    listed = {t["id"]: t["title"] for t in await session.thread.list()}
    assert listed[created["id"]] == "Renamed" and first in listed
    await session.thread.switch(first)  # back: its messages are there
    assert (await session.thread.list_messages())[-1]["content"][0]["text"] == "echo: text in the first thread"
    copy = await session.thread.clone()
    assert await session.thread.get_id() == copy["id"]
    assert len(await session.thread.list_messages()) == 2
    with pytest.raises(SessionError, match="Thread not found"):
        await session.thread.switch("no-such-thread")
    await session.thread.delete(created["id"])
    assert created["id"] not in {t["id"] for t in await session.thread.list()}
    other = await ctl.create_session(user())
    with pytest.raises(SessionError, match="Thread not found"):  # another resource's thread
        await other.thread.switch(first)
    stranger = user()
    with pytest.raises(SessionError, match="Thread not found"):  # a new session can't start on it either
        await ctl.create_session(stranger, thread_id=first)
    started = await ctl.create_session(stranger)  # and the session that refused it works
    assert await started.thread.get_id() not in (None, first)
    await started.send_message("text still here")


async def test_a_follow_up_waits_for_the_running_turn_and_steer_replaces_it(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    await session.send_message('tool save_note {"text": "held"}')  # the turn waits for an approval
    [held] = await wait_pending(session)
    queued = await session.follow_up("text afterwards")
    assert queued.queued
    await session.respond_to_tool_approval(held.tool_call_id, "approve")
    await session.settled(queued.run_id)
    assert (await session.thread.list_messages())[-1]["content"][0]["text"] == "echo: text afterwards"
    await session.send_message('tool save_note {"text": "steered away"}')
    await wait_pending(session)
    steered = await session.steer("text instead", wait=True)
    assert not (await session.snapshot()).pending
    assert (await session.thread.list_messages())[-1]["content"][0]["text"] == "echo: text instead"
    ends = []
    async for event in session.events(offset=0, display_state=False):
        if event["type"] == "agent_end":
            ends.append(event["reason"])
            if len(ends) == 4:
                break
    assert ends == ["complete", "complete", "aborted", "complete"] and steered.run_id


async def test_an_abort_right_after_a_message_ends_its_turn_and_its_calls_never_run(
    ctl: AgentController, data_dir: Path
) -> None:
    """Found from outside with client-js: `sendMessage` then `abort` at once. Before, the abort never answered
    (4 of 4), the turn ignored the cancel it was sent in its first workflow task and went on to ask for its
    approval, and the session said `running` for good, also after a worker restart."""
    for n in range(3):
        session = await ctl.create_session(user())
        await session.send_message(f'tool save_note {{"text": "aborted {n}"}}', wait=False)
        async with asyncio.timeout(30):
            aborted = await session.abort()
        snapshot = await session.snapshot()
        assert not snapshot.running and snapshot.pending == [], (n, snapshot)
        ends = await collect(session.events(offset=0, display_state=False), "agent_end")
        assert (ends[-1]["runId"], ends[-1]["reason"]) == (aborted.run_id, "aborted")
    assert not (data_dir / "notes.log").exists()


async def test_abort_ends_a_waiting_turn_and_its_calls_never_run(ctl: AgentController, data_dir: Path) -> None:
    session = await ctl.create_session(user())
    await session.send_message('tool save_note {"text": "aborted"}')
    [held] = await wait_pending(session)
    await session.abort()
    snapshot = await session.snapshot()
    assert not snapshot.running and snapshot.pending == []
    assert not (data_dir / "notes.log").exists()
    with pytest.raises(SessionError):
        await session.respond_to_tool_approval(held.tool_call_id, "approve")


async def test_parallel_subagent_calls_run_at_once_and_a_forked_one_works_on_a_copy(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    await session.state.set({"yolo": True})
    await session.send_message("text remember the word zeppelin")
    await session.send_message("subs")  # two explorers and a forked one, in one step
    snapshot = await session.settled()
    assert not snapshot.running
    last = (await session.thread.list_messages())[-1]["content"][0]["text"]
    assert last.count("echo: look") == 2 and "zeppelin" in last  # the fork saw the parent conversation
    # At once: the turn started both explorers in one workflow task (the forked one once its thread copy is made;
    # wall-clock overlap is no test: on a loaded machine a scripted child may end before the server starts the next).
    events = (
        await ctl.client.keel.temporal.get_workflow_handle(f"{snapshot.session_id}-turn-2").fetch_history()
    ).events
    initiated = {
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id.rsplit("-", 1)[-1]: e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    }
    task_of = {k: e.start_child_workflow_execution_initiated_event_attributes.workflow_task_completed_event_id
               for k, e in initiated.items()}  # fmt: skip
    assert sorted(task_of) == ["sub_1", "sub_2", "sub_3"] and task_of["sub_1"] == task_of["sub_2"]
    forked = await ctl.client.storage.list_messages(f"{snapshot.session_id}-turn-2-s1-sub_3")
    assert any("zeppelin" in str(m.content) for m in forked[0])


async def test_a_goal_is_judged_after_each_turn_and_drives_more_turns_until_met_or_max_runs(
    ctl: AgentController,
) -> None:
    session = await ctl.create_session(user())
    await session.goal.set("keep echoing", max_runs=2)
    await session.send_message("text start")
    evaluations = []
    async for event in session.events(offset=0, display_state=False):
        if event["type"] == "goal_evaluation" and event["payload"].get("status") not in ("set", "pending"):
            evaluations.append(event["payload"])
            if len(evaluations) == 2:
                break
    assert [e["status"] for e in evaluations] == ["continue", "max_runs"]
    assert [e["done"] for e in evaluations] == [False, False]
    await session.settled()
    messages = await session.thread.list_messages()
    assert "Continue working toward the goal: keep echoing" in str(messages)

    other = await ctl.create_session(user())
    await other.goal.set("finish the job")
    await other.send_message("text go")
    async for event in other.events(offset=0, display_state=False):
        if event["type"] == "goal_evaluation" and event["payload"].get("status") == "done":
            break
    goal = await other.goal.get()
    assert goal is not None and goal["status"] == "done"
    await other.goal.clear()
    assert await other.goal.get() is None


async def test_a_judge_that_fails_for_good_pauses_the_goal_and_the_session_goes_on(
    ctl: AgentController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge's provider refuses it (a 401, not retried): the goal pauses with a `goal_evaluation` of status
    `error` naming why, and the session answers the next message. Before, the session workflow failed: its
    grants, goal, queue and pending calls were gone and the next `create_session` began a new session."""
    from keel.activities.session import SessionActivities
    from keel.model_providers import ModelRequestError

    async def refused(self: Any, input: Any) -> Any:
        raise ModelRequestError("401: invalid API key for the judge model", status=401)

    monkeypatch.setattr(SessionActivities, "_judge", refused)
    session = await ctl.create_session(user())
    await session.permissions.set_for_tool("save_note", "allow")
    await session.goal.set("keep echoing", max_runs=2)
    await session.send_message("text start")
    async with asyncio.timeout(30):  # (before: never, the session had failed)
        async for event in session.events(offset=0, display_state=False):
            if event["type"] == "goal_evaluation" and event["payload"].get("status") not in ("set", "pending"):
                assert event["payload"]["status"] == "error" and "invalid API key" in event["payload"]["reason"]
                break
    goal = await session.goal.get()
    assert goal is not None and goal["status"] == "paused"
    await session.send_message("text still here")
    assert (await answers(session))[-1] == "echo: text still here"
    assert (await session.permissions.get())["tools"] == {"save_note": "allow"}
    handle = session.controller.keel.temporal.get_workflow_handle(session.id)
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING


async def test_an_abort_while_the_goal_is_judged_stops_the_goal_loop(
    ctl: AgentController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Esc while the goal's judge is deciding: the judge says "continue", but no turn follows (Mastra's goal step is
    part of the run an abort stops). The goal stays active, so the next message's turn is judged again. Before,
    the abort waited for the judge, found no turn running, and the goal's next turn ran anyway."""
    from keel.activities.session import SessionActivities
    from keel.workflows.session_contracts import JudgeResult

    async def slow(self: Any, input: Any) -> JudgeResult:
        await asyncio.sleep(1.5)
        return JudgeResult(done=False, reason="not yet")

    monkeypatch.setattr(SessionActivities, "_judge", slow)
    session = await ctl.create_session(user())
    await session.goal.set("keep echoing", max_runs=3)
    await session.send_message("text start")
    async with asyncio.timeout(30):
        async for event in session.events(offset=0, display_state=False):
            if event["type"] == "goal_evaluation" and event["payload"].get("status") == "pending":
                break
    await session.abort()
    evaluation = None
    async with asyncio.timeout(30):
        async for event in session.events(offset=0, display_state=False):
            if event["type"] == "goal_evaluation" and event["payload"].get("status") not in ("set", "pending"):
                evaluation = event["payload"]
                break
    assert evaluation is not None and evaluation["status"] == "aborted" and evaluation["reason"] == "not yet"
    await session.settled()
    await asyncio.sleep(1)  # a turn the goal queued would have started by now
    assert await answers(session) == ["echo: text start"]
    goal = await session.goal.get()
    assert goal is not None and goal["status"] == "active" and goal["runs"] == 1
    assert (await session.snapshot()).queued == 0


async def test_a_suspension_resumed_on_the_run_while_the_session_answers_it_leaves_the_session_working(
    ctl: AgentController, storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An approved plan is answered through the session (which switches mode, writing the thread's settings:
    slowed here) while the same call is resumed on its run, as the `temporal` CLI or the UI may. Before, the
    session's handler removed the pending item that the run's `turn_decided` had already removed: the workflow
    task failed on every retry and the answer never came."""
    session = await ctl.create_session(user())
    await session.state.set({"yolo": True})
    await session.send_message("plan plans/cli.md")
    [pending] = await wait_pending(session, "suspension")
    merge = storage.merge_thread_metadata

    async def slow_merge(thread_id: str, settings: dict[str, Any]) -> Any:
        await asyncio.sleep(3)
        return await merge(thread_id, settings)

    monkeypatch.setattr(storage, "merge_thread_metadata", slow_merge)
    answering = asyncio.create_task(session.respond_to_tool_suspension(pending.tool_call_id, {"action": "approved"}))
    await asyncio.sleep(1)  # the session's handler is inside the mode switch's settings write
    temporal = session.controller.keel.temporal
    await temporal.get_workflow_handle(pending.run_id).execute_update(
        names.RESUME_TOOL_UPDATE, ToolResume(tool_call_id=pending.tool_call_id, resume_data={"action": "approved"})
    )
    await asyncio.wait_for(answering, 20)
    monkeypatch.setattr(storage, "merge_thread_metadata", merge)
    await session.settled()
    assert (await session.mode.get()) == "build"
    history = await temporal.get_workflow_handle(session.id).fetch_history()
    failed = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert failed == []


async def test_a_session_is_not_reopened_on_another_thread_while_a_turn_runs(ctl: AgentController) -> None:
    """`create_session(..., thread_id=other)` while a turn runs is refused (as `thread.switch` is), and the turn's
    answer lands in the session's thread. Before, the session moved to the other thread under the running turn:
    its answer was not in `session.thread`, and what was queued ran on a conversation it was not sent in."""
    session = await ctl.create_session(user())
    await session.send_message('tool save_note {"text": "mid-turn"}')
    [pending] = await wait_pending(session)
    turn_thread = (await session.snapshot()).thread_id
    with pytest.raises(SessionError, match="A turn is running"):
        await ctl.create_session(session.resource_id, thread_id=f"other-{uuid.uuid4().hex[:6]}")
    await session.respond_to_tool_approval(pending.tool_call_id, "approve")
    final = await session.settled()
    assert (final.thread_id, (await answers(session))[-1]) == (turn_thread, 'got: {"saved": "mid-turn"}')
    other = f"other-{uuid.uuid4().hex[:6]}"
    assert (await ctl.create_session(session.resource_id, thread_id=other)) == session  # idle: it moves
    assert (await session.snapshot()).thread_id == other


async def test_a_message_sent_again_under_its_id_is_the_same_send(ctl: AgentController) -> None:
    """A client that sends again after an outage cut off the answer (Temporal took the first send) gives the same
    `message_id`: it gets the first send's answer, and the message is in the thread once."""
    session = await ctl.create_session(user())
    first = await session.send_message("text once", message_id="m-once")
    again = await session.send_message("text once", message_id="m-once")
    assert again == first
    said = [m["content"] for m in await session.thread.list_messages() if m["role"] == "user"]
    assert said == ["text once"]


async def test_a_session_asks_no_patch_once_it_has_begun(ctl: AgentController) -> None:
    """A send made again in another update (as across a continue-as-new, where Temporal no longer dedupes it)
    is answered by a rule the session took in its first task, not by a patch asked mid-session: the second send
    may wait on the session's lock behind a local activity, and a patch asked in reaction to one can be met a
    workflow task early on replay, which then fails."""
    session = await ctl.create_session(user())
    handle = session.controller.keel.temporal.get_workflow_handle(session.id)
    message = SendMessage(content="text once", mode="send", id="m-once")
    first = await handle.execute_update(names.SESSION_SEND_UPDATE, message, id="first", result_type=Accepted)
    await session.settled()
    again = await handle.execute_update(names.SESSION_SEND_UPDATE, message, id="again", result_type=Accepted)
    assert again == first
    assert patches_after_first_local_step(await handle.fetch_history()) == []


async def test_settled_follows_a_session_reset_while_it_waited(ctl: AgentController) -> None:
    """A reset (an operator's, or a worker healing a stuck session: `keel.client.stuck_tasks`) ends the execution
    whose `settled` update waited: `settled` asks the execution now current; the turn it waits for, running as a
    child, reports to that one."""
    session = await ctl.create_session(user())
    await session.send_message('tool save_note {"text": "held"}')  # the turn waits for an approval
    [held] = await wait_pending(session)
    queued = await session.follow_up("text afterwards")
    waiting = asyncio.create_task(session.settled(queued.run_id))
    await asyncio.sleep(0.5)  # the update accepted
    temporal = session.controller.keel.temporal
    handle = temporal.get_workflow_handle(session.id)
    first = (await handle.describe()).run_id
    history = await handle.fetch_history()
    last_task = max(e.event_id for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    await reset_to_task(temporal, session.id, first, last_task, "test")
    await session.respond_to_tool_approval(held.tool_call_id, "approve")
    await asyncio.wait_for(waiting, timeout=30)
    assert (await handle.describe()).run_id != first
    assert (await session.thread.list_messages())[-1]["content"][0]["text"] == "echo: text afterwards"


async def test_messages_sent_into_busy_turns_each_reach_the_thread_once(ctl: AgentController) -> None:
    """Messages sent while turns run go into the running turn; one that arrives as that turn ends (delivered as
    it completes, or to a turn that has just ended) gets a turn of its own: each is in the thread exactly once.
    Before, such a message (and one past the turn's inbox of 100 unread) was answered `delivered` and never
    read: 92 and 100 of these 201 were lost in two runs."""
    session = await ctl.create_session(user())
    handle = session.controller.keel.temporal.get_workflow_handle(session.id)
    at_once = asyncio.Semaphore(8)  # the dev server takes 10 updates of one workflow in flight

    async def send(n: int, update_id: str) -> Accepted:
        message = SendMessage(content=f"text {n}", mode="send", id=f"m-{n}")
        while True:
            try:
                async with at_once:
                    accepted: Accepted = await handle.execute_update(
                        names.SESSION_SEND_UPDATE, message, id=update_id, result_type=Accepted
                    )
                    return accepted
            except WorkflowUpdateFailedError as err:  # refused, not recorded: as a client backs off, send later
                if "messages already wait for a turn" not in str(err.cause):
                    raise
                await asyncio.sleep(0.2)

    await send(0, "first-0")  # the oldest; the next ones in any order; then the newest
    await asyncio.gather(*(send(n, f"first-{n}") for n in range(1, MAX_SENT)))
    newest = await send(MAX_SENT, f"first-{MAX_SENT}")
    while (now := await session.settled()).running or now.queued:
        pass
    said = [m["content"] for m in await session.thread.list_messages() if m["role"] == "user"]
    assert sorted(said) == sorted(f"text {n}" for n in range(MAX_SENT + 1))

    # The ids a session answers a send made again by are bounded (`MAX_SENT`, carried across continue-as-new):
    # the oldest is forgotten (a send made again under it is a new message), the newest still answered by its
    # first send. Each send goes in an update of its own id, as across a continue-as-new (Temporal no longer
    # dedupes it there).
    assert await send(MAX_SENT, "again-newest") == newest
    await send(0, "again-oldest")
    await session.settled()
    said = [m["content"] for m in await session.thread.list_messages() if m["role"] == "user"]
    assert (said.count("text 0"), said.count("text 1"), said.count(f"text {MAX_SENT}")) == (2, 1, 1)


async def test_a_message_a_failed_turn_never_read_gets_a_turn_of_its_own_before_the_follow_ups(
    ctl: AgentController,
) -> None:
    """A message delivered into a turn that waits on a person sits unread in it; the turn then fails (here its
    run is terminated). The message gets a turn of its own, ahead of a follow-up queued before it failed, and
    `settled` for the failed turn waits for that turn. Before, it was answered `delivered` and never read."""
    session = await ctl.create_session(user())
    await session.state.set({"yolo": True})
    first = await session.send_message("ask")
    await wait_pending(session, "suspension")
    delivered = await session.send_message("text unread", wait=False)
    later = await session.follow_up("text later")
    assert delivered.delivered and delivered.run_id == first.run_id and later.queued
    assert first.run_id is not None
    await session.controller.keel.temporal.get_workflow_handle(first.run_id).terminate("the turn fails")
    ended = await collect(session.events(offset=0, display_state=False), "agent_end")
    assert (ended[-1]["runId"], ended[-1]["reason"]) == (first.run_id, "error")
    await session.settled(first.run_id)  # ended: this waits for the turn its unread message went to
    assert "echo: text unread" in await answers(session)
    await session.settled()
    assert (await answers(session))[-2:] == ["echo: text unread", "echo: text later"]
    assert [m["content"] for m in await session.thread.list_messages() if m["role"] == "user"][-2:] == [
        "text unread",
        "text later",
    ]


async def test_a_send_made_again_gets_its_first_answer_when_the_queue_is_full(ctl: AgentController) -> None:
    """100 messages wait behind a turn that waits on a person; a client sends one of them again (its answer was
    lost in an outage: the same message id, another update): it gets the first answer, while a new message is
    refused. Before, the send made again was refused as a new one ("100 messages already wait")."""
    session = await ctl.create_session(user())
    handle = session.controller.keel.temporal.get_workflow_handle(session.id)
    await session.send_message('tool save_note {"text": "hold"}')
    await wait_pending(session)

    async def send(n: int, update_id: str) -> Accepted:
        message = SendMessage(content=f"text {n}", mode="follow_up", id=f"q-{n}")
        accepted: Accepted = await handle.execute_update(
            names.SESSION_SEND_UPDATE, message, id=update_id, result_type=Accepted
        )
        return accepted

    first = [await send(n, f"first-{n}") for n in range(MAX_QUEUED)]
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await send(MAX_QUEUED, f"first-{MAX_QUEUED}")
    assert "messages already wait for a turn" in str(refused.value.cause)
    assert await send(7, "again-7") == first[7]
    await session.abort()


async def test_messages_waiting_for_a_turn_are_bounded_in_bytes(
    client: Client, storage: Storage, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session carries the messages that wait for a turn (and those delivered into the running one) until
    their turn reads them: one message holds at most `MAX_MESSAGE_BYTES`, and all of them `MAX_WAITING_BYTES`.
    Before, 100 messages of any size could wait (through the payload store, 256 MiB each)."""
    monkeypatch.setattr(session_side, "MAX_MESSAGE_BYTES", 60_000)
    monkeypatch.setattr(session_side, "MAX_WAITING_BYTES", 100_000)
    async with bound_controller(client, storage, task_queue, sandboxed=False) as ctl:
        session = await ctl.create_session(user())
        await session.send_message('tool save_note {"text": "hold"}')
        await wait_pending(session)
        with pytest.raises(SessionError, match="holds at most 60000 bytes") as large:
            await session.follow_up("text " + "x" * 70_000)
        assert large.value.kind == "InvalidInput"
        await session.follow_up("text " + "y" * 40_000)
        await session.follow_up("text " + "z" * 40_000)
        with pytest.raises(SessionError, match="wait for a turn already"):
            await session.follow_up("text " + "w" * 40_000)
        assert (await session.snapshot()).queued == 2
        await session.abort()
        await session.follow_up("text " + "v" * 40_000)  # the queue's turns ran: room again
        await session.settled()


async def test_a_session_remembers_its_last_200_decided_calls_and_no_more(ctl: AgentController) -> None:
    """A decision for a call already decided is refused as such for the last 200 decided calls (`MAX_DECIDED`);
    an older one is refused as unknown: the list a session carries does not grow with the calls it decided."""
    session = await ctl.create_session(user())
    handle = session.controller.keel.temporal.get_workflow_handle(session.id)
    calls = [f"call-{n}" for n in range(MAX_DECIDED + 50)]
    await handle.signal(names.TURN_DECIDED_SIGNAL, TurnDecided(run_id="elsewhere", tool_call_ids=calls))
    with pytest.raises(SessionError, match="call-249' was already decided"):
        await session.respond_to_tool_approval("call-249", "approve")
    with pytest.raises(SessionError, match="call-50' was already decided"):
        await session.respond_to_tool_approval("call-50", "approve")
    with pytest.raises(SessionError, match="No tool call 'call-49' is waiting"):
        await session.respond_to_tool_approval("call-49", "approve")


async def test_a_turns_waiting_calls_that_arrive_after_it_ended_are_not_pending(ctl: AgentController) -> None:
    """A turn (or its subagent) tells the session what it waits on by signal, and the turn's end reaches the
    session by another path: the signal can come in after the end was handled. A call of a turn that has ended
    can never be answered: it must not show as pending, nor leave the session `suspended`."""
    from temporalio.client import WorkflowExecutionDescription

    from keel.workflows.search_attributes import KEEL_STATUS
    from keel.workflows.session_contracts import TurnWaiting

    session = await ctl.create_session(user())
    ended = (await session.send_message("text hello")).run_id
    assert ended is not None
    handle = session.controller.keel.temporal.get_workflow_handle(session.id)
    late = [
        PendingItem(kind="approval", run_id=ended, tool_call_id="call_late", tool_name="save_note"),
        PendingItem(kind="suspension", run_id=f"{ended}-sub-1", tool_call_id="call_sub", tool_name="ask_user"),
    ]
    await handle.signal(names.TURN_WAITING_SIGNAL, TurnWaiting(items=late))
    await session.send_message("text after")  # handled after the signal sent before it
    snapshot = await session.settled()
    assert snapshot.pending == [] and not snapshot.running
    description: WorkflowExecutionDescription = await handle.describe()
    assert description.typed_search_attributes.get(KEEL_STATUS) == "idle"
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(20):
        async for event in session.events(offset=0, display_state=False):
            events.append(event)
            if [e["type"] for e in events].count("agent_end") == 2:
                break
    assert not [e for e in events if e.get("toolCallId") in ("call_late", "call_sub")]


async def test_ids_temporal_cannot_take_are_refused_and_make_no_session(ctl: AgentController, client: Client) -> None:
    """A session's resource id and its turns' thread ids are search attributes (at most 2 KB as JSON), and its
    id holds the resource id and scope percent-encoded (at most 1,000 bytes, room kept for its turns'). Before,
    Temporal's RPC error came back as "the session did not answer" (HTTP 503), and a session asked for a thread
    id past the bound was made on that thread."""
    emoji = "\U0001f600" * 200  # 800 bytes of UTF-8, 2,402 as escaped JSON
    with pytest.raises(SessionError, match=r"A resource id is indexed .* at most 2048 bytes") as refused:
        await ctl.create_session(emoji)
    assert refused.value.kind == "InvalidInput"
    with pytest.raises(SessionError, match=r"would give a workflow id of .* Temporal takes at most 1000 bytes"):
        await ctl.create_session(user(), scope="\u00e9" * 200)  # %C3%A9 each
    resource = user()
    with pytest.raises(SessionError, match="A thread id is indexed"):
        await ctl.create_session(resource, thread_id="t" * 3000)
    with pytest.raises(SessionNotFound):  # nothing was made
        await ctl.client.session(resource).snapshot()
    session = await ctl.create_session(resource)
    handle = client.get_workflow_handle(session.id)
    for name, change in (
        (names.SESSION_THREAD_UPDATE, {"op": "create", "threadId": "t" * 3000}),  # as the temporal CLI sends them
        (names.SESSION_OPEN_UPDATE, {"threadId": emoji}),
    ):
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await handle.execute_update(name, change)
        assert "A thread id is indexed" in str(failed.value.cause)
    with pytest.raises(SessionError, match="The message id would give an update id of 2005 bytes") as refused:
        await session.send_message("named", message_id="m" * 2000)  # its update is named after it
    assert refused.value.kind == "InvalidInput"
    await session.send_message("still here")
    done = await session.settled()
    assert done.thread_id == (await session.thread.get_id()) and (await answers(session))[-1] == "echo: still here"


async def test_a_thread_title_past_its_bound_is_refused_and_the_thread_keeps_its_own(ctl: AgentController) -> None:
    """A thread's title is in the session's snapshot and thread events, and in storage: before, any length was
    taken."""
    session = await ctl.create_session(user())
    made = await session.thread.create(title="short")
    for change in (
        session.thread.rename("t" * (MAX_TITLE_CHARS + 1)),
        session.thread.create(title="\u00e9" * (MAX_TITLE_CHARS + 1)),
        session.thread.clone(title="c" * 3_000_000),
    ):
        with pytest.raises(SessionError, match=f"A thread title holds at most {MAX_TITLE_CHARS} characters") as no:
            await change
        assert no.value.kind == "InvalidInput"
    await session.thread.rename("t" * MAX_TITLE_CHARS)
    [listed] = [t for t in await session.thread.list() if t["id"] == made["id"]]
    assert listed["title"] == "t" * MAX_TITLE_CHARS


async def test_a_subagent_call_whose_id_makes_too_long_a_workflow_id_fails_and_the_turn_goes_on(
    ctl: AgentController,
) -> None:
    """A subagent's run is a child workflow named after the call's id, which the model chooses. Before, an id
    past Temporal's 1,000 bytes failed the turn's workflow task for good (a bad child start), each retry: the
    turn never ended."""
    session = await ctl.create_session(user())
    await session.permissions.set_for_tool("subagent", "allow")
    await session.send_message("longsub 1000")
    async with asyncio.timeout(60):
        snapshot = await session.settled()
    assert snapshot.pending == [] and not snapshot.running
    last = (await answers(session))[-1]
    assert 'Subagent \\"explore\\" was not started' in last and "Temporal takes at most 1000 bytes" in last
    await session.send_message("longfork 1000")  # the same after the forked subagent's thread copy
    await session.settled()
    assert 'Subagent \\"explore\\" was not started' in (await answers(session))[-1]
    await session.send_message("longsub 900")  # within the bound: it runs
    await session.settled()
    ran = (await answers(session))[-1]
    assert '"isError": false' in ran and "was not started" not in ran


async def test_a_waiting_calls_large_arguments_are_shown_cut_and_reach_the_tool_whole(
    ctl: AgentController, client: Client, data_dir: Path
) -> None:
    """Each call a turn waits on reaches the session's history with its arguments (the turn's signal). Before, a
    call with 200 KB of them added 209 KB: about 240 such calls in one turn (a long turn of edits that ask first)
    reached Temporal's 50 MB limit, which ends the session. The session now shows arguments past 64 KiB with
    their long strings cut (5 KB here); the run holds them whole, and the tool gets them whole."""
    session = await ctl.create_session(user())
    handle = client.get_workflow_handle(session.id)

    async def history_bytes() -> int:
        return (await handle.describe()).raw_description.workflow_execution_info.history_size_bytes

    text = "x" * (200 * 1024)
    before = await history_bytes()
    await session.send_message("bignote 200", wait=False)
    [pending] = await wait_pending(session)
    assert await history_bytes() - before < 40 * 1024
    shown = pending.args["text"]
    assert shown.startswith("x" * 4096) and shown.endswith(f"… [cut: {len(text)} characters in all]")
    events = await collect(session.events(offset=0, display_state=False), "tool_approval_required")
    assert events[-1]["args"] == pending.args  # the event shows the same
    [whole] = await ctl.client.keel.pending_tool_calls(pending.run_id)
    assert whole.args == {"text": text}  # the run has them whole
    await session.respond_to_tool_approval(pending.tool_call_id, "approve")
    await session.settled()
    assert (data_dir / "notes.log").read_text() == text + "\n"
