"""Blob retention: the payload store records which workflow each blob belongs to, and a sweep deletes only the
blobs whose executions are gone from Temporal; a suspended run's blobs survive a sweep and the run resumes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.service import RPCError

from keel.client.blobs import run_sweep
from keel.client.connection import connect
from keel.client.devserver import DevServer, ensure_search_attributes
from keel.protocol.blob_sweep import SweepRequest
from keel.storage import (
    BlobNotFound,
    BlobStore,
    DirectoryBlobStore,
    Storage,
    StorageConfigError,
    blob_key,
    open_payload_store,
    open_storage,
    sweep_blobs,
)
from keel.storage.blobs import UNKNOWN_OWNER, workflow_owner
from keel.storage.s3_blobs import S3BlobStore
from tests.conftest import env_for_subprocess, running_worker
from tests.s3 import S3Server
from tests.test_agent_run import wait_for_pending

SIZE = 300 * 1024


async def test_a_store_keeps_owners_and_deletes_only_what_was_put_before_the_cutoff(store_url: str) -> None:
    storage = open_storage(store_url)
    await storage.init()
    try:
        store = storage.payloads()
        a, b, c = (bytes([n]) * 1000 for n in (1, 2, 3))
        await store.put_blobs({blob_key(a): a, blob_key(b): b}, owner="wf-a")
        await store.put_blobs({blob_key(b): b}, owner="wf-b")  # the same bytes, a second owner
        await store.put_blobs({blob_key(c): c})  # no owner: never swept
        listed = {blob.key: blob for blob in await store.list_blobs()}
        assert {k: v.owners for k, v in listed.items()} == {
            blob_key(a): ("wf-a",), blob_key(b): ("wf-a", "wf-b"), blob_key(c): (UNKNOWN_OWNER,)
        }  # fmt: skip
        assert listed[blob_key(a)].size == 1000
        assert [b.key for b in await store.list_blobs(after=min(listed), limit=1)] == [sorted(listed)[1]]

        later = datetime.now(UTC) + timedelta(seconds=5)
        alive = {"wf-a": False, "wf-b": True, "wf-c": True}

        async def exists(workflow_id: str) -> bool:
            return alive[workflow_id]

        dry = await sweep_blobs(store, exists, put_before=later, dry_run=True)
        assert (dry.blobs, dry.deleted, dry.referenced, dry.unowned) == (3, 1, 1, 1)
        assert len(await store.list_blobs()) == 3  # a dry run deletes nothing

        earlier = datetime.now(UTC) - timedelta(hours=1)
        assert await store.delete_blobs([blob_key(a)], put_before=earlier) == []  # put since: kept
        swept = await sweep_blobs(store, exists, put_before=later)
        assert (swept.deleted, swept.deleted_bytes, swept.referenced, swept.unowned) == (1, 1000, 1, 1)
        assert sorted(b.key for b in await store.list_blobs()) == sorted([blob_key(b), blob_key(c)])
        assert await store.get_blobs([blob_key(b)]) == [b]
        await store.put_blobs({blob_key(a): a}, owner="wf-c")  # put again after a sweep: there again
        assert await store.get_blobs([blob_key(a)]) == [a]
        await store.put_blobs({blob_key(b): b})  # an unknown reference too: b is never swept now
        alive["wf-b"] = False
        assert (await sweep_blobs(store, exists, put_before=later)).deleted == 0
    finally:
        await storage.close()


async def _owned(store: BlobStore, workflow_id: str, namespace: str = "default") -> list[str]:
    return [b.key for b in await store.list_blobs() if workflow_owner(namespace, workflow_id) in b.owners]


async def test_a_sweep_deletes_a_gone_runs_blobs_and_keeps_a_suspended_runs(
    dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    store = DirectoryBlobStore(tmp_path / "payloads")
    client = await connect(dev_server.cfg.address, payloads=store)
    from tests.apps import app

    async with running_worker(client, app, storage, task_queue) as keel:
        gone = await keel.start_run("bulky", f"parallel=1 size={SIZE}")
        await keel.result(gone)
        held = await keel.start_run("bulky", f"parallel=1 size={SIZE + 1} hold=1")
        await wait_for_pending(keel, held)
        assert len(await _owned(store, gone)) >= 1 and len(await _owned(store, held)) >= 1
        default = await run_sweep(keel, SweepRequest(dry_run=True, grace_seconds=0))
        assert default.deleted == 0  # the namespace keeps closed runs a day: `gone` is still retained

        # as if `gone`'s retention had passed (`held` is open)
        kept = await run_sweep(keel, SweepRequest(dry_run=True, grace_seconds=0, retention_seconds=0))
        assert kept.deleted == len(await _owned(store, gone)) and kept.referenced >= 1
        found = await run_sweep(keel, SweepRequest(grace_seconds=0, retention_seconds=0))
        assert found.deleted == kept.deleted and await _owned(store, gone) == []
        assert len(await _owned(store, held)) >= 1

        again = await run_sweep(keel, SweepRequest(retention_seconds=0))  # all put within the grace period: kept
        assert again.deleted == 0

        [pending] = await keel.pending_tool_calls(held)
        await keel.approve(held, pending.tool_call_id)
        result = await keel.result(held)  # its blobs were kept: the run reads them and ends
        assert result.text == f"saw 1 results of [{SIZE + 1}] bytes"


async def test_keel_blobs_reports_and_schedules(dev_server: DevServer, storage: Storage, task_queue: str) -> None:
    from tests.apps import app

    client = await connect(dev_server.cfg.address)
    async with running_worker(client, app, storage, task_queue):
        env = env_for_subprocess(dev_server, KEEL_TASK_QUEUE=task_queue)

        async def keel(*args: str) -> tuple[int, str, str]:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "keel.cli", "blobs", *args, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await proc.communicate()
            return proc.returncode or 0, out.decode(), err.decode()

        code, out, err = await keel("stats")
        assert code == 0, err
        assert out.startswith("blobs: ") and "would delete: " in out
        code, out, err = await keel("sweep", "--dry-run", "--json")
        assert code == 0 and json.loads(out)["dry_run"] is True, err
        code, out, err = await keel("schedule", "--every", "12")
        assert code == 0 and "keel-blob-sweep" in out, err
        described = await client.get_schedule_handle("keel-blob-sweep").describe()
        assert described.schedule.spec.intervals[0].every == timedelta(hours=12)
        code, out, err = await keel("schedule", "--delete")
        assert code == 0, err


async def test_an_s3_payload_store_keeps_owners_sweeps_and_restores_a_blob_put_during_its_delete(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    bucket = s3_server.make_bucket()
    store = open_payload_store(f"s3://{bucket}/keel?endpoint={s3_server.endpoint}")
    assert isinstance(store, S3BlobStore)
    a, b = b"a" * 2000, b"b" * 3000
    await store.put_blobs({blob_key(a): a}, owner="wf/a")  # a workflow id with a slash stays one marker
    await store.put_blobs({blob_key(b): b}, owner="wf-b")
    await store.put_blobs({blob_key(b): b})
    listed = {blob.key: blob for blob in await store.list_blobs()}
    assert {k: v.owners for k, v in listed.items()} == {blob_key(a): ("wf/a",), blob_key(b): (UNKNOWN_OWNER, "wf-b")}
    assert listed[blob_key(a)].size == 2000 and await store.get_blobs([blob_key(b), blob_key(a)]) == [b, a]
    with pytest.raises(BlobNotFound):
        await store.get_blobs(["0" * 64])

    async def gone(workflow_id: str) -> bool:
        return False

    later = datetime.now(UTC) + timedelta(seconds=5)
    swept = await sweep_blobs(store, gone, put_before=later)
    assert (swept.deleted, swept.unowned) == (1, 1) and [x.key for x in await store.list_blobs()] == [blob_key(b)]
    with pytest.raises(BlobNotFound):
        await store.get_blobs([blob_key(a)])

    # A put of the same bytes lands between the sweep's read and its delete: the blob is put back.
    await store.put_blobs({blob_key(a): a}, owner="wf-c")
    assert isinstance(store, S3BlobStore)
    real_read = store._read

    def racing_read(key: str) -> bytes:
        data = real_read(key)
        store._put({key: data}, "wf-d")  # another worker's put, as the sweep is about to delete
        return data

    monkeypatch.setattr(store, "_read", racing_read)
    assert await store.delete_blobs([blob_key(a)], put_before=later + timedelta(hours=1)) == []
    monkeypatch.delattr(store, "_read")
    assert await store.get_blobs([blob_key(a)]) == [a]  # put back, with both owners
    assert [x.owners for x in await store.list_blobs() if x.key == blob_key(a)] == [("wf-c", "wf-d")]


async def test_an_s3_payload_store_carries_a_runs_large_values_and_bad_credentials_fail_clearly(
    dev_server: DevServer, storage: Storage, task_queue: str, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.apps import app

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    bucket = s3_server.make_bucket()
    store = open_payload_store(f"s3://{bucket}?endpoint={s3_server.endpoint}")
    client = await connect(dev_server.cfg.address, payloads=store)
    async with running_worker(client, app, storage, task_queue) as keel:
        run_id = await keel.start_run("bulky", f"parallel=2 size={SIZE}")
        assert (await keel.result(run_id)).text == f"saw 2 results of [{SIZE}] bytes"
    owned = [b for b in await store.list_blobs() if workflow_owner("default", run_id) in b.owners]
    assert owned and all(b.size > 256 * 1024 for b in owned)

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    denied = open_payload_store(f"s3://{bucket}?endpoint={s3_server.endpoint}")
    with pytest.raises(StorageConfigError, match=f"s3://{bucket}/.*access denied"):
        await denied.get_blobs([owned[0].key])


async def test_a_sweep_keeps_the_blobs_of_a_run_suspended_in_another_namespace(
    dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    """Two namespaces share one payload store: a sweep in one judges each blob in the namespace whose run wrote
    it. Before, it looked the other namespace's run up in its own, found nothing and deleted the blobs of a run
    suspended there, which then could not resume."""
    from tests.apps import app

    store = DirectoryBlobStore(tmp_path / "payloads")
    here = await connect(dev_server.cfg.address, payloads=store)
    other = f"keel-other-{uuid.uuid4().hex[:8]}"
    await here.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=other, workflow_execution_retention_period=Duration(seconds=86400))
    )
    there = await connect(dev_server.cfg.address, namespace=other, payloads=store)
    async with asyncio.timeout(60):  # a new namespace takes a moment to be served
        while True:
            try:
                await ensure_search_attributes(there, other)
                break
            except RPCError:
                await asyncio.sleep(0.5)
    async with running_worker(there, app, storage, task_queue) as elsewhere:
        held = await elsewhere.start_run("bulky", f"parallel=1 size={SIZE} hold=1")
        await wait_for_pending(elsewhere, held)
        assert await _owned(store, held, namespace=other)
        async with running_worker(here, app, storage, task_queue) as keel:
            swept = await run_sweep(keel, SweepRequest(grace_seconds=0, retention_seconds=0))
        assert swept.referenced >= 1 and await _owned(store, held, namespace=other)
        [pending] = await elsewhere.pending_tool_calls(held)
        await elsewhere.approve(held, pending.tool_call_id)
        assert (await elsewhere.result(held)).text == f"saw 1 results of [{SIZE}] bytes"

    # An owner of a namespace this cluster does not serve is kept; one written before owners named their
    # namespace (the bare workflow id) is judged in the sweeping namespace, as before.
    a, b = b"a" * 1000, b"b" * 1000
    await store.put_blobs({blob_key(a): a}, owner=workflow_owner("no-such-namespace", "gone"))
    await store.put_blobs({blob_key(b): b}, owner="gone-before-namespaces")
    async with running_worker(here, app, storage, task_queue) as keel:
        await run_sweep(keel, SweepRequest(grace_seconds=0, retention_seconds=0))
    assert await store.get_blobs([blob_key(a)]) == [a]
    with pytest.raises(BlobNotFound):
        await store.get_blobs([blob_key(b)])


_KILLED_MID_DELETE = """
import asyncio, os, signal, sys
from datetime import UTC, datetime, timedelta
from keel.storage import open_payload_store

