"""Logs by run and metrics, against the real dev server.

Logs (`KEEL_LOGS=info`): a worker keeps its records in storage, each with the run, agent, step and trace it was
logged in, no secret in them; the unmodified `@mastra/client-js` 1.47 reads them through Mastra's `/api/logs`
routes (and `/api/observability/logs`), and `keel logs RUN` prints them. Metrics (`KEEL_METRICS_PORT`): a worker
process serves the Temporal SDK's metrics and Keel's counters on one Prometheus endpoint, scraped as Prometheus
would; off, nothing is served and nothing of it is imported.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel
from temporalio.client import Client

from keel.app import Agent, App, ToolContext, tool
from keel.app.demo import app as demo_app
from keel.app.demo import demo
from keel.client import KeelClient
from keel.client.api import create_api
from keel.client.api.server import serving
from keel.client.connection import connect
from keel.client.devserver import DevServer
from keel.client.log_handler import HANDLER, keeping_logs
from keel.model_providers import ModelRequest, ModelRequestError, ModelResponse, ModelToolCall, ScriptedModel
from keel.model_providers.scripted import tool_results_since_last_user
from keel.storage import LogQuery, LogRetention, SpanQuery, SQLiteStorage, Storage, StoredLog, open_storage
from tests.conftest import ROOT, free_port, npm_installed, running_worker, worker_subprocess
from tests.http_api.conftest import JS, Api
from tests.test_agent_run import wait_for_pending
from tests.test_cli_imports import KEEL_NOT_FOR_CLIENT_COMMANDS, LIBRARIES_RUN_ONLY, imported, loaded, plain_env
from tests.test_trace_storage import TracedRun, keel_command, kept, sqlite_url, traced_run
from tests.test_tracing import traced

__all__ = ["kept", "traced", "traced_run"]  # the fixtures, from tests/test_tracing.py and test_trace_storage.py

API_KEY = "sk-planted-0c5e9a71b3d24f6e8a17"


class Nothing(BaseModel):
    pass


@tool("leak")
async def leak(args: Nothing, ctx: ToolContext) -> None:
    """Fails, quoting the service's key in its error."""
    raise RuntimeError(f"the service refused key {os.environ.get('MY_SERVICE_API_KEY', '')}")


def leaky_script(request: ModelRequest) -> ModelResponse:
    if not tool_results_since_last_user(request):
        return ModelResponse(tool_calls=[ModelToolCall(id="call_leak", name="leak", args={})])
    return ModelResponse(text="the tool failed")


def broken_script(request: ModelRequest) -> ModelResponse:
    raise ModelRequestError("the model refused the request", status=400)


leaky = Agent(id="leaky", model=ScriptedModel(leaky_script, name="leaky"), tools=(leak,))
broken = Agent(id="broken", model=ScriptedModel(broken_script, name="broken"))
app = App.of(demo, leaky, broken)
"""The worker subprocesses' app: `tests.test_logs_and_metrics:app`."""


async def kept_logs(storage: Storage, run_id: str, last: str, timeout: float = 15) -> list[StoredLog]:
    """The run's records, once the one whose message starts with `last` is kept (records are written in batches)."""
    async with asyncio.timeout(timeout):
        while True:
            logs, _ = await storage.list_logs(LogQuery(run_id=run_id), limit=1000)
            if any(log.message.startswith(last) for log in logs):
                return logs
            await asyncio.sleep(0.1)


def messages(logs: list[StoredLog]) -> list[str]:
    return [log.message for log in logs]


