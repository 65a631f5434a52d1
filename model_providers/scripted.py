"""A deterministic model for demos and tests: a Python function decides each response.

The script receives the `ModelRequest` and returns a `ModelResponse` (or an awaitable of one); the model
streams the response's text to `on_delta` in fixed-size chunks, like a real provider would. A script may
raise `ModelRetryableError` or `ModelRequestError` to simulate provider failures.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from keel.model_providers.base import ChatModel, ModelRequest, ModelResponse, OnDelta
from keel.protocol import MessageRecord, TextPart, ToolCallPart, ToolResultPart, Usage

Script = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]


class ScriptedModel(ChatModel):
    """A chat model whose answers come from `script`.

    Args:
        script: Called with each request; returns the response (sync or async).
        name: The model name; `model_id` is `scripted/<name>`.
        chunk_size: Characters per text delta handed to `on_delta`.
        delay: Seconds to sleep before each delta, to make streaming visible in demos.

    Raises:
        ValueError: `chunk_size` is below 1 or `delay` is negative.
    """

    def __init__(self, script: Script, *, name: str = "scripted", chunk_size: int = 16, delay: float = 0.0) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        if delay < 0:
            raise ValueError(f"delay must not be negative, got {delay}")
        self.model_id = f"scripted/{name}"
        self._script = script
        self._chunk_size = chunk_size
        self._delay = delay
        # Word counts of messages already seen (by id): the conversation grows by a few messages per step,
        # and recounting all of it made usage O(N) per step.
        self._counted: dict[str, int] = {}

    async def generate(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        """Run the script and stream its text.

        Args:
            request: The model request, passed to the script.
            on_delta: Awaited with each chunk of the response text, in order.

        Returns:
            A copy of the script's response with `usage` filled (a word count when the script left it None)
            and `finish_reason` set to `tool-calls` when there are tool calls and the script said `stop`.
        """
        produced = self._script(request)
        response = produced if isinstance(produced, ModelResponse) else await produced
        response = response.model_copy(deep=True)
        text = response.text
        for start in range(0, len(text), self._chunk_size):
            if self._delay:
                await asyncio.sleep(self._delay)
            await on_delta(text[start : start + self._chunk_size])
        if response.tool_calls and response.finish_reason == "stop":
            response.finish_reason = "tool-calls"
        if response.usage is None:
            input_tokens = _words(request.instructions) + sum(self._count(m) for m in request.messages)
            output_tokens = _words(text) + sum(
                1 + _words(json.dumps(call.args, default=str)) for call in response.tool_calls
            )
            response.usage = Usage(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                total_tokens=input_tokens + output_tokens,
            )
        return response

    def _count(self, message: MessageRecord) -> int:
        count = self._counted.get(message.id)
        if count is None:
            if len(self._counted) >= 10_000:
                self._counted.clear()
            count = self._counted[message.id] = _message_words(message)
        return count


def last_user_text(request: ModelRequest) -> str:
    """Return the text of the request's last user message (text parts joined by newlines), or `""`."""
    for message in reversed(request.messages):
        if message.role == "user":
            return _text_of(message)
    return ""


def tool_results_since_last_user(request: ModelRequest) -> list[ToolResultPart]:
    """Return the tool-result parts of the messages after the last user message, oldest first.

    Empty means the model has not called tools since the user spoke: a script's cue to answer or call one.
    """
    results: list[ToolResultPart] = []
    for message in reversed(request.messages):
        if message.role == "user":
            break
        if not isinstance(message.content, str):
            parts = [part for part in message.content if isinstance(part, ToolResultPart)]
            results[:0] = parts
    return results


def user_texts_since_last_answer(request: ModelRequest) -> list[str]:
    """Return the text of each user message after the last assistant message, oldest first (what a model that
    answers every message it has not answered yet hears)."""
    texts: list[str] = []
    for message in reversed(request.messages):
        if message.role == "assistant":
            break
        if message.role == "user":
            texts.insert(0, _text_of(message))
    return texts


def _text_of(message: MessageRecord) -> str:
    if isinstance(message.content, str):
        return message.content
    return "\n".join(part.text for part in message.content if isinstance(part, TextPart))


def _words(text: str) -> int:
    return len(text.split())


def _message_words(message: MessageRecord) -> int:
    if isinstance(message.content, str):
        return _words(message.content)
    count = 0
    for part in message.content:
        if isinstance(part, TextPart):
            count += _words(part.text)
        elif isinstance(part, ToolCallPart):
            count += 1 + _words(json.dumps(part.args, default=str))
        else:
            result = part.result if isinstance(part.result, str) else json.dumps(part.result, default=str)
            count += _words(result)
    return count
