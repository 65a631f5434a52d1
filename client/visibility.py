"""Temporal visibility queries: values inside them quoted one way everywhere."""

from __future__ import annotations

from keel.client.errors import InvalidId
from keel.protocol.identifiers import nul_problem


def quoted(value: str) -> str:
    """`value` for use inside '...' in a visibility query (backslashes and quotes escaped). A NUL cannot be written
    there (Temporal's visibility store refuses the query, which Temporal answers as unavailable): `InvalidId`."""
    if problem := nul_problem(repr(value), value):
        raise InvalidId(problem)
    return value.replace("\\", "\\\\").replace("'", "\\'")