def logs_table(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return json.dumps(db.execute("SELECT * FROM logs").fetchall())


@pytest.fixture(scope="session")
def client_js() -> Path:
    return npm_installed(JS, "@mastra/client-js", "the log routes are read with the real @mastra/client-js")


@pytest.fixture
async def logged_runs(
    client: Client,
    dev_server: DevServer,
    storage: Storage,
    task_queue: str,
    traced: InMemorySpanExporter,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[KeelClient, str, str, str]]:
    """A worker keeping its records (`KEEL_LOGS=info`), traced; a demo run approved and a leaky run done; yields the
    client and the runs' ids and the demo run's trace id."""
    monkeypatch.setenv("KEEL_LOGS", "info")
    monkeypatch.setenv("MY_SERVICE_API_KEY", API_KEY)
    traced_client = await connect(dev_server.cfg.address)
    async with running_worker(traced_client, app, storage, task_queue) as keel:
        run_id = await keel.start_run("demo", "remember the milk")
        [call_id] = await wait_for_pending(KeelClient(client, task_queue=task_queue), run_id)
        await keel.approve(run_id, call_id)
        assert (await keel.result(run_id)).finish_reason == "stop"
        leaky_run = await keel.start_run("leaky", "try the tool")
        await keel.result(leaky_run)
        await kept_logs(storage, run_id, "Run completed")
        await kept_logs(storage, leaky_run, "Run completed")
        [trace_id] = {f"{s.context.trace_id:032x}" for s in traced.get_finished_spans() if s.name == "chat demo"}
        yield keel, run_id, leaky_run, trace_id
    assert HANDLER not in logging.getLogger().handlers  # the worker stopped: nothing is kept any more


# --- logs ------------------------------------------------------------------------------------------------------


async def test_a_runs_records_carry_its_run_agent_step_and_trace_and_no_secret(
    logged_runs: tuple[KeelClient, str, str, str], storage: Storage
) -> None:
    _, run_id, leaky_run, trace_id = logged_runs
    logs, _ = await storage.list_logs(LogQuery(run_id=run_id), limit=1000)
    said = messages(logs)
    call = next(log.data["tool_call_id"] for log in logs if log.data.get("tool_name") == "save_note")
    expected = [
        "Run started: agent demo",
        "Step 1: scripted/demo answered in",
        f"Waiting for approval of save_note ({call})",
        f"Tool call save_note ({call}) approved",
        "Tool save_note finished in",
        "Step 2: scripted/demo answered in",
        "Run completed",
    ]
    found = [next((i for i, m in enumerate(said) if m.startswith(e)), -1) for e in expected]
    assert -1 not in found and found == sorted(found), said  # each of them, in the order they happened
    assert {log.run_id for log in logs} == {run_id} and {log.agent_id for log in logs} == {"demo"}
    assert all(log.level == "info" and log.pid == os.getpid() and log.hostname for log in logs)

    [first, second] = [log for log in logs if log.message.startswith("Step ")]
    assert (first.step, second.step) == (1, 2) and first.logger == "keel.activities.model_step"
    assert first.data["model"] == "scripted/demo" and first.data["input_tokens"] > 0
    assert "tool calls: save_note" in first.message and "finish tool-calls" in first.message
    # What activities log is in the run's trace, under the span current then.
    for log in (first, second, next(log for log in logs if log.message.startswith("Tool save_note"))):
        assert log.trace_id == trace_id and log.span_id is not None and len(log.span_id) == 16
    tool = next(log for log in logs if log.message.startswith("Tool save_note"))
    assert tool.step == 1 and tool.data["tool_call_id"] == call and tool.data["activity_type"]
    workflow = next(log for log in logs if log.message == "Run completed")
    assert workflow.logger == "keel.workflows" and workflow.data["workflow_type"] == "AgentRun"
    assert "{" not in workflow.message  # Temporal's details are fields, not appended to the message

    leaked = await kept_logs(storage, leaky_run, "Run completed")
    [failed] = [log for log in leaked if log.message.startswith("Tool leak failed")]
    assert failed.level == "warn" and failed.agent_id == "leaky" and failed.data["is_error"] is True
    assert "the service refused key [REDACTED]" in failed.message
    assert isinstance(storage, SQLiteStorage)
    assert API_KEY not in logs_table(storage.path)


async def test_mastras_client_reads_a_runs_records_from_the_log_routes_in_mastras_shapes(
    logged_runs: tuple[KeelClient, str, str, str], storage: Storage, client_js: Path
) -> None:
    keel, run_id, leaky_run, trace_id = logged_runs
    async with serving(create_api(app, keel, storage), "127.0.0.1", free_port()) as url:
        api = Api(url, keel, storage)
        got = await api.js(
            """
            const transports = await client.listLogTransports();
            const run = await client.getLogForRun({ runId: vars.runId, transportId: "keel" });
            const paged = await client.getLogForRun({ runId: vars.runId, transportId: "keel", page: 2, perPage: 3 });
            const warnings = await client.listLogs({ transportId: "keel", logLevel: "warn" });
            const filtered = await client.listLogs({ transportId: "keel", filters: { agentId: "leaky" } });
            const other = await client.getLogForRun({ runId: vars.runId, transportId: "file" });
            const vnext = await client.listLogsVNext({ filters: { runId: vars.runId }, pagination: { perPage: 100 } });
            const errors = await client.listLogsVNext({ filters: { level: ["warn", "error"] } });
            const nobody = await client.listLogsVNext({ filters: { userId: "u-1" } });
            let missing = null;
            try { await client.getLogForRun({ runId: vars.runId }); } catch (e) { missing = String(e.message); }
            return { transports, run, paged, warnings, filtered, other, vnext, errors, nobody, missing };
            """,
            runId=run_id,
        )
    assert got["transports"] == {"transports": ["keel"]}
    run = got["run"]
    assert run["page"] == 1 and run["perPage"] == 100 and run["hasMore"] is False
    assert run["total"] == len(run["logs"]) >= 7
    for record in run["logs"]:
        assert set(record) <= {"level", "msg", "time", "runId", "pid", "hostname", "name", "context"}
        assert record["runId"] == run_id and record["level"] == "info" and isinstance(record["pid"], int)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["time"])
        assert record["context"]["agentId"] == "demo"
    assert run["logs"][0]["msg"].startswith("Run started") and run["logs"][-1]["msg"] == "Run completed"
    step = next(r for r in run["logs"] if r["msg"].startswith("Step 1"))
    assert step["name"] == "keel.activities.model_step"
    assert step["context"]["step"] == 1 and step["context"]["traceId"] == trace_id
    tool = next(r for r in run["logs"] if r["msg"].startswith("Tool save_note"))
    assert tool["context"]["toolName"] == "save_note" and tool["context"]["toolCallId"]

    paged = got["paged"]
    assert paged["page"] == 2 and paged["perPage"] == 3 and paged["total"] == run["total"]
    assert [r["msg"] for r in paged["logs"]] == [r["msg"] for r in run["logs"][3:6]]
    assert paged["hasMore"] == (run["total"] > 6)
    assert [r["msg"][:16] for r in got["warnings"]["logs"]] == ["Tool leak failed"]
    assert {r["runId"] for r in got["filtered"]["logs"]} == {leaky_run}
    assert got["other"] == {"logs": [], "total": 0, "page": 1, "perPage": 100, "hasMore": False}
    assert "transportId" in got["missing"] and "400" in got["missing"]

    vnext = got["vnext"]
    assert vnext["pagination"] == {"total": run["total"], "page": 0, "perPage": 100, "hasMore": False}
    newest = vnext["logs"][0]
    assert newest["message"] == "Run completed" and newest["level"] == "info"  # newest first
    assert newest["entityType"] == "agent" and newest["entityId"] == "demo" and newest["runId"] == run_id
    assert newest["logId"] and newest["scope"] == {"name": "keel.workflows"}
    assert {r["traceId"] for r in vnext["logs"] if r["message"].startswith("Step ")} == {trace_id}
    assert [r["message"][:16] for r in got["errors"]["logs"]] == ["Tool leak failed"]
    assert got["nobody"]["logs"] == [] and got["nobody"]["pagination"]["total"] == 0


