"""`.gitignore` rules as Mastra applies them (the `ignore` package): the last matching rule wins, ``!`` re-includes,
a trailing ``/`` matches directories only, a slash elsewhere anchors to the root, matching ignores case, and
whatever is under an ignored directory is ignored. Paths are relative to the workspace root; directories end
with ``/``."""

from __future__ import annotations

import re
from collections.abc import Callable

IgnoreFilter = Callable[[str], bool]
"""True when a path (relative to the workspace root, ``dir/`` for a directory) is ignored."""


def _pattern_regex(glob: str) -> str:
    out, i = "", 0
    while i < len(glob):
        char = glob[i]
        if glob.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
            continue
        if glob.startswith("/**", i) and i + 3 == len(glob):
            out += "/.+"
            break
        if glob.startswith("**", i):
            out += ".*"
            i += 2
            continue
        if char == "\\" and i + 1 < len(glob):
            out += re.escape(glob[i + 1])
            i += 1
        elif char == "*":
            out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "[" and "]" in glob[i + 2 :]:
            end = glob.index("]", i + 2)
            body = glob[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out += "[" + body.replace("\\", "\\\\") + "]"
            i = end
        else:
            out += re.escape(char)
        i += 1
    return out


def _rule(line: str) -> tuple[re.Pattern[str], bool] | None:
    """One line as (regex over a path, negated), or None for a blank line or a comment."""
    text = re.sub(r"(?<!\\)\s+$", "", line)
    if not text or text.startswith("#"):
        return None
    negated = text.startswith("!")
    if negated or text.startswith(("\\!", "\\#")):
        text = text[1:]
    dir_only = text.endswith("/")
    text = text.rstrip("/")
    if not text:
        return None
    anchored = "/" in text
    body = _pattern_regex(text.lstrip("/"))
    regex = ("^" if anchored else "^(?:.*/)?") + body + ("/$" if dir_only else "/?$")
    return re.compile(regex, re.IGNORECASE | re.DOTALL), negated


def parse_gitignore(content: str) -> IgnoreFilter | None:
    """A filter for `content`'s rules; None when it has none."""
    rules = [rule for line in content.splitlines() if (rule := _rule(line))]
    if not rules:
        return None

    def decide(path: str) -> bool:
        ignored = False
        for regex, negated in rules:
            if negated == ignored and regex.match(path):
                ignored = not negated
        return ignored

    def ignores(path: str) -> bool:
        path = path[2:] if path.startswith("./") else path.lstrip("/")
        if not path:
            return False
        parts = path.rstrip("/").split("/")
        parents = ("/".join(parts[: i + 1]) + "/" for i in range(len(parts) - 1))
        return any(decide(parent) for parent in parents) or decide(path)

    return ignores
