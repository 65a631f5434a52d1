"""Checking a workflow definition before it is saved: its shape (`keel.protocol.workflow_definition`), then
what needs the app: every tool, agent and workflow it names exists, step ids are unique, mappings, templates
and predicates refer to steps that ran before, nested workflows form no cycle, its JSON Schemas are schemas,
and it stays within the size and depth limits. Every problem is reported at once, each at its JSON path with
the offending value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import TypeAdapter, ValidationError

from keel.app.definitions import AppError
from keel.protocol.identifiers import DEFINITION_ID_ROOM, MAX_STEP_ID_BYTES, attribute_problem, workflow_id_problem
from keel.protocol.schema_patterns import pattern_problem
from keel.protocol.workflow_definition import (
    ENTRY_TYPES,
    TEMPLATE_PLACEHOLDER,
    AgentEntry,
    AllOrAny,
    ClassifierEntry,
    Compare,
    ConditionalEntry,
    Existence,
    ForeachEntry,
    GraphEntry,
    InitDataSource,
    LoopEntry,
    MappingEntry,
    Membership,
    NestedWorkflowEntry,
    Not,
    PathOperand,
    Predicate,
    RequestContextSource,
    SleepEntry,
    SleepUntilEntry,
    StepSource,
    TemplateSource,
    ToolEntry,
    Truthiness,
    WorkflowDefinition,
)

MAX_DEFINITION_BYTES = 1024 * 1024
"""A definition's JSON, at most (it is stored and carried by every run that pins it)."""
MAX_GRAPH_ENTRIES = 500
MAX_NESTING = 10
"""Nested workflow references, at most this deep."""
TEMPLATE_ROOTS = ("initData", "inputData", "stepResults", "state", "requestContext")
MAPPING_PATH = re.compile(r"[^.\[\]$]+(?:\.[^.\[\]$]+)*")
"""A mapping source's path, as Mastra's checks take it: plain dotted segments (`a.b.0`; "" or "." the whole
value), no JSONPath `$`, no brackets, no empty segment."""
HANDLEBARS_PLACEHOLDER = re.compile(r"\{\{\s*[\w$][\w.$-]*\s*\}\}")
_ENTRY: TypeAdapter[Any] = TypeAdapter(GraphEntry)


@dataclass(frozen=True)
class DefinitionError:
    path: str
    """A JSON path into the definition: `$`, `graph[2].toolId`, `graph[0].steps[1].predicates[0].left.path`."""
    message: str
    value: Any = None

    def __str__(self) -> str:
        shown = json.dumps(self.value, default=str)
        return f"{self.path}: {self.message} (got {shown[:120]}{'...' if len(shown) > 120 else ''})"


class InvalidDefinition(AppError):
    """A definition that cannot be saved; `errors` holds every problem found."""

    def __init__(self, workflow_id: str, errors: list[DefinitionError]) -> None:
        lines = "\n".join(f"  {e}" for e in errors)
        noun = "error" if len(errors) == 1 else "errors"
        super().__init__(f"Workflow definition {workflow_id!r} has {len(errors)} {noun}:\n{lines}")
        self.workflow_id = workflow_id
        self.errors = errors


@dataclass(frozen=True)
class Known:
    """What a definition may refer to."""

    tools: frozenset[str] = frozenset()
    agents: frozenset[str] = frozenset()
    classifiers: frozenset[str] = frozenset()
    workflows: Mapping[str, WorkflowDefinition | None] = field(default_factory=dict)
    """Workflow id → its definition (None for a code workflow: it nests nothing of ours)."""


def check_definition(raw: Any, known: Known) -> WorkflowDefinition:
    """The definition `raw` (parsed JSON), checked; `InvalidDefinition` lists every problem."""
    workflow_id = str(raw.get("id", "?")) if isinstance(raw, dict) else "?"
    size = len(json.dumps(raw, default=str).encode())
    if size > MAX_DEFINITION_BYTES:
        raise InvalidDefinition(
            workflow_id, [DefinitionError("$", f"{size} bytes: a definition holds at most {MAX_DEFINITION_BYTES}")]
        )
    try:
        definition = WorkflowDefinition.model_validate(raw)
    except ValidationError as err:
        shape = [_shape_error(raw, e) for e in err.errors()]
        found = sorted([*shape, *_references_of_sound_entries(raw, workflow_id, known)], key=_entry_index)
        raise InvalidDefinition(workflow_id, found) from None
    errors = list(_semantic_errors(definition, known))
    if errors:
        raise InvalidDefinition(definition.id, errors)
    return definition


