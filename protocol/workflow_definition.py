"""Mastra's dynamic workflow definition (its authoring schema), as pydantic models: what a user saves as JSON
and Keel's interpreter runs. Shapes only, checked strictly (unknown keys refused, each error at its JSON path);
the checks that need the app (do the tools, agents and workflows exist, do references resolve, no cycles) are
in `keel.app.workflow_checks`.

Graph entries, told apart by `type`: `agent`, `tool`, `classifier`, `mapping`, `workflow` (a nested one),
`parallel`, `foreach`, `sleep`, `sleepUntil`, `conditional`, `loop`.
"""

from __future__ import annotations

import itertools
import json
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator, validators
from jsonschema.protocols import Validator
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    field_validator,
    model_validator,
)
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

from keel.protocol.schema_patterns import PATTERN_KEYWORDS, PatternRefused

PREDICATE_PATH = re.compile(r"^(initData|inputData|stepResults|state)(\.[A-Za-z0-9_-]+)*$")
Json = Any


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class StepOptions(_Strict):
    retries: NonNegativeInt | None = None
    metadata: dict[str, Json] | None = None


class AgentEntry(_Strict):
    type: Literal["agent"]
    id: str = Field(min_length=1)
    agent_id: str = Field(min_length=1, alias="agentId")
    description: str | None = None
    output_schema: Json = Field(default=None, alias="outputSchema")
    options: StepOptions | None = None


class ToolEntry(_Strict):
    type: Literal["tool"]
    id: str = Field(min_length=1)
    tool_id: str = Field(min_length=1, alias="toolId")
    description: str | None = None
    options: StepOptions | None = None


class ClassifierState(_Strict):
    path: str = Field(min_length=1)


class ClassifierOptions(_Strict):
    max_retries: NonNegativeInt | None = Field(default=None, alias="maxRetries")
    provider_options: dict[str, Json] | None = Field(default=None, alias="providerOptions")
    retries: NonNegativeInt | None = None
    metadata: dict[str, Json] | None = None


class ClassifierEntry(_Strict):
    type: Literal["classifier"]
    id: str = Field(min_length=1)
    classifier_id: str = Field(min_length=1, alias="classifierId")
    description: str | None = None
    state: ClassifierState | None = None
    options: ClassifierOptions | None = None


class NestedWorkflowEntry(_Strict):
    type: Literal["workflow"]
    id: str = Field(min_length=1)
    workflow_id: str = Field(min_length=1, alias="workflowId")
    description: str | None = None
    options: StepOptions | None = None


# --- mapping ------------------------------------------------------------------------------------------------


class ValueSource(_Strict):
    value: Json


class TemplateSource(_Strict):
    template: str = Field(min_length=1)


class RequestContextSource(_Strict):
    request_context_path: str = Field(min_length=1, alias="requestContextPath")


class InitDataSource(_Strict):
    init_data: Literal[True] = Field(alias="initData")
    path: str = Field(min_length=1)


class StepSource(_Strict):
    step: str | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    path: str

    @field_validator("step")
    @classmethod
    def _non_empty(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, str) and not value:
            raise ValueError("String should have at least 1 character")
        return value


MappingSource = ValueSource | TemplateSource | RequestContextSource | InitDataSource | StepSource
TEMPLATE_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")


class MappingEntry(_Strict):
    type: Literal["mapping"]
    id: str = Field(min_length=1)
    description: str | None = None
    metadata: dict[str, Json] | None = None
    map_config: str = Field(min_length=1, alias="mapConfig")
    """A JSON-encoded string of `{outKey: source}` (Mastra's canonical form; an object is accepted too)."""

    @field_validator("map_config", mode="before")
    @classmethod
    def _object_form(cls, value: Any) -> Any:
        return json.dumps(value) if isinstance(value, dict) else value

    @field_validator("map_config")
    @classmethod
    def _sources(cls, value: str) -> str:
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"mapConfig is not valid JSON: {err.msg}") from None
        if not isinstance(decoded, dict):
            raise ValueError("mapConfig must encode an object of {outputKey: source}")
        for key, source in decoded.items():
            _mapping_source(key, source)
        return value

    def sources(self) -> dict[str, MappingSource]:
        return {k: _mapping_source(k, v) for k, v in json.loads(self.map_config).items()}


_SOURCE_FORMS: dict[frozenset[str], type[MappingSource]] = {
    frozenset({"value"}): ValueSource,
    frozenset({"template"}): TemplateSource,
    frozenset({"requestContextPath"}): RequestContextSource,
    frozenset({"initData", "path"}): InitDataSource,
    frozenset({"step", "path"}): StepSource,
}


