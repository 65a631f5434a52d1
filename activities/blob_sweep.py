"""The `keel.sweep_blobs` activity: `keel.storage.sweep_blobs` over the payload store the worker's data converter
writes to, an owner's execution looked up in its namespace (open, or closed and still retained: kept)."""

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
from keel.storage.blobs import owner_workflow


async def _retention(client: Client) -> timedelta:
    described = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=client.namespace))
    return described.config.workflow_execution_retention_ttl.ToTimedelta()


async def _retained(client: Client, retention: timedelta, workflow_id: str, now: datetime) -> bool:
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    if described.close_time is None or described.close_time + retention > now:
        return True
    # A child's result (and failure) is in its parent's history too: kept while the parent is.
    return described.parent_id is not None and await _retained(client, retention, described.parent_id, now)


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
        namespaces: dict[str, tuple[Client, timedelta] | None] = {}

        async def namespace(name: str) -> tuple[Client, timedelta] | None:
            """A client of the namespace and its retention; None for one this cluster does not show us."""
            if name not in namespaces:
                other = client if name == client.namespace else Client(client.service_client, namespace=name)
                try:
                    retention = await _retention(other)  # (also: whether the namespace is there)
                    if request.retention_seconds is not None:
                        retention = timedelta(seconds=request.retention_seconds)
                    namespaces[name] = (other, retention)
                except RPCError as err:
                    if err.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.PERMISSION_DENIED):
                        raise
                    namespaces[name] = None
            return namespaces[name]

        async def exists(owner: str) -> bool:
            """An execution of the owner is open, or closed less than its namespace's retention ago (its latest
            run: earlier runs closed before it). A blob of a namespace this cluster does not show is kept."""
            name, workflow_id = owner_workflow(owner)
            found = await namespace(name or client.namespace)
            return True if found is None else await _retained(*found, workflow_id, now)

        return await sweep_blobs(
            converter_store(client),
            exists,
            put_before=now - timedelta(seconds=request.grace_seconds),
            dry_run=request.dry_run,
            progress=lambda found: activity.heartbeat(found.blobs),
        )

    def all(self) -> list[Callable[..., Any]]:
        return [self.sweep_blobs]
