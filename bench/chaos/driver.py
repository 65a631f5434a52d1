"""The chaos run: a stack (a Temporal dev server, a durable PostgreSQL, SeaweedFS as the S3 payload store, two
`keel worker --join` processes of `bench.chaos.app`, the HTTP API), a seeded random mix of runs kept at a number in
flight, a fault injector, and the checker.

Faults, one at a time at seeded random moments: a worker killed with SIGKILL (started again after a while), a
worker stopped with SIGSTOP for a few seconds, the HTTP API (`keel serve`) killed with SIGKILL and started again,
the Temporal server killed with SIGKILL and started again on its database, PostgreSQL killed with SIGKILL and
started again (crash recovery from its WAL), SeaweedFS killed with SIGKILL and started again on its data, and the
`files` runs' workspace disk (a tmpfs of its own, where this process may mount one) filled to the last byte for
a few seconds. The `chat` runs' model sits behind a real LiteLLM proxy that fails about two calls in five (429s,
500s mid-stream, slow streams). Controller sessions (`session`, `chatter`) are driven through `AgentController`
sessions. Runs are driven through `KeelClient` (approvals by update), the `temporal` CLI (approvals by signal)
and the `mcp` SDK (`mcp`: a `charge` called as an MCP tool, the call made again with its call id after each API
death), every call retried through the outages, as a client that must not give up would; half the `busy` runs are
also read over HTTP (`observe`) while they run, reconnecting after each drop with the number of chunks read, and
half the `batch` runs by `@mastra/client-js` (`run.observe({offset})`, bench/chaos/observe_workflow.mjs).

What is checked, per run, against the ledger (`bench/chaos/app.py`):
- it ended (none stuck) with the answer it must have: the decision it was given, what its tools returned;
- `charge` (not idempotent) ran at most once per call, exactly once when the run (or the MCP call) says it
  charged, never when it says declined; a lost charge is reported as lost (and counted so), never run twice;
- a `bulky` run read its 300 KiB message (kept in S3) whole in every step;
- a `files` run left its notes exactly as edited and its command's line in `cmd.log` once (at most once when
  the command was lost; never when it failed, as on a full disk);
- a `session` turn pledged once when it says so, never when declined, at most once when it says lost;
- a `chatter` session's messages each in its thread once and answered once (sent into busy turns);
- an idempotent tool ran at least once per call of an ended run, and every re-run was told `attempt > 1`;
- each stream read through API kills is the run's whole stream: every chunk once, in order;
- at the end, visibility counts no open run of the mix (its count equals the driver's: zero).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

from bench.chaos import app as chaos_app
from keel import AgentController
from keel.client import KeelClient
from keel.client.api.mcp_servers import CALL_ID_META, WORKFLOW_ID_META
from keel.client.controller import SessionError
from keel.client.devserver import DevServer, DevServerConfig
from keel.client.errors import RunFailed, RunIdInUse, ToolCallRejected
from keel.client.s3_server import LocalS3Server
from keel.client.workflows import ResumeRefused, Workflows
from keel.protocol import names
from keel.storage import open_storage
from keel.workflows.tool_call import tool_call_workflow_id
from tests.conftest import free_port, npm_installed
from tests.pg import PostgresServer, postgres_cluster

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CHATTER_MESSAGES = 3
KINDS = {"shop": 4, "busy": 3, "batch": 3, "mcp": 2, "bulky": 2, "files": 2, "session": 2, "chat": 2, "chatter": 1}
"""Run kinds and their weights in the mix."""
FAULTS = {
    "worker-kill": 4, "worker-stop": 2, "api-kill": 2, "temporal-kill": 2, "postgres-kill": 2, "s3-kill": 2,
    "disk-full": 2, "model-kill": 2,
}  # fmt: skip
WORKSPACE_DISK = "64m"
"""The `files` runs' workspace: a tmpfs of this size (where this process may mount one), which `disk-full` fills."""
STREAMED = 0.5
"""The share of `busy` runs whose HTTP stream is read while they run."""
JS_STREAMED = 0.5
"""The share of `batch` runs read by `@mastra/client-js` while they run."""
OBSERVE_JS = Path(__file__).with_name("observe_workflow.mjs")
CLIENT_JS = ROOT / "tests" / "http_api" / "js"
"""Where `@mastra/client-js` is installed (`npm ci` on first use, as the HTTP API's tests do)."""
MCP_CALL_DEADLINE = timedelta(seconds=45)
"""How long the harness's MCP client waits for one attempt of a call before making it again (same call id)."""
GRACE_SECONDS = 180.0
"""After the mix stops: how long the runs in flight have to end before each still open counts as stuck."""
T = TypeVar("T")


@dataclass
class Config:
    minutes: float = 10.0
    seed: int = 1
    in_flight: int = 20
    fault_every: float = 6.0
    """Mean seconds between faults."""
    plant: str = ""
    """A planted defect (`retried-charge`): the checker must fail."""
    crash_one_in: int = 6
    out: Path | None = None


