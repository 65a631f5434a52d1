"""The text of Mastra's `grep` tool: a summary line, ``---``, then ``path:line:column: text`` per match (with
``path:line- text`` context lines and ``--`` between hunks). Python's `re` stands in for JavaScript's RegExp."""

from __future__ import annotations

import posixpath
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from keel.workspace_providers.errors import FileNotFound, PermissionDenied, WorkspaceError
from keel.workspace_providers.file_tree import Listing, root_ignore_filter
from keel.workspace_providers.gitignore import IgnoreFilter
from keel.workspace_providers.globs import GlobMatcher, glob_base, glob_matcher, is_glob

if TYPE_CHECKING:  # imported by the first grep: loading an app with a workspace needs none
    import regex

MAX_PATTERN_LENGTH = 1000
MAX_LINE_LENGTH = 500
GLOBAL_CAP = 1000
SEARCH_SECONDS = 10.0
"""A grep gives up (saying so) after this long: a pattern that backtracks catastrophically cannot pin a thread."""

TEXT_EXTENSIONS = frozenset(
    ".md .txt .json .yaml .yml .js .mjs .ts .tsx .jsx .py .rb .go .rs .java .c .cpp .h .hpp .sh .bash .zsh .html "
    ".htm .css .xml .toml .ini .env .csv .sql .graphql .gql .vue .svg .mdx .scss .sass .less .svelte .php .swift "
    ".kt .kts .dart .lua .r .tf .tfvars .sas .log .jsonl".split()
)


def is_text_file(name: str) -> bool:
    """Whether Mastra treats `name` as text, by its extension."""
    stem = posixpath.basename(name)
    dot = stem.rfind(".")
    return dot > 0 and stem[dot:].lower() in TEXT_EXTENSIONS


class GrepSource(Protocol):
    """What grep reads, synchronously: it runs in a worker thread."""

    def scan(self, path: str) -> Listing: ...

    def gitignore(self) -> str | None: ...

    def kind(self, path: str) -> str:
        """``"file"`` or ``"directory"``; raises `FileNotFound` when there is nothing there."""
        ...

    def read_text(self, path: str) -> str: ...


_JS_CLASSES = {"d": "0-9", "w": "A-Za-z0-9_"}


def js_regex(pattern: str, *, case_sensitive: bool) -> regex.Pattern[str]:
    """Compile a JavaScript regex: named groups, ``\\k<n>``, ASCII ``\\d``/``\\w``, ``[^]`` and ``[]``."""
    import regex

    out, i, in_class = [], 0, False
    while i < len(pattern):
        char, rest = pattern[i], pattern[i:]
        if char == "\\" and i + 1 < len(pattern):
            esc = pattern[i + 1]
            name = re.match(r"\\k<(\w+)>", rest)
            if name and not in_class:
                out.append(f"(?P={name.group(1)})")
                i += len(name.group(0))
                continue
            if esc.lower() in _JS_CLASSES and (esc.islower() or not in_class):
                body = _JS_CLASSES[esc.lower()]
                out.append(body if in_class else f"[{'' if esc.islower() else '^'}{body}]")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
            out.append("\\" + char if char in "[&~|" or rest.startswith("--") else char)
        elif rest.startswith("[^]"):
            out.append(r"[\s\S]")
            i += 3
            continue
        elif rest.startswith("[]"):
            out.append("(?!)")
            i += 2
            continue
        elif char == "[":
            in_class = True
            out.append("[^" if rest.startswith("[^") else "[")
            i += 1 if rest.startswith("[^") else 0
        elif rest.startswith("(?<") and not rest.startswith(("(?<=", "(?<!")):
            out.append("(?P<")
            i += 3
            continue
        else:
            out.append(char)
        i += 1
    # `regex` (re's syntax, V0) rather than `re`: its searches take a timeout, so a catastrophic pattern stops.
    return regex.compile("".join(out), regex.V0 if case_sensitive else regex.V0 | regex.IGNORECASE)


def _message(err: re.error | regex.error, pattern: str, flags: str) -> str:
    msg = str(getattr(err, "msg", err))
    detail = msg[:1].upper() + msg[1:]
    return f"Invalid regular expression: /{pattern}/{flags}: {detail}"


