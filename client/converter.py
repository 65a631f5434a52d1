"""Keel's data converter, the same on every client, worker and replayer: pydantic JSON with clear input errors,
and values over 256 KiB stored by reference through temporalio's `ExternalStorage`.

A payload that does not validate against its contract model raises a non-retryable `ApplicationError` (type
`InvalidInput`) instead of pydantic's `ValidationError`. The SDK lets a `FailureError` through, so a bad
`AgentRun` input fails the run with a readable message instead of failing its workflow task forever, and a bad
activity input fails that activity without retries.

A payload of 256 KiB or more (an activity result with large tool outputs, a large run input or result) is
written to the payload store (`keel.storage.open_payload_store`) and only a reference goes into the history, so
nothing nears Temporal's 2 MB payload limit; so is a definition run's local tool step result of 2 KiB or more, so
that the markers of the many local steps one workflow task may run stay far under its 4 MiB. Every process that
reads such a history needs the same store.
"""

from __future__ import annotations

import functools
from typing import Any

import temporalio.api.common.v1
from temporalio import activity
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    ExternalStorage,
    JSONPlainPayloadConverter,
    StorageDriver,
    StorageDriverSelectContext,
    StorageDriverWorkflowInfo,
)
from temporalio.exceptions import ApplicationError

from keel.client.payload_driver import MAX_PAYLOAD_BYTES, KeelPayloadDriver
from keel.protocol import names
from keel.protocol.payloads import LOCAL_STEP_RESULT_THRESHOLD, PAYLOAD_SIZE_THRESHOLD
from keel.storage import BlobStore


@functools.cache
def _pydantic_json() -> EncodingPayloadConverter:
    """temporalio's pydantic JSON converter, refusing an invalid value with an `InvalidInput` error. Made on the
    first payload, not at import: a client that only lists runs (`keel runs`) never loads pydantic."""
    from pydantic import ValidationError
    from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter

    from keel.protocol import describe_validation_error

    class StrictJSONConverter(PydanticJSONPlainPayloadConverter):
        def from_payload(self, payload: temporalio.api.common.v1.Payload, type_hint: type | None = None) -> Any:
            try:
                return super().from_payload(payload, type_hint)
            except ValidationError as err:
                name = getattr(type_hint, "__name__", "value")
                raise ApplicationError(
                    f"Invalid {name}: {describe_validation_error(err)}", type="InvalidInput", non_retryable=True
                ) from None

    return StrictJSONConverter()


class _StrictJSONConverter(EncodingPayloadConverter):
    """JSON through pydantic (`_pydantic_json`), with the same encoding as temporalio's."""

    @property
    def encoding(self) -> str:
        return "json/plain"

    def to_payload(self, value: Any) -> temporalio.api.common.v1.Payload | None:
        return _pydantic_json().to_payload(value)

    def from_payload(self, payload: temporalio.api.common.v1.Payload, type_hint: type | None = None) -> Any:
        return _pydantic_json().from_payload(payload, type_hint)


@functools.cache
def _encoding_converters() -> tuple[EncodingPayloadConverter, ...]:
    """Made once: they keep no state, and the SDK makes a payload converter for every payload's context."""
    json_converter = _StrictJSONConverter()
    return tuple(
        json_converter if isinstance(c, JSONPlainPayloadConverter) else c
        for c in DefaultPayloadConverter.default_encoding_payload_converters
    )


class KeelPayloadConverter(CompositePayloadConverter):
    def __init__(self) -> None:
        super().__init__(*_encoding_converters())


def external_storage(payloads: BlobStore, *, max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> ExternalStorage:
    """Values of 256 KiB or more in `payloads`, by reference, and a definition run's local tool step results of
    2 KiB or more (`LOCAL_STEP_RESULT_THRESHOLD`); more than `max_payload_bytes` is refused."""
    driver = KeelPayloadDriver(payloads, max_payload_bytes=max_payload_bytes)

    def select(context: StorageDriverSelectContext, payload: temporalio.api.common.v1.Payload) -> StorageDriver | None:
        return driver if payload.ByteSize() >= PAYLOAD_SIZE_THRESHOLD or _local_step_result(context) else None

    return ExternalStorage(drivers=[driver], driver_selector=select, payload_size_threshold=LOCAL_STEP_RESULT_THRESHOLD)


def _local_step_result(context: StorageDriverSelectContext) -> bool:
    """Whether the payload being stored is the result of a definition run's local tool step: encoded by the
    worker that ran it, in its context, for its workflow (not a call the tool makes with its own client)."""
    if not activity.in_activity():
        return False
    info = activity.info()
    return (
        info.is_local
        and info.activity_type == names.WORKFLOW_TOOL_STEP
        and isinstance(context.target, StorageDriverWorkflowInfo)
        and context.target.id == info.workflow_id
    )


def data_converter(payloads: BlobStore | None, *, max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> DataConverter:
    """Keel's converter; with `payloads`, large values go there by reference (without, they travel inline and
    Temporal refuses those over its limit: for tools that only inspect small histories)."""
    storage = external_storage(payloads, max_payload_bytes=max_payload_bytes) if payloads is not None else None
    return DataConverter(payload_converter_class=KeelPayloadConverter, external_storage=storage)


__all__ = ["KeelPayloadConverter", "data_converter", "external_storage"]
