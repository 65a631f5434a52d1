"""OpenTelemetry tracing against the real dev server: a run is one trace from the client that starts it, through
the workflow and its activities, to every model call (GenAI conventions, token counts) and tool, and the
approval; across processes over OTLP (HTTP: a worker and two `keel` commands sending to a receiver that decodes
what the real exporter sends; gRPC: the exporter alone); no exported byte carries a key; off, nothing is installed.

In-process tests keep spans in memory (`InMemorySpanExporter`, the process's tracer provider, set once: Keel then
adds no exporter of its own). The OTLP receivers only decode `ExportTraceServiceRequest`s, as a collector would.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import grpc
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.worker import Replayer

from keel.app.demo import app as demo_app
from keel.client import KeelClient
from keel.client.connection import connect
from keel.client.devserver import DevServer
from keel.plugin import KeelPlugin
from keel.protocol import tracing
from keel.storage import Storage, open_storage
from keel.worker import build_worker
from tests.conftest import ROOT, running_worker, worker_subprocess
from tests.fake_openai import FakeOpenAI, delta, finish, sse
from tests.test_agent_run import wait_for_pending
from tests.tracing_app import app as tracing_app
from tests.tracing_app import scribe_app

API_KEY = "sk-planted-4f1c9e0b7a2d4c5e8f90"
COLLECTOR_TOKEN = "collector-token-93be27f1d6c04a58"

MEMORY = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(MEMORY))


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """Tracing on in this process (`OTEL_TRACES_EXPORTER=otlp`), its spans kept in `MEMORY`."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(_PROVIDER)
    assert trace.get_tracer_provider() is _PROVIDER, "another tracer provider was set in this process"
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    MEMORY.clear()
    return MEMORY


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    [found] = named(spans, name)
    return found


def parent_of(spans: Sequence[ReadableSpan], span: ReadableSpan) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    [found] = [s for s in spans if s.context.span_id == span.parent.span_id]
    return found


def assert_one_tree(spans: Sequence[ReadableSpan], root: str) -> None:
    """One trace: every span shares the trace id, and every span but `root` has its parent among them."""
    assert len({s.context.trace_id for s in spans}) == 1, sorted({s.name for s in spans})
    roots = [s.name for s in spans if s.parent is None or s.parent.span_id not in {t.context.span_id for t in spans}]
    assert roots == [root]


# --- in process ------------------------------------------------------------------------------------------------


