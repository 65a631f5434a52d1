"""Long runs continue-as-new when Temporal suggests it, and the result still covers the whole run."""

from __future__ import annotations

from pathlib import Path

from temporalio.api.enums.v1 import EventType

from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.storage import Storage
from tests.apps import app as test_app
from tests.conftest import free_port, running_worker


async def test_a_run_continues_as_new_when_suggested_and_keeps_its_whole_result(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    cfg = DevServerConfig(
        port=free_port(),
        ui_port=free_port(),
        state_dir=tmp_path,
        extra_dynamic_config={"limit.historyCount.suggestContinueAsNew": "12"},
    )
    server = await DevServer(cfg).start(reuse=False)
    try:
        client = await connect(cfg.address)
        async with running_worker(client, test_app, storage, task_queue) as keel:
            run_id = await keel.start_run("multi", "steps=6", thread_id="t-can")
            result = await keel.result(run_id)
            runs = [r async for r in client.list_workflows(f"WorkflowId='{run_id}'")]
            first = client.get_workflow_handle(run_id, run_id=runs[-1].run_id)
            history = await first.fetch_history()
            listed = [r.run_id for r in await keel.list_runs(agent_id="multi")]
    finally:
        server.stop()
    assert len(runs) >= 2, "the run never continued as new"
    assert listed.count(run_id) == 1
    assert history.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    assert result.text == "done after 6 tool calls" and result.steps == 7
    assert [c.payload.tool_call_id for c in result.tool_calls] == [f"call_{i}" for i in range(1, 7)]
    messages, total = await storage.list_messages("t-can")
    assert total == 1 + 6 * 2 + 1
    assert len({m.id for m in messages}) == total