# --- shape errors -------------------------------------------------------------------------------------------


def _shape_error(raw: Any, error: Any) -> DefinitionError:
    """A pydantic error at its JSON path: the location walked over the raw data, union member names skipped."""
    node, path = raw, "$"
    loc = error["loc"]
    for i, part in enumerate(loc):
        if isinstance(part, int) and isinstance(node, list) and part < len(node):
            node, path = node[part], f"{path}[{part}]"
        elif isinstance(node, dict) and part in node:
            node, path = node[part], f"{path}.{part}"
        elif i == len(loc) - 1 and error["type"] == "missing" and isinstance(part, str):
            path = f"{path}.{part}"  # the field that is not there
        # else: a union member's name in the location (`tool`, `function-after[...]`): not a JSON key
    path = path.replace("$.", "", 1) if path.startswith("$.") else path
    kind, message = error["type"], error["msg"]
    if kind == "union_tag_invalid":  # what may stand here: a container's steps take fewer types than the graph
        ctx = error.get("ctx", {})
        tag, here, by = ctx.get("tag"), ctx.get("expected_tags", "").replace("'", ""), ctx.get("discriminator")
        if by != "'type'":  # a predicate's `op`
            message = f"unknown {str(by).strip(chr(39))} {tag!r} (one of: {here})"
        elif tag in ENTRY_TYPES:
            message = f"a {tag!r} step cannot stand here (here: {here})"
        else:
            message = f"unknown step type {tag!r} (one of: {here or ', '.join(ENTRY_TYPES)})"
    elif kind == "extra_forbidden":
        message = "unknown field"
    elif kind == "missing":
        message = "required field missing"
    elif kind.startswith("value_error"):
        message = message.removeprefix("Value error, ")
    return DefinitionError(path, message, node if kind != "missing" else None)


def _references_of_sound_entries(raw: Any, workflow_id: str, known: Known) -> Iterator[DefinitionError]:
    """With a shape error somewhere, what the entries that have a sound shape name must still exist: a
    definition's unknown tool is reported with its unknown step type, not after it is fixed."""
    graph = raw.get("graph") if isinstance(raw, dict) else None
    if not isinstance(graph, list):
        return
    for index, item in enumerate(graph[:MAX_GRAPH_ENTRIES]):
        try:
            entry = _ENTRY.validate_python(item)
        except ValidationError:
            continue  # its own shape errors are reported already
        for where, step in _steps(f"graph[{index}]", entry):
            yield from _reference_errors(where, step, workflow_id, known)


def _entry_index(error: DefinitionError) -> int:
    found = re.match(r"graph\[(\d+)\]", error.path)
    return int(found.group(1)) if found else -1


def _steps(at: str, entry: Any) -> list[tuple[str, Any]]:
    """The steps an entry runs, each at its JSON path: a container's inner steps, else the entry itself."""
    if isinstance(entry, ForeachEntry | LoopEntry):
        return [(f"{at}.step", entry.step)]
    inner = [(f"{at}.steps[{i}]", s) for i, s in enumerate(getattr(entry, "steps", []))]
    return inner or [(at, entry)]


# --- semantic errors ----------------------------------------------------------------------------------------


