"""The three skill tools as Mastra's model sees and runs them (@mastra/core 1.71 `createSkillTools`): `skill`
(activate: the full instructions and the skill's file lists), `skill_search`, `skill_read`.

Each tool function takes the skills (a `WorkspaceSkills`, or one request's `SkillCatalog`), the validated input
and the request context, and returns Mastra's text. A path leaving the skill directory raises
`InvalidSkillPath` (Mastra throws there too: the tool call fails with ``Error: Invalid asset path: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from keel.workspace_providers.skill_catalog import SkillCatalog
from keel.workspace_providers.skill_frontmatter import js_length, js_slice
from keel.workspace_providers.skill_models import Skill
from keel.workspace_providers.skills import WorkspaceSkills

_DRAFT_07 = "http://json-schema.org/draft-07/schema#"
_BY_PATH = "Use the path when multiple skills share the same name."

SKILL_TOOL_SPECS: dict[str, dict[str, Any]] = {
    "skill": {
        "description": "Activate a skill to load its full instructions. You should activate skills proactively "
        "when they are relevant to the user's request without asking for permission first.",
        "inputSchema": {
            "$schema": _DRAFT_07,
            "type": "object",
            "properties": {
                "name": {"description": f"The name or path of the skill to activate. {_BY_PATH}", "type": "string"}
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    "skill_search": {
        "description": "Search across skill content to find relevant information. Useful when you need to find "
        "specific details within skills.",
        "inputSchema": {
            "$schema": _DRAFT_07,
            "type": "object",
            "properties": {
                "query": {"description": "The search query", "type": "string"},
                "skillNames": {
                    "description": "Optional list of skill names to search within",
                    "type": "array",
                    "items": {"type": "string"},
                },
                "topK": {"description": "Maximum number of results to return (default: 5)", "type": "number"},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
    "skill_read": {
        "description": "Read a file from a skill directory (references, scripts, or assets). The path is relative "
        "to the skill root.",
        "inputSchema": {
            "$schema": _DRAFT_07,
            "type": "object",
            "properties": {
                "skillName": {"description": f"The name or path of the skill. {_BY_PATH}", "type": "string"},
                "path": {
                    "description": 'Path to the file relative to the skill root (e.g. "references/colors.md", '
                    '"scripts/run.sh")',
                    "type": "string",
                },
                "startLine": {
                    "description": "Starting line number (1-indexed). If omitted, starts from the beginning.",
                    "type": "number",
                },
                "endLine": {
                    "description": "Ending line number (1-indexed, inclusive). If omitted, reads to the end.",
                    "type": "number",
                },
            },
            "required": ["skillName", "path"],
            "additionalProperties": False,
        },
    },
}
SKILL_TOOLS = tuple(SKILL_TOOL_SPECS)


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SkillInput(_Input):
    name: str


class SkillSearchInput(_Input):
    query: str
    skill_names: list[str] | None = Field(default=None, alias="skillNames")
    top_k: float | None = Field(default=None, alias="topK")


class SkillReadInput(_Input):
    skill_name: str = Field(alias="skillName")
    path: str
    start_line: float | None = Field(default=None, alias="startLine")
    end_line: float | None = Field(default=None, alias="endLine")


SKILL_TOOL_INPUTS: dict[str, type[_Input]] = {
    "skill": SkillInput,
    "skill_search": SkillSearchInput,
    "skill_read": SkillReadInput,
}


def format_skill_activation(skill: Skill) -> str:
    """The instructions, then ``## References`` / ``## Scripts`` / ``## Assets`` lists of the files there are."""
    parts = [skill.instructions]
    for title, folder, files in (
        ("References", "references", skill.references),
        ("Scripts", "scripts", skill.scripts),
        ("Assets", "assets", skill.assets),
    ):
        if files:
            parts.append(f"\n\n## {title}\n" + "\n".join(f"- {folder}/{f}" for f in files))
    return "".join(parts)


