"""With no workflow cache every workflow task replays from scratch: a turn still runs each activity once."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from keel.storage import Storage
from tests.apps import app as test_app
from tests.conftest import running_worker
from tests.test_agent_run import wait_for_pending


class CountingInterceptor(Interceptor):
    def __init__(self) -> None:
        self.executions: Counter[str] = Counter()

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        counter = self.executions

        class Counting(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                counter[activity.info().activity_type] += 1
                return await super().execute_activity(input)

        return Counting(next)


async def test_an_approved_turn_runs_exactly_two_model_calls_and_one_tool_without_a_cache(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    counting = CountingInterceptor()
    async with running_worker(
        client, test_app, storage, task_queue, max_cached_workflows=0, interceptors=[counting]
    ) as keel:
        run_id = await keel.start_run("demo", "no cache")
        [call_id] = await wait_for_pending(keel, run_id)
        await asyncio.sleep(0.5)  # queries and waiting replay the workflow; nothing may run again
        await keel.approve(run_id, call_id)
        result = await keel.result(run_id)
    assert "Tool result" in result.text
    # Step 1's model call is a local activity; the approved tool and step 2's model call share an activity (not
    # a local one: the approving update is answered as soon as the workflow task that took it completes).
    assert counting.executions == {"keel.model_step": 1, "keel.tools_then_model": 1}
    history = await client.get_workflow_handle(run_id).fetch_history()
    markers = Counter(
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    )
    assert markers == {"core_local_activity": 1, "core_patch": 1}
    kinds = Counter(e.event_type for e in history.events)
    assert kinds[EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED] == 1


async def test_a_multi_step_turn_runs_each_activity_once_without_a_cache(
    client: Client, storage: Storage, task_queue: str
) -> None:
    counting = CountingInterceptor()
    async with running_worker(
        client, test_app, storage, task_queue, max_cached_workflows=0, interceptors=[counting]
    ) as keel:
        result = await keel.result(await keel.start_run("multi", "steps=3"))
    assert result.text == "done after 3 tool calls"
    assert counting.executions == {"keel.model_step": 1, "keel.tools_then_model": 3}
