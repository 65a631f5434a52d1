"""An app for indexing tests: workspace `big` over `$KEEL_DATA_DIR/tree`, BM25 plus vectors in PostgreSQL
(`$KEEL_TEST_PG_DSN`, index `$KEEL_TEST_INDEX`), embedded by `CountingEmbedder`; workspace `plain` without
search."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

from keel.app import App
from keel.workspace_providers import LocalFilesystem, Workspace
from keel.workspace_providers.pgvector import PgVectorStore

DIMENSION = 8


class CountingEmbedder:
    """A cheap deterministic batch embedder (a hash of each text) that appends `pid count` to
    `$KEEL_DATA_DIR/embedded.log` for every call, before embedding: a test counts the texts each worker
    process embedded. With `$KEEL_TEST_EMBED_STALL_AFTER=N` a call made once N texts were embedded never
    returns (the worker is mid-batch when the test kills it)."""

    batch = True
    max_batch_size = 256

    def __init__(self, log: Path) -> None:
        self.log = log
        self.embedded = 0
        self.stall_after = int(os.environ.get("KEEL_TEST_EMBED_STALL_AFTER", "0")) or None

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()} {len(texts)}\n")
        if self.stall_after is not None and self.embedded >= self.stall_after:
            await asyncio.Event().wait()
        self.embedded += len(texts)
        return [_vector(t) for t in texts]


def _vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [b / 255 + 0.01 for b in digest[:DIMENSION]]


def make_app(data: Path, dsn: str, index: str) -> App:
    big = Workspace(
        id="big",
        filesystem=LocalFilesystem(data / "tree"),
        bm25=True,
        vector_store=PgVectorStore(dsn),
        embedder=CountingEmbedder(data / "embedded.log"),
        search_index_name=index,
    )
    plain = Workspace(id="plain", filesystem=LocalFilesystem(data / "plain"))
    return App(workspaces={"big": big, "plain": plain})


app = make_app(
    Path(os.environ.get("KEEL_DATA_DIR", ".keel")),
    os.environ.get("KEEL_TEST_PG_DSN", "postgresql://127.0.0.1/keel"),
    os.environ.get("KEEL_TEST_INDEX", "big_search"),
)