def _mapping_source(key: str, source: Any) -> MappingSource:
    """`source` as exactly one of the five forms (told apart by their keys)."""
    form = _SOURCE_FORMS.get(frozenset(source)) if isinstance(source, dict) else None
    if form is not None:
        return form.model_validate(source)
    raise ValueError(
        f"mapConfig[{key!r}] must be exactly one of {{value}}, {{template}}, {{requestContextPath}}, "
        f"{{initData: true, path}} or {{step, path}}; got {json.dumps(source)[:200]}"
    )


# --- predicates ---------------------------------------------------------------------------------------------


def _canonical_path(value: str) -> str:
    if not PREDICATE_PATH.match(value):
        raise ValueError("Use a canonical predicate path root: initData, inputData, stepResults.<id> or state")
    return value


PredicatePath = Annotated[str, AfterValidator(_canonical_path)]


class PathOperand(_Strict):
    path: PredicatePath


class LiteralOperand(_Strict):
    literal: str | int | float | bool | None


Operand = PathOperand | LiteralOperand
Scalar = str | int | float | bool | None


class Compare(_Strict):
    op: Literal["eq", "ne", "lt", "lte", "gt", "gte"]
    left: Operand
    right: Operand


class Membership(_Strict):
    op: Literal["in", "notIn"]
    value: Operand
    set: list[Scalar] = Field(min_length=1)


class Existence(_Strict):
    op: Literal["exists", "notExists"]
    path: PredicatePath


class Truthiness(_Strict):
    op: Literal["truthy", "falsy"]
    value: Operand


class AllOrAny(_Strict):
    op: Literal["and", "or"]
    args: list[Predicate] = Field(min_length=1)


class Not(_Strict):
    op: Literal["not"]
    arg: Predicate


Predicate = Annotated[Compare | Membership | Existence | Truthiness | AllOrAny | Not, Field(discriminator="op")]


# --- containers ---------------------------------------------------------------------------------------------

InnerStep = Annotated[AgentEntry | ToolEntry | ClassifierEntry | NestedWorkflowEntry, Field(discriminator="type")]


class _Container(_Strict):
    id: str | None = Field(default=None, min_length=1)
    description: str | None = None
    metadata: dict[str, Json] | None = None


class ParallelEntry(_Container):
    type: Literal["parallel"]
    steps: list[InnerStep] = Field(min_length=1)


class ForeachOptions(_Strict):
    concurrency: PositiveInt = 1


class ForeachEntry(_Container):
    type: Literal["foreach"]
    step: InnerStep
    opts: ForeachOptions | None = None


class SleepEntry(_Strict):
    type: Literal["sleep"]
    id: str = Field(min_length=1)
    description: str | None = None
    metadata: dict[str, Json] | None = None
    duration: float = Field(ge=0, description="Milliseconds")


class SleepUntilEntry(_Strict):
    type: Literal["sleepUntil"]
    id: str = Field(min_length=1)
    description: str | None = None
    metadata: dict[str, Json] | None = None
    date: str = Field(min_length=1)

    @field_validator("date")
    @classmethod
    def _iso(cls, value: str) -> str:
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"not an ISO 8601 date: {value!r}") from None
        return value


class ConditionalEntry(_Container):
    type: Literal["conditional"]
    steps: list[InnerStep] = Field(min_length=1)
    predicates: list[Predicate] = Field(min_length=1)

    @model_validator(mode="after")
    def _aligned(self) -> ConditionalEntry:
        if len(self.predicates) != len(self.steps):
            raise ValueError(
                f"predicates align with steps by index: {len(self.steps)} steps but {len(self.predicates)} predicates"
            )
        return self


class LoopEntry(_Container):
    type: Literal["loop"]
    step: InnerStep
    loop_type: Literal["dowhile", "dountil"] = Field(alias="loopType")
    predicate: Predicate


GraphEntry = Annotated[
    AgentEntry
    | ToolEntry
    | ClassifierEntry
    | MappingEntry
    | NestedWorkflowEntry
    | ParallelEntry
    | ForeachEntry
    | SleepEntry
    | SleepUntilEntry
    | ConditionalEntry
    | LoopEntry,
    Field(discriminator="type"),
]
ENTRY_TYPES = (
    "agent", "tool", "classifier", "mapping", "workflow", "parallel", "foreach", "sleep", "sleepUntil",
    "conditional", "loop",
)  # fmt: skip


# --- schedules ----------------------------------------------------------------------------------------------

_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?LW#]+$")


class Schedule(_Strict):
    id: str | None = Field(default=None, min_length=1)
    cron: str = Field(min_length=1)
    timezone: str | None = Field(default=None, min_length=1)
    input_data: Json = Field(default=None, alias="inputData")
    initial_state: Json = Field(default=None, alias="initialState")
    request_context: dict[str, Json] | None = Field(default=None, alias="requestContext")
    metadata: dict[str, Json] | None = None

    @field_validator("cron")
    @classmethod
    def _fields(cls, value: str) -> str:
        fields = value.split()
        if len(fields) not in (5, 6, 7) or not all(_CRON_FIELD.match(f) for f in fields):
            raise ValueError(f"not a cron expression of 5, 6 or 7 fields: {value!r}")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"Invalid timezone: {value!r}") from None
        return value


