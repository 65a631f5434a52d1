"""The regular expressions of a JSON Schema (`pattern`, `patternProperties`), run on RE2: in time linear in the
text, whatever the pattern, and with ECMA-262's meaning where Python's `re` differs (`\\d` is an ASCII digit).

A stored definition's schema is the caller's, and `re` backtracks: `^(a+)+$` against 64 `a`s and a `!` takes
2**64 steps, in the HTTP API's event loop (a run's input check) or a workflow task (its output check, which the
deadlock detector then fails on every retry). RE2 runs no lookaround and no backreference: a definition holding
one is refused when it is saved (`pattern_problem`), and one stored before that is a problem of the check
(`PatternRefused`), never run on `re`. Schemas written in code (a tool's resume schema, a session state's) are
the app's own and keep `re` (`schema_problems(..., on_re2=False)`): inside workflows the engine decides what a
recorded run did, and RE2 differs (`\\w` and `\\d` are ASCII, `$` is the end only).

jsonschema matches patterns with `re.search` in four keywords; `PATTERN_KEYWORDS` are the same four on RE2.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import re2
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator


def _quiet() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 logs each pattern it refuses to stderr; the refusal is an answer here
    return options


_OPTIONS = _quiet()


class PatternRefused(Exception):
    """A schema's pattern RE2 does not take (`pattern_problem` says why)."""


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error:
        raise PatternRefused(pattern_problem(pattern)) from None


def matches(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text` (JSON Schema's patterns are not anchored); `PatternRefused`
    for one RE2 does not take."""
    return _compiled(pattern).search(text) is not None


def pattern_problem(pattern: str) -> str | None:
    """Why a stored definition may not hold `pattern`, or None."""
    try:
        re2.compile(pattern, _OPTIONS)
    except re2.error as err:
        reason = err.args[0].decode() if err.args and isinstance(err.args[0], bytes) else str(err)
        return (
            "Keel runs only patterns RE2 takes, in time linear in the text (no lookaround, no backreference): "
            f"{pattern!r}: {reason}"
        )
    return None


def _pattern(validator: Validator, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Validator, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The keys of `instance` neither `properties` nor `patternProperties` of `schema` name."""
    named, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    return [key for key in instance if key not in named and not any(matches(p, key) for p in patterns)]


def _additional_properties(
    validator: Validator, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = sorted(set(_additional(instance, schema)))
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            patterns = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield ValidationError(f"{', '.join(map(repr, extras))} {verb} not match any of the regexes: {patterns}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            listed = ", ".join(map(repr, extras))
            yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


def _valid(errors: Iterator[ValidationError]) -> bool:
    return next(errors, None) is None


def _evaluated(validator: Validator, instance: Mapping[str, Any], schema: Any) -> set[str]:
    """The keys of `instance` that `schema` evaluates (JSON Schema 2020-12, for `unevaluatedProperties`): by its
    `properties`, `patternProperties`, `additionalProperties` and `unevaluatedProperties`, and by the subschemas
    that apply (`$ref`, `$dynamicRef`, `dependentSchemas`, the valid ones of `allOf`/`anyOf`/`oneOf`, `if` and the
    branch it takes)."""
    if not isinstance(schema, Mapping):
        return set()
    keys: set[str] = set()
    for keyword in ("$ref", "$dynamicRef"):
        if (ref := schema.get(keyword)) is not None:
            resolved = validator._resolver.lookup(ref)
            within = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            keys |= _evaluated(within, instance, resolved.contents)
    if isinstance(properties := schema.get("properties"), Mapping):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if (subschema := schema.get(keyword)) is not None:
            keys |= {key for key, value in instance.items() if _valid(validator.descend(value, subschema))}
    for pattern in schema.get("patternProperties", {}):
        keys |= {key for key in instance if matches(pattern, key)}
    for key, subschema in schema.get("dependentSchemas", {}).items():
        if key in instance:
            keys |= _evaluated(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator.descend(instance, subschema)):
                keys |= _evaluated(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated(validator, instance, schema["if"]) | _evaluated(validator, instance, schema.get("then"))
        else:
            keys |= _evaluated(validator, instance, schema.get("else"))
    return keys


def _unevaluated_properties(
    validator: Validator, unevaluated: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated(validator, instance, schema)
    invalid = [
        key
        for key in instance
        if key not in evaluated and not _valid(validator.descend(instance[key], unevaluated, path=key, schema_path=key))
    ]
    if not invalid:
        return
    verb = "was" if len(invalid) == 1 else "were"
    if unevaluated is False:
        yield ValidationError(
            f"Unevaluated properties are not allowed ({', '.join(map(repr, sorted(invalid)))} {verb} unexpected)"
        )
    else:
        yield ValidationError(
            "Unevaluated properties are not valid under the given schema "
            f"({', '.join(map(repr, invalid))} {verb} unevaluated and invalid)"
        )


PATTERN_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "unevaluatedProperties": _unevaluated_properties,
}
