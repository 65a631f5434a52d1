"""Chat model providers: the `ChatModel` interface, an OpenAI-compatible provider and a scripted model."""

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
from keel.model_providers.openai_compat import OpenAIChatModel
from keel.model_providers.scripted import ScriptedModel, last_user_text, tool_results_since_last_user

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
]