async def test_tracing_off_installs_no_interceptor_and_makes_no_span(
    dev_server: DevServer, storage: Storage, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    plain = await connect(dev_server.cfg.address)
    worker = build_worker(plain, demo_app, storage, task_queue=task_queue)
    interceptors = [
        *plain.config(active_config=True)["interceptors"],
        *worker.config(active_config=True)["interceptors"],
    ]
    assert not any(isinstance(i, TracingInterceptor) for i in interceptors)
    for value in ("none", ""):
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", value)
        assert not tracing.enabled()
        with tracing.model_call("scripted/demo") as call:
            assert call.span is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not tracing.enabled()


def test_tracing_off_loads_no_opentelemetry_sdk_in_a_client_or_worker_process(
    dev_server: DevServer, tmp_path: Path
) -> None:
    """A separate process: this one has loaded the SDK for the other tests."""
    script = """
import asyncio, sys
import asyncpg, httpx
from keel.app.demo import app
from keel.client.connection import connect
from keel.storage import SQLiteStorage
from keel.worker import build_worker

async def main():
    client = await connect(sys.argv[1])
    worker = build_worker(client, app, SQLiteStorage(sys.argv[2]), task_queue="tracing-off")
    interceptors = client.config(active_config=True)["interceptors"]
    interceptors += worker.config(active_config=True)["interceptors"]
    loaded = sorted(m for m in sys.modules if m.startswith(
        ("opentelemetry.sdk", "opentelemetry.instrumentation", "wrapt", "temporalio.contrib.opentelemetry")
    ))
    wrapped = [hasattr(f, "__wrapped__") for f in (httpx.AsyncHTTPTransport.handle_async_request,
                                                    asyncpg.connection.Connection.fetch)]
    print(len(interceptors), loaded, wrapped)

asyncio.run(main())
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.run(
        [sys.executable, "-c", script, dev_server.cfg.address, str(tmp_path / "keel.db")],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "[]", "[False,", "False]"]


async def test_an_approved_demo_run_is_one_trace_from_the_client_through_model_calls_tool_and_approval(
    client: Client,
    dev_server: DevServer,
    storage: Storage,
    task_queue: str,
    traced: InMemorySpanExporter,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced_client = await connect(dev_server.cfg.address)
    assert any(isinstance(i, TracingInterceptor) for i in traced_client.config(active_config=True)["interceptors"])
    async with running_worker(traced_client, demo_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "remember the milk")
        # An observer's queries are traces of their own: the test polls through a client that does not trace.
        [call_id] = await wait_for_pending(KeelClient(client, task_queue=task_queue), run_id)
        await keel.approve(run_id, call_id)
        result = await keel.result(run_id)
    assert result.finish_reason == "stop"
    spans = traced.get_finished_spans()
    assert_one_tree(spans, "StartWorkflow:AgentRun")
    start = one(spans, "StartWorkflow:AgentRun")
    assert start.attributes == {"temporalWorkflowID": run_id}
    assert parent_of(spans, one(spans, "RunWorkflow:AgentRun")) is start

    first, last = named(spans, "chat demo")
    for chat in (first, last):
        attributes = dict(chat.attributes or {})
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"] == "demo"
        assert attributes["gen_ai.provider.name"] == attributes["gen_ai.system"] == "scripted"
        assert attributes["gen_ai.agent.id"] == "demo" and attributes["keel.run.id"] == run_id
        tokens = attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]
        assert all(isinstance(n, int) and n > 0 for n in tokens)
        assert "gen_ai.input.messages" not in attributes  # content capture is off
        assert parent_of(spans, chat).name.startswith("RunActivity:")
        assert chat.kind == trace.SpanKind.CLIENT
    assert first.attributes is not None and first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert last.attributes is not None and last.attributes["gen_ai.response.finish_reasons"] == ("stop",)

    tool = one(spans, "execute_tool save_note")
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "save_note" and tool.attributes["gen_ai.tool.call.id"] == call_id
    assert tool.status.status_code == StatusCode.UNSET
    assert parent_of(spans, tool).name.startswith("RunActivity:")

    # The approval, sent later from the client, is traced in the run's trace: its client span under the start.
    update = one(spans, "StartWorkflowUpdate:approve_tool_call")
    assert parent_of(spans, update) is start
    assert parent_of(spans, one(spans, "HandleUpdate:approve_tool_call")) is start

    # The wait for the approval is a span of the run's trace, from the suspension to the update that decided it.
    approval = one(spans, "approval save_note")
    assert parent_of(spans, approval) is start
    assert approval.attributes is not None
    assert {k: v for k, v in approval.attributes.items() if k.startswith("keel.approval.")} == {
        "keel.approval.decision": "approved",
        "keel.approval.channel": "update",
    }
    assert approval.attributes["keel.tool.call.id"] == call_id and approval.attributes["keel.run.id"] == run_id
    assert approval.attributes["keel.step"] == 1
    assert approval.start_time is not None and approval.end_time is not None and first.end_time is not None
    assert first.end_time <= approval.start_time < approval.end_time
    assert approval.end_time - approval.start_time >= 10_000_000  # the test's polling alone takes longer
    assert tool.start_time is not None and approval.end_time <= tool.start_time

    # Recorded with tracing, the history replays with and without it (the interceptor changes no command), and
    # replaying makes no span again.
    history = await traced_client.get_workflow_handle(run_id).fetch_history()
    made = len(traced.get_finished_spans())
    for exporter in ("otlp", "none"):
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", exporter)
        await Replayer(workflows=[], plugins=[KeelPlugin()]).replay_workflow(history)
    assert len(traced.get_finished_spans()) == made


async def test_an_approval_decided_on_another_worker_spans_the_workflow_times_of_the_wait(
    client: Client,
    dev_server: DevServer,
    storage: Storage,
    task_queue: str,
    traced: InMemorySpanExporter,
    data_dir: Path,
) -> None:
    """The worker that saw the wait start is gone (a restart, an eviction): the next one makes the span from the
    workflow's own times, the suspension's task to the task that brought the decision."""
    async with running_worker(await connect(dev_server.cfg.address), demo_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "remember the eggs")
        [call_id] = await wait_for_pending(KeelClient(client, task_queue=task_queue), run_id)
    async with running_worker(await connect(dev_server.cfg.address), demo_app, storage, task_queue) as keel:
        await keel.approve(run_id, call_id)
        assert (await keel.result(run_id)).finish_reason == "stop"
    spans = traced.get_finished_spans()
    approval = one(spans, "approval save_note")
    assert approval.attributes is not None and approval.attributes["keel.approval.decision"] == "approved"
    assert parent_of(spans, approval) is one(spans, "StartWorkflow:AgentRun")
    run, handled = one(spans, "RunWorkflow:AgentRun"), one(spans, "HandleUpdate:approve_tool_call")
    assert run.start_time is not None and approval.start_time is not None and approval.end_time is not None
    assert run.start_time <= approval.start_time < approval.end_time == handled.start_time


async def test_a_decision_by_signal_is_a_declined_approval_span_with_its_reason_when_content_is_captured(
    client: Client,
    dev_server: DevServer,
    storage: Storage,
    task_queue: str,
    traced: InMemorySpanExporter,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(tracing.CAPTURE_CONTENT, "true")
    traced_client = await connect(dev_server.cfg.address)
    async with running_worker(traced_client, demo_app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "forget the milk")
        [call_id] = await wait_for_pending(KeelClient(client, task_queue=task_queue), run_id)
        await keel.signal_approval(run_id, call_id, approved=False, reason="not today")
        assert (await keel.result(run_id)).text == "The save_note call was declined, so I did not save the note."
    spans = traced.get_finished_spans()
    approval = one(spans, "approval save_note")
    assert approval.attributes is not None
    assert {k: v for k, v in approval.attributes.items() if k.startswith("keel.approval.")} == {
        "keel.approval.decision": "declined",
        "keel.approval.channel": "signal",
        "keel.approval.reason": "not today",
    }
    assert parent_of(spans, approval) is one(spans, "StartWorkflow:AgentRun")
    assert not named(spans, "execute_tool save_note")


async def test_a_failed_tool_and_workspace_writes_have_their_spans_with_content_when_asked(
    dev_server: DevServer,
    storage: Storage,
    task_queue: str,
    traced: InMemorySpanExporter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(tracing.CAPTURE_CONTENT, "true")
    client = await connect(dev_server.cfg.address)
    async with running_worker(client, tracing_app, storage, task_queue) as keel:
        failing = await keel.result(await keel.start_run("fails", "light it"))
    assert "the short fuse was lit" in failing.text
    tool = one(traced.get_finished_spans(), "execute_tool explode")
    assert tool.status.status_code == StatusCode.ERROR and "the short fuse was lit" in str(tool.status.description)
    assert tool.attributes is not None and tool.attributes["error.type"] == "ValueError"
    assert json.loads(str(tool.attributes["gen_ai.tool.call.arguments"])) == {"fuse": "short"}
    [chat, _] = named(traced.get_finished_spans(), "chat fuse")
    assert chat.attributes is not None
    [user] = json.loads(str(chat.attributes["gen_ai.input.messages"]))
    assert user == {"role": "user", "parts": [{"type": "text", "content": "light it"}]}
    [answer] = json.loads(str(chat.attributes["gen_ai.output.messages"]))
    assert answer["parts"] == [
        {"type": "tool_call", "id": "call_boom", "name": "explode", "arguments": {"fuse": "short"}}
    ]

    traced.clear()
    async with running_worker(client, scribe_app(tmp_path / "ws"), storage, f"{task_queue}-ws") as keel:
        await keel.result(await keel.start_run("scribe", "write it down"))
    spans = traced.get_finished_spans()
    tool = one(spans, "execute_tool mastra_workspace_write_file")
    write = one(spans, "workspace write_file")
    assert parent_of(spans, write) is tool
    assert write.attributes is not None
    assert write.attributes["keel.workspace.id"] == "scribe-ws" and write.attributes["file.path"] == "notes/today.md"
    assert write.attributes["keel.workspace.capability"] == "filesystem"
    assert (tmp_path / "ws" / "notes" / "today.md").read_text() == "tracing works"


async def test_postgres_storage_queries_are_spans_of_the_run_without_their_parameters(
    dev_server: DevServer, task_queue: str, traced: InMemorySpanExporter, data_dir: Path, pg_dsn: str
) -> None:
    """asyncpg is instrumented with tracing on: the queries an activity makes are spans under its span, with
    their SQL and not their parameters (the prompt, stored as a message, is in none)."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(pg_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    storage = open_storage(urlsplit(pg_dsn)._replace(path=f"/{name}").geturl())
    await storage.init()
    marker = f"marker-{uuid.uuid4().hex}"
    try:
        async with running_worker(await connect(dev_server.cfg.address), demo_app, storage, task_queue) as keel:
            run_id = await keel.start_run("demo", f"remember {marker}")
            [call_id] = await wait_for_pending(keel, run_id)
            traced.clear()  # from here on, the approval's trace: the run's
            await keel.approve(run_id, call_id)
            assert (await keel.result(run_id)).finish_reason == "stop"
    finally:
        await storage.close()
    every = traced.get_finished_spans()
    run_trace = one(every, "StartWorkflowUpdate:approve_tool_call").context.trace_id
    spans = [s for s in every if s.context.trace_id == run_trace]
    queries = [s for s in spans if (s.attributes or {}).get("db.system") == "postgresql"]
    assert any(str((q.attributes or {}).get("db.statement")).startswith("INSERT INTO") for q in queries)
    for query in queries:
        assert query.kind == trace.SpanKind.CLIENT and query.parent is not None
        [parent] = [s for s in spans if s.context.span_id == query.parent.span_id]
        assert parent.name.startswith(("RunActivity:", "chat ", "execute_tool ")), parent.name
        assert "db.statement.parameters" not in (query.attributes or {})
    assert not [s.name for s in every if marker in json.dumps(dict(s.attributes or {}), default=str)]


def test_captured_content_is_cut_to_its_bound(traced: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    from keel.protocol import MessageRecord

    monkeypatch.setenv(tracing.CAPTURE_CONTENT, "true")
    with tracing.model_call("openai/gpt-x", server_url="https://user:pw@models.example:8443/v1?key=k") as call:
        call.request("", [MessageRecord(id="m", role="user", content="x" * 100_000)])
    [span] = traced.get_finished_spans()
    assert span.attributes is not None
    content = str(span.attributes["gen_ai.input.messages"])
    assert len(content) < tracing.MAX_CONTENT_CHARS + 100 and content.endswith("more characters]")
    assert (span.attributes["server.address"], span.attributes["server.port"]) == ("models.example", 8443)
    assert not any("pw" in str(v) or "key=" in str(v) for v in span.attributes.values())


def test_a_secret_quoted_in_an_error_is_redacted_before_export(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_API_KEY", API_KEY)
    tracing.add_secret("given-in-code-0123456789")
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(tracing.redacting(memory)))
    with provider.get_tracer("t").start_as_current_span("call") as span:
        span.set_attribute("error.message", f"401: Incorrect API key provided: {API_KEY}")
        span.set_attribute("request", "Authorization: Bearer abcdef0123456789xyz")
        span.set_attribute("notes", ("given-in-code-0123456789", "Bearer of good news"))
        span.set_status(trace.Status(StatusCode.ERROR, f"key {API_KEY}"))
    [exported] = memory.get_finished_spans()
    assert exported.attributes == {
        "error.message": f"401: Incorrect API key provided: {tracing.REDACTED}",
        "request": f"Authorization: Bearer {tracing.REDACTED}",
        "notes": (tracing.REDACTED, "Bearer of good news"),
    }
    assert exported.status.description == f"key {tracing.REDACTED}"


def test_a_secret_percent_encoded_in_a_url_is_redacted_before_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key with `+`, `/` or `=` (base64) is always percent-encoded in a URL, and an HTTP span's `url.query` or
    `url.full` holds it so: before, only the raw key was found, and the encoded one was exported."""
    key = "Zk9/Plant+ed==123xyz"
    monkeypatch.setenv("MY_API_KEY", key)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(tracing.redacting(memory)))
    with provider.get_tracer("t").start_as_current_span("GET /api/agents") as span:
        span.set_attribute("url.query", "key=Zk9%2FPlant%2Bed%3D%3D123xyz&page=1")
        span.set_attribute("url.full", "http://h/api?key=Zk9%2fPlant%2bed%3d%3d123xyz")  # lower-case hex digits
        span.set_attribute("twice", "key%3DZk9%252FPlant%252Bed%253D%253D123xyz")  # encoded twice
        span.set_attribute("header", "Authorization%3A%20Bearer%20abcdef0123456789xyz")
        span.set_attribute("plain", "50% off, no secret")
    [exported] = memory.get_finished_spans()
    assert exported.attributes is not None
    exported_text = " ".join(str(v) for v in exported.attributes.values())
    assert tracing.REDACTED in str(exported.attributes["url.query"]) and "page=1" in exported_text
    for attribute in ("url.full", "twice", "header"):
        assert tracing.REDACTED in str(exported.attributes[attribute]), exported.attributes[attribute]
    assert "123xyz" not in exported_text and "abcdef0123456789xyz" not in exported_text
    assert exported.attributes["plain"] == "50% off, no secret"


# --- over OTLP -------------------------------------------------------------------------------------------------


class OtlpHttpReceiver(ThreadingHTTPServer):
    """An OTLP/HTTP traces endpoint on loopback: keeps each request's raw body, headers and decoded message."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _OtlpHandler)
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.requests: list[ExportTraceServiceRequest] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _OtlpHandler(BaseHTTPRequestHandler):
    server: OtlpHttpReceiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        assert self.path == "/v1/traces" and self.headers["content-type"] == "application/x-protobuf"
        self.server.bodies.append(body)
        self.server.headers.append({k.lower(): v for k, v in self.headers.items()})
        self.server.requests.append(ExportTraceServiceRequest.FromString(body))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def otlp_http_receiver() -> Iterator[OtlpHttpReceiver]:
    server = OtlpHttpReceiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


def received_spans(requests: Sequence[ExportTraceServiceRequest]) -> list[dict[str, Any]]:
    """Every span the requests carried, as dicts: name, ids, parent, attributes, status, service name."""
    found = []
    for request in requests:
        for resource_spans in request.resource_spans:
            resource = {kv.key: value_of(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        {
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex() or None,
                            "attributes": {kv.key: value_of(kv.value) for kv in span.attributes},
                            "events": [{kv.key: value_of(kv.value) for kv in e.attributes} for e in span.events],
                            "status": span.status.message,
                            "service": resource.get("service.name"),
                            "resource": resource,
                        }
                    )
    return found


def answer_with_a_tool_call_then_text(body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    if body["messages"][-1]["role"] != "tool":
        call = {"index": 0, "id": "call_ship", "type": "function", "function": {"name": "ship", "arguments": ""}}
        more = {"index": 0, "function": {"arguments": '{"item": "parcel"}'}}
        return sse(delta(role="assistant", content="Shipping."), delta(tool_calls=[call]), delta(tool_calls=[more]),
                   finish("tool_calls", 12, 7))  # fmt: skip
    return sse(delta(role="assistant", content="Shipped."), finish("stop", 30, 3))


async def keel_command(env: dict[str, str], *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keel.cli", *args, env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_a_run_across_a_worker_and_two_commands_is_one_trace_over_otlp_http_without_a_secret(
    client: Client,
    dev_server: DevServer,
    task_queue: str,
    tmp_path: Path,
    data_dir: Path,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.responder = answer_with_a_tool_call_then_text
    with otlp_http_receiver() as receiver:
        otel = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{COLLECTOR_TOKEN}",
            "OPENAI_BASE_URL": fake_openai.base_url,
            "OPENAI_API_KEY": API_KEY,
        }
        base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        commands = {
            **base,
            **otel,
            "OTEL_SERVICE_NAME": "keel-cli",
            "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
            "KEEL_TASK_QUEUE": task_queue,
            "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
        }
        # The worker's httpx spans capture every request header: the model server's key among them.
        capture = {"OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST": ".*"}
        worker_env = {**otel, **capture, "OTEL_SERVICE_NAME": "keel-worker"}
        with worker_subprocess(
            dev_server, task_queue, tmp_path, data_dir, app="tests.tracing_app:app", env=worker_env
        ) as worker:
            keel = KeelClient(client, task_queue=task_queue)
            await keel.wait_for_worker(30)
            run_id = f"run-traced-{task_queue}"
            await keel_command(commands, "run", "gpt", "ship the parcel", "--run-id", run_id, "--no-follow",
                               "--app", "tests.tracing_app:app")  # fmt: skip
            [call_id] = await wait_for_pending(keel, run_id)
            await keel_command(commands, "approve", run_id, call_id, "--no-follow")
            result = await keel.result(run_id)
            assert result.text == "Shipped."
            worker.send_signal(signal.SIGTERM)  # a clean stop exports what the worker still buffers
            await asyncio.to_thread(worker.wait, 30)
            assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]

    spans = received_spans(receiver.requests)
    by_name = {s["name"]: s for s in spans}
    by_id = {s["span_id"]: s for s in spans}
    assert {s["trace_id"] for s in spans} == {by_name["StartWorkflow:AgentRun"]["trace_id"]}
    ids = {s["span_id"] for s in spans}
    assert [s["name"] for s in spans if s["parent"] not in ids] == ["StartWorkflow:AgentRun"]
    assert {by_name[n]["service"] for n in ("StartWorkflow:AgentRun", "StartWorkflowUpdate:approve_tool_call")} == {
        "keel-cli"
    }
    assert {by_name[n]["service"] for n in ("RunWorkflow:AgentRun", "execute_tool ship")} == {"keel-worker"}
    chats = [s for s in spans if s["name"] == "chat fake-model"]
    assert sorted((c["attributes"]["gen_ai.usage.input_tokens"], c["attributes"]["gen_ai.usage.output_tokens"])
                  for c in chats) == [(12, 7), (30, 3)]  # fmt: skip
    assert {c["attributes"]["gen_ai.provider.name"] for c in chats} == {"openai"}
    assert {c["attributes"]["server.address"] for c in chats} == {"127.0.0.1"}
    assert by_name["execute_tool ship"]["attributes"]["gen_ai.tool.call.id"] == "call_ship"
    # Each model call's HTTP request (httpx) is a client span under it; of the headers captured, none is the key's.
    requests = [s for s in spans if s["name"] == "POST"]
    assert sorted(by_id[s["parent"]]["name"] for s in requests) == ["chat fake-model", "chat fake-model"]
    for request in requests:
        attributes = request["attributes"]
        assert attributes["url.full"] == f"{fake_openai.base_url}/chat/completions"
        assert (attributes["http.request.method"], attributes["http.response.status_code"]) == ("POST", 200)
        assert attributes["http.request.header.content_type"] == ("application/json",)
        assert not [key for key in attributes if "authorization" in key]
    assert "HandleUpdate:approve_tool_call" in by_name
    # The exporters read the collector's headers from the environment; nothing they sent holds a secret.
    assert {h.get("authorization") for h in receiver.headers} == {f"Bearer {COLLECTOR_TOKEN}"}
    for secret in (API_KEY, COLLECTOR_TOKEN):
        assert not any(secret.encode() in body for body in receiver.bodies)
        assert not any(secret in json.dumps(s, default=str) for s in spans)


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []

    def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
        self.requests.append(request)
        return ExportTraceServiceResponse()


def test_otlp_over_grpc_when_the_protocol_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    service = _TraceService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "keel-grpc")
        provider = tracing.build_provider(["otlp"])
        with provider.get_tracer("t").start_as_current_span("over grpc"):
            pass
        assert provider.force_flush()
        provider.shutdown()
    finally:
        server.stop(None)
    [span] = received_spans(service.requests)
    assert (span["name"], span["service"]) == ("over grpc", "keel-grpc")

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="http/json"):
        tracing.build_provider(["otlp"])
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    assert tracing.build_provider([]).resource.attributes["service.name"] == tracing.DEFAULT_SERVICE_NAME


def test_exporter_names_are_case_insensitive_and_an_unknown_one_is_one_line_for_every_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The OpenTelemetry spec's enum values are case-insensitive (`OTLP` is `otlp`). An exporter nothing provides
    was a 25-line traceback and exit 1 (a failed run's code) from every `keel` command: now one line, exit 2."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "OTLP, Keel ,NONE,otlp")  # each once: `OTLP,otlp` exported twice
    assert tracing.exporter_names() == ["otlp", "keel"]
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "bogus", "KEEL_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "keel.cli", "runs"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: OTEL_TRACES_EXPORTER names 'bogus', which no installed package provides (otlp, console, keel or none)"
    ]


async def test_reading_logs_traces_and_the_api_description_makes_no_request_span(
    traced: InMemorySpanExporter, storage: Storage, client: Client, task_queue: str
) -> None:
    """A UI polling `/api/logs` made four spans a read, which pushed the runs' spans out of the span store
    (`KEEL_TRACE_MAX_SPANS`): reads of what Keel keeps, and the API's own description, are not traced."""
    import httpx

    from keel.client.api import create_api

    api = create_api(tracing_app, KeelClient(client, task_queue=task_queue, app=tracing_app), storage)
    transport = httpx.ASGITransport(app=api)
    async with httpx.AsyncClient(transport=transport, base_url="http://keel") as http:
        for path in (
            "/api/logs/transports",
            "/api/logs?transportId=keel",
            "/api/logs/run-1?transportId=keel",
            "/api/openapi.json",
            "/api/observability/traces",
            "/api/telemetry",
        ):
            assert (await http.get(path)).status_code < 500, path
        assert not traced.get_finished_spans(), sorted({s.name for s in traced.get_finished_spans()})
        assert (await http.get("/api/agents")).status_code == 200
    assert any(s.name == "GET /api/agents" for s in traced.get_finished_spans())


def test_a_span_attribute_is_cut_to_a_bound_unless_the_environment_sets_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """An HTTP request's 100,000-character query string went whole into its span, and into every store."""
    for variable in ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"):
        monkeypatch.delenv(variable, raising=False)
    lengths = []
    for limit in (None, "100"):
        if limit:
            monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", limit)
        memory = InMemorySpanExporter()
        provider = tracing.build_provider([])
        provider.add_span_processor(SimpleSpanProcessor(memory))
        with provider.get_tracer("t").start_as_current_span("GET /api/agents") as span:
            span.set_attribute("url.query", "q=" + "x" * 100_000)
        [exported] = memory.get_finished_spans()
        assert exported.attributes is not None
        lengths.append(len(str(exported.attributes["url.query"])))
    assert lengths == [tracing.MAX_ATTRIBUTE_CHARS, 100]


async def test_a_command_whose_otlp_endpoint_does_not_answer_gives_up_on_its_spans_in_seconds(
    dev_server: DevServer, client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    """Every `keel` command waited out its exporter's 10 s of retries when the OTLP endpoint was down (from
    outside: 7.97 s for `keel run` against 0.97 s with tracing off); it now gives up after `EXPORT_SECONDS`,
    saying so."""
    from keel.client.cli import EXPORT_SECONDS

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",  # discard: nothing listens
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_TASK_QUEUE": task_queue,
        "KEEL_DATA_DIR": str(tmp_path),
    }
    command = [sys.executable, "-m", "keel.cli", "run", "demo", "hi", "--no-follow", "--app", "keel.app.demo:app"]
    async with running_worker(client, demo_app, storage, task_queue):
        done = await asyncio.to_thread(subprocess.run, command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr  # a started run: its start is a span
    assert f"keel: the command's spans were not exported in {EXPORT_SECONDS:g} s" in done.stderr
