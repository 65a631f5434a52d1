"""The API keeps nothing of its own: `kill -9` of the API process while a client streams a run, and while a
generate waits on a suspended run, leaves the runs unaffected (they live in Temporal), and a new API process
serves the rest of the stream from the client's count of chunks, and the approval."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from keel.client.devserver import DevServer
from keel.storage import Storage
from tests.conftest import ROOT, free_port, running_worker
from tests.http_api.apps import app
from tests.http_api.conftest import Api
from tests.test_cli_day_to_day import KEEL


@contextlib.contextmanager
def api_process(dev_server: DevServer, task_queue: str, tmp_path: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_TASK_QUEUE": task_queue,
        "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
        "KEEL_APP": "tests.http_api.apps:app",
        "KEEL_API_PORT": str(port),
    }
    with open(tmp_path / "api.log", "ab") as log:
        proc = subprocess.Popen([KEEL, "serve"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def until_serving(url: str) -> None:
    async with httpx.AsyncClient() as http, asyncio.timeout(30):
        while True:
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(f"{url}/api/agents")).status_code == 200:
                    return
            await asyncio.sleep(0.1)


async def test_a_new_api_process_serves_the_rest_of_a_stream_and_the_approval_after_kill_9(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path, client_js: Path
) -> None:
    async with running_worker(client, app, storage, task_queue) as keel:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        seen: list[dict[str, Any]] = []
        with api_process(dev_server, task_queue, tmp_path, port) as first:
            await until_serving(url)
            async with httpx.AsyncClient(timeout=30) as http:
                body = {"messages": "steps=40"}
                async with http.stream("POST", f"{url}/api/agents/multi/stream", json=body) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data: {"):
                            seen.append(json.loads(line[6:]))
                        if len(seen) == 12:
                            first.kill()  # kill -9, mid-stream
                            break
        run_id = seen[0]["runId"]
        assert (await keel.describe(run_id)).status in ("running", "completed")
        port = free_port()
        with api_process(dev_server, task_queue, tmp_path, port):
            api = Api(f"http://127.0.0.1:{port}", keel, storage)
            await until_serving(api.url)
            rest = await api.js(
                "return await chunksOf(await client.getAgent('multi').observe(vars));", runId=run_id, offset=len(seen)
            )
            everything = await api.js(
                "return await chunksOf(await client.getAgent('multi').observe(vars));", runId=run_id, offset=0
            )
            assert seen + rest == everything  # every chunk once, in order
            assert everything[-1]["type"] == "finish" and (await keel.result(run_id)).steps == 41

            waiter = httpx.AsyncClient(timeout=60)
            body = {"messages": "pay"}
            waiting = asyncio.create_task(waiter.post(f"{api.url}/api/agents/slow_payer/generate", json=body))
            query = f"KeelAgentId='slow_payer' AND TaskQueue='{task_queue}'"
            async with asyncio.timeout(30):
                while not (runs := [e.id async for e in client.list_workflows(query)]):
                    await asyncio.sleep(0.05)
            # The generate waits: the run pauses 2 s before the call that waits for an approval.
        with pytest.raises(httpx.TransportError):  # the API died (kill -9) under the waiting generate
            await waiting
        await waiter.aclose()
        async with asyncio.timeout(30):
            while (await keel.describe(runs[0])).status != "suspended":  # the run went on without the API
                await asyncio.sleep(0.1)
        port = free_port()
        with api_process(dev_server, task_queue, tmp_path, port):
            api = Api(f"http://127.0.0.1:{port}", keel, storage)
            await until_serving(api.url)
            done = await api.js(
                "return await client.getAgent('slow_payer').approveToolCallGenerate(vars);",
                runId=runs[0],
                toolCallId="large",
            )
        assert done["finishReason"] == "stop" and done["text"] == "pause={'paused': 2.0}, large={'paid': 500}"


@contextlib.contextmanager
def serve_with_worker(env: dict[str, str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([KEEL, "serve", "--worker"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def test_keel_serve_with_worker_runs_the_apps_runs_in_its_own_process(
    dev_server: DevServer, task_queue: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_TASK_QUEUE": task_queue,
        "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
        "KEEL_APP": "tests.http_api.apps:app",
        "KEEL_API_PORT": str(free_port()),
    }
    url = f"http://127.0.0.1:{env['KEEL_API_PORT']}"
    with serve_with_worker(env, tmp_path / "api.log") as proc:  # no other worker polls the task queue
        await until_serving(url)
        async with httpx.AsyncClient(timeout=30) as http:
            answer = (await http.post(f"{url}/api/agents/multi/generate", json={"messages": "steps=2"})).json()
        assert answer["text"] == "done after 2 tool calls"
        assert "worker on task queue" in (tmp_path / "api.log").read_text()
        proc.terminate()
        assert await asyncio.to_thread(proc.wait, 30) == 0  # SIGTERM stops both, cleanly
