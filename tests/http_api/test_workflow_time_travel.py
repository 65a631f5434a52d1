"""Time travel and restart of a stored workflow's run over HTTP, driven by the unmodified `@mastra/client-js`
(`run.timeTravel`, `timeTravelAsync`, `timeTravelStream`, `restart`, `restartAsync`).

The ledger is `tally.log`, outside Keel: each `tally` step appends `tool N` when its tool runs. The definition's
`tally` steps are idempotent, so Keel chains them as local activities: `one` and `two` in the run's first
workflow task, `three` and `four` in the task after the `nap` timer. Travelling to `two` resets the run to its
first task, to `four` to the later one: either way the steps chained before the target in that task must not
run again (their outputs come with the run's instruction), and the target and the steps after it must."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from keel.client import KeelClient, NoWorker, RunIdInUse, workflow_time_travel, workflows
from keel.client.api import create_api
from keel.client.api.server import serving
from keel.client.devserver import DevServer
from keel.client.temporal_reset import describe_run, reset_to_task, task_completed_after
from keel.client.workflow_time_travel import NOT_AGAIN
from keel.client.workflows import Workflows
from keel.plugin import KeelPlugin
from keel.protocol import names
from keel.storage import StepAnswer, StepRecord, Storage
from keel.workflows.contracts import TimeTravel, TimeTravelPoint, time_travel_key
from keel.workflows.time_travel import RESET_ORIGIN_FAILED_PATCH, RESET_ORIGIN_RETRY
from tests.conftest import free_port, running_worker, worker_subprocess
from tests.http_api.apps import app
from tests.http_api.conftest import Api
from tests.test_cli import Keel


def _tally(step_id: str) -> dict[str, Any]:
    return {"type": "tool", "id": step_id, "toolId": "tally"}


def _number(step_id: str, n: int) -> dict[str, Any]:
    return {"type": "mapping", "id": step_id, "mapConfig": json.dumps({"step": {"value": n}})}


LEDGER = {
    "id": "ledger",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object"},
    "graph": [
        {"type": "mapping", "id": "m1", "mapConfig": json.dumps({"step": {"initData": True, "path": "first"}})},
        _tally("one"),
        _number("m2", 2),
        _tally("two"),
        {"type": "sleep", "id": "nap", "duration": 10},
        _number("m3", 3),
        _tally("three"),
        _number("m4", 4),
        _tally("four"),
        {
            "type": "mapping",
            "id": "out",
            "mapConfig": json.dumps({k: {"step": k, "path": "step"} for k in ("one", "two", "three", "four")}),
        },
    ],
}


async def replays(history: WorkflowHistory, run_id: str) -> None:
    """The execution `run_id` replays, in the sandbox and without it, as a worker replays it. The Replayer takes
    an execution's id from its started event, which a reset copies from the execution reset: the copy here
    carries the execution's own, which a worker is given (and the run tells resets apart by)."""
    events = [HistoryEvent() for _ in history.events]
    for copy, event in zip(events, history.events, strict=True):
        copy.CopyFrom(event)
    events[0].workflow_execution_started_event_attributes.original_execution_run_id = run_id
    for sandboxed in (True, False):
        replayer = Replayer(workflows=[], plugins=[KeelPlugin(sandbox_keel_workflows=sandboxed)])
        await replayer.replay_workflow(WorkflowHistory(history.workflow_id, events))


def ledger(data_dir: Path) -> list[str]:
    log = data_dir / "tally.log"
    return log.read_text().splitlines() if log.exists() else []


