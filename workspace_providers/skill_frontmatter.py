"""SKILL.md as Mastra reads it: gray-matter's frontmatter split, js-yaml's value types, and Mastra's validation
rules and messages (`validateSkillMetadata`, `validateSkillContent`), so a skill Mastra rejects is rejected here
with the same words.

Errors (part of the workspace tree, under `WorkspaceError`)::

    SkillError                   "Error: ..." as Mastra throws a plain Error
     ├── SkillValidationError    Invalid skill metadata in p/SKILL.md:\\n<field>: <problem>...
     ├── SkillConflict           Cannot resolve skill "x": multiple local skills found at ...
     └── InvalidSkillPath        Invalid asset path: ../x
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from keel.workspace_providers.errors import WorkspaceError

if TYPE_CHECKING:  # PyYAML is imported when the first SKILL.md is read (~25 ms): loading an app needs none
    import yaml

MAX_INSTRUCTION_TOKENS = 5000
"""Recommended: a warning (not an error) past ~5000 estimated tokens (words * 1.3)."""
MAX_INSTRUCTION_LINES = 500
"""Recommended: a warning past 500 lines."""
MAX_NAME_LENGTH = 64
MAX_DESCRIPTION_LENGTH = 1024
MAX_COMPATIBILITY_LENGTH = 500
"""Declared by Mastra (`SKILL_LIMITS`) but never enforced: compatibility accepts any value."""

MAX_FRONTMATTER_VALUES = 100_000
"""Beyond Mastra: the most values (strings, numbers, lists, mappings) frontmatter may expand to once its YAML
aliases are written out; more is refused as invalid frontmatter rather than expanded (a "billion laughs")."""

SKILL_LIMITS = {
    "MAX_INSTRUCTION_TOKENS": MAX_INSTRUCTION_TOKENS,
    "MAX_INSTRUCTION_LINES": MAX_INSTRUCTION_LINES,
    "MAX_NAME_LENGTH": MAX_NAME_LENGTH,
    "MAX_DESCRIPTION_LENGTH": MAX_DESCRIPTION_LENGTH,
    "MAX_COMPATIBILITY_LENGTH": MAX_COMPATIBILITY_LENGTH,
}

FIELDS = ("name", "description", "license", "compatibility", "user-invocable", "metadata")
"""The frontmatter keys Mastra keeps; any other (`allowed-tools`, ...) is ignored."""

JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""What JavaScript's `String.prototype.trim` strips (Python's `str.strip()` set differs)."""

_NAME = re.compile(r"[a-z0-9-]+")


class SkillError(WorkspaceError):
    """A skill operation failed; Mastra throws a plain `Error` here."""

    error_name = "Error"


class SkillValidationError(SkillError):
    """A SKILL.md Mastra would not load. `errors` are Mastra's lines, each naming its field."""

    def __init__(self, path: str, errors: list[str]) -> None:
        super().__init__(f"Invalid skill metadata in {path}:\n" + "\n".join(errors), path)
        self.errors = errors


class SkillConflict(SkillError):
    """Two skills of one name and one source type: precedence cannot choose."""


class InvalidSkillPath(SkillError):
    """A skill file path that leaves the skill directory (``..``, absolute, or through a symlink)."""


class _Missing:
    """A frontmatter key that is absent (JavaScript's `undefined`), unlike one set to null."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def js_trim(text: str) -> str:
    return text.strip(JS_WHITESPACE)


def js_length(text: str) -> int:
    """A string's length as JavaScript counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def js_slice(text: str, end: int) -> str:
    """`text.substring(0, end)` in UTF-16 code units (a split surrogate pair is dropped)."""
    if js_length(text) <= end:
        return text
    return text.encode("utf-16-le", "surrogatepass")[: 2 * end].decode("utf-16-le", "ignore")


def js_typeof(value: Any) -> str:
    if value is MISSING:
        return "undefined"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object"  # null, arrays, objects and dates alike


# --- YAML as js-yaml 3 reads it ------------------------------------------------------------------------------


def _construct_mapping(loader: Any, node: Any, deep: bool = False) -> Any:
    import yaml

    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, list | dict):
            continue
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, "duplicated mapping key", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


@functools.cache
def _loader() -> Any:
    """PyYAML's safe loader with js-yaml's differences: only true/false are booleans (``yes``, ``on`` stay
    strings), ``1e3`` is a number, and a repeated key is an error."""
    import yaml

    loader: Any = type("_Loader", (yaml.SafeLoader,), {"construct_mapping": _construct_mapping})
    loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    return loader


def _yaml_message(err: yaml.YAMLError) -> str:
    import yaml

    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        return f"{err.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return str(err)