def _semantic_errors(d: WorkflowDefinition, known: Known) -> Iterator[DefinitionError]:
    # The id is its runs' workflow type, inside their ids, and indexed (`KeelWorkflowId`); step and schedule ids
    # are inside run ids too: left to Temporal, a run would be refused with an RPC error, or a step's child start
    # would fail the run's workflow task for good.
    problem = workflow_id_problem("The id", d.id, room=DEFINITION_ID_ROOM) or attribute_problem("The id", d.id)
    if problem is None and "/" in d.id:  # the HTTP routes take it as one path segment (`/api/workflows/:id`)
        problem = "The id cannot hold '/': the HTTP routes (/api/workflows/:workflowId) could not address it"
    if problem is not None:
        yield DefinitionError("id", problem, d.id)
    for i, schedule in enumerate(d.schedules()):
        if schedule.id is not None and (problem := _name_problem("A schedule id", schedule.id)):
            at = f"schedule[{i}].id" if isinstance(d.schedule, list) else "schedule.id"
            yield DefinitionError(at, problem, schedule.id)
    if len(d.graph) > MAX_GRAPH_ENTRIES:
        yield DefinitionError("graph", f"{len(d.graph)} entries: at most {MAX_GRAPH_ENTRIES}", len(d.graph))
    for name in ("input_schema", "output_schema", "state_schema", "request_context_schema"):
        schema = getattr(d, name)
        if schema is not None:
            yield from _schema_errors(WorkflowDefinition.model_fields[name].alias or name, schema)
    seen: dict[str, str] = {}
    containers: dict[str, str] = {}
    for index, entry in enumerate(d.graph):
        at = f"graph[{index}]"
        steps = _steps(at, entry)
        inner = steps if steps != [(at, entry)] else []
        if isinstance(entry, MappingEntry):
            yield from _mapping_errors(at, entry, seen)
        if isinstance(entry, ConditionalEntry):
            for i, predicate in enumerate(entry.predicates):
                yield from _predicate_errors(f"{at}.predicates[{i}]", predicate, seen)
        if isinstance(entry, LoopEntry):
            own = {entry.step.id: f"{at}.step.id"}
            yield from _predicate_errors(f"{at}.predicate", entry.predicate, {**seen, **own})
        yield from _time_errors(at, entry)
        for where, step in steps:
            yield from _reference_errors(where, step, d.id, known)
            yield from _claim(seen, f"{where}.id", getattr(step, "id", None))
        container_id = getattr(entry, "id", None) if inner else None
        if container_id is not None:  # unique too, but not a readable step result (Mastra: map from the branches)
            if container_id in seen or container_id in containers:
                first = seen.get(container_id) or containers[container_id]
                yield DefinitionError(f"{at}.id", f"duplicate step id (first at {first})", container_id)
            containers.setdefault(container_id, f"{at}.id")
    schedules = d.schedules()
    if isinstance(d.schedule, list):
        ids = [s.id for s in schedules]
        for i, schedule_id in enumerate(ids):
            if schedule_id is None:
                yield DefinitionError(f"schedule[{i}].id", "each schedule of a list needs its own id", None)
            elif ids.index(schedule_id) != i:
                yield DefinitionError(f"schedule[{i}].id", "duplicate schedule id", schedule_id)


MAX_SLEEP_MS = 100 * 365.25 * 24 * 3600 * 1000
"""The longest sleep a step may take: 100 years."""


def _time_errors(at: str, entry: Any) -> Iterator[DefinitionError]:
    """A sleep Temporal can time, and a date that says which time zone it is in (left to the run, a longer sleep
    or a date without an offset failed its workflow task, each retry)."""
    if isinstance(entry, SleepEntry) and entry.duration > MAX_SLEEP_MS:
        yield DefinitionError(f"{at}.duration", "at most 100 years (in milliseconds)", entry.duration)
    if isinstance(entry, SleepUntilEntry) and _naive(entry.date):
        yield DefinitionError(f"{at}.date", "give a UTC offset or Z (which time zone is it in?)", entry.date)


def _naive(date: str) -> bool:
    return datetime.fromisoformat(date.replace("Z", "+00:00")).tzinfo is None


def _name_problem(what: str, name: str) -> str | None:
    size = len(name.encode("utf-8", "surrogatepass"))
    if size <= MAX_STEP_ID_BYTES:
        return None
    return f"{what} is part of run ids: at most {MAX_STEP_ID_BYTES} bytes, this one has {size}"


def _claim(seen: dict[str, str], where: str, step_id: str | None) -> Iterator[DefinitionError]:
    """Record a step id where it is first defined; a second definition is an error."""
    if step_id is None:
        return
    if problem := _name_problem("A step id", step_id):
        yield DefinitionError(where, problem, step_id)
    if step_id in seen:
        yield DefinitionError(where, f"duplicate step id (first at {seen[step_id]})", step_id)
    else:
        seen[step_id] = where


