"""The text of Mastra's `list_files` tool: a tab-indented tree (directories first, then by name) and a summary line,
``N directories, M files`` with `` (truncated at depth D)`` when `max_depth` cut the walk short."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from keel.workspace_providers.gitignore import IgnoreFilter, parse_gitignore
from keel.workspace_providers.globs import GlobMatcher, glob_matcher
from keel.workspace_providers.types import FileEntry

Listing = list[tuple[FileEntry, str | None]]
"""A directory's entries, each with its symlink's target (None when not a symlink)."""


class TreeSource(Protocol):
    """What the walk reads, synchronously: it runs in a worker thread."""

    def scan(self, path: str) -> Listing:
        """The entries of the directory `path`; raises the workspace's errors."""
        ...

    def gitignore(self) -> str | None:
        """The workspace root's `.gitignore`, or None."""
        ...


@dataclass(frozen=True)
class TreeOptions:
    max_depth: int = 2
    show_hidden: bool = False
    dirs_only: bool = False
    exclude: str | None = None
    extension: str | None = None
    pattern: str | Sequence[str] | None = None
    respect_gitignore: bool = True


def _is_root(path: str) -> bool:
    return path in ("/", "", ".")


def join_path(base: str, name: str) -> str:
    """`name` under the workspace path `base` (``.`` and ``./`` join to a bare name)."""
    if base in ("", ".", "./"):
        return name
    return f"/{name}" if base == "/" else f"{base}/{name}"


def relative_path(root: str, current: str, name: str) -> str:
    """`name` in directory `current`, relative to the listed `root` (as Mastra's tree formatter writes it)."""
    if current == root or (_is_root(current) and _is_root(root)):
        entry = name
    else:
        entry = f"{'' if current == '/' else current}/{name}"
    if _is_root(root):
        cleaned = entry[2:] if entry.startswith("./") else entry
        return cleaned[1:] if cleaned.startswith("/") else cleaned
    relative = entry[len(root) + 1 :] if entry.startswith(root + "/") else entry
    return relative or entry


def _is_git(path: str) -> bool:
    path = path.rstrip("/")
    return path == ".git" or path.endswith("/.git")


def root_ignore_filter(source: TreeSource, path: str) -> IgnoreFilter | None:
    """The workspace's `.gitignore` filter, or None when there is none or `path` itself is ignored."""
    content = source.gitignore()
    ignored = parse_gitignore(content) if content and content.strip() else None
    normalized = path.removeprefix("./").removeprefix("/").removesuffix("/")
    return None if ignored is None or (normalized and ignored(normalized + "/")) else ignored


class _Tree:
    def __init__(self, source: TreeSource, root: str, options: TreeOptions) -> None:
        self.source, self.root, self.o = source, root, options
        self.ignored = root_ignore_filter(source, root) if options.respect_gitignore else None
        patterns = [options.pattern] if isinstance(options.pattern, str) else options.pattern
        self.glob: GlobMatcher | None = glob_matcher(patterns, dot=options.show_hidden) if patterns else None
        self.excludes = [p.strip() for p in options.exclude.split("|") if p.strip()] if options.exclude else []
        self.lines, self.dirs, self.files, self.truncated = ["."], 0, 0, False

    def keep(self, current: str, entry: FileEntry) -> bool:
        """The filters that apply to directories too (before descending)."""
        if entry.type == "directory" and entry.name == ".git":
            return False
        if not self.o.show_hidden and entry.name.startswith("."):
            return False
        if any(p in entry.name for p in self.excludes):
            return False
        if self.ignored is not None:
            relative = relative_path("", current, entry.name)
            return not self.ignored(relative + "/" if entry.type == "directory" else relative)
        return True

    def show(self, current: str, entry: FileEntry) -> bool:
        if entry.type == "directory":
            return True
        if self.o.dirs_only:
            return False
        if self.o.extension:
            ext = self.o.extension if self.o.extension.startswith(".") else f".{self.o.extension}"
            if not entry.name.endswith(ext):
                return False
        return self.glob is None or self.glob(relative_path(self.root, current, entry.name))

    def build(self, current: str, depth: int) -> None:
        if _is_git(current):
            return
        if depth >= self.o.max_depth:
            self.truncated = True
            return
        try:
            listing = self.source.scan(current)
        except Exception:
            if depth == 0:
                raise
            return
        shown = [(e, t) for e, t in listing if self.keep(current, e) and self.show(current, e)]
        shown.sort(key=lambda et: (et[0].type != "directory", et[0].name))
        for entry, link in shown:
            self.lines.append("\t" * depth + (f"{entry.name} -> {link}" if entry.is_symlink and link else entry.name))
            if entry.type == "directory":
                self.dirs += 1
                if not entry.is_symlink:
                    self.build(join_path(current, entry.name), depth + 1)
            else:
                self.files += 1

    def text(self) -> str:
        dirs = "1 directory" if self.dirs == 1 else f"{self.dirs} directories"
        files = "1 file" if self.files == 1 else f"{self.files} files"
        cut = f" (truncated at depth {self.o.max_depth})" if self.truncated else ""
        return "\n".join(self.lines) + f"\n\n{dirs}, {files}{cut}"


def format_tree(source: TreeSource, path: str, options: TreeOptions) -> str:
    """Mastra's list_files output for the directory `path` (before any token limit)."""
    tree = _Tree(source, path, options)
    tree.build(path, 0)
    return tree.text()
