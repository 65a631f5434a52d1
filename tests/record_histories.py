"""Record the histories that `tests/test_replay.py` replays: `make record-histories`.

After a workflow change guarded by `workflow.patched`, add a generation (a new suffix in `GENERATIONS`) and run
this: it records only the missing files. The old files must keep replaying with the new code, so files are added,
never overwritten. The recording worker runs with the sandbox, as every test does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory

from keel.client import KeelClient, RunFailed
from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.client.errors import ToolCallRejected
from keel.client.indexing import start_indexing
from keel.client.workflow_time_travel import time_travel
from keel.client.workflows import Workflows
from keel.protocol import names
from keel.storage import SQLiteStorage
from keel.worker import build_worker
from keel.workflows import thread_workflow_id
from keel.workflows.contracts import ALL_SHAPES, ResumeStep, RunShape, WorkflowRunState
from keel.workflows.options import DEFAULT_OPTIONS, AgentActivityOptions
from tests.apps import app, search_workspace
from tests.conftest import free_port
from tests.workflows_json import apps as definition_apps

HISTORIES = Path(__file__).parent / "histories"
PAYLOADS = HISTORIES / "payloads"
"""The blobs of the payloads the histories hold by reference (a `DirectoryBlobStore`'s layout)."""


async def _approval(keel: KeelClient, run_id: str, approved: bool) -> None:
    while not (pending := await keel.pending_tool_calls(run_id)):
        await asyncio.sleep(0.05)
    await keel.approve(run_id, pending[0].tool_call_id, approved=approved)


async def _approved(keel: KeelClient, name: str) -> str:
    run_id = await keel.start_run("demo", "approve me", run_id=name)
    await _approval(keel, run_id, True)
    return run_id


async def _declined(keel: KeelClient, name: str) -> str:
    run_id = await keel.start_run("demo", "decline me", run_id=name)
    await _approval(keel, run_id, False)
    return run_id


async def _reused_ids(keel: KeelClient, name: str) -> str:
    run_id = await keel.start_run("reuser", "pay twice", run_id=name)
    approved: set[int | None] = set()  # the steps: both ask with the same tool call id
    for _ in range(2):
        while not (pending := [p for p in await keel.pending_tool_calls(run_id) if p.step not in approved]):
            await asyncio.sleep(0.05)
        approved.add(pending[0].step)
        await keel.approve(run_id, pending[0].tool_call_id, approved=True)
    return run_id


async def _parallel_partial_approval(keel: KeelClient, name: str) -> str:
    run_id = await keel.start_run("payer", "pay both", run_id=name)
    await _approval(keel, run_id, False)
    return run_id


_SCENARIOS: dict[str, Callable[[KeelClient, str], Awaitable[str]]] = {
    "approved": _approved,
    "declined": _declined,
    "multi_step": lambda keel, name: keel.start_run("multi", "steps=3", run_id=name),
    "tool_errors": lambda keel, name: keel.start_run("mistakes", "go", run_id=name),
    "max_steps": lambda keel, name: keel.start_run("multi", "steps=5", max_steps=2, run_id=name),
    "reused_ids": _reused_ids,
    "parallel_partial_approval": _parallel_partial_approval,
}

TASK_QUEUE = "record"

GENERATIONS = ["", "_tools_then_model", "_pinned", "_fused_local", "_local_budget", "_gen2", "_gen3"]
"""One set of files per guarded workflow change, named with its suffix: the files of every generation must keep
replaying. "": each tool call and model step its own activity; "_tools_then_model": a step's tools and the next
model call fused (`workflow.patched`); "_pinned": the run shape recorded as a marker at the start;
"_fused_local": a fused step run as a local activity, and the search attributes set at start not upserted
(`keelSearchAttributesAtStart` in the memo); "_local_budget": 16 local steps per workflow task (and at most 1
MiB of their results) pinned with the run's shape, tool results over 256 bytes by reference; "_gen2": the run's
rules in its shape (`RunShape.generation` 2), no patch asked mid-run; "_gen3": a step's tool calls that run as
activities of their own started as their arguments fit in a workflow task (`RunShape.generation` 3). Files of
other scenarios recorded before "_gen2" hold generation-1 shapes, and those recorded before "_gen3" generation-2
ones, and keep replaying as such."""

SHAPE_SCENARIOS = ["approved", "multi_step"]
"""Recorded once per run shape other than the default, for the replay tests with other worker settings."""


def options_of(shape: RunShape) -> AgentActivityOptions:
    """A worker's options that start runs of `shape`."""
    return AgentActivityOptions(
        model_as_local_activity=shape.model_as_local_activity,
        fuse_tools_with_next_model_step=shape.fuse_tools_with_next_model_step,
        fused_step_as_local_activity=shape.fused_step_as_local_activity,
        local_steps_per_task=shape.local_steps_per_task,
    )


def shape_suffix(shape: RunShape) -> str:
    model = "local" if shape.model_as_local_activity else "activity"
    steps = "fused" if shape.fuse_tools_with_next_model_step else "apart"
    if shape.fused_step_as_local_activity:
        steps += "_local"
    budget = "" if shape.local_steps_per_task == 4 else f"_{shape.local_steps_per_task}"
    return f"_shape_{model}_{steps}{budget}"


DEFAULT_SHAPE = DEFAULT_OPTIONS.shape()
ACTIVITY_STEPS_SHAPE = next(
    s for s in ALL_SHAPES if not s.model_as_local_activity and not s.fuse_tools_with_next_model_step
)
"""Every step a regular activity of its own (`AgentActivityOptions(model_as_local_activity=False,
fuse_tools_with_next_model_step=False)`)."""
CONTINUE_AS_NEW_SERVER = (("limit.historyCount.suggestContinueAsNew", "12"),)
"""A server that suggests continue-as-new after 12 history events, so a short run continues as new."""


WORKSPACE_PLAN = [
    [["mastra_workspace_write_file", {"path": "a.txt", "content": "one\n"}]],
    [["mastra_workspace_read_file", {"path": "a.txt"}], ["mastra_workspace_list_files", {"path": "."}]],
    [["mastra_workspace_edit_file", {"path": "a.txt", "old_string": "one", "new_string": "two"}]],
    [["mastra_workspace_execute_command", {"command": "echo started; sleep 30", "background": True}]],
    [["mastra_workspace_get_process_output", {"pid": "$pid", "wait": False}]],
    [["mastra_workspace_kill_process", {"pid": "$pid"}]],
]


async def _workspace_canceled(keel: KeelClient, name: str) -> str:
    plan = [
        [["mastra_workspace_execute_command", {"command": "sleep 61", "background": True}]],
        [["mastra_workspace_execute_command", {"command": "sleep 62", "timeout": 120}]],
    ]
    run_id = await keel.start_run("workspace", json.dumps(plan), run_id=name)
    while not any(e.payload.get("args", {}).get("command") == "sleep 62" for e in await _events(keel, run_id)):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    await keel.cancel(run_id)
    return run_id


async def _canceled_in_local_step(keel: KeelClient, name: str) -> str:
    """Canceled while its first fused step (three naps, one local activity) runs in its first workflow task: the
    step's cancellation ends the run (`CANCEL_ENDS_RUN_PATCH`) instead of being retried as an activity."""
    os.environ["KEEL_TEST_TOOL_SECONDS"] = "3"
    run_id = await keel.start_run("napper", "nap", run_id=name)
    await asyncio.sleep(1.0)
    await keel.cancel(run_id)
    return run_id


async def _events(keel: KeelClient, run_id: str) -> list[Any]:
    history = await keel.temporal.get_workflow_handle(run_id).fetch_history()
    found = []
    for event in history.events:
        attrs = event.activity_task_scheduled_event_attributes
        if attrs.activity_type.name == "keel.tool_call":
            found.append(attrs)
    return [_Scheduled(a) for a in found]


@dataclass(frozen=True)
class _Scheduled:
    attrs: Any

    @property
    def payload(self) -> dict[str, Any]:
        data = json.loads(self.attrs.input.payloads[0].data)
        return {"args": data.get("args", {})}


_STORAGE: list[SQLiteStorage] = []
"""The recording server's storage, for scenarios that save workflow definitions first."""


async def _definition_everything(keel: KeelClient, name: str) -> str:
    for raw in (definition_apps.CHILD, definition_apps.EVERYTHING):
        await _STORAGE[0].save_definition(raw["id"], raw)
    await keel.temporal.start_workflow("everything", {"n": 3, "name": "ann"}, id=name, task_queue=keel.task_queue)
    return name


async def _definition_resumed(keel: KeelClient, name: str) -> str:
    await _STORAGE[0].save_definition("ask", definition_apps.ASK)
    handle = await keel.temporal.start_workflow("ask", {"what": "x"}, id=name, task_queue=keel.task_queue)
    while (await handle.query("state", result_type=WorkflowRunState)).status != "suspended":
        await asyncio.sleep(0.05)
    await handle.signal("resume", ResumeStep(step="human", resume_data={"answer": "yes"}))
    return name


TRAVELLED = {
    "id": "travelled",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object"},
    "graph": [
        {"type": "mapping", "id": "m1", "mapConfig": {"step": {"initData": True, "path": "first"}}},
        {"type": "tool", "id": "one", "toolId": "tally"},
        {"type": "mapping", "id": "m2", "mapConfig": {"step": {"value": 2}}},
        {"type": "tool", "id": "two", "toolId": "tally"},
        {"type": "sleep", "id": "nap", "duration": 10},
        {"type": "mapping", "id": "m3", "mapConfig": {"step": {"value": 3}}},
        {"type": "tool", "id": "three", "toolId": "tally"},
        {"type": "tool", "id": "four", "toolId": "tally"},
    ],
}
"""Idempotent `tally` steps, chained locally: `one` and `two` in the run's first workflow task, `three` and
`four` in the task after the timer."""


async def _definition_time_travelled(keel: KeelClient, name: str) -> str:
    """Time travelled twice (`keel.client.workflow_time_travel`): to `two` with a new input (a reset to the run's
    first task; `one` returns its recorded output), then to `four` (a later task; `three` returns its own)."""
    await _STORAGE[0].save_definition("travelled", TRAVELLED)
    workflows = Workflows(_STORAGE[0], app, keel)
    await workflows.start_and_settle("travelled", {"first": 1}, run_id=name)
    await time_travel(keel, _STORAGE[0], name, "two", input_data={"step": 20})
    await keel.temporal.get_workflow_handle(name).result()
    await time_travel(keel, _STORAGE[0], name, "four")
    return name


async def _definition_by_keel(keel: KeelClient, name: str) -> str:
    """Started by Keel's client: marked at start (no upsert), answered by `settled`, no version in the memo."""
    await _STORAGE[0].save_definition("ask", definition_apps.ASK)
    workflows = Workflows(_STORAGE[0], app, keel)
    suspended = await workflows.start_and_settle("ask", {"what": "x"}, run_id=name, resource_id="ann")
    assert suspended.state.status == "suspended"
    await workflows.resume(name, "human", {"answer": "yes"})
    assert (await workflows.settle(name)).state.status == "success"
    return name


DIGITS = {
    "id": "digits",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^\\d+$"}}},
    "graph": [{"type": "mapping", "id": "code", "mapConfig": {"code": {"value": "\u0661\u0662"}}}],
}
"""An output of Arabic-Indic digits against `^\\d+$`: Python's `re` takes them for digits, RE2 (ECMA-262's
`\\d`) does not."""


async def _definition_output_on_re2(keel: KeelClient, name: str) -> str:
    """A definition run whose output check ran on RE2 (its load said `re2_patterns`) and failed where `re` would
    have passed: replayed on `re`, the run would complete instead of failing."""
    await _STORAGE[0].save_definition("digits", DIGITS)
    done = await Workflows(_STORAGE[0], app, keel).start_and_settle("digits", {}, run_id=name)
    assert done.state.status == "failed" and "Invalid output" in (done.state.error or ""), done.state
    return name


async def _definition_local_tool_retried(keel: KeelClient, name: str) -> str:
    """A tool step's local attempt fails (the tool's error, retryable before its last try): tried again as an
    activity (patch `keel-local-tool-step-temporal-retry-rule`)."""
    await _STORAGE[0].save_definition("stumbles", definition_apps.STUMBLES)
    done = await Workflows(_STORAGE[0], app, keel).start_and_settle("stumbles", {"n": 1}, run_id=name)
    assert (done.state.status, done.state.result) == ("success", {"n": 2}), done.state
    return name


async def _definition_canceled_in_local_step(keel: KeelClient, name: str) -> str:
    """Canceled while its local tool step (`record`, 3 s) runs: the step sees the cancel first and stops
    (`STOPPED_FOR_CANCEL`), and the run waits for the cancel."""
    os.environ["KEEL_TEST_TOOL_SECONDS"] = "3"
    steps = [{"type": "tool", "id": "slow", "toolId": "record"}]
    await _STORAGE[0].save_definition("canceled-soon", definition_apps.definition("canceled-soon", steps))
    handle = await keel.temporal.start_workflow("canceled-soon", {"n": 1}, id=name, task_queue=keel.task_queue)
    await asyncio.sleep(1.0)
    await handle.cancel()
    return name


async def _session_sent_again(keel: KeelClient, name: str) -> str:
    """A session sent one message id twice (two updates, as across a continue-as-new): the second answered with
    the first's answer (patch `keel-session-send-once` at generation 1; the session's own rule from generation 2)."""
    from keel.client.controller import ControllerClient
    from keel.workflows.session_contracts import Accepted, SendMessage

    session = await ControllerClient(keel, _STORAGE[0], "assistant-controller").create_session(name)
    handle = keel.temporal.get_workflow_handle(session.id)
    message = SendMessage(content="text once", mode="send", id=f"{name}-m1")
    first = await handle.execute_update(names.SESSION_SEND_UPDATE, message, id="first", result_type=Accepted)
    await session.settled()
    again = await handle.execute_update(names.SESSION_SEND_UPDATE, message, id="again", result_type=Accepted)
    assert again == first
    return session.id


async def _session_delivered(keel: KeelClient, name: str) -> str:
    """A session delivered a message into a turn waiting on `ask_user`; the turn failed (terminated) without
    reading it; the session asked its thread (`keel.session_unheard`, generation 3) and gave the message a turn of
    its own, ahead of a follow-up queued before."""
    from keel.client.controller import ControllerClient

    session = await ControllerClient(keel, _STORAGE[0], "assistant-controller").create_session(name)
    await session.state.set({"yolo": True})
    first = await session.send_message("ask")
    while not (await session.snapshot()).pending:
        await asyncio.sleep(0.05)
    assert (await session.send_message("text unread", wait=False)).delivered
    assert (await session.follow_up("text later")).queued
    assert first.run_id is not None
    await keel.temporal.get_workflow_handle(first.run_id).terminate("the turn fails")
    while (await session.snapshot()).run_id == first.run_id:
        await asyncio.sleep(0.05)
    await session.settled()
    said = [m["content"] for m in await session.thread.list_messages() if m["role"] == "user"]
    assert said[-2:] == ["text unread", "text later"], said
    return session.id


async def _session_late_waiting(keel: KeelClient, name: str) -> str:
    """A session ran a turn; a `turn_waiting` of that turn (and of a subagent of it) came in after its end and was
    not taken (generation 4); a later turn ran as usual."""
    from keel.client.controller import ControllerClient
    from keel.workflows.session_contracts import PendingItem, TurnWaiting

    session = await ControllerClient(keel, _STORAGE[0], "assistant-controller").create_session(name)
    ended = (await session.send_message("text first")).run_id
    assert ended is not None
    late = [
        PendingItem(kind="approval", run_id=ended, tool_call_id="call_late", tool_name="save_note"),
        PendingItem(kind="suspension", run_id=f"{ended}-sub-1", tool_call_id="call_sub", tool_name="ask_user"),
    ]
    await keel.temporal.get_workflow_handle(session.id).signal(names.TURN_WAITING_SIGNAL, TurnWaiting(items=late))
    await session.send_message("text second")
    assert (await session.settled()).pending == []
    return session.id


async def _session_busy(keel: KeelClient, name: str) -> str:
    """A session whose queue was never empty between turns (a goal, a follow-up) continued as new between two
    queued turns, carrying the queue (generation 5); the `settled` waiting then was answered by a later
    execution. Recorded on a server suggesting continue-as-new after 12 events: the first execution."""
    from keel.client.controller import ControllerClient

    session = await ControllerClient(keel, _STORAGE[0], "assistant-controller").create_session(name)
    await session.goal.set("keep echoing", max_runs=3)
    await session.send_message("text start", wait=False)
    follow_up = await session.follow_up("text follow-up")
    await session.settled(follow_up.run_id)
    return session.id


async def _session_send_waits(keel: KeelClient, name: str) -> str:
    """Sends that wait for their turn in the `send` update itself (`SendMessage.wait`, generation 8, one update
    per turn): a text turn, a turn that waits on an approval (answered once the call waits), approved, and a
    waited steer."""
    from keel.client.controller import ControllerClient

    session = await ControllerClient(keel, _STORAGE[0], "assistant-controller").create_session(name)
    assert (await session.send_message("text first")).settled
    waiting = await session.send_message('tool save_note {"text": "asked"}')
    assert waiting.settled
    [call] = (await session.snapshot()).pending
    await session.respond_to_tool_approval(call.tool_call_id, "approve")
    await session.settled(waiting.run_id)
    assert (await session.steer("text steered", wait=True)).settled
    return session.id


async def _session_send_waits_across_continue(keel: KeelClient, name: str) -> str:
    """A waited steer queued behind follow-ups: the session continued as new before its turn ran and answered the
    send "not settled" (`Accepted.settled` False); the client asked the new execution. Recorded on a server
    suggesting continue-as-new after 12 events: the first execution."""
    from keel.client.controller import ControllerClient

    session = await ControllerClient(keel, _STORAGE[0], "assistant-controller").create_session(name)
    await session.send_message("text start", wait=False)
    for i in range(3):
        await session.follow_up(f"text follow-up {i}")
    assert (await session.steer("text steered", wait=True)).settled is False
    return session.id


async def _session_goal_aborted(keel: KeelClient, name: str) -> str:
    """An abort came while the goal was judged after a turn: the verdict said continue, and no turn was queued
    for it (generation 6). The judge is slowed so the abort lands while it decides."""
    from keel.activities.session import SessionActivities
    from keel.client.controller import ControllerClient
    from keel.workflows.session_contracts import JudgeInput, JudgeResult

    async def slow(self: SessionActivities, input: JudgeInput) -> JudgeResult:
        await asyncio.sleep(1.5)
        return JudgeResult(done=False, reason="not yet")

    original = SessionActivities._judge
    SessionActivities._judge = slow  # type: ignore[method-assign]
    try:
        session = await ControllerClient(keel, _STORAGE[0], "assistant-controller").create_session(name)
        await session.goal.set("keep echoing", max_runs=3)
        await session.send_message("text start")
        async for event in session.events(offset=0, display_state=False):
            if event["type"] == "goal_evaluation" and event["payload"].get("status") == "pending":
                break
        await session.abort()
        await session.settled()
        assert (await session.snapshot()).queued == 0
    finally:
        SessionActivities._judge = original  # type: ignore[method-assign]
    return session.id


async def _session_pending_overflow(keel: KeelClient, name: str) -> str:
    """A turn waited on an approval; a `turn_waiting` of that turn brought more calls than the session keeps
    waiting (`MAX_PENDING`): the session kept what fits and declined the rest at once (generation 7). The turn was
    then aborted."""
    from keel.client.controller import ControllerClient
    from keel.workflows.agent_session import MAX_PENDING
    from keel.workflows.session_contracts import PendingItem, TurnWaiting

    session = await ControllerClient(keel, _STORAGE[0], "assistant-controller").create_session(name)
    await session.send_message('tool save_note {"text": "kept"}', wait=False)
    while not (await session.snapshot()).pending:
        await asyncio.sleep(0.05)
    turn = (await session.snapshot()).run_id
    assert turn is not None
    more = [
        PendingItem(kind="approval", run_id=turn, tool_call_id=f"call_more_{n}", tool_name="save_note")
        for n in range(MAX_PENDING + 1)
    ]
    await keel.temporal.get_workflow_handle(session.id).signal(names.TURN_WAITING_SIGNAL, TurnWaiting(items=more))
    while len((await session.snapshot()).pending) < MAX_PENDING:
        await asyncio.sleep(0.05)
    await session.abort()
    await session.settled()
    return session.id


async def _thread_turns(keel: KeelClient, thread: str) -> tuple[str, str]:
    """A thread's turns: 'hold' wakes a run, a message is delivered into it, one is queued, the run is
    approved, the queued message starts the next run. Returns the first run's id and the entity's."""
    first = await keel.send_message("listener", thread, "ann", "hold", message_id=f"{thread}-1")
    assert first.run_id is not None
    while (await keel.describe(first.run_id)).status != "suspended":
        await asyncio.sleep(0.05)
    delivered = await keel.send_message("listener", thread, "ann", "also this", message_id=f"{thread}-2")
    assert delivered.outcome == "delivered"
    queued = await keel.send_message("listener", thread, "ann", "next", if_active="queue", message_id=f"{thread}-3")
    assert queued.outcome == "queued"
    await keel.approve(first.run_id, "hold-1")
    assert (await keel.result(first.run_id)).text == "heard: hold | also this"
    entity = thread_workflow_id("listener", thread)
    while len([e async for e in keel.temporal.list_workflows(f"KeelThreadId='{thread}'")]) < 2:
        await asyncio.sleep(0.1)
    return first.run_id, entity


async def _delivered_message(keel: KeelClient, name: str) -> str:
    run_id, _ = await _thread_turns(keel, name)
    return run_id


async def _thread_entity(keel: KeelClient, name: str) -> str:
    _, entity = await _thread_turns(keel, name)
    await asyncio.sleep(1)  # the follow-up run started and the entity waits on it
    return entity


async def _bad_input(keel: KeelClient, name: str) -> str:
    await keel.temporal.start_workflow("AgentRun", id=name, task_queue=keel.task_queue)  # no input at all
    return name


async def _refused_run_id(keel: KeelClient, name: str) -> str:
    """A run, then a second execution under its id started as the `temporal` CLI would (no search attributes,
    no memo): refused its id, it removes Keel's search attributes and fails. The file holds the refused one."""
    await keel.result(await keel.start_run("multi", "steps=1", run_id=name))
    input = {"agentId": "multi", "messages": "steps=2"}
    handle = await keel.temporal.start_workflow("AgentRun", input, id=name, task_queue=keel.task_queue)
    with contextlib.suppress(WorkflowFailureError):
        await handle.result()
    return name


async def _approved_while_stepping(keel: KeelClient, name: str) -> str:
    """Two approvals sent while the model step that asks for `call_1` runs (as a regular activity): one for it,
    accepted and waiting for the step, then deciding it; one for `call_9`, which the step does not ask for,
    refused once the step has answered (an update completed with a failure)."""
    from tests.apps import HOLDER

    run_id = await keel.start_run("holder", "pay", run_id=name)
    while HOLDER["asked"] <= HOLDER["released"]:
        await asyncio.sleep(0.01)
    approving = asyncio.create_task(keel.approve(run_id, "call_1"))
    stranger = asyncio.create_task(keel.approve(run_id, "call_9"))
    await asyncio.sleep(0.5)
    HOLDER["released"] = HOLDER["asked"]
    await approving
    with contextlib.suppress(ToolCallRejected):
        await stranger
    return run_id


async def _signalled_while_stepping(keel: KeelClient, name: str) -> str:
    """The same by `tool_approval` signals: `call_9` recorded as rejected, `call_1` decided once the step asks
    for it (the `SIGNAL_WAITS_FOR_STEP_PATCH` marker with it)."""
    from tests.apps import HOLDER

    run_id = await keel.start_run("holder", "pay", run_id=name)
    while HOLDER["asked"] <= HOLDER["released"]:
        await asyncio.sleep(0.01)
    handle = keel.temporal.get_workflow_handle(run_id)
    for call_id in ("call_9", "call_1"):
        await handle.signal(names.TOOL_APPROVAL_SIGNAL, {"toolCallId": call_id, "approved": True})
    await asyncio.sleep(0.5)
    HOLDER["released"] = HOLDER["asked"]
    return run_id


_PAY = {"agentId": "payer", "messages": "pay"}
_APPROVE_LARGE = {"toolCallId": "large", "approved": True}


async def _signalled_before_first_step(keel: KeelClient, name: str) -> str:
    """A `tool_approval` signal in an execution's first activation, before its first model step has begun
    (where one lands when the task of the step it was sent during was lost with its worker; here by
    signal-with-start): it waits for the step, which asks for `large`, and decides it (the
    `APPROVAL_BEFORE_FIRST_STEP_PATCH` and `SIGNAL_WAITS_FOR_STEP_PATCH` markers with it)."""
    return await _signalled_at_start(keel, name, _PAY, names.TOOL_APPROVAL_SIGNAL, _APPROVE_LARGE)


async def _approved_before_first_step(keel: KeelClient, name: str) -> str:
    """The same by update (update-with-start): accepted before the first step, it waits for it, then decides."""
    from temporalio.client import WithStartWorkflowOperation
    from temporalio.common import WorkflowIDConflictPolicy

    start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
        "AgentRun", _PAY, id=name, task_queue=keel.task_queue, id_conflict_policy=WorkflowIDConflictPolicy.FAIL
    )
    await keel.temporal.execute_update_with_start_workflow(
        names.APPROVE_TOOL_CALL_UPDATE, _APPROVE_LARGE, start_workflow_operation=start
    )
    return name


