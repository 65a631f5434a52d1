"""Where Keel finds Temporal: address, namespace and task queue from the environment, and the connection."""

from __future__ import annotations

import os

from temporalio.client import Client

from keel.client.converter import data_converter
from keel.protocol import names
from keel.storage import BlobStore, open_payload_store


def temporal_address() -> str:
    return os.environ.get("KEEL_TEMPORAL_ADDRESS", "127.0.0.1:7233")


def temporal_namespace() -> str:
    return os.environ.get("KEEL_NAMESPACE", names.DEFAULT_NAMESPACE)


def task_queue() -> str:
    return os.environ.get("KEEL_TASK_QUEUE", names.DEFAULT_TASK_QUEUE)


async def connect(
    address: str | None = None, namespace: str | None = None, *, payloads: BlobStore | None = None
) -> Client:
    """A Temporal client with Keel's data converter (the same one workers and replayers use), its large payloads
    in `payloads` (default `open_payload_store()`: what `KEEL_PAYLOAD_STORE` or `KEEL_STORAGE_URL` names)."""
    return await Client.connect(
        address or temporal_address(),
        namespace=namespace or temporal_namespace(),
        data_converter=data_converter(payloads if payloads is not None else open_payload_store()),
    )
