"""A session turn is an `AgentRun` like any other: its waiting call is approved (or declined) with the `temporal`
CLI's signal, and the session sees the decision, as if it had been given through the session."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from keel import AgentController
from keel.client.controller import Session
from keel.client.devserver import DevServer
from keel.workflows.session_contracts import SessionSnapshot
from tests.controller.conftest import collect
from tests.controller.test_sessions import user, wait_pending
from tests.test_temporal_cli import temporal


async def idle(session: Session) -> SessionSnapshot:
    """The session once the turn has ended: `settled()` right after the signal, which went to the turn, not
    through the session (it answered at once, the decided call still shown as waiting, the turn's text not yet
    written)."""
    async with asyncio.timeout(20):
        snapshot = await session.settled()
    assert snapshot.pending == [] and not snapshot.running, snapshot
    return snapshot


async def test_the_temporal_cli_approves_a_session_turns_call_and_the_session_sees_it(
    ctl: AgentController, dev_server: DevServer, data_dir: Path
) -> None:
    session = await ctl.create_session(user())
    await session.send_message('tool save_note {"text": "by cli"}')
    [pending] = await wait_pending(session)
    listed = await temporal(dev_server, "workflow", "query", "-w", pending.run_id, "--type", "pending_tool_calls",
                            "-o", "json")  # fmt: skip
    assert [c["toolCallId"] for c in json.loads(listed)["queryResult"][0]] == [pending.tool_call_id]

    await temporal(
        dev_server, "workflow", "signal", "-w", pending.run_id, "--name", "tool_approval",
        "--input", json.dumps({"toolCallId": pending.tool_call_id, "approved": True}),
    )  # fmt: skip
    await idle(session)
    assert (data_dir / "notes.log").read_text() == "by cli\n"
    [*_, last] = await session.thread.list_messages()
    assert last["role"] == "assistant" and last["content"][-1]["type"] == "text", last
    events = await collect(session.events(offset=0, display_state=False), "agent_end")
    [ended] = [e for e in events if e["type"] == "tool_end"]
    assert ended["result"] == {"saved": "by cli"} and not ended["isError"]
    assert (await session.display_state.get())["pendingApprovals"] == {}


async def test_a_cli_decline_is_the_sessions_decline(
    ctl: AgentController, dev_server: DevServer, data_dir: Path
) -> None:
    session = await ctl.create_session(user())
    await session.send_message('tool save_note {"text": "declined by cli"}')
    [pending] = await wait_pending(session)
    await temporal(
        dev_server, "workflow", "signal", "-w", pending.run_id, "--name", "tool_approval",
        "--input", json.dumps({"toolCallId": pending.tool_call_id, "approved": False}),
    )  # fmt: skip
    final = await idle(session)
    assert final.pending == [] and not (data_dir / "notes.log").exists()
    events = await collect(session.events(offset=0, display_state=False), "agent_end")
    [ended] = [e for e in events if e["type"] == "tool_end"]
    assert ended["denied"] is True


async def test_settled_after_one_of_a_steps_two_calls_is_decided_on_the_run_answers_at_once(
    ctl: AgentController, dev_server: DevServer
) -> None:
    """From review: the run tells the session of a step's decisions once it has all of them, so while its other
    call waits the session still lists both; `settled()` waited for the session to drop the decided one (up to
    an hour, a query every 50 ms) though the turn waits on a person."""
    session = await ctl.create_session(user())
    await session.send_message("tools save_note save_note")
    async with asyncio.timeout(20):
        while len((await session.snapshot()).pending) < 2:
            await asyncio.sleep(0.05)
    first, second = (await session.snapshot()).pending
    await temporal(
        dev_server, "workflow", "signal", "-w", first.run_id, "--name", "tool_approval",
        "--input", json.dumps({"toolCallId": first.tool_call_id, "approved": True}),
    )  # fmt: skip
    async with asyncio.timeout(10):
        waiting = await session.settled()
    assert second.tool_call_id in {p.tool_call_id for p in waiting.pending}
    await session.respond_to_tool_approval(second.tool_call_id, "approve")
    async with asyncio.timeout(20):
        final = await session.settled()
    assert final.pending == [] and not final.running