async def test_time_travel_runs_the_step_and_later_ones_again_and_nothing_before_it(api: Api, data_dir: Path) -> None:
    out = await api.js("""
        await client.upsertDynamicWorkflow(vars.ledger);
        const run = await client.getWorkflow("ledger").createRun();
        const first = await run.startAsync({inputData: {first: 1}});
        return {runId: run.runId, first};
    """, ledger=LEDGER)  # fmt: skip
    run_id = out["runId"]
    assert out["first"]["result"] == {"one": 1, "two": 2, "three": 3, "four": 4}
    assert ledger(data_dir) == ["tool 1", "tool 2", "tool 3", "tool 4"]
    handle = api.keel.temporal.get_workflow_handle(run_id)
    first_execution = (await handle.describe()).run_id

    # To `two`, with a new input: the run's first workflow task runs again, `one` (chained before it) does not.
    out = await api.js("""
        const run = await client.getWorkflow("ledger").createRun({runId: vars.runId});
        return await run.timeTravelAsync({step: "two", inputData: {step: 20}});
    """, runId=run_id)  # fmt: skip
    assert out["status"] == "success" and out["result"] == {"one": 1, "two": 20, "three": 3, "four": 4}
    assert ledger(data_dir)[4:] == ["tool 20", "tool 3", "tool 4"]

    # To `four` (after the timer): that task runs again, `three` (chained before it there) does not.
    out = await api.js("""
        const run = await client.getWorkflow("ledger").createRun({runId: vars.runId});
        return await run.timeTravel({step: "four"});
    """, runId=run_id)  # fmt: skip
    assert out["message"] == "Workflow run time travel started" and out["reusedSteps"] == ["three"]
    assert await handle.result() == {"one": 1, "two": 20, "three": 3, "four": 4}
    assert ledger(data_dir)[7:] == ["tool 4"]

    # Streamed, to `three`: the chunks from `three` on, after the run's start.
    out = await api.js("""
        const run = await client.getWorkflow("ledger").createRun({runId: vars.runId});
        const stream = await run.timeTravelStream({step: ["three"], requestContext: {who: "ann"}});
        const events = [];
        for await (const event of stream) events.push(event);
        return events;
    """, runId=run_id)  # fmt: skip
    types = [(e["type"], e["payload"].get("id")) for e in out]
    assert types[0] == ("workflow-start", None) and types[-1] == ("workflow-finish", None)
    assert [i for t, i in types if t == "workflow-step-start"] == ["three", "m4", "four", "out"]
    assert out[-1]["payload"]["workflowStatus"] == "success"
    assert ledger(data_dir)[8:] == ["tool 3", "tool 4"]

    # Each time travel was Temporal's reset of the execution before; the new execution read its instruction
    # (stored before the reset) with its first local activity after it, and was sent no signal.
    executions = sorted(
        [e async for e in api.keel.temporal.list_workflows(f"WorkflowId='{run_id}'")], key=lambda e: e.start_time
    )
    assert len(executions) == 4 and executions[0].run_id == first_execution
    for before, execution in itertools.pairwise(executions):
        events = (await api.keel.temporal.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()).events
        resets = [
            e.workflow_task_failed_event_attributes
            for e in events
            if e.HasField("workflow_task_failed_event_attributes")
        ]
        assert resets[-1].base_run_id == before.run_id
        assert resets[-1].failure.message.startswith(f"{names.TIME_TRAVEL_REASON}: run {run_id} again from step ")
        after = events[max(i for i, e in enumerate(events) if e.HasField("workflow_task_failed_event_attributes")) :]
        results = [
            json.loads(e.marker_recorded_event_attributes.details["result"].payloads[0].data)
            for e in after
            if e.marker_recorded_event_attributes.marker_name == "core_local_activity"
            and "result" in e.marker_recorded_event_attributes.details
        ]
        origin = next(r for r in results if isinstance(r, dict) and "timeTravel" in r)  # after load_definition's
        assert origin["timeTravel"] is True and origin["instruction"]["baseExecutionId"] == before.run_id
        assert not [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]

    # Every execution replays with the current code, in the sandbox and without it.
    for sandboxed in (True, False):
        replayer = Replayer(workflows=[], plugins=[KeelPlugin(sandbox_keel_workflows=sandboxed)])
        for execution in executions:
            past = await api.keel.temporal.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()
            await replayer.replay_workflow(past)


ASK = {
    "id": "ask",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object"},
    "graph": [
        {"type": "mapping", "id": "q", "mapConfig": json.dumps({"question": {"template": "Ship ${initData.what}?"}})},
        {"type": "tool", "id": "human", "toolId": "ask-human"},
        {"type": "mapping", "id": "out", "mapConfig": json.dumps({"answer": {"step": "human", "path": "answer"}})},
    ],
}
PAUSE = {
    "id": "pause",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object"},
    "graph": [{"type": "tool", "id": "wait", "toolId": "pause"}],
}


