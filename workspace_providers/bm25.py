"""BM25 keyword search as Mastra's Workspace does it: its tokenizer, its line chunks, its scores.

Mastra scores with idf = ln((N - df + 0.5) / (df + 0.5) + 1) (never negative, unlike Okapi's) and the usual
term weight tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen)), k1 1.5 and b 0.75 by default. The index is
an inverted one, updated per document: a query reads the postings of its terms only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

STOPWORDS = frozenset(
    "a an and are as at be by for from has he in is it its of on or that the to was were will with".split()
)
MAX_CHUNK_CHARS = 4000
OVERLAP_LINES = 3
_PUNCTUATION = re.compile(r"[^\w\s]")  # \w: letters, digits and `_`, as Mastra's [^\p{L}\p{N}_\s]


@dataclass(frozen=True)
class TokenizeOptions:
    lowercase: bool = True
    remove_punctuation: bool = True
    min_length: int = 2
    stopwords: frozenset[str] = STOPWORDS


DEFAULT_TOKENIZE = TokenizeOptions()


def tokenize(text: str, options: TokenizeOptions = DEFAULT_TOKENIZE) -> list[str]:
    """Lower-cased, punctuation turned to spaces, split on whitespace; short tokens and stop words dropped."""
    if options.lowercase:
        text = text.lower()
    if options.remove_punctuation:
        text = _PUNCTUATION.sub(" ", text)
    return [t for t in text.split() if len(t) >= options.min_length and t not in options.stopwords]


@dataclass(frozen=True)
class Chunk:
    content: str
    start_line: int
    """1-based line of the file the chunk starts at."""


def split_into_chunks(
    text: str, *, max_chunk_chars: int = MAX_CHUNK_CHARS, overlap_lines: int = OVERLAP_LINES
) -> list[Chunk]:
    """Whole lines up to `max_chunk_chars` per chunk, each sharing `overlap_lines` lines with the one before; a
    line longer than the budget is cut every `max_chunk_chars` characters. A text that fits is one chunk."""
    max_chars, overlap = max(1, max_chunk_chars), max(0, overlap_lines)
    if len(text) <= max_chars:
        return [Chunk(text, 1)]
    lines = text.split("\n")
    chunks: list[Chunk] = []
    start = 0
    while start < len(lines):
        end, count = start, 0
        while end < len(lines):
            size = len(lines[end]) + (1 if end > start else 0)
            if count + size > max_chars and end > start:
                break
            count += size
            end += 1
        content = "\n".join(lines[start:end])
        if len(content) <= max_chars:
            chunks.append(Chunk(content, start + 1))
        else:
            chunks.extend(Chunk(content[i : i + max_chars], start + 1) for i in range(0, len(content), max_chars))
        following = end - overlap
        start = end if following <= start else following
    return chunks


def find_line_range(
    content: str, query_terms: list[str], options: TokenizeOptions = DEFAULT_TOKENIZE
) -> tuple[int, int] | None:
    """The 1-based lines of `content` from the first to the last holding a query term (None if none does)."""
    terms = set(query_terms)
    found = [i + 1 for i, line in enumerate(content.split("\n")) if terms.intersection(tokenize(line, options))]
    return (found[0], found[-1]) if found else None


@dataclass(frozen=True)
class BM25Hit:
    id: str
    content: str
    score: float
    metadata: dict[str, Any] | None


@dataclass
class _Doc:
    content: str
    frequencies: dict[str, int]
    length: int
    metadata: dict[str, Any] | None


@dataclass
class BM25Index:
    """Documents by id, searchable by keywords. Re-adding an id replaces the document."""

    k1: float = 1.5
    b: float = 0.75
    tokenize_options: TokenizeOptions = DEFAULT_TOKENIZE
    _docs: dict[str, _Doc] = field(default_factory=dict, repr=False)
    _postings: dict[str, dict[str, None]] = field(default_factory=dict, repr=False)  # term -> ids, in add order
    _total_length: int = 0

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._docs

    def add(self, doc_id: str, content: str, metadata: dict[str, Any] | None = None) -> None:
        self.remove(doc_id)
        tokens = tokenize(content, self.tokenize_options)
        frequencies: dict[str, int] = {}
        for token in tokens:
            frequencies[token] = frequencies.get(token, 0) + 1
        self._docs[doc_id] = _Doc(content, frequencies, len(tokens), metadata)
        self._total_length += len(tokens)
        for term in frequencies:
            self._postings.setdefault(term, {})[doc_id] = None

    def remove(self, doc_id: str) -> bool:
        doc = self._docs.pop(doc_id, None)
        if doc is None:
            return False
        self._total_length -= doc.length
        for term in doc.frequencies:
            ids = self._postings[term]
            del ids[doc_id]
            if not ids:
                del self._postings[term]
        return True

    def search(self, query: str, top_k: int = 10, min_score: float = 0.0) -> list[BM25Hit]:
        """The best `top_k` documents scoring at least `min_score`, best first (ties: first scored first)."""
        terms = tokenize(query, self.tokenize_options)
        count = len(self._docs)
        if not terms or count == 0:
            return []
        average = self._total_length / count
        scores: dict[str, float] = {}
        for term in terms:  # a repeated query term counts again, as in Mastra
            ids = self._postings.get(term)
            if not ids:
                continue
            idf = math.log((count - len(ids) + 0.5) / (len(ids) + 0.5) + 1)
            for doc_id in ids:
                doc = self._docs[doc_id]
                tf = doc.frequencies[term]
                norm = 1 - self.b + self.b * (doc.length / average) if average else 1 - self.b
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * (tf * (self.k1 + 1) / (tf + self.k1 * norm))
        ranked = sorted((item for item in scores.items() if item[1] >= min_score), key=lambda item: -item[1])
        return [
            BM25Hit(doc_id, self._docs[doc_id].content, score, self._docs[doc_id].metadata)
            for doc_id, score in ranked[:top_k]
        ]