def _load_yaml(text: str) -> Any:
    import yaml

    try:
        data = yaml.load(text, Loader=_loader())  # a SafeLoader subclass
    except yaml.YAMLError as err:
        raise ValueError(_yaml_message(err)) from None
    try:
        json_safe(data)  # refuse now an alias fan-out that every later conversion would expand
    except SkillError as err:
        raise ValueError(str(err)) from None
    return data


def _parse_block(language: str, block: str) -> Any:
    """gray-matter's engines as Mastra configures them: YAML (default), JSON; JavaScript refused."""
    lowered = language.lower()
    if lowered in ("yaml", "yml"):
        return _load_yaml(block)
    if lowered == "json":
        try:
            return json.loads(block)
        except json.JSONDecodeError as err:
            raise ValueError(str(err)) from None
    if lowered in ("js", "javascript"):
        raise ValueError("JavaScript frontmatter is not supported")
    raise ValueError(f'gray-matter engine "{language}" is not registered')


def split_frontmatter(content: str) -> tuple[Any, str]:
    """gray-matter's split of `content` into (parsed frontmatter data, body), the body untrimmed. Raises
    `ValueError` (the parser's message) when the frontmatter does not parse."""
    text = content[1:] if content.startswith("\ufeff") else content
    if not text.startswith("---") or text[3:4] == "-":
        return {}, text
    rest = text[3:]
    newline = re.search(r"\r?\n", rest)
    raw_language = rest[: newline.start()] if newline else rest[:-1]
    language = js_trim(raw_language)
    if language:
        rest = rest[len(raw_language) :]
    close = rest.find("\n---")
    if close == -1:
        close = len(rest)
    block = rest[:close]
    data: Any = {}
    if js_trim(re.sub(r"^\s*#[^\n]+", "", block, flags=re.MULTILINE)):
        data = _parse_block(language or "yaml", block)
    body = "" if close == len(rest) else rest[close + 4 :]
    body = body[1:] if body.startswith("\r") else body
    body = body[1:] if body.startswith("\n") else body
    return ({} if data is None else data), body


@dataclass(frozen=True)
class ParsedSkill:
    """A SKILL.md's kept fields (`MISSING` when absent) and its trimmed body."""

    metadata: dict[str, Any]
    instructions: str


def extract_skill_frontmatter(content: str) -> ParsedSkill:
    """Mastra's `extractSkillFrontmatter`: the six kept fields and the trimmed body. `ValueError` on bad YAML."""
    data, body = split_frontmatter(content)
    fields = {key: data.get(key, MISSING) if isinstance(data, dict) else MISSING for key in FIELDS}
    return ParsedSkill(fields, js_trim(body))


# --- validation ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SkillValidation:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


def _name_errors(name: Any) -> list[str]:
    if not isinstance(name, str):
        return [f"name: Expected string, received {js_typeof(name)}"]
    if not name:
        return ["name: Skill name cannot be empty"]
    errors = []
    if js_length(name) > MAX_NAME_LENGTH:
        errors.append(f"name: Skill name must be {MAX_NAME_LENGTH} characters or less")
    if not _NAME.fullmatch(name):
        errors.append("name: Skill name must contain only lowercase letters, numbers, and hyphens")
    if name.startswith("-") or name.endswith("-"):
        errors.append("name: Skill name must not start or end with a hyphen")
    if "--" in name:
        errors.append("name: Skill name must not contain consecutive hyphens")
    return errors


def _description_errors(description: Any) -> list[str]:
    if not isinstance(description, str):
        return [f"description: Expected string, received {js_typeof(description)}"]
    if not description:
        return ["description: Skill description cannot be empty"]
    errors = []
    if js_length(description) > MAX_DESCRIPTION_LENGTH:
        errors.append(f"description: Skill description must be {MAX_DESCRIPTION_LENGTH} characters or less")
    if not js_trim(description):
        errors.append("description: Skill description cannot be only whitespace")
    return errors


def _estimate_tokens(text: str) -> int:
    return math.ceil(len([w for w in re.split(r"[" + JS_WHITESPACE + "]+", text) if w]) * 1.3)


