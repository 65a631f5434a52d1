"""Temporal visibility queries: values inside them quoted one way everywhere."""

from __future__ import annotations


def quoted(value: str) -> str:
    """`value` for use inside '...' in a visibility query (backslashes and quotes escaped)."""
    return value.replace("\\", "\\\\").replace("'", "\\'")
