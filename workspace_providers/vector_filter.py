"""Metadata filters for vector queries, in the MongoDB-like language Mastra's vector stores take:

    {"sourceFile": "docs/a.md"}                       equality (a bare value is `$eq`)
    {"year": {"$gte": 2020, "$lt": 2025}}             comparisons: $eq $ne $gt $gte $lt $lte
    {"tag": {"$in": ["a", "b"]}}, {"$nin": [...]}     membership
    {"skillScope": {"$exists": False}}                presence
    {"$and": [...]}, {"$or": [...]}, {"$not": {...}}  combination; dotted keys reach nested fields

`matches()` evaluates a filter in memory; `pgvector` translates the same language to SQL. Both check it with
`validate()` first, so a malformed filter is one clear `SearchError`, never a wrong answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from keel.workspace_providers.errors import SearchError

COMPARISONS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
OPERATORS = COMPARISONS | {"$in", "$nin", "$exists"}
COMBINATORS = frozenset({"$and", "$or", "$not"})
_MISSING = object()


def validate(filter: Mapping[str, Any] | None) -> None:
    if filter is None:
        return
    if not isinstance(filter, Mapping):
        raise SearchError(f"A filter must be an object, not {type(filter).__name__}")
    for key, value in filter.items():
        if not isinstance(key, str):
            raise SearchError(f"A filter's keys are field names or operators, not {key!r}")
        if key in ("$and", "$or"):
            if not isinstance(value, list) or not value:
                raise SearchError(f"{key} takes a non-empty list of filters")
            for part in value:
                validate(part)
        elif key == "$not":
            validate(value)
        elif key.startswith("$"):
            raise SearchError(f"Unknown filter operator {key!r} (known: {', '.join(sorted(OPERATORS | COMBINATORS))})")
        elif isinstance(value, Mapping) and any(not isinstance(k, str) or k.startswith("$") for k in value):
            for op, operand in value.items():
                if op not in OPERATORS:
                    raise SearchError(f"Unknown operator {op!r} for field {key!r}")
                if op in ("$in", "$nin") and not isinstance(operand, list):
                    raise SearchError(f"{op} for field {key!r} takes a list")
                if op == "$exists" and not isinstance(operand, bool):
                    raise SearchError(f"$exists for field {key!r} takes true or false")


def field_value(metadata: Mapping[str, Any], key: str) -> Any:
    value: Any = metadata
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether `metadata` satisfies `filter` (None: everything does)."""
    if not filter:
        return True
    for key, condition in filter.items():
        if key == "$and":
            ok = all(matches(metadata, part) for part in condition)
        elif key == "$or":
            ok = any(matches(metadata, part) for part in condition)
        elif key == "$not":
            ok = not matches(metadata, condition)
        else:
            ok = _field_matches(field_value(metadata, key), condition)
        if not ok:
            return False
    return True


def _field_matches(value: Any, condition: Any) -> bool:
    if not (isinstance(condition, Mapping) and any(k.startswith("$") for k in condition)):
        condition = {"$eq": condition}
    for op, operand in condition.items():
        if op == "$exists":
            ok = (value is not _MISSING) == operand
        elif value is _MISSING:
            ok = op in ("$ne", "$nin")
        elif op == "$eq":
            ok = _equal(value, operand)
        elif op == "$ne":
            ok = not _equal(value, operand)
        elif op == "$in":
            ok = any(_equal(value, o) for o in operand)
        elif op == "$nin":
            ok = not any(_equal(value, o) for o in operand)
        else:
            ok = _compare(value, op, operand)
        if not ok:
            return False
    return True


def _equal(value: Any, operand: Any) -> bool:
    if isinstance(value, bool) or isinstance(operand, bool):
        return type(value) is type(operand) and value == operand
    return bool(value == operand)


def _compare(value: Any, op: str, operand: Any) -> bool:
    numbers = (int, float)
    same = (isinstance(value, numbers) and isinstance(operand, numbers)) or (
        isinstance(value, str) and isinstance(operand, str)
    )
    if not same or isinstance(value, bool) or isinstance(operand, bool):
        return False  # values of different kinds never compare (as in jsonb)
    if op == "$gt":
        return bool(value > operand)
    if op == "$gte":
        return bool(value >= operand)
    if op == "$lt":
        return bool(value < operand)
    return bool(value <= operand)