@dataclass
class RunRecord:
    kind: str
    tag: str
    run_id: str
    decision: str | None = None
    asked: Any = None
    """What the run asked for, where its answer must say it (a session's pledge: the cents)."""
    started: float = 0.0
    ended: float | None = None
    answer: Any = None
    error: str | None = None
    streamed: list[dict[str, Any]] | None = None
    """The run's chunks as a reader of its HTTP stream got them, reconnecting with its offset after each drop."""
    stream: list[dict[str, Any]] | None = None
    """The run's chunks read once more, whole, after it ended."""


@dataclass
class Report:
    runs: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    ended: int = 0
    stuck: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    lost_reported: int = 0
    open_in_visibility: int = 0
    streams: int = 0
    stream_gaps: list[str] = field(default_factory=list)
    streams_retimed: int = 0
    """Streams whole and in order whose workflow events' times differ from the run's (see `_untimed`)."""
    longest_run_seconds: float = 0.0
    longest_run: str = ""
    skipped_faults: dict[str, str] = field(default_factory=dict)
    """Fault kinds this machine cannot inject, and why."""
    seed: int = 0
    minutes: float = 0.0
    plant: str = ""

    @property
    def ok(self) -> bool:
        return not (self.stuck or self.wrong or self.duplicated or self.open_in_visibility or self.stream_gaps)


class Worker:
    """A process of the stack that a fault may kill and `keep_alive` starts again: a worker, or the HTTP API."""

    def __init__(self, name: str, env: dict[str, str], logs: Path, argv: list[str] | None = None) -> None:
        self.name, self.env, self.logs = name, env, logs
        self.argv = argv or [str(BIN / "keel"), "worker", "--app", "bench.chaos.app:app", "--join"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.logs / f"{self.name}-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


LITELLM_CONFIG = """
model_list:
  - model_name: chaos-model
    litellm_params: {model: keel-chaos/chaos-model}
litellm_settings:
  custom_provider_map:
    - {"provider": "keel-chaos", "custom_handler": handler.chaos_model}
"""
"""The proxy's config: the one model, served by `chaos_model` of `litellm_handler.py`, copied beside it as
`handler.py` (LiteLLM loads a custom handler from its config's folder)."""


class ModelProxy:
    """A LiteLLM proxy serving the runs' failing model (`bench/chaos/litellm_handler.py`) at `url`."""

    def __init__(self, work: Path) -> None:
        self.root = work / "litellm"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.root.mkdir(exist_ok=True)
        shutil.copy(Path(__file__).with_name("litellm_handler.py"), self.root / "handler.py")
        (self.root / "config.yaml").write_text(LITELLM_CONFIG)
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
               "PYTHONPATH": str(self.root)}  # fmt: skip
        with open(self.root / "proxy.log", "ab") as log:
            self.proc = subprocess.Popen(
                [str(BIN / "litellm"), "--config", "config.yaml", "--host", "127.0.0.1", "--port", str(self.port)],
                cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.port}/health/liveliness", timeout=2).status_code == 200:
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"LiteLLM proxy did not start: {(self.root / 'proxy.log').read_text()[-2000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Stack:
    def __init__(self, cfg: Config, work: Path, pg: PostgresServer) -> None:
        self.cfg, self.work, self.pg = cfg, work, pg
        self.temporal = DevServer(
            DevServerConfig(host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=work / "temporal")
        )
        self.s3 = LocalS3Server(work / "s3", free_port())
        self.model = ModelProxy(work)
        self.ledger = work / "ledger"
        self.ledger.mkdir()
        self.workspace = work / "workspace"
        self.workspace.mkdir()
        try:
            mounted = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={WORKSPACE_DISK}", "tmpfs", str(self.workspace)],
                capture_output=True,
            )
            self.small_disk = mounted.returncode == 0
        except FileNotFoundError:  # no `mount` here
            self.small_disk = False
        """Whether the workspace is a disk of its own to fill (`disk-full`): mounting needs root."""
        self.queue = f"chaos-{uuid.uuid4().hex[:8]}"
        self.env = {
            **os.environ,
            "KEEL_TEMPORAL_ADDRESS": self.temporal.cfg.address,
            "KEEL_TASK_QUEUE": self.queue,
            "KEEL_STORAGE_URL": pg.dsn,
            "CHAOS_LEDGER": str(self.ledger),
            "CHAOS_PLANT": cfg.plant,
            "CHAOS_CRASH_ONE_IN": str(cfg.crash_one_in),
            "CHAOS_WORKSPACE": str(self.workspace),
            "CHAOS_MODEL_URL": self.model.url,
            "PYTHONPATH": str(ROOT),
        }
        self.workers = [
            Worker(f"worker-{n}", {**self.env, "KEEL_DATA_DIR": str(work / f"data-{n}")}, work) for n in "ab"
        ]
        port = free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        serve = [str(BIN / "keel"), "serve", "--app", "bench.chaos.app:app", "--port", str(port)]
        self.api = Worker("api", {**self.env, "KEEL_DATA_DIR": str(work / "data-api")}, work, serve)

    async def up(self) -> None:
        await asyncio.to_thread(self.model.start)
        s3 = await asyncio.to_thread(self.s3.start)
        os.environ.update(s3.env())  # this driver's client reads and writes the payloads there too
        self.env.update(s3.env())
        for process in self.processes:
            process.env.update(s3.env())
        await self.temporal.start(reuse=False)
        for process in self.processes:
            process.start()

    @property
    def processes(self) -> list[Worker]:
        return [*self.workers, self.api]

    def down(self) -> None:
        """Everything stopped, each step whatever the one before raised (no process or mount left behind)."""
        with contextlib.ExitStack() as each:
            if self.small_disk:
                each.callback(subprocess.run, ["umount", "-l", str(self.workspace)], check=False)
            each.callback(self.model.stop)
            each.callback(self.s3.stop)
            each.callback(self.temporal.stop)
            for process in self.processes:
                each.callback(process.kill)

    async def keep_alive(self) -> None:
        """A worker or the API that died (a fault, or `charge` crashing a worker) is started again after a while."""
        while True:
            await asyncio.sleep(0.5)
            for process in self.processes:
                if not process.alive():
                    await asyncio.sleep(random.uniform(0.2, 1.5))
                    process.start()