async def test_keel_logs_prints_a_runs_records(
    logged_runs: tuple[KeelClient, str, str, str], storage: Storage, data_dir: Path
) -> None:
    _, run_id, leaky_run, trace_id = logged_runs
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"KEEL_STORAGE_URL": sqlite_url(storage), "KEEL_DATA_DIR": str(data_dir)}
    printed, _ = await keel_command(env, "logs", run_id)
    lines = printed.splitlines()
    assert "INFO" in lines[0] and lines[0].endswith("Run started: agent demo, thread " + run_id)
    [step] = [line for line in lines if "Step 1:" in line]
    assert "step 1" in step and "[keel.activities.model_step]" in step and f"(trace {trace_id})" in step
    warned, _ = await keel_command(env, "logs", leaky_run, "--level", "warn")
    assert [line.split("  ")[1].strip() for line in warned.splitlines()] == ["WARN"]
    as_json, _ = await keel_command(env, "logs", run_id, "--json")
    assert [r["msg"] for r in json.loads(as_json)] == [line.split("]  ", 1)[1].split("  (trace")[0] for line in lines]
    _, err = await keel_command(env, "logs", "run-never", code=2)
    assert "No log records of run-never in storage" in err


def test_keel_logs_loads_no_temporal_http_worker_or_opentelemetry_code(storage: Storage, tmp_path: Path) -> None:
    modules = imported(["logs", "run-none"], plain_env(KEEL_STORAGE_URL=sqlite_url(storage)), tmp_path, exit_code=2)
    unwanted = {*LIBRARIES_RUN_ONLY, *KEEL_NOT_FOR_CLIENT_COMMANDS, "temporalio", "opentelemetry"}
    assert loaded(modules, unwanted) == []


