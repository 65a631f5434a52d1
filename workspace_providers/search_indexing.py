"""Indexing files for workspace search, as Mastra's `autoIndexPaths` does it: each pattern is a file, a directory
(every file under it, 10 levels deep, symlinked directories not entered) or a glob (files and directories it
matches, walked from its static base); a file is one document with its path as id, or, past 4,000 characters,
chunks ``<path>#chunk-<i>`` with `sourceFile` metadata and their first line. Files that are not UTF-8 text are
skipped. Re-indexing a file replaces its old document and chunks; a file whose content hash is the one the index
recorded (in Keel's storage, when the engine has a store) is skipped: not indexed again, not embedded again.
`forget_missing` removes the files indexed before that an indexing no longer finds.

`index_files` reports progress after each batch and `index_batches` yields each batch once indexed, so a long
indexing run (the `keel.index_workspace` activity) can heartbeat it and resume after the last file done.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from keel.workspace_providers.bm25 import split_into_chunks
from keel.workspace_providers.globs import glob_base, glob_matcher, is_glob
from keel.workspace_providers.search import IndexedFile, SearchDocument, SearchEngine

MAX_DEPTH = 10
READ_CONCURRENCY = 8
BATCH_FILES = 64

Progress = Callable[[int, int, str], Awaitable[None] | None]


async def _walk(fs: Any, directory: str, depth: int = 0) -> list[tuple[str, str]]:
    """(path, type) of everything under `directory`, depth first in listing order."""
    if depth >= MAX_DEPTH:
        return []
    try:
        entries = await fs.readdir(directory)
    except Exception:
        return []
    found: list[tuple[str, str]] = []
    for entry in entries:
        if entry.type == "directory" and entry.is_symlink:
            continue
        path = entry.name if directory in (".", "") else f"{directory}/{entry.name}"
        found.append((path, entry.type))
        if entry.type == "directory":
            found += await _walk(fs, path, depth + 1)
    return found


async def files_to_index(fs: Any, patterns: Sequence[str]) -> list[str]:
    """The files `patterns` name, each once, in Mastra's order."""
    files: dict[str, None] = {}
    for raw in patterns:
        pattern = raw[:-1] if len(raw) > 1 and raw.endswith("/") else raw
        if is_glob(pattern):
            matcher = glob_matcher(pattern)
            matched = [(p, t) for p, t in await _walk(fs, glob_base(pattern)) if matcher(p)]
        else:
            try:
                await fs.readdir(pattern)
                matched = [(pattern, "directory")]
            except Exception:
                matched = [(pattern, "file")]
        roots: list[str] = []
        for path, kind in matched:
            if kind == "file":
                files.setdefault(path, None)
            elif not any(path == r or path.startswith(f"{r}/") for r in roots):
                roots.append(path)
        for root in roots:
            for path, kind in await _walk(fs, root):
                if kind == "file":
                    files.setdefault(path, None)
    return list(files)


async def read_text(fs: Any, path: str) -> str | None:
    """The file's text, or None when it cannot be read as text."""
    try:
        content = await fs.read_file(path, encoding="utf-8")
    except Exception:
        return None
    if not isinstance(content, str) or "\x00" in content:
        return None  # not text (a NUL byte: a binary file, whose decoded bytes would only be noise)
    return content


def documents_from(path: str, content: str) -> list[SearchDocument]:
    """A file's documents: itself, or its chunks past 4,000 characters."""
    chunks = split_into_chunks(content)
    if len(chunks) == 1:
        return [SearchDocument(path, content)]
    return [
        SearchDocument(f"{path}#chunk-{i}", c.content, {"sourceFile": path}, c.start_line) for i, c in enumerate(chunks)
    ]


async def documents_of(fs: Any, path: str) -> list[SearchDocument] | None:
    """The file's documents, or None when it cannot be read as text."""
    content = await read_text(fs, path)
    return None if content is None else documents_from(path, content)


