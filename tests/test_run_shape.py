"""A run keeps the shape it started with (local or regular model activity, fused or separate tool steps) when a
worker with other settings picks it up; only timeouts and retry policies follow the worker."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from keel.storage import Storage
from keel.workflows.options import AgentActivityOptions
from tests.apps import app as test_app
from tests.conftest import running_worker
from tests.test_agent_run import wait_for_pending

LOCAL_FUSED = AgentActivityOptions()
ACTIVITY_APART = AgentActivityOptions(model_as_local_activity=False, fuse_tools_with_next_model_step=False)


async def scheduled_activities(client: Client, run_id: str) -> Counter[str]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return Counter(
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )


@pytest.mark.parametrize(
    ("started_with", "continued_with", "expected"),
    [
        (LOCAL_FUSED, ACTIVITY_APART, {"keel.tools_then_model": 1}),
        (ACTIVITY_APART, LOCAL_FUSED, {"keel.model_step": 2, "keel.tool_call": 1}),
    ],
    ids=["local-fused-then-activity-apart", "activity-apart-then-local-fused"],
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
    async with running_worker(client, test_app, storage, task_queue, options=started_with) as keel:
        run_id = await keel.start_run("demo", "keep my shape")
        [call_id] = await wait_for_pending(keel, run_id)
    # A new worker has an empty cache: it replays the run's history with its own settings before going on.
    async with running_worker(client, test_app, storage, task_queue, options=continued_with) as keel:
        await keel.approve(run_id, call_id)
        result = await keel.result(run_id)
    assert "Tool result" in result.text
    assert await scheduled_activities(client, run_id) == expected