async def _turn_config_before_run(keel: KeelClient, name: str) -> str:
    """A session's turn whose `turn_config` (`save_note` allowed, now denied) reaches it before `run` begins
    (where one sent during the first step lands when that step's task was lost with its worker; here by
    signal-with-start): the turn starts with it (the `TURN_CONFIG_BEFORE_RUN_PATCH` marker), and the call is
    denied."""
    from keel.workflows.contracts import AgentRunInput, PermissionRules, TurnConfig

    def turn(policy: Literal["allow", "deny"]) -> TurnConfig:
        rules = PermissionRules(tools={"save_note": policy})
        return TurnConfig(session_id=name, controller_id="assistant-controller", mode_id="plan", permissions=rules)

    input = AgentRunInput(
        agent_id="assistant", messages='tool save_note {"text": "denied"}', thread_id=name, turn=turn("allow")
    )
    return await _signalled_at_start(keel, name, input, names.TURN_CONFIG_SIGNAL, turn("deny"))


async def _signalled_at_start(keel: KeelClient, name: str, input: Any, signal: str, payload: Any) -> str:
    """An `AgentRun` started with `signal` (signal-with-start: the signal is in its first activation)."""
    await keel.temporal.start_workflow(
        "AgentRun", input, id=name, task_queue=keel.task_queue, start_signal=signal, start_signal_args=[payload]
    )
    return name


