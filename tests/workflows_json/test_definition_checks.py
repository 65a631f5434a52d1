"""Checking a workflow definition on save: a valid one using every graph entry type passes, and each mistake
is reported at its JSON path with the offending value, all at once."""

from __future__ import annotations

import copy
import json
import socket
from typing import Any

import pytest

from keel.app.workflow_checks import MAX_DEFINITION_BYTES, InvalidDefinition, Known, check_definition
from keel.protocol.workflow_definition import WorkflowDefinition, schema_problems

KNOWN = Known(
    tools=frozenset({"echo", "ask-human"}),
    agents=frozenset({"writer"}),
    classifiers=frozenset({"triage"}),
    workflows={"child": None},
)


def every_entry_type() -> dict[str, Any]:
    step = {"type": "tool", "id": "", "toolId": "echo"}
    return {
        "id": "everything",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "outputSchema": {"type": "object"},
        "graph": [
            {"type": "mapping", "id": "prep", "mapConfig": json.dumps({"text": {"initData": True, "path": "text"}})},
            {"type": "tool", "id": "say", "toolId": "echo"},
            {"type": "agent", "id": "draft", "agentId": "writer", "outputSchema": {"type": "object"}},
            {"type": "classifier", "id": "kind", "classifierId": "triage", "state": {"path": "inputData.text"}},
            {"type": "workflow", "id": "sub", "workflowId": "child"},
            {"type": "parallel", "id": "fan", "steps": [{**step, "id": "p1"}, {**step, "id": "p2"}]},
            {"type": "mapping", "id": "items", "mapConfig": {"items": {"value": [1, 2, 3]}}},
            {"type": "foreach", "id": "each", "step": {**step, "id": "e1"}, "opts": {"concurrency": 3}},
            {"type": "sleep", "id": "nap", "duration": 10},
            {"type": "sleepUntil", "id": "later", "date": "2026-12-01T00:00:00Z"},
            {
                "type": "conditional",
                "steps": [{**step, "id": "yes"}, {**step, "id": "no"}],
                "predicates": [
                    {"op": "eq", "left": {"path": "stepResults.say.echo"}, "right": {"literal": "hi"}},
                    {"op": "not", "arg": {"op": "exists", "path": "stepResults.say.echo"}},
                ],
            },
            {
                "type": "loop",
                "step": {**step, "id": "again"},
                "loopType": "dountil",
                "predicate": {"op": "and", "args": [{"op": "truthy", "value": {"path": "stepResults.again.done"}}]},
            },
            {
                "type": "mapping",
                "id": "out",
                "mapConfig": {
                    "text": {"step": ["yes", "no"], "path": "echo"},
                    "note": {"template": "Hi ${initData.text} from ${stepResults.say.echo}"},
                    "who": {"requestContextPath": "user"},
                },
            },
        ],
        "schedule": [{"id": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Paris"}],
    }


def test_a_definition_with_every_entry_type_passes() -> None:
    definition = check_definition(every_entry_type(), KNOWN)
    assert isinstance(definition, WorkflowDefinition)
    assert {e.type for e in definition.graph} == {
        "mapping", "tool", "agent", "classifier", "workflow", "parallel", "foreach", "sleep", "sleepUntil",
        "conditional", "loop",
    }  # fmt: skip


def broken(change: Any) -> dict[str, Any]:
    d = every_entry_type()
    change(d)
    return d


def _set(path: list[Any], value: Any) -> Any:
    def apply(d: dict[str, Any]) -> None:
        node: Any = d
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return apply


MISTAKES: list[tuple[str, Any, str, str, Any]] = [
    # (name, change, path, message fragment, offending value)
    ("unknown step type", _set(["graph", 1, "type"], "tol"), "graph[1]", "unknown step type 'tol'", None),
    ("unknown tool", _set(["graph", 1, "toolId"], "nope"), "graph[1].toolId", "unknown tool", "nope"),
    ("unknown agent", _set(["graph", 2, "agentId"], "ghost"), "graph[2].agentId", "unknown agent", "ghost"),
    ("unknown classifier", _set(["graph", 3, "classifierId"], "x"), "graph[3].classifierId", "unknown classifier", "x"),
    ("unknown workflow", _set(["graph", 4, "workflowId"], "w2"), "graph[4].workflowId", "unknown workflow", "w2"),
    (
        "self reference",
        _set(["graph", 4, "workflowId"], "everything"),
        "graph[4].workflowId",
        "cannot run itself",
        "everything",
    ),
    ("unknown field", _set(["graph", 1, "toolID"], "echo"), "graph[1].toolID", "unknown field", "echo"),
    ("missing field", lambda d: d["graph"][1].pop("toolId"), "graph[1].toolId", "required field missing", None),
    (
        "duplicate step id",
        _set(["graph", 2, "id"], "say"),
        "graph[2].id",
        "duplicate step id (first at graph[1].id)",
        "say",
    ),
    (
        "mapping to a later step",
        _set(["graph", 0, "mapConfig"], json.dumps({"x": {"step": "out", "path": "a"}})),
        "graph[0].mapConfig.x.step",
        "refers to no step that runs before it",
        "out",
    ),
    (
        "bad mapping form",
        _set(["graph", 6, "mapConfig"], {"x": {"initData": "text"}}),
        "graph[6].mapConfig",
        "must be exactly one of",
        None,
    ),
    (
        "template on an unknown step",
        _set(["graph", 12, "mapConfig"], {"t": {"template": "${stepResults.nope.x}"}}),
        "graph[12].mapConfig.t.template",
        "refers to no step",
        "stepResults.nope.x",
    ),
    (
        "template root",
        _set(["graph", 12, "mapConfig"], {"t": {"template": "${context.user}"}}),
        "graph[12].mapConfig.t.template",
        "unknown placeholder root",
        "context.user",
    ),
    (
        "mapping path with a JSONPath root",
        _set(["graph", 0, "mapConfig"], json.dumps({"text": {"initData": True, "path": "$.text"}})),
        "graph[0].mapConfig.text.path",
        "plain dotted segments",
        "$.text",
    ),
    (
        "mapping path with brackets",
        _set(["graph", 12, "mapConfig"], {"x": {"step": "say", "path": "items[0].name"}}),
        "graph[12].mapConfig.x.path",
        "plain dotted segments",
        "items[0].name",
    ),
    (
        "mapping path with an empty segment",
        _set(["graph", 12, "mapConfig"], {"x": {"requestContextPath": "user..id"}}),
        "graph[12].mapConfig.x.requestContextPath",
        "plain dotted segments",
        "user..id",
    ),
    (
        "handlebars template",
        _set(["graph", 12, "mapConfig"], {"t": {"template": "Hi {{initData.text}}"}}),
        "graph[12].mapConfig.t.template",
        "${...} placeholders, not {{...}}",
        "Hi {{initData.text}}",
    ),
    (
        "padded placeholder",
        _set(["graph", 12, "mapConfig"], {"t": {"template": "Hi ${ initData.text }"}}),
        "graph[12].mapConfig.t.template",
        "empty or whitespace-padded",
        " initData.text ",
    ),
    (
        "request context placeholder without a key",
        _set(["graph", 12, "mapConfig"], {"t": {"template": "${requestContext}"}}),
        "graph[12].mapConfig.t.template",
        "needs a key",
        "requestContext",
    ),
    (
        "request context placeholder with an empty key",
        _set(["graph", 12, "mapConfig"], {"t": {"template": "${requestContext.}"}}),
        "graph[12].mapConfig.t.template",
        "needs a key",
        "requestContext.",
    ),
    (
        "predicate on an unknown step",
        _set(["graph", 10, "predicates", 0, "left", "path"], "stepResults.ghost.x"),
        "graph[10].predicates[0].left.path",
        "refers to no step",
        "stepResults.ghost.x",
    ),
    (
        "predicate path root",
        _set(["graph", 10, "predicates", 1, "arg", "path"], "results.x"),
        "graph[10].predicates[1].arg.path",
        "canonical predicate path root",
        "results.x",
    ),
    (
        "unknown predicate op",
        _set(["graph", 10, "predicates", 0, "op"], "equals"),
        "graph[10].predicates[0]",
        "unknown op 'equals' (one of: eq, ne,",
        None,
    ),
    (
        "predicates not aligned",
        lambda d: d["graph"][10]["predicates"].pop(),
        "graph[10]",
        "2 steps but 1 predicates",
        None,
    ),
    (
        "foreach concurrency 0",
        _set(["graph", 7, "opts", "concurrency"], 0),
        "graph[7].opts.concurrency",
        "greater than 0",
        0,
    ),
    ("negative sleep", _set(["graph", 8, "duration"], -5), "graph[8].duration", "greater than or equal to 0", -5),
    ("bad date", _set(["graph", 9, "date"], "tomorrow"), "graph[9].date", "not an ISO 8601 date", "tomorrow"),
    ("bad loop type", _set(["graph", 11, "loopType"], "while"), "graph[11].loopType", "dowhile", "while"),
    (
        "container in parallel",
        _set(["graph", 5, "steps", 0], {"type": "sleep", "id": "s", "duration": 1}),
        "graph[5].steps[0]",
        "a 'sleep' step cannot stand here (here: agent, tool, classifier, workflow)",
        None,
    ),
    ("bad cron", _set(["schedule", 0, "cron"], "every day"), "schedule[0].cron", "cron expression", "every day"),
    (
        "bad timezone",
        _set(["schedule", 0, "timezone"], "Mars/Base"),
        "schedule[0].timezone",
        "Invalid timezone",
        "Mars/Base",
    ),
    ("schedule without id", lambda d: d["schedule"][0].pop("id"), "schedule[0].id", "needs its own id", None),
    (
        "bad json schema",
        _set(["inputSchema"], {"type": "strng"}),
        "inputSchema.type",
        "not a valid JSON Schema",
        "strng",
    ),
    ("empty graph", _set(["graph"], []), "graph", "at least 1 item", []),
    ("an id too long for run ids", _set(["id"], "w" * 700), "id", "Temporal takes at most 1000 bytes", "w" * 700),
    ("an id no route can address", _set(["id"], "a/b?c"), "id", "cannot hold '/'", "a/b?c"),
    ("a step id too long for run ids", _set(["graph", 1, "id"], "s" * 129), "graph[1].id", "at most 128 bytes", None),
    (
        "a schedule id too long for run ids",
        _set(["schedule"], {"id": "c" * 129, "cron": "0 * * * *"}),
        "schedule.id",
        "at most 128 bytes",
        "c" * 129,
    ),
    ("a sleep longer than time", _set(["graph", 8, "duration"], 2**63), "graph[8].duration", "100 years", 2**63),
    (
        "a date without its time zone",
        _set(["graph", 9, "date"], "2020-01-01T00:00:00"),
        "graph[9].date",
        "give a UTC offset or Z",
        "2020-01-01T00:00:00",
    ),
    (
        "a remote $ref",
        _set(["inputSchema", "properties", "text"], {"$ref": "http://127.0.0.1:9/schema.json"}),
        "inputSchema.properties.text.$ref",
        "only references inside the schema",
        "http://127.0.0.1:9/schema.json",
    ),
    (
        "a pattern with a lookahead",
        _set(["inputSchema", "properties", "text"], {"type": "string", "pattern": "^(?=.*x)a"}),
        "inputSchema.properties.text.pattern",
        "runs only patterns RE2 takes",
        "^(?=.*x)a",
    ),
    (
        "a lookahead in a property named default",
        _set(["inputSchema", "properties", "default"], {"type": "string", "pattern": "^(a|a)*(?=b)"}),
        "inputSchema.properties.default.pattern",
        "runs only patterns RE2 takes",
        "^(a|a)*(?=b)",
    ),
    (
        "a property pattern with a backreference",
        _set(["outputSchema", "patternProperties"], {"(a)\\1": {}}),
        "outputSchema.patternProperties",
        "runs only patterns RE2 takes",
        "(a)\\1",
    ),
    (
        "mapping from a container",
        _set(["graph", 12, "mapConfig"], {"x": {"step": "fan", "path": "p1"}}),
        "graph[12].mapConfig.x.step",
        "refers to no step",
        "fan",
    ),
]


@pytest.mark.parametrize(("name", "change", "path", "fragment", "value"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_mistake_is_reported_at_its_json_path_with_its_value(
    name: str, change: Any, path: str, fragment: str, value: Any
) -> None:
    with pytest.raises(InvalidDefinition) as caught:
        check_definition(broken(change), KNOWN)
    found = [e for e in caught.value.errors if e.path == path]
    assert found, f"{name}: no error at {path}; got {[str(e) for e in caught.value.errors]}"
    assert fragment in found[0].message, str(found[0])
    if value is not None:
        assert found[0].value == value


def test_there_are_more_than_fifteen_distinct_mistakes() -> None:
    assert len({m[2] for m in MISTAKES}) >= 15


def test_every_mistake_of_a_definition_is_reported_at_once() -> None:
    d = every_entry_type()
    d["graph"][1]["toolId"] = "nope"
    d["graph"][2]["agentId"] = "ghost"
    d["graph"][2]["id"] = "say"
    with pytest.raises(InvalidDefinition) as caught:
        check_definition(d, KNOWN)
    assert [e.path for e in caught.value.errors] == ["graph[1].toolId", "graph[2].agentId", "graph[2].id"]
    assert str(caught.value).splitlines()[0] == "Workflow definition 'everything' has 3 errors:"
    assert '  graph[1].toolId: unknown tool (known: ask-human, echo) (got "nope")' in str(caught.value)


def test_a_cycle_through_nested_definitions_is_refused() -> None:
    def nesting(own: str, other: str) -> WorkflowDefinition:
        return WorkflowDefinition.model_validate(
            {
                "id": own,
                "inputSchema": {},
                "outputSchema": {},
                "graph": [{"type": "workflow", "id": "n", "workflowId": other}],
            }
        )

    known = Known(workflows={"b": nesting("b", "c"), "c": nesting("c", "a")})
    raw = {
        "id": "a",
        "inputSchema": {},
        "outputSchema": {},
        "graph": [{"type": "workflow", "id": "go", "workflowId": "b"}],
    }
    with pytest.raises(InvalidDefinition) as caught:
        check_definition(raw, known)
    [error] = caught.value.errors
    assert (error.path, error.message) == (
        "graph[0].workflowId",
        "nested workflows reach this one again: a -> b -> c -> a",
    )


def test_a_definition_over_the_size_limit_is_refused_before_anything_else() -> None:
    d = every_entry_type()
    d["description"] = "x" * MAX_DEFINITION_BYTES
    with pytest.raises(InvalidDefinition) as caught:
        check_definition(d, KNOWN)
    assert caught.value.errors[0].path == "$"


def test_object_form_map_config_is_stored_as_mastras_json_string() -> None:
    d = copy.deepcopy(every_entry_type())
    definition = check_definition(d, KNOWN)
    mapping = definition.graph[6]
    assert json.loads(mapping.model_dump(by_alias=True)["mapConfig"]) == {"items": {"value": [1, 2, 3]}}


def test_a_shape_error_does_not_hide_an_unknown_tool_of_another_entry() -> None:
    """Found from outside: an unknown step type first and an unknown tool second reported only the first."""
    d = {
        "id": "two-mistakes",
        "inputSchema": {},
        "outputSchema": {},
        "graph": [
            {"type": "nap", "id": "a"},
            {"type": "tool", "id": "t", "toolId": "nope"},
            {"type": "parallel", "id": "p", "steps": [{"type": "agent", "id": "g", "agentId": "ghost"}]},
        ],
    }
    with pytest.raises(InvalidDefinition) as caught:
        check_definition(d, KNOWN)
    assert [e.path for e in caught.value.errors] == ["graph[0]", "graph[1].toolId", "graph[2].steps[0].agentId"]
    assert "unknown step type 'nap'" in caught.value.errors[0].message


def test_a_schema_never_fetches_a_reference_and_a_bad_one_is_a_problem_not_an_error() -> None:
    """Before, jsonschema fetched a remote `$ref` with `urlopen`, without a timeout: here a server that takes the
    connection and never answers, so the check (in the HTTP API, or a workflow) waited for good."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/schema.json"
        [problem] = schema_problems({"properties": {"n": {"$ref": url}}}, {"n": 1})
    assert "cannot be resolved (only references inside it are)" in problem and url in problem
    assert schema_problems({"$ref": "#/nope"}, 1)[0].startswith("$: the schema's $ref cannot be resolved")
    assert schema_problems({"$ref": "#"}, {"n": 1}) == ["$: the schema refers to itself without end"]
    local = {"$defs": {"n": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/n"}}}
    assert schema_problems(local, {"n": "x"}) == ["$.n: 'x' is not of type 'integer'"]


NESTED = "^(a+)+$"
BAIT = "a" * 64 + "!"
"""A pattern Python's `re` backtracks on exponentially: against 64 `a`s and a `!`, 2**64 steps."""


@pytest.mark.parametrize(
    ("schema", "value", "problem"),
    [
        ({"pattern": NESTED}, BAIT, "does not match '^(a+)+$'"),
        ({"propertyNames": {"pattern": NESTED}}, {BAIT: 1}, "does not match '^(a+)+$'"),
        ({"patternProperties": {NESTED: {"type": "string"}}}, {BAIT: 1, "aaa": 2}, "2 is not of type"),
        ({"patternProperties": {NESTED: {}}, "additionalProperties": False}, {BAIT: 1}, "not match any of the regexes"),
        ({"patternProperties": {NESTED: {}}, "unevaluatedProperties": False}, {BAIT: 1}, "Unevaluated"),
    ],
    ids=["pattern", "propertyNames", "patternProperties", "additionalProperties", "unevaluatedProperties"],
)
def test_a_schemas_patterns_run_in_linear_time(schema: dict[str, Any], value: Any, problem: str) -> None:
    """A stored definition's schema is the caller's: before, a nested quantifier in any of the places a schema
    matches a pattern took the HTTP API's event loop (its input check) or a workflow task (its output check,
    failed by the deadlock detector on every retry) for good. Patterns run on RE2 now."""
    [found] = schema_problems(schema, value)
    assert problem in found


def test_a_pattern_matches_as_json_schema_says_and_one_re2_cannot_run_is_a_problem_not_a_slow_match() -> None:
    """`\\d` is an ASCII digit, as in ECMA-262 (Python's `re` took any Unicode digit). A lookahead RE2 does not
    run, in a definition stored before such patterns were refused (or one named as data when they were first
    refused: a property called `default`), is a problem of the check, never run on `re`, which backtracks:
    `^(a|a)*(?=b)` took 0.43 s for 22 characters, doubling with each. The app's own schemas (code) keep `re`."""
    assert schema_problems({"pattern": "^\\d+$"}, "\u0663") == ["$: '\u0663' does not match '^\\\\d+$'"]
    [refused] = schema_problems({"pattern": "^(a|a)*(?=b)"}, "a" * 60 + "c")
    assert "Keel runs only patterns RE2 takes" in refused and "(?=b)" in refused
    assert schema_problems({"pattern": "^(?=.*\\d)"}, "abc1", on_re2=False) == []
    assert schema_problems({"pattern": "^\\d+$"}, "\u0663", on_re2=False) == []


@pytest.mark.parametrize("path", [".", "text", "items.0.name", "a-b.c_d"])
def test_a_mapping_path_of_plain_dotted_segments_or_the_whole_value_is_accepted(path: str) -> None:
    d = every_entry_type()
    d["graph"][0]["mapConfig"] = json.dumps({"text": {"initData": True, "path": path}})
    d["graph"][12]["mapConfig"]["ctx"] = {"requestContextPath": path}
    d["graph"][12]["mapConfig"]["note"] = {"template": "Hi ${requestContext.user} and ${stepResults.say}"}
    check_definition(d, KNOWN)