async def test_a_record_of_no_worker_goes_to_each_storage_once_and_what_overflows_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SERVICE_API_KEY", API_KEY)
    first, second = SQLiteStorage(tmp_path / "a.db"), SQLiteStorage(tmp_path / "b.db")
    for store in (first, second):
        await store.init()
    log = logging.getLogger("keel.tests.logs")
    try:
        async with keeping_logs(first, "queue-a", level="warn"), keeping_logs(second, "queue-b", level="info"):
            async with keeping_logs(first, "queue-c", level="info"):  # the same storage again: written once
                log.info("for every storage")
                log.debug("below every level")
            monkeypatch.setattr("keel.client.log_handler.MAX_PENDING", 2)
            for n in range(5):
                log.warning("burst %d", n, extra={"n": n, "note": {"nested": API_KEY}})
        # The first storage's warn-level worker took the burst alone: two kept, three counted.
        kept = messages((await first.list_logs(LogQuery(logger="keel.tests.logs")))[0])
        assert kept == ["for every storage", "burst 0", "burst 1"]
        note = messages((await first.list_logs(LogQuery(logger="keel.log_handler")))[0])
        assert note == ["3 log records were dropped: more than 2 waited to be written"]
        kept = messages((await second.list_logs(LogQuery(logger="keel.tests.logs")))[0])
        assert kept.count("for every storage") == 1 and "below every level" not in kept
        [burst], _ = await first.list_logs(LogQuery(fields={"n": "0"}))
        assert burst.data["note"] == "{'nested': '[REDACTED]'}" and burst.level == "warn"
    finally:
        for store in (first, second):
            await store.close()


async def test_the_store_filters_orders_and_prunes_records(store_url: str) -> None:
    store = open_storage(store_url)
    await store.init()
    try:
        now = datetime.now(UTC)
        logs = [
            StoredLog(now - timedelta(seconds=10 - i), "info" if i % 2 else "warn", f"record {i}", "keel.tests",
                      run_id="run-a" if i < 6 else "run-b", agent_id="demo", step=i, data={"tool_name": f"t{i % 3}"})
            for i in range(10)
        ]  # fmt: skip
        await store.save_logs(list(reversed(logs)))
        found, total = await store.list_logs(LogQuery(run_id="run-a"), offset=1, limit=2)
        assert total == 6 and messages(found) == ["record 1", "record 2"]  # in the order they were logged
        found, total = await store.list_logs(LogQuery(levels=("warn",), fields={"tool_name": "t0"}))
        assert messages(found) == ["record 0", "record 6"]
        found, _ = await store.list_logs(LogQuery(fields={"runId": "run-b", "step": "7"}))
        assert messages(found) == ["record 7"]
        found, _ = await store.list_logs(LogQuery(since=logs[8].logged_at, descending=True))
        assert messages(found) == ["record 9", "record 8"]
        assert (await store.list_logs(LogQuery(levels=())))[1] == 0
        old = StoredLog(now - timedelta(days=4), "info", "old", "keel.tests")
        pruned = await store.save_logs([old], retention=LogRetention(max_age=timedelta(days=3), max_records=8))
        assert pruned == 4  # the old one, and the three written first beyond eight (records 9, 8 and 7)
        found, total = await store.list_logs(LogQuery())
        assert total == 7 and messages(found) == [f"record {i}" for i in range(7)]
    finally:
        await store.close()


