"""Workflows over HTTP with the real `@mastra/client-js`: code and stored workflows listed with their schemas,
runs created, started, resumed and listed, run counts, stored definitions saved, read, run and deleted. A run
started here is a Temporal execution of the definition's type."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from keel.client import KeelClient, workflows
from keel.client.api import create_api
from keel.client.api.server import serving
from keel.storage import Storage
from tests.conftest import free_port, running_worker
from tests.http_api.apps import app
from tests.http_api.conftest import Api

ASK = {
    "id": "approve",
    "description": "Ask a person before shipping.",
    "inputSchema": {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]},
    "outputSchema": {"type": "object"},
    "graph": [
        {"type": "mapping", "id": "q", "mapConfig": json.dumps({"question": {"template": "Ship ${initData.what}?"}})},
        {"type": "tool", "id": "human", "toolId": "ask-human"},
        {"type": "mapping", "id": "out", "mapConfig": json.dumps({"answer": {"step": "human", "path": "answer"}})},
    ],
}


async def test_stored_workflows_are_saved_listed_run_resumed_and_deleted(api: Api) -> None:
    out = await api.js(f"""
        const saved = await client.upsertDynamicWorkflow({json.dumps(ASK)});
        const stored = await client.listDynamicWorkflows();
        const details = await client.getDynamicWorkflow("approve").details();
        const listed = await client.listWorkflows();
        const wf = client.getWorkflow("approve");
        const run = await wf.createRun({{resourceId: "ann"}});
        const suspended = await run.startAsync({{inputData: {{what: "v1"}}, resourceId: "ann"}});
        const counts = await client.listWorkflowRunCounts();
        let badData;
        try {{ await run.resumeAsync({{step: "human", resumeData: {{answer: 1}}}}); }}
        catch (e) {{ badData = {{status: e.status, body: e.body}}; }}
        const done = await run.resumeAsync({{step: "human", resumeData: {{answer: "yes"}}}});
        let again;
        try {{ await run.resumeAsync({{step: "human", resumeData: {{answer: "no"}}}}); }}
        catch (e) {{ again = e.status; }}
        const runs = await wf.runs({{resourceId: "ann"}});
        const byId = await wf.runById(run.runId);
        let badInput;
        try {{ await (await wf.createRun()).startAsync({{inputData: {{what: 5}}}}); }}
        catch (e) {{ badInput = {{status: e.status, body: e.body}}; }}
        const deleted = await client.getDynamicWorkflow("approve").delete();
        const after = await client.listDynamicWorkflows();
        return {{saved, stored, details, listed, runId: run.runId, suspended, counts, badData, done, again, runs,
                 byId, badInput, deleted, after}};
    """)
    assert out["saved"] == {"ok": True, "id": "approve"}
    assert out["stored"]["total"] == 1 and out["stored"]["workflows"][0]["source"] == "storage"
    assert out["details"]["graph"][1]["toolId"] == "ask-human"
    listed = out["listed"]
    assert listed["approve"]["origin"] == "dynamic" and listed["release"]["origin"] == "code"
    assert json.loads(listed["approve"]["inputSchema"])["json"] == ASK["inputSchema"]
    assert out["suspended"]["status"] == "suspended"
    assert out["suspended"]["suspendPayload"] == {"human": {"question": "Ship v1?"}}
    assert out["counts"]["approve"] == {"running": 0, "suspended": 1}
    # Data that does not match the step's resume schema is the caller's mistake (422, as a session's), the run
    # still suspended; a resume of a step no longer suspended is the run's state (409)
    assert out["badData"]["status"] == 422, out["badData"]
    assert "Invalid resumeData for step 'human'" in out["badData"]["body"]["error"]
    assert out["done"]["status"] == "success" and out["done"]["result"] == {"answer": "yes"}
    assert out["again"] == 409
    assert [r["runId"] for r in out["runs"]["runs"]] == [out["runId"]]
    assert out["byId"]["status"] == "success" and out["byId"]["result"] == {"answer": "yes"}
    assert out["badInput"]["status"] == 400 and "Invalid input data" in out["badInput"]["body"]["error"]
    assert out["deleted"]["success"] is True and out["after"]["total"] == 0
    execution = await api.keel.temporal.get_workflow_handle(out["runId"]).describe()
    assert execution.workflow_type == "approve"


async def test_a_run_created_with_a_resource_id_keeps_it_however_it_is_started(api: Api) -> None:
    """client-js `createRun({resourceId})` names the resource once; `start` sends none (and `stream`,
    `startAsync` none unless given again): the run is still the resource's, as on Mastra's server."""
    out = await api.js("""
        const wf = client.getWorkflow("release");
        const started = await wf.createRun({resourceId: "bea"});
        await started.start({inputData: {n: 1}});
        const streamed = await wf.createRun({resourceId: "bea"});
        for await (const _ of await streamed.stream({inputData: {n: 2}})) {}
        const other = await wf.createRun({resourceId: "cy"});
        await other.startAsync({inputData: {n: 3}});
        const runs = await wf.runs({resourceId: "bea"});
        const byId = await wf.runById(started.runId);
        return {ids: [started.runId, streamed.runId], runs: runs.runs.map(r => r.runId).sort(),
                resourceId: byId.resourceId};
    """)
    assert out["runs"] == sorted(out["ids"])
    assert out["resourceId"] == "bea"


async def test_a_code_workflow_starts_streams_and_resumes(api: Api) -> None:
    out = await api.js("""
        const wf = client.getWorkflow("release");
        const details = await wf.details();
        const run = await wf.createRun();
        const stream = await run.stream({inputData: {n: 2}});
        const events = [];
        for await (const event of stream) events.push(event);
        const resumed = await run.resumeAsync({step: "approve", resumeData: {ok: true}});
        return {details, events, resumed};
    """)
    types = [e["type"] for e in out["events"]]
    assert types[0] == "workflow-start" and "workflow-step-suspended" in types and types[-1] == "workflow-finish"
    assert out["resumed"]["status"] == "success" and out["resumed"]["result"] == {"n": 4, "approved": True}


async def test_invalid_definitions_are_refused_with_every_error(api: Api) -> None:
    out = await api.js("""
        try {
            await client.upsertDynamicWorkflow({id: "bad", inputSchema: {}, outputSchema: {},
                graph: [{type: "tool", id: "t", toolId: "no-such-tool"}]});
        } catch (e) { return {status: e.status, body: e.body}; }
    """)
    assert out["status"] == 400
    assert out["body"]["details"][0]["path"] == "graph[0].toolId"


async def test_a_definition_id_temporal_cannot_take_is_refused_when_stored(api: Api) -> None:
    """A definition's id is its runs' workflow type (at most 1,000 bytes), inside their ids (`wf-<id>-<uuid>`) and
    indexed (`KeelWorkflowId`, at most 2 KB as escaped JSON: 171 emoji are 684 bytes, but 2,054 as JSON). Before,
    such a definition was stored, and each of its runs answered 500 "Internal error: RPCError: WorkflowType length
    exceeds limit."."""
    out = await api.js("""
        const tried = {};
        for (const [name, id] of [["long", "d".repeat(3000)], ["emoji", "\\u{1F600}".repeat(171)]]) {
            try {
                await client.upsertDynamicWorkflow({id, inputSchema: {type: "object"}, outputSchema: {type: "object"},
                    graph: [{type: "mapping", id: "m", mapConfig: JSON.stringify({x: {value: 1}})}]});
                tried[name] = {status: 200};
            } catch (e) { tried[name] = {status: e.status, body: e.body}; }
        }
        return tried;
    """)
    assert out["long"]["status"] == out["emoji"]["status"] == 400
    [long] = out["long"]["body"]["details"]
    assert long["path"] == "id" and "Temporal takes at most 1000 bytes" in long["message"]
    [emoji] = out["emoji"]["body"]["details"]
    assert emoji["path"] == "id" and "at most 2048 bytes" in emoji["message"]


