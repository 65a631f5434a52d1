"""Large values travel by reference (the payload store), nothing the run carries grows with it, and a value too
large even for the store fails at once with what was too large."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.service import RPCError
from temporalio.worker import Replayer

from keel.client import KeelClient, RunFailed
from keel.client.converter import data_converter
from keel.client.devserver import DevServer
from keel.plugin import KeelPlugin
from keel.protocol import names
from keel.storage import DirectoryBlobStore, Storage
from tests.apps import app as test_app
from tests.conftest import running_worker

MiB = 1024 * 1024


def history_bytes(history: WorkflowHistory) -> int:
    return len(History(events=history.events).SerializeToString())


def references(history: WorkflowHistory) -> int:
    """How many payloads of the history are references to the payload store."""
    return History(events=history.events).SerializeToString().count(b"temporal.api.sdk.v1.ExternalStorageReference")


async def test_a_step_with_three_900_kib_results_completes(client: Client, storage: Storage, task_queue: str) -> None:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        result = await keel.result(await keel.start_run("bulky", f"parallel=3 size={900 * 1024}"))
    assert result.text == f"saw 3 results of [{900 * 1024}] bytes"
    assert [len(r.payload.result) for r in result.tool_results] == [900 * 1024] * 3


async def test_a_step_whose_parallel_calls_carry_5_mb_of_arguments_completes(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """40 calls of a tool that is not idempotent (each an activity of its own) with 120 KB of arguments each:
    started at once, their 4.8 MB would be one workflow task's completion, which Temporal refuses over 4 MiB
    (the run was terminated). They start as they fit, and the run replays so."""
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("poster", "posts=40 size=120000")
        result = await keel.result(run_id)
        executions = [e.run_id async for e in client.list_workflows(f"WorkflowId='{run_id}'")]
        histories = [await client.get_workflow_handle(run_id, run_id=e).fetch_history() for e in executions]
    assert result.text == "posted 40 texts of [120000] bytes"
    events = [e for history in histories for e in history.events]  # the step's history is large: it continues as new
    tasks = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    calls = [e for e in events if e.activity_task_scheduled_event_attributes.activity_type.name == names.TOOL_CALL]
    assert len(calls) == 40 and len(tasks) >= 4  # at most 17 started per workflow task
    for history in histories:
        await Replayer(workflows=[], plugins=[KeelPlugin()]).replay_workflow(history)


async def test_a_20_mb_tool_result_reaches_the_model_and_the_history_holds_only_a_reference(
    client: Client, storage: Storage, task_queue: str
) -> None:
    size = 20 * 1000 * 1000
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("bulky", f"size={size}")
        result = await keel.result(run_id)
    assert result.text == f"saw 1 results of [{size}] bytes"
    history = await client.get_workflow_handle(run_id).fetch_history()
    assert history_bytes(history) < 100_000
    assert references(history) >= 2  # the step's result, and the run's result


async def test_thirty_kb_results_over_a_hundred_steps_finish_the_run(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """Each result is small; all of them together (3 MB) are more than Temporal takes inline in one payload."""
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("bulky", "steps=100 size=30000", max_steps=101)
        result = await keel.result(run_id)
        info = await keel.describe(run_id)
    assert result.text == "saw 100 results of [30000] bytes" and result.steps == 101
    assert len(result.tool_results) == 100 and info.status == "completed"
    # The steps' results are in storage and not in the history: it grows by a constant per step. (The run's
    # result lists them all, by reference: 3 MB is over the inline limit.)
    history = await client.get_workflow_handle(run_id).fetch_history()
    assert history_bytes(history) < 100 * 2_500, history_bytes(history)
    assert references(history) == 2  # the last step's result (with the run's lists) and the run's result


async def test_a_payload_larger_than_the_store_takes_fails_the_run_at_once_saying_what(
    dev_server: DevServer, storage: Storage, task_queue: str, payload_store: DirectoryBlobStore
) -> None:
    client = await Client.connect(
        dev_server.cfg.address, data_converter=data_converter(payload_store, max_payload_bytes=4 * MiB)
    )
    async with running_worker(client, test_app, storage, task_queue) as keel:
        run_id = await keel.start_run("bulky", f"parallel=2 size={3 * MiB}")
        try:
            await keel.result(run_id)
        except RunFailed as err:
            message = str(err)
        else:
            raise AssertionError("the run should fail")
    assert f"A payload of activity keel.tools_then_model of run {run_id} is" in message
    assert "MiB, more than the 4.0 MiB Keel stores by reference" in message
    history = await client.get_workflow_handle(run_id).fetch_history()
    # The step ran once, as a local activity, and was not retried as an activity.
    assert not [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]


async def test_the_client_says_when_a_run_input_is_over_the_limit(client: Client, task_queue: str) -> None:
    keel = KeelClient(client, task_queue=task_queue, app=test_app)
    try:
        await keel.start_run("demo", "x" * (33 * MiB))
    except Exception as err:
        assert not isinstance(err, (RPCError, WorkflowFailureError)), err
        assert "33.0 MiB" in str(err) and "32 MiB" in str(err)
    else:
        raise AssertionError("the client should refuse the input")