async def _session(keel: KeelClient, name: str) -> tuple[str, str, str, str]:
    """A controller session (tests/controller/apps.py) through its turns: a tool call approved through the
    session, an ask_user suspension resumed, a subagent whose call waits for approval in the session. Returns
    the session's id and the three turns' run ids."""
    from keel.client.controller import ControllerClient

    sessions = ControllerClient(keel, _STORAGE[0], "assistant-controller")
    session = await sessions.create_session(name)

    async def answer(kind: str, data: Any = None) -> str:
        while not (found := [p for p in (await session.snapshot()).pending if p.kind == kind]):
            await asyncio.sleep(0.05)
        if kind == "approval":
            await session.respond_to_tool_approval(found[0].tool_call_id, "approve")
        else:
            await session.respond_to_tool_suspension(found[0].tool_call_id, data)
        await session.settled()
        return found[0].run_id

    await session.send_message('tool save_note {"text": "recorded"}')
    approved = await answer("approval")
    await session.permissions.set_for_tool("ask_user", "allow")
    await session.send_message("ask")
    suspended = await answer("suspension", "SQLite")
    await session.permissions.set_for_tool("subagent", "allow")
    await session.send_message('sub explore tool search_docs {"text": "x"}')
    subagent = await answer("approval")
    return session.id, approved, suspended, subagent


