"""Temporal visibility queries: values inside them quoted one way everywhere."""

from __future__ import annotations

from keel.client.errors import InvalidId


def quoted(value: str) -> str:
    """`value` for use inside '...' in a visibility query (backslashes and quotes escaped). A NUL cannot be written
    there (Temporal's visibility store refuses the query, which Temporal answers as unavailable): `InvalidId`."""
    if "\x00" in value:
        raise InvalidId(f"{value!r}: an id with a NUL character cannot be looked up in Temporal's visibility")
    return value.replace("\\", "\\\\").replace("'", "\\'")