# --- metrics ---------------------------------------------------------------------------------------------------


async def test_mastras_client_reads_the_metrics_worked_out_from_a_runs_kept_spans(
    traced_run: TracedRun, storage: Storage, client_js: Path
) -> None:
    run_id = traced_run.run_id
    chats = [s for s in (await storage.list_spans(SpanQuery(run_id=run_id), per_page=100))[0] if s.name == "chat demo"]
    tokens_in = sum(s.attributes["gen_ai.usage.input_tokens"] for s in chats)
    async with serving(create_api(demo_app, traced_run.keel, storage), "127.0.0.1", free_port()) as url:
        got = await Api(url, traced_run.keel, storage).js(
            """
            const runId = vars.runId;
            const names = await client.getMetricNames();
            const tokens = await client.getMetricAggregate({
              name: ["mastra_model_total_input_tokens"], aggregation: "sum", filters: { runId } });
            const compared = await client.getMetricAggregate({
              name: ["mastra_model_duration_ms"], aggregation: "count", comparePeriod: "previous_day",
              filters: { runId, timestamp: { start: new Date(Date.now() - 3600e3), end: new Date() } } });
            const tools = await client.getMetricBreakdown({
              name: ["mastra_tool_duration_ms"], groupBy: ["entityName", "status"], aggregation: "count" });
            const series = await client.getMetricTimeSeries({
              name: ["mastra_model_duration_ms", "mastra_agent_duration_ms"], interval: "1h", aggregation: "count",
              filters: { runId } });
            const p50 = await client.getMetricPercentiles({
              name: "mastra_model_duration_ms", percentiles: [0.5, 1], interval: "1d", filters: { runId } });
            const keys = await client.getMetricLabelKeys({ metricName: "mastra_tool_duration_ms" });
            const nobody = await client.getMetricAggregate({
              name: ["mastra_model_total_input_tokens"], aggregation: "sum", filters: { userId: "u-1" } });
            return { names, tokens, compared, tools, series, p50, keys, nobody };
            """,
            runId=run_id,
        )
        async with httpx.AsyncClient(base_url=url) as http:
            listed = (await http.get("/api/observability/metrics", params={"runId": run_id, "perPage": 100})).json()
    assert {"mastra_agent_duration_ms", "mastra_model_duration_ms", "mastra_model_total_input_tokens",
            "mastra_model_total_output_tokens", "mastra_tool_duration_ms"} <= set(got["names"]["names"])  # fmt: skip
    assert got["tokens"]["value"] == tokens_in > 0
    assert got["compared"]["value"] == 2 and got["compared"]["previousValue"] == 0  # nothing a day earlier
    assert got["compared"]["changePercent"] is None
    assert got["tools"]["groups"] == [
        {"dimensions": {"entityName": "save_note", "status": "ok"}, "value": 1, "estimatedCost": None, "costUnit": None}
    ]
    assert [(s["name"], [p["value"] for p in s["points"]]) for s in got["series"]["series"]] == [
        ("mastra_agent_duration_ms", [1]),
        ("mastra_model_duration_ms", [2]),
    ]
    [median, top] = got["p50"]["series"]
    assert (median["percentile"], top["percentile"]) == (0.5, 1)
    assert top["points"][0]["value"] >= median["points"][0]["value"] > 0
    assert got["keys"] == {"keys": ["status"]}
    assert got["nobody"]["value"] is None
    assert listed["pagination"]["total"] == len(listed["metrics"]) == 8  # 3 per model call, a tool call, the run
    record = next(m for m in listed["metrics"] if m["name"] == "mastra_model_total_input_tokens")
    assert record["runId"] == run_id and record["entityType"] == "agent" and record["entityName"] == "demo"
    assert record["provider"] == "scripted" and record["model"] == "demo" and record["labels"] == {"status": "ok"}