async def retrying(call: Callable[[], Awaitable[T]], *, until: float, what: str) -> T:
    """`call` again through outages (Temporal or PostgreSQL down, no worker yet) until `until`."""
    delay = 0.2
    while True:
        try:
            return await call()
        except (RunIdInUse, ToolCallRejected, ResumeRefused, SessionError, RunFailed):  # answers, not outages
            raise
        except Exception as err:
            if time.monotonic() > until:
                raise TimeoutError(f"{what}: still failing: {err}") from err
            await asyncio.sleep(delay)
            delay = min(delay * 2, 3.0)


class Mix:
    def __init__(
        self, cfg: Config, stack: Stack, keel: KeelClient, workflows: Workflows, desk: AgentController
    ) -> None:
        self.cfg, self.stack, self.keel, self.workflows, self.desk = cfg, stack, keel, workflows, desk
        self.rng = random.Random(cfg.seed)
        self.runs: list[RunRecord] = []
        self.deadline = 0.0

    async def drive(self, kind: str, tag: str) -> RunRecord:
        run = RunRecord(kind, tag, f"chaos-{tag}", started=time.monotonic())
        self.runs.append(run)
        rng = random.Random(f"{self.cfg.seed}-{tag}")
        until = self.deadline
        try:
            async with asyncio.timeout(until - time.monotonic() + 60):  # a driver that hangs reports it as stuck
                await self._drive(run, rng, until)
        except Exception as err:
            run.error = f"{type(err).__name__}: {err}"
        run.ended = time.monotonic()
        return run

    async def _drive(self, run: RunRecord, rng: random.Random, until: float) -> None:
        if run.kind == "batch":
            if rng.random() >= JS_STREAMED:
                await self._batch(run, until)
                return
            watching = asyncio.create_task(self._watch_js(run, until))
            await self._batch(run, until)
            run.streamed = await watching
            handle = self.keel.temporal.get_workflow_handle(run.run_id)
            run.stream = await retrying(
                lambda: handle.query(names.EVENTS_QUERY, 0, result_type=list), until=until, what="events"
            )
        elif run.kind == "mcp":
            await self._mcp(run, rng, until)
        elif run.kind == "session":
            await self._session(run, rng, until)
        elif run.kind == "chatter":
            await self._chatter(run, rng, until)
        elif run.kind == "busy" and rng.random() < STREAMED:
            watching = asyncio.create_task(self._watch(run, until))
            await self._agent(run, rng, until)
            run.streamed = await watching
            run.stream = await self._watch(run, until, once=True)
        else:
            await self._agent(run, rng, until)

    async def _agent(self, run: RunRecord, rng: random.Random, until: float) -> None:
        message = {
            "shop": lambda: f"shop {run.tag} {rng.randint(1, 999)}",
            "busy": lambda: f"busy {run.tag}",
            "bulky": lambda: chaos_app.bulky_message(run.tag),
            "files": lambda: f"files {run.tag}",
            "chat": lambda: f"chat {run.tag}",
        }[run.kind]()
        with contextlib.suppress(RunIdInUse):  # an earlier attempt of this start went through
            await retrying(lambda: self.keel.start_run(run.kind, message, run_id=run.run_id), until=until, what="start")
        while True:
            settled = await retrying(lambda: self.keel.settle(run.run_id), until=until, what="settle")
            if settled.ended:
                break
            for call in settled.pending:
                run.decision = run.decision or rng.choice(["update", "signal", "decline"])
                await self._decide(run, call.tool_call_id, until)
        try:
            result = await retrying(lambda: self.keel.result(run.run_id), until=until, what="result")
        except RunFailed as failed:  # an end, not a stuck run: the check reports it as a wrong answer
            run.answer = str(failed)
            return
        run.answer = result.text

    async def _watch(self, run: RunRecord, until: float, *, once: bool = False) -> list[dict[str, Any]]:
        """The run's chunks over `POST /api/agents/:id/observe`, through API kills: after each dropped stream a
        new one from the number of chunks already read (`once`: one read from the start, of an ended run)."""
        got: list[dict[str, Any]] = []
        while True:
            try:
                async with httpx.AsyncClient(base_url=self.stack.api_url, timeout=httpx.Timeout(30, read=None)) as http:
                    body = {"runId": run.run_id, "offset": len(got)}
                    async with http.stream("POST", f"/api/agents/{run.kind}/observe", json=body) as response:
                        if response.status_code != 200:
                            raise RuntimeError(f"observe answered {response.status_code}")
                        async for line in response.aiter_lines():
                            if line == "data: [DONE]":
                                return got
                            if line.startswith("data: "):
                                got.append(json.loads(line[6:]))
            except (httpx.HTTPError, RuntimeError) as err:
                if time.monotonic() > until:
                    raise TimeoutError(f"observe {run.run_id}: {err}") from err
                if once:
                    got = []
                await asyncio.sleep(0.3)

    async def _watch_js(self, run: RunRecord, until: float) -> list[dict[str, Any]]:
        """The workflow run's events as `@mastra/client-js` reads them (`run.observe({offset})`), reconnecting
        after each dropped or ended stream from the number it has (bench/chaos/observe_workflow.mjs)."""
        observe = json.dumps({"baseUrl": self.stack.api_url, "workflowId": "batch", "runId": run.run_id})
        proc = await asyncio.create_subprocess_exec(
            "node", "--input-type=module", "-e", OBSERVE_JS.read_text(), cwd=CLIENT_JS,
            env={**os.environ, "OBSERVE": observe},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            async with asyncio.timeout(until - time.monotonic()):
                out, _ = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return [json.loads(line) for line in out.decode().splitlines() if line.strip()]

    async def _decide(self, run: RunRecord, call_id: str, until: float) -> None:
        if run.decision == "signal":
            decision = json.dumps({"toolCallId": call_id, "approved": True})
            argv = [str(BIN / "temporal"), "workflow", "signal", "--address", self.stack.temporal.cfg.address,
                    "--workflow-id", run.run_id, "--name", "tool_approval", "--input", decision]  # fmt: skip

            async def signal_it() -> None:
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
                )
                out, _ = await proc.communicate()
                if proc.returncode != 0:
                    raise RuntimeError(out.decode()[-300:])

            await retrying(signal_it, until=until, what="signal")
            return
        approved = run.decision == "update"
        with contextlib.suppress(ToolCallRejected):  # decided by an earlier attempt of this call
            await retrying(
                lambda: self.keel.approve(run.run_id, call_id, approved=approved), until=until, what="approve"
            )

    async def _mcp(self, run: RunRecord, rng: random.Random, until: float) -> None:
        """`shop`'s `charge` as an MCP tool call under the caller's call id: it waits in its execution for the
        decision (given as for a run); the call is made again with the same id whenever its connection or the
        API died, and gets that execution's answer."""
        call_id = run.run_id
        run.run_id = tool_call_workflow_id("shop", "charge", call_id)
        run.decision = rng.choice(["update", "signal", "decline"])
        args = {"tag": run.tag, "cents": rng.randint(1, 999)}
        calling = asyncio.create_task(self._mcp_call(call_id, args, until))
        try:
            while not calling.done():
                with contextlib.suppress(Exception):  # not started yet, or an outage: look again
                    if await self.keel.pending_tool_calls(run.run_id):
                        await self._decide(run, call_id, until)
                        break
                await asyncio.wait({calling}, timeout=0.3)
            run.answer = await calling
        finally:
            calling.cancel()

    async def _mcp_call(self, call_id: str, args: dict[str, Any], until: float) -> str:
        """The call's answer (its text), calling again through API deaths and outages: an answer that does not
        name the call's execution (the API could not start it) is not the call's."""
        while True:
            try:
                # The `mcp` SDK (1.x) leaves a request unanswered forever when the API dies under it (its
                # `initialize` too; modelcontextprotocol/python-sdk#1577, #3441): a deadline on the whole attempt,
                # then the same call id again.
                async with (
                    asyncio.timeout(MCP_CALL_DEADLINE.total_seconds() + 15),
                    streamable_http_client(f"{self.stack.api_url}/api/mcp/shop/mcp") as (read, write, _),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    result = await session.call_tool(
                        "charge", args, read_timeout_seconds=MCP_CALL_DEADLINE, meta={CALL_ID_META: call_id}
                    )
                text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
                if (result.meta or {}).get(WORKFLOW_ID_META):
                    return text
                raise RuntimeError(f"not the call's answer: {text[:200]}")
            except Exception as err:
                if time.monotonic() > until:
                    raise TimeoutError(f"mcp call {call_id}: {err}") from err
                await asyncio.sleep(0.3)

    async def _session(self, run: RunRecord, rng: random.Random, until: float) -> None:
        """A session of `desk` sent one message (under a message id: a send made again is the same send); its
        turn's `pledge` approved or declined through the session; the answer read from the session's thread."""
        cents = run.asked = rng.randint(1, 999)
        decision: Literal["approve", "decline"] = rng.choice(["approve", "decline"])
        run.decision = decision
        session = await retrying(lambda: self.desk.create_session(run.run_id), until=until, what="session")
        message = f"session {run.tag} {cents}"
        accepted = await retrying(
            lambda: session.send_message(message, wait=False, message_id=f"{run.run_id}-1"), until=until, what="send"
        )
        while True:
            settled = await retrying(lambda: session.settled(accepted.run_id), until=until, what="settled")
            asked = [p for p in settled.pending if p.kind == "approval"]
            if not asked:
                break
            for call in asked:
                with contextlib.suppress(SessionError):  # decided by an earlier attempt of this call
                    await retrying(
                        lambda: session.respond_to_tool_approval(call.tool_call_id, decision),  # noqa: B023
                        until=until,
                        what="decide",
                    )
        messages = await retrying(session.thread.list_messages, until=until, what="messages")
        said = [m for m in messages if m.get("role") == "assistant"]
        if said:
            content = said[-1]["content"]
            parts = (
                [content]
                if isinstance(content, str)
                else [p.get("text", "") for p in content if p.get("type") == "text"]
            )
            run.answer = " ".join(parts)

    async def _chatter(self, run: RunRecord, rng: random.Random, until: float) -> None:
        """A session of `desk` sent three messages in quick succession (each under its id: a send made again is
        the same send), the later ones into the running turn or as it ends; the driver waits for each one's
        turn and reads what the thread holds: every message said once and heard once."""
        session = await retrying(lambda: self.desk.create_session(run.run_id), until=until, what="session")
        run.asked = [f"say {run.tag}-{k}" for k in range(CHATTER_MESSAGES)]
        accepted = []
        for k, said in enumerate(run.asked):
            accepted.append(
                await retrying(
                    lambda: session.send_message(said, wait=False, message_id=f"{run.run_id}-{k}"),  # noqa: B023
                    until=until,
                    what="send",
                )
            )
            await asyncio.sleep(rng.uniform(0, 0.05))
        for sent in accepted:
            await retrying(lambda: session.settled(sent.run_id), until=until, what="settled")  # noqa: B023
        messages = await retrying(session.thread.list_messages, until=until, what="messages")

        def text(message: dict[str, Any]) -> str:
            content = message["content"]
            return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)

        run.answer = {
            "said": [text(m) for m in messages if m.get("role") == "user"],
            "heard": [
                heard
                for m in messages
                if m.get("role") == "assistant" and text(m).startswith("heard ")
                for heard in text(m).removeprefix("heard ").split(" | ")
            ],
        }

    async def _batch(self, run: RunRecord, until: float) -> None:
        with contextlib.suppress(Exception):  # already started by an earlier attempt: the settle below finds it
            await retrying(
                lambda: self.workflows.start("batch", {"tag": run.tag}, run_id=run.run_id), until=until, what="start"
            )
        while True:
            status = await retrying(lambda: self.workflows.settle(run.run_id), until=until, what="settle")
            if status.state.status == "suspended":
                with contextlib.suppress(ResumeRefused):
                    await retrying(
                        lambda: self.workflows.resume(run.run_id, "human", {"answer": run.tag}),
                        until=until,
                        what="resume",
                    )
                continue
            run.answer = status.state.result if status.state.status == "success" else status.state.model_dump()
            return

    async def run(self, stop_at: float) -> None:
        self.deadline = stop_at + GRACE_SECONDS
        n = 0
        active: set[asyncio.Task[RunRecord]] = set()
        while time.monotonic() < stop_at:
            while len(active) < self.cfg.in_flight:
                n += 1
                kind = self.rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
                active.add(asyncio.create_task(self.drive(kind, f"{self.cfg.seed}x{n:05d}")))
            _, active = await asyncio.wait(active, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
        if active:
            await asyncio.wait(active)


class Faults:
    def __init__(self, cfg: Config, stack: Stack) -> None:
        self.cfg, self.stack = cfg, stack
        self.rng = random.Random(f"faults-{cfg.seed}")
        self.count: Counter[str] = Counter()
        self.bag: list[str] = []

    async def run(self, stop_at: float) -> None:
        while True:
            await asyncio.sleep(self.rng.expovariate(1 / self.cfg.fault_every))
            if time.monotonic() > stop_at:
                return
            if not self.bag:  # every kind by its weight, in a seeded order, each kind once first: a short run
                # (or a slow machine's, whose faults take longer) still has each kind
                kinds = {k: w for k, w in FAULTS.items() if w > 0 and (k != "disk-full" or self.stack.small_disk)}
                again = [kind for kind, weight in kinds.items() for _ in range(weight - 1)]
                once = list(kinds)
                self.rng.shuffle(again)
                self.rng.shuffle(once)
                self.bag = again + once  # popped from the end
            kind = self.bag.pop()
            self.count[kind] += 1
            await getattr(self, kind.replace("-", "_"))()

    async def worker_kill(self) -> None:
        self.rng.choice(self.stack.workers).kill()  # `keep_workers_alive` starts it again

    async def api_kill(self) -> None:
        self.stack.api.kill()  # `keep_alive` starts it again; streams read through it reconnect with their offset

    async def worker_stop(self) -> None:
        worker = self.rng.choice(self.stack.workers)
        if worker.proc is None or not worker.alive():
            return
        os.kill(worker.proc.pid, signal.SIGSTOP)
        await asyncio.sleep(self.rng.uniform(1.0, 4.0))
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.proc.pid, signal.SIGCONT)

    async def temporal_kill(self) -> None:
        server = self.stack.temporal
        if server.proc is not None:
            server.proc.kill()
            server.proc.wait()
            server.proc = None
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        await server.start(reuse=False)

    async def s3_kill(self) -> None:
        server = self.stack.s3
        if server.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.proc.pid, signal.SIGKILL)
            await asyncio.to_thread(server.stop)  # reaps it, removes its pid file and sockets
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        await asyncio.to_thread(server.start)  # on its data: every payload stored before is there again

    async def model_kill(self) -> None:
        """The LiteLLM proxy killed with SIGKILL and started again on its port (it takes seconds to start: the
        `chat` runs' model calls meanwhile fail to connect, and their retries wait it out)."""
        model = self.stack.model
        if model.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(model.proc.pid, signal.SIGKILL)
            await asyncio.to_thread(model.proc.wait)
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        await asyncio.to_thread(model.start)

    async def disk_full(self) -> None:
        """The `files` workspace's disk filled to the last byte for a few seconds, then freed."""
        filler = self.stack.workspace / ".filler"
        await asyncio.to_thread(_fill, filler)
        await asyncio.sleep(self.rng.uniform(2.0, 6.0))
        filler.unlink(missing_ok=True)

    async def postgres_kill(self) -> None:
        await asyncio.to_thread(self.stack.pg.kill)
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        await asyncio.to_thread(self.stack.pg.start)


