"""A local service process: a server that `keel dev` runs in the background beside the stack (SeaweedFS for
`--s3`, `keel.client.s3_server`; Arize Phoenix for `--phoenix`, `keel.client.phoenix_server`), with its pid file
and log in a directory of its own.

It runs in its own session (Ctrl-C in the terminal reaches `keel dev`, which stops it), its output appended to its
log; `start()` returns once it answers, and raises with the log's end when it exits first or does not answer in
time. `stop()`: SIGTERM to its process group, SIGKILL after 10 s. One left running by a `keel dev` killed with
SIGKILL is found by its pid file and killed by the next start in that directory, when the process of that pid
still names the directory (a reused pid is left alone).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

from keel.client.devserver import is_listening
from keel.client.errors import KeelClientError

STOP_SECONDS = 10.0


_RESERVED: dict[int, socket.socket] = {}
"""Every port handed out, held bound (never listening) until this process exits."""


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports on 127.0.0.1, each held for its taker until this process exits.

    Each stays bound by a socket of this process with `SO_REUSEADDR` that never listens. The kernel then hands
    it to no other `bind(("", 0))` or outgoing connection, in this process or another (a test worker beside
    this one, a server picking its own ports), while a server given it binds it as usual (Go, asyncio,
    PostgreSQL, Node and gRPC set `SO_REUSEADDR` on their listeners) and binds it again after a restart: a
    server killed and restarted on its port does not find it taken in between.
    """
    chosen: list[int] = []
    while len(chosen) < count:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
        _RESERVED[port] = sock
        chosen.append(port)
    return chosen


def free_port() -> int:
    """One free port on 127.0.0.1 (see `free_ports`)."""
    return free_ports(1)[0]


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def command_line(pid: int) -> bytes:
    """`pid`'s arguments, NUL-separated (empty when it is gone or not ours to read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def environment(pid: int) -> list[bytes]:
    """`pid`'s environment, `NAME=value` each (empty when it is gone or not ours to read)."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


class LocalService:
    """One service run from `directory` with its port `port`: a subclass names it, says what a taken port means
    (`port_taken`, formatted with `port`) and how a leftover of its own is known (`_owns`), and its `start()`
    calls `_claim_port()`, then `_run(argv, env, ready)`."""

    name: ClassVar[str]
    """In messages: `{name} exited with code 1`."""
    error: ClassVar[type[KeelClientError]]
    files: ClassVar[str]
    """The pid file and the log in `directory`: `{files}.pid`, `{files}.log`."""
    port_taken: ClassVar[str]
    ready_seconds: ClassVar[float]

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = Path(directory).resolve()
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.directory / f"{self.files}.log"

    @property
    def pid_file(self) -> Path:
        return self.directory / f"{self.files}.pid"

    def _owns(self, pid: int) -> bool:
        """Whether the process `pid` is this directory's server (not another that reused the pid)."""
        raise NotImplementedError

    def _claim_port(self) -> None:
        """Stop what a killed `keel dev` left running in this directory; raise `error` when the port is still
        taken."""
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            pid = 0
        if pid and self._owns(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + STOP_SECONDS
            # A dead leader can show as a zombie while its threads still hold the port: wait for those too.
            while (alive(pid) or is_listening("127.0.0.1", self.port)) and time.monotonic() < deadline:
                time.sleep(0.05)
        if is_listening("127.0.0.1", self.port):
            raise self.error(self.port_taken.format(port=self.port))

    def _run(self, argv: list[str], env: Mapping[str, str], ready: Callable[[], object]) -> int:
        """Start `argv` in `directory` and wait until `ready()` returns without raising; its pid. A process that
        exits first, or is not ready within `ready_seconds`, is stopped and `error` raised.
        """
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                argv, cwd=self.directory, env=dict(env),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.pid_file.write_text(str(self.proc.pid))
        try:
            self._wait_ready(self.proc, ready)
        except BaseException:
            self.stop()
            raise
        return self.proc.pid

    def _wait_ready(self, proc: subprocess.Popen[bytes], ready: Callable[[], object]) -> None:
        deadline = time.monotonic() + self.ready_seconds
        while True:
            if proc.poll() is not None:
                tail = self.log_file.read_text(errors="replace")[-2000:]
                raise self.error(f"{self.name} exited with code {proc.returncode}:\n{tail}")
            try:
                ready()
                return
            except Exception as err:
                if time.monotonic() > deadline:
                    message = f"{self.name} not ready after {self.ready_seconds:g} s: {err}; see {self.log_file}"
                    raise self.error(message) from err
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM its process group, SIGKILL after 10 s. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, STOP_SECONDS), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything of its group that outlived it
        self.pid_file.unlink(missing_ok=True)


__all__ = ["STOP_SECONDS", "LocalService", "alive", "command_line", "environment", "free_port", "free_ports"]
