"""Skills for a workspace (Mastra's `workspace.skills`): SKILL.md directories found under configured paths,
advertised to the model in an ``<available_skills>`` block and used through the `skill`, `skill_search` and
`skill_read` tools (see `skill_tools`).

`WorkspaceSkills` is the provider a `Workspace` takes among its extensions (``kind = "skills"``). Its paths may
be a list or a function of the request context, and its source (the workspace filesystem) an instance or a
function of the request context; each resolved (source, paths) pair gets its own `SkillCatalog`, and the most
recently used `max_cached_sources` of them are kept.
"""

from __future__ import annotations

import builtins
import inspect
import json
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, cast

from keel.workspace_providers.bm25 import BM25Index
from keel.workspace_providers.search import BM25Config
from keel.workspace_providers.skill_catalog import SkillCatalog
from keel.workspace_providers.skill_frontmatter import SkillError
from keel.workspace_providers.skill_models import Skill, SkillLoadError, SkillMetadata, SkillSearchResult

RequestContext = Mapping[str, Any]
SkillsResolver = Callable[[dict[str, Any]], Sequence[str] | Awaitable[Sequence[str]]]
SourceResolver = Callable[[dict[str, Any]], Any]
SkillFormat = Literal["xml", "json", "markdown"]

DEFAULT_MAX_CACHED_SOURCES = 16
SKILLS_GUIDANCE = (
    "IMPORTANT: Skills are NOT tools. Do not call skill names directly as tool names. To use a skill, call the "
    '`skill` tool with the skill name as the "name" parameter. If multiple skills share the same name, use the exact '
    "location (shown in the location field) instead of the name to disambiguate. The location field identifies a "
    "skill for the `skill` and `skill_read` tools; it is not guaranteed to exist on your workspace filesystem, so "
    "read skill files with `skill_read` rather than with filesystem tools. When a user asks about a topic covered "
    "by an available skill, activate it immediately without asking for permission first."
)
"""The system message Mastra's SkillsProcessor adds after the catalog whenever there are skills."""


def escape_xml(text: str) -> str:
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&apos;")
    )


def format_skills_catalog(entries: Sequence[Mapping[str, str]], format: SkillFormat = "xml") -> str:
    """Mastra's `formatSkillsCatalog`: `{name, description, location, source}` entries sorted by name."""
    ordered = sorted(entries, key=lambda e: e["name"])
    if format == "json":
        keys = ("name", "description", "location", "source")
        body = json.dumps([{k: e[k] for k in keys} for e in ordered], indent=2, ensure_ascii=False)
        return f"Available Skills:\n\n{body}"
    if format == "markdown":
        lines = [f"- **{e['name']}** [{e['source']}] ({e['location']}): {e['description']}" for e in ordered]
        return "# Available Skills\n\n" + "\n".join(lines)
    skills = "\n".join(
        "  <skill>\n"
        f"    <name>{escape_xml(e['name'])}</name>\n"
        f"    <description>{escape_xml(e['description'])}</description>\n"
        f"    <location>{escape_xml(e['location'])}</location>\n"
        f"    <source>{escape_xml(e['source'])}</source>\n"
        "  </skill>"
        for e in ordered
    )
    return f"<available_skills>\n{skills}\n</available_skills>"


def catalog_instructions(catalog: SkillCatalog, format: SkillFormat = "xml") -> str:
    """The catalog block then `SKILLS_GUIDANCE` (two system messages in Mastra, here joined by a blank line), or
    "" without skills. Every skill is listed, same-name ones too, each with its own location."""
    listed = catalog.list_now()
    if not listed:
        return ""
    by_path: dict[str, Skill] = {}
    for meta in listed:
        skill = catalog.get_now(meta.path)
        if skill is not None:
            by_path[skill.path] = skill
    entries = [
        {"name": s.name, "description": s.description, "location": f"{s.path}/SKILL.md", "source": s.source.type}
        for s in by_path.values()
    ]
    return f"{format_skills_catalog(entries, format)}\n\n{SKILLS_GUIDANCE}"


def _is_resolver(value: Any) -> bool:
    return callable(value) and not inspect.isclass(value) and not hasattr(value, "readdir")


