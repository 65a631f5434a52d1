"""A local Arize Phoenix for `keel dev --phoenix` (and the tests): a real OTLP receiver with a trace UI, fed by the
stack's exporters over OTLP/HTTP.

Phoenix (PyPI `arize-phoenix`, pinned to `PHOENIX_VERSION`) pins many packages of its own, so it lives in a
virtualenv of its own inside Keel's: `$VIRTUAL_ENV/tools/phoenix`, made on first use (`install_phoenix`: about a
minute from PyPI, ~850 MB; nothing is downloaded after that; `$KEEL_PHOENIX` names another `phoenix` command).
`LocalPhoenix.start()` runs `phoenix serve` on 127.0.0.1: the UI, its REST and GraphQL APIs and OTLP/HTTP
(`/v1/traces`) on the port asked for (default 6006), OTLP/gRPC on a free one; its SQLite database and log in the
working directory given (`keel dev`: `$KEEL_DATA_DIR/phoenix`, kept from one start to the next); its own telemetry
and external resources (fonts, analytics) off: it needs no outside connection (it runs without internet). It
runs in its own session: SIGTERM to its process group, SIGKILL after 10 s. One left running by a `keel dev` killed
with SIGKILL is found by its pid file and stopped by the next start in that directory.

`LocalPhoenix.env()` is what points a Keel process at it: `OTEL_TRACES_EXPORTER` gains `otlp`, the traces
endpoint and protocol are Phoenix's, and the spans go to the Phoenix project `keel` unless
`OTEL_RESOURCE_ATTRIBUTES` names one (`openinference.project.name`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from keel.client.errors import KeelClientError

PHOENIX_VERSION = "20.26.1"
DEFAULT_PORT = 6006
DEFAULT_PROJECT = "keel"
PROJECT_ATTRIBUTE = "openinference.project.name"
"""The resource attribute Phoenix files a process's spans under (a project of that name, made on first span)."""
READY_SECONDS = 90.0
"""A first start migrates a new database: ~9 s on two cores."""
STOP_SECONDS = 10.0
INSTALL_SECONDS = 1200.0


class PhoenixError(KeelClientError):
    """Phoenix could not be installed or started."""


def tools_dir() -> Path:
    """Where Phoenix's own virtualenv lives: `tools/phoenix` inside this interpreter's environment."""
    return Path(sys.prefix) / "tools" / "phoenix"


def phoenix_command() -> Path | None:
    """The installed `phoenix` command (`$KEEL_PHOENIX` when set), or None."""
    given = os.environ.get("KEEL_PHOENIX")
    if given:
        return Path(given)
    command = tools_dir() / "bin" / "phoenix"
    return command if command.exists() else None


