"""An update accepted earlier, answered by a new worker right after replaying a local step whose result was
recorded without what the workflow did next (found by `make chaos`, `bench/chaos/findings/`).

The workflow tasks are completed by hand here, as the chaos run's history shows them: the first accepts the
update; the one after the `go` signal records the local activity's marker and nothing after it, and forces a new
task, which is started and never answered (the worker died). A real worker then takes the run over: without
healing, every attempt of its task is refused (`BadUpdateWorkflowExecutionMessage`) for ever."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.any_pb2 import Any as AnyProto
from temporalio import activity, workflow
from temporalio.api.command.v1 import Command, ProtocolMessageCommandAttributes, RecordMarkerCommandAttributes
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import CommandType, EventType, WorkflowTaskFailedCause
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.protocol.v1 import Message
from temporalio.api.sdk.v1 import WorkflowTaskCompletedMetadata
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.update.v1 import Acceptance, Request
from temporalio.api.workflowservice.v1 import (
    PollWorkflowTaskQueueRequest,
    PollWorkflowTaskQueueResponse,
    RespondWorkflowTaskCompletedRequest,
    RespondWorkflowTaskFailedRequest,
)
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHistory,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateStage,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker

from keel import Agent
from keel.app import App
from keel.client import stuck_tasks
from keel.model_providers import ModelResponse, ScriptedModel
from keel.plugin import KeelPlugin
from keel.storage import Storage


@activity.defn(name="mark")
async def mark() -> str:
    return "marked"


@workflow.defn(name="marker-then-settle", sandboxed=False)
class MarkerThenSettle:
    def __init__(self) -> None:
        self.marked: str | None = None
        self.go = False

    @workflow.signal(name="go")
    def go_on(self) -> None:
        self.go = True

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.go)
        self.marked = await workflow.execute_local_activity(mark, start_to_close_timeout=timedelta(seconds=5))
        await workflow.wait_condition(lambda: False)  # waits, as a suspended run waits on a person
        return "never"

    @workflow.update(name="settled")
    async def settled(self) -> str:
        await workflow.wait_condition(lambda: self.marked is not None)
        assert self.marked is not None
        return self.marked


def _json(value: object) -> Payloads:
    return Payloads(payloads=[Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())])


_METADATA = WorkflowTaskCompletedMetadata(
    core_used_flags=[1, 2, 3, 4], sdk_name="temporal-python", sdk_version="1.35.0"
)


async def _poll(client: Client, task_queue: str) -> PollWorkflowTaskQueueResponse:
    poll = PollWorkflowTaskQueueRequest(namespace="default", task_queue=TaskQueue(name=task_queue), identity="dying")
    return await client.workflow_service.poll_workflow_task_queue(poll)


async def _complete(
    client: Client,
    task: PollWorkflowTaskQueueResponse,
    commands: list[Command],
    *,
    messages: list[Message] | None = None,
    force_new_task: bool = False,
) -> None:
    """Complete `task` with `commands` (and `messages`) as the Python SDK's core would."""
    await client.workflow_service.respond_workflow_task_completed(
        RespondWorkflowTaskCompletedRequest(
            namespace="default",
            task_token=task.task_token,
            identity="dying",
            commands=commands,
            messages=messages,
            force_create_new_workflow_task=force_new_task,
            sdk_metadata=_METADATA,
        )
    )


async def _accept_the_update(client: Client, task_queue: str) -> None:
    """The first workflow task, as a worker completes it: the update accepted, the run waits for `go`."""
    task = await _poll(client, task_queue)
    (request_message,) = task.messages
    request = Request()
    request_message.body.Unpack(request)
    update_id = request.meta.update_id
    acceptance = AnyProto()
    acceptance.Pack(
        Acceptance(
            accepted_request_message_id=request_message.id,
            accepted_request_sequencing_event_id=request_message.event_id,
            accepted_request=request,
        )
    )
    accept = Command(
        command_type=CommandType.COMMAND_TYPE_PROTOCOL_MESSAGE,
        protocol_message_command_attributes=ProtocolMessageCommandAttributes(message_id=f"{update_id}/accept"),
    )
    message = Message(id=f"{update_id}/accept", protocol_instance_id=update_id, body=acceptance)
    await _complete(client, task, [accept], messages=[message])


async def _record_a_lone_marker_then_die(client: Client, task_queue: str, *, failing: bool = False) -> None:
    """The task after `go`: the local activity's marker and nothing the workflow did next, a new task forced;
    that task is started and never answered."""
    task = await _poll(client, task_queue)
    stamp = {"seconds": int(time.time()), "nanos": 0}
    marker_data = {
        "seq": 1, "attempt": 1, "activity_id": "1", "activity_type": "mark",
        "complete_time": stamp, "backoff": None, "original_schedule_time": stamp,
    }  # fmt: skip
    marker = Command(
        command_type=CommandType.COMMAND_TYPE_RECORD_MARKER,
        record_marker_command_attributes=RecordMarkerCommandAttributes(
            marker_name="core_local_activity", details={"data": _json(marker_data), "result": _json("marked")}
        ),
    )
    await _complete(client, task, [marker], force_new_task=True)
    next_task = await _poll(client, task_queue)
    if failing:  # it fails for a reason of its own (a workflow bug, say): recorded, as a first attempt's failure is
        await client.workflow_service.respond_workflow_task_failed(
            RespondWorkflowTaskFailedRequest(
                namespace="default",
                task_token=next_task.task_token,
                identity="dying",
                cause=WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR,
                failure=Failure(message="a workflow bug"),
            )
        )


