"""Stored definitions run by the interpreter on a real worker: every entry type to success, suspend and resume
(signal and update, bad resume data refused), pinned versions, and bad input failing at once."""

from __future__ import annotations

import asyncio
import gc
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import FailureError
from temporalio.worker import Replayer

from keel.app.workflow_checks import Known, check_definition
from keel.client import keel_client
from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.client.errors import NoWorker
from keel.client.keel_client import KeelClient
from keel.client.temporal_reset import reset_to_task
from keel.client.workflows import Workflows
from keel.plugin import KeelPlugin
from keel.protocol import names
from keel.storage import Storage
from keel.workflows import definition_run
from keel.workflows.contracts import ResumeStep, WorkflowRunState
from keel.workflows.search_attributes import KEEL_STATUS, KEEL_WORKFLOW_ID
from tests.conftest import free_port, running_worker
from tests.test_temporal_cli import temporal
from tests.workflows_json.apps import ASK, CHILD, EVERYTHING, app, definition, mapping, tool_step


async def save(storage: Storage, raw: dict[str, Any]) -> None:
    known = Known(
        tools=frozenset(app.workflow_tools()),
        agents=frozenset(app.agents),
        classifiers=frozenset(app.classifiers),
        workflows={d.workflow_id: None for d in await storage.list_definitions()},
    )
    check_definition(raw, known)
    await storage.save_definition(raw["id"], raw)


async def start(client: Client, workflow_id: str, task_queue: str, *args: Any) -> Any:
    return await client.start_workflow(
        workflow_id, args=list(args), id=f"{workflow_id}-{uuid.uuid4()}", task_queue=task_queue
    )


async def suspended_on(client: Client, handle: Any, step: str) -> WorkflowRunState:
    async with asyncio.timeout(30):
        while True:
            state: WorkflowRunState = await handle.query("state", result_type=WorkflowRunState)
            if state.status == "suspended" and state.steps.get(step) and state.steps[step].status == "suspended":
                return state
            await asyncio.sleep(0.05)


async def test_a_definition_with_every_entry_type_runs_to_success(
    client: Client, storage: Storage, task_queue: str
) -> None:
    await save(storage, CHILD)
    await save(storage, EVERYTHING)
    async with running_worker(client, app, storage, task_queue):
        handle = await start(client, "everything", task_queue, {"n": 3, "name": "ann"})
        result = await handle.result()
        state = await handle.query("state", result_type=WorkflowRunState)
    assert result == {
        "doubled": 6,
        "fan": 7,
        "each": 6,
        "draft": "draft: count 6",
        "branch": "draft: count 6",  # the conditional's branches take the previous output: the agent's
        "loop": 3,
        "nested": 6,
        "who": None,
        "urgent": True,
        "why": "an exclamation mark",
    }
    assert state.status == "success" and state.version == 1 and state.steps["e[2]"].output == {"n": 6}
    history = await handle.fetch_history()
    kinds = {e.WhichOneof("attributes") for e in history.events}
    assert "timer_started_event_attributes" in kinds
    assert "start_child_workflow_execution_initiated_event_attributes" in kinds