@dataclass
class _Search:
    source: GrepSource
    regex: regex.Pattern[str]
    context: int
    max_count: int | None
    include_hidden: bool
    ignored: IgnoreFilter | None
    glob: GlobMatcher | None
    lines: list[str] = field(default_factory=list)
    files_with_matches: int = 0
    total: int = 0
    truncated: bool = False
    hunks_emitted: bool = False
    read_errors: int = 0
    deadline: float = field(default_factory=lambda: time.monotonic() + SEARCH_SECONDS)
    timed_out: bool = False

    def skip(self, name: str, full: str, is_dir: bool) -> bool:
        if (is_dir and name == ".git") or (not self.include_hidden and name.startswith(".")):
            return True
        relative = full.removeprefix("./")
        return self.ignored is not None and self.ignored(relative + "/" if is_dir else relative)

    def collect(self, directory: str) -> list[str]:
        """Text files under `directory`, depth first in listing order (symlinked directories not entered)."""
        try:
            listing = self.source.scan(directory)
        except WorkspaceError:
            self.read_errors += 1
            return []
        files: list[str] = []
        for entry, _ in listing:
            full = f"{directory}{entry.name}" if directory.endswith("/") else f"{directory}/{entry.name}"
            if self.skip(entry.name, full, entry.type == "directory"):
                continue
            if entry.type == "file":
                if (self.glob is None or self.glob(full)) and is_text_file(entry.name):
                    files.append(full)
            elif not entry.is_symlink:
                files.extend(self.collect(full))
        return files

    def search(self, path: str) -> None:
        try:
            content = self.source.read_text(path)
        except WorkspaceError:
            self.read_errors += 1
            return
        lines = content.split("\n")
        found: list[tuple[int, int]] = []
        for index, line in enumerate(lines):
            try:
                match = self.regex.search(line, timeout=max(0.001, self.deadline - time.monotonic()))
            except TimeoutError:
                self.timed_out = self.truncated = True
                break
            if match is None:
                continue
            found.append((index, match.start()))
            self.total += 1
            if self.max_count is not None and len(found) >= self.max_count:
                break
            if self.total >= GLOBAL_CAP:
                self.truncated = True
                break
        if found:
            self.files_with_matches += 1
            self.emit(path, found, lines)

    def emit(self, path: str, found: list[tuple[int, int]], lines: list[str]) -> None:
        def clip(text: str) -> str:
            return text[:MAX_LINE_LENGTH] + "..." if len(text) > MAX_LINE_LENGTH else text

        if self.context <= 0:
            self.lines.extend(f"{path}:{i + 1}:{col + 1}: {clip(lines[i])}" for i, col in found)
            return
        hunks: list[tuple[int, int, dict[int, int]]] = []
        for i, col in found:
            start, end = max(0, i - self.context), i + self.context
            if hunks and start <= hunks[-1][1] + 1:
                hunks[-1] = (hunks[-1][0], max(hunks[-1][1], end), {**hunks[-1][2], i: col})
            else:
                hunks.append((start, end, {i: col}))
        for start, end, cols in hunks:
            if self.hunks_emitted:
                self.lines.append("--")
            self.hunks_emitted = True
            for i in range(start, min(end, len(lines) - 1) + 1):
                at = cols.get(i)
                if at is None:
                    self.lines.append(f"{path}:{i + 1}- {lines[i]}")
                else:
                    self.lines.append(f"{path}:{i + 1}:{at + 1}: {clip(lines[i])}")


def grep(
    source: GrepSource,
    pattern: str,
    *,
    path: str = ".",
    context_lines: int = 0,
    max_count: int | None = None,
    case_sensitive: bool = True,
    include_hidden: bool = False,
) -> str:
    """Mastra's grep tool output (before any token limit); a bad pattern gives its ``Error: ...`` text."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"Error: Pattern too long ({len(pattern)} chars, max {MAX_PATTERN_LENGTH}). Use a shorter pattern."
    import regex

    try:
        compiled = js_regex(pattern, case_sensitive=case_sensitive)
    except (re.error, regex.error) as err:
        return f"Error: Invalid regex pattern: {_message(err, pattern, 'g' if case_sensitive else 'gi')}"
    glob = glob_matcher(path, dot=include_hidden) if is_glob(path) else None
    search_path = glob_base(path) if glob else path
    run = _Search(
        source,
        compiled,
        max(0, int(context_lines)),
        max_count,
        include_hidden,
        root_ignore_filter(source, search_path),
        glob,
    )
    skipped_extension, not_found = 0, False
    files: list[str] = []
    if not (search_path.rstrip("/") == ".git" or search_path.rstrip("/").endswith("/.git")):
        try:
            if source.kind(search_path) == "file":
                files = [search_path] if is_text_file(search_path) else []
                skipped_extension = 0 if files else 1
            else:
                files = run.collect(search_path)
        except FileNotFound:
            not_found = True
        except PermissionDenied:
            raise  # a path outside the workspace is refused, not searched around
        except WorkspaceError:
            run.read_errors += 1
    for file in files:
        if run.truncated:
            break
        run.search(file)
    return "\n".join([_summary(run, skipped_extension, not_found), "---", *run.lines])


def _summary(run: _Search, skipped_extension: int, not_found: bool) -> str:
    parts = [f"{run.total} match{'' if run.total == 1 else 'es'}"]
    parts.append(f"across {run.files_with_matches} file{'' if run.files_with_matches == 1 else 's'}")
    if run.timed_out:
        parts.append(f"(search stopped after {SEARCH_SECONDS:g} s: simplify the pattern)")
    elif run.truncated:
        parts.append(f"(truncated at {GLOBAL_CAP})")
    if skipped_extension:
        parts.append(
            f"({skipped_extension} file{'' if skipped_extension == 1 else 's'} skipped: unsupported extension)"
        )
    if not_found:
        parts.append("(target path not found: nothing searched)")
    if run.read_errors:
        parts.append(f"({run.read_errors} path{'' if run.read_errors == 1 else 's'} skipped: read error)")
    return " ".join(parts)