def _fill(filler: Path) -> None:
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        with contextlib.suppress(OSError):  # the last few bytes
            while True:
                os.write(fd, b"\0" * 512)
    finally:
        os.close(fd)


def ledger_lines(ledger: Path) -> list[dict[str, Any]]:
    lines = []
    for path in ledger.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line torn by a kill before its fsync
                lines.append(json.loads(line))
    return lines


def check(runs: list[RunRecord], ledger: list[dict[str, Any]], report: Report, workspace: Path) -> None:
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for line in ledger:
        by_key.setdefault((line["kind"], line["key"]), []).append(line)
    for (kind, key), lines in by_key.items():
        if kind in ("charge", "pledge") and len(lines) > 1:  # not idempotent: never twice
            report.duplicated.append(f"{kind} {key} ran {len(lines)} times (attempts {[x['attempt'] for x in lines]})")
        elif kind != "charge" and sum(1 for x in lines if x["attempt"] == 1) > 1:
            report.duplicated.append(f"{kind} {key} ran again told attempt 1 ({len(lines)} runs)")
    for run in runs:
        took = (run.ended or time.monotonic()) - run.started
        if took > report.longest_run_seconds:
            report.longest_run_seconds, report.longest_run = took, f"{run.run_id} ({run.kind})"
        if run.error is not None or run.answer is None:
            report.stuck.append(f"{run.run_id} ({run.kind}): {run.error or 'no answer'}")
            continue
        report.ended += 1
        if run.streamed is not None:
            report.streams += 1
            if _untimed(run.streamed) != _untimed(run.stream or []):
                report.stream_gaps.append(f"{run.run_id}: {_stream_difference(run.streamed, run.stream or [])}")
            elif run.streamed != run.stream:
                report.streams_retimed += 1
        problem = _wrong_files(run, workspace, report) if run.kind == "files" else _wrong(run, by_key, report)
        if problem:
            report.wrong.append(f"{run.run_id} ({run.kind}): {problem}")


