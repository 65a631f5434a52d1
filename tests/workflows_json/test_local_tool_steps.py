"""An idempotent tool step is tried as a local activity first: a short definition runs in one workflow task,
a long foreach still crosses workflow tasks, and a local attempt that fails is retried as an activity (which the
UI shows under Pending Activities)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError

from keel.app import App, ToolContext, tool
from keel.protocol import names
from keel.storage import Storage
from keel.workflows.definition_run import MAX_LOCAL_STEPS_PER_TASK
from tests.conftest import running_worker
from tests.history_counts import local_activities_per_task
from tests.workflows_json.apps import definition, double, mapping, numbers, tool_step

THREE = definition(
    "local-three",
    [
        mapping("in", {"n": {"initData": True, "path": "n"}}),
        tool_step("twice", "double"),
        mapping("out", {"result": {"step": "twice", "path": "n"}}),
    ],
)
EACH = definition(
    "local-each",
    [
        tool_step("list", "range"),
        {"type": "foreach", "id": "each", "step": tool_step("e", "double"), "opts": {"concurrency": 1}},
    ],
    outputSchema={"type": "array"},
)


class Number(BaseModel):
    n: int


_failed: set[int] = set()


@tool("flaky_double")
async def flaky_double(args: Number, ctx: ToolContext) -> dict[str, int]:
    """Twice n; fails the first time it sees each n."""
    if args.n not in _failed:
        _failed.add(args.n)
        raise RuntimeError(f"not yet: {args.n}")
    return {"n": args.n * 2}


FLAKY = definition(
    "local-flaky",
    [
        mapping("in", {"n": {"initData": True, "path": "n"}}),
        {**tool_step("t", "flaky_double"), "options": {"retries": 1}},
    ],
)
FLAKY_NO_RETRIES = definition(
    "local-flaky-once", [mapping("in", {"n": {"initData": True, "path": "n"}}), tool_step("t", "flaky_double")]
)

_tries: dict[int, int] = {}


@tool("touchy", idempotent=False)
async def touchy(args: Number, ctx: ToolContext) -> dict[str, int]:
    """Twice n; fails the first two times it sees each n (not idempotent: never run locally)."""
    _tries[args.n] = _tries.get(args.n, 0) + 1
    if _tries[args.n] <= 2:
        raise RuntimeError(f"not yet: {args.n} (try {_tries[args.n]}, attempt {ctx.attempt})")
    return {"n": args.n * 2}


def touchy_definition(retries: int) -> dict[str, Any]:
    step = {**tool_step("t", "touchy"), "options": {"retries": retries}}
    return definition(f"touchy-{retries}", [mapping("in", {"n": {"initData": True, "path": "n"}}), step])


def events(history: Any, kind: EventType.ValueType) -> list[Any]:
    return [e for e in history.events if e.event_type == kind]


async def run(client: Client, storage: Storage, task_queue: str, raw: dict[str, Any], data: Any) -> tuple[Any, Any]:
    await storage.save_definition(raw["id"], raw)
    async with running_worker(client, App.of(tools=(double, numbers, flaky_double, touchy)), storage, task_queue):
        handle = await client.start_workflow(raw["id"], data, id=f"{raw['id']}-{uuid.uuid4()}", task_queue=task_queue)
        try:
            result = await handle.result()
        except WorkflowFailureError as failed:
            result = failed
    return result, await handle.fetch_history()


async def test_a_short_definition_runs_its_tool_step_locally_in_one_workflow_task(
    client: Client, storage: Storage, task_queue: str
) -> None:
    result, history = await run(client, storage, task_queue, THREE, {"n": 4})
    assert result == {"result": 8}
    assert not events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert len(events(history, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)) == 1
    assert local_activities_per_task(history) == [0, 2]  # the definition's load, then the tool step


async def test_a_long_foreach_crosses_workflow_tasks_with_a_bounded_number_of_local_steps_each(
    client: Client, storage: Storage, task_queue: str
) -> None:
    result, history = await run(client, storage, task_queue, EACH, {"count": 12})
    assert result == [{"n": 2 * i} for i in range(1, 13)]
    per_task = local_activities_per_task(history)
    assert max(per_task) <= MAX_LOCAL_STEPS_PER_TASK + 1, per_task  # the load counts once, in the first task
    scheduled = events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert sum(per_task) - 1 + len(scheduled) == 13 and scheduled  # `range`, then 12 doubles


async def test_a_local_attempt_that_fails_is_retried_as_an_activity(
    client: Client, storage: Storage, task_queue: str
) -> None:
    result, history = await run(client, storage, task_queue, FLAKY, {"n": 5})
    assert result == {"n": 10}
    [scheduled] = events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert scheduled.activity_task_scheduled_event_attributes.retry_policy.maximum_attempts == 4
    [started] = events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    assert started.activity_task_started_event_attributes.attempt == 1


async def test_a_local_attempt_of_a_step_without_retries_that_fails_fails_the_step_as_an_activity_would(
    client: Client, storage: Storage, task_queue: str
) -> None:
    failed, history = await run(client, storage, task_queue, FLAKY_NO_RETRIES, {"n": 6})
    assert isinstance(failed, WorkflowFailureError)
    assert "RuntimeError: not yet: 6" in str(failed.cause)
    assert not events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)  # not tried again as an activity


async def test_a_tool_step_is_tried_again_as_many_times_as_its_retries_say(
    client: Client, storage: Storage, task_queue: str
) -> None:
    # Mastra's `retries`: a step that throws runs again, up to `retries` more times.
    result, history = await run(client, storage, task_queue, touchy_definition(2), {"n": 7})
    assert result == {"n": 14}
    started = events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    assert [e.activity_task_started_event_attributes.attempt for e in started] == [3]  # its last attempt
    failed, _ = await run(client, storage, task_queue, touchy_definition(1), {"n": 8})
    assert isinstance(failed, WorkflowFailureError)
    assert "RuntimeError: not yet: 8 (try 2, attempt 2)" in str(failed.cause)
    assert _tries[8] == 2


_pair: dict[str, asyncio.Barrier] = {}


@tool("pair", idempotent=False)
async def pair(args: Number, ctx: ToolContext) -> dict[str, int]:
    """n back; items 1 and 2 end together (each waits for the other), so their ends often reach the run in one
    workflow task (an activity each: a tool that is not idempotent), where a live run of local steps gets them one
    at a time."""
    if args.n <= 2:
        await _pair.setdefault(ctx.run_id, asyncio.Barrier(2)).wait()
    return {"n": args.n}


LANES = definition(
    "lanes",
    [
        tool_step("list", "range"),
        {"type": "foreach", "id": "each", "step": tool_step("z", "pair"), "opts": {"concurrency": 2}},
    ],
    outputSchema={"type": "array"},
)


async def test_a_foreach_s_events_do_not_depend_on_how_its_items_ends_reach_the_run(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """Found by the chaos run: the ends of items 0 and 1 of a foreach (concurrency 2) reached a live run one at a
    time (local steps), and item 2 started between them; its replay got both ends in one activation, and item 2
    started after both. A reader that read one order and resumed from its offset in the other skipped an event and
    read another twice. Now an item starts right after the end that freed its lane, however the ends arrive."""
    await storage.save_definition("lanes", LANES)
    tools = App.of(tools=(numbers, pair))
    async with running_worker(client, tools, storage, task_queue):
        handles = [
            await client.start_workflow("lanes", {"count": 3}, id=f"lanes-{uuid.uuid4()}", task_queue=task_queue)
            for _ in range(4)
        ]
        for handle in handles:
            assert await handle.result() == [{"n": 1}, {"n": 2}, {"n": 3}]
        live = [await handle.query(names.EVENTS_QUERY, 0, result_type=list) for handle in handles]
    async with running_worker(client, tools, storage, task_queue):  # a new worker: the runs replayed
        replayed = [await handle.query(names.EVENTS_QUERY, 0, result_type=list) for handle in handles]
    for events, again in zip(live, replayed, strict=True):
        order = [(e["type"], e["payload"].get("id")) for e in events]
        assert order == [(e["type"], e["payload"].get("id")) for e in again]
        first_end = min(order.index(("workflow-step-result", f"z[{i}]")) for i in (0, 1))
        assert order[first_end + 1] == ("workflow-step-start", "z[2]"), order


async def test_a_run_asks_no_patch_in_reaction_to_a_local_step_s_result(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """Found by the chaos run: a failed local attempt's marker was recorded in one workflow task and the run's
    reaction to it (the retry rule's `workflow.patched`) in the next; the replay got the failure in the earlier
    task, where no patch marker follows, and failed with a nondeterminism error ("Non-deprecated patch marker
    encountered for change keel-local-tool-step-temporal-retry-rule"), so no worker could answer the finished
    run's queries and its observers waited forever. The rules are now the load's, recorded in its result: a run
    with a failed local attempt and a foreach records no patch marker at all."""
    retried, history = await run(client, storage, task_queue, FLAKY, {"n": 9})
    assert retried == {"n": 18}
    await storage.save_definition("lanes", LANES)
    async with running_worker(client, App.of(tools=(numbers, pair)), storage, task_queue):
        handle = await client.start_workflow("lanes", {"count": 3}, id=f"lanes-{uuid.uuid4()}", task_queue=task_queue)
        assert await handle.result() == [{"n": 1}, {"n": 2}, {"n": 3}]
    for each in (history, await handle.fetch_history()):
        markers = events(each, EventType.EVENT_TYPE_MARKER_RECORDED)
        assert [m.marker_recorded_event_attributes.marker_name for m in markers if
                m.marker_recorded_event_attributes.marker_name != "core_local_activity"] == []  # fmt: skip