SLOW_AFTER_ASK = {
    "id": "slow",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object"},
    "graph": [
        {"type": "tool", "id": "human", "toolId": "ask-human"},
        {"type": "mapping", "id": "how", "mapConfig": json.dumps({"seconds": {"value": 3}})},
        {"type": "tool", "id": "wait", "toolId": "pause"},
    ],
}


async def test_a_resume_async_whose_run_takes_longer_than_the_wait_answers_running_once(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer waits `SETTLE_SECONDS` for the run to end or suspend; a run still going answers `running`
    (not a 5xx, which the client would send again: a resume twice, the second one refused). `pause` runs as a
    local activity, so the run's `state` query waits for it: after `STATE_SECONDS`, Temporal's word is taken."""
    started = await api.js("""
        await client.upsertDynamicWorkflow(vars.slow);
        const run = await client.getWorkflow("slow").createRun();
        return {runId: run.runId, started: await run.startAsync({inputData: {question: "Go?"}})};
    """, slow=SLOW_AFTER_ASK)  # fmt: skip
    assert started["started"]["status"] == "suspended"
    monkeypatch.setattr(workflows, "SETTLE_SECONDS", 0.5)  # from here: the resume's wait, not the start's
    monkeypatch.setattr(workflows, "STATE_SECONDS", 0.5)
    out = await api.js("""
        const run = await client.getWorkflow("slow").createRun({runId: vars.runId});
        const resumed = await run.resumeAsync({step: "human", resumeData: {answer: "yes"}});
        return {runId: run.runId, resumed};
    """, runId=started["runId"])  # fmt: skip
    assert out["resumed"]["status"] == "running" and out["resumed"]["runId"] == out["runId"]
    handle = api.keel.temporal.get_workflow_handle(out["runId"])
    assert await handle.result() == {"paused": 3}
    updates = [
        e
        for e in (await handle.fetch_history()).events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    resumes = [
        u
        for u in updates
        if u.workflow_execution_update_accepted_event_attributes.accepted_request.input.name == "resume_step"
    ]
    assert len(resumes) == 1


SLOW_FROM_THE_START = {
    "id": "slowstart",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object"},
    "graph": [
        {"type": "mapping", "id": "how", "mapConfig": json.dumps({"seconds": {"value": 3}})},
        {"type": "tool", "id": "wait", "toolId": "pause"},
    ],
}


async def test_a_start_async_whose_run_takes_longer_than_the_wait_answers_running_and_starts_it_once(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As resume-async: past `SETTLE_SECONDS` the answer is the run's state, `running`, not a wait without end
    (nor a 5xx, after which the client would start the run again and be refused: it exists)."""
    monkeypatch.setattr(workflows, "SETTLE_SECONDS", 0.5)
    monkeypatch.setattr(workflows, "STATE_SECONDS", 0.5)
    out = await api.js("""
        await client.upsertDynamicWorkflow(vars.slow);
        const run = await client.getWorkflow("slowstart").createRun();
        const started = await run.startAsync({inputData: {}});
        return {runId: run.runId, started};
    """, slow=SLOW_FROM_THE_START)  # fmt: skip
    assert out["started"]["status"] == "running" and out["started"]["runId"] == out["runId"]
    handle = api.keel.temporal.get_workflow_handle(out["runId"])
    assert await handle.result() == {"paused": 3}
    history = (await handle.fetch_history()).events
    assert len([e for e in history if e.HasField("workflow_execution_started_event_attributes")]) == 1


PLAIN = {
    "id": "plain",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object"},
    "graph": [{"type": "mapping", "id": "out", "mapConfig": json.dumps({"done": {"value": True}})}],
}


async def test_observing_an_ended_run_from_past_its_last_event_ends_with_its_finish(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """A reader may hold more events than the run's history has: a live query can show events of a workflow task
    lost with its worker, then retried with fewer or other events. Its next observe is from past the end. Found
    by chaos run 64: such a stream of an ended run stayed open, polling for ever, and the client-js reader never
    ended. It now ends with the run's finish."""
    await storage.save_definition("plain", PLAIN)
    keel = KeelClient(client, task_queue=task_queue, app=app)
    async with running_worker(client, app, storage, task_queue):
        handle = await client.start_workflow("plain", {}, id=f"plain-{uuid.uuid4()}", task_queue=task_queue)
        assert await handle.result() == {"done": True}
        async with serving(create_api(app, keel, storage), "127.0.0.1", free_port()) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                response = await http.post(f"/api/workflows/plain/observe?runId={handle.id}&offset=1000")

    events = [json.loads(r) for r in response.text.split("\x1e") if r]
    assert [e["type"] for e in events] == ["workflow-finish"] and events[0]["payload"]["workflowStatus"] == "success"


async def test_observing_a_run_that_succeeded_never_says_it_failed_when_no_worker_answers_its_query(
    client: Client, storage: Storage, task_queue: str
) -> None:
    """Found by the chaos run: a query of an ended run failed (no worker could answer it, or one answered from a
    stale cache) and the stream said the run had failed. A stream of an ended run that cannot be read now ends
    without a finish, and a reader observing again once a worker answers gets the run's own events."""
    await storage.save_definition("plain", PLAIN)
    keel = KeelClient(client, task_queue=task_queue, app=app)
    async with running_worker(client, app, storage, task_queue):
        handle = await client.start_workflow("plain", {}, id=f"plain-{uuid.uuid4()}", task_queue=task_queue)
        assert await handle.result() == {"done": True}
    path = f"/api/workflows/plain/observe?runId={handle.id}"
    async with serving(create_api(app, keel, storage), "127.0.0.1", free_port()) as url:
        async with httpx.AsyncClient(base_url=url, timeout=90) as http:
            with contextlib.suppress(httpx.HTTPError):  # after ~30 s, the stream is cut: it cannot be read now
                response = await http.post(path)
                assert '"workflowStatus":"failed"' not in response.text
            async with running_worker(client, app, storage, task_queue):
                response = await http.post(path)

    events = [json.loads(r) for r in response.text.split("\x1e") if r]
    assert events[-1]["type"] == "workflow-finish" and events[-1]["payload"]["workflowStatus"] == "success"


async def test_runs_are_counted_past_the_page_and_dates_without_an_offset_are_utc(api: Api) -> None:
    """client-js pages runs by `total`: before, it was the page's end (offset + its length), so a page of 1 of 3
    runs said 1 (and a page past the end its offset), and each run's `resourceId` was null; a date without an
    offset (JavaScript's `toISOString` minus its `Z`, a common hand-written one) compared against stored times
    answered 500, in a run list and a thread clone's filter."""
    resource = f"dates-{uuid.uuid4().hex[:6]}"
    out = await api.js(f"""
        const wf = client.getWorkflow("release");
        for (const n of [1, 2, 3]) {{
            const run = await wf.createRun({{resourceId: "{resource}"}});
            await run.start({{inputData: {{n}}}});
        }}
        let page;
        for (let i = 0; i < 100; i++) {{  // visibility lags a moment behind the starts
            page = await wf.runs({{resourceId: "{resource}", perPage: 1, page: 0}});
            if (page.total === 3) break;
            await new Promise(r => setTimeout(r, 200));
        }}
        const past = await wf.runs({{resourceId: "{resource}", perPage: 5, page: 50}});
        return {{total: page.total, shown: page.runs.length, resourceId: page.runs[0].resourceId,
                 pastTotal: past.total, pastShown: past.runs.length}};
    """)
    assert out == {"total": 3, "shown": 1, "resourceId": resource, "pastTotal": 3, "pastShown": 0}
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        naive = {"fromDate": "2020-01-01T00:00:00", "toDate": "2999-01-01T00:00:00", "resourceId": resource}
        listed = await http.get("/api/workflows/release/runs", params=naive)
        assert listed.status_code == 200 and listed.json()["total"] == 3, listed.text
        thread = f"t-{resource}"
        await http.post("/api/memory/threads", json={"resourceId": resource, "threadId": thread})
        await http.post(f"/api/memory/threads/{thread}/messages", json={"messages": [{"role": "user", "content": "a"}]})
        chosen = {"startDate": "2020-01-01T00:00:00", "endDate": "2999-01-01T00:00:00.000"}
        body = {"newThreadId": f"{thread}-copy", "options": {"messageFilter": chosen}}
        clone = await http.post(f"/api/memory/threads/{thread}/clone", json=body)
        assert clone.status_code == 200 and len(clone.json()["clonedMessages"]) == 1, clone.text
        early = {"newThreadId": f"{thread}-none", "options": {"messageFilter": {"endDate": "2020-01-01T00:00:00"}}}
        clone = await http.post(f"/api/memory/threads/{thread}/clone", json=early)
        assert clone.status_code == 200 and clone.json()["clonedMessages"] == [], clone.text


NAPPING = {
    "id": "napping",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object"},
    "graph": [{"type": "sleep", "id": "nap", "duration": 600_000}],
}


async def test_a_start_async_waiting_on_a_run_that_is_canceled_answers_canceled(api: Api) -> None:
    """Found from outside: the answer said `failed` (error "failed") while the run reads `canceled`; and (found
    in review) its stream had no finish, so an observe of it polled for good."""
    run_id = f"napping-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=api.url, timeout=60) as http:
        assert (await http.post("/api/stored/workflows", json=NAPPING)).status_code == 200
        waiting = asyncio.ensure_future(
            http.post("/api/workflows/napping/start-async", params={"runId": run_id}, json={"inputData": {}})
        )
        handle = api.keel.temporal.get_workflow_handle(run_id)
        async with asyncio.timeout(20):
            while True:
                with contextlib.suppress(RPCError):
                    await handle.describe()
                    break
                await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        await handle.cancel()
        answered = await asyncio.wait_for(waiting, 30)
        run = await http.get(f"/api/workflows/napping/runs/{run_id}")
        observed = await asyncio.wait_for(http.post("/api/workflows/napping/observe", params={"runId": run_id}), 20)
    events = [json.loads(r) for r in observed.text.split("\x1e") if r]  # before: no finish, and it polled for good
    assert (events[-1]["type"], events[-1]["payload"]["workflowStatus"]) == ("workflow-finish", "canceled")
    assert answered.status_code == 200 and answered.json()["status"] == "canceled", answered.text
    assert "error" not in answered.json()
    assert run.json()["status"] == "canceled"


async def test_observing_a_run_gives_its_every_event_once_through_its_suspensions(api: Api) -> None:
    """Found from outside: `observe()` of a run that suspended and then ended gave the events up to its first
    suspension only (client-js: "If omitted, replays all events"), and an observe from its end gave its finish
    again, which the reader had."""
    ask = {**ASK, "id": f"observed-{uuid.uuid4().hex[:6]}"}
    out = await api.js(f"""
        const drain = async (stream) => {{
            const seen = []; const reader = stream.getReader();
            for (;;) {{ const {{done, value}} = await reader.read(); if (done) return seen; seen.push(value.type); }}
        }};
        await client.upsertDynamicWorkflow({json.dumps(ask)});
        const run = await client.getWorkflow("{ask["id"]}").createRun();
        const live = await drain(await run.stream({{inputData: {{what: "v1"}}}}));
        live.push(...await drain(await run.resumeStream({{step: "human", resumeData: {{answer: "yes"}}}})));
        const whole = await drain(await run.observe());
        const fromEnd = await drain(await run.observe({{offset: live.length}}));
        return {{live, whole, fromEnd}};
    """)
    assert out["whole"] == out["live"] and out["fromEnd"] == []
    assert [t for t in out["whole"] if t == "workflow-finish"] == ["workflow-finish"] * 2  # suspended, then ended