async def _stuck_run(
    client: Client, task_queue: str, *, failing: bool = False
) -> tuple[str, WorkflowUpdateHandle[str]]:
    run_id = f"marker-{uuid.uuid4()}"
    start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
        "marker-then-settle",
        id=run_id,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        task_timeout=timedelta(seconds=2),
    )
    update = asyncio.create_task(
        client.start_update_with_start_workflow(
            "settled", start_workflow_operation=start, wait_for_stage=WorkflowUpdateStage.ACCEPTED
        )
    )
    await _accept_the_update(client, task_queue)
    handle = await update
    await client.get_workflow_handle(run_id).signal("go")
    await _record_a_lone_marker_then_die(client, task_queue, failing=failing)
    return run_id, handle


async def test_a_run_whose_task_no_worker_can_complete_is_reset_and_goes_on(client: Client) -> None:
    """The run is refused (the SDK's defect, shown here so the day it is fixed is seen), found by the worker's
    healing, reset to its last completed task; the update that waited fails, a new one is answered."""
    task_queue = f"test-{uuid.uuid4()}"
    run_id, waiting = await _stuck_run(client, task_queue)
    worker = Worker(
        client, task_queue=task_queue, workflows=[MarkerThenSettle], activities=[mark], max_cached_workflows=0
    )
    async with worker:
        answered = asyncio.create_task(waiting.result())
        async with asyncio.timeout(60):  # the server marks it after 2 failed attempts (the tests' server)
            while not (healed := await stuck_tasks.heal_once(client, task_queue)):
                assert not answered.done(), "the update was answered: is the SDK fixed? (then retire stuck_tasks)"
                await asyncio.sleep(1)
        assert healed == [run_id]
        with pytest.raises(WorkflowUpdateFailedError):
            await answered
        answer = await client.get_workflow_handle(run_id).execute_update("settled", result_type=str)
    assert answer == "marked"
    current = await client.get_workflow_handle(run_id).describe()
    assert current.run_id != waiting.workflow_run_id
    assert current.status == WorkflowExecutionStatus.RUNNING
    assert await stuck_tasks.heal_once(client, task_queue) == []  # nothing left to heal, nothing reset twice


async def test_a_healthy_run_is_never_reset(client: Client) -> None:
    task_queue = f"test-{uuid.uuid4()}"
    worker = Worker(
        client, task_queue=task_queue, workflows=[MarkerThenSettle], activities=[mark], max_cached_workflows=0
    )
    async with worker:
        handle = await client.start_workflow("marker-then-settle", id=f"marker-{uuid.uuid4()}", task_queue=task_queue)
        await handle.signal("go")
        assert await handle.execute_update("settled", result_type=str) == "marked"
        assert await stuck_tasks.reset_point(client, handle.id, (await handle.describe()).run_id) is None
        assert await stuck_tasks.heal_once(client, task_queue) == []


async def test_a_keel_worker_heals_its_queue_by_itself(client: Client, storage: Storage) -> None:
    """No call of ours: the worker's own healing (`KeelPlugin`, every `HEAL_EVERY_SECONDS`) resets the run."""
    task_queue = f"test-{uuid.uuid4()}"
    run_id, waiting = await _stuck_run(client, task_queue)
    plugin = KeelPlugin(
        App.of(Agent(id="idle", model=ScriptedModel(lambda r: ModelResponse(text="")))),
        storage=storage,
        sandbox_keel_workflows=False,
    )
    worker = Worker(client, task_queue=task_queue, workflows=[MarkerThenSettle], activities=[mark], plugins=[plugin])
    async with worker:
        with pytest.raises(WorkflowUpdateFailedError):  # the run it waited on was reset
            await asyncio.wait_for(waiting.result(), timeout=stuck_tasks.HEAL_EVERY_SECONDS * 4)
        answer = await client.get_workflow_handle(run_id).execute_update("settled", result_type=str)
    assert answer == "marked"


async def test_a_run_whose_task_fails_for_another_reason_is_left_alone(client: Client) -> None:
    """Same shape, but its task's recorded failure names another cause (a workflow bug): not this module's to
    reset, however often it fails."""
    task_queue = f"test-{uuid.uuid4()}"
    run_id, waiting = await _stuck_run(client, task_queue, failing=True)
    assert waiting.workflow_run_id is not None
    assert await stuck_tasks.reset_point(client, run_id, waiting.workflow_run_id) is None
    assert await stuck_tasks.heal_once(client, task_queue) == []
    await client.get_workflow_handle(run_id).terminate()


FINDINGS = Path(__file__).parent.parent / "bench" / "chaos" / "findings"


@pytest.mark.parametrize(
    ("history", "point"),
    [("2026-12-03-bad-update-message-history.json", 29), ("2026-12-03-bad-update-message-history-2.json", 24)],
)
def test_the_stuck_runs_the_chaos_runs_found_are_reset_to_their_last_completed_task(history: str, point: int) -> None:
    events = list(WorkflowHistory.from_json("stuck", json.loads((FINDINGS / history).read_text())).events)
    assert stuck_tasks.reset_point_of(reversed(events)) == point
    # Before the refused attempts (only the lone marker and the abandoned task): the same shape, the same point.
    failed = next(i for i, e in enumerate(events) if e.HasField("workflow_task_failed_event_attributes"))
    assert stuck_tasks.reset_point_of(reversed(events[:failed])) == point
    # The task that recorded the marker also recorded what came next (as a healthy run's does): nothing to reset.
    marker = next(i for i in range(point, len(events)) if events[i].HasField("marker_recorded_event_attributes"))
    upsert = HistoryEvent(
        event_id=events[marker].event_id,
        event_type=EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
    )
    assert stuck_tasks.reset_point_of(reversed([*events[: marker + 1], upsert, *events[marker + 1 : failed]])) is None