def js_fixed(value: float, digits: int = 2) -> str:
    """`Number.prototype.toFixed`: the exact binary value rounded half up (Python's format rounds half even)."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def js_number(value: float | None) -> str:
    """A number as JavaScript prints it in a template string (`undefined` for a missing one)."""
    if value is None:
        return "undefined"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


async def _scoped(skills: WorkspaceSkills | SkillCatalog, request_context: Mapping[str, Any] | None) -> SkillCatalog:
    return await skills.scoped(request_context) if isinstance(skills, WorkspaceSkills) else skills


async def _resolve(catalog: SkillCatalog, identifier: str) -> Skill | str:
    await catalog.maybe_refresh()
    skill = await catalog.get(identifier)
    if skill is not None:
        return skill
    available = ", ".join(f"{s.name} ({s.path})" for s in await catalog.list())
    return f'Skill "{identifier}" not found. Available skills: {available}'


async def skill(
    skills: WorkspaceSkills | SkillCatalog, args: SkillInput, request_context: Mapping[str, Any] | None = None
) -> str:
    """Activate a skill by name or path: `format_skill_activation`, or Mastra's not-found text."""
    found = await _resolve(await _scoped(skills, request_context), args.name)
    return found if isinstance(found, str) else format_skill_activation(found)


async def skill_search(
    skills: WorkspaceSkills | SkillCatalog, args: SkillSearchInput, request_context: Mapping[str, Any] | None = None
) -> str:
    """``[name] (lines a-b) (score: 1.23)`` and a 200-character preview per result, or ``No results found.``"""
    catalog = await _scoped(skills, request_context)
    await catalog.maybe_refresh()
    top_k = args.top_k if args.top_k is not None else 5
    results = await catalog.search(args.query, top_k=top_k, skill_names=args.skill_names)
    if not results:
        return "No results found."
    blocks = []
    for r in results:
        preview = js_slice(r.content, 200) + ("..." if js_length(r.content) > 200 else "")
        lines = f" (lines {r.line_range[0]}-{r.line_range[1]})" if r.line_range else ""
        blocks.append(f"[{r.skill_name}]{lines} (score: {js_fixed(r.score)})\n{preview}")
    return "\n\n".join(blocks)


def extract_lines(content: str, start_line: float | None, end_line: float | None) -> tuple[str, float, float, int]:
    """Mastra's `extractLines`: (text, first, last, total lines); first and last are 0 for an empty range."""
    lines = content.split("\n")
    total = len(lines)
    start = max(1, start_line if start_line is not None else 1)
    end = min(total, end_line if end_line is not None else total)
    if start > end:
        return "", 0, 0, total
    return "\n".join(lines[int(start - 1) : int(end)]), start, end, total


async def skill_read(
    skills: WorkspaceSkills | SkillCatalog, args: SkillReadInput, request_context: Mapping[str, Any] | None = None
) -> str:
    """A file of a skill, relative to its directory, optionally a line range. `InvalidSkillPath` for ``..``,
    absolute paths and symlinks leading out of the skill directory."""
    catalog = await _scoped(skills, request_context)
    found = await _resolve(catalog, args.skill_name)
    if isinstance(found, str):
        return found
    data = await catalog.get_asset(found.path, args.path)
    if data is None:
        files = [f"references/{f}" for f in await catalog.list_references(found.path)]
        files += [f"scripts/{f}" for f in await catalog.list_scripts(found.path)]
        files += [f"assets/{f}" for f in await catalog.list_assets(found.path)]
        listing = f"\nAvailable files: {', '.join(files)}" if files else ""
        return f'File "{args.path}" not found in skill "{args.skill_name}".{listing}'
    try:
        if b"\0" in data:
            raise UnicodeDecodeError("utf-8", data, 0, 1, "NUL byte")
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"Binary file: {found.path}/{args.path} ({len(data)} bytes)"
    content, start, end, total = extract_lines(text, args.start_line, args.end_line)
    if start == 0 and end == 0:
        first = args.start_line if args.start_line is not None else 1
        reason = (
            f"Requested startLine {js_number(args.start_line)} is past the end of the file. The file has been fully "
            "read; stop paginating."
            if first > total
            else f"Requested range {js_number(args.start_line)}-{js_number(args.end_line)} is empty because "
            "startLine is greater than endLine."
        )
        return f'File "{args.path}" has {total} lines (valid range 1-{total}). {reason}'
    if args.start_line is not None or args.end_line is not None:
        return f"{args.path} (lines {js_number(start)}-{js_number(end)} of {total})\n{content}"
    return content
