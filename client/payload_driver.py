"""The `ExternalStorage` driver that keeps Temporal's large payloads in Keel's payload store (a directory, or the
PostgreSQL `payloads` table; an S3 bucket is the next driver behind the same interface)."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverActivityInfo,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)
from temporalio.exceptions import ApplicationError

from keel.storage import BlobStore, blob_key
from keel.storage.blobs import workflow_owner

MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
"""The largest single payload Keel stores: larger fails at once, without retries (it would fail again)."""


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def describe_target(context: StorageDriverStoreContext) -> str:
    """What a payload belongs to, for an error message: the activity or workflow (and its run)."""
    if activity.in_activity():  # an activity's result or heartbeat, encoded by the worker that ran it
        info = activity.info()
        return f"activity {info.activity_type} of run {info.workflow_id}"
    target = context.target
    if isinstance(target, StorageDriverActivityInfo):
        return f"activity {target.type or '?'} ({target.id or '?'})"
    if isinstance(target, StorageDriverWorkflowInfo):
        return f"workflow {target.type or '?'} {target.id or ''}".rstrip()
    return "a client call"


def owner_of(context: StorageDriverStoreContext) -> str | None:
    """The one workflow (`workflow_owner`: namespace and id) whose histories alone hold the reference: the
    workflow an activity's result (local or not) goes back to, or a workflow's own payload (its result, a
    continue-as-new input: the target has its run). None when other histories may hold it too or it is unknown
    (a client's start or signal input, a child's input, an activity's input, a standalone activity): such a blob
    is never swept."""
    target = context.target
    if activity.in_activity() and (target is None or isinstance(target, StorageDriverWorkflowInfo)):
        info = activity.info()
        if info.workflow_id and (target is None or target.id == info.workflow_id):  # not one its tool sends
            return workflow_owner(info.namespace, info.workflow_id)
        return None
    if isinstance(target, StorageDriverWorkflowInfo) and target.run_id and target.id:
        return workflow_owner(target.namespace, target.id)
    return None


class KeelPayloadDriver(StorageDriver):
    """Stores payloads in a `BlobStore` under their SHA-256 (storing the same payload twice stores it once).

    Args:
        blobs: the payload store.
        max_payload_bytes: payloads larger than this raise a non-retryable `ApplicationError` (`PayloadTooLarge`).
    """

    def __init__(self, blobs: BlobStore, *, max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> None:
        self._blobs = blobs
        self._max = max_payload_bytes

    @property
    def blobs(self) -> BlobStore:
        """The store (the blob sweep finds it here, on the worker's data converter)."""
        return self._blobs

    def name(self) -> str:
        return "keel-payloads"

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        encoded = [p.SerializeToString() for p in payloads]
        for data in encoded:
            if len(data) > self._max:
                raise ApplicationError(
                    f"A payload of {describe_target(context)} is {_mib(len(data))}, more than the "
                    f"{_mib(self._max)} Keel stores by reference",
                    type="PayloadTooLarge",
                    non_retryable=True,
                )
        keys = [blob_key(data) for data in encoded]
        await self._blobs.put_blobs(dict(zip(keys, encoded, strict=True)), owner=owner_of(context))
        return [StorageDriverClaim(claim_data={"key": key}) for key in keys]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        blobs = await self._blobs.get_blobs([c.claim_data["key"] for c in claims])
        return [Payload.FromString(data) for data in blobs]