_SESSION_RUNS: dict[str, str] = {}

_SESSION_HISTORIES = (
    "session_entity",
    "session_sent_again",
    "session_sent_again_gen2",
    "session_delivered_gen3",
    "session_late_waiting_gen4",
    "session_busy_gen5",
    "session_goal_aborted_gen6",
    "session_pending_overflow_gen7",
    "session_send_waits_gen8",
    "session_send_waits_across_continue_gen8",
)

WORKFLOW_IDS = {
    **{name: names.session_workflow_id("assistant-controller", name, None) for name in _SESSION_HISTORIES},
    "tool_call_approved": "keel-tool-call-listener-hold-tool_call_approved",  # `tool_call_workflow_id`
}
"""Histories whose workflow id is not their file's name (a session's id is derived from its controller,
resource and scope): the replayer must see the recorded id, from which the session names its turns."""


async def _recorded_turn(kind: str) -> str:
    return _SESSION_RUNS[kind]


async def _session_entity(keel: KeelClient, name: str) -> str:
    session_id, approved, suspended, subagent = await _session(keel, name)
    _SESSION_RUNS.update(approved=approved, suspended=suspended, subagent=subagent)
    return session_id


async def _index_workspace(keel: KeelClient, name: str) -> str:
    """Three files of the BM25 workspace indexed by `IndexWorkspace` (one heartbeat per batch)."""
    root = Path(search_workspace.filesystem.base_path)
    root.mkdir(parents=True, exist_ok=True)  # the worker may still be initialising the workspace
    for i in range(3):
        (root / f"doc{i}.md").write_text(f"document {i}\n")
    handle = await start_indexing(keel, search_workspace.id, ["."], workflow_id=name)
    await handle.result()
    return name