WORKFLOW_EVENT_TIMES = ("startedAt", "endedAt", "suspendedAt", "resumedAt")


def _untimed(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chunks without a workflow event's times. Those are workflow time (`workflow.now()`, the start of the
    workflow task that emitted the event), which is not the same for one event in every reading: a live reader
    may be shown an event computed by a workflow task that was lost with its worker, or by a query answered over
    history a task has not yet run; the run's own record is from the task that did run (docs/workflows.md)."""

    def strip(chunk: dict[str, Any]) -> dict[str, Any]:
        payload = chunk.get("payload")
        if not str(chunk.get("type", "")).startswith("workflow-") or not isinstance(payload, dict):
            return chunk
        return {**chunk, "payload": {k: v for k, v in payload.items() if k not in WORKFLOW_EVENT_TIMES}}

    return [strip(c) for c in chunks]


def _stream_difference(streamed: list[dict[str, Any]], whole: list[dict[str, Any]]) -> str:
    """Where a stream read through faults first differs from the run's whole stream, and how."""
    types = f"{len(streamed)} chunks streamed, {len(whole)} in the run"
    pairs = zip(_untimed(streamed), _untimed(whole), strict=False)
    at = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
    if at is None:
        return f"{types}; the shorter is where the longer starts"
    got, has = json.dumps(streamed[at])[:500], json.dumps(whole[at])[:500]
    return f"{types}; first difference at {at}: streamed {got}, the run has {has}"


