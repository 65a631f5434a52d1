"""The controller's built-in tools not covered elsewhere, through real turns: `request_access` (a suspension whose
grant lasts for the session) and the task list (`task_write`, `task_update`, `task_complete`, `task_check`:
Mastra's results, `task_updated` events and the display state's `tasks`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from keel import AgentController
from keel.client.controller import Session, SessionError
from tests.controller.test_permissions import events, ran
from tests.controller.test_sessions import user, wait_pending


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> None:
    """Every test's tools write into its own data dir."""


async def last_text(session: Session) -> str:
    return str((await session.thread.list_messages())[-1]["content"][0]["text"])


async def call(session: Session, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """One call of `name` in a turn of its own; what the model got back."""
    await session.send_message(f"tool {name} {json.dumps(args)}")
    text = await last_text(session)
    assert text.startswith("got: "), text
    got: dict[str, Any] = json.loads(text.removeprefix("got: "))
    return got


# --- request_access ----------------------------------------------------------------------------------------------


async def test_request_access_suspends_and_a_grant_lasts_for_the_session(ctl: AgentController, data_dir: Path) -> None:
    session = await ctl.create_session(user())
    await session.permissions.set_for_tool("request_access", "allow")
    await session.send_message('tool request_access {"reason": "to run the checks", "category": "execute"}')
    [pending] = await wait_pending(session, "suspension")
    assert (pending.tool_name, pending.suspend_payload) == (
        "request_access",
        {"reason": "to run the checks", "category": "execute"},
    )
    assert pending.resume_schema is not None and pending.resume_schema["required"] == ["granted"]
    shown = await session.display_state.get()
    assert shown["pendingSuspensions"][pending.tool_call_id]["suspendPayload"] == pending.suspend_payload
    with pytest.raises(SessionError, match="does not match its schema"):
        await session.respond_to_tool_suspension(pending.tool_call_id, {"reason": "no answer"})
    await session.respond_to_tool_suspension(pending.tool_call_id, {"granted": True})
    snapshot = await session.settled()
    assert snapshot.pending == [] and not snapshot.running
    assert await last_text(session) == (
        'got: {"content": "Access granted: execute is allowed for the rest of the session.", "isError": false}'
    )
    assert await session.permissions.grants() == {"categories": ["execute"], "tools": []}
    assert (await session.display_state.get())["pendingSuspensions"] == {}
    found = await events(session, 1)
    assert [e["type"] for e in found].count("tool_suspended") == 1
    assert not any(e["type"] == "tool_approval_required" for e in found)  # allowed: no approval first

    await session.send_message('tool run_check {"text": "granted"}')  # `execute` runs without asking now
    assert (await session.settled()).pending == [] and ran(data_dir) == ["run_check"]

    await session.send_message('tool request_access {"reason": "one lookup", "toolName": "mcp_lookup"}')
    [pending] = await wait_pending(session, "suspension")
    assert pending.suspend_payload == {"reason": "one lookup", "toolName": "mcp_lookup"}
    await session.respond_to_tool_suspension(pending.tool_call_id, {"granted": True})
    await session.settled()
    assert "Access granted: mcp_lookup is allowed" in await last_text(session)
    assert await session.permissions.grants() == {"categories": ["execute"], "tools": ["mcp_lookup"]}
    await session.send_message('tool mcp_lookup {"text": "granted"}')
    assert (await session.settled()).pending == [] and ran(data_dir) == ["mcp_lookup", "run_check"]


async def test_a_refused_request_access_changes_nothing_and_the_model_is_told(
    ctl: AgentController, data_dir: Path
) -> None:
    """With no rule it asks first, like every tool (Mastra's default), then waits for the answer."""
    session = await ctl.create_session(user())
    await session.send_message('tool request_access {"reason": "to run the checks", "category": "execute"}')
    [approval] = await wait_pending(session)
    assert (approval.tool_name, approval.category) == ("request_access", None)
    await session.respond_to_tool_approval(approval.tool_call_id, "approve")
    [pending] = await wait_pending(session, "suspension")
    await session.respond_to_tool_suspension(pending.tool_call_id, {"granted": False, "reason": "not today"})
    await session.settled()
    assert await last_text(session) == (
        'got: {"content": "Access refused: execute stays as it was (not today).", "isError": false}'
    )
    assert await session.permissions.grants() == {"categories": [], "tools": []}
    await session.send_message('tool run_check {"text": "still asks"}')
    [asked] = await wait_pending(session)
    assert asked.tool_name == "run_check"
    await session.respond_to_tool_approval(asked.tool_call_id, "decline")
    await session.settled()
    assert ran(data_dir) == []


# --- the task list -----------------------------------------------------------------------------------------------

TASKS = [
    {"content": "Write the tests", "status": "in_progress", "activeForm": "Writing the tests"},
    {"content": "Fix the bugs", "status": "pending", "activeForm": "Fixing the bugs"},
    {"id": "ship", "content": "Ship it!", "status": "pending", "activeForm": "Shipping"},
]


def task(task_id: str, content: str, status: str, active: str) -> dict[str, str]:
    return {"id": task_id, "content": content, "status": status, "activeForm": active}


async def test_the_task_list_is_written_updated_completed_and_checked(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    await session.state.set({"yolo": True})
    empty = await call(session, "task_check", {})
    assert empty == {
        "content": "No tasks found. Consider using task_write to create a task list for complex work.",
        "tasks": [],
        "summary": {
            "total": 0, "completed": 0, "inProgress": 0, "pending": 0, "incomplete": 0,
            "hasTasks": False, "allCompleted": False,
        },
        "incompleteTasks": [],
        "isError": False,
    }  # fmt: skip

    written = await call(session, "task_write", {"tasks": TASKS})
    tests = task("task_write_the_tests", "Write the tests", "in_progress", "Writing the tests")
    bugs = task("task_fix_the_bugs", "Fix the bugs", "pending", "Fixing the bugs")
    ship = task("ship", "Ship it!", "pending", "Shipping")
    assert written == {
        "content": "Tasks updated: [0/3 completed]\nCurrently: Writing the tests (task_write_the_tests)\nTask IDs:\n"
        "- task_write_the_tests: Write the tests (in_progress)\n- task_fix_the_bugs: Fix the bugs (pending)\n"
        "- ship: Ship it! (pending)",
        "tasks": [tests, bugs, ship],
        "isError": False,
    }
    shown = await session.display_state.get()
    assert shown["tasks"] == [tests, bugs, ship] and shown["previousTasks"] == []

    updated = await call(session, "task_update", {"id": "task_fix_the_bugs", "status": "in_progress"})
    tests, bugs = tests | {"status": "pending"}, bugs | {"status": "in_progress"}  # one in progress at a time
    assert updated["tasks"] == [tests, bugs, ship] and not updated["isError"]
    assert updated["content"].startswith(
        "Tasks updated: [0/3 completed]\nCurrently: Fixing the bugs (task_fix_the_bugs)"
    )

    completed = await call(session, "task_complete", {"id": "task_fix_the_bugs"})
    bugs = bugs | {"status": "completed"}
    assert completed["tasks"] == [tests, bugs, ship]
    assert completed["content"].startswith("Tasks updated: [1/3 completed]\nTask IDs:\n")

    missing = await call(session, "task_update", {"id": "nope", "status": "completed"})
    assert missing == {
        "content": "Task not found: nope\n\nAvailable task IDs:\n- task_write_the_tests: Write the tests (pending)\n"
        "- task_fix_the_bugs: Fix the bugs (completed)\n- ship: Ship it! (pending)",
        "tasks": [tests, bugs, ship],
        "isError": True,
    }
    unknown = await call(session, "task_complete", {"id": "nope"})
    assert unknown["isError"] and unknown["content"].startswith("Task not found: nope\n\nAvailable task IDs:\n")

    await call(session, "task_update", {"id": "ship", "status": "in_progress", "activeForm": "Shipping it"})
    ship = ship | {"status": "in_progress", "activeForm": "Shipping it"}
    checked = await call(session, "task_check", {})
    assert checked == {
        "content": "Task Status: [1/3 completed]\n- Completed: 1\n- In Progress: 1\n- Pending: 1\n\n"
        "All tasks completed: NO\n\nIncomplete tasks:\n\nIn Progress:\n- ship: Ship it!\n\nPending:\n"
        "- task_write_the_tests: Write the tests\n\nContinue working on these tasks before ending.",
        "tasks": [tests, bugs, ship],
        "summary": {
            "total": 3, "completed": 1, "inProgress": 1, "pending": 1, "incomplete": 2,
            "hasTasks": True, "allCompleted": False,
        },
        "incompleteTasks": [ship, tests],  # in progress first, then pending
        "isError": False,
    }  # fmt: skip

    shown = await session.display_state.get()
    assert shown["tasks"] == [tests, bugs, ship]
    assert shown["previousTasks"] == [tests, bugs, ship | {"status": "pending", "activeForm": "Shipping"}]
    # A `task_updated` for each change, before its call's `tool_end`; none for a check or a failed call.
    found = await events(session, 8)
    updates = [e for e in found if e["type"] == "task_updated"]
    assert [e["tasks"] for e in updates] == [written["tasks"], updated["tasks"], completed["tasks"], shown["tasks"]]
    ends = {e["toolCallId"]: i for i, e in enumerate(found) if e["type"] == "tool_end"}
    starts = [(i, e["toolCallId"]) for i, e in enumerate(found) if e["type"] == "tool_start"]
    for update in updates:
        at = found.index(update)
        [call_id] = [c for i, c in starts if i < at][-1:]
        assert at < ends[call_id]

    await session.send_message('tool task_complete {"id": "task_write_the_tests"}')
    await session.send_message('tool task_complete {"id": "ship"}')
    done = await call(session, "task_check", {})
    assert done["summary"]["allCompleted"] is True and done["incompleteTasks"] == []
    assert done["content"] == (
        "Task Status: [3/3 completed]\n- Completed: 3\n- In Progress: 0\n- Pending: 0\n\nAll tasks completed: YES"
    )


async def test_task_write_assigns_stable_ids_as_mastra_does(ctl: AgentController) -> None:
    session = await ctl.create_session(user())
    await session.state.set({"yolo": True})
    two = {"tasks": [TASKS[0], TASKS[1] | {"status": "in_progress"}]}
    refused = await call(session, "task_write", two)
    assert refused == {"content": "Only one task can be in_progress at a time.", "tasks": [], "isError": True}

    first = await call(session, "task_write", {"tasks": [TASKS[1] | {"id": "bugs"}, TASKS[2] | {"id": "a"}]})
    assert [t["id"] for t in first["tasks"]] == ["bugs", "a"]
    # Rewritten without ids: an unambiguous match keeps its id; one whose id another task claims does not.
    again = {
        "tasks": [
            TASKS[1] | {"status": "completed"},
            {"content": "Ship it!", "status": "pending", "activeForm": "Shipping"},
            {"id": "a", "content": "Renamed", "status": "pending", "activeForm": "Renaming"},
        ]
    }
    rewritten = await call(session, "task_write", again)
    assert [t["id"] for t in rewritten["tasks"]] == ["bugs", "task_ship_it", "a"]
    # Ambiguous (the same content twice): no reuse, `_2` for the second; an id an explicit one takes: `_2` too.
    same = {"content": "Fix the bugs", "status": "pending", "activeForm": "Fixing"}
    clash = {"id": "task_check_it", "content": "Other", "status": "pending", "activeForm": "Othering"}
    twice = {"tasks": [same, same, {"content": "Check it", "status": "pending", "activeForm": "Checking"}, clash]}
    ids = [t["id"] for t in (await call(session, "task_write", twice))["tasks"]]
    assert ids == ["task_fix_the_bugs", "task_fix_the_bugs_2", "task_check_it_2", "task_check_it"]

    emptied = await call(session, "task_write", {"tasks": []})
    assert emptied == {"content": "Tasks updated: [0/0 completed]", "tasks": [], "isError": False}
    assert (await session.display_state.get())["tasks"] == []
    nothing = await call(session, "task_update", {"id": "x"})  # Mastra: at least one field to change
    assert nothing["error"].startswith("Invalid arguments for tool 'task_update'")
    assert "Provide at least one field to update." in nothing["error"]
