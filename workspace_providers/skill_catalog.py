"""The skills found under a fixed list of paths in one source (Mastra's `WorkspaceSkillsImpl` with a static
path list): discovery, same-name precedence, files of a skill, and search.

A source is anything with the filesystem's async ``exists``, ``stat``, ``read_file``, ``readdir`` (a
`LocalFilesystem` is one) and optionally ``realpath``. Paths are workspace paths, joined with ``/`` and not
normalised, as Mastra keeps them: ``skills`` gives skill paths ``skills/<dir>``, ``./skills`` gives
``./skills/<dir>``.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from keel.workspace_providers.bm25 import BM25Index, find_line_range, tokenize
from keel.workspace_providers.errors import WorkspaceError
from keel.workspace_providers.globs import glob_base, glob_matcher, is_glob
from keel.workspace_providers.skill_frontmatter import (
    MISSING,
    InvalidSkillPath,
    SkillConflict,
    SkillValidationError,
    extract_skill_frontmatter,
    js_slice,
    parse_skill_md,
)
from keel.workspace_providers.skill_models import (
    SOURCE_PRIORITY,
    ContentSource,
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

_LOAD_ERRORS = (WorkspaceError, OSError, ValueError, UnicodeError)
"""What a skill failing to load raises; it is logged and skipped, as Mastra does. Anything else is a bug."""


@dataclass(frozen=True)
class _Entry:
    skill: Skill
    canonical: str


@dataclass
class _Catalog:
    by_name: dict[str, list[_Entry]] = field(default_factory=dict)
    errors: list[SkillLoadError] = field(default_factory=list)

    def add(self, entry: _Entry) -> None:
        candidates = self.by_name.setdefault(entry.skill.name, [])
        for i, existing in enumerate(candidates):
            if existing.skill.path == entry.skill.path:
                candidates[i] = entry
                return
        candidates.append(entry)

    def entries(self) -> list[_Entry]:
        return [e for candidates in self.by_name.values() for e in candidates]


def _sort_key(entry: _Entry) -> tuple[int, str]:
    return SOURCE_PRIORITY.get(entry.skill.source.type, 99), entry.skill.path


def _dedupe(candidates: list[_Entry]) -> list[_Entry]:
    """One entry per canonical directory (aliases of one skill), the highest-priority alias kept."""
    groups: dict[str, list[_Entry]] = {}
    for entry in candidates:
        groups.setdefault(entry.canonical, []).append(entry)
    return [min(group, key=_sort_key) for group in groups.values()]


def _tie_break(candidates: list[_Entry]) -> _Entry | None:
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


async def real_path(source: Any, path: str) -> str | None:
    """The canonical form of `path` in `source`: its ``realpath()`` if it has one, the disk's for a local
    filesystem (``base_path``), else None (unknown)."""
    if hasattr(source, "realpath"):
        try:
            return str(await source.realpath(path))
        except _LOAD_ERRORS:
            return None
    base = getattr(source, "base_path", None)
    if isinstance(base, str):
        return await asyncio.to_thread(os.path.realpath, os.path.join(base, path))
    return None


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


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
    GLOB_RESOLVE_INTERVAL = 5.0

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
        self._validate = validate_on_load
        self._check_file_mtime = check_skill_file_mtime
        self._clock = clock
        self._catalog = _Catalog()
        self._initialized = False
        self._lock = asyncio.Lock()
        self._last_discovery = 0.0
        self._aliases: dict[str, str] = {}
        self._glob_dirs: dict[str, list[str]] = {}
        self._glob_times: dict[str, float] = {}

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

    def _by_name(self, name: str) -> _Entry | None:
        return _tie_break(self._catalog.by_name.get(name, []))

    def _by_path(self, path: str) -> _Entry | None:
        wanted = path.removesuffix("/SKILL.md")
        return next((e for e in self._catalog.entries() if e.skill.path == wanted), None)

    def _by_alias(self, location: str) -> _Entry | None:
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
        if root is not None and real is not None and not _within(real, root):
            raise InvalidSkillPath(f"Invalid {label} path: {path} (it leads outside the skill directory)", path)
        if not await self.source.exists(target):
            return None
        try:
            data = await self.source.read_file(target)
        except _LOAD_ERRORS:
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
        entry = await self._parse(file_path, directory, source)
        old = next((e for e in self._catalog.entries() if e.skill.path == entry.skill.path), None)
        if old is not None:
            self._unindex(old.skill)
        self._catalog.add(entry)
        await self._index_skill(entry.skill)
        self._last_discovery = self._clock()

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
        self._last_discovery = self._clock()

    async def _rediscover(self) -> None:
        catalog = _Catalog()
        self._glob_dirs.clear()
        self._glob_times.clear()
        for raw in self.paths:
            path = raw[:-1] if len(raw) > 1 and raw.endswith("/") else raw
            source = source_for_path(path)
            if is_glob(path):
                matches = await self._resolve_glob(path)
                self._glob_dirs[path] = list(
                    dict.fromkeys(p if t == "directory" else parent_path(p) for p, t in matches)
                )
                self._glob_times[path] = self._clock()
                for match, kind in matches:
                    if kind == "file":
                        await self._discover_direct(match, source, catalog)
                    elif not await self._discover_direct(match, source, catalog):
                        await self._discover_in(match, source, catalog)
            elif not await self._discover_direct(path, source, catalog):
                await self._discover_in(path, source, catalog)
        self._last_discovery = self._clock()
        old, self._catalog, self._initialized = self._catalog, catalog, True
        await self._reconcile_index(old, catalog)

    async def _resolve_glob(self, pattern: str) -> builtins.list[tuple[str, str]]:
        """Mastra's `resolvePathPattern(pattern, {dot: true, maxDepth: 4})`: entries under the glob's base
        matching it; symlinked directories are not entered."""
        matches = glob_matcher(pattern, dot=True)
        found: builtins.list[tuple[str, str]] = []

        async def walk(directory: str, depth: int) -> None:
            if depth >= 4:
                return
            try:
                entries = await self.source.readdir(directory)
            except _LOAD_ERRORS:
                return
            for entry in entries:
                if entry.type == "directory" and entry.is_symlink:
                    continue
                path = entry.name if directory in (".", "") else f"{directory}/{entry.name}"
                if matches(path):
                    found.append((path, entry.type))
                if entry.type == "directory":
                    await walk(path, depth + 1)

        await walk(glob_base(pattern), 0)
        return found

    async def _discover_direct(self, path: str, source: ContentSource, catalog: _Catalog) -> bool:
        """Load `path` when it is a SKILL.md or a directory holding one: True when it was (skip the scan)."""
        try:
            if is_skill_file(path):
                if await self.source.exists(path):
                    directory = parent_path(path)
                    await self._load(path, segments(directory)[-1] or directory, source, catalog)
                return True
            if await self.source.exists(path):
                file_path = join_path(path, "SKILL.md")
                if await self.source.exists(file_path):
                    await self._load(file_path, segments(path)[-1] or path, source, catalog)
                    return True
        except _LOAD_ERRORS:
            return False
        return False

    async def _discover_in(self, path: str, source: ContentSource, catalog: _Catalog) -> None:
        """Load each subdirectory of `path` holding a SKILL.md."""
        try:
            if not await self.source.exists(path):
                return
        except _LOAD_ERRORS as err:
            log.warning('[WorkspaceSkills] Cannot access skills path "%s": %s', path, err)
            return
        try:
            entries = await self.source.readdir(path)
        except _LOAD_ERRORS as err:
            log.error("[WorkspaceSkills] Failed to scan skills directory %s: %s", path, err)
            return
        for entry in entries:
            if entry.type != "directory":
                continue
            file_path = join_path(path, entry.name, "SKILL.md")
            try:
                if await self.source.exists(file_path):
                    await self._load(file_path, entry.name, source, catalog)
            except _LOAD_ERRORS as err:
                self._skipped(catalog, file_path, err)

    async def _load(self, file_path: str, directory: str, source: ContentSource, catalog: _Catalog) -> None:
        try:
            catalog.add(await self._parse(file_path, directory, source))
        except _LOAD_ERRORS as err:
            self._skipped(catalog, file_path, err)

    def _skipped(self, catalog: _Catalog, file_path: str, err: Exception) -> None:
        catalog.errors.append(SkillLoadError(file_path, str(err)))
        log.error("[WorkspaceSkills] Failed to load skill from %s: %s", file_path, err)

    async def _parse(self, file_path: str, directory: str, source: ContentSource) -> _Entry:
        raw = await self.source.read_file(file_path)
        content = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "replace")
        skill_path = parent_path(file_path)
        if self._validate:
            parsed, warnings = parse_skill_md(content, path=file_path, directory_name=directory)
        else:
            try:
                parsed, warnings = extract_skill_frontmatter(content), []
            except ValueError as err:
                raise SkillValidationError(file_path, [f"Invalid frontmatter: {err}"]) from None
        fields = {k: (None if v is MISSING else v) for k, v in parsed.metadata.items()}
        for warning in warnings:
            log.warning("[WorkspaceSkills] %s: %s", fields["name"], warning)
        references, scripts, assets = [await self._files_in(skill_path, d) for d in ("references", "scripts", "assets")]
        skill = Skill(
            name=str(fields["name"]),
            path=skill_path,
            description=str(fields["description"]),
            license=fields["license"],
            compatibility=fields["compatibility"],
            user_invocable=fields["user-invocable"],
            metadata=fields["metadata"],
            instructions=parsed.instructions,
            source=source,
            references=tuple(references),
            scripts=tuple(scripts),
            assets=tuple(assets),
        )
        return _Entry(skill, await real_path(self.source, skill_path) or skill_path)

    async def _files_in(self, skill_path: str, subdir: str) -> builtins.list[str]:
        """Files under ``<skill>/<subdir>`` (relative to it), depth-first in directory order; a symlinked
        directory is listed as a file, not entered."""
        root = join_path(skill_path, subdir)
        files: builtins.list[str] = []

        async def walk(directory: str, depth: int) -> None:
            if depth >= 20:
                return
            for entry in await self.source.readdir(directory):
                path = join_path(directory, entry.name)
                if entry.type == "directory" and not entry.is_symlink:
                    await walk(path, depth + 1)
                else:
                    files.append(path[len(root) + 1 :])

        try:
            if await self.source.exists(root):
                await walk(root, 0)
        except _LOAD_ERRORS:
            pass
        return files

    async def _is_stale(self) -> bool:
        if self._last_discovery == 0:
            return True
        now = self._clock()
        if now - self._last_discovery < self.STALENESS_CHECK_COOLDOWN:
            return False
        for path in self.paths:
            if is_glob(path):
                if now - self._glob_times.get(path, 0) > self.GLOB_RESOLVE_INTERVAL or path not in self._glob_dirs:
                    matches = await self._resolve_glob(path)
                    self._glob_dirs[path] = list(
                        dict.fromkeys(p if t == "directory" else parent_path(p) for p, t in matches)
                    )
                    self._glob_times[path] = now
                to_check = self._glob_dirs.get(path, [])
            else:
                to_check = [path]
            for directory in to_check:
                try:
                    if await self._dir_changed(directory):
                        return True
                except _LOAD_ERRORS:
                    continue
        return False

    async def _changed(self, path: str, *, file_only: bool = False) -> bool:
        info = await self.source.stat(path)
        return bool((not file_only or info.type == "file") and info.modified_at.timestamp() > self._last_discovery)

    async def _dir_changed(self, directory: str) -> bool:
        info = await self.source.stat(directory)
        if info.modified_at.timestamp() > self._last_discovery:
            return True
        if info.type != "directory":
            return False
        if self._check_file_mtime:
            try:
                if await self._changed(join_path(directory, "SKILL.md"), file_only=True):
                    return True
            except _LOAD_ERRORS:
                pass
        for entry in await self.source.readdir(directory):
            if entry.type != "directory":
                continue
            child = join_path(directory, entry.name)
            try:
                if await self._changed(child):
                    return True
                if self._check_file_mtime and await self._changed(join_path(child, "SKILL.md"), file_only=True):
                    return True
            except _LOAD_ERRORS:
                continue
        return False

    # --- the search index ----------------------------------------------------------------------------------

    async def _reconcile_index(self, old: _Catalog, new: _Catalog) -> None:
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
            except _LOAD_ERRORS:
                continue
            content = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "replace")
            meta = {"skillPath": skill.path, "source": f"references/{ref}"}
            self._index.add(f"skill:{skill.path}:{ref}", content, meta)

    def _unindex(self, skill: Skill) -> None:
        if self._index is None:
            return
        for doc in ("SKILL.md", *skill.references):
            self._index.remove(f"skill:{skill.path}:{doc}")
