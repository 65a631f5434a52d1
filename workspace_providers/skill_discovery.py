"""Finding skills (Mastra's `WorkspaceSkillsImpl` discovery): the SKILL.md files under a fixed list of paths in
one source, each parsed into a `Skill`, and the staleness check that tells when the paths may hold other skills
now. Reading and searching what was found is `skill_catalog`'s.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from keel.workspace_providers.errors import WorkspaceError
from keel.workspace_providers.globs import glob_base, glob_matcher, is_glob
from keel.workspace_providers.skill_frontmatter import (
    MISSING,
    SkillValidationError,
    extract_skill_frontmatter,
    parse_skill_md,
)
from keel.workspace_providers.skill_models import (
    ContentSource,
    Skill,
    SkillLoadError,
    is_skill_file,
    join_path,
    parent_path,
    segments,
    source_for_path,
)

log = logging.getLogger("keel.workspace_providers.skills")

LOAD_ERRORS = (WorkspaceError, OSError, ValueError, UnicodeError)
"""What a skill failing to load raises; it is logged and skipped, as Mastra does. Anything else is a bug."""


@dataclass(frozen=True)
class SkillEntry:
    """A discovered skill and its canonical directory (the same for every alias of one directory)."""

    skill: Skill
    canonical: str


@dataclass
class DiscoveredSkills:
    """What one discovery found: the skills by name (same-name ones in discovery order) and the ones skipped."""

    by_name: dict[str, list[SkillEntry]] = field(default_factory=dict)
    errors: list[SkillLoadError] = field(default_factory=list)

    def add(self, entry: SkillEntry) -> None:
        candidates = self.by_name.setdefault(entry.skill.name, [])
        for i, existing in enumerate(candidates):
            if existing.skill.path == entry.skill.path:
                candidates[i] = entry
                return
        candidates.append(entry)

    def entries(self) -> list[SkillEntry]:
        return [e for candidates in self.by_name.values() for e in candidates]


async def real_path(source: Any, path: str) -> str | None:
    """The canonical form of `path` in `source`: its ``realpath()`` if it has one, the disk's for a local
    filesystem (``base_path``), else None (unknown)."""
    if hasattr(source, "realpath"):
        try:
            return str(await source.realpath(path))
        except LOAD_ERRORS:
            return None
    base = getattr(source, "base_path", None)
    if isinstance(base, str):
        return await asyncio.to_thread(os.path.realpath, os.path.join(base, path))
    return None


class SkillDiscovery:
    """Discovers the skills under `paths` in `source` and tells whether they changed since (see `SkillCatalog`
    for the arguments)."""

    GLOB_RESOLVE_INTERVAL = 5.0
    """Seconds a glob's matches are trusted by the staleness check before the glob is resolved again."""

    def __init__(
        self,
        source: Any,
        paths: Sequence[str],
        *,
        validate_on_load: bool,
        check_skill_file_mtime: bool,
        clock: Callable[[], float],
    ) -> None:
        self.source = source
        self.paths = tuple(paths)
        self._validate = validate_on_load
        self._check_file_mtime = check_skill_file_mtime
        self._clock = clock
        self.last_discovery = 0.0
        """When the skills were last discovered (or one added or removed); 0 before the first discovery."""
        self._glob_dirs: dict[str, list[str]] = {}
        self._glob_times: dict[str, float] = {}

    def touch(self) -> None:
        """Count the catalog as up to date now (after adding or removing one skill)."""
        self.last_discovery = self._clock()

    async def discover(self) -> DiscoveredSkills:
        """Every skill under the paths, in path order, and the ones skipped with why."""
        found = DiscoveredSkills()
        self._glob_dirs.clear()
        self._glob_times.clear()
        for raw in self.paths:
            path = raw[:-1] if len(raw) > 1 and raw.endswith("/") else raw
            source = source_for_path(path)
            if is_glob(path):
                matches = await self._resolve_glob(path)
                self._remember_glob(path, matches)
                for match, kind in matches:
                    if kind == "file":
                        await self._discover_direct(match, source, found)
                    elif not await self._discover_direct(match, source, found):
                        await self._discover_in(match, source, found)
            elif not await self._discover_direct(path, source, found):
                await self._discover_in(path, source, found)
        self.touch()
        return found

    async def changed(self) -> bool:
        """Whether a skills directory (or, with `check_skill_file_mtime`, a SKILL.md) changed since the last
        discovery; True before the first one."""
        if self.last_discovery == 0:
            return True
        for path in self.paths:
            if is_glob(path):
                stale = self._clock() - self._glob_times.get(path, 0) > self.GLOB_RESOLVE_INTERVAL
                if stale or path not in self._glob_dirs:
                    self._remember_glob(path, await self._resolve_glob(path))
                to_check = self._glob_dirs.get(path, [])
            else:
                to_check = [path]
            for directory in to_check:
                try:
                    if await self._dir_changed(directory):
                        return True
                except LOAD_ERRORS:
                    continue
        return False

    async def parse(self, file_path: str, directory: str, source: ContentSource) -> SkillEntry:
        """One SKILL.md as a skill (`SkillValidationError` when it breaks Mastra's rules and validation is on)."""
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
        return SkillEntry(skill, await real_path(self.source, skill_path) or skill_path)

    # --- globs ---------------------------------------------------------------------------------------------

    def _remember_glob(self, pattern: str, matches: builtins.list[tuple[str, str]]) -> None:
        """The directories a glob's matches stand for (a matched file: its directory), for the staleness check."""
        self._glob_dirs[pattern] = list(dict.fromkeys(p if t == "directory" else parent_path(p) for p, t in matches))
        self._glob_times[pattern] = self._clock()

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
            except LOAD_ERRORS:
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

    # --- discovery -----------------------------------------------------------------------------------------

    async def _discover_direct(self, path: str, source: ContentSource, found: DiscoveredSkills) -> bool:
        """Load `path` when it is a SKILL.md or a directory holding one: True when it was (skip the scan)."""
        try:
            if is_skill_file(path):
                if await self.source.exists(path):
                    directory = parent_path(path)
                    await self._load(path, segments(directory)[-1] or directory, source, found)
                return True
            if await self.source.exists(path):
                file_path = join_path(path, "SKILL.md")
                if await self.source.exists(file_path):
                    await self._load(file_path, segments(path)[-1] or path, source, found)
                    return True
        except LOAD_ERRORS:
            return False
        return False

    async def _discover_in(self, path: str, source: ContentSource, found: DiscoveredSkills) -> None:
        """Load each subdirectory of `path` holding a SKILL.md."""
        try:
            if not await self.source.exists(path):
                return
        except LOAD_ERRORS as err:
            log.warning('[WorkspaceSkills] Cannot access skills path "%s": %s', path, err)
            return
        try:
            entries = await self.source.readdir(path)
        except LOAD_ERRORS as err:
            log.error("[WorkspaceSkills] Failed to scan skills directory %s: %s", path, err)
            return
        for entry in entries:
            if entry.type != "directory":
                continue
            file_path = join_path(path, entry.name, "SKILL.md")
            try:
                if await self.source.exists(file_path):
                    await self._load(file_path, entry.name, source, found)
            except LOAD_ERRORS as err:
                _skipped(found, file_path, err)

    async def _load(self, file_path: str, directory: str, source: ContentSource, found: DiscoveredSkills) -> None:
        try:
            found.add(await self.parse(file_path, directory, source))
        except LOAD_ERRORS as err:
            _skipped(found, file_path, err)

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
        except LOAD_ERRORS:
            pass
        return files

    # --- staleness -----------------------------------------------------------------------------------------

    async def _changed(self, path: str, *, file_only: bool = False) -> bool:
        info = await self.source.stat(path)
        return bool((not file_only or info.type == "file") and info.modified_at.timestamp() > self.last_discovery)

    async def _dir_changed(self, directory: str) -> bool:
        info = await self.source.stat(directory)
        if info.modified_at.timestamp() > self.last_discovery:
            return True
        if info.type != "directory":
            return False
        if self._check_file_mtime:
            try:
                if await self._changed(join_path(directory, "SKILL.md"), file_only=True):
                    return True
            except LOAD_ERRORS:
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
            except LOAD_ERRORS:
                continue
        return False


def _skipped(found: DiscoveredSkills, file_path: str, err: Exception) -> None:
    found.errors.append(SkillLoadError(file_path, str(err)))
    log.error("[WorkspaceSkills] Failed to load skill from %s: %s", file_path, err)
