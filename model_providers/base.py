"""The model interface every provider implements, with no Temporal import.

Error tree::

    ModelError                      (non-retryable unless a subclass says otherwise)
     ├── ModelRetryableError        (429, 408, 409, 5xx, transport errors; carries `retry_after` seconds)
     └── ModelRequestError          (other 4xx: bad key, bad request, unknown model)
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from keel.protocol import FinishReason, MessageRecord, Usage


class ModelError(Exception):
    """A model call failed. Non-retryable unless it is a `ModelRetryableError`."""

    retryable = False

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ModelRetryableError(ModelError):
    retryable = True

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class ModelRequestError(ModelError):
    """The provider rejected the request (a 4xx other than 408/409/429): retrying cannot help."""


class ToolSpec(BaseModel):
    """A tool as the model sees it: name, description and a JSON schema for its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ModelRequest(BaseModel):
    instructions: str = ""
    messages: list[MessageRecord]
    tools: list[ToolSpec] = Field(default_factory=list)


class ModelToolCall(BaseModel):
    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class ModelResponse(BaseModel):
    text: str = ""
    tool_calls: list[ModelToolCall] = Field(default_factory=list)
    finish_reason: FinishReason = "stop"
    usage: Usage | None = None


OnDelta = Callable[[str], Awaitable[None]]


class ChatModel(abc.ABC):
    """A chat model. `model_id` is `provider/name`, e.g. `openai/gpt-4o-mini` or `scripted/demo`."""

    model_id: str

    @property
    def provider(self) -> str:
        return self.model_id.split("/", 1)[0]

    @abc.abstractmethod
    async def generate(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        """Run one model step. Text deltas go to `on_delta` as they arrive; the full response is returned."""
