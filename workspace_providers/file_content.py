"""What every filesystem does alike with a file's bytes, so each answers with Mastra's text: `decode` for
`read_file`'s encodings and `edit` for `edit_file`'s replacement and message. No I/O here."""

from __future__ import annotations

import base64

BINARY_EDIT = "Cannot edit binary files. Use the write file tool instead."
TEXT_NOT_FOUND = "The specified text was not found. Make sure you use the exact text from the file."


def decode(data: bytes, encoding: str | None) -> bytes | str:
    """The bytes, or with `encoding` (utf-8, utf8, base64, hex, binary, latin1) a string."""
    if encoding is None:
        return data
    if encoding.lower() in ("utf-8", "utf8"):
        return data.decode("utf-8", "replace")
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    if encoding == "hex":
        return data.hex()
    if encoding in ("binary", "latin1"):
        return data.decode("latin-1")
    raise ValueError(f"Unknown encoding: {encoding}")


def edit(data: bytes, path: str, old: str, new: str, *, replace_all: bool) -> tuple[str, bytes | None]:
    """Replace `old` (unique unless `replace_all`) in the file's bytes: Mastra's edit message, and the new bytes
    (None when nothing is to be written: a binary file, no match, an ambiguous match)."""
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        return BINARY_EDIT, None
    if "\0" in content:
        return BINARY_EDIT, None
    count = content.count(old) if old else 0
    if count == 0:
        return TEXT_NOT_FOUND, None
    if count > 1 and not replace_all:
        return (
            f"The specified text appears {count} times. Provide more surrounding context to make the match "
            "unique, or use replace_all to replace all occurrences."
        ), None
    ranges = _edited_lines(content, old, new, replace_all)
    result = content.replace(old, new, -1 if replace_all else 1)
    return f"Replaced {count} occurrence{'' if count == 1 else 's'} in {path}{ranges}", result.encode()


def _edited_lines(content: str, old: str, new: str, replace_all: bool) -> str:
    """Mastra's `` (lines 2)`` / `` (lines 1, 3-4)`` suffix: where each replacement lands."""
    ranges: list[str] = []
    position = content.find(old)
    while position != -1:
        start = content.count("\n", 0, position) + 1
        end_line = content.count("\n", 0, max(0, position + max(len(old), 1) - 1)) + 1
        end = start + max(new.count("\n") + 1, end_line - start + 1) - 1
        ranges.append(str(start) if end == start else f"{start}-{end}")
        if not replace_all:
            break
        position = content.find(old, position + len(old))
    return f" (lines {', '.join(ranges)})" if ranges else ""