async def _resolved(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class WorkspaceSkills:
    """Mastra's `WorkspaceSkills`, async and snake_case.

    Args:
        skills: paths to scan: skills directories (``skills``), skill directories, ``.../SKILL.md`` files, globs
            (``./**/skills``); or a function of the request context (sync or async) returning them.
        source: where to read: the workspace filesystem (any object with its async ``exists``, ``stat``,
            ``read_file``, ``readdir``), or a function of the request context returning one. Default: the
            current directory, read-only and uncontained (Mastra's `LocalSkillSource`).
        bm25: search with BM25 as a Mastra workspace with ``bm25`` does: True or ``{}`` (defaults), ``{"k1": ..,
            "b": ..}``, Mastra's nested ``{"bm25": {"k1": .., "b": ..}, "tokenize": {...}}``, or a `BM25Config`;
            False or None searches by substring, as Mastra does without a search engine.
        validate_on_load: skip skills whose SKILL.md breaks Mastra's rules (see `load_errors()`).
        check_skill_file_mtime: `maybe_refresh()` also notices an edited SKILL.md.
        format: the catalog's format in the instructions: ``xml`` (Mastra's default), ``json``, ``markdown``.
        max_cached_sources: how many catalogs are kept, one per resolved (source, path set), least recently
            used dropped first: with resolvers, a bound on the memory (and BM25 indexes) all requests hold.

    Raises:
        SkillError: `skills` is a string, or `max_cached_sources` is not positive. SearchError: bad `bm25` options.
    """

    kind = "skills"

    def __init__(
        self,
        skills: Sequence[str] | SkillsResolver,
        *,
        source: Any | SourceResolver | None = None,
        bm25: bool | Mapping[str, Any] | BM25Config | None = False,
        validate_on_load: bool = True,
        check_skill_file_mtime: bool = False,
        format: SkillFormat = "xml",
        max_cached_sources: int = DEFAULT_MAX_CACHED_SOURCES,
    ) -> None:
        if isinstance(skills, str):
            raise SkillError("skills must be a list of paths or a resolver function, not a string")
        if max_cached_sources < 1:
            raise SkillError(f"max_cached_sources must be a positive integer, received {max_cached_sources}")
        self._paths: tuple[str, ...] | None = None if callable(skills) else tuple(skills)
        self._paths_resolver: SkillsResolver | None = skills if callable(skills) else None
        if source is None:
            from keel.workspace_providers.local_filesystem import LocalFilesystem

            source = LocalFilesystem(os.getcwd(), contained=False, read_only=True)
        self._source_resolver: SourceResolver | None = None
        self._source: Any = source
        if _is_resolver(source):
            self._source_resolver, self._source = cast(SourceResolver, source), None
        self._bm25: BM25Config | None = (
            bm25 if isinstance(bm25, BM25Config) else None if bm25 is None or bm25 is False else BM25Config.parse(bm25)
        )
        self._validate = validate_on_load
        self._check_mtime = check_skill_file_mtime
        self.format: SkillFormat = format
        self._max_sources = max_cached_sources
        # (id(source), path set) -> (source, catalog), least recently used first; the source is held so that its
        # id stays its own while the entry lives
        self._catalogs: OrderedDict[tuple[int, str], tuple[Any, SkillCatalog]] = OrderedDict()

    @property
    def is_dynamic(self) -> bool:
        """Whether paths or source depend on the request context."""
        return self._paths_resolver is not None or self._source_resolver is not None

    async def scoped(self, request_context: RequestContext | None = None) -> SkillCatalog:
        """The catalog for this request: its source and paths resolved, cached per (source, path set)."""
        context = dict(request_context or {})
        if self._source_resolver is not None:
            source = await _resolved(self._source_resolver(context))
            if source is None:
                raise SkillError("Filesystem resolver returned no filesystem; cannot discover skills")
        else:
            source = self._source
        paths = self._paths if self._paths is not None else await self._resolve_paths(context)
        return self._catalog(source, paths)

    async def _resolve_paths(self, context: dict[str, Any]) -> tuple[str, ...]:
        assert self._paths_resolver is not None
        paths = await _resolved(self._paths_resolver(context))
        if isinstance(paths, str) or not all(isinstance(p, str) for p in paths):
            raise SkillError("skills resolver must return a list of path strings")
        return tuple(paths)

    def _catalog(self, source: Any, paths: Sequence[str]) -> SkillCatalog:
        key = (id(source), "\n".join(sorted(paths)))
        slot = self._catalogs.pop(key, None)
        if slot is None:
            config = self._bm25
            index = BM25Index(config.k1, config.b, config.tokenize) if config is not None else None
            catalog = SkillCatalog(
                source, paths, bm25=index, validate_on_load=self._validate, check_skill_file_mtime=self._check_mtime
            )
            slot = (source, catalog)
        self._catalogs[key] = slot  # now the most recently used
        while len(self._catalogs) > self._max_sources:
            self._catalogs.popitem(last=False)
        return slot[1]

    def _static_catalog(self) -> SkillCatalog | None:
        return None if self.is_dynamic or self._paths is None else self._catalog(self._source, self._paths)

    # --- lifecycle -----------------------------------------------------------------------------------------

    async def init(self) -> None:
        """Discover now when neither paths nor source depend on the request (else on first use)."""
        catalog = self._static_catalog()
        if catalog is not None:
            await catalog.ensure_initialized()

    async def destroy(self) -> None:
        """Forget every catalog (the files stay)."""
        self._catalogs.clear()

    # --- instructions --------------------------------------------------------------------------------------

    def get_instructions(self, request_context: RequestContext | None = None) -> str:
        """The ``<available_skills>`` block and Mastra's guidance, from skills already discovered (`init()`);
        "" when there are none or discovery waits on a resolver (use `get_instructions_async`)."""
        catalog = self._static_catalog()
        return catalog_instructions(catalog, self.format) if catalog is not None and catalog.initialized else ""

    async def get_instructions_async(self, request_context: RequestContext | None = None) -> str:
        """The same, resolving paths and source for this request and refreshing a stale catalog first."""
        catalog = await self.scoped(request_context)
        await catalog.maybe_refresh()
        return catalog_instructions(catalog, self.format)

    async def load_errors(self, request_context: RequestContext | None = None) -> builtins.list[SkillLoadError]:
        """The skills discovery skipped and why (``Invalid skill metadata in <file>:\n<field>: ...``): Mastra only
        logs these."""
        catalog = await self.scoped(request_context)
        await catalog.ensure_initialized()
        return catalog.load_errors

    # --- Mastra's WorkspaceSkills, on the request-free catalog (request context {}) ---------------------------

    async def list(self) -> builtins.list[SkillMetadata]:
        return await (await self.scoped()).list()

    async def get(self, name: str) -> Skill | None:
        return await (await self.scoped()).get(name)

    async def has(self, name: str) -> bool:
        return await (await self.scoped()).has(name)

    async def refresh(self) -> None:
        await (await self.scoped()).refresh()

    async def maybe_refresh(self, request_context: RequestContext | None = None) -> None:
        await (await self.scoped(request_context)).maybe_refresh()

    async def add_skill(self, skill_path: str) -> None:
        await (await self.scoped()).add_skill(skill_path)

    async def remove_skill(self, name: str) -> None:
        await (await self.scoped()).remove_skill(name)

    def register_location_alias(self, location: str, skill_path: str) -> None:
        catalog = self._static_catalog()
        if catalog is not None:
            catalog.register_location_alias(location, skill_path)

    async def search(
        self,
        query: str,
        *,
        top_k: float = 5,
        min_score: float | None = None,
        skill_names: Sequence[str] | None = None,
        include_references: bool = True,
    ) -> builtins.list[SkillSearchResult]:
        catalog = await self.scoped()
        return await catalog.search(
            query, top_k=top_k, min_score=min_score, skill_names=skill_names, include_references=include_references
        )

    async def get_reference(self, name: str, path: str) -> str | None:
        return await (await self.scoped()).get_reference(name, path)

    async def get_script(self, name: str, path: str) -> str | None:
        return await (await self.scoped()).get_script(name, path)

    async def get_asset(self, name: str, path: str) -> bytes | None:
        return await (await self.scoped()).get_asset(name, path)

    async def list_references(self, name: str) -> builtins.list[str]:
        return await (await self.scoped()).list_references(name)

    async def list_scripts(self, name: str) -> builtins.list[str]:
        return await (await self.scoped()).list_scripts(name)

    async def list_assets(self, name: str) -> builtins.list[str]:
        return await (await self.scoped()).list_assets(name)
