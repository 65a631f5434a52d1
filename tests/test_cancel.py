"""A canceled run ends as canceled wherever the cancel lands: while a tool runs, alone or with the next model
step in one activity, the model is never asked again."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from pydantic import BaseModel
from temporalio.client import Client, WorkflowExecutionStatus

from keel.app import Agent, App, ToolContext, tool
from keel.model_providers import ModelRequest, ModelResponse, ModelToolCall, ScriptedModel
from keel.protocol import names
from keel.storage import Storage
from keel.workflows.contracts import AgentRunInput
from keel.workflows.search_attributes import KEEL_STATUS
from tests.conftest import running_worker


class Nap(BaseModel):
    seconds: float


def app_napping(idempotent: bool, asked: list[int], started: asyncio.Event, seconds: float = 600) -> App:
    @tool("nap", idempotent=idempotent)
    async def nap(args: Nap, ctx: ToolContext) -> str:
        """Sleep."""
        started.set()
        await asyncio.sleep(args.seconds)
        return "rested"

    def answer(request: ModelRequest) -> ModelResponse:
        asked.append(len(request.messages))
        if len(asked) == 1:
            return ModelResponse(tool_calls=[ModelToolCall(id="c1", name="nap", args={"seconds": seconds})])
        return ModelResponse(text="went on")

    return App.of(Agent(id="napper", model=ScriptedModel(answer), tools=(nap,)))


@pytest.mark.parametrize("idempotent", [False, True], ids=["tool-alone", "tool-with-the-next-step"])
async def test_a_run_canceled_while_its_tool_runs_ends_canceled_and_asks_the_model_no_more(
    client: Client, storage: Storage, task_queue: str, idempotent: bool
) -> None:
    """Before, a tool run beside the next model step in the first workflow task (one local activity) took the
    cancel for a failure to retry: the step ran again as an activity, the tool with it, and the run went on."""
    asked: list[int] = []
    started = asyncio.Event()
    async with running_worker(client, app_napping(idempotent, asked, started), storage, task_queue) as keel:
        run_id = await keel.start_run("napper", "nap")
        await asyncio.wait_for(started.wait(), 20)
        await keel.cancel(run_id)
        described = await client.get_workflow_handle(run_id).describe()
        async with asyncio.timeout(20):
            while described.status == WorkflowExecutionStatus.RUNNING:
                await asyncio.sleep(0.1)
                described = await client.get_workflow_handle(run_id).describe()
    assert described.status == WorkflowExecutionStatus.CANCELED
    assert described.typed_search_attributes.get(KEEL_STATUS) == "canceled"  # it said suspended or running
    assert len(asked) == 1


async def test_a_run_canceled_while_a_short_tool_runs_in_a_local_step_never_asks_the_model_again(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """A tool that ends before the worker next hears from the server (a local step holds its workflow task open,
    up to 8 s): the cancel had not reached the run, and the same step went on to ask the model, whose answer was
    stored in a turn the user had aborted (from outside, through a session's `abort`). The step now asks
    Temporal, after a tool that took a while, whether its run was asked to cancel, and then waits for it."""
    asked: list[int] = []
    started = asyncio.Event()
    app = app_napping(True, asked, started, seconds=2)
    async with running_worker(client, app, storage, task_queue) as keel:
        run_id = await keel.start_run("napper", "nap")
        await asyncio.wait_for(started.wait(), 20)
        await keel.cancel(run_id)
        handle = client.get_workflow_handle(run_id)
        async with asyncio.timeout(30):
            while (described := await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await asyncio.sleep(0.1)
    assert described.status == WorkflowExecutionStatus.CANCELED
    assert len(asked) == 1, "the model was asked again after the cancel"
    messages, _ = await storage.list_messages(run_id)
    assert not any(m.role == "assistant" and "went on" in str(m.content) for m in messages)


LONG_TASK = timedelta(seconds=60)
"""The runs below are started with this workflow task timeout: a local step's workflow task then heartbeats only
after 48 s, so a cancel that ends the run sooner reached the step without waiting for a heartbeat."""


async def start_with_long_task(client: Client, task_queue: str, agent_id: str) -> str:
    run_id = f"run-{uuid.uuid4()}"
    await client.start_workflow(
        names.AGENT_RUN,
        AgentRunInput(agent_id=agent_id, messages="go"),
        id=run_id,
        task_queue=task_queue,
        task_timeout=LONG_TASK,
    )
    return run_id


async def ended(client: Client, run_id: str, within: float) -> WorkflowExecutionStatus | None:
    handle = client.get_workflow_handle(run_id)
    async with asyncio.timeout(within):
        while (described := await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            await asyncio.sleep(0.1)
    return described.status


async def test_a_run_canceled_while_its_model_answers_stops_the_model_call_and_ends_canceled(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """A local model step holds its workflow task open, so the cancel reached the run only with the task's next
    heartbeat (8 s with Temporal's default task timeout), and the model call went on until then: a user's abort
    took that long. The step now asks Temporal while it runs whether its run was asked to cancel, and stops."""
    started, interrupted = asyncio.Event(), asyncio.Event()

    async def slow(request: ModelRequest) -> ModelResponse:
        started.set()
        try:
            await asyncio.sleep(600)
        except asyncio.CancelledError:
            interrupted.set()
            raise
        return ModelResponse(text="too late")

    app = App.of(Agent(id="slow", model=ScriptedModel(slow)))
    async with running_worker(client, app, storage, task_queue) as keel:
        run_id = await start_with_long_task(client, task_queue, "slow")
        await asyncio.wait_for(started.wait(), 20)
        await keel.cancel(run_id)
        assert await ended(client, run_id, within=20) == WorkflowExecutionStatus.CANCELED
    assert interrupted.is_set()
    described = await client.get_workflow_handle(run_id).describe()
    assert described.typed_search_attributes.get(KEEL_STATUS) == "canceled"
    messages, _ = await storage.list_messages(run_id)
    assert [m.role for m in messages] == ["user"]


async def test_a_run_canceled_while_its_tool_runs_in_a_local_step_stops_the_tool_and_ends_canceled(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """As above, for a tool run with the next model step in one local activity: the tool is cancelled (its
    cleanup runs), the model is not asked again, and the run ends without waiting for a heartbeat."""
    asked: list[int] = []
    started = asyncio.Event()
    app = app_napping(True, asked, started)
    async with running_worker(client, app, storage, task_queue) as keel:
        run_id = await start_with_long_task(client, task_queue, "napper")
        await asyncio.wait_for(started.wait(), 20)
        await keel.cancel(run_id)
        assert await ended(client, run_id, within=20) == WorkflowExecutionStatus.CANCELED
    assert len(asked) == 1


async def test_a_run_canceled_while_its_model_answers_after_an_approval_stores_no_answer(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """The step after an approval runs as a regular activity: a cancel ends the run at once, and the activity hears
    of it only with its next heartbeat (5 s in). A model that answered before that had its answer stored in the
    thread of a run the user had aborted (here a 4 s answer)."""
    asked: list[int] = []
    answering, interrupted = asyncio.Event(), asyncio.Event()

    @tool("guarded", require_approval=True)
    async def guarded(args: Nap, ctx: ToolContext) -> str:
        """Needs approval."""
        return "done"

    async def answer(request: ModelRequest) -> ModelResponse:
        asked.append(len(request.messages))
        if len(asked) == 1:
            return ModelResponse(tool_calls=[ModelToolCall(id="g1", name="guarded", args={"seconds": 0})])
        answering.set()
        try:
            await asyncio.sleep(4)  # under the activity's first heartbeat (5 s in), past the watch's first ask
        except asyncio.CancelledError:
            interrupted.set()
            raise
        return ModelResponse(text="answered after the abort")

    app = App.of(Agent(id="guarded", model=ScriptedModel(answer), tools=(guarded,)))
    async with running_worker(client, app, storage, task_queue) as keel:
        run_id = await keel.start_run("guarded", "go")
        async with asyncio.timeout(20):
            while not (pending := await keel.pending_tool_calls(run_id)):
                await asyncio.sleep(0.05)
        await keel.approve(run_id, pending[0].tool_call_id)
        await asyncio.wait_for(answering.wait(), 20)
        await keel.cancel(run_id)
        assert await ended(client, run_id, within=20) == WorkflowExecutionStatus.CANCELED
        await asyncio.sleep(5)  # past the model's answer: had it gone on, it would be stored by now
    assert interrupted.is_set()
    messages, _ = await storage.list_messages(run_id)
    assert not any("answered after the abort" in str(m.content) for m in messages)
