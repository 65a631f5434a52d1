"""`keel dev --s3`: a local SeaweedFS started with the stack (data in `$KEEL_DATA_DIR/seaweedfs`), answering with
the credentials it prints, holding the stack's large payloads, and stopped with it (no `weed` process left)."""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import subprocess
import uuid
from pathlib import Path

import httpx
from minio import Minio
from minio.error import S3Error

from keel.client.devserver import DevServer, is_listening
from keel.client.s3_server import LocalS3Server
from tests.conftest import free_port
from tests.test_cli_day_to_day import KEEL, ROOT


def processes_naming(text: str) -> list[int]:
    """The pids whose command line contains `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


async def test_keel_dev_s3_serves_the_printed_endpoint_keeps_payloads_there_and_stops_with_the_stack(
    dev_server: DevServer, tmp_path: Path
) -> None:
    s3_port, api_port, data = free_port(), free_port(), tmp_path / "data"
    env = {
        **os.environ,
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_UI_PORT": str(dev_server.cfg.ui_port),  # else `keel dev` waits 20 s for a UI on 8233
        "KEEL_TASK_QUEUE": f"dev-s3-{uuid.uuid4()}",
        "KEEL_DATA_DIR": str(data),
        "KEEL_API_PORT": str(api_port),
    }
    for var in ("KEEL_APP", "KEEL_STORAGE_URL", "KEEL_PAYLOAD_STORE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(var, None)
    dev = subprocess.Popen(  # noqa: ASYNC220 (read from a thread below)
        [KEEL, "dev", "--s3", "--s3-port", str(s3_port)], env=env, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    printed: list[str] = []
    try:
        assert dev.stdout is not None
        async with asyncio.timeout(90):
            while not printed or "Ctrl-C stops everything" not in printed[-1]:
                line = await asyncio.to_thread(dev.stdout.readline)
                assert line, f"keel dev exited: {dev.wait()} {dev.stderr.read() if dev.stderr else ''}"
                printed.append(line)
        text = "".join(printed)
        endpoint = f"http://127.0.0.1:{s3_port}"
        assert f"S3 (SeaweedFS) at {endpoint}, bucket 'keel', data in {data.resolve() / 'seaweedfs'}" in text
        keys = re.search(r"AWS_ACCESS_KEY_ID=(\S+) AWS_SECRET_ACCESS_KEY=(\S+)", text)
        assert keys is not None
        assert f"KEEL_PAYLOAD_STORE=s3://keel/payloads?endpoint={endpoint}&region=us-east-1" in text
        s3 = Minio(f"127.0.0.1:{s3_port}", access_key=keys[1], secret_key=keys[2], secure=False, region="us-east-1")
        assert await asyncio.to_thread(s3.bucket_exists, "keel")
        try:
            Minio(f"127.0.0.1:{s3_port}", access_key=keys[1], secret_key="wrong", secure=False).bucket_exists("keel")
            raise AssertionError("a wrong secret was accepted")
        except S3Error as refused:
            assert refused.code == "SignatureDoesNotMatch"
        # A message over 256 KiB: the run's input goes to the payload store, in the bucket.
        async with httpx.AsyncClient(timeout=60) as http:
            big = "x" * (300 * 1024)
            answer = await http.post(f"http://127.0.0.1:{api_port}/api/agents/demo/generate", json={"messages": big})
            assert answer.status_code == 200, answer.text
        blobs = [o.object_name for o in s3.list_objects("keel", prefix="payloads/blobs/", recursive=True)]
        assert blobs, "no payload blob in the bucket"
    finally:
        dev.send_signal(signal.SIGINT)
        _, stderr = dev.communicate(timeout=60)
    assert dev.returncode == 0, stderr
    assert not is_listening("127.0.0.1", s3_port)
    assert processes_naming(str(data.resolve() / "seaweedfs")) == []
    assert list(Path("/tmp").glob(f"seaweedfs-*-{s3_port}.sock")) == []


def test_a_server_left_by_a_killed_keel_dev_is_stopped_by_the_next_start_and_the_data_stays(tmp_path: Path) -> None:
    port = free_port()
    first = LocalS3Server(tmp_path, port)
    s3 = first.start()
    leftover, first.proc = first.proc, None  # what `keel dev` killed with SIGKILL leaves: weed still running
    assert leftover is not None
    second = LocalS3Server(tmp_path, port)
    try:
        client = Minio(f"127.0.0.1:{port}", access_key=s3.access_key, secret_key=s3.secret_key, secure=False)
        client.put_object("keel", "kept.txt", io.BytesIO(b"kept"), 4)
        again = second.start()
        assert leftover.wait(timeout=10) is not None
        assert (again.access_key, again.secret_key) == (s3.access_key, s3.secret_key)
        assert client.get_object("keel", "kept.txt").read() == b"kept"
    finally:
        second.stop()
        if leftover.poll() is None:
            os.killpg(leftover.pid, signal.SIGKILL)
            leftover.wait()
    assert processes_naming(str(tmp_path / "seaweedfs")) == []
