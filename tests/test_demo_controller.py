"""The demo app's `assistant-controller` (app/demo_controller.py) end to end on a real worker, through the Python API
as a user meets it: a question, the explorer subagent (a child workflow), a plan to approve (then build mode), the
write to approve, the file in the workspace, the final answer; a rejected plan revised once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from keel import AgentController
from keel.app import App
from keel.app.demo import demo_workspace
from keel.app.demo_controller import assistant_controller
from keel.client import KeelClient
from keel.client.controller import Session
from keel.client.devserver import DevServer
from keel.storage import Storage
from keel.worker import build_worker
from keel.workflows.session_contracts import PendingItem
from tests.conftest import env_for_subprocess, worker_subprocess
from tests.controller.test_chat import PROMPT
from tests.terminal import Term

REQUEST = "write a script that greets the team"
PLAN = "plans/write-a-script-that-greets-the-team.md"


@pytest.fixture
async def ctl(client: Client, storage: Storage, task_queue: str, data_dir: Path) -> AsyncIterator[AgentController]:
    """The demo controller on a workspace in the test's data dir, with a worker for it."""
    controller = AgentController.from_definition(assistant_controller(demo_workspace()))
    app = App.of(controllers=[controller])
    async with build_worker(client, app, storage, task_queue=task_queue):
        await controller.init(KeelClient(client, task_queue=task_queue, app=app), storage)
        yield controller


async def waiting(session: Session, kind: str, timeout: float = 30) -> PendingItem:
    """The one call the session waits on, once it does."""
    async with asyncio.timeout(timeout):
        while True:
            found = [p for p in (await session.snapshot()).pending if p.kind == kind]
            if found:
                [item] = found
                return item
            await asyncio.sleep(0.05)


async def events(session: Session) -> list[dict[str, Any]]:
    end = await session.controller.storage.log_end(session.id)
    found = []
    async for event in session.events(offset=0, display_state=False):
        found.append(event)
        if event["offset"] >= end - 1:
            return found
    return found


async def last_text(session: Session) -> str:
    message = (await session.thread.list_messages())[-1]
    return "".join(p.get("text", "") for p in message["content"] if isinstance(p, dict))


async def test_plan_then_build_asks_delegates_submits_switches_and_writes_after_approval(
    ctl: AgentController, data_dir: Path
) -> None:
    session = await ctl.create_session(f"user-{uuid.uuid4().hex[:8]}")
    await session.send_message(REQUEST)  # returns once the turn waits on the user

    rules = {"read": "allow", "other": "allow", "edit": "ask", "execute": "ask"}  # the controller's initial_state
    assert await session.permissions.get() == {"categories": rules, "tools": {}}
    question = await waiting(session, "suspension")  # asked at once: no approval for ask_user
    assert question.tool_name == "ask_user" and (await session.snapshot()).pending == [question]
    assert question.suspend_payload == {
        "question": "Which language should the script be in?",
        "options": [{"label": "Python"}, {"label": "Shell"}],
        "selectionMode": "single_select",
    }
    await session.respond_to_tool_suspension(question.tool_call_id, "Shell")

    plan = await waiting(session, "suspension")  # the explorer ran, the plan is saved and submitted
    assert (plan.tool_name, plan.suspend_payload) == ("submit_plan", {"toolId": "submit_plan", "path": PLAN})
    written = (data_dir / "workspace" / PLAN).read_text()
    assert f"# Plan: {REQUEST}\n" in written and 'You answered "Shell": the script is `hello.sh`' in written
    assert "The explorer found: The workspace has " in written
    assert await session.mode.get() == "plan"
    await session.respond_to_tool_suspension(plan.tool_call_id, {"action": "approved"})

    write = await waiting(session, "approval")  # build mode: the edit asks
    assert await session.mode.get() == "build"
    assert (write.tool_name, write.category) == ("mastra_workspace_write_file", "edit")
    assert write.args == {"path": "hello.sh", "content": f'# {REQUEST}\necho "Hello from Keel!"\n'}
    assert not (data_dir / "workspace" / "hello.sh").exists()
    await session.respond_to_tool_approval(write.tool_call_id, "approve")
    final = await session.settled()

    assert not final.running and final.pending == []
    assert (data_dir / "workspace" / "hello.sh").read_text() == f'# {REQUEST}\necho "Hello from Keel!"\n'
    assert await last_text(session) == (
        "Done: hello.sh is in the workspace (Wrote 62 bytes to hello.sh). Run it with `sh hello.sh`."
    )
    seen = await events(session)
    started = [e["toolName"] for e in seen if e["type"] == "tool_start"]
    assert started == ["ask_user", "subagent", "save_plan", "submit_plan", "mastra_workspace_write_file"]
    assert [e["toolName"] for e in seen if e["type"] == "tool_approval_required"] == ["mastra_workspace_write_file"]
    [answered] = [e for e in seen if e["type"] == "tool_end" and e["toolCallId"] == question.tool_call_id]
    assert answered["result"]["content"] == "User answered: Shell"
    modes = [(e["previousModeId"], e["modeId"]) for e in seen if e["type"] == "mode_changed"]
    assert modes == [("plan", "build")]

    [sub_start] = [e for e in seen if e["type"] == "subagent_start"]
    [sub_tool] = [e for e in seen if e["type"] == "subagent_tool_start"]
    [sub_end] = [e for e in seen if e["type"] == "subagent_end"]
    assert (sub_start["agentType"], sub_start["modelId"]) == ("explorer", "scripted/explorer")
    assert sub_tool["subToolName"] == "mastra_workspace_list_files"
    assert sub_end["result"].startswith("The workspace has ")
    temporal = ctl.client.keel.temporal
    child = temporal.get_workflow_handle(f"{session.id}-turn-1-s2-{sub_start['toolCallId']}")  # step 2's call
    described = await child.describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED  # a child workflow of the turn, in the UI
    assert described.parent_id == f"{session.id}-turn-1"


