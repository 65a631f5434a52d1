"""Glob patterns as Mastra matches them with picomatch: `*`, `?`, `[...]`, `{a,b}` and `**`, forward slashes,
dotfiles only with `dot`, a leading ``!`` negating, leading ``./`` or ``/`` ignored on both sides."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence

GlobMatcher = Callable[[str], bool]

_GLOB_CHARS = re.compile(r"[*?{}\[\]]")


def is_glob(path: str) -> bool:
    """Whether `path` contains a glob metacharacter."""
    return _GLOB_CHARS.search(path) is not None


def glob_base(pattern: str) -> str:
    """The static directory before the first metacharacter: ``docs/**/*.md`` -> ``docs``, ``**/*.md`` -> ``.``."""
    meta = _GLOB_CHARS.search(pattern)
    if meta is None:
        return pattern
    slash = pattern.rfind("/", 0, meta.start())
    return "." if slash <= 0 else pattern[:slash]


def _strip(path: str) -> str:
    return path[2:] if path.startswith("./") else path[1:] if path.startswith("/") else path


def _expand_braces(pattern: str) -> list[str]:
    """``a{b,c{d,e}}`` -> ``abcd``... : every alternative of the first top-level brace group, recursively."""
    depth, start, commas, i = 0, -1, list[int](), 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 1
        elif char == "{":
            depth += 1
            if depth == 1:
                start, commas = i, []
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0 and commas:
                head, tail = pattern[:start], pattern[i + 1 :]
                cuts = [start, *commas, i]
                options = [pattern[a + 1 : b] for a, b in itertools.pairwise(cuts)]
                return [x for option in options for x in _expand_braces(head + option + tail)]
        elif char == "," and depth == 1:
            commas.append(i)
        i += 1
    return [pattern]


def _segment(segment: str, dot: bool) -> str:
    out = "" if dot or segment.startswith(".") else r"(?!\.)"
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "\\" and i + 1 < len(segment):
            out += re.escape(segment[i + 1])
            i += 1
        elif char == "*":
            out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "[" and "]" in segment[i + 2 :]:
            end = segment.index("]", i + 2)
            body = segment[i + 1 : end]
            negated = body[:1] in ("!", "^")
            body = body[1:] if negated else body
            out += "[" + ("^/" if negated else "") + body.replace("\\", "\\\\").replace("[", r"\[") + "]"
            i = end
        else:
            out += re.escape(char)
        i += 1
    return out


def _regex(pattern: str, dot: bool) -> str:
    any_segment = r"(?!\.\.?(?:/|$))[^/]+" if dot else r"(?!\.)[^/]+"
    segments = pattern.split("/")
    out = ""
    for i, segment in enumerate(segments):
        first, last = i == 0, i == len(segments) - 1
        if segment == "**":
            if first and last:
                out += f"(?:{any_segment}(?:/{any_segment})*)?"
            elif last:
                out += f"(?:/{any_segment})*"
            else:
                out += ("" if first else "/") + f"(?:{any_segment}/)*"
            continue
        if not first and segments[i - 1] != "**":
            out += "/"
        out += _segment(segment, dot)
    return out


def glob_matcher(patterns: str | Sequence[str], *, dot: bool = False) -> GlobMatcher:
    """A matcher of paths against any of `patterns` (a ``!pattern`` excludes what it matches)."""
    include: list[str] = []
    exclude: list[str] = []
    for raw in [patterns] if isinstance(patterns, str) else patterns:
        negated = raw.startswith("!") and not raw.startswith("!(")
        target = exclude if negated else include
        target.extend(_regex(p, dot) for p in _expand_braces(_strip(raw[1:] if negated else raw)))
    yes = re.compile("|".join(f"(?:{r})" for r in include)) if include else None
    no = re.compile("|".join(f"(?:{r})" for r in exclude)) if exclude else None

    def matches(path: str) -> bool:
        path = _strip(path)
        if no is not None and no.fullmatch(path):
            return False
        return yes.fullmatch(path) is not None if yes is not None else no is not None

    return matches