async def test_a_suspended_run_is_time_travelled_with_resume_data_and_bad_input_gets_mastras_4xx(api: Api) -> None:
    out = await api.js("""
        await client.upsertDynamicWorkflow(vars.ask);
        await client.upsertDynamicWorkflow(vars.ledger);
        const run = await client.getWorkflow("ask").createRun();
        const suspended = await run.startAsync({inputData: {what: "v1"}});
        const other = await client.getWorkflow("ledger").createRun();
        await other.startAsync({inputData: {first: 1}});
        const errors = {};
        const attempts = {
            unknownStep: () => run.timeTravel({step: "nope"}),
            notReached: () => run.timeTravel({step: "out"}),
            nested: () => run.timeTravel({step: "human.inner"}),
            context: () => run.timeTravel({step: "human", context: {q: {status: "success", output: {}}}}),
            perStep: () => run.timeTravel({step: "human", perStep: true}),
            badInput: () => run.timeTravel({step: "human", inputData: {question: ""}}),
            badResumeData: () => run.timeTravel({step: "human", resumeData: {answer: 7}}),
            otherWorkflow: () => client.getWorkflow("ask").createRun({runId: other.runId})
                .then((r) => r.timeTravel({step: "human"})),
            unknownRun: () => client.getWorkflow("ask").createRun({runId: "run-none"})
                .then((r) => r.timeTravel({step: "human"})),
            codeWorkflow: async () => {
                const code = await client.getWorkflow("release").createRun();
                await code.startAsync({inputData: {n: 2}});
                try { return await code.timeTravel({step: "approve"}); }
                finally { await code.resumeAsync({step: "approve", resumeData: {ok: true}}); }  // none left waiting
            },
            restartSuspended: () => run.restart({}),
        };
        for (const [name, attempt] of Object.entries(attempts)) {
            try { errors[name] = {answered: await attempt()}; }
            catch (e) { errors[name] = {status: e.status, body: e.body}; }
        }
        const resumed = await run.timeTravelAsync({step: "human", resumeData: {answer: "later"}});
        // A run whose step suspended, was resumed, and ended: the schema it suspended with still holds
        const ended = await client.getWorkflow("ask").createRun();
        await ended.startAsync({inputData: {what: "v2"}});
        await ended.resumeAsync({step: "human", resumeData: {answer: "yes"}});
        let badOnEnded;
        try { await ended.timeTravel({step: "human", resumeData: {answer: 8}}); }
        catch (e) { badOnEnded = {status: e.status, body: e.body}; }
        const restarted = await run.restart({});
        const again = await run.restartAsync();
        return {runId: run.runId, otherId: other.runId, suspended, errors, resumed, badOnEnded, restarted, again};
    """, ask=ASK, ledger=LEDGER)  # fmt: skip
    assert out["suspended"]["status"] == "suspended"
    errors = out["errors"]
    assert errors["unknownStep"] == {
        "status": 400,
        "body": {"error": "Time travel target step not found in execution graph: 'nope'. Verify the step id/path."},
    }
    assert errors["notReached"] == {
        "status": 400,
        "body": {"error": f"Cannot time travel run '{out['runId']}' to step 'out': the run never reached it"},
    }
    for name in ("nested", "context", "perStep", "badInput", "codeWorkflow"):
        assert errors[name]["status"] == 400 and errors[name]["body"]["error"], name
    assert errors["badInput"]["body"]["error"].startswith("Invalid inputData: ")
    # checked against the resume schema the step is suspended with, as a resume's is (it ran with "7")
    assert errors["badResumeData"] == {
        "status": 422,
        "body": {"error": "Invalid resumeData for step 'human': $.answer: 7 is not of type 'string'"},
    }
    assert errors["otherWorkflow"] == {
        "status": 404,
        "body": {"error": f"Workflow run {out['otherId']} not found for workflow ask"},
    }
    assert errors["unknownRun"] == {"status": 404, "body": {"error": "Workflow run run-none not found"}}
    assert errors["restartSuspended"] == {
        "status": 409,
        "body": {"error": "This workflow run was not active: it is suspended, waiting to be resumed"},
    }
    # The suspended execution was reset (so terminated, and kept); the step ran again with the resume data.
    assert out["resumed"]["status"] == "success" and out["resumed"]["result"] == {"answer": "later"}
    assert out["badOnEnded"] == {
        "status": 422,
        "body": {"error": "Invalid resumeData for step 'human': $.answer: 8 is not of type 'string'"},
    }
    executions = [e async for e in api.keel.temporal.list_workflows(f"WorkflowId='{out['runId']}'")]
    assert sorted(e.status.name for e in executions if e.status) == ["COMPLETED", "TERMINATED"]
    assert out["restarted"] == {"message": "Workflow run has already ended: there was nothing to restart"}
    assert out["again"]["status"] == "success" and out["again"]["result"] == {"answer": "later"}

    async with httpx.AsyncClient(base_url=f"{api.url}/api", timeout=30) as http:
        no_run = await http.post("/workflows/ask/time-travel", json={"step": "human"})
        no_step = await http.post("/workflows/ask/time-travel", params={"runId": out["runId"]}, json={"step": []})
        no_workflow = await http.post("/workflows/nope/time-travel", params={"runId": "r"}, json={"step": "a"})
        no_body = await http.post("/workflows/ask/time-travel-async", params={"runId": out["runId"]})
    assert (no_run.status_code, no_run.json()) == (400, {"error": "runId required to time travel workflow"})
    assert no_step.status_code == 400 and no_step.json() == {
        "error": "Step is required and must be a valid step or array of steps"
    }
    assert (no_workflow.status_code, no_workflow.json()) == (404, {"error": "Workflow with id nope not found"})
    assert no_body.status_code == 400 and no_body.json()["error"] == "Invalid request body"