class WorkflowDefinition(_Strict):
    """One complete definition: JSON Schemas of its input and output, the ordered graph, optional schedules."""

    id: str = Field(min_length=1)
    description: str | None = None
    metadata: dict[str, Json] | None = None
    input_schema: Json = Field(alias="inputSchema")
    output_schema: Json = Field(alias="outputSchema")
    state_schema: Json = Field(default=None, alias="stateSchema")
    request_context_schema: Json = Field(default=None, alias="requestContextSchema")
    graph: list[GraphEntry] = Field(min_length=1)
    schedule: Schedule | list[Schedule] | None = None

    def schedules(self) -> list[Schedule]:
        if self.schedule is None:
            return []
        return list(self.schedule) if isinstance(self.schedule, list) else [self.schedule]


AllOrAny.model_rebuild()
Not.model_rebuild()
ConditionalEntry.model_rebuild()
LoopEntry.model_rebuild()
WorkflowDefinition.model_rebuild()


MAX_PROBLEMS = 20
MAX_PROBLEM_CHARS = 300
"""`schema_problems` says at most this much: its lines become error messages (a run's failure, an HTTP 400),
and jsonschema's quote the value, which may be megabytes."""


def _no_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


LOCAL_REFERENCES_ONLY: Registry[Any] = Registry(retrieve=_no_retrieval)  # type: ignore[call-arg]
"""A schema's `$ref`s resolve inside it (`#/$defs/...`) and nowhere else. jsonschema's default fetches any other
URL with `urlopen`, without a timeout: a request to a server of the caller's choosing (or to this one, which then
waits on itself for good), made by the HTTP API and inside workflows."""


_Draft202012OnRE2 = validators.extend(Draft202012Validator, PATTERN_KEYWORDS)


def schema_validator(schema: Any, *, on_re2: bool = True) -> Validator:
    """The one way Keel checks a value against a JSON Schema: draft 2020-12, local references only, patterns on
    RE2 (`schema_patterns`), or with `on_re2=False` on Python's `re` (a schema of the app's own code)."""
    kind = _Draft202012OnRE2 if on_re2 else Draft202012Validator
    return kind(schema, registry=LOCAL_REFERENCES_ONLY)


def schema_problems(schema: Any, value: Any, *, on_re2: bool = True) -> list[str]:
    """What is wrong with `value` under the JSON Schema `schema`, one line each at its JSON path: the first
    `MAX_PROBLEMS` found, each cut at `MAX_PROBLEM_CHARS`, then "and more" if there are. A schema whose `$ref`
    cannot be resolved, or refers to itself for good, or holds a pattern RE2 does not take, is a problem too
    (never an exception). `on_re2`: see `schema_patterns` (False for the schemas of the app's own code, which
    workflows check as they did before RE2)."""
    if schema in (None, {}, True):
        return []
    # Only as many as it says are made: jsonschema quotes the value in each, and there may be one per item.
    try:
        found = list(itertools.islice(schema_validator(schema, on_re2=on_re2).iter_errors(value), MAX_PROBLEMS + 1))
    except PatternRefused as err:
        return [f"$: {err}"[:MAX_PROBLEM_CHARS]]
    except Unresolvable as err:
        return [f"$: the schema's $ref cannot be resolved (only references inside it are): {err}"[:MAX_PROBLEM_CHARS]]
    except RecursionError:
        return ["$: the schema refers to itself without end"]
    errors = sorted(
        found, key=lambda e: [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in e.absolute_path]
    )
    lines = []
    for e in errors[:MAX_PROBLEMS]:
        message, quoted = e.message, repr(e.instance)
        if len(quoted) > 80 and quoted in message:  # "<the value> is not of type 'object'": keep what it says
            message = message.replace(quoted, f"{quoted[:60]}… ({len(quoted)} characters)")
        line = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path) + f": {message}"
        lines.append(line if len(line) <= MAX_PROBLEM_CHARS else f"{line[: MAX_PROBLEM_CHARS - 1]}…")
    if len(errors) > MAX_PROBLEMS:
        lines.append("and more")
    return lines


def resume_data_problem(step: str, schema: Any, resume_data: Any) -> str | None:
    """Why `resume_data` does not answer `step`, suspended with the resume schema `schema` (a tool's: its own
    code, so Python's `re`); the same words for a resume and for a time travel. None when it does."""
    problems = schema_problems(schema, resume_data, on_re2=False) if schema else []
    return f"Invalid resumeData for step {step!r}: {problems[0]}" if problems else None