async def _suspended_fused_step(keel: KeelClient, name: str) -> str:
    """`asker`: a message delivered while `ask` waits for approval, then `ask` suspends inside the fused step
    (its writes go back to the run), resumed."""
    run_id = await keel.start_run("asker", "ask", run_id=name)
    await keel.settle(run_id)
    await keel.deliver(run_id, "also this")
    await keel.approve(run_id, "ask-1")
    await keel.settle(run_id)
    await keel.resume_tool(run_id, "ask-1", {"answer": "that one"})
    return run_id


async def _tool_call(keel: KeelClient, name: str) -> str:
    """An MCP-style `ToolCall` of `listener`'s `hold` (it needs approval), approved by the `tool_approval` signal."""
    from keel.client.tool_calls import ToolCalls

    tool = next(t for t in app.agents["listener"].tools if t.id == "hold")
    started = await ToolCalls(keel).start("listener", tool, {}, call_id=name, caller="mcp")
    handle = keel.temporal.get_workflow_handle(started.workflow_id)
    async with asyncio.timeout(30):
        while not await handle.query(names.PENDING_TOOL_CALLS_QUERY):
            await asyncio.sleep(0.05)
    await handle.signal(names.TOOL_APPROVAL_SIGNAL, {"toolCallId": name, "approved": True})
    return started.workflow_id


