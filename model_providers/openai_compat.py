"""An OpenAI-compatible chat-completions provider (OpenAI, vLLM, Ollama, llama.cpp, LiteLLM, ...).

The provider POSTs `{base_url}/chat/completions` with `stream: true` and parses the server-sent events,
handing text deltas to `on_delta` as they arrive. A server that ignores `stream` and answers with a plain
JSON completion is handled too.

Error mapping (see `model_providers.base`):

* HTTP 429, 408, 409 and >= 500, and transport errors (timeouts, refused connections, dropped streams)
  raise `ModelRetryableError`, with `retry_after` from the `retry-after-ms` or `retry-after` headers; an
  `x-should-retry: true|false` header overrides the status either way;
* any other non-2xx status raises `ModelRequestError`, naming the status and the provider's message;
* an error object inside a stream or completion is classified the same way, by its `code` and `type`
  (LiteLLM's `throttling_error`, Anthropic's `overloaded_error`, `rate_limit_exceeded`, `server_error`, ...);
* a stream that cannot be parsed raises `ModelError` (non-retryable).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

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
from keel.protocol import FinishReason, MessageRecord, TextPart, ToolCallPart, ToolResultPart, Usage, tracing

OPENAI_BASE_URL = "https://api.openai.com/v1"
_OFFICIAL_HOST = "api.openai.com"
_RETRYABLE_STATUSES = frozenset({408, 409, 429})
_RETRYABLE_ERROR_KINDS = frozenset(
    {
        "server_error",
        "internal_server_error",
        "service_unavailable",
        "rate_limit_exceeded",
        "rate_limit_error",
        "throttling_error",  # LiteLLM's rate limit
        "overloaded_error",  # Anthropic through a proxy
        "timeout",
        "request_timeout",
    }
)
"""Error `type`s and `code`s inside a response that mean "try again later", as HTTP 429, 408, 409 and 5xx do."""
_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "length": "length",
    "content_filter": "content-filter",
}
_MAX_ERROR_CHARS = 500


class OpenAIChatModel(ChatModel):
    """A chat model served by an OpenAI-compatible `/chat/completions` endpoint.

    One `httpx.AsyncClient` is created lazily on the first call and reused; call `aclose()` (or use the model
    as an async context manager) to release it.

    Args:
        model: The provider's model name, e.g. `gpt-4o-mini` or `llama3.1:8b`.
        base_url: The API root (ending in `/v1` for most servers). Defaults to the `OPENAI_BASE_URL`
            environment variable, else `https://api.openai.com/v1`; read at call time.
        api_key: The bearer token. Defaults to the `OPENAI_API_KEY` environment variable, read at call time
            so an app can be defined without a key. Required only for the official OpenAI endpoint.
        timeout: Seconds allowed for connecting, and between two reads of the stream.
        transport: An httpx transport to use instead of the network (tests pass `httpx.MockTransport`).
        extra_body: Extra keys merged into every request body last (e.g. `{"temperature": 0}`).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.model_id = f"openai/{model}"
        self._base_url = base_url
        self._api_key = api_key
        tracing.add_secret(api_key)  # never in an exported span, should an error message quote it
        self._timeout = timeout
        self._transport = transport
        self._extra_body: dict[str, Any] = dict(extra_body or {})
        self._client: httpx.AsyncClient | None = None

    @property
    def base_url(self) -> str:
        """The API root: the constructor's, else `OPENAI_BASE_URL`, else OpenAI's; no trailing `/`."""
        url = self._base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
        return url.rstrip("/")

    async def aclose(self) -> None:
        """Close the HTTP client, if any. The model stays usable: a new client is made on demand."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """Return the JSON body for `request` in the OpenAI chat-completions format.

        Args:
            request: The model request.

        Returns:
            The request body, with `extra_body` merged last.
        """
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(request.instructions, request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [to_openai_tool(spec) for spec in request.tools]
        body.update(self._extra_body)
        return body

    async def generate(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        """Run one chat completion, streaming text deltas to `on_delta`.

        Args:
            request: Instructions, conversation and tools.
            on_delta: Awaited with each text delta, in order.

        Returns:
            The assembled response: text, tool calls, finish reason and usage.

        Raises:
            ModelRetryableError: Rate limits, overload, server errors and transport failures.
            ModelRequestError: The request was rejected (bad key, unknown model, invalid body, no key).
            ModelError: The provider's answer could not be understood.
        """
        url = f"{self.base_url}/chat/completions"
        headers = {"Accept": "text/event-stream, application/json"}
        api_key = self._resolve_api_key()
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        body = self.build_body(request)
        try:
            async with self._get_client().stream("POST", url, json=body, headers=headers) as response:
                if not 200 <= response.status_code < 300:
                    await response.aread()
                    raise self._status_error(response, url)
                content_type = response.headers.get("content-type", "")
                if "application/json" in content_type:
                    await response.aread()
                    return await _parse_completion(_load_json(response.text, "completion"), on_delta)
                async with aclosing(_sse_data(response.aiter_lines())) as events:
                    return await _parse_stream(events, on_delta)
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise ModelRequestError(f"Invalid base URL {self.base_url!r} for {self.model_id}: {exc}") from exc
        except httpx.TransportError as exc:
            kind = type(exc).__name__
            raise ModelRetryableError(f"{kind} calling {url} for {self.model_id}: {exc}") from exc

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self._timeout), transport=self._transport)
        return self._client

    def _resolve_api_key(self) -> str | None:
        key = self._api_key if self._api_key is not None else os.environ.get("OPENAI_API_KEY")
        if key:
            return key
        try:
            host = httpx.URL(self.base_url).host
        except httpx.InvalidURL:
            host = ""
        if host == _OFFICIAL_HOST:
            raise ModelRequestError(
                f"OPENAI_API_KEY is not set: {self.model_id} calls the official OpenAI API at "
                f"{self.base_url}, which needs a key. Set OPENAI_API_KEY, pass api_key=..., or point "
                "OPENAI_BASE_URL at a compatible server (vLLM, Ollama, llama.cpp) that needs none."
            )
        return None

    def _status_error(self, response: httpx.Response, url: str) -> ModelError:
        status = response.status_code
        detail = _error_detail(response)
        message = f"{self.model_id}: HTTP {status} from {url}: {detail}"
        # The provider's own verdict wins (OpenAI's SDKs honour it too), then the status.
        should_retry = response.headers.get("x-should-retry", "").strip().lower()
        retryable = status in _RETRYABLE_STATUSES or status >= 500
        if should_retry in ("true", "false"):
            retryable = should_retry == "true"
        if retryable:
            return ModelRetryableError(message, status=status, retry_after=retry_after_seconds(response.headers))
        if status in (401, 403):
            message += " (check OPENAI_API_KEY)"
        elif status == 404:
            message += f" (check the model name {self.model!r} and the base URL)"
        return ModelRequestError(message, status=status)


# --- Request conversion ---------------------------------------------------------------------------------


def to_openai_tool(spec: ToolSpec) -> dict[str, Any]:
    """Return `spec` as an OpenAI function tool."""
    return {
        "type": "function",
        "function": {"name": spec.name, "description": spec.description, "parameters": spec.parameters},
    }


def to_openai_messages(instructions: str, messages: list[MessageRecord]) -> list[dict[str, Any]]:
    """Convert the conversation to OpenAI chat messages.

    Instructions become a leading system message. Text parts are joined with newlines. Assistant tool-call
    parts become `tool_calls` with JSON-string arguments. Every tool-result part becomes its own
    `role: "tool"` message: after the assistant message that holds it, or before the text of any other role.

    Args:
        instructions: The system prompt; omitted when empty.
        messages: The conversation, oldest first.

    Returns:
        The `messages` list of a chat-completions request.
    """
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for record in messages:
        if isinstance(record.content, str):
            role = "user" if record.role == "tool" else record.role
            out.append({"role": role, "content": record.content})
            continue
        texts = [part.text for part in record.content if isinstance(part, TextPart)]
        calls = [part for part in record.content if isinstance(part, ToolCallPart)]
        results = [_tool_message(part) for part in record.content if isinstance(part, ToolResultPart)]
        text = "\n".join(texts)
        if record.role == "assistant":
            if texts or calls:
                message: dict[str, Any] = {"role": "assistant", "content": text if texts else None}
                if calls:
                    message["tool_calls"] = [_tool_call(part) for part in calls]
                out.append(message)
            out.extend(results)
        else:
            out.extend(results)
            if texts:
                out.append({"role": "user" if record.role == "tool" else record.role, "content": text})
    return out


def _tool_call(part: ToolCallPart) -> dict[str, Any]:
    return {
        "id": part.tool_call_id,
        "type": "function",
        "function": {"name": part.tool_name, "arguments": json.dumps(part.args)},
    }


def _tool_message(part: ToolResultPart) -> dict[str, Any]:
    result = part.result
    if isinstance(result, dict) and result.get("__workspaceMedia") is True:
        # A workspace read of an image or PDF: chat completions take text only in tool messages, so the model
        # gets the file's description, not megabytes of base64 (the stored result keeps the data).
        content = f"{result.get('text', '')} (media file: its contents cannot be shown in a tool result here)"
    else:
        content = result if isinstance(result, str) else json.dumps(result, default=str)
    return {"role": "tool", "tool_call_id": part.tool_call_id, "content": content}


# --- Errors ---------------------------------------------------------------------------------------------


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """Read the server's back-off hint: `retry-after-ms` (ms), else `retry-after` (seconds or HTTP date).

    Args:
        headers: The response headers.

    Returns:
        Seconds to wait (never negative), or None when absent or unparsable.
    """
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_detail(response: httpx.Response) -> str:
    text = response.text
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str) and error:
            return error
        if data.get("message"):
            return str(data["message"])
        if data.get("detail"):
            return str(data["detail"])
    text = text.strip()
    if not text:
        return response.reason_phrase or "no error message"
    return text if len(text) <= _MAX_ERROR_CHARS else text[:_MAX_ERROR_CHARS] + "..."


def _stream_error(error: Any) -> ModelError:
    """An error object inside a response (a stream chunk or a completion): classified like an HTTP status, by
    its `code` (a status such as "429") and `type`, and honouring a `retry_after` it carries (seconds)."""
    if isinstance(error, dict):
        message = str(error.get("message") or error)
        kinds = {str(error.get("type")).lower(), str(error.get("code")).lower()}
        status = next((int(k) for k in kinds if k.isdigit()), None)
        hint = error.get("retry_after", error.get("retryAfter"))
    else:
        message, kinds, status, hint = str(error), set(), None, None
    text = f"The provider reported an error in the response: {message}"
    retryable = bool(kinds & _RETRYABLE_ERROR_KINDS) or (
        status is not None and (status in _RETRYABLE_STATUSES or status >= 500)
    )
    if retryable:
        retry_after = float(hint) if isinstance(hint, int | float) and hint >= 0 else None
        return ModelRetryableError(text, status=status, retry_after=retry_after)
    if status is not None and 400 <= status < 500:
        return ModelRequestError(text, status=status)
    return ModelError(text)


# --- Response parsing -----------------------------------------------------------------------------------


@dataclass
class _ToolCallAccumulator:
    id: str = ""
    name: str = ""
    arguments: str = ""

    def add(self, delta: dict[str, Any]) -> None:
        if delta.get("id"):
            self.id = str(delta["id"])
        function = delta.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if name and name != self.name:
            self.name += str(name)  # some servers repeat the full name in every chunk; others send it once
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            self.arguments += arguments
        elif isinstance(arguments, dict):  # non-compliant servers sometimes send an object
            self.arguments += json.dumps(arguments)

    def build(self) -> ModelToolCall:
        return ModelToolCall(
            id=self.id or f"call_{uuid.uuid4().hex[:24]}",
            name=self.name,
            args=parse_arguments(self.arguments),
        )


def parse_arguments(text: str) -> dict[str, Any]:
    """Parse tool-call arguments; anything that is not a JSON object is kept as `{"_raw": text}`."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


