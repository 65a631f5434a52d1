"""Arize Phoenix as the real OTLP receiver and trace UI: Keel's processes (a worker, the HTTP API, the `keel`
command) export over OTLP/HTTP as a user would set them up (`OTEL_TRACES_EXPORTER=otlp`,
`OTEL_EXPORTER_OTLP_ENDPOINT`), and the test reads the traces back through Phoenix's own REST API, as Phoenix
stored and interpreted them. `keel dev --phoenix` starts it beside the stack and stops it with the stack.

Phoenix runs once per session (tests/phoenix.py), installed into its own virtualenv inside .venv on first use; each
test sends its spans to a Phoenix project of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from keel.app.demo import CODER_STEPS
from keel.client import KeelClient
from keel.client.devserver import DevServer, is_listening
from keel.client.phoenix_server import RunningPhoenix
from tests.conftest import ROOT, free_port, worker_subprocess
from tests.dev_services import keel_dev, processes_naming
from tests.phoenix import PhoenixProject, Tree, at, phoenix_server
from tests.test_agent_run import wait_for_pending
from tests.test_cli_day_to_day import KEEL
from tests.test_crash_recovery import kill9, wait_for_file_lines
from tests.test_tracing import keel_command

# The first test to ask for Phoenix installs it (about a minute from PyPI, once per .venv) within its own time.
pytestmark = pytest.mark.timeout(600)

DEMO_APP = "keel.app.demo:app"
API_KEY = "sk-planted-5b0e7c2f91d34a6c8e17"


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPhoenix]:
    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as running:
        yield running


def plain_env() -> dict[str, str]:
    """This process's environment without its tracing settings (tests in this process set some)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