async def _blob_sweep(keel: KeelClient, name: str) -> str:
    """A dry-run `BlobSweep` over the recording's payload store."""
    from keel.protocol.blob_sweep import SweepRequest

    await keel.temporal.start_workflow(
        names.BLOB_SWEEP, SweepRequest(dry_run=True), id=name, task_queue=keel.task_queue
    )
    return name


@dataclass(frozen=True)
class Scenario:
    run: Callable[[KeelClient, str], Awaitable[str]]
    shape: RunShape | None
    """The worker's run shape; None marks a file of an older generation, which today's code cannot record."""
    server: tuple[tuple[str, str], ...] = ()
    """Dynamic config of the recording server."""
    ends: bool = True
    """False for a run recorded while it still runs (a thread's entity, which waits for more messages)."""
    latest: bool = False
    """Record the latest execution under the run's id, not the first."""
    turn_then_continue: bool = False
    """Record the first execution that started a turn (a child run) and continued as new."""


SCENARIOS: dict[str, Scenario] = {
    **{
        name + gen: Scenario(scenario, DEFAULT_SHAPE if gen == GENERATIONS[-1] else None)
        for gen in GENERATIONS
        for name, scenario in _SCENARIOS.items()
    },
    **{
        name + shape_suffix(shape): Scenario(_SCENARIOS[name], None)  # recorded at generation 1
        for shape in ALL_SHAPES
        if shape != DEFAULT_SHAPE
        for name in SHAPE_SCENARIOS
    },
    "bad_input": Scenario(_bad_input, DEFAULT_SHAPE),
    "first_step_retried": Scenario(lambda keel, name: keel.start_run("flaky", "hi", run_id=name), DEFAULT_SHAPE),
    "workspace_tools": Scenario(
        lambda keel, name: keel.start_run("workspace", json.dumps(WORKSPACE_PLAN), run_id=name), DEFAULT_SHAPE
    ),
    "workspace_canceled": Scenario(_workspace_canceled, DEFAULT_SHAPE),
    "canceled_in_local_step": Scenario(_canceled_in_local_step, None),
    # ... and says so in `KeelStatus` (`CANCELED_STATUS_PATCH`).
    "canceled_in_local_step_gen2": Scenario(_canceled_in_local_step, DEFAULT_SHAPE),
    # ... the step seeing the cancel first and stopping (`STOPPED_FOR_CANCEL`); the run waits for the cancel.
    "canceled_in_local_step_stopped": Scenario(_canceled_in_local_step, DEFAULT_SHAPE),
    "definition_every_entry_type": Scenario(_definition_everything, DEFAULT_SHAPE),
    "definition_suspended_and_resumed": Scenario(_definition_resumed, DEFAULT_SHAPE),
    "definition_started_by_keel": Scenario(_definition_by_keel, DEFAULT_SHAPE),
    # Idempotent tool steps tried as local activities first (`LoadDefinitionResult.local_tool_steps`).
    "definition_every_entry_type_local_steps": Scenario(_definition_everything, DEFAULT_SHAPE),
    "definition_started_by_keel_local_steps": Scenario(_definition_by_keel, DEFAULT_SHAPE),
    # Rules recorded by the load (`LoadDefinitionResult.temporal_retry_rule`, `.foreach_lanes`), no patches asked.
    "definition_every_entry_type_load_rules": Scenario(_definition_everything, DEFAULT_SHAPE),
    # Time travelled by the client that signalled the instruction after its reset (the run waited for it).
    "definition_time_travelled": Scenario(_definition_time_travelled, None, latest=True),
    # Time travelled by the client that stores it before its reset (the run reads it with `keel.reset_origin`).
    "definition_time_travelled_stored": Scenario(_definition_time_travelled, DEFAULT_SHAPE, latest=True),
    "delivered_message": Scenario(_delivered_message, None),
    "delivered_message_gen2": Scenario(_delivered_message, DEFAULT_SHAPE),
    "suspended_fused_step": Scenario(_suspended_fused_step, None),
    "suspended_fused_step_gen2": Scenario(_suspended_fused_step, DEFAULT_SHAPE),
    "thread_entity": Scenario(_thread_entity, DEFAULT_SHAPE, ends=False),
    "index_workspace": Scenario(_index_workspace, DEFAULT_SHAPE),
    "tool_call_approved": Scenario(_tool_call, DEFAULT_SHAPE),
    "blob_sweep": Scenario(_blob_sweep, DEFAULT_SHAPE),
    "refused_run_id": Scenario(_refused_run_id, None, latest=True),
    "refused_run_id_gen2": Scenario(_refused_run_id, DEFAULT_SHAPE, latest=True),
    # An AgentController session and its turns (recorded by the first; the others are its children).
    "session_entity": Scenario(_session_entity, DEFAULT_SHAPE, ends=False),
    "definition_local_tool_retried": Scenario(_definition_local_tool_retried, DEFAULT_SHAPE),
    "definition_output_on_re2": Scenario(_definition_output_on_re2, DEFAULT_SHAPE),
    "definition_canceled_in_local_step": Scenario(_definition_canceled_in_local_step, DEFAULT_SHAPE),
    "session_sent_again": Scenario(_session_sent_again, None, ends=False),
    "session_sent_again_gen2": Scenario(_session_sent_again, DEFAULT_SHAPE, ends=False),
    "session_delivered_gen3": Scenario(_session_delivered, DEFAULT_SHAPE, ends=False),
    "session_late_waiting_gen4": Scenario(_session_late_waiting, DEFAULT_SHAPE, ends=False),
    "session_busy_gen5": Scenario(
        _session_busy, DEFAULT_SHAPE, CONTINUE_AS_NEW_SERVER, ends=False, turn_then_continue=True
    ),
    "session_goal_aborted_gen6": Scenario(_session_goal_aborted, DEFAULT_SHAPE, ends=False),
    "session_pending_overflow_gen7": Scenario(_session_pending_overflow, DEFAULT_SHAPE, ends=False),
    "session_send_waits_gen8": Scenario(_session_send_waits, DEFAULT_SHAPE, ends=False),
    "session_send_waits_across_continue_gen8": Scenario(
        _session_send_waits_across_continue, DEFAULT_SHAPE, CONTINUE_AS_NEW_SERVER, ends=False, turn_then_continue=True
    ),
    # Approvals that reached the run while the (regular) model step asking for the call ran.
    "approved_while_stepping": Scenario(_approved_while_stepping, ACTIVITY_STEPS_SHAPE),
    "signalled_while_stepping": Scenario(_signalled_while_stepping, ACTIVITY_STEPS_SHAPE),
    # Approvals in an execution's first activation, before its first step (a task lost with its worker).
    "signalled_before_first_step": Scenario(_signalled_before_first_step, DEFAULT_SHAPE),
    "approved_before_first_step": Scenario(_approved_before_first_step, DEFAULT_SHAPE),
    "turn_config_before_run": Scenario(_turn_config_before_run, DEFAULT_SHAPE),
    "session_turn_approved": Scenario(lambda keel, name: _recorded_turn("approved"), DEFAULT_SHAPE),
    "session_turn_suspended": Scenario(lambda keel, name: _recorded_turn("suspended"), DEFAULT_SHAPE),
    "session_turn_subagent": Scenario(lambda keel, name: _recorded_turn("subagent"), DEFAULT_SHAPE),
    "continued_as_new": Scenario(
        lambda keel, name: keel.start_run("bulky", "steps=4 size=1000", run_id=name), None, CONTINUE_AS_NEW_SERVER
    ),
    "continued_as_new_gen2": Scenario(
        lambda keel, name: keel.start_run("bulky", "steps=4 size=1000", run_id=name),
        DEFAULT_SHAPE,
        CONTINUE_AS_NEW_SERVER,
    ),
}
"""Each scenario starts a run named after it (and approves what it needs) and returns its id; the file holds the
run's first execution (the one that continued as new, for `continued_as_new`)."""