def samples(text: str, name: str) -> dict[str, float]:
    """The samples of metric `name` in a Prometheus text page, by their labels (without `service_name`)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match:
            labels = ",".join(p for p in (match.group(1) or "").split(",") if p and not p.startswith("service_name"))
            found[labels] = float(match.group(2))
    return found


async def test_a_worker_serves_temporals_and_keels_metrics_on_its_prometheus_port(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    port = free_port()
    env = {"KEEL_METRICS_PORT": str(port), "MY_SERVICE_API_KEY": API_KEY}
    endpoint = f"http://127.0.0.1:{port}/metrics"
    app_ref = "tests.test_logs_and_metrics:app"
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, app=app_ref, env=env) as worker:
        keel = KeelClient(client, task_queue=task_queue)
        await keel.wait_for_worker(30)
        async with httpx.AsyncClient(timeout=10) as http:

            async def scrape() -> str:
                response = await http.get(endpoint)
                assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
                return response.text

            run_id = await keel.start_run("demo", "remember the milk")
            [call_id] = await wait_for_pending(keel, run_id)
            waiting = await scrape()
            assert samples(waiting, "keel_approvals_waiting") == {'agent="demo"': 1}
            await keel.approve(run_id, call_id)
            await keel.result(run_id)
            await keel.result(await keel.start_run("leaky", "try"))
            with pytest.raises(Exception, match="the model refused"):
                await keel.result(await keel.start_run("broken", "anything"))
            first = await scrape()
            await keel.result(await keel.start_run("leaky", "again"))
            second = await scrape()
        worker.send_signal(signal.SIGTERM)
        await asyncio.to_thread(worker.wait, 30)

    # The Temporal SDK's own metrics, beside Keel's.
    assert samples(first, "temporal_workflow_task_execution_latency_count")
    assert sum(samples(first, "temporal_workflow_completed").values()) >= 2
    assert sum(samples(first, "temporal_activity_execution_latency_count").values()) >= 1

    assert samples(first, "keel_approvals_waiting") == {'agent="demo"': 0}
    assert samples(first, "keel_runs_started") == {'agent="demo"': 1, 'agent="leaky"': 1, 'agent="broken"': 1}
    assert samples(first, "keel_runs_completed") == {'agent="demo"': 1, 'agent="leaky"': 1}
    assert samples(first, "keel_runs_failed") == {'agent="broken"': 1}
    assert samples(first, "keel_tool_calls") == {'agent="demo",tool="save_note"': 1, 'agent="leaky",tool="leak"': 1}
    assert samples(first, "keel_tool_errors") == {'agent="leaky",tool="leak"': 1}
    latency = samples(first, "keel_step_latency_count")
    assert latency == {'agent="demo",model="scripted/demo"': 2, 'agent="leaky",model="scripted/leaky"': 2}
    tokens = samples(first, "keel_model_tokens")
    assert tokens['agent="demo",model="scripted/demo",type="input"'] > 0
    assert tokens['agent="demo",model="scripted/demo",type="output"'] > 0
    # A run later, Keel's counters have grown.
    assert samples(second, "keel_runs_started")['agent="leaky"'] == 2
    assert samples(second, "keel_tool_errors") == {'agent="leaky",tool="leak"': 2}
    leaky_input = 'agent="leaky",model="scripted/leaky",type="input"'
    assert samples(second, "keel_model_tokens")[leaky_input] > tokens[leaky_input]
    assert API_KEY not in first + second
    assert f"keel worker: metrics at {endpoint}" in (tmp_path / "worker.log").read_text()


def test_instruments_named_as_opentelemetry_names_them_are_served_under_prometheus_names(tmp_path: Path) -> None:
    """The HTTP instrumentations record `http.server.request.duration` (labels `http.request.method`, ...): with
    metrics and tracing on, Temporal's meter refused the dotted name, logged an error (with a backtrace) at every
    request and dropped the values. A process of its own: its Temporal runtime serves the port."""
    port = free_port()
    script = f"""
import time, urllib.request
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from keel.client.metric_bridge import TemporalMeterProvider
runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address="127.0.0.1:{port}")))
meter = TemporalMeterProvider(runtime.metric_meter).get_meter("opentelemetry.instrumentation.fastapi")
for _ in range(3):
    meter.create_histogram("http.server.request.duration", unit="s").record(0.25, {{"http.request.method": "GET"}})
    meter.create_up_down_counter("http.server.active_requests").add(1, {{"url.scheme": "http"}})
