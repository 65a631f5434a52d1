"""One readable line for a pydantic validation error, used wherever a caller's input is rejected."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(err: ValidationError) -> str:
    """`field.path: message; other.field: message`, with `(root)` for errors of the value itself."""
    parts = []
    for e in err.errors(include_url=False):
        where = ".".join(str(p) for p in e["loc"]) or "(root)"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)