async def test_an_active_run_is_not_time_travelled_and_restart_says_it_continues(api: Api) -> None:
    await api.storage.save_definition("pause", PAUSE)
    run_id = await Workflows(api.storage, app, api.keel).start("pause", {"seconds": 2})
    out = await api.js("""
        const run = await client.getWorkflow("pause").createRun({runId: vars.runId});
        let refused;
        try { await run.timeTravel({step: "wait"}); } catch (e) { refused = {status: e.status, body: e.body}; }
        const restarted = await run.restart({});
        const settled = await run.restartAsync();
        return {refused, restarted, settled};
    """, runId=run_id)  # fmt: skip
    assert out["refused"] == {
        "status": 409,
        "body": {"error": "This workflow run is still running, cannot time travel"},
    }
    assert out["restarted"] == {
        "message": "Workflow run is active: Temporal keeps running it, so there was nothing to restart"
    }
    assert out["settled"]["status"] == "success" and out["settled"]["result"] == {"paused": 2}


@pytest.mark.parametrize("stored", [False, True], ids=["lost", "stored"])
async def test_a_time_travel_whose_instruction_was_lost_waits_until_restarted(
    api: Api, data_dir: Path, stored: bool
) -> None:
    """Reset by the client of the version before, which signalled the instruction after its reset and stopped
    before it could: the new execution finds no stored instruction and waits for the signal (it runs no step
    meanwhile), and a restart lets it go on as a plain reset (its task's steps run again, `three` included), or
    with the instruction stored for its reset if one is there by then."""
    await api.storage.save_definition("ledger", LEDGER)
    workflows = Workflows(api.storage, app, api.keel)
    run_id = (await workflows.start_and_settle("ledger", {"first": 1})).run_id
    old = api.keel.temporal.get_workflow_handle(run_id, run_id=(await describe_run(api.keel, run_id)).run_id)
    point = TimeTravelPoint.model_validate(await old.query(names.TIME_TRAVEL_POINT_QUERY, "four"))
    reset_event = task_completed_after((await old.fetch_history()).events, point.history_length)
    assert reset_event is not None and old.run_id is not None
    reason = f"{names.TIME_TRAVEL_REASON}: run {run_id} again from step 'four'"
    await reset_to_task(api.keel.temporal, run_id, old.run_id, reset_event, reason, exclude=NOT_AGAIN)
    handle = api.keel.temporal.get_workflow_handle(run_id)
    for _ in range(100):
        if await handle.query(names.TIME_TRAVEL_WAITING_QUERY) == old.run_id:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    assert ledger(data_dir) == ["tool 1", "tool 2", "tool 3", "tool 4"]  # it waits: nothing ran again
    if stored:
        travel = TimeTravel(
            base_execution_id=old.run_id,
            step="four",
            input_data={"step": 40},
            has_input_data=True,
            recorded=point.recorded,
        )
        await api.storage.write(run_id, answer=StepAnswer(time_travel_key(old.run_id), travel.model_dump(mode="json")))

    out = await api.js("""
        const run = await client.getWorkflow("ledger").createRun({runId: vars.runId});
        return await run.restart({});
    """, runId=run_id)  # fmt: skip
    if stored:
        assert out == {
            "message": "Workflow run restarted: it had been reset by a time travel whose signal was lost, and goes "
            "on with its instruction"
        }
        assert await handle.result() == {"one": 1, "two": 2, "three": 3, "four": 40}
        assert ledger(data_dir)[4:] == ["tool 40"]
        return
    assert out == {
        "message": "Workflow run restarted: it had been reset by a time travel whose instruction was lost, and goes "
        "on as a plain reset"
    }
    assert await handle.result() == {"one": 1, "two": 2, "three": 3, "four": 4}
    assert ledger(data_dir)[4:] == ["tool 3", "tool 4"]


class ClientStopped(Exception):
    """The API process stopping right after its reset."""


def stops_after(reset: Callable[..., Awaitable[str]]) -> Callable[..., Awaitable[str]]:
    async def reset_then_stop(*args: Any, **kwargs: Any) -> str:
        await reset(*args, **kwargs)
        raise ClientStopped

    return reset_then_stop


