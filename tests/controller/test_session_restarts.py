"""Everything a session holds outlives its processes: kill -9 the worker and the Temporal dev server while one
session waits on a tool approval, another on ask_user, a third on its subagent's approval and a fourth holds an
always_allow_category grant; a new controller process re-attaches by (resource, scope), sees each pending item
in the display state, answers it, the grant still applies, and a subscriber from offset 0 gets every event once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from keel import AgentController
from keel.client import KeelClient
from keel.client.connection import connect
from keel.client.controller import Session
from keel.client.devserver import DevServer, DevServerConfig
from keel.storage import SQLiteStorage
from keel.workflows.session_contracts import PendingItem
from tests.conftest import free_port, worker_subprocess
from tests.controller.apps import app, controller

RESOURCE = f"restart-{uuid.uuid4().hex[:6]}"


@contextmanager
def worker(server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    with worker_subprocess(server, task_queue, tmp_path, data_dir, app="tests.controller.apps:app") as proc:
        yield proc


async def attached(address: str, task_queue: str, storage: SQLiteStorage) -> AgentController:
    """A controller as a new process makes it: connected afresh."""
    fresh = AgentController.__new__(AgentController)
    fresh.__dict__.update(controller.__dict__)
    fresh._client = None
    keel = KeelClient(await connect(address), task_queue=task_queue, app=app)
    return await fresh.init(keel, storage)


async def pending(session: Session, kind: str) -> PendingItem:
    async with asyncio.timeout(60):
        while True:
            found = [p for p in (await session.snapshot()).pending if p.kind == kind]
            if found:
                return found[0]
            await asyncio.sleep(0.1)


async def test_sessions_survive_kill_9_of_the_worker_and_the_server(
    task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    cfg = DevServerConfig(port=free_port(), ui_port=free_port(), state_dir=tmp_path / "temporal")
    storage = SQLiteStorage(tmp_path / "keel.db")  # the worker subprocess's storage, read by the test
    await storage.init()
    server = await DevServer(cfg).start(reuse=False)
    try:
        with worker(server, task_queue, tmp_path, data_dir) as first:
            ctl = await attached(cfg.address, task_queue, storage)
            approving = await ctl.create_session(RESOURCE, "approval")
            asking = await ctl.create_session(RESOURCE, "ask")
            delegating = await ctl.create_session(RESOURCE, "subagent")
            granted = await ctl.create_session(RESOURCE, "grant")
            await asking.permissions.set_for_tool("ask_user", "allow")
            await delegating.permissions.set_for_tool("subagent", "allow")
            await approving.send_message('tool save_note {"text": "before the crash"}')
            await asking.send_message("ask")
            await delegating.send_message('sub explore tool search_docs {"text": "crash"}')
            await granted.send_message('tool save_note {"text": "grant me"}')
            grant_call = await pending(granted, "approval")
            await granted.respond_to_tool_approval(grant_call.tool_call_id, "always_allow_category")
            await granted.settled()
            before = {
                "approval": await pending(approving, "approval"),
                "ask": await pending(asking, "suspension"),
                "subagent": await pending(delegating, "approval"),
            }
            os.kill(first.pid, signal.SIGKILL)
            assert server.proc is not None
            os.kill(server.proc.pid, signal.SIGKILL)
            server.proc.wait()
        server = await DevServer(cfg).start(reuse=False)
        with worker(server, task_queue, tmp_path, data_dir):
            ctl = await attached(cfg.address, task_queue, storage)  # a new controller process
            approving = await ctl.create_session(RESOURCE, "approval")
            asking = await ctl.create_session(RESOURCE, "ask")
            delegating = await ctl.create_session(RESOURCE, "subagent")
            granted = await ctl.create_session(RESOURCE, "grant")

            shown = await approving.display_state.get()
            assert shown["pendingApproval"]["toolCallId"] == before["approval"].tool_call_id
            shown = await asking.display_state.get()
            assert list(shown["pendingSuspensions"]) == [before["ask"].tool_call_id]
            shown = await delegating.display_state.get()
            assert shown["pendingApprovals"][before["subagent"].tool_call_id]["subagent"] == "sub_1"

            await approving.respond_to_tool_approval(before["approval"].tool_call_id, "approve")
            await asking.respond_to_tool_suspension(before["ask"].tool_call_id, ["PostgreSQL"])
            await delegating.respond_to_tool_approval(before["subagent"].tool_call_id, "approve")
            for session in (approving, asking, delegating):
                snapshot = await asyncio.wait_for(session.settled(), 90)
                assert not snapshot.running and snapshot.pending == []
            assert "PostgreSQL" in (await asking.thread.list_messages())[-1]["content"][0]["text"]
            assert "docs about crash" in (await delegating.thread.list_messages())[-1]["content"][0]["text"]

            # The grant outlived everything: an edit tool runs without asking.
            assert (await granted.permissions.grants())["categories"] == ["edit"]
            await granted.send_message('tool save_note {"text": "after the crash"}')
            after = await asyncio.wait_for(granted.settled(), 60)
            assert after.pending == [] and not after.running

            # A subscriber from 0 gets every event of the session once, in order.
            seen = []
            async for event in approving.events(offset=0, display_state=False):
                seen.append(event)
                if event["type"] == "agent_end":
                    break
            offsets = [e["offset"] for e in seen]
            assert offsets == sorted(set(offsets))
            kinds = [e["type"] for e in seen]
            assert kinds.count("tool_approval_required") == 1 and kinds.count("agent_start") == 1
            assert [e["result"] for e in seen if e["type"] == "tool_end"] == [{"saved": "before the crash"}]
    finally:
        server.stop()
        await storage.close()
    assert (data_dir / "notes.log").read_text().splitlines() == ["grant me", "before the crash", "after the crash"]


async def test_a_permission_changed_under_a_turn_s_first_step_holds_when_that_step_is_lost_with_its_worker(
    dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    """A session tells its running turn of a permission changed (a `turn_config` signal). With the worker killed
    during the turn's first step, the next worker runs the turn from its start, the signal in its first
    activation, where the SDK runs signal handlers before `run`: the turn dropped it (it had no turn config yet)
    and ran a tool the user had denied since. Now the turn starts with the config the session last sent."""
    storage = SQLiteStorage(tmp_path / "keel.db")
    await storage.init()
    with worker(dev_server, task_queue, tmp_path, data_dir) as first:
        ctl = await attached(dev_server.cfg.address, task_queue, storage)
        session = await ctl.create_session(RESOURCE, f"deny-{uuid.uuid4().hex[:6]}")
        await session.permissions.set_for_tool("save_note", "allow")
        await session.send_message('slowtool save_note {"text": "denied since"}', wait=False)
        async with asyncio.timeout(30):
            while not (data_dir / "slow.log").exists():
                await asyncio.sleep(0.05)
        await session.permissions.set_for_tool("save_note", "deny")  # while the step runs (3 s)
        await asyncio.sleep(0.5)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    with worker(dev_server, task_queue, tmp_path, data_dir):
        async with asyncio.timeout(90):
            await session.settled()
        answer = (await session.thread.list_messages())[-1]["content"][0]["text"]
    await storage.close()
    assert (data_dir / "slow.log").read_text().splitlines() == ["asked", "asked"]
    assert not (data_dir / "notes.log").exists()
    assert "denied by this session's permissions" in answer, answer