async def test_ask_human_suspends_and_resumes_by_signal_and_by_update_refusing_bad_data(
    client: Client, storage: Storage, task_queue: str
) -> None:
    await save(storage, ASK)
    async with running_worker(client, app, storage, task_queue):
        by_signal = await start(client, "ask", task_queue, {"what": "v1"})
        state = await suspended_on(client, by_signal, "human")
        assert state.steps["human"].suspend_payload == {"question": "Ship v1?"}
        await by_signal.signal("resume", ResumeStep(step="human", resume_data={"answer": 42}))  # not a string
        await asyncio.sleep(0.3)
        assert (await by_signal.query("state", result_type=WorkflowRunState)).status == "suspended"
        # What the `temporal` CLI sends when its --input is not Mastra's `{step, resumeData}`: recorded, ignored
        await by_signal.signal("resume", "yes")
        await by_signal.signal("resume", {"resumeData": {"answer": "yes"}})  # no step
        await by_signal.signal("resume")  # no --input: it failed every workflow task, the run stuck
        await by_signal.signal("resume", args=[{"step": "human"}, {"resumeData": {"answer": "yes"}}])
        await asyncio.sleep(0.3)
        assert (await by_signal.query("state", result_type=WorkflowRunState)).status == "suspended"
        rejected = await by_signal.query("rejected_signals", result_type=list[str])
        assert rejected[0] == "Invalid resumeData for step 'human': $.answer: 42 is not of type 'string'"
        assert rejected[1:] == [
            "malformed resume payload: (root): Input should be a valid dictionary or instance of ResumeStep "
            "(expected a JSON object {step, resumeData})",
            "malformed resume payload: step: Field required (expected a JSON object {step, resumeData})",
            "malformed resume signal: 0 inputs, expected one JSON object {step, resumeData}",
            "malformed resume signal: 2 inputs, expected one JSON object {step, resumeData}",
        ]
        await by_signal.signal("resume", ResumeStep(step="human", resume_data={"answer": "yes"}))
        assert await by_signal.result() == {"answer": "yes", "version": 1}

        by_update = await start(client, "ask", task_queue, {"what": "v2"})
        await suspended_on(client, by_update, "human")
        with pytest.raises(WorkflowUpdateFailedError) as caught:
            await by_update.execute_update("resume_step", ResumeStep(step="nope", resume_data={"answer": "x"}))
        assert "Step 'nope' is not suspended (suspended steps: human)" in str(caught.value.cause)
        accepted = await by_update.execute_update("resume_step", ResumeStep(step="human", resume_data={"answer": "no"}))
        assert accepted == {"accepted": True, "step": "human"}
        assert await by_update.result() == {"answer": "no", "version": 1}


async def test_start_and_settle_answers_when_the_run_suspends_and_settle_when_it_ends(
    client: Client, storage: Storage, task_queue: str
) -> None:
    await save(storage, ASK)
    await save(storage, CHILD)
    async with running_worker(client, app, storage, task_queue):
        workflows = Workflows(storage, app, KeelClient(client, task_queue=task_queue, app=app))
        suspended = await workflows.start_and_settle("ask", {"what": "v3"})
        assert suspended.state.status == "suspended"
        assert suspended.state.steps["human"].suspend_payload == {"question": "Ship v3?"}
        await workflows.resume(suspended.run_id, "human", {"answer": "ok"})
        done = await workflows.settle(suspended.run_id)
        assert (done.state.status, done.state.result) == ("success", {"answer": "ok", "version": 1})
        assert (await workflows.settle(suspended.run_id)).state.result == {"answer": "ok", "version": 1}
        straight = await workflows.start_and_settle("child", {"n": 4})
        assert (straight.state.status, straight.state.result) == ("success", {"n": 8})
        handle = client.get_workflow_handle(suspended.run_id)
        history = await handle.fetch_history()
        asked = [
            e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
            for e in history.events
            if e.HasField("workflow_execution_update_accepted_event_attributes")
        ]
        # settled (suspended), resume_step, and settled (success) when the run was still open as the second
        # `settle` asked (else the server refuses it, and `settle` reads the ended run): no polling.
        assert asked.count("resume_step") == 1 and 1 <= asked.count(names.SETTLED_UPDATE) <= 2, asked
        assert len(asked) == asked.count("resume_step") + asked.count(names.SETTLED_UPDATE), asked
        # Started by Keel's client: marked and given its version at start, it writes no memo and upserts only
        # its status (suspended, running, completed).
        upserts = [e for e in history.events if e.HasField("upsert_workflow_search_attributes_event_attributes")]
        assert len(upserts) == 3
        assert not [e for e in history.events if e.HasField("workflow_properties_modified_event_attributes")]
        assert (await (await handle.describe()).memo())["definitionVersion"] == 1


async def test_a_run_finishes_on_the_version_it_started_with_while_new_runs_use_the_new_one(
    client: Client, storage: Storage, task_queue: str
) -> None:
    await save(storage, ASK)
    async with running_worker(client, app, storage, task_queue):
        old = await start(client, "ask", task_queue, {"what": "x"})
        await suspended_on(client, old, "human")
        edited = json.loads(json.dumps(ASK))
        edited["graph"][2]["mapConfig"]["version"] = {"value": 2}
        await save(storage, edited)
        await old.signal("resume", ResumeStep(step="human", resume_data={"answer": "a"}))
        assert await old.result() == {"answer": "a", "version": 1}
        new = await start(client, "ask", task_queue, {"what": "y"})
        await suspended_on(client, new, "human")
        await new.signal("resume", ResumeStep(step="human", resume_data={"answer": "b"}))
        assert await new.result() == {"answer": "b", "version": 2}
        assert (await new.query("state", result_type=WorkflowRunState)).version == 2


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ((), "takes one input, a JSON object (its inputData); got 0 inputs"),
        (({"n": 1}, {"n": 2}), "got 2 inputs"),
        (([1, 2],), "takes a JSON object as input (its inputData); got an array"),
        (({"n": "three"},), "Invalid input: $.n: 'three' is not of type 'integer'"),
    ],
)
async def test_bad_input_fails_the_run_at_once_with_a_readable_reason(
    client: Client, storage: Storage, task_queue: str, args: tuple[Any, ...], reason: str
) -> None:
    typed = json.loads(json.dumps(CHILD))
    typed["inputSchema"] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    await save(storage, typed)
    async with running_worker(client, app, storage, task_queue):
        handle = await start(client, "child", task_queue, *args)
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 30)
    assert reason in str(caught.value.cause)