def _wrong(run: RunRecord, by_key: dict[tuple[str, str], list[dict[str, Any]]], report: Report) -> str | None:
    def ran(kind: str, key: str) -> int:
        return len(by_key.get((kind, key), []))

    if run.kind == "batch":
        if run.answer != {"answer": run.tag}:
            return f"answered {run.answer!r}"
        missing = [n for n in range(1, chaos_app.BATCH_ITEMS + 1) if not ran("record", f"{run.tag}/{n}")]
        return f"items never recorded: {missing}" if missing else None
    if run.kind == "bulky":
        expected = chaos_app.bulky_answer(chaos_app.bulky_message(run.tag))
        if run.answer != expected or not ran("tick", f"{run.run_id}/0"):
            return f"answered {str(run.answer)[:200]!r}, expected {expected!r}"
        return None
    if run.kind == "mcp":
        charged = ran("charge", f"{run.run_id}/{run.run_id}")
        text = str(run.answer)
        if run.decision == "decline":
            return None if "not approved" in text.lower() and not charged else f"declined, yet {text!r}, {charged}"
        if text.startswith("{") and json.loads(text).get("charged") is not None:
            return None if charged == 1 else f"says charged, ledger has {charged} charges"
        if "did not complete" in text:
            report.lost_reported += 1
            return None if charged <= 1 else f"lost, yet charged {charged} times"
        return f"answered {text[:200]!r}"
    if run.kind == "session":
        pledged = ran("pledge", run.tag)
        text = str(run.answer)
        if run.decision == "decline":
            return None if text == "pledge declined" and not pledged else f"declined, yet {text!r}, {pledged}"
        if text == f"pledged {run.asked}":
            cents = [line.get("cents") for line in by_key.get(("pledge", run.tag), [])]
            return None if cents == [run.asked] else f"says pledged {run.asked}, ledger has {cents}"
        if text.startswith("pledge lost"):
            report.lost_reported += 1
            return None if pledged <= 1 else f"lost, yet pledged {pledged} times"
        return f"answered {text[:200]!r}"
    if run.kind == "chat":
        return None if run.answer == f"echo {run.tag}" else f"answered {str(run.answer)[:200]!r}"
    if run.kind == "chatter":  # each message in the thread once, and heard once (none lost, none answered twice)
        asked = sorted(run.asked or [])
        said, heard = (sorted((run.answer or {}).get(k, [])) for k in ("said", "heard"))
        return None if said == heard == asked else f"sent {asked}, the thread holds {said}, heard {heard}"
    if run.kind == "busy":
        missing = [n for n in range(3) if not ran("tick", f"{run.run_id}/{n}")]
        if run.answer != "ticked 3" or missing:
            return f"answered {run.answer!r}, ticks missing {missing}"
        return None
    charged = ran("charge", f"{run.run_id}/charge-1")
    text = str(run.answer)
    if not ran("note", f"{run.run_id}/note-1") or not text.endswith(f"| noted {run.tag}"):
        return f"note missing or not reported: {text!r}"
    if run.decision == "decline":
        return None if text.startswith("charge declined") and not charged else f"declined, yet {text!r}, {charged}"
    if re.match(r"charged \d+ \|", text):
        return None if charged == 1 else f"says charged, ledger has {charged} charges"
    if text.startswith("charge lost"):
        report.lost_reported += 1
        return None if charged <= 1 else f"lost, yet charged {charged} times"
    return f"answered {text!r}"


