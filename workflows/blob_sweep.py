"""`BlobSweep`: delete the payload store's blobs that no execution can reference any more, as one activity that
heartbeats its progress. `keel blobs sweep` runs it; `keel blobs schedule` puts it on a Temporal Schedule."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from keel.protocol import names
from keel.protocol.blob_sweep import BlobSweep, SweepRequest


@workflow.defn(name=names.BLOB_SWEEP, sandboxed=False)
class BlobSweepWorkflow:
    @workflow.run
    async def run(self, request: SweepRequest) -> BlobSweep:
        result: BlobSweep = await workflow.execute_activity(
            names.SWEEP_BLOBS_ACTIVITY,
            request,
            result_type=BlobSweep,
            start_to_close_timeout=timedelta(hours=6),
            heartbeat_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=1), maximum_attempts=10),
            summary="dry run: what a sweep would delete" if request.dry_run else "delete unreferenced blobs",
        )
        return result