def referenced_blobs(history_json: str) -> set[str]:
    """The keys of the payloads a history holds by reference (external storage claims)."""
    keys: set[str] = set()
    for data in re.findall(r'"data": ?"([A-Za-z0-9+/=]+)"', history_json):
        with contextlib.suppress(ValueError):
            keys.update(
                re.findall(r'"claimData":\{"key":"([0-9a-f]{64})"', base64.b64decode(data).decode("utf-8", "replace"))
            )
    return keys


async def record() -> None:
    missing = {name for name in SCENARIOS if not (HISTORIES / f"{name}.json").exists()}
    stale = sorted(name for name in missing if SCENARIOS[name].shape is None)
    if stale:
        raise SystemExit(f"Histories of an older generation are missing and cannot be re-recorded: {stale}")
    for server in dict.fromkeys(SCENARIOS[name].server for name in missing):
        await record_on_server(dict(server), sorted(n for n in missing if SCENARIOS[n].server == server))


async def record_on_server(dynamic_config: dict[str, str], names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["KEEL_DATA_DIR"] = tmp
        cfg = DevServerConfig(
            port=free_port(), ui_port=free_port(), state_dir=Path(tmp), extra_dynamic_config=dynamic_config
        )
        server = await DevServer(cfg).start(reuse=False)
        storage = SQLiteStorage(Path(tmp) / "keel.db")
        await storage.init()
        _STORAGE[:] = [storage]
        try:
            client = await connect(cfg.address, payloads=storage.payloads())
            keel = KeelClient(client, task_queue=TASK_QUEUE, app=app)
            runs: dict[str, str] = {}
            for shape in dict.fromkeys(SCENARIOS[name].shape for name in names):
                assert shape is not None
                options = options_of(shape)
                async with build_worker(client, app, storage, task_queue=TASK_QUEUE, options=options):
                    for name in (n for n in names if SCENARIOS[n].shape == shape):
                        runs[name] = await SCENARIOS[name].run(keel, name)
                        if not SCENARIOS[name].ends:
                            continue
                        if name.startswith(("definition_", "index_", "tool_call_", "blob_sweep")):  # not agent runs
                            with contextlib.suppress(WorkflowFailureError):  # a run that fails as it should
                                await client.get_workflow_handle(runs[name]).result()
                            continue
                        with contextlib.suppress(RunFailed):
                            await keel.result(runs[name])
            HISTORIES.mkdir(exist_ok=True)
            for name, run_id in runs.items():
                executions = [e async for e in client.list_workflows(f"WorkflowId='{run_id}'")]
                pick = max if SCENARIOS[name].latest else min
                chosen = pick(executions, key=lambda e: e.start_time)
                history = await client.get_workflow_handle(run_id, run_id=chosen.run_id).fetch_history()
                if SCENARIOS[name].turn_then_continue:
                    history = await _turn_then_continue(client, run_id, executions)
                (HISTORIES / f"{name}.json").write_text(history.to_json())
                print(f"recorded {name}: {len(history.events)} events")
                # Payloads of 256 KiB or more are in the history by reference: their blobs replay with it.
                for key in referenced_blobs(history.to_json()):
                    kept = PAYLOADS / key[:2] / key
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(Path(tmp) / "payloads" / key[:2] / key, kept)
        finally:
            await storage.close()
            server.stop()


async def _turn_then_continue(client: Client, run_id: str, executions: list[Any]) -> WorkflowHistory:
    for execution in sorted(executions, key=lambda e: e.start_time):
        history = await client.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()
        kinds = [e.event_type for e in history.events]
        if (
            EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED in kinds
            and kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        ):
            return history
    raise SystemExit(f"{run_id}: no execution started a turn and continued as new")


if __name__ == "__main__":
    asyncio.run(record())
