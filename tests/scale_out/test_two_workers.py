"""Scale-out: two `keel worker --join` processes on one task queue that share nothing but Temporal, PostgreSQL and
S3 (each its own data directory, sandbox and host queue). Runs of `tests/scale_out/app.py` (an S3 workspace, a
background command, a 900 KiB tool result kept in the S3 payload store) are started at seeded random moments while
a seeded random worker is killed with SIGKILL, and started again, a few times. Then:

- every run completed with the answer it must have, and its file is in the bucket with its content;
- every payload reference in every history of every run resolves in the S3 payload store;
- each run's background-process follow-up went to the host queue of the worker that started the process and got
  its output there, or, if that worker was killed, was reported gone (or lost) naming a killed worker;
- the BM25 answer (ids, scores, order) is the same on each live worker, each asked on its own host queue (its
  `tool_call` activity started standalone there: `keel tool` runs on the shared queue, where either may take it),
  and `keel tool keel_workspace_search` on the shared queue gives it too.

CI size: 12 runs, 2 kills (about a minute). Full size: `KEEL_SCALE_OUT_RUNS=100` (5 kills; `KEEL_SCALE_OUT_KILLS`,
`KEEL_SCALE_OUT_SEED`); a summary line is printed either way (`pytest -s` shows it).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.common import RetryPolicy

from keel.client import KeelClient
from keel.client.connection import connect
from keel.client.devserver import DevServer
from keel.protocol import names
from keel.storage import BlobStore, open_payload_store
from keel.workflows.contracts import ToolCallInput, ToolCallResult
from keel.workspace_providers import WORKSPACE_TOOLS
from tests.conftest import ROOT, env_for_subprocess
from tests.record_histories import referenced_blobs
from tests.s3 import S3Server
from tests.scale_out.app import WORDS, WORKSPACE_ID, expected_answer, file_content, file_path

RUNS = int(os.environ.get("KEEL_SCALE_OUT_RUNS", "12"))
KILLS = int(os.environ.get("KEEL_SCALE_OUT_KILLS", str(max(2, RUNS // 20))))
SEED = int(os.environ.get("KEEL_SCALE_OUT_SEED", "22"))
START_WINDOW = max(5.0, RUNS * 0.4)
"""Seconds over which the runs are started (kills land among them)."""
APP = "tests.scale_out.app:app"
READY_SECONDS = 60.0

pytestmark = pytest.mark.timeout(180 if RUNS <= 12 else 120 + 10 * RUNS)


@dataclass
class WorkerProcess:
    """One `keel worker` process of the test, started again (same data directory) after each kill."""

    name: str
    env: dict[str, str]
    queue: str
    logs: Path
    proc: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)

    def start(self) -> None:
        log = self.logs / f"worker-{self.name}-{len(self.pids) + 1}.log"
        argv = [str(Path(sys.executable).parent / "keel"), "worker", "--app", APP, "--task-queue", self.queue, "--join"]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        self.pids.append(self.proc.pid)

    async def ready(self) -> None:
        """Until this incarnation says it polls (its log's `keel worker: task queue ...` line)."""
        assert self.proc is not None
        log = self.logs / f"worker-{self.name}-{len(self.pids)}.log"
        deadline = time.monotonic() + READY_SECONDS
        while "keel worker: task queue" not in log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"worker {self.name} did not start:\n{log.read_text(errors='replace')[-3000:]}")
            await asyncio.sleep(0.1)

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.killed.append(self.proc.pid)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


def host_pid(host_queue: str) -> int:
    """The pid in a host queue's name (`keel-host-{hostname}-{pid}-{random}`)."""
    return int(host_queue.rsplit("-", 2)[1])


async def fresh_database(dsn: str) -> str:
    name = f"t_{uuid.uuid4().hex[:16]}"
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return urlsplit(dsn)._replace(path=f"/{name}").geturl()


async def histories(client: Client, run_id: str) -> list[WorkflowHistory]:
    """Every execution's history under the run's workflow id (continue-as-new included)."""
    found = []
    async for execution in client.list_workflows(f"WorkflowId='{run_id}'"):
        found.append(await client.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history())
    return found


def follow_up_queues(history: WorkflowHistory) -> list[str]:
    """The host queues the history's tool calls were sent to (a background process's follow-ups)."""
    queues = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == names.TOOL_CALL and attrs.task_queue.name.startswith("keel-host-"):
                queues.append(attrs.task_queue.name)
    return queues


async def in_flight(client: Client, run_ids: list[str], finished: set[str], pid: int) -> tuple[int, set[str]]:
    """How many of the runs are open, and which have an activity (a tool call) started by worker `pid` (its
    identity `pid@host`); the runs found closed are added to `finished` and not asked again."""
    open_runs, mid_call = 0, set()
    for run_id in [r for r in run_ids if r not in finished]:
        desc = await client.get_workflow_handle(run_id).describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            finished.add(run_id)
            continue
        open_runs += 1
        for pending in desc.raw_description.pending_activities:
            if pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED and (
                pending.last_worker_identity.startswith(f"{pid}@")
            ):
                mid_call.add(run_id)
    return open_runs, mid_call