def _finish_reason(raw: str | None, has_tool_calls: bool) -> FinishReason:
    reason: FinishReason = _FINISH_REASONS.get(raw or "", "other")
    if has_tool_calls and reason == "stop":
        return "tool-calls"  # Ollama and some vLLM versions say "stop" after tool calls
    return reason


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    input_tokens = int(raw.get("prompt_tokens") or 0)
    output_tokens = int(raw.get("completion_tokens") or 0)
    total = raw.get("total_tokens")
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=int(total) if total is not None else input_tokens + output_tokens,
    )


def _load_json(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ModelError(f"Malformed {what} from the provider (not JSON): {text[:200]!r}") from exc
    if not isinstance(value, dict):
        raise ModelError(f"Malformed {what} from the provider (not a JSON object): {text[:200]!r}")
    return value


def _first_choice(chunk: dict[str, Any], what: str) -> dict[str, Any] | None:
    choices = chunk.get("choices")
    if choices is None or choices == []:
        return None
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise ModelError(f"Malformed {what} from the provider: 'choices' is not a list of objects")
    return choices[0]


async def _sse_data(lines: AsyncIterator[str]) -> AsyncGenerator[str, None]:
    """Yield the data of each server-sent event (multi-line `data:` fields joined with newlines)."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue  # comment / keep-alive
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


async def _parse_stream(events: AsyncIterator[str], on_delta: OnDelta) -> ModelResponse:
    text: list[str] = []
    calls: dict[int, _ToolCallAccumulator] = {}
    raw_finish: str | None = None
    usage: Usage | None = None
    chunks = 0
    done = False
    async for data in events:
        if data.strip() == "[DONE]":
            done = True
            break
        chunk = _load_json(data, "stream chunk")
        chunks += 1
        if chunk.get("error"):
            raise _stream_error(chunk["error"])
        chunk_usage = _usage(chunk.get("usage"))
        if chunk_usage is not None:
            usage = chunk_usage  # the last report wins (some servers send running totals)
        choice = _first_choice(chunk, "stream chunk")
        if choice is None:
            continue
        if choice.get("finish_reason"):
            raw_finish = str(choice["finish_reason"])
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise ModelError("Malformed stream chunk from the provider: 'delta' is not an object")
        content = delta.get("content")
        if isinstance(content, str) and content:
            text.append(content)
            await on_delta(content)
        for position, tool_delta in enumerate(delta.get("tool_calls") or []):
            if not isinstance(tool_delta, dict):
                raise ModelError("Malformed stream chunk from the provider: a tool call is not an object")
            calls.setdefault(_tool_index(tool_delta, position, calls), _ToolCallAccumulator()).add(tool_delta)
    if chunks == 0:
        raise ModelError("Malformed stream from the provider: it ended without a single completion chunk")
    if not done and raw_finish is None:
        raise ModelRetryableError("The provider's stream ended before the completion finished")
    tool_calls = [calls[index].build() for index in sorted(calls)]
    return ModelResponse(
        text="".join(text),
        tool_calls=tool_calls,
        finish_reason=_finish_reason(raw_finish, bool(tool_calls)),
        usage=usage,
    )


def _tool_index(delta: dict[str, Any], position: int, calls: dict[int, _ToolCallAccumulator]) -> int:
    index = delta.get("index")
    if isinstance(index, int):
        return index
    # No index (some local servers): an id names its call (new or known); no id continues the last call.
    call_id = delta.get("id")
    if call_id:
        for known, acc in calls.items():
            if acc.id == call_id:
                return known
        return max(calls, default=-1) + 1
    return max(calls, default=position)


async def _parse_completion(data: dict[str, Any], on_delta: OnDelta) -> ModelResponse:
    if data.get("error"):
        raise _stream_error(data["error"])
    choice = _first_choice(data, "completion")
    if choice is None:
        raise ModelError("Malformed completion from the provider: no choices")
    message = choice.get("message") or {}
    if not isinstance(message, dict):
        raise ModelError("Malformed completion from the provider: 'message' is not an object")
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    if text:
        await on_delta(text)
    calls: list[ModelToolCall] = []
    for raw in message.get("tool_calls") or []:
        if not isinstance(raw, dict):
            raise ModelError("Malformed completion from the provider: a tool call is not an object")
        acc = _ToolCallAccumulator()
        acc.add(raw)
        calls.append(acc.build())
    raw_finish = choice.get("finish_reason")
    return ModelResponse(
        text=text,
        tool_calls=calls,
        finish_reason=_finish_reason(str(raw_finish) if raw_finish else None, bool(calls)),
        usage=_usage(data.get("usage")),
    )
