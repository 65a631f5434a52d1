"""The `keel.sweep_blobs` activity: `keel.storage.sweep_blobs` over the payload store the worker's data converter
writes to, an owner's execution looked up in Temporal's visibility (open, or closed and still retained: kept)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from keel.protocol import names
from keel.protocol.blob_sweep import BlobSweep, SweepRequest
from keel.storage import BlobStore, sweep_blobs


async def _retention(client: Client) -> timedelta:
    described = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=client.namespace))
    return described.config.workflow_execution_retention_ttl.ToTimedelta()


def converter_store(client: Client) -> BlobStore:
    """The payload store the client's data converter keeps large values in (Keel's driver: `blobs`)."""
    storage = client.data_converter.external_storage
    for driver in storage.drivers if storage is not None else ():
        blobs = getattr(driver, "blobs", None)
        if isinstance(blobs, BlobStore):
            return blobs
    raise ApplicationError(
        "This worker keeps no values by reference (its data converter has no Keel payload store)",
        type="NoPayloadStore",
        non_retryable=True,
    )


class BlobActivities:
    @activity.defn(name=names.SWEEP_BLOBS_ACTIVITY)
    async def sweep_blobs(self, request: SweepRequest) -> BlobSweep:
        client = activity.client()

        now = datetime.now(UTC)
        retention = (
            timedelta(seconds=request.retention_seconds)
            if request.retention_seconds is not None
            else await _retention(client)
        )

        async def exists(workflow_id: str) -> bool:
            """An execution with this id is open, or closed less than the retention ago (its latest run: earlier
            runs closed before it)."""
            try:
                described = await client.get_workflow_handle(workflow_id).describe()
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return False
                raise
            if described.close_time is None or described.close_time + retention > now:
                return True
            # A child's result (and failure) is in its parent's history too: kept while the parent is.
            return described.parent_id is not None and await exists(described.parent_id)

        return await sweep_blobs(
            converter_store(client),
            exists,
            put_before=now - timedelta(seconds=request.grace_seconds),
            dry_run=request.dry_run,
            progress=lambda found: activity.heartbeat(found.blobs),
        )

    def all(self) -> list[Callable[..., Any]]:
        return [self.sweep_blobs]