@dataclass(frozen=True)
class IndexedBatch:
    """One batch `index_batches` finished: its files, those indexed (readable as text), their documents, and
    how many of those were indexed already with the same content (skipped: not indexed nor embedded again)."""

    files: list[str]
    indexed: list[str]
    documents: int
    unchanged: int = 0

    @property
    def last(self) -> str:
        return self.files[-1]


async def index_batches(
    engine: SearchEngine,
    fs: Any,
    files: Sequence[str],
    *,
    vectors: bool = True,
    batch_files: int = BATCH_FILES,
    keep_going: bool = False,
) -> AsyncIterator[IndexedBatch]:
    """Index `files` `batch_files` at a time, yielding each batch once it is indexed (its vectors upserted, its
    documents and hashes written in one write): what a caller records as done after a batch stays done. A file
    whose content hash is the one recorded is skipped (only its vectors are added, when an in-memory vector
    store of an earlier process lost them). `vectors=False` re-adds the BM25 documents alone (their vectors are
    in a persistent store already) and leaves the vector store untouched. `keep_going`: a batch whose vectors
    fail (the embedder or the store down) is logged and keeps its BM25 documents."""
    limit = asyncio.Semaphore(READ_CONCURRENCY)

    async def read(path: str) -> str | None:
        async with limit:
            return await read_text(fs, path)

    for start in range(0, len(files), batch_files):
        batch = list(files[start : start + batch_files])
        texts = await asyncio.gather(*(read(p) for p in batch))
        found = [(path, text) for path, text in zip(batch, texts, strict=True) if text is not None]
        recorded = await engine.file_hashes([path for path, _ in found]) if found else {}
        changed: list[IndexedFile] = []
        unchanged: list[IndexedFile] = []
        for path, text in found:
            digest = engine.content_hash(text)
            indexed = IndexedFile(path, digest, documents_from(path, text))
            (unchanged if recorded.get(path) == digest else changed).append(indexed)
        await engine.replace_files(changed, vectors=vectors, keep_going=keep_going)
        if vectors:
            await engine.add_vectors([f for f in unchanged if engine.vectors_missing(f.path)], keep_going=keep_going)
        yield IndexedBatch(
            batch, [path for path, _ in found], sum(len(f.documents) for f in changed + unchanged), len(unchanged)
        )


async def index_files(
    engine: SearchEngine, fs: Any, files: Sequence[str], *, progress: Progress | None = None
) -> list[str]:
    """Index `files` in batches; returns those indexed (readable as text). `progress(done, total, last)` runs
    after each batch."""
    indexed: list[str] = []
    done = 0
    async for batch in index_batches(engine, fs, files):
        indexed += batch.indexed
        done += len(batch.files)
        if progress is not None:
            result = progress(done, len(files), batch.last)
            if result is not None:
                await result
    return indexed


def covered(path: str, patterns: Sequence[str]) -> bool:
    """Whether indexing `patterns` would list `path` if it existed: a pattern naming it, a directory above
    it, or a glob matching it or a directory above it."""
    for raw in patterns:
        pattern = raw[:-1] if len(raw) > 1 and raw.endswith("/") else raw
        if pattern in (".", ""):
            return True
        if is_glob(pattern):
            matcher = glob_matcher(pattern)
            parts = path.split("/")
            if any(matcher("/".join(parts[:i])) for i in range(1, len(parts) + 1)):
                return True
        elif path == pattern or path.startswith(f"{pattern}/"):
            return True
    return False


async def forget_missing(
    engine: SearchEngine, found: Collection[str], patterns: Sequence[str] | None = None
) -> list[str]:
    """Remove from the index (and the vector store) the files indexed before that are not among `found` (of
    those `patterns` cover, or all): files deleted, or no longer named. Returns them, sorted."""
    listed = set(found)
    gone = sorted(
        path
        for path in await engine.file_hashes()
        if path not in listed and (patterns is None or covered(path, patterns))
    )
    await engine.remove_sources(gone)
    return gone
