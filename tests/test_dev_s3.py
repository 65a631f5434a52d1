"""`keel dev --s3`: a local SeaweedFS started with the stack (data in `$KEEL_DATA_DIR/seaweedfs`), answering with
the credentials it prints, holding the stack's large payloads, and stopped with it (no `weed` process left)."""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
from pathlib import Path

import httpx
from minio import Minio
from minio.error import S3Error

from keel.client.devserver import DevServer, is_listening
from keel.client.s3_server import LocalS3Server
from tests.conftest import free_port
from tests.dev_services import keel_dev, processes_naming


async def test_keel_dev_s3_serves_the_printed_endpoint_keeps_payloads_there_and_stops_with_the_stack(
    dev_server: DevServer, tmp_path: Path
) -> None:
    s3_port, api_port, data = free_port(), free_port(), tmp_path / "data"
    unset = ("KEEL_PAYLOAD_STORE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    async with keel_dev(
        "s3", s3_port, dev_server=dev_server, data=data, api_port=api_port, env=env, timeout=90
    ) as text:
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


def test_ports_handed_out_one_after_another_are_never_the_same() -> None:
    # Each socket is closed before its taker binds, so the kernel may offer one port twice: with a thousand picks
    # from ~28,000 ephemeral ports a repeat is all but certain unless the ports handed out are remembered. (A
    # repeat once started `keel dev --s3` with its API and its S3 server on one port.)
    ports = [free_port() for _ in range(1000)]
    assert len(set(ports)) == len(ports)