async def test_the_temporal_cli_starts_a_stored_definition_and_resumes_it_by_signal(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str
) -> None:
    await save(storage, ASK)
    run_id = f"cli-{uuid.uuid4()}"
    async with running_worker(client, app, storage, task_queue):
        await temporal(
            dev_server, "workflow", "start", "--type", "ask", "--task-queue", task_queue, "--workflow-id", run_id,
            "--input", '{"what": "cli"}',
        )  # fmt: skip
        handle = client.get_workflow_handle(run_id)
        await suspended_on(client, handle, "human")
        listed = await temporal(
            dev_server, "workflow", "list", "--query", f"KeelStatus='suspended' AND WorkflowId='{run_id}'"
        )
        assert run_id in listed
        await temporal(
            dev_server, "workflow", "signal", "--workflow-id", run_id, "--name", "resume",
            "--input", '{"step": "human", "resumeData": {"answer": "from the cli"}}',
        )  # fmt: skip
        assert await asyncio.wait_for(handle.result(), 30) == {"answer": "from the cli", "version": 1}
        described = await handle.describe()  # started without Keel's client: the run marked itself
        memo = await described.memo()
        assert memo["definitionVersion"] == 1 and len(memo["definitionHash"]) >= 8
        assert described.typed_search_attributes.get(KEEL_WORKFLOW_ID) == "ask"


async def test_a_code_workflow_is_listed_started_resumed_and_nested_like_a_stored_one(
    client: Client, storage: Storage, task_queue: str
) -> None:
    from keel.app import App
    from tests.workflows_json.apps import definition
    from tests.workflows_json.code_workflows import Release

    code_app = App(agents=app.agents, tools=app.tools, workflows=(Release,))
    async with running_worker(client, code_app, storage, task_queue):
        workflows = Workflows(storage, code_app, KeelClient(client, task_queue=task_queue, app=code_app))
        parent = definition("parent", [{"type": "workflow", "id": "rel", "workflowId": "release"}])
        await workflows.save(parent)
        listed = {w["id"]: w for w in await workflows.listing()}
        assert listed["release"]["origin"] == "code" and listed["parent"]["origin"] == "storage"
        assert listed["release"]["inputSchema"]["properties"] == {"n": {"title": "N", "type": "integer"}}
        assert listed["release"]["description"] == "Doubles n, then waits for an approval."

        run_id = (await workflows.start_and_settle("release", {"n": 2})).run_id
        status = await workflows.settle(run_id)
        assert status.state.status == "suspended"
        assert status.state.steps["approve"].suspend_payload == {"question": "Release 4?"}
        async with asyncio.timeout(30):
            while (await workflows.counts())["release"] != {"running": 0, "suspended": 1}:
                await asyncio.sleep(0.1)
        assert (await workflows.counts())["parent"] == {"running": 0, "suspended": 0}
        await workflows.resume(run_id, "approve", {"ok": True})
        settled = await workflows.settle(run_id)  # a code workflow's outcome, from Temporal
        assert (settled.state.status, settled.state.result) == ("success", {"n": 4, "approved": True})

        nested = await workflows.start("parent", {"n": 5})
        child_id = None
        async with asyncio.timeout(30):
            while child_id is None:  # this test's own: the dev server is the session's
                query = f"WorkflowType='release' AND KeelStatus='suspended' AND TaskQueue='{task_queue}'"
                async for ex in client.list_workflows(query):
                    child_id = ex.id
                await asyncio.sleep(0.1)
        await workflows.resume(child_id, "approve", {"ok": False})
        assert await client.get_workflow_handle(nested).result() == {"n": 10, "approved": False}