@asynccontextmanager
async def keel_serve(env: dict[str, str], port: int) -> AsyncIterator[subprocess.Popen[str]]:
    """`keel serve --app keel.app.demo:app` on `port` until the block ends (then SIGTERM: a clean stop exports
    what it still buffers)."""
    proc = subprocess.Popen(  # noqa: ASYNC220 (read from a thread below)
        [KEEL, "serve", "--app", DEMO_APP, "--port", str(port)], env=env, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(60):
            line = await asyncio.to_thread(proc.stdout.readline)
        assert "HTTP API on" in line, f"keel serve: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        yield proc
    finally:
        stop(proc)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def settle_approving(keel: KeelClient, env: dict[str, str], run_id: str) -> str:
    """Wait for the run's result, approving with `keel approve` whatever it waits on (the coder's command needs
    an approval where bubblewrap is missing); its text."""
    async with asyncio.timeout(120):
        while (await keel.describe(run_id)).status not in ("completed", "failed"):
            for call in await keel.pending_tool_calls(run_id):
                await keel_command(env, "approve", run_id, call.tool_call_id, "--no-follow")
            await asyncio.sleep(0.1)
    return (await keel.result(run_id)).text


async def test_a_run_over_http_with_an_approval_and_a_coder_run_are_one_phoenix_trace_each(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path, phoenix: RunningPhoenix
) -> None:
    """The demo run is started and approved over HTTP (the API in a process of its own, with a key), the coder
    run by `keel run`; a worker process runs both. Phoenix holds: the demo run's trace headed by the HTTP request
    that started it, the coder run's headed by the command's start, each with its steps, model calls (Phoenix's
    LLM spans, with the token counts it read) and tools (TOOL spans), parents across processes; the approval
    request is a trace of its own (the caller's), answered in the run's trace; no span holds the key."""
    project = PhoenixProject.new(phoenix)
    keel_env = {
        **plain_env(),
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_TASK_QUEUE": task_queue,
        "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
        "KEEL_DATA_DIR": str(data_dir),
    }
    api_port = free_port()
    api_env = {**keel_env, **project.env("keel-api"), "KEEL_API_KEYS": json.dumps({API_KEY: ["*"]})}
    keel = KeelClient(client, task_queue=task_queue)  # the test's own client does not trace
    with worker_subprocess(
        dev_server, task_queue, tmp_path, data_dir, app=DEMO_APP, env={**keel_env, **project.env("keel-worker")}
    ) as worker:
        await keel.wait_for_worker(30)
        async with keel_serve(api_env, api_port) as api:
            headers = {"authorization": f"Bearer {API_KEY}"}
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", headers=headers, timeout=60) as http:
                answer = await http.post("/api/agents/demo/generate", json={"messages": "remember the milk"})
                first = answer.json()
                assert first["finishReason"] == "suspended", first
                run_id, call_id = first["runId"], first["suspendPayload"]["toolCallId"]
                decision = {"runId": run_id, "toolCallId": call_id}
                approved = (await http.post("/api/agents/demo/approve-tool-call-generate", json=decision)).json()
                assert approved["finishReason"] == "stop", approved
            coder_id = f"run-coder-{uuid.uuid4().hex[:8]}"
            cli_env = {**keel_env, **project.env("keel-cli")}
            await keel_command(cli_env, "run", "coder", "work on hello.py", "--run-id", coder_id, "--no-follow",
                               "--app", DEMO_APP)  # fmt: skip
            assert (await settle_approving(keel, cli_env, coder_id)).startswith("Done.")
            stop(api)
            assert api.returncode == 0
        stop(worker)
        assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]

    def arrived(spans: list[dict[str, Any]]) -> bool:
        ended = [s for s in spans if s["name"] == "CompleteWorkflow:AgentRun"]
        return {s["attributes"].get("temporalWorkflowID") for s in ended} == {run_id, coder_id}

    tree = Tree(await project.wait_for(arrived))
    assert API_KEY not in json.dumps(tree.spans)

    # The demo run: one trace, headed by the request that started it.
    start = run_start(tree, run_id)
    demo = tree.trace_of(start)
    [root] = tree.roots(demo)
    assert root["name"] == "POST /api/agents/{agent_id}/generate"
    assert {k: root["attributes"][k] for k in ("http.request.method", "http.route", "http.response.status_code")} == {
        "http.request.method": "POST",
        "http.route": "/api/agents/{agent_id}/generate",
        "http.response.status_code": 200,
    }
    assert tree.ancestors(start)[-1] == root["name"]
    # Every span the worker made for the run is in that trace; only the approval request's own are not.
    elsewhere = {s["name"] for s in tree.spans if of_run(s, run_id) and s not in demo}
    assert elsewhere == {"StartWorkflowUpdate:approve_tool_call"}
    assert_steps(tree, demo, start, model="demo", tools=["save_note"])
    [tool] = [s for s in demo if s["name"] == "execute_tool save_note"]
    assert tool["attributes"]["gen_ai.tool.call.id"] == call_id
    # The approval: the run's wait for it, a span of its trace with the decision; the request that decided it,
    # a trace of its own, whose update the run answered in its trace.
    approval = tree.one_of(demo, "approval save_note")
    assert tree.parent(approval) is start
    assert {k: v for k, v in approval["attributes"].items() if k.startswith("keel.approval.")} == {
        "keel.approval.decision": "approved",
        "keel.approval.channel": "update",
    }
    assert approval["attributes"]["keel.tool.call.id"] == call_id
    assert at(approval, "start_time") < at(approval, "end_time") <= at(tool, "start_time")
    [request] = [s for s in tree.spans if s["name"] == "StartWorkflowUpdate:approve_tool_call"]
    assert tree.ancestors(request)[-1] == "POST /api/agents/{agent_id}/approve-tool-call-generate"
    assert tree.parent(tree.one("HandleUpdate:approve_tool_call")) is start

    # The coder run: one trace, headed by `keel run`'s start of the workflow.
    start = run_start(tree, coder_id)
    coder = tree.trace_of(start)
    assert tree.roots(coder) == [start]
    assert {s["name"] for s in tree.spans if of_run(s, coder_id) and s not in coder} == set()
    assert_steps(tree, coder, start, model="coder", tools=[name for name, _ in CODER_STEPS])
    for tool in (s for s in coder if s["name"].startswith("execute_tool ")):
        [operation] = [s for s in coder if s["parent_id"] == tool["context"]["span_id"]]
        assert operation["name"].startswith("workspace ")

    # Phoenix's own rows for the two traces, with the token counts it summed from the model calls.
    rows = {row["trace_id"]: row for row in await project.traces()}
    for spans in (demo, coder):
        chats = [s for s in spans if s["span_kind"] == "LLM"]
        row = rows[spans[0]["context"]["trace_id"]]
        assert row["token_count_prompt"] == sum(c["attributes"]["llm.token_count.prompt"] for c in chats)
        assert row["token_count_completion"] == sum(c["attributes"]["llm.token_count.completion"] for c in chats)