def worker_pids(history: WorkflowHistory) -> list[int]:
    """The worker processes that started the history's workflow tasks, in order (identity `pid@host`)."""
    return [
        int(event.workflow_task_started_event_attributes.identity.split("@")[0])
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    ]


async def call_on_host(client: Client, host_queue: str, agent_id: str, tool: str, args: dict[str, Any]) -> Any:
    """One tool, run by the worker behind `host_queue` alone: its `tool_call` activity, started standalone."""
    call_id = f"probe-{uuid.uuid4().hex[:12]}"
    call = ToolCallInput(
        run_id=call_id, agent_id=agent_id, thread_id="", resource_id="", step=0, tool_call_id=call_id,
        tool_name=tool, args=args, result_message_id="",
    )  # fmt: skip
    result: ToolCallResult = await client.execute_activity(
        names.TOOL_CALL,
        call,
        id=call_id,
        task_queue=host_queue,
        result_type=ToolCallResult,
        schedule_to_start_timeout=timedelta(seconds=30),
        start_to_close_timeout=timedelta(seconds=60),
        retry_policy=RetryPolicy(maximum_attempts=1),
    )
    assert not result.is_error, result.result
    return result.result


async def live_host_queues(keel: KeelClient, live: set[int]) -> dict[int, str]:
    """The host queue of each live worker: a background command started through `keel tool` on the shared task
    queue reports the host queue of the worker that ran it; asked until both have answered."""
    found: dict[int, str] = {}
    for _ in range(60):
        started = await keel.execute_tool(
            "scale", WORKSPACE_TOOLS.SANDBOX.EXECUTE_COMMAND, {"command": "true", "background": True}
        )
        assert started.host_queue is not None, started
        if host_pid(started.host_queue) in live:
            found[host_pid(started.host_queue)] = started.host_queue
        if set(found) == live:
            return found
    raise AssertionError(f"not every live worker answered: {found} of {live}")


def check_process(
    tag: str, process: dict[str, Any], queues: list[str], workers: list[WorkerProcess], outcomes: Counter[str]
) -> None:
    """The run's background command: its follow-up reached the worker that started it (the output it printed
    names that worker), or that worker was killed and the follow-up says so."""
    killed = {pid for w in workers for pid in w.killed}
    name_of = {pid: w.name for w in workers for pid in w.pids}
    started, output = str(process["started"]), process["output"]
    if output is None:  # the start itself was lost with its worker (a command is not run twice)
        assert "did not complete" in started, process
        outcomes["start lost with its worker"] += 1
        return
    assert re.fullmatch(r"Started background process \(PID: \w+\)", started), process
    [queue] = queues
    owner = host_pid(queue)
    if str(output).startswith(f"proc {tag} by "):
        assert str(output).startswith(f"proc {tag} by {name_of[owner]}:{owner}\n"), (process, queue)
        outcomes["follow-up reached its host"] += 1
    elif "is gone" in str(output):
        assert owner in killed and queue in str(output), (process, queue)
        outcomes["host killed: reported gone"] += 1
    else:
        assert owner in killed and "did not complete" in str(output), (process, queue)
        outcomes["host killed during the follow-up"] += 1


