"""A run keeps the shape it started with (local or regular model activity, fused or separate tool steps, a fused
step local or not) when a worker with other settings picks it up; only timeouts and retry policies follow the
worker. A step tried locally that fails is retried as an activity; a run started by Keel's client upserts no
search attribute it was started with."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from keel.app import Agent, App
from keel.client.errors import ToolCallRejected
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelRetryableError,
    ModelToolCall,
    ScriptedModel,
    tool_results_since_last_user,
)
from keel.protocol import names
from keel.storage import Storage
from keel.workflows.contracts import LOCAL_STEP_BYTES_PER_TASK, LOCAL_STEPS_PER_TASK
from keel.workflows.options import AgentActivityOptions
from keel.workflows.search_attributes import KEEL_AGENT_ID, KEEL_KIND, KEEL_STATUS, KEEL_THREAD_ID
from tests.apps import app as test_app
from tests.apps import echo, pay
from tests.conftest import running_worker
from tests.history_counts import local_activities_per_task, patches_after_first_local_step
from tests.record_histories import _delivered_message, _refused_run_id, _suspended_fused_step
from tests.test_agent_run import wait_for_pending

LOCAL_FUSED = AgentActivityOptions()
LOCAL_FUSED_AS_ACTIVITY = AgentActivityOptions(fused_step_as_local_activity=False)
ACTIVITY_APART = AgentActivityOptions(model_as_local_activity=False, fuse_tools_with_next_model_step=False)


async def scheduled_activities(client: Client, run_id: str) -> Counter[str]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return Counter(
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )


def approve_then_echo(request: ModelRequest) -> ModelResponse:
    """Step 1 asks to `pay` (approval needed), step 2 calls `echo`, step 3 answers: step 3 is a fused step that
    follows no approval, the only kind a run may try locally."""
    results = tool_results_since_last_user(request)
    if not results:
        return ModelResponse(tool_calls=[ModelToolCall(id="call_1", name="pay", args={"amount": 500})])
    if len(results) == 1:
        return ModelResponse(tool_calls=[ModelToolCall(id="call_2", name="echo", args={"text": "hi"})])
    return ModelResponse(text=f"Tool result: {results[-1].result}")


shapes_app = App.of(Agent(id="shapes", model=ScriptedModel(approve_then_echo, name="shapes"), tools=(pay, echo)))


@pytest.mark.parametrize(
    ("started_with", "continued_with", "expected"),
    [
        (LOCAL_FUSED, ACTIVITY_APART, {"keel.tools_then_model": 1}),
        (LOCAL_FUSED_AS_ACTIVITY, LOCAL_FUSED, {"keel.tools_then_model": 2}),
        (LOCAL_FUSED, LOCAL_FUSED_AS_ACTIVITY, {"keel.tools_then_model": 1}),
        (ACTIVITY_APART, LOCAL_FUSED, {"keel.model_step": 3, "keel.tool_call": 2}),
    ],
    ids=[
        "local-fused-then-activity-apart",
        "fused-as-activity-then-fused-local",
        "fused-local-then-fused-as-activity",
        "activity-apart-then-local-fused",
    ],
)
async def test_a_suspended_run_finishes_in_its_own_shape_on_a_worker_with_other_settings(
    client: Client,
    storage: Storage,
    task_queue: str,
    data_dir: Path,
    started_with: AgentActivityOptions,
    continued_with: AgentActivityOptions,
    expected: dict[str, int],
) -> None:
    async with running_worker(client, shapes_app, storage, task_queue, options=started_with) as keel:
        run_id = await keel.start_run("shapes", "keep my shape")
        [call_id] = await wait_for_pending(keel, run_id)
    # A new worker has an empty cache: it replays the run's history with its own settings before going on.
    async with running_worker(client, shapes_app, storage, task_queue, options=continued_with) as keel:
        await keel.approve(run_id, call_id)
        result = await keel.result(run_id)
    assert result.text == "Tool result: {'echo': 'hi'}"
    assert await scheduled_activities(client, run_id) == expected


async def test_a_long_turn_chains_a_bounded_number_of_local_activities_per_workflow_task(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        result = await keel.result(await keel.start_run("multi", "steps=20", max_steps=21))
    assert result.text == "done after 20 tool calls" and result.steps == 21
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    per_task = local_activities_per_task(history)
    assert max(per_task) == LOCAL_STEPS_PER_TASK, per_task
    assert sum(per_task) + sum((await scheduled_activities(client, result.run_id)).values()) == 21


async def test_local_steps_of_one_workflow_task_return_a_bounded_number_of_bytes(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    # Each step's answer carries 200 KB of text: past 1 MiB in one workflow task, a step runs as an activity.
    async with running_worker(client, test_app, storage, task_queue) as keel:
        result = await keel.result(await keel.start_run("multi", "steps=10 talk=200000", max_steps=11))
    assert result.text == "done after 10 tool calls"
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    per_task = local_activities_per_task(history)
    assert max(per_task) == -(-LOCAL_STEP_BYTES_PER_TASK // 200_000), (
        per_task
    )  # the step that crosses 1 MiB is the last
    assert sum(per_task) + sum((await scheduled_activities(client, result.run_id)).values()) == 11


_rate_limited: set[str] = set()


def rate_limited_after_a_tool(request: ModelRequest) -> ModelResponse:
    """Step 1 calls `echo`; step 2 is rate limited the first time a conversation reaches it, then answers."""
    results = tool_results_since_last_user(request)
    if not results:
        return ModelResponse(tool_calls=[ModelToolCall(id="call_1", name="echo", args={"text": "hi"})])
    key = request.messages[-1].id
    if key not in _rate_limited:
        _rate_limited.add(key)
        raise ModelRetryableError("rate limited, try again", retry_after=0.2)
    return ModelResponse(text=f"answered with {results[0].result}")


retried = Agent(id="retried", model=ScriptedModel(rate_limited_after_a_tool, name="retried"), tools=(echo,))


async def test_a_fused_step_that_fails_once_locally_is_retried_as_an_activity_the_ui_shows(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, App.of(retried), storage, task_queue) as keel:
        result = await keel.result(await keel.start_run("retried", "go"))
    assert result.text == "answered with {'echo': 'hi'}"
    history = await client.get_workflow_handle(result.run_id).fetch_history()
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    assert markers.count("core_local_activity") == 2  # the first model step, then the fused step's one attempt
    assert await scheduled_activities(client, result.run_id) == {"keel.tools_then_model": 1}
    timers = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert [t.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta().total_seconds() for t in timers] == [
        0.2
    ]  # the provider's retry-after
    messages, _ = await storage.list_messages(result.run_id)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]  # the tool result stored once


async def test_a_run_started_by_keel_keeps_its_start_attributes_without_upserting_them(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("multi", "steps=1")
        await keel.result(run_id)
        cli_run = await client.start_workflow(
            "AgentRun", {"agentId": "multi", "messages": "steps=1"}, id=f"cli-{run_id}", task_queue=task_queue
        )
        await cli_run.result()
    for wid, upserts in ((run_id, 2), (cli_run.id, 3)):  # the shape's patch, [the attributes,] completed
        history = await client.get_workflow_handle(wid).fetch_history()
        kinds = [e.event_type for e in history.events]
        assert kinds.count(EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES) == upserts, wid
        described = await client.get_workflow_handle(wid).describe()
        attributes = described.typed_search_attributes
        assert attributes.get(KEEL_AGENT_ID) == "multi" and attributes.get(KEEL_STATUS) == "completed"
        assert attributes.get(KEEL_THREAD_ID) == wid and attributes.get(KEEL_KIND) == "agent"


async def test_a_run_asks_no_patch_in_reaction_to_a_step_s_result(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    """Found by the chaos run in JSON workflows: a `workflow.patched` asked in reaction to a local step's result
    can be met, replayed, in an earlier workflow task than the one that recorded its marker, where `patched` is
    false; the run then fails replay with a nondeterminism error and no worker can answer its queries. A run
    takes every such rule from its shape, recorded in its first workflow task: a message delivered mid-run, a
    tool that suspends inside a fused step, a run id refused to a second execution record no patch after it."""
    async with running_worker(client, test_app, storage, task_queue) as keel:
        delivered = await _delivered_message(keel, f"delivered-{task_queue}")
        await keel.result(delivered)
        suspended = await _suspended_fused_step(keel, f"suspended-{task_queue}")
        await keel.result(suspended)
        refused = await _refused_run_id(keel, f"refused-{task_queue}")
    histories = {
        "delivered": await client.get_workflow_handle(delivered).fetch_history(),
        "suspended": await client.get_workflow_handle(suspended).fetch_history(),
        "refused": await client.get_workflow_handle(refused).fetch_history(),  # the latest execution: refused
    }
    assert {name: patches_after_first_local_step(h) for name, h in histories.items()} == {
        "delivered": [],
        "suspended": [],
        "refused": [],
    }


def held_app() -> tuple[App, asyncio.Event, asyncio.Event]:
    """`shapes_app`, its first model step of a run held: `asked` is set once it runs, and it answers (asking to
    approve `call_1`) once `answer` is set."""
    asked, answer = asyncio.Event(), asyncio.Event()

    async def held(request: ModelRequest) -> ModelResponse:
        if not tool_results_since_last_user(request):
            asked.set()
            await answer.wait()
        return approve_then_echo(request)

    return App.of(Agent(id="shapes", model=ScriptedModel(held, name="held"), tools=(pay, echo))), asked, answer


@pytest.mark.parametrize("options", [LOCAL_FUSED, ACTIVITY_APART], ids=["local-step", "activity-step"])
async def test_an_approval_sent_while_the_step_that_asks_for_it_runs_decides_the_call(
    client: Client, storage: Storage, task_queue: str, options: AgentActivityOptions
) -> None:
    """The model step streams `tool-call-approval` and stores it before the workflow has its answer: a client
    that approves from the stream (as client-js does) can reach the run while the step runs, or in the workflow
    task that brings the step's answer, where the SDK applies updates before the answer. Such an approval was
    refused ("no pending tool call"); now it waits for the step and decides the call. One for a call the step
    does not ask for is refused once the step has answered."""
    app, asked, answer = held_app()
    async with running_worker(client, app, storage, task_queue, options=options) as keel:
        run_id = await keel.start_run("shapes", "pay")
        await asyncio.wait_for(asked.wait(), 20)
        approving = asyncio.create_task(keel.approve(run_id, "call_1"))
        stranger = asyncio.create_task(keel.approve(run_id, "call_9"))
        await asyncio.sleep(0.5)  # both reach the run, or wait for the workflow task, while the step runs
        answer.set()
        accepted = await asyncio.wait_for(approving, 20)
        with pytest.raises(ToolCallRejected, match="no pending tool call 'call_9'"):
            await asyncio.wait_for(stranger, 20)
        result = await keel.result(run_id)
    assert accepted.tool_call_id == "call_1"
    assert result.text == "Tool result: {'echo': 'hi'}", result.text


@pytest.mark.parametrize("options", [LOCAL_FUSED, ACTIVITY_APART], ids=["local-step", "activity-step"])
async def test_an_approval_signal_sent_while_the_step_that_asks_for_it_runs_decides_the_call(
    client: Client, storage: Storage, task_queue: str, options: AgentActivityOptions
) -> None:
    """The same by `tool_approval` signal (the `temporal` CLI's way): it was ignored (recorded as rejected) and
    the run waited on; now it decides the call once the step has asked for it. One for a call the step does not
    ask for is recorded as rejected."""
    app, asked, answer = held_app()
    async with running_worker(client, app, storage, task_queue, options=options) as keel:
        run_id = await keel.start_run("shapes", "pay")
        await asyncio.wait_for(asked.wait(), 20)
        handle = client.get_workflow_handle(run_id)
        for call_id in ("call_9", "call_1"):
            await handle.signal(names.TOOL_APPROVAL_SIGNAL, {"toolCallId": call_id, "approved": True})
        await asyncio.sleep(0.5)
        answer.set()
        result = await asyncio.wait_for(keel.result(run_id), 30)
        rejected = await handle.query(names.REJECTED_SIGNALS_QUERY)
    assert result.text == "Tool result: {'echo': 'hi'}", result.text
    assert [r for r in rejected if "call_9" in r] == ["no pending tool call 'call_9' (pending: call_1)"], rejected
    assert not [r for r in rejected if "'call_1'" in r], rejected


async def test_an_approval_waiting_for_a_step_longer_than_the_answer_window_is_not_taken_for_no_worker(
    client: Client, storage: Storage, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client gives a worker `WORKER_ANSWER_SECONDS` to accept an approval, not to finish the model step the
    approval waits for: a step longer than that window did not make the approval a `NoWorker` error."""
    from keel.client import keel_client

    monkeypatch.setattr(keel_client, "WORKER_ANSWER_SECONDS", 1.0)
    asked = asyncio.Event()

    async def slow(request: ModelRequest) -> ModelResponse:
        if not tool_results_since_last_user(request):
            asked.set()
            await asyncio.sleep(3)
        return approve_then_echo(request)

    app = App.of(Agent(id="shapes", model=ScriptedModel(slow, name="slow"), tools=(pay, echo)))
    async with running_worker(client, app, storage, task_queue, options=ACTIVITY_APART) as keel:
        run_id = await keel.start_run("shapes", "pay")
        await asyncio.wait_for(asked.wait(), 20)
        accepted = await keel.approve(run_id, "call_1")
        result = await keel.result(run_id)
    assert accepted.tool_call_id == "call_1"
    assert result.text == "Tool result: {'echo': 'hi'}", result.text