def phoenix_processes(directory: Path) -> list[int]:
    """The pids of the processes serving Phoenix from `directory` (its working directory, in their environment)."""
    return processes_naming(f"PHOENIX_WORKING_DIR={directory.resolve()}", "environ")


def of_run(span: dict[str, Any], run_id: str) -> bool:
    attributes = span["attributes"]
    return run_id in (attributes.get("temporalWorkflowID"), attributes.get("keel.run.id"))


def run_start(tree: Tree, run_id: str) -> dict[str, Any]:
    [start] = [s for s in tree.named("StartWorkflow:AgentRun") if s["attributes"]["temporalWorkflowID"] == run_id]
    return start


def assert_steps(
    tree: Tree, spans: list[dict[str, Any]], start: dict[str, Any], *, model: str, tools: list[str]
) -> None:
    """The run's workflow (made by the worker) under the client's start; each step an activity started by the
    workflow and run by the worker; in the steps, the model calls (LLM spans with their token counts) and the
    tools (TOOL spans), in the order the model asked for them."""
    assert tree.parent(tree.one_of(spans, "RunWorkflow:AgentRun")) is start
    chats = sorted((s for s in spans if s["name"] == f"chat {model}"), key=lambda s: at(s, "start_time"))
    called = sorted((s for s in spans if s["name"].startswith("execute_tool ")), key=lambda s: at(s, "start_time"))
    assert [s["name"].removeprefix("execute_tool ") for s in called] == tools
    assert len(chats) == len(tools) + 1
    for chat in chats:
        attributes = chat["attributes"]
        assert chat["span_kind"] == "LLM"
        assert attributes["llm.token_count.prompt"] == attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["llm.token_count.completion"] == attributes["gen_ai.usage.output_tokens"] > 0
        assert attributes["gen_ai.request.model"] == model
    for tool in called:
        assert tool["span_kind"] == "TOOL"
        assert tool["attributes"]["tool.name"] == tool["name"].removeprefix("execute_tool ")
    for span in (*chats, *called):
        step, started, *_ = tree.ancestors(span)
        assert step.startswith("RunActivity:keel.") and started == step.replace("Run", "Start", 1)
        assert tree.parent(tree.parent(tree.parent(span))) is start