store = open_payload_store(sys.argv[1])
key, blob = sys.argv[2], store._blob(sys.argv[2])
s3 = store._s3()
remove = s3.remove_object

def remove_then_die(bucket, name, *args, **kwargs):
    if name == blob:  # another worker puts the same bytes as this sweep deletes them; then the sweep dies
        store._put({key: store._read(key)}, "@default/wf-racing")
        remove(bucket, name, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
    return remove(bucket, name, *args, **kwargs)

s3.remove_object = remove_then_die
asyncio.run(store.delete_blobs([key], put_before=datetime.now(UTC) + timedelta(hours=1)))
"""


async def test_an_s3_sweep_killed_mid_delete_loses_no_blob(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep killed (SIGKILL) after it deleted a blob that another worker had just put again, before it could
    see that put and put the bytes back: the blob is still read, and the next sweep restores it and keeps it.
    Before, the blob was gone for good under a run that had just referenced it."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    url = f"s3://{s3_server.make_bucket()}/keel?endpoint={s3_server.endpoint}"
    store = open_payload_store(url)
    data = b"d" * 5000
    await store.put_blobs({blob_key(data): data}, owner=workflow_owner("default", "wf-old"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _KILLED_MID_DELETE, url, blob_key(data),
        env=os.environ | {"PYTHONPATH": str(Path(__file__).parent.parent)},
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode()
    assert await store.get_blobs([blob_key(data)]) == [data]

    async def alive(owner: str) -> bool:
        return owner == workflow_owner("default", "wf-racing")

    swept = await sweep_blobs(store, alive, put_before=datetime.now(UTC) + timedelta(hours=2))
    assert (swept.blobs, swept.deleted, swept.referenced) == (1, 0, 1)
    assert await store.get_blobs([blob_key(data)]) == [data]
    assert isinstance(store, S3BlobStore)
    assert [
        o.object_name for o in store._s3().list_objects(store._at.bucket, prefix="keel/trash/", recursive=True)
    ] == []