def validate_skill_metadata(
    metadata: Any, *, directory_name: str | None = None, instructions: str | None = None
) -> SkillValidation:
    """Mastra's `validateSkillMetadata`: errors (each prefixed with its field) and size warnings."""
    if not isinstance(metadata, Mapping):
        kind = "null" if metadata is None else "array" if isinstance(metadata, list) else js_typeof(metadata)
        return SkillValidation([f"Expected object, received {kind}"])
    errors = _name_errors(metadata.get("name", MISSING))
    errors += _description_errors(metadata.get("description", MISSING))
    license_ = metadata.get("license", MISSING)
    if license_ is not MISSING and license_ is not None and not isinstance(license_, str):
        errors.append(f"license: Expected string, received {js_typeof(license_)}")
    invocable = metadata.get("user-invocable", MISSING)
    if invocable is not MISSING and not isinstance(invocable, bool):
        errors.append(f"user-invocable: Expected boolean, received {js_typeof(invocable)}")
    meta = metadata.get("metadata", MISSING)
    if meta is not MISSING and meta is not None and (js_typeof(meta) != "object" or isinstance(meta, list)):
        errors.append(f"metadata: Expected object, received {'array' if isinstance(meta, list) else js_typeof(meta)}")
    name = metadata.get("name")
    if directory_name and isinstance(name, str) and name != directory_name:
        errors.append(f'Skill name "{name}" must match directory name "{directory_name}"')
    warnings = []
    if instructions:
        lines = instructions.count("\n") + 1
        tokens = _estimate_tokens(instructions)
        if lines > MAX_INSTRUCTION_LINES:
            warnings.append(
                f"Instructions have {lines} lines (recommended: <{MAX_INSTRUCTION_LINES}). "
                "Consider moving content to references/."
            )
        if tokens > MAX_INSTRUCTION_TOKENS:
            warnings.append(
                f"Instructions have ~{tokens} estimated tokens (recommended: <{MAX_INSTRUCTION_TOKENS}). "
                "Consider moving content to references/."
            )
    return SkillValidation(errors, warnings)


@dataclass(frozen=True)
class SkillContentValidation(SkillValidation):
    metadata: dict[str, Any] | None = None
    instructions: str | None = None


def validate_skill_content(content: str, *, directory_name: str | None = None) -> SkillContentValidation:
    """Mastra's `validateSkillContent`: a whole SKILL.md checked as it would be on load, without a filesystem."""
    try:
        parsed = extract_skill_frontmatter(content)
    except ValueError as err:
        return SkillContentValidation([f"Invalid frontmatter: {err}"])
    result = validate_skill_metadata(parsed.metadata, directory_name=directory_name, instructions=parsed.instructions)
    return SkillContentValidation(result.errors, result.warnings, dict(parsed.metadata), parsed.instructions)


def parse_skill_md(content: str, *, path: str, directory_name: str | None) -> tuple[ParsedSkill, list[str]]:
    """Parse and validate a SKILL.md read from `path`: the parsed skill and its warnings, or
    `SkillValidationError` naming the file and each failing field (bad YAML as ``Invalid frontmatter: ...``)."""
    try:
        parsed = extract_skill_frontmatter(content)
    except ValueError as err:
        raise SkillValidationError(path, [f"Invalid frontmatter: {err}"]) from None
    result = validate_skill_metadata(parsed.metadata, directory_name=directory_name, instructions=parsed.instructions)
    if not result.valid:
        raise SkillValidationError(path, result.errors)
    return parsed, result.warnings


def json_safe(value: Any, *, limit: int = MAX_FRONTMATTER_VALUES) -> Any:
    """A frontmatter value as JSON would carry it (dates as JavaScript's ISO strings), `MISSING` as None.

    YAML aliases make one list or mapping appear many times: each is converted once and the result shared, and
    a value whose expansion (what JSON would write out) exceeds `limit` values is refused with `SkillError`, as is
    one that contains itself, so a "billion laughs" fan-out costs only its distinct nodes.
    """
    converted: dict[int, tuple[Any, int]] = {}  # id of a list or dict -> (its conversion, its expanded size)
    open_ids: set[int] = set()

    def convert(item: Any) -> tuple[Any, int]:
        if not isinstance(item, dict | list):
            return _json_scalar(item), 1
        key = id(item)
        if key in converted:
            return converted[key]
        if key in open_ids:
            raise SkillError("A frontmatter value refers to itself (a recursive YAML alias)")
        open_ids.add(key)
        if isinstance(item, dict):
            pairs = [(str(k), convert(v)) for k, v in item.items()]
            out: Any = {k: c for k, (c, _) in pairs}
            size = 1 + sum(n for _, (_, n) in pairs)
        else:
            parts = [convert(v) for v in item]
            out = [c for c, _ in parts]
            size = 1 + sum(n for _, n in parts)
        open_ids.discard(key)
        if size > limit:
            raise SkillError(f"YAML aliases expand the frontmatter to more than {limit} values")
        converted[key] = (out, size)
        return out, size

    return convert(value)[0]


def _json_scalar(value: Any) -> Any:
    if value is MISSING:
        return None
    if isinstance(value, datetime.datetime | datetime.date):
        moment = (
            value if isinstance(value, datetime.datetime) else datetime.datetime(value.year, value.month, value.day)
        )
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return value
