"""An S3 workspace whose server goes down mid-run: the run waits for it (the tool is retried, the model is not told
of a failure that was only an outage) and completes with the files written once."""

from __future__ import annotations

import asyncio
import json

from temporalio.client import Client

from keel.app import App
from keel.storage import Storage
from keel.workspace_providers import WORKSPACE_TOOLS, S3Filesystem, Workspace
from tests.conftest import running_worker
from tests.s3 import seaweedfs_with_outages
from tests.test_agent_run import wait_for_pending
from tests.workspace.apps import plan_agent

FS = WORKSPACE_TOOLS.FILESYSTEM
OUTAGE = 20.0


async def test_a_run_waits_out_a_20_second_s3_outage_and_completes(
    client: Client, storage: Storage, task_queue: str
) -> None:
    with seaweedfs_with_outages() as (server, outage):
        bucket = server.make_bucket()
        fs = S3Filesystem(
            bucket, prefix="ws", endpoint=server.endpoint, access_key_id=server.access_key,
            secret_access_key=server.secret_key,
        )  # fmt: skip
        ws = Workspace(id="s3-outage", filesystem=fs, tools={FS.WRITE_FILE: {"require_approval": True}})
        app = App.of(plan_agent("writer", ws))
        plan = [[[FS.WRITE_FILE, {"path": "one.txt", "content": "one"}]],
                [[FS.WRITE_FILE, {"path": "two.txt", "content": "two"}]]]  # fmt: skip
        async with running_worker(client, app, storage, task_queue) as keel:
            run_id = await keel.start_run("writer", json.dumps(plan))
            [first] = await wait_for_pending(keel, run_id)
            await keel.approve(run_id, first)
            [second] = await wait_for_pending(keel, run_id)
            down = asyncio.create_task(outage(OUTAGE))
            await asyncio.sleep(1)  # the server is down now
            await keel.approve(run_id, second)  # the write runs against a server that refuses connections
            await down
            result = await asyncio.wait_for(keel.result(run_id), 120)
        assert json.loads(result.text) == ["Wrote 3 bytes to one.txt", "Wrote 3 bytes to two.txt"]
        objects = {o.object_name for o in server.client().list_objects(bucket, recursive=True)}
        assert objects == {"ws/one.txt", "ws/two.txt"}
        assert server.client().get_object(bucket, "ws/two.txt").read() == b"two"