async def test_keel_dev_phoenix_exports_the_stacks_traces_to_the_phoenix_it_prints_and_stops_it(
    dev_server: DevServer, tmp_path: Path
) -> None:
    phoenix_port, api_port, data = free_port(), free_port(), tmp_path / "data"
    env = {**plain_env(), "OTEL_BSP_SCHEDULE_DELAY": "100"}
    url = f"http://127.0.0.1:{phoenix_port}"
    async with keel_dev(
        "phoenix", phoenix_port, dev_server=dev_server, data=data, api_port=api_port, env=env, timeout=120
    ) as text:
        assert f"Phoenix (traces) at {url}, project 'keel'; data in {data.resolve() / 'phoenix'}" in text
        # The line to copy into another terminal names the project too: without it, a run started there was
        # filed (whole, worker's spans and all) under Phoenix's "default" project.
        [exports] = [line for line in text.splitlines() if line.startswith("  in other terminals: export ")]
        assert f"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={url}/v1/traces" in exports
        assert "OTEL_RESOURCE_ATTRIBUTES=openinference.project.name=keel" in exports
        assert "OTEL_TRACES_EXPORTER=" in exports
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=60) as http:
            answer = (await http.post("/api/agents/demo/generate", json={"messages": "remember the milk"})).json()
            decision = {"runId": answer["runId"], "toolCallId": answer["suspendPayload"]["toolCallId"]}
            approved = (await http.post("/api/agents/demo/approve-tool-call-generate", json=decision)).json()
            assert approved["finishReason"] == "stop", approved
        project = PhoenixProject(RunningPhoenix(url, 0, 0, data / "phoenix"), "keel")

        def ended(spans: list[dict[str, Any]]) -> bool:
            return any(s["name"] == "CompleteWorkflow:AgentRun" for s in spans)

        tree = Tree(await project.wait_for(ended))
        assert len(phoenix_processes(data / "phoenix")) == 1
        start = run_start(tree, answer["runId"])
        assert [s["name"] for s in tree.roots(tree.trace_of(start))] == ["POST /api/agents/{agent_id}/generate"]
        assert [s["span_kind"] for s in tree.trace_of(start) if s["name"] == "execute_tool save_note"] == ["TOOL"]
    assert not is_listening("127.0.0.1", phoenix_port)
    assert phoenix_processes(data / "phoenix") == []
    assert not (data / "phoenix" / "phoenix.pid").exists()


async def test_a_worker_killed_mid_tool_leaves_one_trace_the_next_worker_continues_with_the_retry_as_attempt_2(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path, phoenix: RunningPhoenix
) -> None:
    """`kill -9` of the worker while an approved tool runs: the next worker retries it (attempt 2, on its span and
    its tool's) and finishes the run, and Phoenix shows one trace, what the killed worker exported before it died
    (its approval among it) and what the next one made after, under the trace id `keel run` started."""
    project = PhoenixProject.new(phoenix)
    cli_env = {
        **plain_env(),
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_TASK_QUEUE": task_queue,
        "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
        **project.env("keel-cli"),
    }
    worker_env = {"KEEL_TEST_TOOL_SECONDS": "3", **project.env("keel-worker")}
    keel = KeelClient(client, task_queue=task_queue)
    run_id = f"run-killed-{uuid.uuid4().hex[:8]}"
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, env=worker_env) as first:
        await keel.wait_for_worker(30)
        await keel_command(cli_env, "run", "ledger", "entry-1", "--run-id", run_id, "--no-follow",
                           "--app", "tests.apps:app")  # fmt: skip
        [call_id] = await wait_for_pending(keel, run_id)
        await keel_command(cli_env, "approve", run_id, call_id, "--no-follow")
        await wait_for_file_lines(data_dir / "started.log", 1)
        await project.wait_for(lambda spans: any(s["name"] == "approval slow_ledger" for s in spans))
        kill9(first)  # mid-tool: its attempt's spans never end, so they are never exported
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, env=worker_env) as second:
        async with asyncio.timeout(60):
            assert (await keel.result(run_id)).text == "ledger: {'lines': 1}"
        stop(second)
        assert second.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]
    assert [line.split()[1] for line in (data_dir / "started.log").read_text().splitlines()] == [
        "attempt=1",
        "attempt=2",
    ]

    tree = Tree(await project.wait_for(lambda spans: any(s["name"] == "CompleteWorkflow:AgentRun" for s in spans)))
    start = run_start(tree, run_id)
    run = [s for s in tree.spans if of_run(s, run_id)]
    assert {s["context"]["trace_id"] for s in run} == {start["context"]["trace_id"]}
    assert tree.roots(tree.trace_of(start)) == [start]
    # The killed worker's spans (the run, its first step, the approval) and the next worker's, in that one trace.
    assert tree.parent(tree.one("RunWorkflow:AgentRun")) is start
    approval = tree.one("approval slow_ledger")
    assert approval["attributes"]["keel.approval.decision"] == "approved"
    assert tree.parent(approval) is start
    tool = tree.one("execute_tool slow_ledger")  # attempt 1 died with its worker, unended: never exported
    assert tool["attributes"]["keel.tool.attempt"] == 2
    retried = tree.parent(tool)
    assert retried["name"].startswith("RunActivity:") and retried["attributes"]["temporalActivityAttempt"] == 2
    assert tree.parent(retried)["name"] == retried["name"].replace("Run", "Start", 1)
    assert at(approval, "end_time") <= at(tool, "start_time")
    steps = [s for s in tree.named("RunActivity:keel.model_step")]
    assert steps and all(s["attributes"]["temporalActivityAttempt"] == 1 for s in steps)
    assert tree.one("CompleteWorkflow:AgentRun")["context"]["trace_id"] == start["context"]["trace_id"]