def _schema_errors(path: str, schema: Any) -> Iterator[DefinitionError]:
    if not isinstance(schema, dict | bool):
        yield DefinitionError(path, "not a JSON Schema (an object or a boolean)", schema)
        return
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as err:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        yield DefinitionError(f"{path}{where}", f"not a valid JSON Schema: {err.message}", err.instance)
        return
    for where, node in _subschemas(schema, path):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):  # Keel never fetches one (`LOCAL_REFERENCES_ONLY`)
            yield DefinitionError(f"{where}.$ref", "only references inside the schema (#/...) are resolved", ref)
        pattern = node.get("pattern")
        if isinstance(pattern, str) and (problem := pattern_problem(pattern)):
            yield DefinitionError(f"{where}.pattern", problem, pattern)
        keyed = node.get("patternProperties")
        for pattern in keyed if isinstance(keyed, dict) else ():
            if problem := pattern_problem(pattern):
                yield DefinitionError(f"{where}.patternProperties", problem, pattern)


DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
"""What a schema holds as a value, not a schema: a `pattern` in it is data."""
NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
"""What a schema holds as schemas by name: a name there may be `default` (a property so named is a schema)."""


def _subschemas(schema: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each object in `schema` that may be a schema, at its path (iteratively: a schema may nest deeply)."""
    todo: list[tuple[str, Any, bool]] = [(path, schema, False)]  # (where, node, a map of schemas by name)
    while todo:
        at, node, named = todo.pop()
        if isinstance(node, dict):
            if named:
                todo.extend((f"{at}.{key}", value, False) for key, value in node.items())
                continue
            yield at, node
            todo.extend(
                (f"{at}.{key}", value, key in NAMED_SCHEMAS) for key, value in node.items() if key not in DATA_KEYWORDS
            )
        elif isinstance(node, list):
            todo.extend((f"{at}[{i}]", value, False) for i, value in enumerate(node))


def _reference_errors(at: str, step: Any, workflow_id: str, known: Known) -> Iterator[DefinitionError]:
    if isinstance(step, ToolEntry) and step.tool_id not in known.tools:
        yield DefinitionError(f"{at}.toolId", f"unknown tool (known: {_names(known.tools)})", step.tool_id)
    elif isinstance(step, AgentEntry):
        if step.agent_id not in known.agents:
            yield DefinitionError(f"{at}.agentId", f"unknown agent (known: {_names(known.agents)})", step.agent_id)
        if step.output_schema is not None:
            yield from _schema_errors(f"{at}.outputSchema", step.output_schema)
    elif isinstance(step, ClassifierEntry) and step.classifier_id not in known.classifiers:
        names = _names(known.classifiers)
        yield DefinitionError(f"{at}.classifierId", f"unknown classifier (known: {names})", step.classifier_id)
    elif isinstance(step, NestedWorkflowEntry):
        workflows = known.workflows
        if step.workflow_id == workflow_id:
            yield DefinitionError(f"{at}.workflowId", "a workflow cannot run itself", step.workflow_id)
        elif step.workflow_id not in workflows:
            yield DefinitionError(
                f"{at}.workflowId", f"unknown workflow (known: {_names(workflows)})", step.workflow_id
            )
        else:
            cycle = _cycle(workflow_id, step.workflow_id, workflows, [workflow_id])
            if cycle is not None:
                chain = " -> ".join(cycle)
                message = f"nested workflows reach this one again: {chain}" if cycle[-1] == workflow_id else chain
                yield DefinitionError(f"{at}.workflowId", message, step.workflow_id)


def _cycle(
    root: str, current: str, workflows: Mapping[str, WorkflowDefinition | None], trail: list[str]
) -> list[str] | None:
    """The chain of nested references from `root` back to itself (or past `MAX_NESTING`), if any."""
    trail = [*trail, current]
    if current == root:
        return trail
    if len(trail) > MAX_NESTING + 1:
        return [*trail, f"(nesting deeper than {MAX_NESTING})"]
    definition = workflows.get(current)
    if definition is None:
        return None
    for entry in definition.graph:
        for step in [
            *getattr(entry, "steps", []),
            *([entry.step] if isinstance(entry, ForeachEntry | LoopEntry) else []),
        ] or [entry]:
            if isinstance(step, NestedWorkflowEntry):
                found = _cycle(root, step.workflow_id, workflows, trail)
                if found is not None:
                    return found
        if isinstance(entry, NestedWorkflowEntry):
            found = _cycle(root, entry.workflow_id, workflows, trail)
            if found is not None:
                return found
    return None


def _mapping_errors(at: str, entry: MappingEntry, seen: Mapping[str, str]) -> Iterator[DefinitionError]:
    for key, source in entry.sources().items():
        where = f"{at}.mapConfig.{key}"
        if isinstance(source, StepSource | InitDataSource | RequestContextSource):
            field, path = (
                ("requestContextPath", source.request_context_path)
                if isinstance(source, RequestContextSource)
                else ("path", source.path)
            )
            if path not in ("", ".") and not MAPPING_PATH.fullmatch(path):
                problem = "a mapping path is plain dotted segments (a.b.0): no $, no brackets, no empty segment"
                yield DefinitionError(f"{where}.{field}", problem, path)
        if isinstance(source, StepSource):
            for step_id in [source.step] if isinstance(source.step, str) else source.step:
                if step_id not in seen:
                    yield DefinitionError(f"{where}.step", _unknown_step(seen), step_id)
        elif isinstance(source, TemplateSource):
            if HANDLEBARS_PLACEHOLDER.search(source.template):
                problem = "templates use ${...} placeholders, not {{...}} (which would be emitted as they are)"
                yield DefinitionError(f"{where}.template", problem, source.template)
            for placeholder in TEMPLATE_PLACEHOLDER.findall(source.template):
                parts = placeholder.split(".")
                if not placeholder or placeholder != placeholder.strip():
                    problem = "a placeholder is ${root.path}: empty or whitespace-padded contents"
                    yield DefinitionError(f"{where}.template", problem, placeholder)
                elif parts[0] == "requestContext" and (len(parts) < 2 or not parts[1]):
                    problem = "a requestContext placeholder needs a key: ${requestContext.<key>}"
                    yield DefinitionError(f"{where}.template", problem, placeholder)
                elif parts[0] not in TEMPLATE_ROOTS:
                    roots = ", ".join(TEMPLATE_ROOTS)
                    yield DefinitionError(
                        f"{where}.template", f"unknown placeholder root (one of: {roots})", placeholder
                    )
                elif parts[0] == "stepResults" and (len(parts) < 2 or parts[1] not in seen):
                    yield DefinitionError(f"{where}.template", _unknown_step(seen), placeholder)


def _predicate_errors(at: str, predicate: Predicate, seen: Mapping[str, str]) -> Iterator[DefinitionError]:
    paths: list[tuple[str, str]] = []
    if isinstance(predicate, Compare):
        paths += [
            (f"{at}.{side}.path", o.path)
            for side, o in (("left", predicate.left), ("right", predicate.right))
            if isinstance(o, PathOperand)
        ]
    elif isinstance(predicate, Membership | Truthiness) and isinstance(predicate.value, PathOperand):
        paths.append((f"{at}.value.path", predicate.value.path))
    elif isinstance(predicate, Existence):
        paths.append((f"{at}.path", predicate.path))
    elif isinstance(predicate, AllOrAny):
        for i, arg in enumerate(predicate.args):
            yield from _predicate_errors(f"{at}.args[{i}]", arg, seen)
    elif isinstance(predicate, Not):
        yield from _predicate_errors(f"{at}.arg", predicate.arg, seen)
    for where, path in paths:
        parts = path.split(".")
        if parts[0] == "stepResults" and (len(parts) < 2 or parts[1] not in seen):
            yield DefinitionError(where, _unknown_step(seen), path)


def _unknown_step(seen: Mapping[str, str]) -> str:
    return f"refers to no step that runs before it (steps so far: {_names(seen)})"


def _names(names: Any) -> str:
    return ", ".join(sorted(names)) or "none"
