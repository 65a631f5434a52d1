"""Starting the dev server when ports are contended: a port the server picks itself and loses to another process
is picked again; a port the caller named and finds taken fails at once, saying which; a port handed out by
`free_port` stays ours across a server's kill and restart."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from keel.client import devserver
from keel.client.devserver import DevServer, DevServerConfig, DevServerError
from tests.conftest import free_port


def taken_port() -> socket.socket:
    """A port another process listens on (no `SO_REUSEADDR`: nobody else can bind it)."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder


async def test_a_start_that_lost_a_port_it_picked_itself_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server picks its HTTP, metrics and internal ports at random on each start; one taken between its
    choice and its bind made it exit with code 1 (seen once in CI, on a restart). The first start here is given
    a taken HTTP port, as if it had picked it."""
    cfg = DevServerConfig(host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp_path)
    commands: list[list[str]] = []
    real = devserver.server_command
    with taken_port() as holder:

        def command(cfg: DevServerConfig) -> list[str]:
            commands.append(real(cfg) + (["--http-port", str(holder.getsockname()[1])] if not commands else []))
            return commands[-1]

        monkeypatch.setattr(devserver, "server_command", command)
        server = await DevServer(cfg).start(reuse=False)
        try:
            assert len(commands) == 2
            assert "address already in use" in cfg.log_file.read_text()
            assert devserver.is_listening(cfg.host, cfg.port)
        finally:
            server.stop()


async def test_a_taken_port_the_caller_named_fails_at_once_saying_which(tmp_path: Path) -> None:
    with taken_port() as holder:
        ui_port = holder.getsockname()[1]
        cfg = DevServerConfig(host="127.0.0.1", port=free_port(), ui_port=ui_port, state_dir=tmp_path)
        with pytest.raises(DevServerError) as raised:
            await DevServer(cfg).start(reuse=False)
    said = str(raised.value)
    assert "exited with code 1" in said and str(ui_port) in said and "address already in use" in said, said
    assert cfg.log_file.read_text().count("address already in use") == 1  # not tried again


async def test_a_handed_out_port_is_nobody_elses_while_its_server_is_down() -> None:
    """Another process binding port 0 (a test worker beside this one, a server choosing its own ports) never
    gets a port `free_port` handed out, yet the server it was handed to binds it, and binds it again after a
    restart."""
    port = free_port()
    probe = (  # stops at the port: a closed one comes back within 30,000 binds here (measured 363-25,054)
        "import socket\n"
        "got = set()\n"
        "for _ in range(200000):\n"
        "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "    s.bind(('127.0.0.1', 0)); got.add(s.getsockname()[1]); s.close()\n"
        f"    if {port} in got: break\n"
        f"print({port} in got, len(got))\n"
    )
    result = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    handed, distinct = result.stdout.split()
    assert handed == "False" and int(distinct) > 1000, result.stdout
    for _ in range(2):  # a server, then the same server restarted
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port)
        server.close()
        await server.wait_closed()


async def test_the_server_starts_whatever_opentelemetry_variables_the_stack_exports_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found from outside: `keel dev --phoenix` sets the stack's `OTEL_*` variables (OTLP over HTTP) before it
    starts its own dev server, which read them too and exited at once: "unsupported OTEL exporter protocol:
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf". They are Keel's, not the server's: it starts without them."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{free_port()}/v1/traces")
    cfg = DevServerConfig(host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp_path)
    server = await DevServer(cfg).start(reuse=False)
    try:
        assert server.proc is not None and server.proc.poll() is None
    finally:
        server.stop()


async def test_a_server_left_by_a_killed_keel_dev_is_stopped_by_the_next_or_by_keel_server_stop(
    tmp_path: Path,
) -> None:
    """`keel dev` runs its server in a session of its own (out of the terminal's reach): a `keel dev` killed with
    SIGKILL left it running, the next `keel dev` reused it and left it running at its Ctrl-C too, and `keel server
    stop` said no server was recorded. Now the next one takes it over and stops it; so does `keel server stop`.
    A server whose `keel dev` still runs is only reused: another `keel dev` or `keel demo` leaves it be."""
    cfg = DevServerConfig(port=free_port(), ui_port=free_port(), state_dir=tmp_path)
    owned = await DevServer(cfg).start(own_session=True)  # this process is its `keel dev`, alive
    assert owned.proc is not None
    beside = await DevServer(cfg).start(own_session=True)
    assert not beside.taken_over and devserver.recorded_server(cfg.dev_pid_file, cfg) is None
    beside.stop()
    assert devserver.is_listening(cfg.host, cfg.port) and not devserver.stop_detached(cfg)
    assert devserver.dev_owner(cfg) == os.getpid()

    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()
    cfg.dev_pid_file.write_text(f"{owned.proc.pid} {dead.pid}")  # its `keel dev` killed: the server left
    again = await DevServer(cfg).start(own_session=True)
    assert again.taken_over
    again.stop()
    assert not devserver.is_listening(cfg.host, cfg.port) and owned.proc.wait(timeout=10) is not None

    orphan = await DevServer(cfg).start(own_session=True)
    assert orphan.proc is not None
    cfg.dev_pid_file.write_text(f"{orphan.proc.pid} {dead.pid}")
    assert devserver.stop_detached(cfg)  # `keel server stop`
    assert orphan.proc.wait(timeout=10) is not None and not devserver.is_listening(cfg.host, cfg.port)
