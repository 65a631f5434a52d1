"""Chat model providers: the `ChatModel` interface, an OpenAI-compatible provider and a scripted model.

`OpenAIChatModel` is imported on first use: it brings httpx (~60 ms), which an app on scripted models, or a
command that only loads the app (`keel counts`), does not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from keel.model_providers.base import (
    ChatModel,
    ModelError,
    ModelRequest,
    ModelRequestError,
    ModelResponse,
    ModelRetryableError,
    ModelToolCall,
    OnDelta,
    ToolSpec,
)
from keel.model_providers.scripted import (
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
    user_texts_since_last_answer,
)

__all__ = [
    "ChatModel",
    "ModelError",
    "ModelRequest",
    "ModelRequestError",
    "ModelResponse",
    "ModelRetryableError",
    "ModelToolCall",
    "OnDelta",
    "OpenAIChatModel",
    "ScriptedModel",
    "ToolSpec",
    "last_user_text",
    "tool_results_since_last_user",
    "user_texts_since_last_answer",
]

if TYPE_CHECKING:
    from keel.model_providers.openai_compat import OpenAIChatModel


def __getattr__(name: str) -> Any:
    if name == "OpenAIChatModel":
        from keel.model_providers.openai_compat import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(f"module 'keel.model_providers' has no attribute {name!r}")
