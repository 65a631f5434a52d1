"""Where Keel finds Temporal (from `keel.protocol.settings`), and the connection with Keel's data converter (and,
with tracing on, Temporal's tracing interceptor: `keel.client.tracing`)."""

from __future__ import annotations

from temporalio.client import Client

from keel.client import tracing
from keel.client.converter import data_converter
from keel.protocol.settings import load_settings
from keel.storage import BlobStore, open_payload_store


def temporal_address() -> str:
    address = load_settings().temporal_address
    assert address is not None  # derived from host and port when not set
    return address


def temporal_namespace() -> str:
    return load_settings().namespace


def task_queue() -> str:
    return load_settings().task_queue


async def connect(
    address: str | None = None, namespace: str | None = None, *, payloads: BlobStore | None = None
) -> Client:
    """A Temporal client with Keel's data converter (the same one workers and replayers use), its large payloads
    in `payloads` (default `open_payload_store()`: what `KEEL_PAYLOAD_STORE` or the storage settings name).
    With tracing on (`OTEL_TRACES_EXPORTER`), it carries a `TracingInterceptor`, which its workers share."""
    settings = load_settings(temporal_address=address, namespace=namespace)
    assert settings.temporal_address is not None
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.namespace,
        data_converter=data_converter(payloads if payloads is not None else open_payload_store()),
        interceptors=tracing.with_interceptor(()),
    )
