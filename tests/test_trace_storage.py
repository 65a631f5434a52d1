"""The storage exporter (`OTEL_TRACES_EXPORTER=keel`): a run's spans kept in Keel's storage (SQLite and PostgreSQL),
bounded by age and count, with no secret in them; read back by the unmodified `@mastra/client-js` 1.47 through
Mastra's observability routes, by the legacy telemetry routes, and by `keel trace RUN`.

In-process tests share the process's one tracer provider with tests/test_tracing.py, and route its spans to a
storage exporter through `KEPT` while they run. One test runs it all as a user would: a worker and the `keel`
commands in processes of their own, each writing its spans to the storage `KEEL_STORAGE_URL` names.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from temporalio.client import Client

from keel.app.demo import app as demo_app
from keel.client import KeelClient
from keel.client.api import create_api
from keel.client.api.server import serving
from keel.client.connection import connect
from keel.client.devserver import DevServer
from keel.client.span_exporter import StorageSpanExporter
from keel.client.trace_cli import render
from keel.protocol import tracing
from keel.storage import (
    LogQuery,
    SpanQuery,
    SpanRetention,
    SQLiteStorage,
    Storage,
    StoredLog,
    StoredSpan,
    TimeRange,
    open_storage,
)
from tests import test_tracing
from tests.conftest import ROOT, free_port, npm_installed, running_worker, worker_subprocess
from tests.http_api.conftest import JS, Api
from tests.test_agent_run import wait_for_pending
from tests.test_cli_imports import KEEL_NOT_FOR_CLIENT_COMMANDS, LIBRARIES_RUN_ONLY, imported, loaded, plain_env

API_KEY = "sk-planted-7d2e41c9a05b4f18be63"


class Kept(SpanProcessor):
    """Added once to the process's tracer provider: hands each finished span to `target` while a test sets one."""

    target: SpanProcessor | None = None
    installed = False

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self.target is not None:
            self.target.on_end(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


KEPT = Kept()


def sqlite_url(storage: Storage) -> str:
    assert isinstance(storage, SQLiteStorage)
    return f"sqlite:///{storage.path}"


@pytest.fixture
def kept(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> Iterator[StorageSpanExporter]:
    """Tracing on in this process (`OTEL_TRACES_EXPORTER=keel`): its spans, redacted, go to `storage`."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(test_tracing._PROVIDER)  # the one provider a process may set: theirs
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    if not KEPT.installed:
        provider.add_span_processor(KEPT)
        KEPT.installed = True
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "keel")
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    exporter = StorageSpanExporter(sqlite_url(storage))
    KEPT.target = SimpleSpanProcessor(tracing.redacting(exporter))
    try:
        yield exporter
    finally:
        KEPT.target = None
        exporter.shutdown()


@dataclass
class TracedRun:
    run_id: str
    call_id: str
    keel: KeelClient


@pytest.fixture
async def traced_run(
    client: Client,
    dev_server: DevServer,
    storage: Storage,
    task_queue: str,
    kept: StorageSpanExporter,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[TracedRun]:
    """A demo run approved, traced with content capture on, a key planted in the settings and in the prompt."""
    monkeypatch.setenv(tracing.CAPTURE_CONTENT, "true")
    monkeypatch.setenv("MY_SERVICE_API_KEY", API_KEY)
    traced_client = await connect(dev_server.cfg.address)
    async with running_worker(traced_client, demo_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", f"remember the milk, and the key {API_KEY}")
        # The observer polls through a client that does not trace: its queries would be traces of their own.
        [call_id] = await wait_for_pending(KeelClient(client, task_queue=task_queue), run_id)
        await keel.approve(run_id, call_id)
        assert (await keel.result(run_id)).finish_reason == "stop"
        yield TracedRun(run_id, call_id, keel)


def spans_table(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return json.dumps(db.execute("SELECT * FROM spans").fetchall())


def named(spans: list[StoredSpan], name: str) -> list[StoredSpan]:
    return [s for s in spans if s.name == name]


# --- in process ------------------------------------------------------------------------------------------------


async def test_an_approved_demo_run_keeps_one_trace_in_storage_its_tree_printed_and_no_secret(
    traced_run: TracedRun, storage: Storage
) -> None:
    [trace_id] = await storage.run_traces(traced_run.run_id)
    spans = await storage.trace_spans(trace_id)
    by_id = {s.span_id: s for s in spans}
    [root] = [s for s in spans if s.parent_span_id not in by_id]
    assert (root.name, root.span_type, root.kind) == ("StartWorkflow:AgentRun", "agent_run", "client")
    # Only the model and tool calls name their agent: every span of the run gets it, the root included.
    assert {(s.entity_type, s.entity_id) for s in spans if s.span_type != "tool_call"} == {("agent", "demo")}
    assert {s.run_id for s in spans} == {traced_run.run_id}

    first, last = sorted(named(spans, "chat demo"), key=lambda s: s.started_at)
    assert first.span_type == "model_generation" and first.attributes["gen_ai.response.finish_reasons"] == [
        "tool_calls"
    ]
    assert all(c.attributes["gen_ai.usage.input_tokens"] > 0 for c in (first, last))
    [tool] = named(spans, "execute_tool save_note")
    assert (tool.span_type, tool.entity_type, tool.entity_id) == ("tool_call", "tool", "save_note")
    assert tool.attributes["gen_ai.tool.call.id"] == traced_run.call_id
    assert by_id[tool.parent_span_id or ""].name == "RunActivity:keel.tools_then_model"
    [approval] = named(spans, "StartWorkflowUpdate:approve_tool_call")
    assert approval.span_type == "workflow_wait_event" and approval.parent_span_id == root.span_id

    # The key was in the prompt, so in the captured messages and the tool's arguments: redacted before storing.
    assert f"the key {tracing.REDACTED}" in json.dumps(tool.attributes["gen_ai.tool.call.arguments"])
    assert isinstance(storage, SQLiteStorage)
    assert API_KEY not in spans_table(storage.path)

    printed = render(trace_id, spans)
    lines = printed.splitlines()
    assert lines[0].startswith(f"trace {trace_id}  {len(spans)} spans")
    assert f"run {traced_run.run_id}" in lines[0] and "agent demo" in lines[0]
    assert "2 model calls, tokens" in lines[0] and "1 tool calls" in lines[0]
    assert lines[1].startswith("StartWorkflow:AgentRun  ")
    [tool_line] = [line for line in lines if "execute_tool save_note" in line]
    assert f"call {traced_run.call_id}" in tool_line and '-> {"path": ' in tool_line
    assert "-- execute_tool save_note" in tool_line
    [chat_line, _] = [line for line in lines if "chat demo" in line]
    assert f"tokens {first.attributes['gen_ai.usage.input_tokens']} in / " in chat_line
    assert "finish tool_calls" in chat_line


async def test_mastras_client_lists_and_reads_the_traces_in_mastras_shapes(
    traced_run: TracedRun, storage: Storage, client_js: Path
) -> None:
    async with serving(create_api(demo_app, traced_run.keel, storage), "127.0.0.1", free_port()) as url:
        api = Api(url, traced_run.keel, storage)
        found = await api.js(
            """
            const hour = 3600 * 1000;
            const listed = await client.listTraces({
              filters: { entityType: "agent", entityId: "demo" },
              pagination: { page: 0, perPage: 5 },
              orderBy: { field: "startedAt", direction: "DESC" },
            });
            const traceId = listed.spans[0].traceId;
            const full = await client.getTrace(traceId);
            const tool = full.spans.find((s) => s.spanType === "tool_call");
            const chat = full.spans.find((s) => s.spanType === "model_generation");
            let missing;
            try { await client.getTrace("0".repeat(32)); } catch (e) { missing = [e.status, e.body]; }
            let tooMany;
            try { await client.listTraces({ pagination: { perPage: 500 } }); } catch (e) { tooMany = e.status; }
            return {
              listed,
              full,
              light: await client.getTraceLight(traceId),
              lightList: await client.listTracesLight({ filters: { runId: vars.runId } }),
              span: await client.getSpan(traceId, tool.spanId),
              chat: await client.getSpan(traceId, chat.spanId),
              legacy: await client.getTraces({ filters: { name: "agent run: 'demo'" }, pagination: { page: 0 } }),
              nobody: await client.listTraces({ filters: { entityId: "nobody", entityType: "agent" } }),
              byUser: await client.listTraces({ filters: { userId: "ann" } }),
              recent: await client.listTraces({ filters: { startedAt: { start: new Date(Date.now() - hour) } } }),
              future: await client.listTraces({ filters: { startedAt: { start: new Date(Date.now() + hour) } } }),
              failed: await client.listTraces({ filters: { status: "error" } }),
              missing,
              tooMany,
            };
            """,
            runId=traced_run.run_id,
        )
        telemetry = await api.js(
            """
            const get = async (path) => (await fetch(`${vars.url}/api${path}`)).json();
            return {
              all: await get("/telemetry?perPage=100&attribute=gen_ai.tool.name:save_note"),
              traces: await get("/telemetry/traces"),
              one: await get(`/telemetry/traces/${vars.traceId}`),
            };
            """,
            url=url,
            traceId=found["listed"]["spans"][0]["traceId"],
        )

    listed = found["listed"]
    assert listed["pagination"] == {"total": 1, "page": 0, "perPage": 5, "hasMore": False}
    [root] = listed["spans"]
    assert root["name"] == "StartWorkflow:AgentRun" and root["spanType"] == "agent_run"
    assert (root["entityType"], root["entityId"], root["runId"], root["status"]) == (
        "agent", "demo", traced_run.run_id, "success",
    )  # fmt: skip
    assert root["parentSpanId"] is None and root["isEvent"] is False
    started, ended = (datetime.fromisoformat(root[k]) for k in ("startedAt", "endedAt"))
    assert root["startedAt"].endswith("Z") and started <= ended
    for shown in (found["recent"], found["legacy"]):
        assert [s["spanId"] for s in shown["spans"]] == [root["spanId"]]
    for empty in ("nobody", "byUser", "future", "failed"):
        assert found[empty]["spans"] == [] and found[empty]["pagination"]["total"] == 0, empty
    assert found["missing"] == [404, {"error": f"Trace with ID '{'0' * 32}' not found"}]
    assert found["tooMany"] == 400

    full = found["full"]
    assert full["traceId"] == root["traceId"] and full["spans"][0]["spanId"] == root["spanId"]
    assert all(s["status"] == "success" for s in full["spans"])
    ids = {s["spanId"] for s in full["spans"]}
    assert all(s["parentSpanId"] in ids for s in full["spans"][1:])
    types = {s["name"]: s["spanType"] for s in full["spans"]}
    assert types["RunActivity:keel.model_step"] == "workflow_step"
    assert types["HandleUpdate:approve_tool_call"] == "workflow_wait_event"
    assert types["chat demo"] == "model_generation"

    span = found["span"]["span"]
    assert (span["name"], span["entityType"], span["entityId"]) == ("execute_tool save_note", "tool", "save_note")
    assert (span["parentEntityType"], span["parentEntityId"], span["rootEntityId"]) == ("agent", "demo", "demo")
    assert span["input"]["title"] == "demo" and span["input"]["text"].endswith(f"the key {tracing.REDACTED}")
    assert set(span["output"]) == {"path", "bytes", "sha256"} and span["error"] is None
    assert span["attributes"]["success"] is True and span["attributes"]["gen_ai.tool.call.id"] == traced_run.call_id
    assert "gen_ai.tool.call.arguments" not in span["attributes"]  # content is the input, not an attribute

    chat = found["chat"]["span"]
    usage = chat["attributes"]["usage"]
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"] > 0
    assert (chat["attributes"]["model"], chat["attributes"]["provider"]) == ("demo", "scripted")
    assert chat["attributes"]["finishReason"] == "tool_calls"
    [user] = [m for m in chat["input"]["messages"] if m["role"] == "user"]
    assert user["content"] == f"remember the milk, and the key {tracing.REDACTED}"
    assert chat["output"]["toolCalls"][0]["toolName"] == "save_note"

    light = found["light"]
    assert [s["spanId"] for s in light["spans"]] == [s["spanId"] for s in full["spans"]]
    assert not any({"attributes", "input", "output"} & set(s) for s in light["spans"])
    [row] = found["lightList"]["spans"]
    assert row["spanId"] == root["spanId"] and row["status"] == "success" and "inputPreview" in row

    rows = telemetry["all"]["traces"]
    assert [r["name"] for r in rows] == ["execute_tool save_note"]
    assert rows[0]["kind"] == 0 and rows[0]["status"] == {"code": 0} and rows[0]["startTime"] < rows[0]["endTime"]
    assert [r["id"] for r in telemetry["traces"]["traces"]] == [root["spanId"]]
    assert len(telemetry["one"]["spans"]) == len(full["spans"])
    assert API_KEY not in json.dumps([found, telemetry])


async def test_the_keel_exporter_is_built_from_the_name_in_otel_traces_exporter(
    store: Storage, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEL_STORAGE_URL", store_url)
    monkeypatch.setenv("MY_SERVICE_API_KEY", API_KEY)
    provider = tracing.build_provider(["keel"])
    with provider.get_tracer("t").start_as_current_span("outer") as outer:
        outer.set_attribute("keel.run.id", "run-named")
        with provider.get_tracer("t").start_as_current_span("inner") as inner:
            inner.set_status(trace.Status(trace.StatusCode.ERROR, f"401: bad key {API_KEY}"))
    await asyncio.to_thread(provider.shutdown)  # the batch exported, the exporter's own connection closed
    [trace_id] = await store.run_traces("run-named")
    inner_span, outer_span = sorted(await store.trace_spans(trace_id), key=lambda s: s.name)
    assert outer_span.service_name == tracing.DEFAULT_SERVICE_NAME and outer_span.scope == "t"
    assert (inner_span.status, inner_span.status_message) == ("error", f"401: bad key {tracing.REDACTED}")
    listed, total = await store.list_spans(SpanQuery(roots_only=True, has_child_error=True))
    assert ([s.name for s in listed], total) == (["outer"], 1)


async def test_the_observability_routes_refuse_what_they_cannot_answer(
    storage: Storage, client: Client, task_queue: str
) -> None:
    import httpx

    keel = KeelClient(client, task_queue=task_queue)
    async with (
        serving(create_api(demo_app, keel, storage), "127.0.0.1", free_port()) as url,
        httpx.AsyncClient(base_url=f"{url}/api") as http,
    ):
        assert (await http.get("/observability/traces", params={"mode": "delta"})).status_code == 501
        bad = await http.get("/observability/traces", params={"startedAt": "yesterday"})
        assert bad.status_code == 400 and "startedAt must be JSON" in bad.json()["error"]
        assert (await http.get("/observability/traces", params={"spanType": "nap"})).status_code == 400
        assert (await http.get("/observability/traces/abc/spans/def")).json() == {"error": "Span not found"}
        assert (await http.get("/telemetry", params={"attribute": "no-colon"})).status_code == 400
        assert (await http.get("/telemetry", params={"attribute": 'a"b.c:1'})).json() == {"traces": []}
        year_one = json.dumps({"start": "0001-01-01T00:00:00+01:00"})
        assert (await http.get("/observability/traces", params={"startedAt": year_one})).status_code == 400
        await storage.save_spans([span("t1", "s1"), span("t2", "s2")])
        listed = (await http.get("/observability/traces", params={"field": "endedAt", "direction": "ASC"})).json()
        assert [s["traceId"] for s in listed["spans"]] == ["t1", "t2"]
        deleted = await http.post("/observability/traces/delete", json={"traceIds": ["t1"]})
        assert deleted.json() == {"success": True}
        assert [s["traceId"] for s in (await http.get("/observability/traces")).json()["spans"]] == ["t2"]
        # A trace id in upper case is the same trace (OpenTelemetry writes lower case); a long one is not echoed.
        await storage.save_spans([span("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")])
        upper = await http.get("/observability/traces/4BF92F3577B34DA6A3CE929D0E0E4736")
        assert upper.status_code == 200 and len(upper.json()["spans"]) == 1
        assert (
            await http.get("/observability/traces/4BF92F3577B34DA6A3CE929D0E0E4736/spans/00F067AA0BA902B7")
        ).is_success
        listed = await http.get("/observability/traces", params={"traceId": "4BF92F3577B34DA6A3CE929D0E0E4736"})
        assert listed.json()["pagination"]["total"] == 1
        await http.post("/observability/traces/delete", json={"traceIds": ["4BF92F3577B34DA6A3CE929D0E0E4736"]})
        assert (await http.get("/observability/traces/4bf92f3577b34da6a3ce929d0e0e4736")).status_code == 404
        long = await http.get(f"/observability/traces/{'a' * 20_000}")
        assert long.status_code == 404 and len(long.text) < 200


# --- the storage, both backends --------------------------------------------------------------------------------

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def span(trace_id: str, span_id: str, parent: str | None = None, at: float = 0, **fields: Any) -> StoredSpan:
    """A span of one millisecond, started `at` seconds after T0."""
    start = T0 + timedelta(seconds=at)
    return StoredSpan(trace_id, span_id, f"span {span_id}", start, start + timedelta(milliseconds=1), parent, **fields)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Storage]:
    found = open_storage(store_url)
    await found.init()
    try:
        yield found
    finally:
        await found.close()


async def roots(store: Storage, **query: Any) -> list[str]:
    listed, total = await store.list_spans(SpanQuery(roots_only=True, **query), per_page=100)
    assert total == len(listed)
    return [s.span_id for s in listed]


async def test_a_trace_is_headed_by_its_earliest_span_whose_parent_is_not_stored(store: Storage) -> None:
    # The worker's spans arrive first; their parent, the client's, later (or never: then they head the trace).
    await store.save_spans([span("t", "run", parent="start", at=1), span("t", "step", parent="run", at=2)])
    assert await roots(store) == ["run"]
    await store.save_spans([span("t", "start", at=0), span("u", "other", at=5)])
    assert await roots(store) == ["other", "start"]
    assert await roots(store, descending=False) == ["start", "other"]
    await store.save_spans([replace(span("t", "start", at=0), name="again")])  # the same span again: kept as it was
    assert [s.name for s in await store.trace_spans("t")] == ["span start", "span run", "span step"]
    step = await store.get_span("t", "step")
    assert step is not None and replace(step, created_at=None) == span("t", "step", parent="run", at=2)


async def test_a_trace_started_over_http_is_headed_by_its_run_and_found_by_it(store: Storage) -> None:
    """A run started over HTTP: the request's span is the trace's root, its run's span under it. Mastra's lists
    give a trace by its head, the agent run, and filter on it: with the request's span at the head, a run
    started from client-js was found by none of the run, agent or span-type filters."""
    agent = {"entity_type": "agent", "entity_id": "demo", "entity_name": "demo"}
    await store.save_spans([
        span("h", "http", at=0),
        span("h", "start", "http", at=1, span_type="agent_run", run_id="r1"),
        span("h", "chat", "start", at=2, span_type="model_generation", run_id="r1", **agent),
        span("g", "plain", at=3),  # a request that started no run: headed by its own span
    ])  # fmt: skip
    assert await roots(store, descending=False) == ["start", "plain"]
    assert await roots(store, run_id="r1") == ["start"]
    assert await roots(store, span_type="agent_run", entity_type="agent", entity_id="demo") == ["start"]
    assert await roots(store, span_type="generic") == ["plain"]


async def test_deleting_traces_deletes_their_spans_and_their_log_records(store: Storage) -> None:
    """client-js documents `deleteTraces` as cascading to what references the traces, logs among them: their
    records were left behind."""
    await store.save_spans([span("gone", "a", at=0), span("kept", "b", at=1)])
    at = T0 + timedelta(seconds=2)
    await store.save_logs([StoredLog(at, "info", "of gone", "keel.tests", trace_id="gone"),
                           StoredLog(at, "info", "of kept", "keel.tests", trace_id="kept"),
                           StoredLog(at, "info", "of none", "keel.tests")])  # fmt: skip
    assert await store.delete_traces(["gone", "unknown"]) == 1
    assert await store.trace_spans("gone") == [] and len(await store.trace_spans("kept")) == 1
    left, _ = await store.list_logs(LogQuery())
    assert sorted(log.message for log in left) == ["of kept", "of none"]


async def test_a_runs_spans_get_its_agent_whichever_arrives_first(store: Storage) -> None:
    agent = {"entity_type": "agent", "entity_id": "demo", "entity_name": "demo", "thread_id": "th-1"}
    await store.save_spans([span("t", "root", at=0, run_id="r1"), span("t", "act", "root", at=1, run_id="r1")])
    await store.save_spans([span("t", "chat", "act", at=2, run_id="r1", **agent)])
    await store.save_spans([span("t", "done", "root", at=3, run_id="r1"), span("t", "tool", "act", at=4, run_id="r1",
                            entity_type="tool", entity_id="save_note")])  # fmt: skip
    found = {s.span_id: (s.entity_type, s.entity_id, s.thread_id) for s in await store.trace_spans("t")}
    assert found == {
        "root": ("agent", "demo", "th-1"), "act": ("agent", "demo", "th-1"), "chat": ("agent", "demo", "th-1"),
        "done": ("agent", "demo", "th-1"), "tool": ("tool", "save_note", None),
    }  # fmt: skip
    assert await roots(store, entity_type="agent", entity_id="demo") == ["root"]
    assert await roots(store, entity_id="other") == []
    assert await store.run_traces("r1") == ["t"] and await store.run_traces("r2") == []


async def test_spans_are_found_by_time_status_name_scope_and_attribute(store: Storage) -> None:
    await store.save_spans([
        span("a", "a1", at=0, scope="keel", attributes={"gen_ai.tool.name": "ship", "n": 3}),
        span("a", "a2", "a1", at=1, status="error", status_message="boom"),
        span("b", "b1", at=10, scope="temporal"),
    ])  # fmt: skip
    later = TimeRange(start=T0 + timedelta(seconds=10))
    assert await roots(store, started=later) == ["b1"]
    assert await roots(store, started=replace(later, start_exclusive=True)) == []
    assert await roots(store, ended=TimeRange(end=T0 + timedelta(seconds=5))) == ["a1"]
    assert await roots(store, has_child_error=True) == ["a1"]
    assert await roots(store, has_child_error=False) == ["b1"]
    assert await roots(store, status="success") == ["b1", "a1"]
    assert await roots(store, status="running") == [] and await roots(store, matches_nothing=True) == []
    listed, _ = await store.list_spans(SpanQuery(status="error"))
    assert [s.span_id for s in listed] == ["a2"]
    assert await roots(store, scope="keel", attributes={"gen_ai.tool.name": "ship"}) == ["a1"]
    assert await roots(store, attributes={"n": "3"}) == ["a1"]
    listed, total = await store.list_spans(SpanQuery(name_prefix="span a"), page=1, per_page=1)
    assert ([s.span_id for s in listed], total) == (["a1"], 2)
    assert await store.list_spans(SpanQuery(name_prefix="span_%"), per_page=5) == ([], 0)  # LIKE's wildcards escaped
    assert await store.delete_traces(["a", "nope"]) == 2
    assert await roots(store) == ["b1"]


async def test_a_write_prunes_whole_traces_the_oldest_first_beyond_the_count_a_batch_at_a_time(
    store: Storage,
) -> None:
    """Pruning by count takes the traces of the oldest spans whole: cut at its oldest spans, a trace had lost its
    head (the run) and its first steps, and was listed by an orphan step (`keel trace` counted what was left)."""
    retention = SpanRetention(max_age=timedelta(days=365 * 100), max_spans=9, batch=3)
    # Four traces of a root and its child (s0 <- s1, s2 <- s3, ...), then six traces of one span.
    await store.save_spans([span(f"t{i // 2}", f"s{i}", f"s{i - 1}" if i % 2 else None, at=i) for i in range(8)])
    # 14 spans: the oldest three beyond the count (s0, s1, s2) are of t0 and t1, which go whole (4 spans).
    assert await store.save_spans([span(f"n{i}", f"n{i}", at=20 + i) for i in range(6)], retention=retention) == 4
    assert await roots(store, descending=False) == ["s4", "s6", "n0", "n1", "n2", "n3", "n4", "n5"]
    assert (await store.list_spans(SpanQuery()))[1] == 10
    assert await store.save_spans([], retention=retention) == 2  # t2 (s4, s5)
    assert await roots(store, descending=False) == ["s6", "n0", "n1", "n2", "n3", "n4", "n5"]
    assert (await store.list_spans(SpanQuery()))[1] == 8
    assert await store.save_spans([], retention=retention) == 0
    for trace_id in ("t3", "n0"):  # what is kept is whole
        kept = await store.trace_spans(trace_id)
        assert all(s.parent_span_id is None or s.parent_span_id in {p.span_id for p in kept} for s in kept)


async def test_a_write_prunes_the_traces_older_than_the_retention(store: Storage) -> None:
    """A trace goes once its every span is older than the retention: one still growing is kept whole."""
    now = datetime.now(UTC)
    old = [replace(span(f"old{i}", f"o{i}", at=i), started_at=now - timedelta(hours=80 - i)) for i in range(3)]
    fresh = replace(span("new", "f0"), started_at=now - timedelta(hours=1), ended_at=now)
    growing = [replace(span("long", "l0"), started_at=now - timedelta(hours=90)),
               replace(span("long", "l1", "l0"), started_at=now - timedelta(minutes=5))]  # fmt: skip
    await store.save_spans([*old, fresh, *growing])
    retention = SpanRetention(max_age=timedelta(hours=72), batch=2)
    # A write looks at the traces of the oldest two expired spans (l0's trace is still growing: kept).
    assert [await store.save_spans([], retention=retention) for _ in range(4)] == [1, 1, 1, 0]
    assert await roots(store) == ["f0", "l0"]


# --- across processes ------------------------------------------------------------------------------------------


async def keel_command(env: dict[str, str], *args: str, code: int = 0) -> tuple[str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keel.cli", *args, env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == code, err.decode()
    return out.decode(), err.decode()


async def test_with_otel_traces_exporter_keel_a_worker_and_the_commands_keep_one_trace_keel_trace_prints(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'keel.db'}"
    otel = {"OTEL_TRACES_EXPORTER": "keel", "OTEL_BSP_SCHEDULE_DELAY": "200", "MY_SERVICE_API_KEY": API_KEY}
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    commands = {**base, **otel, "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address, "KEEL_TASK_QUEUE": task_queue,
                "KEEL_STORAGE_URL": url, "KEEL_DATA_DIR": str(data_dir)}  # fmt: skip
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, app="keel.app.demo:app", env=otel) as worker:
        keel = KeelClient(client, task_queue=task_queue)
        await keel.wait_for_worker(30)
        run_id = f"run-kept-{task_queue}"
        await keel_command(commands, "run", "demo", f"note {API_KEY}", "--run-id", run_id, "--no-follow",
                           "--app", "keel.app.demo:app")  # fmt: skip
        [call_id] = await wait_for_pending(keel, run_id)
        await keel_command(commands, "approve", run_id, call_id, "--no-follow")
        await keel.result(run_id)
        worker.send_signal(signal.SIGTERM)  # a clean stop exports what the worker still buffers
        await asyncio.to_thread(worker.wait, 30)
        assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]

    printed, _ = await keel_command(commands, "trace", run_id)
    header, *tree = printed.splitlines()
    assert header.startswith("trace ") and f"run {run_id}" in header and "agent demo" in header
    assert "2 model calls" in header and "1 tool calls" in header
    # The root is the `keel run` process's span, the approval the `keel approve` process's, the rest the worker's.
    assert tree[0].startswith("StartWorkflow:AgentRun  ")
    names = [re.sub(r"^[|`\- ]+", "", line).split("  ")[0] for line in tree]
    for name in ("RunWorkflow:AgentRun", "StartWorkflowUpdate:approve_tool_call", "HandleUpdate:approve_tool_call",
                 "chat demo", "execute_tool save_note"):  # fmt: skip
        assert name in names, printed
    assert sum(1 for n in names if n == "chat demo") == 2
    [tool] = [line for line in tree if "execute_tool save_note" in line]
    assert f"call {call_id}" in tool and "-> " not in tool  # content capture is off: no result on the span
    as_json, _ = await keel_command(commands, "trace", run_id, "--json")
    [shown] = json.loads(as_json)
    assert len(shown["spans"]) == len(tree) and shown["spans"][0]["spanType"] == "agent_run"
    assert {s["serviceName"] for s in shown["spans"]} == {tracing.DEFAULT_SERVICE_NAME}
    assert API_KEY not in spans_table(tmp_path / "keel.db")

    _, err = await keel_command(commands, "trace", "run-never", code=2)
    assert "No spans of run-never in storage" in err


async def test_a_local_step_executed_again_after_its_worker_was_killed_has_its_span_marked_attempt_2(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    """A local step lost with its worker runs again at Temporal's attempt 1: its `RunActivity` span said 1 (from
    outside, `kill -9` of `keel dev` mid-step), while its tools were told 2. Storage knows the step ran before."""
    url = f"sqlite:///{tmp_path / 'keel.db'}"
    otel = {"OTEL_TRACES_EXPORTER": "keel", "OTEL_BSP_SCHEDULE_DELAY": "100", "KEEL_TEST_TOOL_SECONDS": "4"}
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    commands = {**base, **otel, "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address, "KEEL_TASK_QUEUE": task_queue,
                "KEEL_STORAGE_URL": url, "KEEL_DATA_DIR": str(data_dir)}  # fmt: skip
    run_id = f"run-lost-{task_queue}"
    keel = KeelClient(client, task_queue=task_queue)
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, env=otel) as first:
        await keel.wait_for_worker(30)
        await keel_command(
            commands, "run", "napper", "nap", "--run-id", run_id, "--no-follow", "--app", "tests.apps:app"
        )
        async with asyncio.timeout(30):  # c1 started and done, c2 and c3 started: the fused local step runs
            while len((data_dir / "naps.log").read_text().splitlines() if (data_dir / "naps.log").exists() else []) < 4:
                await asyncio.sleep(0.05)
        first.kill()
        first.wait()
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, env=otel) as second:
        async with asyncio.timeout(60):
            assert (await keel.result(run_id)).text == "woke after 3 naps"
        second.send_signal(signal.SIGTERM)
        await asyncio.to_thread(second.wait, 30)
    store = SQLiteStorage(tmp_path / "keel.db")
    await store.init()
    try:
        [trace_id] = await store.run_traces(run_id)
        spans = await store.trace_spans(trace_id)
    finally:
        await store.close()
    steps = [s for s in spans if s.name.startswith("RunActivity:keel.")]
    attempts = {(s.name, s.attributes.get("temporalActivityAttempt")) for s in steps}
    assert ("RunActivity:keel.tools_then_model", 2) in attempts, attempts
    assert ("RunActivity:keel.tools_then_model", 1) not in attempts, attempts  # the lost one never ended
    printed, _ = await keel_command(commands, "trace", run_id)
    assert any("RunActivity:keel.tools_then_model" in line and "attempt 2" in line for line in printed.splitlines())


@pytest.fixture(scope="session")
def client_js() -> Path:
    return npm_installed(JS, "@mastra/client-js", "the observability routes are read with the real @mastra/client-js")


def test_keel_trace_loads_no_temporal_http_worker_or_opentelemetry_code(storage: Storage, tmp_path: Path) -> None:
    env = plain_env(KEEL_STORAGE_URL=sqlite_url(storage))
    modules = imported(["trace", "run-none"], env, tmp_path, exit_code=2)
    unwanted = {*LIBRARIES_RUN_ONLY, *KEEL_NOT_FOR_CLIENT_COMMANDS, "temporalio", "opentelemetry"}
    assert loaded(modules, unwanted) == []
