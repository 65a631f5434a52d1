"""The vector stores of the HTTP API tests (tests/http_api/test_vectors.py): `docs`, an in-memory store the app
registers by name (as `new Mastra({vectors: {docs}})`), and the workspace `api-vectors`, whose vector search keeps
its vectors in an in-memory store of its own, which the app lists under the workspace's id."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from keel.workspace_providers import InMemoryVectorStore, LocalFilesystem, VectorStore, Workspace

VECTORS: dict[str, VectorStore] = {"docs": InMemoryVectorStore()}


async def letters(text: str) -> list[float]:
    """A tiny deterministic embedder: the letter counts a-z (`a` nudged, so no text embeds to zero)."""
    return [float(text.lower().count(c)) + (0.01 if c == "a" else 0.0) for c in "abcdefghijklmnopqrstuvwxyz"]


VECTORS_DIR = Path(tempfile.gettempdir()) / f"keel-tests-api-vectors-{os.getpid()}"
VECTORS_DIR.mkdir(exist_ok=True)

vector_workspace = Workspace(
    id="api-vectors",
    name="API vectors",
    filesystem=LocalFilesystem(VECTORS_DIR),
    vector_store=InMemoryVectorStore(),
    embedder=letters,
)
WORKSPACES = {vector_workspace.id: vector_workspace}