def _wrong_files(run: RunRecord, workspace: Path, report: Report) -> str | None:
    """The notes exactly as the run left them, and the command's line there once if it says it ran (at most once
    if it was lost; never if it failed, e.g. on a full disk)."""
    try:
        results = json.loads(str(run.answer))
    except json.JSONDecodeError:
        results = None
    if not isinstance(results, list) or len(results) != len(chaos_app.files_plan(run.tag)):
        return f"answered {str(run.answer)[:200]!r}"
    folder = workspace / run.tag
    notes = (folder / "notes.txt").read_text() if (folder / "notes.txt").exists() else None
    edit = results[2]
    if isinstance(edit, dict) and "did not complete" in str(edit.get("error")):  # lost: done or not, as read
        report.lost_reported += 1
        edited = notes in (f"draft {run.tag}\n", f"final {run.tag}\n")
    else:
        edited = notes == f"final {run.tag}\n"
    if not edited or notes is None or notes.strip() not in str(results[-1]):
        return f"notes {notes!r} (edit said {str(edit)[:100]!r}), read back {str(results[-1])[:200]!r}"
    lines = (folder / "cmd.log").read_text().splitlines() if (folder / "cmd.log").exists() else []
    command = results[3]
    if isinstance(command, dict) and "did not complete" in str(command.get("error")):  # lost: ran once at most
        report.lost_reported += 1
        return None if len(lines) <= 1 else f"command lost, yet ran {len(lines)} times"
    if "Exit code:" in str(command):
        return None if not lines else f"command failed ({str(command)[:100]!r}), yet wrote {lines}"
    return None if lines == [run.tag] else f"command said {str(command)[:100]!r}, cmd.log {lines}"