async def test_a_time_travel_whose_client_stops_after_the_reset_goes_on_with_its_instruction(
    api: Api, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The instruction is stored before the reset: the new execution reads it, and needs no signal (nor a
    restart) to run `four` with its new input and `three` not again."""
    await api.storage.save_definition("ledger", LEDGER)
    run_id = (await Workflows(api.storage, app, api.keel).start_and_settle("ledger", {"first": 1})).run_id

    monkeypatch.setattr(workflow_time_travel, "reset_to_task", stops_after(reset_to_task))
    with pytest.raises(ClientStopped):
        await workflow_time_travel.time_travel(api.keel, api.storage, run_id, "four", input_data={"step": 40})
    handle = api.keel.temporal.get_workflow_handle(run_id)
    async with asyncio.timeout(30):
        assert await handle.result() == {"one": 1, "two": 2, "three": 3, "four": 40}
    assert ledger(data_dir)[4:] == ["tool 40"]
    events = (await handle.fetch_history()).events
    assert not [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    await replays(await handle.fetch_history(), (await handle.describe()).run_id)


async def test_a_run_that_cannot_tell_what_reset_it_goes_on_as_a_plain_reset(
    api: Api, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`keel.reset_origin` fails (storage refuses it; its attempts are bounded, `RESET_ORIGIN_RETRY`) and no
    signal came: the run neither fails nor waits, it goes on as a plain reset (`three` runs again). The rule is
    the run's load's (`LoadDefinitionResult.reset_origin_goes_on`), not a patch asked after the failure: a patch
    asked in reaction to a local activity's result can be met a workflow task early on replay, which then fails."""
    assert RESET_ORIGIN_RETRY.maximum_attempts > 0  # not retried for ever
    await api.storage.save_definition("ledger", LEDGER)
    run_id = (await Workflows(api.storage, app, api.keel).start_and_settle("ledger", {"first": 1})).run_id
    begin_step = api.storage.begin_step

    async def refused(run_id: str, *, answer_id: str | None = None, tool_ids: Sequence[str] = ()) -> StepRecord:
        if answer_id is not None and answer_id.startswith("time-travel/"):
            raise ApplicationError("storage is down", non_retryable=True)
        return await begin_step(run_id, answer_id=answer_id, tool_ids=tool_ids)

    monkeypatch.setattr(api.storage, "begin_step", refused)
    monkeypatch.setattr(workflow_time_travel, "reset_to_task", stops_after(reset_to_task))
    with pytest.raises(ClientStopped):
        await workflow_time_travel.time_travel(api.keel, api.storage, run_id, "four", input_data={"step": 40})
    async with asyncio.timeout(30):
        assert await api.keel.temporal.get_workflow_handle(run_id).result() == {
            "one": 1,
            "two": 2,
            "three": 3,
            "four": 4,
        }
    assert ledger(data_dir)[4:] == ["tool 3", "tool 4"]
    history = await api.keel.temporal.get_workflow_handle(run_id).fetch_history()
    patches = [
        payload.data
        for e in history.events
        if e.marker_recorded_event_attributes.marker_name == "core_patch"
        for details in e.marker_recorded_event_attributes.details.values()
        for payload in details.payloads
    ]
    assert not any(RESET_ORIGIN_FAILED_PATCH.encode() in p for p in patches)
    await replays(history, (await api.keel.temporal.get_workflow_handle(run_id).describe()).run_id)


async def test_a_time_travel_async_whose_run_takes_longer_than_the_wait_answers_running_and_resets_once(
    api: Api, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `SETTLE_SECONDS` the answer is the run's state, `running`: a 5xx there was sent again by the client,
    a second time travel once the run had ended."""
    monkeypatch.setattr(workflows, "SETTLE_SECONDS", 0.5)
    monkeypatch.setattr(workflows, "STATE_SECONDS", 0.5)  # `pause` runs locally: the `state` query waits for it
    slow = {
        "id": "slow",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object"},
        "graph": [
            {"type": "mapping", "id": "m1", "mapConfig": json.dumps({"step": {"initData": True, "path": "first"}})},
            _tally("one"),
            {"type": "mapping", "id": "how", "mapConfig": json.dumps({"seconds": {"value": 2}})},
            {"type": "tool", "id": "wait", "toolId": "pause"},
        ],
    }
    await api.storage.save_definition("slow", slow)
    run_id = await Workflows(api.storage, app, api.keel).start("slow", {"first": 1})
    await api.keel.temporal.get_workflow_handle(run_id).result()  # ended: time travel takes ended runs
    out = await api.js("""
        const run = await client.getWorkflow("slow").createRun({runId: vars.runId});
        return await run.timeTravelAsync({step: "one", inputData: {step: 10}});
    """, runId=run_id)  # fmt: skip
    assert out["status"] == "running" and out["runId"] == run_id
    assert await api.keel.temporal.get_workflow_handle(run_id).result() == {"paused": 2}
    assert ledger(data_dir) == ["tool 1", "tool 10"]
    assert len([e async for e in api.keel.temporal.list_workflows(f"WorkflowId='{run_id}'")]) == 2


async def test_keel_workflows_reset_time_travels_from_the_command_line(
    api: Api, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    await api.storage.save_definition("ledger", LEDGER)
    run_id = (await Workflows(api.storage, app, api.keel).start_and_settle("ledger", {"first": 1})).run_id
    keel = Keel(dev_server, task_queue, tmp_path, data_dir)
    keel.env["KEEL_APP"] = "tests.http_api.apps:app"

    code, out, err = await keel("workflows", "reset", run_id, "--to-step", "four", "--input", '{"step": 40}')
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"run {run_id} reset to step four: new execution ")
    assert lines[0].endswith("stays in the run's history); three return what they returned before")
    assert lines[1] == f'run {run_id} succeeded: {{"one": 1, "two": 2, "three": 3, "four": 40}}'
    assert ledger(data_dir)[4:] == ["tool 40"]

    code, _, err = await keel("workflows", "reset", run_id, "--to-step", "nope")
    assert code == 2 and "Time travel target step not found in execution graph: 'nope'" in err
    code, _, err = await keel("workflows", "reset", run_id, "--to-step", "two", "--input", '{"step": "x"}')
    assert code == 2 and "Invalid inputData: " in err
    assert ledger(data_dir)[4:] == ["tool 40"]


FAN = {
    "id": "fan",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object"},
    "graph": [
        {"type": "mapping", "id": "m1", "mapConfig": json.dumps({"step": {"initData": True, "path": "first"}})},
        _tally("one"),
        {"type": "parallel", "steps": [_tally("p1"), _tally("p2")]},
        _number("m9", 9),
        _tally("last"),
    ],
}


async def test_a_step_in_parallel_runs_again_and_its_sibling_returns_what_it_did(api: Api, data_dir: Path) -> None:
    out = await api.js("""
        await client.upsertDynamicWorkflow(vars.fan);
        const run = await client.getWorkflow("fan").createRun();
        await run.startAsync({inputData: {first: 1}});
        return await run.timeTravelAsync({step: "p2", inputData: {step: 22}});
    """, fan=FAN)  # fmt: skip
    assert out["status"] == "success" and out["result"] == {"step": 9}
    assert out["steps"]["p1"]["output"] == {"step": 1} and out["steps"]["p2"]["output"] == {"step": 22}
    assert ledger(data_dir) == ["tool 1", "tool 1", "tool 1", "tool 9", "tool 22", "tool 9"]


async def test_a_foreach_step_is_not_time_travelled_with_resume_data_it_would_drop(api: Api) -> None:
    """Found from outside: resumeData goes to the call whose key is the step's id, and a foreach step's calls
    are keyed `id[i]`, so the reset went ahead and no item was given the data."""
    each = {
        "id": "each",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object"},
        "graph": [_number("m1", 1), {"type": "foreach", "id": "each", "step": _tally("t")}],
    }
    out = await api.js("""
        await client.upsertDynamicWorkflow(vars.each);
        const run = await client.getWorkflow("each").createRun();
        const ended = await run.startAsync({inputData: {}});
        try { return {ended, answered: await run.timeTravel({step: "t", resumeData: {ok: true}})}; }
        catch (e) { return {ended, runId: run.runId, status: e.status, body: e.body}; }
    """, each=each)  # fmt: skip
    assert out["ended"]["status"] == "failed"  # its input is not a list
    assert out["status"] == 400, out
    assert out["body"] == {
        "error": f"Cannot time travel run '{out['runId']}' to step 't' with resumeData: it is a foreach step, which "
        "runs once per item, and resumeData goes to one call. Time travel without it, then resume the item that "
        "suspends (step 't[i]')"
    }


async def test_a_failed_run_is_run_again_from_its_failed_step_with_a_corrected_input(api: Api, data_dir: Path) -> None:
    out = await api.js("""
        await client.upsertDynamicWorkflow(vars.ledger);
        const run = await client.getWorkflow("ledger").createRun();
        const failed = await run.startAsync({inputData: {first: "x"}});
        const recovered = await run.timeTravelAsync({step: "one", inputData: {step: 1}});
        return {failed, recovered};
    """, ledger=LEDGER)  # fmt: skip
    assert out["failed"]["status"] == "failed"  # `tally` refused {"step": "x"}
    assert out["recovered"]["status"] == "success"
    assert out["recovered"]["result"] == {"one": 1, "two": 2, "three": 3, "four": 4}
    assert ledger(data_dir) == ["tool 1", "tool 2", "tool 3", "tool 4"]


async def test_the_step_run_again_is_told_it_is_a_first_attempt(api: Api, data_dir: Path) -> None:
    """Keel counted the step's tool starts (its attempt numbers); the time travel forgets them for the step and
    later ones, so the tool is not told it may have run before (`nap` notes its attempt in naps.log)."""
    nap = {
        "id": "napping",
        "inputSchema": {"type": "object"},
        "outputSchema": {},
        "graph": [
            {
                "type": "mapping",
                "id": "how",
                "mapConfig": json.dumps({"label": {"value": "a"}, "seconds": {"value": 0}}),
            },
            {"type": "tool", "id": "nap", "toolId": "nap"},
        ],
    }
    out = await api.js("""
        await client.upsertDynamicWorkflow(vars.nap);
        const run = await client.getWorkflow("napping").createRun();
        await run.startAsync({inputData: {}});
        return await run.timeTravelAsync({step: "nap"});
    """, nap=nap)  # fmt: skip
    assert out["status"] == "success"
    naps = (data_dir / "naps.log").read_text().splitlines()
    assert naps == ["start a attempt=1", "done a", "start a attempt=1", "done a"]


async def asked_then_worker_killed(
    keel: KeelClient, storage: Storage, dev_server: DevServer, tmp_path: Path, data_dir: Path
) -> str:
    """A run of `ask` suspended at `human` by a worker process, then that worker killed with SIGKILL: no worker
    polls the run's queue (Temporal still remembers the dead one's last poll for minutes). The run's id."""
    await storage.save_definition("ask", ASK)
    app_ref = "tests.http_api.apps:app"
    with worker_subprocess(dev_server, keel.task_queue, tmp_path, data_dir, app=app_ref) as worker:
        run_id = (await Workflows(storage, app, keel).start_and_settle("ask", {"what": "v1"})).run_id
        worker.kill()
        worker.wait()
    return run_id


async def test_time_travel_with_no_worker_is_no_worker_at_once_and_a_503(
    client: Client, storage: Storage, task_queue: str, dev_server: DevServer, tmp_path: Path, data_dir: Path
) -> None:
    """Found from outside: with its worker gone, the HTTP time travel answered 500 ("no poller seen") after 29 s
    and `keel workflows reset` printed a traceback; the docs promise a 503 when no worker polls."""
    keel = KeelClient(client, task_queue=task_queue, app=app)
    run_id = await asked_then_worker_killed(keel, storage, dev_server, tmp_path, data_dir)
    began = time.monotonic()
    with pytest.raises(NoWorker, match=f"No worker is polling task queue '{task_queue}'"):
        await workflow_time_travel.time_travel(keel, storage, run_id, "human", resume_data={"answer": "x"})
    assert time.monotonic() - began < 10
    async with serving(create_api(app, keel, storage), "127.0.0.1", free_port()) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            answer = await http.post(
                "/api/workflows/ask/time-travel",
                params={"runId": run_id},
                json={"step": "human", "resumeData": {"answer": "x"}},
            )
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"].startswith(f"No worker is polling task queue '{task_queue}'")
    assert (await keel.describe(run_id)).status == "suspended"  # nothing was reset


async def test_a_run_time_travelled_twice_to_a_step_of_its_first_task_still_answers_where_its_steps_began(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """`ask` runs `q` and `human` in its first workflow task: each time travel to `human` resets the run to that
    task. The execution after the second one sees two resets there when it replays (queries included), and must
    count them as it did live: its `state` and `time_travel_point` queries answer, and it is time travelled
    again (the CLI's `keel workflows reset RUN --to-step out` said "Nondeterminism error: ... keel-time-travel-1")."""
    await storage.save_definition("ask", ASK)
    async with running_worker(client, app, storage, task_queue) as keel:
        workflows = Workflows(storage, app, keel)
        run_id = (await workflows.start_and_settle("ask", {"what": "v1"}, run_id="tt-4")).run_id
        await workflows.resume(run_id, "human", {"answer": "a"})
        handle = keel.temporal.get_workflow_handle(run_id)
        assert await handle.result() == {"answer": "a"}
        for answer in ("b", "c"):
            await workflow_time_travel.time_travel(keel, storage, run_id, "human", resume_data={"answer": answer})
            async with asyncio.timeout(30):
                assert await keel.temporal.get_workflow_handle(run_id).result() == {"answer": answer}
        state = await workflows.state(run_id)
        assert state.status == "success" and set(state.steps) == {"q", "human", "out"}

        await workflow_time_travel.time_travel(keel, storage, run_id, "out")
        async with asyncio.timeout(30):
            assert await keel.temporal.get_workflow_handle(run_id).result() == {"answer": "c"}
        await workflow_time_travel.time_travel(keel, storage, run_id, "q")  # `human` asks again
        settled = await workflows.settle(run_id, timeout=30)
        assert settled.state.status == "suspended" and settled.state.steps["human"].status == "suspended"
        executions = [e async for e in keel.temporal.list_workflows(f"WorkflowId='{run_id}'")]
        assert len(executions) == 5
        for execution in executions:
            history = await keel.temporal.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()
            await replays(history, execution.run_id)


async def test_a_workflow_run_id_in_use_is_refused_without_the_agents_thread_hint(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """Found from outside: a stored workflow's start under an open run's id said "pass thread_id to continue that
    run's conversation", which a workflow run does not have."""
    await storage.save_definition("ask", ASK)
    async with running_worker(client, app, storage, task_queue) as keel:
        workflows = Workflows(storage, app, keel)
        run_id = (await workflows.start_and_settle("ask", {"what": "v1"}, run_id=f"dup-{task_queue}")).run_id
        with pytest.raises(RunIdInUse) as refused:
            await workflows.start_and_settle("ask", {"what": "v2"}, run_id=run_id)
    assert str(refused.value) == f"Run id {run_id!r} is already used by another run: start with a new id"


async def test_a_closed_workflow_runs_id_is_refused_too_by_either_start(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """Found from outside: a start under the id of a run that had ended made a second execution of it, which then
    answered for the run (its result, and a second row in its listing)."""
    await storage.save_definition("ask", ASK)
    async with running_worker(client, app, storage, task_queue) as keel:
        workflows = Workflows(storage, app, keel)
        run_id = (await workflows.start_and_settle("ask", {"what": "v1"}, run_id=f"closed-{task_queue}")).run_id
        with pytest.raises(RunIdInUse):  # open: the async start refuses it as the waited one does
            await workflows.start("ask", {"what": "v2"}, run_id=run_id)
        await workflows.resume(run_id, "human", {"answer": "yes"})
        assert (await workflows.settle(run_id, timeout=30)).state.status == "success"
        with pytest.raises(RunIdInUse):
            await workflows.start_and_settle("ask", {"what": "v3"}, run_id=run_id)
        with pytest.raises(RunIdInUse):
            await workflows.start("ask", {"what": "v4"}, run_id=run_id)
        executions = [e async for e in keel.temporal.list_workflows(f"WorkflowId='{run_id}'")]
        assert len(executions) == 1
        assert (await workflows.settle(run_id)).state.steps["human"].output == {"answer": "yes"}


async def test_a_resume_with_no_worker_is_refused_at_once_and_never_applied_later(
    client: Client, storage: Storage, task_queue: str, dev_server: DevServer, tmp_path: Path, data_dir: Path
) -> None:
    """Found from outside: with no worker, a resume waited 30 s and answered 503, yet Temporal kept the update
    and the run took that resume data once a worker came back."""
    keel = KeelClient(client, task_queue=task_queue, app=app)
    workflows = Workflows(storage, app, keel)
    run_id = await asked_then_worker_killed(keel, storage, dev_server, tmp_path, data_dir)
    began = time.monotonic()
    with pytest.raises(NoWorker, match=f"No worker is polling task queue '{task_queue}'"):
        await workflows.resume(run_id, "human", {"answer": "too early"})
    assert time.monotonic() - began < 10
    async with running_worker(client, app, storage, task_queue):
        settled = await workflows.settle(run_id, timeout=30)
        assert settled.state.status == "suspended"  # the refused resume was not applied
        await workflows.resume(run_id, "human", {"answer": "now"})
        assert await client.get_workflow_handle(run_id).result() == {"answer": "now"}


async def test_a_runs_state_no_worker_answers_says_no_worker_not_that_the_server_did_not(
    client: Client, storage: Storage, task_queue: str, dev_server: DevServer, tmp_path: Path, data_dir: Path
) -> None:
    """Found from outside: `GET /api/workflows/:id/runs/:runId` with the run's worker gone answered 503 "The
    Temporal server did not answer: Timeout expired": the server answered; no worker did."""
    keel = KeelClient(client, task_queue=task_queue, app=app)
    workflows = Workflows(storage, app, keel)
    run_id = await asked_then_worker_killed(keel, storage, dev_server, tmp_path, data_dir)
    with pytest.raises(NoWorker, match=f"No worker is polling task queue '{task_queue}'"):
        await workflows.state(run_id)
