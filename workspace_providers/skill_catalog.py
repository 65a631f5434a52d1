"""The skills found under a fixed list of paths in one source (Mastra's `WorkspaceSkillsImpl` with a static
path list): same-name precedence, the files of a skill, and search. Finding the skills (and noticing when they
changed) is `skill_discovery`'s; see it for what a source is and how paths are kept.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from keel.workspace_providers.bm25 import BM25Index, find_line_range, tokenize
from keel.workspace_providers.paths import _within as within
from keel.workspace_providers.skill_discovery import (
    LOAD_ERRORS,
    DiscoveredSkills,
    SkillDiscovery,
    SkillEntry,
    real_path,
)
from keel.workspace_providers.skill_frontmatter import InvalidSkillPath, SkillConflict, js_slice
from keel.workspace_providers.skill_models import (
    SOURCE_PRIORITY,
    Skill,
    SkillLoadError,
    SkillMetadata,
    SkillSearchResult,
    is_skill_file,
    join_path,
    parent_path,
    safe_relative_path,
    segments,
    source_for_path,
)

log = logging.getLogger("keel.workspace_providers.skills")


def _sort_key(entry: SkillEntry) -> tuple[int, str]:
    return SOURCE_PRIORITY.get(entry.skill.source.type, 99), entry.skill.path


def _dedupe(candidates: list[SkillEntry]) -> list[SkillEntry]:
    """One entry per canonical directory (aliases of one skill), the highest-priority alias kept."""
    groups: dict[str, list[SkillEntry]] = {}
    for entry in candidates:
        groups.setdefault(entry.canonical, []).append(entry)
    return [min(group, key=_sort_key) for group in groups.values()]


def _tie_break(candidates: list[SkillEntry]) -> SkillEntry | None:
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    ranked = sorted(_dedupe(candidates), key=_sort_key)
    if len(ranked) == 1:
        return ranked[0]
    winner, runner_up = ranked[0].skill, ranked[1].skill
    if winner.source.type == runner_up.source.type:
        paths = ", ".join(f'"{e.skill.path}"' for e in ranked if e.skill.source.type == winner.source.type)
        raise SkillConflict(
            f'[WorkspaceSkills] Cannot resolve skill "{winner.name}": multiple {winner.source.type} skills found at '
            f"{paths}. Rename one or move it to a different source type."
        )
    others = ", ".join(f'"{e.skill.path}" ({e.skill.source.type})' for e in ranked[1:])
    log.warning(
        '[WorkspaceSkills] Multiple skills named "%s" found. Using "%s" (source: %s). Other candidates: %s',
        winner.name,
        winner.path,
        winner.source.type,
        others,
    )
    return ranked[0]


class SkillCatalog:
    """Skills under `paths` in `source`, discovered on first use and kept until `refresh()` (or a
    `maybe_refresh()` that finds a skills directory changed).

    Args:
        source: the filesystem (or skill source) to read.
        paths: skills directories, skill directories, ``.../SKILL.md`` files or glob patterns.
        bm25: an index to search with (Mastra's search engine); None searches by substring as Mastra does
            without one.
        validate_on_load: refuse skills whose frontmatter breaks Mastra's rules (default, as Mastra).
        check_skill_file_mtime: let `maybe_refresh()` notice an edited SKILL.md too (more stat calls).
    """

    STALENESS_CHECK_COOLDOWN = 30.0
    """Seconds after a discovery during which `maybe_refresh()` does not look at the disk."""

    def __init__(
        self,
        source: Any,
        paths: Sequence[str],
        *,
        bm25: BM25Index | None = None,
        validate_on_load: bool = True,
        check_skill_file_mtime: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.paths = tuple(paths)
        self._index = bm25
        self._clock = clock
        self._discovery = SkillDiscovery(
            source, paths, validate_on_load=validate_on_load, check_skill_file_mtime=check_skill_file_mtime, clock=clock
        )
        self._catalog = DiscoveredSkills()
        self._initialized = False
        self._lock = asyncio.Lock()
        self._aliases: dict[str, str] = {}

    # --- reading the catalog -------------------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def load_errors(self) -> builtins.list[SkillLoadError]:
        """The skills the last discovery skipped, and why (Mastra only logs them)."""
        return list(self._catalog.errors)

    def list_now(self) -> builtins.list[SkillMetadata]:
        """`list()` of what is already discovered, without discovering."""
        return [e.skill.metadata_only() for c in self._catalog.by_name.values() for e in _dedupe(c)]

    def get_now(self, name: str) -> Skill | None:
        """`get()` of what is already discovered. `SkillConflict` when two skills of the name share a source type."""
        entry = self._by_name(name) or self._by_path(name) or self._by_alias(name)
        return entry.skill if entry else None

    async def list(self) -> builtins.list[SkillMetadata]:
        """Every skill (aliases of one directory once), in discovery order."""
        await self.ensure_initialized()
        return self.list_now()

    async def get(self, name: str) -> Skill | None:
        """The skill named `name` (local > managed > external; `SkillConflict` when two share the winning source
        type), else the skill at path `name` (with or without ``/SKILL.md``), else a registered alias."""
        await self.ensure_initialized()
        return self.get_now(name)

    async def has(self, name: str) -> bool:
        return await self.get(name) is not None

    def register_location_alias(self, location: str, skill_path: str) -> None:
        """Let `get(location)` find the skill at `skill_path` (with or without a trailing ``/SKILL.md``)."""
        self._aliases[location] = skill_path
        stripped = location.removesuffix("/SKILL.md")
        if stripped != location:
            self._aliases[stripped] = skill_path

    def _by_name(self, name: str) -> SkillEntry | None:
        return _tie_break(self._catalog.by_name.get(name, []))

    def _by_path(self, path: str) -> SkillEntry | None:
        wanted = path.removesuffix("/SKILL.md")
        return next((e for e in self._catalog.entries() if e.skill.path == wanted), None)

    def _by_alias(self, location: str) -> SkillEntry | None:
        target = self._aliases.get(location) or self._aliases.get(location.removesuffix("/SKILL.md"))
        return self._by_path(target) if target else None

    async def _skill_for_files(self, name: str) -> Skill | None:
        await self.ensure_initialized()
        entry = self._by_name(name) or self._by_path(name)
        return entry.skill if entry else None

    # --- files of a skill ----------------------------------------------------------------------------------

    async def _read(self, name: str, path: str, label: str) -> bytes | None:
        skill = await self._skill_for_files(name)
        if skill is None:
            return None
        target = join_path(skill.path, safe_relative_path(path, label))
        root, real = await real_path(self.source, skill.path), await real_path(self.source, target)
        if root is not None and real is not None and not within(real, root):
            raise InvalidSkillPath(f"Invalid {label} path: {path} (it leads outside the skill directory)", path)
        if not await self.source.exists(target):
            return None
        try:
            data = await self.source.read_file(target)
        except LOAD_ERRORS:
            return None
        return data.encode("utf-8") if isinstance(data, str) else bytes(data)

    async def get_reference(self, name: str, path: str) -> str | None:
        """A file of skill `name` (by name or path) as text; `path` is relative to the skill directory
        (``references/x.md``). None when missing; `InvalidSkillPath` when it leaves the skill directory."""
        data = await self._read(name, path, "reference")
        return None if data is None else data.decode("utf-8", "replace")

    async def get_script(self, name: str, path: str) -> str | None:
        data = await self._read(name, path, "script")
        return None if data is None else data.decode("utf-8", "replace")

    async def get_asset(self, name: str, path: str) -> bytes | None:
        return await self._read(name, path, "asset")

    async def list_references(self, name: str) -> builtins.list[str]:
        skill = await self._skill_for_files(name)
        return list(skill.references) if skill else []

    async def list_scripts(self, name: str) -> builtins.list[str]:
        skill = await self._skill_for_files(name)
        return list(skill.scripts) if skill else []

    async def list_assets(self, name: str) -> builtins.list[str]:
        skill = await self._skill_for_files(name)
        return list(skill.assets) if skill else []

    # --- search --------------------------------------------------------------------------------------------

    async def search(
        self,
        query: str,
        *,
        top_k: float = 5,
        min_score: float | None = None,
        skill_names: Sequence[str] | None = None,
        include_references: bool = True,
    ) -> builtins.list[SkillSearchResult]:
        """BM25 over each SKILL.md body and reference file when an index is configured (results credited to the
        skill that wins the name), else Mastra's substring search (score 1 for SKILL.md, 0.8 for a reference,
        content cut to 200 characters)."""
        await self.ensure_initialized()
        if self._index is None:
            return await self._simple_search(query, top_k, skill_names, include_references)
        total = sum(1 + len(e.skill.references) for e in self._catalog.entries())
        expanded = max(top_k * 3 if skill_names is not None else top_k, total)
        hits = self._index.search(query, int(expanded), min_score or 0.0)
        terms = tokenize(query, self._index.tokenize_options)
        results: builtins.list[SkillSearchResult] = []
        seen: set[str] = set()
        for hit in hits:
            meta = hit.metadata or {}
            matched = self._by_path(meta.get("skillPath", ""))
            if matched is None or not meta.get("source"):
                continue
            winner = self._by_name(matched.skill.name) or matched
            skill, source = winner.skill, str(meta["source"])
            if skill_names is not None and skill.name not in skill_names:
                continue
            if not include_references and source != "SKILL.md":
                continue
            if f"{skill.path}:{source}" in seen:
                continue
            seen.add(f"{skill.path}:{source}")
            line_range = find_line_range(hit.content, terms, self._index.tokenize_options) if terms else None
            results.append(
                SkillSearchResult(
                    skill.name, skill.path, source, hit.content, hit.score, line_range, {"bm25": hit.score}
                )
            )
            if len(results) >= top_k:
                break
        return results

    async def _simple_search(
        self, query: str, top_k: float, skill_names: Sequence[str] | None, include_references: bool
    ) -> builtins.list[SkillSearchResult]:
        lowered = query.lower()
        results: builtins.list[SkillSearchResult] = []
        for candidates in list(self._catalog.by_name.values()):
            entry = _tie_break(candidates)
            if entry is None:
                continue
            skill = entry.skill
            if skill_names is not None and skill.name not in skill_names:
                continue
            if lowered in skill.instructions.lower():
                results.append(
                    SkillSearchResult(skill.name, skill.path, "SKILL.md", js_slice(skill.instructions, 200), 1)
                )
            if include_references:
                for ref in skill.references:
                    if len(results) >= top_k:
                        break
                    content = await self.get_reference(skill.name, f"references/{ref}")
                    if content and lowered in content.lower():
                        results.append(
                            SkillSearchResult(skill.name, skill.path, f"references/{ref}", js_slice(content, 200), 0.8)
                        )
            if len(results) >= top_k:
                break
        return results[: max(0, int(top_k))]

    # --- discovery -----------------------------------------------------------------------------------------

    async def ensure_initialized(self) -> None:
        if self._initialized:
            return
        async with self._lock:
            if not self._initialized:
                await self._rediscover()

    async def refresh(self) -> None:
        """Discover again; readers see the old catalog until the new one is complete."""
        async with self._lock:
            await self._rediscover()

    async def maybe_refresh(self) -> None:
        """Refresh when a skills directory (or, with `check_skill_file_mtime`, a SKILL.md) changed since the
        last discovery; looks at the disk at most once per `STALENESS_CHECK_COOLDOWN`."""
        await self.ensure_initialized()
        if await self._is_stale():
            await self.refresh()

    async def add_skill(self, skill_path: str) -> None:
        """Load one skill (its directory or its SKILL.md) into the catalog without a full discovery.
        `SkillValidationError` when it is invalid."""
        await self.ensure_initialized()
        if is_skill_file(skill_path):
            file_path, directory = skill_path, (segments(parent_path(skill_path))[-1] or "unknown")
        else:
            file_path, directory = join_path(skill_path, "SKILL.md"), (segments(skill_path)[-1] or "unknown")
        source = next(
            (source_for_path(p) for p in self.paths if skill_path == p or skill_path.startswith(p + "/")),
            source_for_path(skill_path),
        )
        entry = await self._discovery.parse(file_path, directory, source)
        old = next((e for e in self._catalog.entries() if e.skill.path == entry.skill.path), None)
        if old is not None:
            self._unindex(old.skill)
        self._catalog.add(entry)
        await self._index_skill(entry.skill)
        self._discovery.touch()

    async def remove_skill(self, name: str) -> None:
        await self.ensure_initialized()
        entry = self._by_name(name) or self._by_path(name)
        if entry is None:
            return
        self._unindex(entry.skill)
        candidates = self._catalog.by_name.get(entry.skill.name, [])
        candidates[:] = [e for e in candidates if e.skill.path != entry.skill.path]
        if not candidates:
            self._catalog.by_name.pop(entry.skill.name, None)
        self._discovery.touch()

    async def _rediscover(self) -> None:
        catalog = await self._discovery.discover()
        old, self._catalog, self._initialized = self._catalog, catalog, True
        await self._reconcile_index(old, catalog)

    async def _is_stale(self) -> bool:
        last = self._discovery.last_discovery
        if last and self._clock() - last < self.STALENESS_CHECK_COOLDOWN:
            return False
        return await self._discovery.changed()

    # --- the search index ----------------------------------------------------------------------------------

    async def _reconcile_index(self, old: DiscoveredSkills, new: DiscoveredSkills) -> None:
        """Drop vanished skills' documents, re-index changed ones, leave the rest (as Mastra does)."""
        if self._index is None:
            return
        old_by_path = {e.skill.path: e.skill for e in old.entries()}
        new_by_path = {e.skill.path: e.skill for e in new.entries()}
        for path, skill in old_by_path.items():
            if path not in new_by_path:
                self._unindex(skill)
        for path, skill in new_by_path.items():
            before = old_by_path.get(path)
            if before and before.instructions == skill.instructions and before.references == skill.references:
                continue
            if before:
                self._unindex(before)
            await self._index_skill(skill)

    async def _index_skill(self, skill: Skill) -> None:
        """The SKILL.md body and each reference file as documents ``skill:<path>:<SKILL.md | ref>``."""
        if self._index is None:
            return
        meta = {"skillPath": skill.path, "source": "SKILL.md"}
        self._index.add(f"skill:{skill.path}:SKILL.md", skill.instructions, meta)
        for ref in skill.references:
            try:
                raw = await self.source.read_file(join_path(skill.path, "references", ref))
            except LOAD_ERRORS:
                continue
            content = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "replace")
            meta = {"skillPath": skill.path, "source": f"references/{ref}"}
            self._index.add(f"skill:{skill.path}:{ref}", content, meta)

    def _unindex(self, skill: Skill) -> None:
        if self._index is None:
            return
        for doc in ("SKILL.md", *skill.references):
            self._index.remove(f"skill:{skill.path}:{doc}")
