"""A local Arize Phoenix for `keel dev --phoenix` (and the tests): a real OTLP receiver with a trace UI, fed by the
stack's exporters over OTLP/HTTP.

Phoenix (PyPI `arize-phoenix`, pinned to `PHOENIX_VERSION`) pins many packages of its own, so it lives in a
virtualenv of its own inside Keel's: `$VIRTUAL_ENV/tools/phoenix`, made on first use (`install_phoenix`: about a
minute from PyPI, ~850 MB; nothing is downloaded after that until `PHOENIX_VERSION` moves; `$KEEL_PHOENIX` names
another `phoenix` command).
`LocalPhoenix.start()` runs `phoenix serve` on 127.0.0.1: the UI, its REST and GraphQL APIs and OTLP/HTTP
(`/v1/traces`) on the port asked for (default 6006), OTLP/gRPC on a free one; its SQLite database and log in the
working directory given (`keel dev`: `$KEEL_DATA_DIR/phoenix`, kept from one start to the next); its own telemetry
and external resources (fonts, analytics) off: it needs no outside connection (it runs without internet). It
runs as a `keel.client.local_service` process (pid file `phoenix.pid`, log `phoenix.log`): stopped with its process
group; one left running by a `keel dev` killed with SIGKILL is stopped by the next start in that directory.

`LocalPhoenix.env()` is what points a Keel process at it: `OTEL_TRACES_EXPORTER` gains `otlp`, the traces
endpoint and protocol are Phoenix's, and the spans go to the Phoenix project `keel` unless
`OTEL_RESOURCE_ATTRIBUTES` names one (`openinference.project.name`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from keel.client.errors import KeelClientError
from keel.client.local_service import LocalService, environment, free_ports
from keel.client.tool_venv import install_command, installed_command
from keel.protocol import tracing

PHOENIX_VERSION = "20.26.1"
DEFAULT_PORT = 6006
DEFAULT_PROJECT = "keel"
PROJECT_ATTRIBUTE = "openinference.project.name"
"""The resource attribute Phoenix files a process's spans under (a project of that name, made on first span)."""
READY_SECONDS = 90.0
"""A first start migrates a new database: ~9 s on two cores."""
INSTALL_SECONDS = 1200.0


class PhoenixError(KeelClientError):
    """Phoenix could not be installed or started."""


def tools_dir() -> Path:
    """Where Phoenix's own virtualenv lives: `tools/phoenix` inside this interpreter's environment."""
    return Path(sys.prefix) / "tools" / "phoenix"


def phoenix_command() -> Path | None:
    """The installed `phoenix` command (`$KEEL_PHOENIX` when set), or None (none, or one of another release)."""
    given = os.environ.get("KEEL_PHOENIX")
    if given:
        return Path(given)
    return installed_command(tools_dir(), f"arize-phoenix=={PHOENIX_VERSION}", "phoenix")


def install_phoenix(*, quiet: bool = True) -> Path:
    """`arize-phoenix==PHOENIX_VERSION` in its own virtualenv (`tools_dir()`), made or brought to that release when
    needed (`keel.client.tool_venv`); the command."""
    command = phoenix_command()
    if command is not None:
        return command
    requirement = f"arize-phoenix=={PHOENIX_VERSION}"
    try:
        return install_command(tools_dir(), requirement, "phoenix", timeout=INSTALL_SECONDS, quiet=quiet)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:
        raise PhoenixError(f"Could not install {requirement} into {tools_dir()}: {err}") from err


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
        exporters = tracing.exporter_names(current)
        resource = current.get("OTEL_RESOURCE_ATTRIBUTES", "").strip().strip(",")
        if f"{PROJECT_ATTRIBUTE}=" not in resource:
            resource = ",".join(p for p in (resource, f"{PROJECT_ATTRIBUTE}={self.project}") if p)
        return {
            "OTEL_TRACES_EXPORTER": ",".join([*exporters, *([] if "otlp" in exporters else ["otlp"])]),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.traces_endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_RESOURCE_ATTRIBUTES": resource,
        }


def _healthy(url: str) -> None:
    import httpx

    httpx.get(f"{url}/healthz", timeout=2).raise_for_status()


class LocalPhoenix(LocalService):
    """`start()` Phoenix with its working directory `directory` and its UI on `port`, `stop()` it."""

    name = "Phoenix"
    error = PhoenixError
    files = "phoenix"
    port_taken = "Port {port} is in use (another Phoenix?): choose one with --phoenix-port"
    ready_seconds = READY_SECONDS

    def __init__(self, directory: Path, port: int = DEFAULT_PORT, *, project: str = DEFAULT_PROJECT) -> None:
        super().__init__(directory, port)
        self.project = project

    def _owns(self, pid: int) -> bool:
        return f"PHOENIX_WORKING_DIR={self.directory}".encode() in environment(pid)

    def start(self, command: Path | None = None) -> RunningPhoenix:
        """Start it (`command`: default the installed one) and wait until it answers.

        Raises:
            PhoenixError: not installed, the port taken, or no answer within `READY_SECONDS` (with the log's end).
        """
        command = command or phoenix_command()
        if command is None:
            raise PhoenixError(f"Phoenix is not installed: `keel dev --phoenix` installs it into {tools_dir()}")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._claim_port()
        [grpc_port] = free_ports(1)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
        env.update(
            PHOENIX_WORKING_DIR=str(self.directory),
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.port),
            PHOENIX_GRPC_PORT=str(grpc_port),
            PHOENIX_TELEMETRY_ENABLED="false",
            PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
        )
        url = f"http://127.0.0.1:{self.port}"
        pid = self._run([str(command), "serve"], env, lambda: _healthy(url))
        return RunningPhoenix(url, grpc_port, pid, self.directory, self.project)


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