async def test_resuming_a_run_no_worker_serves_answers_no_worker_instead_of_waiting_for_ever(
    client: Client, storage: Storage, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suspended run whose worker is gone: its resume (`keel workflows resume`, `POST .../resume`) was an
    update with no deadline, answered by nothing, ever; it now says that no worker took it (an HTTP 503)."""
    from keel.app import App
    from tests.workflows_json.code_workflows import Release

    monkeypatch.setattr(keel_client, "WORKER_ANSWER_SECONDS", 1.0)
    code_app = App(agents=app.agents, tools=app.tools, workflows=(Release,))
    async with running_worker(client, code_app, storage, task_queue) as keel:
        workflows = Workflows(storage, code_app, keel)
        run_id = (await workflows.start_and_settle("release", {"n": 2})).run_id
    try:
        async with asyncio.timeout(30):
            with pytest.raises(NoWorker, match=task_queue):
                await workflows.resume(run_id, "approve", {"ok": True})
    finally:  # left suspended, it would be another test's `release` run waiting
        await client.get_workflow_handle(run_id).terminate()


async def test_a_runs_progress_reads_as_mastras_workflow_chunks_from_any_offset(
    client: Client, storage: Storage, task_queue: str
) -> None:
    await save(storage, ASK)
    async with running_worker(client, app, storage, task_queue):
        handle = await start(client, "ask", task_queue, {"what": "v1"})
        await suspended_on(client, handle, "human")
        before = await handle.query("events", 0)
        await handle.signal("resume", ResumeStep(step="human", resume_data={"answer": "ok"}))
        await handle.result()
        events = await handle.query("events", 0)
        tail = await handle.query("events", len(before))
    kinds = [(e["type"], e["payload"].get("id") or e["payload"].get("workflowStatus")) for e in events]
    assert kinds == [
        ("workflow-start", None),
        ("workflow-step-start", "q"),
        ("workflow-step-result", "q"),
        ("workflow-step-start", "human"),
        ("workflow-step-suspended", "human"),
        ("workflow-finish", "suspended"),
        ("workflow-step-start", "human"),
        ("workflow-step-result", "human"),
        ("workflow-step-start", "out"),
        ("workflow-step-result", "out"),
        ("workflow-finish", "success"),
    ]
    assert events[0] == {
        "type": "workflow-start",
        "runId": handle.id,
        "from": "WORKFLOW",
        "payload": {"workflowId": "ask"},
    }
    assert events[4]["payload"]["suspendPayload"] == {"question": "Ship v1?"}
    assert events[6]["payload"]["resumePayload"] == {"answer": "ok"}
    assert events[-1]["payload"]["finalWorkflowResult"] == {"answer": "ok", "version": 1}
    assert tail == events[len(before) :] and len(before) == 6


async def test_runs_are_listed_by_mastras_status_with_dates_and_pages(
    client: Client, storage: Storage, task_queue: str
) -> None:
    from datetime import UTC, datetime, timedelta

    workflows = Workflows(storage, app, KeelClient(client, task_queue=task_queue, app=app))
    await workflows.save(ASK)
    async with running_worker(client, app, storage, task_queue):
        done = await workflows.start("ask", {"what": "a"})
        await workflows.settle(done)
        await workflows.resume(done, "human", {"answer": "y"})
        await client.get_workflow_handle(done).result()
        waiting = await workflows.start("ask", {"what": "b"})
        await workflows.settle(waiting)
        async with asyncio.timeout(30):
            while len(await workflows.runs("ask", status="suspended")) != 1 or not await workflows.runs(
                "ask", status="success"
            ):
                await asyncio.sleep(0.2)
        assert [r["runId"] for r in await workflows.runs("ask", status="suspended")] == [waiting]
        assert [r["runId"] for r in await workflows.runs("ask", status="success")] == [done]
        everything = await workflows.runs("ask")
        assert [r["runId"] for r in everything] == [waiting, done]
        assert {r["status"] for r in everything} == {"suspended", "success"}
        assert [r["runId"] for r in await workflows.runs("ask", offset=1, limit=1)] == [done]
        later = datetime.now(UTC) + timedelta(hours=1)
        assert await workflows.runs("ask", from_date=later) == []


async def test_a_foreach_over_too_many_items_fails_the_run_at_once_saying_so(
    client: Client, storage: Storage, task_queue: str
) -> None:
    from tests.workflows_json.apps import definition, mapping, tool_step

    many = definition(
        "many",
        [
            mapping("howmany", {"count": {"value": 5001}}),
            tool_step("list", "range"),
            {"type": "foreach", "step": tool_step("each", "double")},
        ],
    )
    await save(storage, many)
    async with running_worker(client, app, storage, task_queue):
        handle = await start(client, "many", task_queue, {})
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 30)
    assert "Step 'each': 5001 items; foreach takes at most 5000" in str(caught.value.cause)


async def test_a_run_reads_its_request_context_and_is_listed_by_its_resource(
    client: Client, storage: Storage, task_queue: str
) -> None:

    workflows = Workflows(storage, app, KeelClient(client, task_queue=task_queue, app=app))
    await workflows.save(CHILD)
    await workflows.save(EVERYTHING)
    async with running_worker(client, app, storage, task_queue):
        run_id = await workflows.start(
            "everything", {"n": 1, "name": "bo"}, resource_id="team-a", request_context={"user": "bo"}
        )
        result = await client.get_workflow_handle(run_id).result()
        async with asyncio.timeout(30):
            while not (found := await workflows.runs("everything", resource_id="team-a")):
                await asyncio.sleep(0.2)
        assert await workflows.runs("everything", resource_id="team-b") == []
    assert result["who"] == "bo"
    assert [r["runId"] for r in found] == [run_id]


async def test_a_definition_stored_without_checks_fails_the_run_at_once_not_its_workflow_task(
    client: Client, storage: Storage, task_queue: str
) -> None:
    await storage.save_definition("broken", {"id": "broken", "graph": [{"type": "nap"}]})  # bypasses the checks
    async with running_worker(client, app, storage, task_queue):
        handle = await start(client, "broken", task_queue, {})
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 30)
    assert "The stored definition 'broken' is invalid" in str(caught.value.cause)


async def test_a_stored_sleep_longer_than_time_fails_its_run_and_a_date_without_a_zone_is_utc(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """Stored before the checks refused them (`save_definition` bypasses them): before, each failed the run's
    workflow task, each retry, for good (`Python int too large to convert to C int`, `can't subtract offset-naive
    and offset-aware datetimes`)."""
    await storage.save_definition("eternal", definition("eternal", [{"type": "sleep", "id": "s", "duration": 2**63}]))
    past = definition("naive", [{"type": "sleepUntil", "id": "s", "date": "2020-01-01T00:00:00"}])
    await storage.save_definition("naive", past)
    async with running_worker(client, app, storage, task_queue):
        eternal = await start(client, "eternal", task_queue, {})
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(eternal.result(), 30)
        assert "Step 's': a sleep of 9.223372036854776e+18 ms is longer than time" in str(caught.value.cause)
        naive = await start(client, "naive", task_queue, {"n": 1})
        assert await asyncio.wait_for(naive.result(), 30) == {"n": 1}  # 2020 in UTC: long past


async def test_definitions_that_reach_each_other_again_stop_at_the_deepest_nesting(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """Each is checked for cycles when stored, but two saved at once can each pass (found from outside: 1 time in
    3). Before, a run of either started nested runs without end: 121 in 6 s."""
    for name, other in (("ping", "pong"), ("pong", "ping")):  # bypasses the checks, as the race did
        await storage.save_definition(name, definition(name, [{"type": "workflow", "id": "w", "workflowId": other}]))
    async with running_worker(client, app, storage, task_queue):
        handle = await start(client, "ping", task_queue, {})
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 60)
    deepest: BaseException = caught.value
    while isinstance(deepest, FailureError | WorkflowFailureError) and deepest.cause is not None:
        deepest = deepest.cause
    assert "workflows nest 32 deep here, at most 32" in str(deepest)
    nested = [w async for w in client.list_workflows(f"WorkflowId STARTS_WITH '{handle.id}'")]
    assert len(nested) == 33  # the run and its 32 nested runs


async def test_a_start_refused_leaves_python_no_unretrieved_error_to_log(
    client: Client, storage: Storage, task_queue: str
) -> None:
    await save(storage, ASK)
    loop = asyncio.get_running_loop()
    logged: list[str] = []
    before = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: logged.append(str(context.get("message"))))
    try:
        async with running_worker(client, app, storage, task_queue):
            workflows = Workflows(storage, app, KeelClient(client, task_queue=task_queue, app=app))
            run_id = f"once-{uuid.uuid4()}"
            await workflows.start_and_settle("ask", {"what": "v1"}, run_id=run_id)  # suspended: the id is taken
            with pytest.raises(Exception, match="already"):
                await workflows.start_and_settle("ask", {"what": "v1"}, run_id=run_id)
        gc.collect()  # an unretrieved exception is logged when its future is collected
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(before)
    assert not [m for m in logged if "never retrieved" in m], logged


async def test_settle_follows_a_run_reset_while_it_waited(client: Client, storage: Storage, task_queue: str) -> None:
    """A reset (an operator's, or a worker healing a stuck run: `keel.client.stuck_tasks`) ends the execution
    whose `settled` update waited: `settle` asks the execution now current, and answers when it suspends."""
    napper = definition(
        "napper",
        [
            {"type": "sleep", "id": "nap", "duration": 1500},
            mapping("q", {"question": {"value": "Go on?"}}),
            tool_step("human", "ask-human"),
        ],
    )
    await save(storage, napper)
    async with running_worker(client, app, storage, task_queue):
        workflows = Workflows(storage, app, KeelClient(client, task_queue=task_queue, app=app))
        handle = await start(client, "napper", task_queue, {})
        first = (await handle.describe()).run_id
        waiting = asyncio.create_task(workflows.settle(handle.id, timeout=30))
        await asyncio.sleep(0.5)  # the update accepted, the nap's timer started
        history = await handle.fetch_history()
        last_task = max(e.event_id for e in history.events if e.HasField("workflow_task_completed_event_attributes"))
        await reset_to_task(client, handle.id, first, last_task, "test")
        settled = await waiting
        assert settled.state.status == "suspended"
        assert settled.state.steps["human"].suspend_payload == {"question": "Go on?"}
        assert (await handle.describe()).run_id != first


def wide_foreach(
    workflow_id: str, output_schema: dict[str, Any], fill: str = "x", size: int = 100_000, concurrency: int = 60
) -> dict[str, Any]:
    """60 items of `size` characters, `concurrency` at once (6 MB or more: no workflow task may start them all,
    Temporal refuses a task's completion over 4 MiB)."""
    return definition(
        workflow_id,
        [
            mapping("howmany", {"count": {"value": 60}, "size": {"value": size}, "fill": {"value": fill}}),
            tool_step("make", "texts"),
            {"type": "foreach", "step": tool_step("each", "echo"), "opts": {"concurrency": concurrency}},
        ],
        outputSchema=output_schema,
    )


@pytest.mark.parametrize(("fill", "size"), [("x", 100_000), ("字", 50_000)], ids=["ascii", "cjk"])
async def test_a_wide_foreach_over_large_items_completes(
    client: Client, storage: Storage, task_queue: str, fill: str, size: int
) -> None:
    """50,000 CJK characters are 150 KB of UTF-8 in a payload (and 300 KB as escaped JSON)."""
    await save(storage, wide_foreach("wide", {"type": "array"}, fill, size))
    async with running_worker(client, app, storage, task_queue):
        handle = await start(client, "wide", task_queue, {})
        result = await asyncio.wait_for(handle.result(), 60)
        history = await handle.fetch_history()
    assert [item["echo"][:6] for item in result] == [f"{i:06d}" for i in range(60)]
    assert all(len(item["echo"]) == size and item["echo"].endswith(fill) for item in result)
    # The items waited for later workflow tasks, and the run replays so (its waits read the history's length)
    tasks = [e for e in history.events if e.HasField("workflow_task_completed_event_attributes")]
    assert len(tasks) >= 4
    await Replayer(workflows=[], plugins=[KeelPlugin()]).replay_workflow(history)


async def test_a_foreach_whose_items_end_together_and_run_again_locally_completes(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """60 items of 200 KB, 16 at once, of a tool that may run as a local step: four run locally, the others as
    activities; when these end together, each one's end lets the next item run locally in the same workflow
    task, and 16 results of 200 KB were one task's completion (over 4 MiB: the run failed, GrpcMessageTooLarge).
    Local steps' large results go to the payload store: a task's completion holds their references."""
    await save(storage, wide_foreach("together", {"type": "array"}, size=200_000, concurrency=16))
    async with running_worker(client, app, storage, task_queue):
        handle = await start(client, "together", task_queue, {})
        result = await asyncio.wait_for(handle.result(), 60)
        history = await handle.fetch_history()
    assert [item["echo"][:6] for item in result] == [f"{i:06d}" for i in range(60)]
    assert all(len(item["echo"]) == 200_000 for item in result)
    markers = [e for e in history.events if e.HasField("marker_recorded_event_attributes")]
    assert markers and max(e.ByteSize() for e in markers) < 3 * 1024
    await Replayer(workflows=[], plugins=[KeelPlugin()]).replay_workflow(history)


async def test_a_large_output_that_fails_its_schema_fails_the_run_saying_so_in_short(
    client: Client, storage: Storage, task_queue: str
) -> None:
    await save(storage, wide_foreach("wide-object", {"type": "object"}))
    async with running_worker(client, app, storage, task_queue):
        handle = await start(client, "wide-object", task_queue, {})
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 60)
    message = str(caught.value.cause)
    assert "is not of type 'object'" in message and "(6000840 characters)" in message, message[:500]
    assert len(message) < 1000


async def test_a_foreach_wider_than_temporal_lets_a_run_have_pending_completes(
    storage: Storage, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that allows 20 pending activities (Temporal's default is 2,000, `MAX_IN_FLIGHT` 500): a foreach of
    60 at once would have every workflow task failed for ever (PENDING_ACTIVITIES_LIMIT_EXCEEDED)."""
    # Unsandboxed (the suite sandboxes Keel's workflows, which re-imports their modules for each run): the worker
    # reads the module's constants as patched.
    monkeypatch.setattr(definition_run, "MAX_IN_FLIGHT", 10)
    monkeypatch.setattr(definition_run, "MAX_LOCAL_STEPS_PER_TASK", 0)  # every item an activity
    cfg = DevServerConfig(
        port=free_port(),
        ui_port=free_port(),
        state_dir=tmp_path / "temporal",
        extra_dynamic_config={"limit.numPendingActivities.error": "20"},
    )
    server = await DevServer(cfg).start(reuse=False)
    try:
        client = await connect(cfg.address)
        wide = definition(
            "wide-many",
            [
                mapping("howmany", {"count": {"value": 60}}),
                tool_step("list", "range"),
                {"type": "foreach", "step": tool_step("each", "double"), "opts": {"concurrency": 60}},
            ],
            outputSchema={"type": "array"},
        )
        await save(storage, wide)
        async with running_worker(client, app, storage, task_queue, sandboxed=False):
            handle = await start(client, "wide-many", task_queue, {})
            result = await asyncio.wait_for(handle.result(), 60)
            history = await handle.fetch_history()
    finally:
        server.stop()
    assert result == [{"n": 2 * i} for i in range(1, 61)]
    pending, most = 0, 0  # activities scheduled and not ended, through the history
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            pending += 1
            most = max(most, pending)
        elif event.HasField("activity_task_completed_event_attributes"):
            pending -= 1
    assert most == 10  # as many as it may, never more


async def test_a_step_whose_child_run_id_temporal_cannot_take_fails_the_run_not_its_workflow_task(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """A step's child run is named `<run id>-<step id>-N`. Keel's clients keep room for it in the run ids they take
    (`DEFINITION_CHILD_ROOM`); a run started with a longer id (here, by the Temporal client) fails at that step.
    Before, Temporal refused the child's start by failing the run's workflow task, each retry, for good."""
    await save(storage, definition("drafter", [{"type": "agent", "id": "draft", "agentId": "writer"}]))
    async with running_worker(client, app, storage, task_queue):
        handle = await client.start_workflow("drafter", {"prompt": "hi"}, id="w" * 995, task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 30)
    assert "Step 'draft' was not started: The run id and step id would give a workflow id of 1003 bytes" in str(
        caught.value.cause
    )


@pytest.mark.parametrize("tool_id", ["send", "record"], ids=["activity-step", "local-step"])
async def test_a_run_canceled_while_its_tool_step_runs_ends_canceled(
    client: Client, storage: Storage, task_queue: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch, tool_id: str
) -> None:
    """Before, the step's cancellation was its failure: an activity step's failed the run instead of canceling
    it; a local step's was retried as an activity (the tool started again) and the run went on."""
    monkeypatch.setenv("KEEL_TEST_TOOL_SECONDS", "30")
    workflow_id = f"canceled-{tool_id}"
    await save(storage, definition(workflow_id, [mapping("item", {"n": {"value": 1}}), tool_step("slow", tool_id)]))
    async with running_worker(client, app, storage, task_queue):
        handle = await start(client, workflow_id, task_queue, {})
        log = data_dir / ("sent.log" if tool_id == "send" else "started.log")
        async with asyncio.timeout(20):
            while not log.exists():
                await asyncio.sleep(0.05)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as ended:
            await asyncio.wait_for(handle.result(), 20)
    described = await handle.describe()
    assert described.status == WorkflowExecutionStatus.CANCELED, ended.value.cause
    assert described.typed_search_attributes.get(KEEL_STATUS) == "canceled"  # it said running
    assert len(log.read_text().splitlines()) == 1  # started once


async def test_a_run_canceled_while_its_local_tool_step_runs_stops_the_tool_without_waiting_for_a_heartbeat(
    client: Client, storage: Storage, task_queue: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local tool step holds the run's workflow task open: the cancel reached the run only with the task's next
    heartbeat (48 s in with this run's task timeout of 60 s, 8 s with Temporal's default). The step now asks
    Temporal while it runs whether its run was asked to cancel, and stops."""
    monkeypatch.setenv("KEEL_TEST_TOOL_SECONDS", "600")
    await save(
        storage, definition("canceled-soon", [mapping("item", {"n": {"value": 1}}), tool_step("slow", "record")])
    )
    async with running_worker(client, app, storage, task_queue):
        handle = await client.start_workflow(
            "canceled-soon",
            {},
            id=f"canceled-soon-{uuid.uuid4()}",
            task_queue=task_queue,
            task_timeout=timedelta(seconds=60),
        )
        log = data_dir / "started.log"
        async with asyncio.timeout(20):
            while not log.exists():
                await asyncio.sleep(0.05)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 20)
        state: WorkflowRunState = await handle.query("state", result_type=WorkflowRunState)
    assert state.status == "canceled"
    described = await handle.describe()
    assert described.status == WorkflowExecutionStatus.CANCELED
    assert described.typed_search_attributes.get(KEEL_STATUS) == "canceled"


@pytest.mark.parametrize(
    ("tool_id", "width"), [("record", 1), ("send", 2)], ids=["local-items-one-lane", "activity-items-two-lanes"]
)
async def test_a_foreach_canceled_while_its_items_run_starts_no_item_after_the_cancel(
    client: Client,
    storage: Storage,
    task_queue: str,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    tool_id: str,
    width: int,
) -> None:
    """From review: a local item that stopped for the cancel was taken by its lane for the item's failure, and the
    lane started the next items (as activities once the task's local budget was spent); an activity item's
    cancellation was taken the same way. The run stayed open until every item had run."""
    monkeypatch.setenv("KEEL_TEST_TOOL_SECONDS", "600")
    each = definition(
        f"each-{tool_id}",
        [
            mapping("howmany", {"count": {"value": 8}}),
            tool_step("list", "range"),
            {"type": "foreach", "id": "each", "step": tool_step("it", tool_id), "opts": {"concurrency": width}},
        ],
    )
    await save(storage, each)
    log = data_dir / ("sent.log" if tool_id == "send" else "started.log")
    async with running_worker(client, app, storage, task_queue):
        handle = await client.start_workflow(
            each["id"], {}, id=f"each-{uuid.uuid4()}", task_queue=task_queue, task_timeout=timedelta(seconds=60)
        )
        async with asyncio.timeout(20):
            while not log.exists() or len(log.read_text().splitlines()) < width:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 20)
        await asyncio.sleep(1.0)  # an item started after the cancel would have written its line by now
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    assert len(log.read_text().splitlines()) == width, log.read_text()


async def test_a_run_canceled_while_a_nested_workflow_runs_ends_canceled_with_it(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """Found from outside: a cancel during a nested workflow step (or an agent step: a child run too) failed
    the run ("Cancelled") instead of canceling it."""
    await save(storage, definition("inner-nap", [{"type": "sleep", "id": "nap", "duration": 600_000}]))
    await save(storage, definition("outer-nap", [{"type": "workflow", "id": "sub", "workflowId": "inner-nap"}]))
    async with running_worker(client, app, storage, task_queue):
        handle = await start(client, "outer-nap", task_queue, {})
        async with asyncio.timeout(20):
            while not [c async for c in client.list_workflows(f"WorkflowId STARTS_WITH '{handle.id}-'")]:
                await asyncio.sleep(0.1)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 20)
        [child] = [c async for c in client.list_workflows(f"WorkflowId STARTS_WITH '{handle.id}-'")]
        assert (await client.get_workflow_handle(child.id).describe()).status == WorkflowExecutionStatus.CANCELED
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