time.sleep(0.3)
print(urllib.request.urlopen("http://127.0.0.1:{port}/metrics").read().decode())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "not a valid metric name" not in done.stderr and "ERROR" not in done.stderr, done.stderr[:2000]
    assert samples(done.stdout, "http_server_request_duration_count") == {'http_request_method="GET"': 3}
    assert samples(done.stdout, "http_server_active_requests") == {'url_scheme="http"': 3}


def test_with_no_metrics_port_a_worker_serves_none_and_loads_none_of_it(dev_server: DevServer, tmp_path: Path) -> None:
    """A separate process: this one has loaded OpenTelemetry for the other tests."""
    script = """
import asyncio, sys
from keel.app.demo import app
from keel.client import metrics
from keel.client.connection import connect
from keel.protocol import metrics as keel_metrics
from keel.storage import SQLiteStorage
from keel.worker import build_worker

async def main():
    assert metrics.configure() is None
    client = await connect(sys.argv[1])
    storage = SQLiteStorage(sys.argv[2])
    await storage.init()
    async with build_worker(client, app, storage, task_queue="metrics-off"):
        await asyncio.sleep(0.2)
    await storage.close()
    unwanted = ("opentelemetry", "prometheus", "keel.client.metric_bridge")
    loaded = sorted(m for m in sys.modules if m.startswith(unwanted))
    print(keel_metrics.enabled(), loaded)

asyncio.run(main())
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "KEEL_METRICS", "KEEL_LOGS"))}
    proc = subprocess.run(
        [sys.executable, "-c", script, dev_server.cfg.address, str(tmp_path / "keel.db")],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "[]"]


async def test_a_nul_in_a_looked_up_run_id_is_a_400(storage: Storage, client: Client, task_queue: str) -> None:
    """http-api.md: a NUL in an id that is looked up is a 400 naming it; `/api/logs/a%00b` answered 200, empty."""
    api = create_api(app, KeelClient(client, task_queue=task_queue), storage)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://keel") as http:
        answer = await http.get("/api/logs/a%00b", params={"transportId": "keel"})
        assert answer.status_code == 400 and answer.json()["error"] == "Invalid path parameters", answer.text
        assert (await http.get("/api/logs/ab", params={"transportId": "keel"})).status_code == 200


async def test_a_long_local_step_does_not_warn_that_its_workflow_task_took_long(
    client: Client,
    dev_server: DevServer,
    task_queue: str,
    tmp_path: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local step holds its run's workflow task open for as long as the model call or the tools take, and the
    task heartbeats 8 s in: the SDK warned `[TMPRL1104] ... Workflow task duration exceeded 5 seconds` for every
    step longer than that (one a model answer of a few seconds reaches), a warning on the worker's console that
    says nothing is wrong. Keel's workers warn past a task's own timeout (10 s) instead."""
    from keel.plugin import TASK_DURATION_WARN_ENV
    from tests.apps import app as test_app
    from tests.conftest import worker_subprocess

    monkeypatch.delenv(TASK_DURATION_WARN_ENV, raising=False)  # an in-process worker of this session set it
    keel = KeelClient(client, task_queue=task_queue, app=test_app)
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, env={"KEEL_TEST_TOOL_SECONDS": "9"}):
        run_id = await keel.start_run("napper", "nap")
        result = await keel.result(run_id)
    assert result.text == "woke after 3 naps"
    history = await client.get_workflow_handle(run_id).fetch_history()
    events = history.events
    started = {
        e.event_id: e.event_time.ToDatetime() for e in events if e.HasField("workflow_task_started_event_attributes")
    }
    longest = max(
        e.event_time.ToDatetime() - started[e.workflow_task_completed_event_attributes.started_event_id]
        for e in history.events
        if e.HasField("workflow_task_completed_event_attributes")
    )
    assert longest >= timedelta(seconds=5)  # the step held its task open past the SDK's default threshold
    log = (tmp_path / "worker.log").read_text(errors="replace")
    assert "keel worker: task queue" in log  # the log is the worker's
    assert "TMPRL1104" not in log, log[-2000:]
