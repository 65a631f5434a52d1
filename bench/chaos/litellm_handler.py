"""The chaos run's model, served by a real LiteLLM proxy (`litellm --config`, this module as its custom provider):
it answers `chat <tag>` with `echo <tag>`, streamed a few characters at a time, and by a seeded roll on the message
and how often this proxy has seen it, fails the way model servers do: a 429 before the answer, a 500 in the middle
of the stream, or a slow stream (a second between chunks). About two calls in five fail; the retries answer.

The driver copies this file beside the proxy's config as `handler.py` (LiteLLM loads a custom handler from the
config's folder) and starts the proxy there (`bench/chaos/driver.py`, `ModelProxy`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from litellm.exceptions import InternalServerError, RateLimitError
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import GenericStreamingChunk

CALLS_FILE = Path("calls.json")
"""How often the proxy has seen each message, kept in its folder (its working directory) across its own deaths:
a proxy started again after `model-kill` goes on with the next roll instead of failing the same calls again.
Written whole or not at all (`_save`): a proxy killed mid-write once left it empty, and every later start of the
proxy failed to load this module, so the `chat` runs waited for a model that never came back."""
CHUNK = 4


def _load() -> dict[str, int]:
    with contextlib.suppress(FileNotFoundError, ValueError, TypeError):
        calls = json.loads(CALLS_FILE.read_text())
        if isinstance(calls, dict):
            return {str(k): int(v) for k, v in calls.items()}
    return {}


def _save(calls: dict[str, int]) -> None:
    part = CALLS_FILE.with_name(f"{CALLS_FILE.name}.{os.getpid()}.part")
    part.write_text(json.dumps(calls))
    os.replace(part, CALLS_FILE)


CALLS = _load()


def _chunk(text: str, finished: bool = False) -> GenericStreamingChunk:
    return GenericStreamingChunk(
        text=text, is_finished=finished, finish_reason="stop" if finished else "", usage=None, index=0,
        tool_use=None,
    )  # fmt: skip


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


class ChaosModel(CustomLLM):
    async def astreaming(self, *args: Any, **kwargs: Any) -> AsyncIterator[GenericStreamingChunk]:  # type: ignore[override]
        model = str(kwargs.get("model", ""))
        said = _last_user_text(kwargs.get("messages") or [])
        CALLS[said] = CALLS.get(said, 0) + 1
        _save(CALLS)
        roll = zlib.crc32(f"{said}/{CALLS[said]}".encode()) % 10
        if roll in (0, 1):
            raise RateLimitError(message="slow down", llm_provider="keel-chaos", model=model)
        answer = f"echo {said.split()[-1]}"
        pieces = [answer[i : i + CHUNK] for i in range(0, len(answer), CHUNK)]
        for n, piece in enumerate(pieces):
            if roll in (2, 3) and n == 1:
                raise InternalServerError(message="upstream broke", llm_provider="keel-chaos", model=model)
            if roll == 4:
                await asyncio.sleep(1.0)
            yield _chunk(piece, finished=n == len(pieces) - 1)

    def streaming(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


chaos_model = ChaosModel()
