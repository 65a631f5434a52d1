"""Commands through real runs on a real worker: timeouts leave nothing behind, background processes live
between calls and die with their children, a canceled run kills its commands, the worker's secrets stay out,
output is tailed, token-capped and stripped of ANSI codes without the worker's memory growing, and bubblewrap
isolates."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from keel.app import App
from keel.client import KeelClient
from keel.client.devserver import DevServer
from keel.storage import Storage
from keel.workspace_providers import WORKSPACE_TOOLS, LocalFilesystem, LocalSandbox, Workspace
from tests.conftest import running_worker
from tests.workspace.apps import plan_agent

SB = WORKSPACE_TOOLS.SANDBOX


def command(cmd: str, **extra: Any) -> list[Any]:
    return [SB.EXECUTE_COMMAND, {"command": cmd, **extra}]


def app_for(root: Path, **sandbox: Any) -> App:
    ws = Workspace(filesystem=LocalFilesystem(root), sandbox=LocalSandbox(root, **sandbox))
    return App.of(plan_agent("a", ws))


async def run_plan(keel: KeelClient, *steps: list[list[Any]]) -> list[Any]:
    result = await keel.result(await keel.start_run("a", json.dumps(list(steps))))
    return list(json.loads(result.text))


def processes_with(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [
        pid
        for pid in found
        if Path(f"/proc/{pid}/stat").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text()
    ]


async def gone(marker: str, timeout: float = 10) -> bool:
    async with asyncio.timeout(timeout):
        while processes_with(marker):
            await asyncio.sleep(0.1)
    return True


async def test_a_timeout_answers_124_and_leaves_no_process(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    async with running_worker(client, app_for(tmp_path), storage, task_queue) as keel:
        [out] = await run_plan(keel, [command("sleep 71.5 & sleep 71.5", timeout=1)])
    assert out == "stderr:\n\nProcess timed out after 1000ms\n\nExit code: 124"
    assert await gone("sleep 71.5")


async def test_a_background_process_lives_between_calls_and_dies_with_its_children_on_kill(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    script = "echo started; sleep 72.5 & sleep 72.5"
    async with running_worker(client, app_for(tmp_path), storage, task_queue) as keel:
        started, output, killed, again = await run_plan(
            keel,
            [command(script, background=True)],
            [[SB.GET_PROCESS_OUTPUT, {"pid": "$pid"}]],
            [[SB.KILL_PROCESS, {"pid": "$pid"}]],
            [[SB.GET_PROCESS_OUTPUT, {"pid": "$pid"}]],
        )
    pid = started.removeprefix("Started background process (PID: ").removesuffix(")")
    assert started == f"Started background process (PID: {pid})"
    assert output == "started\n"
    assert killed == f"Process {pid} has been killed.\n\n--- stdout (last output) ---\nstarted\n"
    assert again == f"No background process found with PID {pid}."
    assert await gone("sleep 72.5")


async def test_a_canceled_run_kills_its_foreground_and_background_commands(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    async with running_worker(client, app_for(tmp_path), storage, task_queue) as keel:
        run_id = await keel.start_run(
            "a", json.dumps([[command("sleep 73.5", background=True)], [command("sleep 74.5", timeout=120)]])
        )
        async with asyncio.timeout(20):
            while not (processes_with("sleep 73.5") and processes_with("sleep 74.5")):
                await asyncio.sleep(0.1)
        await keel.cancel(run_id)
        assert await gone("sleep 74.5") and await gone("sleep 73.5")


async def test_a_stopped_worker_leaves_no_command_behind(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    async with running_worker(client, app_for(tmp_path), storage, task_queue) as keel:
        await run_plan(keel, [command("sleep 75.5", background=True)])
        assert processes_with("sleep 75.5")
    assert await gone("sleep 75.5")


async def test_the_command_sees_none_of_the_workers_secrets(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("MY_SECRET", "s")
    monkeypatch.setenv("GITHUB_TOKEN", "t")
    async with running_worker(client, app_for(tmp_path), storage, task_queue) as keel:
        [out] = await run_plan(keel, [command("env", tail=0)])
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}
    assert not {n for n in names if any(word in n for word in ("KEY", "SECRET", "TOKEN"))}
    assert f"HOME={tmp_path}" in out.splitlines()


def _rss_kib() -> int:
    line = next(li for li in Path("/proc/self/status").read_text().splitlines() if li.startswith("VmRSS:"))
    return int(line.split()[1])


async def test_50_mb_of_output_comes_back_tailed_and_token_capped_and_the_worker_does_not_grow(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    async with running_worker(client, app_for(tmp_path), storage, task_queue) as keel:
        await run_plan(keel, [command("true")])  # warm up
        before = _rss_kib()
        tailed, capped, piped = await run_plan(
            keel,
            [command("yes | head -c 50M")],
            [command("yes | head -c 50M", tail=0)],
            [command("seq 1 100 | tail -n 5")],
        )
        grown_mib = (_rss_kib() - before) / 1024
    assert tailed.startswith("[showing last 200 of 524288 lines]\ny\ny\n")  # 1 MiB kept of 50
    assert "[...output truncated — showing first ~200 + last ~1800 of ~" in capped and len(capped) < 20_000
    assert piped == "[showing last 5 of 100 lines]\n96\n97\n98\n99\n100\n"
    assert grown_mib < 50, f"the worker grew by {grown_mib:.0f} MiB"


async def test_ansi_codes_are_stripped_and_tail_and_failures_read_as_in_mastra(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "hello.txt").write_text("x")
    async with running_worker(client, app_for(tmp_path), storage, task_queue) as keel:
        outputs = await run_plan(
            keel,
            [command("printf '\\033[31mred\\033[0m\\n'")],
            [command("seq 1 100", tail=3)],
            [command("echo out; echo err >&2; exit 3")],
            [command("echo hi; ls notes")],
            [command("pwd", cwd="notes")],
            [command("true")],
            [command("pwd", cwd="no/such/dir")],
        )
    spawn_error = outputs.pop()
    assert spawn_error.startswith("Error: Failed to spawn process: ")
    assert outputs == [
        "red\n",
        "[showing last 3 of 100 lines]\n98\n99\n100\n",
        "stdout:\nout\n\n\nstderr:\nerr\n\nExit code: 3",
        "hi\nhello.txt\n",
        f"{tmp_path / 'notes'}\n",
        "(no output)",
    ]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap missing")
async def test_with_bwrap_a_command_has_no_network_no_writes_outside_no_host_pids_and_no_new_privileges(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = tmp_path / "ws"
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2)"
    try:
        async with running_worker(client, app_for(ws, isolation="bwrap"), storage, task_queue) as keel:
            connect, write, write_in, pids, privs = await run_plan(
                keel,
                [command(f'python3 -c "{probe}"')],
                [command(f"echo x > {outside}/pwned")],
                [command("echo x > inside.txt && cat inside.txt")],
                [command(f"test -e /proc/{os.getpid()} && echo visible || echo hidden")],
                [command("grep NoNewPrivs /proc/self/status")],
            )
    finally:
        listener.close()
    assert connect.endswith("Exit code: 1") and "Error" in connect
    assert write.endswith("Exit code: 1") or write.endswith("Exit code: 2")
    assert not (outside / "pwned").exists()
    assert write_in == "x\n"
    assert pids == "hidden\n"
    assert privs.split() == ["NoNewPrivs:", "1"]


async def test_commands_left_by_a_killed_worker_are_killed_when_a_sandbox_starts_next(tmp_path: Path) -> None:
    script = (
        "import asyncio, sys\n"
        "from keel.workspace_providers import LocalSandbox\n"
        "async def main():\n"
        f"    sandbox = LocalSandbox({str(tmp_path)!r})\n"
        "    await sandbox.init()\n"
        "    await sandbox.processes.spawn('sleep 76.5 & sleep 76.5')\n"
        "    print('started', flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    # A leftovers directory of the test's own (`TMPDIR`): a sandbox started meanwhile by any other process of this
    # user on the host would otherwise kill the orphans before the test sees them.
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    owner = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, env=env)
    assert owner.stdout is not None
    assert await asyncio.wait_for(owner.stdout.readline(), 30) == b"started\n"
    owner.kill()  # kill -9: no cleanup ran
    await owner.wait()
    await asyncio.sleep(0.2)
    assert len(processes_with("sleep 76.5")) >= 2  # orphaned (the shell and its sleeps), still running
    nxt = (
        "import asyncio\nfrom keel.workspace_providers import LocalSandbox\n"
        f"asyncio.run(LocalSandbox({str(tmp_path / 'next')!r}).init())\n"
    )
    starter = await asyncio.create_subprocess_exec(sys.executable, "-c", nxt, env=env)
    assert await starter.wait() == 0
    assert await gone("sleep 76.5")


async def test_a_follow_up_of_a_process_whose_worker_died_says_the_process_is_gone(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    from keel.workflows.options import AgentActivityOptions
    from tests.conftest import worker_subprocess
    from tests.test_agent_run import wait_for_pending
    from tests.workspace.apps import procs_workspace

    keel = KeelClient(client, task_queue=task_queue)
    plan = [[command("sleep 79.5", background=True)], [[SB.GET_PROCESS_OUTPUT, {"pid": "$pid"}]]]
    with worker_subprocess(dev_server, task_queue, tmp_path, data_dir, app="tests.workspace.apps:app"):  # kill -9
        run_id = await keel.start_run("procs", json.dumps(plan))
        [call_id] = await wait_for_pending(keel, run_id)
    app = App.of(plan_agent("procs", procs_workspace()))
    options = AgentActivityOptions(host_schedule_to_start=timedelta(seconds=2))
    async with running_worker(client, app, storage, task_queue, options=options) as keel:
        await keel.approve(run_id, call_id)
        started, gone_result = json.loads((await keel.result(run_id)).text)
    pid = started.removeprefix("Started background process (PID: ").removesuffix(")")
    assert gone_result["error"].startswith(f"Background process {pid} is gone: the worker that started it")
    assert await gone("sleep 79.5")  # the new worker's sandbox killed what the dead one left