async def test_runs_on_two_workers_killed_at_random_complete_with_their_files_blobs_and_one_bm25_answer(
    dev_server: DevServer, pg_dsn: str, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = time.monotonic()
    rng = random.Random(SEED)
    bucket, payload_bucket = s3_server.make_bucket(), s3_server.make_bucket()
    payload_url = f"s3://{payload_bucket}/keel?endpoint={s3_server.endpoint}"
    aws = {
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_REGION": s3_server.region,
        "AWS_ENDPOINT_URL_S3": s3_server.endpoint,
    }
    for key, value in aws.items():
        monkeypatch.setenv(key, value)
    payloads: BlobStore = open_payload_store(payload_url)
    client = await connect(dev_server.cfg.address, payloads=payloads)
    queue = f"test-{uuid.uuid4()}"
    keel = KeelClient(client, task_queue=queue)
    storage_url = await fresh_database(pg_dsn)
    shared = {**aws, "KEEL_STORAGE_URL": storage_url, "KEEL_PAYLOAD_STORE": payload_url, "SCALE_OUT_BUCKET": bucket}
    workers = [
        WorkerProcess(
            name,
            env_for_subprocess(dev_server, **shared, KEEL_DATA_DIR=str(tmp_path / name), SCALE_OUT_NAME=name),
            queue,
            tmp_path,
        )
        for name in ("a", "b")
    ]
    # Every draw up front: the starter and the killer run side by side.
    tags = [f"r{i:03d}" for i in range(RUNS)]
    start_at = sorted(rng.uniform(0, START_WINDOW) for _ in tags)
    kill_at = sorted(rng.uniform(1.0, START_WINDOW) for _ in range(KILLS))
    victims = [rng.choice(workers) for _ in range(KILLS)]
    run_ids = {tag: f"scale-{tag}-{uuid.uuid4().hex[:8]}" for tag in tags}
    kills: list[str] = []
    try:
        for worker in workers:
            worker.start()
        await asyncio.gather(*(w.ready() for w in workers))
        t0 = time.monotonic()

        started: list[str] = []
        finished: set[str] = set()
        caught: set[str] = set()  # runs with a tool call in flight on a worker when it was killed

        async def start_runs() -> None:
            for tag, at in zip(tags, start_at, strict=True):
                await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
                started.append(await keel.start_run("scale", tag, run_id=run_ids[tag]))

        async def kill_workers() -> None:
            for at, victim in zip(kill_at, victims, strict=True):
                # (A moment that passed while the last victim restarted: at once, once it polls again.)
                await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
                deadline = time.monotonic() + 10
                while True:  # then as soon as it has a tool call in flight (for 10 s at most)
                    open_runs, mid_call = await in_flight(client, started, finished, victim.pid)
                    if mid_call or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.2)
                victim.kill9()
                caught.update(mid_call)
                kills.append(
                    f"{victim.name}@{time.monotonic() - t0:.1f}s ({open_runs} runs open, {len(mid_call)} mid-call)"
                )
                victim.start()
                await victim.ready()

        await asyncio.gather(start_runs(), kill_workers())
        async with asyncio.timeout(150 if RUNS <= 12 else 10 * RUNS):
            results = await asyncio.gather(*(keel.result(run_ids[tag]) for tag in tags))
        ran_for = time.monotonic() - t0

        # Every run's answer, and its background command's fate.
        outcomes: Counter[str] = Counter()
        blobs: set[str] = set()
        killed = {pid for w in workers for pid in w.killed}
        moved = 0  # runs a worker killed later had worked on, finished by another
        for tag, result in zip(tags, results, strict=True):
            answer = json.loads(result.text)
            process = answer.pop("process")
            assert answer == expected_answer(tag)
            run_histories = await histories(client, run_ids[tag])
            check_process(tag, process, [q for h in run_histories for q in follow_up_queues(h)], workers, outcomes)
            ran_on = [pid for h in run_histories for pid in worker_pids(h)]
            moved += bool((set(ran_on) & killed) - {ran_on[-1]})
            referenced = set().union(*(referenced_blobs(h.to_json()) for h in run_histories))
            assert referenced, f"{tag}: no payload of its history is kept by reference"
            assert len(await payloads.get_blobs(sorted(referenced))) == len(referenced)  # BlobNotFound otherwise
            blobs |= referenced

        assert caught, "no kill caught a tool call in flight: the test proved nothing"

        # Every file, in the bucket (and nothing else under the workspace's prefix).
        s3 = s3_server.client()
        objects = {o.object_name for o in s3.list_objects(bucket, prefix="ws/", recursive=True)}
        assert objects == {f"ws/{file_path(tag)}" for tag in tags}
        for tag in tags:
            assert s3.get_object(bucket, f"ws/{file_path(tag)}").read().decode() == file_content(tag)

        # The same BM25 answer from each live worker, each asked on its own host queue.
        hosts = await live_host_queues(keel, {w.pid for w in workers})
        every_token = " ".join(f"token{tag}" for tag in tags)
        words = " ".join(WORDS[:4])
        answers = []
        for pid, host in sorted(hosts.items()):
            probe = {q: await call_on_host(client, host, "", "bm25_probe", {"query": q}) for q in (every_token, words)}
            assert {p["worker"].split(":")[1] for p in probe.values()} == {str(pid)}  # this worker answered
            text = await call_on_host(
                client, host, "scale", WORKSPACE_TOOLS.SEARCH.SEARCH, {"query": words, "topK": 50, "mode": "bm25"}
            )
            answers.append(({q: p["results"] for q, p in probe.items()}, text))
        assert answers[0] == answers[1]
        found, _ = answers[0]
        assert sorted(r["id"] for r in found[every_token]) == sorted(file_path(tag) for tag in tags)
        ranked = [(r["id"], r["score"]) for r in found[words]]
        assert len({score for _, score in ranked}) > 1  # scores differ: the comparison means something
        for _ in range(4):  # `keel tool keel_workspace_search` on the shared queue: whichever worker takes it
            args = {"query": words, "top_k": 200, "mode": "bm25"}
            api = await keel.execute_tool(None, "keel_workspace_search", args, workspace_id=WORKSPACE_ID)
            assert [(r["id"], r["score"]) for r in api.result["results"]] == ranked
    finally:
        for worker in workers:
            worker.stop()
    print(
        f"\nscale-out: {RUNS}/{RUNS} runs correct on 2 workers ({sum(len(w.pids) for w in workers)} processes), "
        f"{len(caught)} caught mid-call by a kill, {moved} moved from a killed worker; "
        f"kills: {', '.join(kills)}; runs done {ran_for:.1f} s after the first start, "
        f"test {time.monotonic() - began:.1f} s; "
        f"{len(blobs)} blobs referenced, none missing; background processes: {dict(outcomes)}; seed {SEED}"
    )
