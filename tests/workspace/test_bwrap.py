"""LocalSandbox with ``isolation="bwrap"``: the argv, refusing to start without bubblewrap, and from inside: no
network, no writes outside the allowed paths, no host PIDs, NoNewPrivs, no leaked environment, nothing left behind
after a timeout or a kill."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from keel.workspace_providers.bwrap import bwrap_argv
from keel.workspace_providers.errors import IsolationUnavailable
from keel.workspace_providers.local_sandbox import LocalSandbox
from tests.workspace.test_local_sandbox import eventually, live_pids


@pytest.fixture
def extra(tmp_path: Path) -> Path:
    path = tmp_path / "extra"
    path.mkdir()
    return path


@pytest.fixture
async def jailed(tmp_path: Path, extra: Path) -> AsyncIterator[LocalSandbox]:
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap missing")
    sb = LocalSandbox(tmp_path / "ws", isolation="bwrap", writable_paths=[str(extra)])
    yield sb
    await sb.destroy()


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield int(server.getsockname()[1])


def marked(marker: str) -> list[int]:
    return live_pids(lambda _, cmd: marker in cmd)


def test_the_argv_is_mastras_bubblewrap_command() -> None:
    argv = bwrap_argv("/usr/bin/bwrap", "echo hi", working_directory="/w", cwd="/w/src", writable_paths=["/data"])
    assert argv[:5] == ["/usr/bin/bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"]
    assert argv[-4:] == ["--", "sh", "-c", "echo hi"]
    joined = " ".join(argv)
    for part in (
        "--proc /proc",
        "--tmpfs /tmp",
        "--ro-bind-try /usr /usr",
        "--ro-bind-try /etc/resolv.conf /etc/resolv.conf",
        "--bind /w /w --bind /data /data",
        "--dev /dev --remount-ro /",
        "--cap-drop ALL",
        "--new-session",
        "--die-with-parent",
        "--chdir /w/src",
    ):
        assert part in joined
    assert argv.index("--dev") > max(i for i, a in enumerate(argv) if a == "--bind")


async def test_init_without_bwrap_fails_naming_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    sb = LocalSandbox(tmp_path / "ws", isolation="bwrap")
    with pytest.raises(IsolationUnavailable, match=r"apt install bubblewrap \(Debian/Ubuntu\)"):
        await sb.init()
    assert sb.status == "error"
    with pytest.raises(IsolationUnavailable):  # a command never falls back to running unisolated
        await sb.execute_command("true")
    assert not (tmp_path / "ws").exists()


async def test_the_network_is_unreachable_inside(jailed: LocalSandbox, tmp_path: Path, listener: int) -> None:
    connect = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {listener}), 2)\""
    inside = await jailed.execute_command(connect)
    assert inside.exit_code != 0 and "create_connection" in inside.stderr  # python ran; the connection failed
    plain = LocalSandbox(tmp_path / "plain")
    assert (await plain.execute_command(connect)).exit_code == 0
    await plain.destroy()


async def test_only_the_working_directory_and_writable_paths_are_writable(
    jailed: LocalSandbox, tmp_path: Path, extra: Path
) -> None:
    sibling = tmp_path / "outside"
    sibling.mkdir()
    elsewhere = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        for target in (sibling / "x", elsewhere / "x", Path("/etc/keel-sandbox-probe")):
            result = await jailed.execute_command(f"echo x > {target}")
            assert result.exit_code != 0 and not target.exists(), target
    finally:
        shutil.rmtree(elsewhere)
    assert (await jailed.execute_command(f"echo in > inside.txt && echo more > {extra}/y")).success
    assert (tmp_path / "ws" / "inside.txt").read_text() == "in\n" and (extra / "y").read_text() == "more\n"


async def test_host_processes_are_invisible_and_privileges_dropped(jailed: LocalSandbox) -> None:
    pids = [int(p) for p in (await jailed.execute_command("ls /proc")).stdout.split() if p.isdigit()]
    assert pids and os.getpid() not in pids and max(pids) < 100
    status = (await jailed.execute_command("grep -E 'NoNewPrivs|CapEff' /proc/self/status")).stdout.split()
    assert status == ["CapEff:", "0000000000000000", "NoNewPrivs:", "1"]


async def test_nothing_of_the_worker_environment_leaks_inside(
    jailed: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SECRET", "leaked")
    result = await jailed.execute_command("env", env={"CALL_VAR": "c"})
    seen = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert seen == {
        "PATH": os.environ["PATH"],
        "HOME": jailed.working_directory,
        "PWD": jailed.working_directory,
        "CALL_VAR": "c",
    }


async def test_a_timeout_kills_everything_inside(jailed: LocalSandbox) -> None:
    marker = f"987.{secrets.randbelow(10**6)}"
    result = await jailed.execute_command(f"sleep {marker} & sleep {marker}", timeout=500)
    assert (result.exit_code, result.timed_out, result.stderr) == (124, True, "\nProcess timed out after 500ms")
    await eventually(lambda: not marked(marker), timeout=2)


async def test_kill_and_destroy_kill_everything_inside(jailed: LocalSandbox) -> None:
    markers = [f"986.{secrets.randbelow(10**6)}" for _ in range(2)]
    handles = [await jailed.processes.spawn(f"sleep {m} & sleep {m}") for m in markers]
    await eventually(lambda: all(len(marked(m)) >= 4 for m in markers))  # bwrap twice, sh, the sleeps
    assert await jailed.processes.kill(handles[0].pid) is True
    await eventually(lambda: not marked(markers[0]), timeout=2)
    assert marked(markers[1])
    await jailed.destroy()
    await eventually(lambda: not marked(markers[1]), timeout=2)