async def test_a_rejected_plan_is_revised_with_the_feedback_once_then_the_assistant_waits(
    ctl: AgentController, data_dir: Path
) -> None:
    session = await ctl.create_session(f"user-{uuid.uuid4().hex[:8]}")
    await session.send_message(REQUEST)
    question = await waiting(session, "suspension")
    await session.respond_to_tool_suspension(question.tool_call_id, "Python")
    first = await waiting(session, "suspension")
    await session.respond_to_tool_suspension(first.tool_call_id, {"action": "rejected", "feedback": "add a test"})

    async with asyncio.timeout(30):  # the revised plan, submitted again
        while (second := await waiting(session, "suspension")).tool_call_id == first.tool_call_id:
            await asyncio.sleep(0.05)
    assert second.tool_name == "submit_plan" and second.suspend_payload["path"] == PLAN
    revised = (data_dir / "workspace" / PLAN).read_text()
    assert 'You answered "Python"' in revised and '- Revised for your feedback: "add a test".' in revised
    await session.respond_to_tool_suspension(second.tool_call_id, {"action": "rejected"})
    final = await session.settled()

    assert final.pending == [] and await session.mode.get() == "plan"
    assert await last_text(session) == (
        "Understood, I won't build that. Tell me what to change and I'll revise the plan."
    )
    await session.send_message("make it greet in French")  # taken as the feedback: the plan, revised again
    third = await waiting(session, "suspension")
    assert third.tool_name == "submit_plan" and third.tool_call_id not in (first.tool_call_id, second.tool_call_id)
    assert '- Revised for your feedback: "make it greet in French".' in (data_dir / "workspace" / PLAN).read_text()
    assert not (data_dir / "workspace" / "hello.py").exists()


async def test_keel_chat_against_the_demo_app_plans_asks_and_builds(
    dev_server: DevServer, client: Client, tmp_path: Path, data_dir: Path, task_queue: str
) -> None:
    """The README's `keel chat assistant-controller --resource alice`, on a pseudo-terminal, against a worker for
    the bundled demo app."""
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, app="keel.app.demo:app"):
        await KeelClient(client, task_queue=task_queue).wait_for_worker(30)
        env = {
            **env_for_subprocess(dev_server, KEEL_TASK_QUEUE=task_queue, KEEL_DATA_DIR=str(tmp_path / "chat")),
            "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
            "KEEL_APP": "keel.app.demo:app",
        }
        term = Term(["chat", "assistant-controller", "--resource", "alice"], env)
        try:
            term.expect(PROMPT, timeout=30)
            term.send(REQUEST)
            term.expect(r"\? Which language should the script be in\?\n  1\. Python\n  2\. Shell\n")
            term.expect(r"answer with a number or your own words: $")
            term.send("1")
            term.expect(r"  <- ask_user: User answered: Python\n")
            term.expect(r"  >> subagent explorer: List the files in the workspace and summarise what is there\.\n")
            term.expect(r"  << subagent explorer: The workspace has .*\n")
            term.expect(r'- You answered "Python": the script is `hello\.py`\.\n')
            term.expect(rf"\? plan submitted: {PLAN}\napprove, or reject \[feedback\]: $")
            term.send("approve")
            term.expect(r"  \* mode plan -> build\n")
            term.expect(
                r"\? approve mastra_workspace_write_file\(.*\)\? \[y\]es/\[n\]o/\[a\]lways for this category \(edit\) $"
            )
            term.send("y")
            term.expect(r"Done: hello\.py is in the workspace \(Wrote \d+ bytes to hello\.py\)\. ")
            term.expect(r"Run it with `python hello\.py`\.\n> $")
            assert (data_dir / "workspace" / "hello.py").read_text().endswith('print("Hello from Keel!")\n')
            term.send("/quit")
            assert term.wait() == 0
        finally:
            term.close()
