"""The base of every model that crosses a process boundary: camelCase on the wire, snake_case in Python."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """camelCase JSON (what the `temporal` CLI, the Temporal UI, storage and HTTP clients see), snake_case
    attributes, unknown keys ignored (so a newer writer's extra fields never break an older reader)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
    )
