"""Where Keel finds Temporal: address, namespace and task queue from the environment, and the connection."""

from __future__ import annotations

import os

from temporalio.client import Client

from keel.protocol import names
from keel.workflows import DATA_CONVERTER


def temporal_address() -> str:
    return os.environ.get("KEEL_TEMPORAL_ADDRESS", "127.0.0.1:7233")


def temporal_namespace() -> str:
    return os.environ.get("KEEL_NAMESPACE", names.DEFAULT_NAMESPACE)


def task_queue() -> str:
    return os.environ.get("KEEL_TASK_QUEUE", names.DEFAULT_TASK_QUEUE)


async def connect(address: str | None = None, namespace: str | None = None) -> Client:
    """A Temporal client with Keel's data converter (the same one workers and replayers use)."""
    return await Client.connect(
        address or temporal_address(), namespace=namespace or temporal_namespace(), data_converter=DATA_CONVERTER
    )