def summary(report: Report) -> str:
    rows = [
        ("runs", ", ".join(f"{k} {v}" for k, v in sorted(report.runs.items()))),
        ("faults", ", ".join(f"{k} {v}" for k, v in sorted(report.faults.items())) or "none"),
        *((f"not injected: {k}", why) for k, why in report.skipped_faults.items()),
        ("ended with the right answer", f"{report.ended - len(report.wrong)}/{sum(report.runs.values())}"),
        ("lost (reported as lost)", str(report.lost_reported)),
        ("wrong answers", str(len(report.wrong))),
        ("wrongly duplicated side effects", str(len(report.duplicated))),
        ("streams read through API kills, with gaps", f"{len(report.stream_gaps)}/{report.streams}"),
        ("streams whole, with step times revised", f"{report.streams_retimed}/{report.streams}"),
        ("stuck", str(len(report.stuck))),
        ("open in visibility at the end", str(report.open_in_visibility)),
        ("longest run (s)", f"{report.longest_run_seconds:.1f} {report.longest_run}"),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"chaos seed={report.seed} minutes={report.minutes:g} plant={report.plant or '-'}"]
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    problems = (("wrong", report.wrong), ("duplicated", report.duplicated), ("stuck", report.stuck),
                ("stream", report.stream_gaps))  # fmt: skip
    for label, items in problems:
        lines += [f"  {label}: {item}" for item in items[:20]]
    lines.append("  OK" if report.ok else "  FAILED")
    return "\n".join(lines)


async def chaos(cfg: Config) -> Report:
    npm_installed(CLIENT_JS, "@mastra/client-js", "the chaos run reads workflow streams with @mastra/client-js")
    work = Path(tempfile.mkdtemp(prefix="keel-chaos-"))
    report = Report(seed=cfg.seed, minutes=cfg.minutes, plant=cfg.plant)
    try:
        with postgres_cluster(durable=True) as pg:
            stack = Stack(cfg, work, pg)
            keeper: asyncio.Task[None] | None = None
            try:
                await stack.up()
                keeper = asyncio.create_task(stack.keep_alive())
                keel = await KeelClient.connect(stack.temporal.cfg.address, task_queue=stack.queue)
                storage = open_storage(pg.dsn)
                await storage.init()
                workflows = Workflows(storage, chaos_app.app, keel)
                await workflows.save(chaos_app.definition())
                await keel.wait_for_worker(60)
                stop_at = time.monotonic() + cfg.minutes * 60
                if not stack.small_disk:
                    report.skipped_faults["disk-full"] = "cannot mount a tmpfs for the workspace (needs root)"
                desk = await AgentController.from_definition(chaos_app.desk.definition).init(keel, storage)
                mix, faults = Mix(cfg, stack, keel, workflows, desk), Faults(cfg, stack)
                injector = asyncio.create_task(faults.run(stop_at))
                await mix.run(stop_at)
                if injector.done() and not injector.cancelled() and (failed := injector.exception()) is not None:
                    # a fault that could not be undone (a server that would not start again): said, not
                    # left to show up as runs stuck for no visible reason
                    report.stuck.append(f"the faults stopped: {type(failed).__name__}: {str(failed)[-1000:]}")
                injector.cancel()
                report.faults = dict(faults.count)
                report.runs = dict(Counter(r.kind for r in mix.runs))
                check(mix.runs, ledger_lines(stack.ledger), report, stack.workspace)
                query = f"TaskQueue='{stack.queue}' AND CloseTime IS NULL AND WorkflowId STARTS_WITH 'chaos-'"
                report.open_in_visibility = (await keel.temporal.count_workflows(query)).count
                turns = f"{query.split(' AND WorkflowId')[0]} AND WorkflowId STARTS_WITH 'keel-session:'"
                turns += " AND WorkflowType='AgentRun'"  # the sessions' turns (the sessions stay open, idle)
                report.open_in_visibility += (await keel.temporal.count_workflows(turns)).count
                await storage.close()
            finally:
                if keeper is not None:
                    keeper.cancel()
                stack.down()
    except BaseException as err:
        report.stuck.append(f"the chaos run itself failed: {type(err).__name__}: {err}")  # logs kept, not ok
        raise
    finally:
        if report.ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"chaos: kept the run's logs and ledger in {work}", file=sys.stderr)
    if cfg.out is not None:
        cfg.out.write_text(json.dumps({**asdict(report), "ok": report.ok}, indent=2))
    return report
