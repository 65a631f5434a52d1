"""Messages and their parts (AI-SDK style), token usage and finish reasons."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import Field

from keel.protocol.wire import WireModel

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "tool-calls", "length", "content-filter", "error", "other"]


class TextPart(WireModel):
    type: Literal["text"] = "text"
    text: str


class ToolCallPart(WireModel):
    type: Literal["tool-call"] = "tool-call"
    tool_call_id: str
    tool_name: str
    args: dict[str, Any] = Field(default_factory=dict)


class ToolResultPart(WireModel):
    type: Literal["tool-result"] = "tool-result"
    tool_call_id: str
    tool_name: str
    result: Any = None
    is_error: bool = False
    denied: bool = False
    provider_metadata: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)
    """As on Mastra's parts; `{"keel": {...}}` holds what a workspace tool reported to its run (a file read, a
    record cleared, a process started), so a retried step that reuses the stored result keeps it too."""


Part = Annotated[TextPart | ToolCallPart | ToolResultPart, Field(discriminator="type")]
Content = str | list[Part]
"""A message's content: a string, or a list of parts."""


class InputMessage(WireModel):
    """A message as a caller sends it: `{"role", "content"}` with content a string or a list of parts."""

    role: Role
    content: Content


class MessageRecord(WireModel):
    """A message with its stable id, as a run persists it and a model reads it."""

    id: str
    role: Role
    content: Content


class Usage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def plus(self, other: Usage | None) -> Usage:
        if other is None:
            return self
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


def args_digest(args: dict[str, Any]) -> str:
    """A short digest of a tool call's arguments (SHA-256 of their canonical JSON, 16 hex digits): an approval
    that carries it decides only a call with exactly these arguments."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def with_answered_calls(messages: list[MessageRecord]) -> list[MessageRecord]:
    """The conversation as a model is shown it: a tool call without a result (its run was canceled, aborted or
    terminated while the call waited) and a result without its call (a transcript cut short) are left out, with
    a message they leave empty. Mastra leaves unanswered calls out of the prompt too, and OpenAI's API refuses
    them. The thread keeps them as they are.

    A result answers the latest call of its id before it that none has answered: scripted models, imported
    threads and any model server that does not make ids unique use an id again across runs."""
    waiting: dict[str, int] = {}  # a call's id -> its part (by identity) while no result has answered it
    dropped: set[int] = set()
    for message in messages:
        if isinstance(message.content, list):
            for part in message.content:
                if isinstance(part, ToolCallPart):
                    if part.tool_call_id in waiting:  # the id used again: the earlier call was never answered
                        dropped.add(waiting[part.tool_call_id])
                    waiting[part.tool_call_id] = id(part)
                elif isinstance(part, ToolResultPart) and waiting.pop(part.tool_call_id, None) is None:
                    dropped.add(id(part))  # no call of its id before it
    dropped.update(waiting.values())
    if not dropped:
        return messages
    shown: list[MessageRecord] = []
    for message in messages:
        if isinstance(message.content, str):
            shown.append(message)
            continue
        parts = [p for p in message.content if id(p) not in dropped]
        if len(parts) == len(message.content):
            shown.append(message)
        elif parts:
            shown.append(message.model_copy(update={"content": parts}))
    return shown
