"""The pure parts of running a workflow definition: reading paths, mapping sources, templates and predicates
over the run's data (`initData`, `inputData`, `stepResults`, `state`, `requestContext`). Deterministic: no I/O,
no clocks, so the interpreter may call them in workflow code."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from keel.protocol.workflow_definition import (
    TEMPLATE_PLACEHOLDER,
    AllOrAny,
    Compare,
    Existence,
    InitDataSource,
    LiteralOperand,
    MappingEntry,
    Membership,
    Not,
    Operand,
    Predicate,
    RequestContextSource,
    StepSource,
    TemplateSource,
    Truthiness,
    ValueSource,
)

MISSING = object()


@dataclass
class RunData:
    init_data: Any
    input_data: Any = None
    step_results: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    request_context: Mapping[str, Any] = field(default_factory=dict)

    def roots(self) -> dict[str, Any]:
        return {
            "initData": self.init_data,
            "inputData": self.input_data,
            "stepResults": self.step_results,
            "state": self.state,
            "requestContext": dict(self.request_context),
        }


def get_path(value: Any, path: str) -> Any:
    """`a.b.0.c` read from nested objects and lists; `MISSING` when any part is absent ("" is the value)."""
    for part in [p for p in path.split(".") if p] if path else []:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
    return value


def _found(value: Any) -> Any:
    return None if value is MISSING else value


def map_values(entry: MappingEntry, data: RunData) -> dict[str, Any]:
    """A mapping step's output: each key's source read from the run's data."""
    out: dict[str, Any] = {}
    for key, source in entry.sources().items():
        if isinstance(source, ValueSource):
            out[key] = source.value
        elif isinstance(source, TemplateSource):
            out[key] = render(source.template, data)
        elif isinstance(source, RequestContextSource):
            out[key] = _found(get_path(dict(data.request_context), source.request_context_path))
        elif isinstance(source, InitDataSource):
            out[key] = _found(get_path(data.init_data, source.path))
        elif isinstance(source, StepSource):
            ids = [source.step] if isinstance(source.step, str) else source.step
            ran = next((i for i in ids if i in data.step_results), None)  # the branch that ran
            out[key] = None if ran is None else _found(get_path(data.step_results[ran], source.path))
    return out


def render(template: str, data: RunData) -> str:
    """`${root.path}` placeholders replaced by their values (strings as they are, other values as JSON)."""
    roots = data.roots()

    def value(match: Any) -> str:
        root, _, path = match.group(1).strip().partition(".")
        found = get_path(roots.get(root), path) if root in roots else MISSING
        if found is MISSING or found is None:
            return ""
        return found if isinstance(found, str) else json.dumps(found, separators=(",", ":"))

    return TEMPLATE_PLACEHOLDER.sub(value, template)


def _operand(operand: Operand, data: RunData) -> Any:
    if isinstance(operand, LiteralOperand):
        return operand.literal
    root, _, path = operand.path.partition(".")
    return _found(get_path(data.roots().get(root), path))


def holds(predicate: Predicate, data: RunData) -> bool:
    """Whether `predicate` is true of the run's data (JavaScript's comparison and truthiness)."""
    if isinstance(predicate, Compare):
        left, right = _operand(predicate.left, data), _operand(predicate.right, data)
        if predicate.op == "eq":
            return bool(left == right)
        if predicate.op == "ne":
            return bool(left != right)
        try:
            return bool(
                {"lt": left < right, "lte": left <= right, "gt": left > right, "gte": left >= right}[predicate.op]
            )
        except TypeError:
            return False  # unlike values do not order
    if isinstance(predicate, Membership):
        inside = _operand(predicate.value, data) in predicate.set
        return inside if predicate.op == "in" else not inside
    if isinstance(predicate, Existence):
        root, _, path = predicate.path.partition(".")
        exists = get_path(data.roots().get(root), path) not in (MISSING, None)
        return exists if predicate.op == "exists" else not exists
    if isinstance(predicate, Truthiness):
        truthy = _truthy(_operand(predicate.value, data))
        return truthy if predicate.op == "truthy" else not truthy
    if isinstance(predicate, AllOrAny):
        results = (holds(arg, data) for arg in predicate.args)
        return all(results) if predicate.op == "and" else any(results)
    assert isinstance(predicate, Not)
    return not holds(predicate.arg, data)


def _truthy(value: Any) -> bool:
    if isinstance(value, list | dict):
        return True  # JavaScript: every object is truthy
    return bool(value)
