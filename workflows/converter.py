"""The data converter used by every client, worker and replayer: pydantic JSON, with clear input errors.

A payload that does not validate against its contract model raises a non-retryable `ApplicationError`
(type `InvalidInput`) instead of pydantic's `ValidationError`. The SDK lets a `FailureError` through, so a bad
`AgentRun` input fails the run with a readable message instead of failing its workflow task forever, and a bad
activity input fails that activity without retries.
"""

from __future__ import annotations

from typing import Any

import temporalio.api.common.v1
from pydantic import ValidationError
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)
from temporalio.exceptions import ApplicationError

from keel.protocol import describe_validation_error


class _StrictJSONConverter(PydanticJSONPlainPayloadConverter):
    def from_payload(self, payload: temporalio.api.common.v1.Payload, type_hint: type | None = None) -> Any:
        try:
            return super().from_payload(payload, type_hint)
        except ValidationError as err:
            name = getattr(type_hint, "__name__", "value")
            raise ApplicationError(
                f"Invalid {name}: {describe_validation_error(err)}", type="InvalidInput", non_retryable=True
            ) from None


class KeelPayloadConverter(CompositePayloadConverter):
    def __init__(self) -> None:
        json_converter = _StrictJSONConverter()
        super().__init__(
            *(
                json_converter if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


DATA_CONVERTER = DataConverter(payload_converter_class=KeelPayloadConverter)

__all__ = ["DATA_CONVERTER", "KeelPayloadConverter"]
