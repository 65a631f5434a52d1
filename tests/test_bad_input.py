"""Bad input gets a clear error and leaves runs healthy."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.common import RawValue

from keel.app import UnknownAgent
from keel.client import InvalidRunInput, KeelClient, RunClosed, RunNotFound, ToolCallRejected
from keel.storage import Storage
from tests.apps import app as test_app
from tests.conftest import running_worker
from tests.test_agent_run import wait_for_pending


async def _raw_run_failure(client: Client, task_queue: str, run_input: object) -> str:
    handle = await client.start_workflow("AgentRun", run_input, id=f"bad-{uuid.uuid4()}", task_queue=task_queue)
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    return str(info.value.cause)


async def test_unknown_agent_fails_the_run_with_the_known_agents_listed(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        with pytest.raises(UnknownAgent, match="Unknown agent 'nope'"):
            await keel.start_run("nope", "hi")
        message = await _raw_run_failure(client, task_queue, {"agentId": "nope", "messages": "hi"})
    assert "Unknown agent 'nope'" in message and "demo" in message


@pytest.mark.parametrize(
    ("run_input", "expected"),
    [
        ({"agentId": "demo", "messages": 42}, "messages"),
        ({"agentId": "demo", "messages": [{"role": "wizard", "content": "x"}]}, "role"),
        ({"agentId": "demo"}, "messages: Field required"),
        ({"agentId": "", "messages": "hi"}, "agentId"),
        ({"agentId": "demo", "messages": "hi", "maxSteps": 0}, "maxSteps"),
    ],
)
async def test_malformed_input_fails_the_run_at_once_with_the_field_named(
    client: Client, storage: Storage, task_queue: str, run_input: object, expected: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue):
        message = await _raw_run_failure(client, task_queue, run_input)
    assert "Invalid AgentRunInput" in message and expected in message


async def test_client_rejects_malformed_messages_before_starting_a_run(
    client: Client, storage: Storage, task_queue: str
) -> None:
    keel = KeelClient(client, task_queue=task_queue, app=test_app)
    with pytest.raises(InvalidRunInput, match="role"):
        await keel.start_run("demo", [{"role": "wizard", "content": "x"}])


async def test_unknown_and_repeated_tool_call_ids_are_rejected_and_the_run_stays_healthy(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "hello")
        [call_id] = await wait_for_pending(keel, run_id)
        with pytest.raises(ToolCallRejected, match="no pending tool call 'call_zzz' \\(pending: call_1\\)"):
            await keel.approve(run_id, "call_zzz")
        handle = client.get_workflow_handle(run_id)
        await handle.signal("tool_approval", {"toolCallId": "call_zzz", "approved": True})
        await handle.signal("tool_approval", RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"{nope")))
        await handle.signal("tool_approval", {"approved": True})
        await handle.signal("tool_approval", RawValue(Payload(metadata={"encoding": b"binary/plain"}, data=b"xx")))
        await handle.signal("tool_approval", "approve it")
        rejected = await handle.query("rejected_signals", result_type=list[str])
        assert len(rejected) == 5
        assert "no pending tool call 'call_zzz'" in rejected[0]
        assert "malformed tool_approval payload" in rejected[1]
        assert "toolCallId" in rejected[2]
        assert "expected a JSON object" in rejected[3]
        assert "malformed tool_approval payload" in rejected[4]
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(
                "approve_tool_call", RawValue(Payload(metadata={"encoding": b"binary/plain"}, data=b"xx"))
            )
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("approve_tool_call", {"toolCallId": call_id})
        assert [p.tool_call_id for p in await keel.pending_tool_calls(run_id)] == [call_id]

        await keel.approve(run_id, call_id)
        with pytest.raises(ToolCallRejected, match="already approved"):
            await keel.approve(run_id, call_id, approved=False)
        result = await keel.result(run_id)
    assert "Tool result" in result.text
    with pytest.raises(RunClosed):
        await keel.approve(run_id, call_id)


async def test_approving_a_run_that_does_not_exist_says_so(client: Client, task_queue: str) -> None:
    keel = KeelClient(client, task_queue=task_queue)
    with pytest.raises(RunNotFound, match="run-missing"):
        await keel.approve("run-missing", "call_1")
    with pytest.raises(RunNotFound):
        await keel.pending_tool_calls("run-missing")


TOO_LONG = "t" * 3000
"""Past what Temporal indexes as a search attribute value (2 KB), which a run's thread and resource ids become."""
EMOJI = "\U0001f600" * 200
"""800 bytes of UTF-8, but 2,402 as the escaped JSON Temporal indexes."""
NEAR = "\u00e9" * 340
"""680 bytes of UTF-8, 2,042 as escaped JSON: within the bound."""


