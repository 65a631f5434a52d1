"""LocalSandbox without isolation: results shaped as Mastra's, the environment, timeouts, cancellation, bounded
output, background processes and the lifecycle, each checked from outside (output, /proc)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from keel.workspace_providers.errors import SandboxError
from keel.workspace_providers.local_sandbox import LocalSandbox
from keel.workspace_providers.types import CommandResult


def live_pids(match: Callable[[int, str], bool]) -> list[int]:
    """Processes (not zombies) for which `match(pgrp, cmdline)` holds."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if state != "Z" and match(int(pgrp), cmdline):
            found.append(int(entry))
    return found


def group_members(pgid: int) -> list[int]:
    return live_pids(lambda pgrp, _: pgrp == pgid)


async def eventually(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    """The first truthy `check()` within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)
    return value


def vm_rss_kb() -> int:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text())
    assert match
    return int(match[1])


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[LocalSandbox]:
    sb = LocalSandbox(tmp_path / "ws")
    yield sb
    await sb.destroy()


def ws(sb: LocalSandbox) -> Path:
    return Path(sb.working_directory)


async def test_a_command_runs_in_the_working_directory_and_reports_like_mastra(sandbox: LocalSandbox) -> None:
    result = await sandbox.execute_command("echo hi && pwd")
    assert result == CommandResult(
        success=True,
        exit_code=0,
        stdout=f"hi\n{sandbox.working_directory}\n",
        stderr="",
        execution_time_ms=result.execution_time_ms,
        command="echo hi && pwd",
    )


async def test_args_are_shell_quoted_after_the_command(sandbox: LocalSandbox) -> None:
    await sandbox.init()
    (ws(sandbox) / "dir").mkdir()
    (ws(sandbox) / "dir" / "a.txt").write_text("alpha")
    listed = await sandbox.execute_command("ls", ["-1", "dir"])
    assert (listed.command, listed.stdout) == ("ls -1 dir", "a.txt\n")
    printed = await sandbox.execute_command("printf", ["%s|", "a b", "it's", ""])
    assert printed.command == "printf '%s|' 'a b' 'it'\\''s' ''"
    assert printed.stdout == "a b|it's||"


async def test_a_failing_command_keeps_both_streams_and_its_exit_code(sandbox: LocalSandbox) -> None:
    result = await sandbox.execute_command("sh -c 'echo out; echo err >&2; exit 3'")
    assert (result.success, result.exit_code, result.stdout, result.stderr) == (False, 3, "out\n", "err\n")
    assert not result.killed and not result.timed_out


async def test_cwd_is_resolved_against_the_working_directory(sandbox: LocalSandbox, tmp_path: Path) -> None:
    await sandbox.init()
    (ws(sandbox) / "src").mkdir()
    assert (await sandbox.execute_command("pwd", cwd="src")).stdout == f"{sandbox.working_directory}/src\n"
    assert (await sandbox.execute_command("pwd", cwd=str(tmp_path))).stdout == f"{tmp_path}\n"
    with pytest.raises(SandboxError, match="Failed to spawn process"):
        await sandbox.execute_command("pwd", cwd="missing")


async def test_commands_see_only_path_home_and_the_given_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FOO_KEY", "MY_SECRET", "X_TOKEN"):
        monkeypatch.setenv(name, "leaked")
    sb = LocalSandbox(tmp_path / "ws", env={"SANDBOX_VAR": "s", "SHARED": "sandbox"})
    result = await sb.execute_command("env", env={"CALL_VAR": "c", "SHARED": "call"})
    seen = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert seen == {
        "PATH": os.environ["PATH"],
        "HOME": sb.working_directory,
        "PWD": sb.working_directory,
        "SANDBOX_VAR": "s",
        "CALL_VAR": "c",
        "SHARED": "call",
    }
    await sb.destroy()


async def test_stdin_is_closed(sandbox: LocalSandbox) -> None:
    result = await sandbox.execute_command("cat", timeout=5_000)
    assert (result.exit_code, result.stdout, result.timed_out) == (0, "", False)


async def test_a_timeout_reports_124_and_kills_the_whole_group(sandbox: LocalSandbox) -> None:
    result = await sandbox.execute_command("sleep 100 & echo $$ $!; sleep 100", timeout=300)
    assert (result.success, result.exit_code, result.killed, result.timed_out) == (False, 124, True, True)
    assert result.stderr == "\nProcess timed out after 300ms"
    assert 300 <= result.execution_time_ms < 3_000
    pgid, child = map(int, result.stdout.split())
    await eventually(lambda: not group_members(pgid), timeout=2)
    assert child not in live_pids(lambda *_: True)


async def test_the_sandbox_timeout_is_the_default_and_a_call_overrides_it(tmp_path: Path) -> None:
    sb = LocalSandbox(tmp_path / "ws", timeout=200)
    assert (await sb.execute_command("sleep 5")).stderr == "\nProcess timed out after 200ms"
    assert (await sb.execute_command("sleep 0.3", timeout=0)).exit_code == 0
    await sb.destroy()


async def test_cancelling_a_command_kills_its_group_before_the_error_propagates(sandbox: LocalSandbox) -> None:
    marker = ws(sandbox) / "pgid"
    task = asyncio.create_task(sandbox.execute_command(f"sleep 100 & echo $$ > {marker}; sleep 100"))
    pgid = int(await eventually(lambda: marker.exists() and marker.read_text().strip()))
    assert len(group_members(pgid)) >= 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: not group_members(pgid), timeout=2)


async def test_output_is_bounded_while_it_streams(sandbox: LocalSandbox) -> None:
    cap, total = 1024 * 1024, 50 * 1024 * 1024
    before = vm_rss_kb()
    result = await sandbox.execute_command("yes | head -c 50M; yes e | head -c 3M >&2")
    growth_kb = vm_rss_kb() - before
    assert result.exit_code == 0
    assert result.stdout == "y\n" * (cap // 2) and result.stdout_dropped_bytes == total - cap
    assert result.stderr == "e\n" * (cap // 2) and result.stderr_dropped_bytes == 2 * cap
    assert result.stdout_truncated and result.stderr_truncated
    assert growth_kb < 20 * 1024


async def test_the_kept_output_starts_on_a_character_boundary(tmp_path: Path) -> None:
    sb = LocalSandbox(tmp_path / "ws", max_output_bytes=9)
    result = await sb.execute_command("printf 'ééééééééé'")  # 18 bytes
    assert (result.stdout, result.stdout_dropped_bytes) == ("éééé", 10)
    await sb.destroy()


async def test_a_background_process_returns_at_once_and_stays_queryable_after_it_exits(sandbox: LocalSandbox) -> None:
    handle = await sandbox.processes.spawn("echo start; sleep 0.3; echo end >&2; exit 4")
    assert (  # still running: spawn did not wait for the exit
        handle.running and handle.exit_code is None and handle.command == "echo start; sleep 0.3; echo end >&2; exit 4"
    )
    assert await handle.wait(0.01) is None
    await eventually(lambda: handle.stdout() == "start\n")
    assert await handle.wait() == 4
    assert (handle.running, handle.stdout(), handle.stderr()) == (False, "start\n", "end\n")
    assert sandbox.processes.get(handle.pid) is handle and sandbox.processes.list() == [handle]
    assert await sandbox.processes.kill(handle.pid) is False
    assert sandbox.processes.get(handle.pid) is None


async def test_killing_a_background_process_kills_its_children(sandbox: LocalSandbox) -> None:
    handle = await sandbox.processes.spawn("sleep 100 & echo $!; echo oops >&2; sleep 100")
    child = int(await eventually(lambda: handle.stdout().strip()))
    pgid = int(handle.pid)
    assert child in group_members(pgid)
    assert await sandbox.processes.kill(handle.pid) is True
    await eventually(lambda: not group_members(pgid), timeout=2)
    result = handle.result()
    assert (result.exit_code, result.killed, result.stdout, result.stderr) == (128, True, f"{child}\n", "oops\n")
    assert sandbox.processes.get(handle.pid) is None
    assert await sandbox.processes.kill(handle.pid) is False
    assert await sandbox.processes.kill("999999999") is False


async def test_a_process_ignoring_sigterm_is_killed_after_the_grace(sandbox: LocalSandbox) -> None:
    handle = await sandbox.processes.spawn("trap '' TERM; sleep 100 & echo ready; wait")
    await eventually(lambda: handle.stdout() == "ready\n")
    assert await sandbox.processes.kill(handle.pid) is True
    await eventually(lambda: not group_members(int(handle.pid)), timeout=2)


async def test_kill_returns_even_if_an_escaped_process_holds_the_pipes(sandbox: LocalSandbox) -> None:
    handle = await sandbox.processes.spawn("setsid sleep 100 & echo $!; sleep 100")
    escaped = int(await eventually(lambda: handle.stdout().strip()))
    try:
        assert await asyncio.wait_for(sandbox.processes.kill(handle.pid), 5) is True
        assert not handle.running
    finally:
        os.kill(escaped, signal.SIGKILL)


async def test_a_background_timeout_reports_124(sandbox: LocalSandbox) -> None:
    handle = await sandbox.processes.spawn("sleep 100", timeout=200)
    assert await handle.wait() == 124
    assert handle.stderr() == "\nProcess timed out after 200ms" and handle.result().timed_out


async def test_background_output_is_bounded(tmp_path: Path) -> None:
    sb = LocalSandbox(tmp_path / "ws", max_output_bytes=1000)
    handle = await sb.processes.spawn("yes | head -c 100000")
    assert await handle.wait() == 0
    assert handle.stdout() == "y\n" * 500 and handle.result().stdout_dropped_bytes == 99_000
    await sb.destroy()


@pytest.mark.parametrize("end", ["stop", "destroy"])
async def test_stop_and_destroy_kill_every_process(tmp_path: Path, end: str) -> None:
    sb = LocalSandbox(tmp_path / "ws")
    handles = [await sb.processes.spawn("sleep 100 & sleep 100") for _ in range(2)]
    marker = tmp_path / "ws" / "pgid"
    foreground = asyncio.create_task(sb.execute_command(f"sleep 100 & echo $$ > {marker}; sleep 100"))
    groups = [int(h.pid) for h in handles] + [int(await eventually(lambda: marker.exists() and marker.read_text()))]
    await (sb.stop() if end == "stop" else sb.destroy())
    assert sb.status == ("stopped" if end == "stop" else "destroyed")
    assert (await foreground).killed
    assert sb.processes.list() == [] and all(not h.running for h in handles)
    await eventually(lambda: not any(group_members(g) for g in groups), timeout=2)
    await sb.destroy()


async def test_the_lifecycle_follows_mastra(tmp_path: Path) -> None:
    sb = LocalSandbox(tmp_path / "ws")
    assert sb.status == "pending" and not (tmp_path / "ws").exists()
    await sb.init()
    assert sb.status == "running" and (tmp_path / "ws").is_dir()
    await sb.stop()
    assert sb.status == "stopped"
    assert (await sb.execute_command("true")).success and sb.status == "running"  # a command starts it again
    await sb.destroy()
    assert sb.status == "destroyed"
    with pytest.raises(SandboxError, match="Sandbox is not ready"):
        await sb.execute_command("true")
    with pytest.raises(SandboxError, match="destroyed"):
        await sb.init()
    lazy = LocalSandbox(tmp_path / "lazy")
    assert (await lazy.processes.spawn("true")).pid and lazy.status == "running"
    await lazy.destroy()


async def test_info_has_mastras_keys(sandbox: LocalSandbox) -> None:
    await sandbox.init()
    info = sandbox.get_info()
    assert re.fullmatch(r"local-sandbox-[0-9a-z]+-[0-9a-f]{6}", info["id"])
    assert {k: info[k] for k in ("name", "provider", "status")} == {
        "name": "LocalSandbox",
        "provider": "local",
        "status": "running",
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", info["createdAt"])
    assert info["resources"]["memoryMB"] > 0 and info["resources"]["cpuCores"] >= 1
    assert info["metadata"] == {
        "workingDirectory": sandbox.working_directory,
        "platform": "linux",
        "pythonVersion": info["metadata"]["pythonVersion"],
        "isolation": "none",
    }
    assert list(info) == ["id", "name", "provider", "status", "createdAt", "resources", "metadata"]


def test_ids_and_instructions(tmp_path: Path) -> None:
    assert LocalSandbox(tmp_path, id="mine").id == "mine"
    assert LocalSandbox(tmp_path).id != LocalSandbox(tmp_path).id
    assert LocalSandbox(tmp_path).get_instructions() == f'Local command execution. Working directory: "{tmp_path}".'
    assert LocalSandbox(tmp_path, instructions="").get_instructions() == ""
    dynamic = LocalSandbox(tmp_path, instructions=lambda ctx: f"user {ctx and ctx['user']}")
    assert dynamic.get_instructions({"user": "ada"}) == "user ada"
    assert dynamic.get_instructions() == "user None"
    assert LocalSandbox("rel").working_directory == os.path.abspath("rel")


def test_bad_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_output_bytes"):
        LocalSandbox(tmp_path, max_output_bytes=-1)
    with pytest.raises(ValueError, match="isolation"):
        LocalSandbox(tmp_path, isolation="seatbelt")  # type: ignore[arg-type]


async def test_background_processes_are_bounded_finished_ones_making_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from keel.workspace_providers import processes

    monkeypatch.setattr(processes, "MAX_BACKGROUND", 2)
    sandbox = LocalSandbox(tmp_path)
    await sandbox.init()
    try:
        done = await sandbox.processes.spawn("true")
        await done.wait(5)
        await sandbox.processes.spawn("sleep 78.5")
        await sandbox.processes.spawn("sleep 78.5")  # the finished one is forgotten
        assert sandbox.processes.get(done.pid) is None
        with pytest.raises(SandboxError, match=r"Too many background processes \(2 running\)"):
            await sandbox.processes.spawn("sleep 78.5")
    finally:
        await sandbox.destroy()