SCREENSHOTS = Path(os.environ.get("KEEL_SCREENSHOT_DIR", ROOT / ".keel" / "screenshots"))
"""Where the screenshot test leaves its PNG (under .keel/, which git ignores)."""
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
)  # fmt: skip


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.skip("chromium missing: `make chromium` installs Debian's with apt (as root)")
    return found


async def test_a_chromium_screenshot_of_phoenix_shows_a_keel_trace(
    client: Client, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path, phoenix: RunningPhoenix
) -> None:
    """Phoenix's own UI, in headless Chromium, renders a demo run's trace (its span tree, the approval wait
    selected): the rendered page names the spans, and the screenshot is left in `SCREENSHOTS` to look at."""
    browser = chromium()
    project = PhoenixProject.new(phoenix)
    cli_env = {
        **plain_env(),
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_TASK_QUEUE": task_queue,
        "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
        "KEEL_DATA_DIR": str(data_dir),
        **project.env("keel-cli"),
    }
    keel = KeelClient(client, task_queue=task_queue)
    run_id = f"run-shown-{uuid.uuid4().hex[:8]}"
    with worker_subprocess(
        dev_server, task_queue, tmp_path, data_dir, app=DEMO_APP, env={**cli_env, **project.env("keel-worker")}
    ) as worker:
        await keel.wait_for_worker(30)
        await keel_command(cli_env, "run", "demo", "remember the milk", "--run-id", run_id, "--no-follow",
                           "--app", DEMO_APP)  # fmt: skip
        assert (await settle_approving(keel, cli_env, run_id)).startswith("Saved your note.")
        stop(worker)
    tree = Tree(await project.wait_for(lambda spans: any(s["name"] == "CompleteWorkflow:AgentRun" for s in spans)))
    trace_id = run_start(tree, run_id)["context"]["trace_id"]
    async with httpx.AsyncClient(base_url=phoenix.url, timeout=30) as http:
        project_id = (await http.get(f"/v1/projects/{project.name}")).json()["data"]["id"]
    approval = tree.one("approval save_note")["id"]  # Phoenix's node id of the span, which the page selects
    page = f"{phoenix.url}/projects/{project_id}/traces/{trace_id}?selectedSpanNodeId={approval}"
    shot = SCREENSHOTS / "phoenix-trace.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.unlink(missing_ok=True)
    # Virtual time lets the page's scripts fetch and render before the capture (the budget is not wall time).
    common = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1600,1000",
              "--virtual-time-budget=10000"]  # fmt: skip
    for action in ("--dump-dom", f"--screenshot={shot}"):
        done = await asyncio.to_thread(
            subprocess.run, [*common, action, page], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        if action == "--dump-dom":
            dom = done.stdout
    assert trace_id in dom
    for name, times in (("approval save_note", 1), ("execute_tool save_note", 1), ("chat demo", 2)):
        assert dom.count(f">{name}<") >= times, name
    # The selected span's attributes (the page breaks a long key with <wbr>s).
    assert ">keel.approval.decision<" in dom.replace("<wbr>", "") and ">approved<" in dom
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