def install_phoenix(*, quiet: bool = True) -> Path:
    """`arize-phoenix==PHOENIX_VERSION` in its own virtualenv (`tools_dir()`), made when missing; the command."""
    command = phoenix_command()
    if command is not None:
        return command
    target = tools_dir()
    python = target / "bin" / "python"
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=120)
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *(["--quiet"] if quiet else [])]
        subprocess.run([*pip, f"arize-phoenix=={PHOENIX_VERSION}"], check=True, timeout=INSTALL_SECONDS)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:
        raise PhoenixError(f"Could not install arize-phoenix=={PHOENIX_VERSION} into {target}: {err}") from err
    command = target / "bin" / "phoenix"
    if not command.exists():
        raise PhoenixError(f"arize-phoenix=={PHOENIX_VERSION} installed into {target} without a `phoenix` command")
    return command


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@dataclass(frozen=True)
class RunningPhoenix:
    """A running Phoenix: its UI (and REST API, `{url}/v1`), its OTLP endpoints, its pid and directory."""

    url: str
    grpc_port: int
    pid: int
    directory: Path
    project: str = DEFAULT_PROJECT

    @property
    def traces_endpoint(self) -> str:
        """OTLP/HTTP traces: what `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set to."""
        return f"{self.url}/v1/traces"

    def env(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """The variables that send a process's spans here, given its environment (default `os.environ`)."""
        current = dict(os.environ if environ is None else environ)
        exporters = [n.strip() for n in current.get("OTEL_TRACES_EXPORTER", "").split(",")]
        exporters = [n for n in exporters if n and n != "none"]
        resource = current.get("OTEL_RESOURCE_ATTRIBUTES", "").strip().strip(",")
        if f"{PROJECT_ATTRIBUTE}=" not in resource:
            resource = ",".join(p for p in (resource, f"{PROJECT_ATTRIBUTE}={self.project}") if p)
        return {
            "OTEL_TRACES_EXPORTER": ",".join([*exporters, *([] if "otlp" in exporters else ["otlp"])]),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.traces_endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_RESOURCE_ATTRIBUTES": resource,
        }


class LocalPhoenix:
    """`start()` Phoenix with its working directory `directory` and its UI on `port`, `stop()` it."""

    def __init__(self, directory: Path, port: int = DEFAULT_PORT, *, project: str = DEFAULT_PROJECT) -> None:
        self.directory = Path(directory).resolve()
        self.port = port
        self.project = project
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.directory / "phoenix.log"

    @property
    def pid_file(self) -> Path:
        return self.directory / "phoenix.pid"

    def _stop_leftover(self) -> None:
        """Stop the Phoenix a killed `keel dev` left running in this directory (a reused pid is left alone: its
        environment must name the directory)."""
        try:
            pid = int(self.pid_file.read_text())
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except (OSError, ValueError):
            return
        if f"PHOENIX_WORKING_DIR={self.directory}".encode() in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + STOP_SECONDS
            while (_alive(pid) or _listening(self.port)) and time.monotonic() < deadline:
                time.sleep(0.05)

    def start(self, command: Path | None = None) -> RunningPhoenix:
        """Start it (`command`: default the installed one) and wait until it answers.

        Raises:
            PhoenixError: not installed, the port taken, or no answer within `READY_SECONDS` (with the log's end).
        """
        command = command or phoenix_command()
        if command is None:
            raise PhoenixError(f"Phoenix is not installed: `keel dev --phoenix` installs it into {tools_dir()}")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._stop_leftover()
        if _listening(self.port):
            raise PhoenixError(f"Port {self.port} is in use (another Phoenix?): choose one with --phoenix-port")
        grpc_port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
        env.update(
            PHOENIX_WORKING_DIR=str(self.directory),
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.port),
            PHOENIX_GRPC_PORT=str(grpc_port),
            PHOENIX_TELEMETRY_ENABLED="false",
            PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
        )
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(command), "serve"], cwd=self.directory, env=env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.pid_file.write_text(str(self.proc.pid))
        running = RunningPhoenix(
            f"http://127.0.0.1:{self.port}", grpc_port, self.proc.pid, self.directory, self.project
        )
        try:
            self._wait_ready(running)
        except BaseException:
            self.stop()
            raise
        return running

    def _wait_ready(self, running: RunningPhoenix) -> None:
        import httpx

        assert self.proc is not None
        deadline = time.monotonic() + READY_SECONDS
        while True:
            if self.proc.poll() is not None:
                tail = self.log_file.read_text(errors="replace")[-2000:]
                raise PhoenixError(f"Phoenix exited with code {self.proc.returncode}:\n{tail}")
            try:
                if httpx.get(f"{running.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError as err:
                if time.monotonic() > deadline:
                    raise PhoenixError(
                        f"Phoenix not ready after {READY_SECONDS:g} s: {err}; see {self.log_file}"
                    ) from err
            time.sleep(0.2)

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


__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_PROJECT",
    "PHOENIX_VERSION",
    "LocalPhoenix",
    "PhoenixError",
    "RunningPhoenix",
    "install_phoenix",
    "phoenix_command",
    "tools_dir",
]