@pytest.mark.parametrize(
    ("field", "value"),
    [("threadId", TOO_LONG), ("resourceId", TOO_LONG), ("threadId", EMOJI)],
    ids=["long-thread", "long-resource", "emoji-thread"],
)
async def test_an_id_temporal_cannot_index_is_refused_before_the_run_starts_and_fails_one_started_anyway(
    client: Client, storage: Storage, task_queue: str, field: str, value: str
) -> None:
    """Before, the client got Temporal's RPC error (an HTTP 500), and a run started with the `temporal` CLI
    was terminated by the server for its search attribute."""
    keyword: dict[str, Any] = {{"threadId": "thread_id", "resourceId": "resource_id"}[field]: value}
    async with running_worker(client, test_app, storage, task_queue) as keel:
        with pytest.raises(InvalidRunInput, match=rf"{field}: .*at most 2048 bytes"):
            await keel.start_run("demo", "hi", **keyword)
        message = await _raw_run_failure(client, task_queue, {"agentId": "demo", "messages": "hi", field: value})
    assert "Invalid AgentRunInput" in message and field in message


async def test_a_run_without_a_thread_is_indexed_by_its_run_id_and_an_agent_id_too_long_fails_it(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """Started with the Temporal client (as the `temporal` CLI does), past Temporal's bound: each fails at once
    with `InvalidInput`. Before, the server terminated each at its first upsert."""
    async with running_worker(client, test_app, storage, task_queue):
        run_input = {"agentId": "demo", "messages": "hi"}
        handle = await client.start_workflow("AgentRun", run_input, id=EMOJI, task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
        assert "a run id is indexed" in str(info.value.cause) and "without a thread id" in str(info.value.cause)
        message = await _raw_run_failure(client, task_queue, {"agentId": "a" * 3000, "messages": "hi"})
    assert "Invalid AgentRunInput: agentId: an agent id is indexed by Temporal as a search attribute" in message


async def test_ids_within_temporals_bounds_run_and_a_run_id_past_them_is_refused(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "hi", thread_id=NEAR, resource_id=NEAR)
        try:
            await wait_for_pending(keel, run_id)
            assert await keel.active_run_of_thread("demo", NEAR) == run_id  # indexed under its thread
        finally:
            await client.get_workflow_handle(run_id).terminate("test over")
        with pytest.raises(InvalidRunInput, match=r"run id .*at most 1000 bytes"):
            await keel.start_run("demo", "hi", run_id="r" * 1001)
        with pytest.raises(InvalidRunInput, match=r"run id .*at most 2048 bytes"):  # it is the thread id too
            await keel.start_run("demo", "hi", run_id=EMOJI)
        # a message for a thread goes through the thread's entity, whose workflow id holds the thread id
        with pytest.raises(InvalidRunInput, match=r"the thread id .*at most 2048 bytes"):
            await keel.send_message("demo", TOO_LONG, "me", "hi")
        with pytest.raises(InvalidRunInput, match=r"workflow id of 1007 bytes; Temporal takes at most 1000"):
            await keel.send_message("demo", "t" * 990, "me", "hi")
