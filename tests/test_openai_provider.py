"""The OpenAI-compatible provider against `httpx.MockTransport`, and the scripted model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from keel.model_providers import (
    ModelError,
    ModelRequest,
    ModelRequestError,
    ModelResponse,
    ModelRetryableError,
    ModelToolCall,
    OpenAIChatModel,
    ScriptedModel,
    ToolSpec,
    last_user_text,
    tool_results_since_last_user,
)
from keel.model_providers.openai_compat import retry_after_seconds, to_openai_messages
from keel.protocol import MessageRecord, TextPart, ToolCallPart, ToolResultPart
from keel.protocol.messages import with_answered_calls

BASE_URL = "http://llm.test/v1"
Handler = Callable[[httpx.Request], httpx.Response]


def chunk(
    content: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}


def sse(*chunks: dict[str, Any], done: bool = True) -> bytes:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    if done:
        body += "data: [DONE]\n\n"
    return body.encode()


def sse_response(body: bytes | AsyncIterator[bytes]) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def request_of(text: str = "hi", *, tools: list[ToolSpec] | None = None) -> ModelRequest:
    return ModelRequest(
        instructions="Be brief.",
        messages=[MessageRecord(id="m1", role="user", content=text)],
        tools=tools or [],
    )


class Deltas:
    def __init__(self) -> None:
        self.items: list[str] = []

    async def __call__(self, text: str) -> None:
        self.items.append(text)


@pytest.fixture
async def make_model() -> AsyncIterator[Callable[..., OpenAIChatModel]]:
    models: list[OpenAIChatModel] = []

    def make(handler: Handler, **kwargs: Any) -> OpenAIChatModel:
        kwargs.setdefault("base_url", BASE_URL)
        model = OpenAIChatModel("test-model", transport=httpx.MockTransport(handler), **kwargs)
        models.append(model)
        return model

    yield make
    for model in models:
        await model.aclose()


async def test_streamed_text_deltas_arrive_in_order_and_join_to_the_text(
    make_model: Callable[..., OpenAIChatModel],
) -> None:
    payload = sse(chunk("Hel"), chunk("lo, "), chunk("world"), chunk(finish_reason="stop"))

    async def body() -> AsyncIterator[bytes]:
        for start in range(0, len(payload), 7):  # lines split across network reads
            yield payload[start : start + 7]

    model = make_model(lambda request: sse_response(body()))
    deltas = Deltas()

    response = await model.generate(request_of(), deltas)

    assert deltas.items == ["Hel", "lo, ", "world"]
    assert response.text == "Hello, world"
    assert response.finish_reason == "stop"
    assert response.tool_calls == []
    assert model.model_id == "openai/test-model"


async def test_streamed_tool_calls_split_over_chunks_are_assembled_with_parsed_args(
    make_model: Callable[..., OpenAIChatModel],
) -> None:
    first = {
        "index": 0,
        "id": "call_a",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    second = {
        "index": 1,
        "id": "call_b",
        "type": "function",
        "function": {"name": "save_note", "arguments": ""},
    }
    payload = sse(
        chunk(tool_calls=[first]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"ci'}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": 'ty": "Par'}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": 'is"}'}}]),
        chunk(tool_calls=[second]),
        chunk(tool_calls=[{"index": 1, "function": {"arguments": '{"title": "x", "text": "y"}'}}]),
        chunk(finish_reason="tool_calls"),
    )
    model = make_model(lambda request: sse_response(payload))

    response = await model.generate(request_of(), Deltas())

    assert response.tool_calls == [
        ModelToolCall(id="call_a", name="get_weather", args={"city": "Paris"}),
        ModelToolCall(id="call_b", name="save_note", args={"title": "x", "text": "y"}),
    ]
    assert response.finish_reason == "tool-calls"
    assert response.text == ""


async def test_tool_arguments_that_are_not_json_are_kept_raw(
    make_model: Callable[..., OpenAIChatModel],
) -> None:
    call = {"index": 0, "id": "call_a", "function": {"name": "f", "arguments": "{not json"}}
    model = make_model(lambda request: sse_response(sse(chunk(tool_calls=[call]), chunk(finish_reason="stop"))))

    response = await model.generate(request_of(), Deltas())

    assert response.tool_calls == [ModelToolCall(id="call_a", name="f", args={"_raw": "{not json"})]
    assert response.finish_reason == "tool-calls"


async def test_usage_is_read_from_the_final_chunk(make_model: Callable[..., OpenAIChatModel]) -> None:
    payload = sse(chunk("ok"), chunk(finish_reason="stop"), usage_chunk(12, 3))
    model = make_model(lambda request: sse_response(payload))

    response = await model.generate(request_of(), Deltas())

    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (
        12,
        3,
        15,
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("length", "length"),
        ("content_filter", "content-filter"),
        ("function_call", "tool-calls"),
        ("x", "other"),
    ],
)
async def test_finish_reasons_are_mapped_to_the_contract(
    make_model: Callable[..., OpenAIChatModel], raw: str, expected: str
) -> None:
    model = make_model(lambda request: sse_response(sse(chunk("a"), chunk(finish_reason=raw))))

    response = await model.generate(request_of(), Deltas())

    assert response.finish_reason == expected


async def test_request_body_carries_messages_and_tools_in_openai_format(
    make_model: Callable[..., OpenAIChatModel],
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return sse_response(sse(chunk("done"), chunk(finish_reason="stop")))

    model = make_model(handler, api_key="sk-test", extra_body={"temperature": 0})
    tool = ToolSpec(
        name="save_note",
        description="Save a note.",
        parameters={"type": "object", "properties": {"title": {"type": "string"}}},
    )
    request = ModelRequest(
        instructions="Be brief.",
        messages=[
            MessageRecord(id="m1", role="user", content="save hi"),
            MessageRecord(
                id="m2",
                role="assistant",
                content=[
                    TextPart(text="Saving."),
                    ToolCallPart(tool_call_id="call_1", tool_name="save_note", args={"title": "hi"}),
                    ToolCallPart(tool_call_id="call_2", tool_name="save_note", args={"title": "ho"}),
                ],
            ),
            MessageRecord(
                id="m3",
                role="tool",
                content=[
                    ToolResultPart(tool_call_id="call_1", tool_name="save_note", result={"path": "hi.md"}),
                    ToolResultPart(tool_call_id="call_2", tool_name="save_note", result="denied", denied=True),
                ],
            ),
        ],
        tools=[tool],
    )

    await model.generate(request, Deltas())

    [sent] = seen
    assert sent.method == "POST"
    assert str(sent.url) == f"{BASE_URL}/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    body = json.loads(sent.content)
    assert body["model"] == "test-model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "save_note",
                "description": "Save a note.",
                "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "save hi"},
        {
            "role": "assistant",
            "content": "Saving.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "save_note", "arguments": '{"title": "hi"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "save_note", "arguments": '{"title": "ho"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"path": "hi.md"}'},
        {"role": "tool", "tool_call_id": "call_2", "content": "denied"},
    ]


async def test_tools_are_omitted_and_no_key_is_needed_for_a_local_server(
    make_model: Callable[..., OpenAIChatModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return sse_response(sse(chunk("ok"), chunk(finish_reason="stop")))

    await make_model(handler).generate(request_of(), Deltas())

    [sent] = seen
    assert "tools" not in json.loads(sent.content)
    assert "authorization" not in sent.headers


async def test_missing_key_for_the_official_api_is_a_request_error_naming_the_variable(
    make_model: Callable[..., OpenAIChatModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    model = make_model(lambda request: pytest.fail("no request may be sent"), base_url=None)

    with pytest.raises(ModelRequestError, match="OPENAI_API_KEY"):
        await model.generate(request_of(), Deltas())


async def test_key_and_base_url_are_read_from_the_environment_at_call_time(
    make_model: Callable[..., OpenAIChatModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return sse_response(sse(chunk("ok"), chunk(finish_reason="stop")))

    model = make_model(handler, base_url=None)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.test/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")

    await model.generate(request_of(), Deltas())

    assert str(seen[0].url) == "http://env.test/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sk-env"


async def test_rate_limit_is_retryable_and_honours_retry_after_ms(
    make_model: Callable[..., OpenAIChatModel],
) -> None:
    error = {"error": {"message": "Rate limit reached", "type": "requests"}}
    model = make_model(
        lambda request: httpx.Response(429, headers={"retry-after-ms": "1500", "retry-after": "9"}, json=error)
    )

    with pytest.raises(ModelRetryableError) as caught:
        await model.generate(request_of(), Deltas())

    assert caught.value.retry_after == 1.5
    assert caught.value.status == 429
    assert "Rate limit reached" in str(caught.value)


async def test_server_error_is_retryable_and_honours_retry_after_seconds(
    make_model: Callable[..., OpenAIChatModel],
) -> None:
    model = make_model(lambda request: httpx.Response(503, headers={"retry-after": "2"}, text="overloaded"))

    with pytest.raises(ModelRetryableError) as caught:
        await model.generate(request_of(), Deltas())

    assert caught.value.retry_after == 2.0
    assert caught.value.status == 503


@pytest.mark.parametrize(
    ("status", "should_retry", "retryable"),
    [(400, "true", True), (503, "false", False), (429, "false", False), (500, "maybe", True)],
)
async def test_x_should_retry_overrides_the_status(
    make_model: Callable[..., OpenAIChatModel], status: int, should_retry: str, retryable: bool
) -> None:
    model = make_model(lambda request: httpx.Response(status, headers={"x-should-retry": should_retry}, text="no"))

    with pytest.raises(ModelError) as caught:
        await model.generate(request_of(), Deltas())

    assert caught.value.retryable is retryable and caught.value.status == status


def test_retry_after_as_an_http_date_becomes_seconds_from_now() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)

    seconds = retry_after_seconds(httpx.Headers({"retry-after": when}))

    assert seconds is not None
    assert 25 <= seconds <= 31
    assert retry_after_seconds(httpx.Headers({"retry-after": "soon"})) is None
    assert retry_after_seconds(httpx.Headers()) is None


async def test_unauthorized_is_a_request_error_carrying_the_provider_message(
    make_model: Callable[..., OpenAIChatModel],
) -> None:
    error = {"error": {"message": "Incorrect API key provided: sk-bad", "type": "invalid_request_error"}}
    model = make_model(lambda request: httpx.Response(401, json=error), api_key="sk-bad")

    with pytest.raises(ModelRequestError) as caught:
        await model.generate(request_of(), Deltas())

    assert not isinstance(caught.value, ModelRetryableError)
    assert caught.value.status == 401
    assert "401" in str(caught.value)
    assert "Incorrect API key provided" in str(caught.value)


async def test_connect_error_is_retryable(make_model: Callable[..., OpenAIChatModel]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    with pytest.raises(ModelRetryableError, match="Connection refused"):
        await make_model(handler).generate(request_of(), Deltas())


async def test_a_read_timeout_mid_stream_is_retryable(make_model: Callable[..., OpenAIChatModel]) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield sse(chunk("partial"), done=False)
        raise httpx.ReadTimeout("timed out")

    with pytest.raises(ModelRetryableError, match="ReadTimeout"):
        await make_model(lambda request: sse_response(body())).generate(request_of(), Deltas())


async def test_a_malformed_stream_is_a_non_retryable_model_error(
    make_model: Callable[..., OpenAIChatModel],
) -> None:
    model = make_model(lambda request: sse_response(b"data: {not json\n\n"))

    with pytest.raises(ModelError) as caught:
        await model.generate(request_of(), Deltas())

    assert not caught.value.retryable


async def test_a_stream_cut_before_the_finish_is_retryable(
    make_model: Callable[..., OpenAIChatModel],
) -> None:
    model = make_model(lambda request: sse_response(sse(chunk("partial"), done=False)))

    with pytest.raises(ModelRetryableError):
        await model.generate(request_of(), Deltas())


async def test_a_non_streamed_json_completion_works(make_model: Callable[..., OpenAIChatModel]) -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me check.",
                    "tool_calls": [
                        {
                            "id": "call_x",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
    }
    model = make_model(lambda request: httpx.Response(200, json=completion))
    deltas = Deltas()

    response = await model.generate(request_of(), deltas)

    assert deltas.items == ["Let me check."]
    assert response.text == "Let me check."
    assert response.tool_calls == [ModelToolCall(id="call_x", name="get_weather", args={"city": "Oslo"})]
    assert response.finish_reason == "tool-calls"
    assert response.usage is not None and response.usage.total_tokens == 12


async def test_scripted_model_streams_text_in_chunks_and_fills_usage_and_finish_reason() -> None:
    def script(request: ModelRequest) -> ModelResponse:
        return ModelResponse(
            text=f"echo: {last_user_text(request)}",
            tool_calls=[ModelToolCall(id="c1", name="save_note", args={"title": "t"})],
        )

    model = ScriptedModel(script, name="echo", chunk_size=4)
    deltas = Deltas()

    response = await model.generate(request_of("hello there"), deltas)

    assert model.model_id == "scripted/echo"
    assert deltas.items == ["echo", ": he", "llo ", "ther", "e"]
    assert "".join(deltas.items) == response.text == "echo: hello there"
    assert response.finish_reason == "tool-calls"
    assert response.usage is not None
    assert response.usage.input_tokens == 4  # "Be brief." + "hello there"
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens


async def test_scripted_model_accepts_async_scripts_and_helpers_find_recent_tool_results() -> None:
    async def script(request: ModelRequest) -> ModelResponse:
        results = tool_results_since_last_user(request)
        return ModelResponse(text=",".join(str(r.result) for r in results))

    result = ToolResultPart(tool_call_id="c1", tool_name="save_note", result="saved")
    request = ModelRequest(
        messages=[
            MessageRecord(id="m0", role="tool", content=[ToolResultPart(tool_call_id="c0", tool_name="x")]),
            MessageRecord(id="m1", role="user", content=[TextPart(text="save"), TextPart(text="it")]),
            MessageRecord(id="m2", role="assistant", content=[ToolCallPart(tool_call_id="c1", tool_name="save_note")]),
            MessageRecord(id="m3", role="tool", content=[result]),
        ]
    )

    response = await ScriptedModel(script).generate(request, Deltas())

    assert last_user_text(request) == "save\nit"
    assert tool_results_since_last_user(request) == [result]
    assert response.text == "saved"


@pytest.mark.parametrize(
    ("error", "retryable", "retry_after"),
    [
        ({"message": "slow", "type": "throttling_error", "code": "429"}, True, None),  # LiteLLM's rate limit
        ({"message": "busy", "type": "overloaded_error"}, True, None),
        ({"message": "later", "code": 503}, True, None),
        ({"message": "wait", "type": "rate_limit_exceeded", "retry_after": 2.5}, True, 2.5),
        ({"message": "oops", "type": "server_error"}, True, None),
        ({"message": "bad", "type": "invalid_request_error", "code": "400"}, False, None),
        ({"message": "what", "type": "weird"}, False, None),
    ],
)
async def test_an_error_in_the_middle_of_a_stream_is_classified_like_an_http_status(
    make_model: Callable[..., OpenAIChatModel], error: dict[str, Any], retryable: bool, retry_after: float | None
) -> None:
    body = b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n' + sse_error(error)
    model = make_model(lambda request: sse_response(body))

    with pytest.raises(ModelError) as caught:
        await model.generate(request_of(), Deltas())

    assert caught.value.retryable is retryable
    if isinstance(caught.value, ModelRetryableError):
        assert caught.value.retry_after == retry_after


def sse_error(error: dict[str, Any]) -> bytes:
    return f"data: {json.dumps({'error': error})}\n\n".encode()


def test_a_workspace_media_result_reaches_the_model_as_its_description_not_its_bytes() -> None:
    from keel.model_providers.openai_compat import to_openai_messages

    media = {"__workspaceMedia": True, "text": "logo.png (5000000 bytes, image/png)", "mediaType": "image/png"}
    part = ToolResultPart(tool_call_id="c1", tool_name="mastra_workspace_read_file", result={**media, "data": "A" * 10})
    [message] = to_openai_messages("", [MessageRecord(id="m", role="tool", content=[part])])
    assert message["content"] == (
        "logo.png (5000000 bytes, image/png) (media file: its contents cannot be shown in a tool result here)"
    )


def test_a_model_is_shown_only_tool_calls_with_their_results() -> None:
    """A call whose run stopped before it had a result, and a result whose call a transcript cut off, are left
    out of what a model is shown (and so of the OpenAI messages), with a message that holds nothing else."""
    call = ToolCallPart(tool_call_id="c1", tool_name="t", args={})
    messages = [
        MessageRecord(id="r0", role="tool", content=[ToolResultPart(tool_call_id="c0", tool_name="t", result=1)]),
        MessageRecord(id="u1", role="user", content="go"),
        MessageRecord(id="a1", role="assistant", content=[TextPart(text="Let me."), call]),
        MessageRecord(id="a2", role="assistant", content=[ToolCallPart(tool_call_id="c2", tool_name="t", args={})]),
        MessageRecord(id="r2", role="tool", content=[ToolResultPart(tool_call_id="c2", tool_name="t", result=2)]),
        MessageRecord(id="u2", role="user", content="again"),
    ]
    shown = with_answered_calls(messages)
    assert [m.id for m in shown] == ["u1", "a1", "a2", "r2", "u2"]
    assert shown[1].content == [TextPart(text="Let me.")]
    assert [m["role"] for m in to_openai_messages("", shown)] == ["user", "assistant", "assistant", "tool", "user"]
    assert with_answered_calls(shown) is shown  # every call answered: the same list, nothing copied


def test_a_call_id_used_again_is_paired_with_the_result_that_follows_it() -> None:
    """Scripted models, imported threads and model servers that do not make ids unique use an id again across
    runs: a run stopped at an approval leaves its `c1` unanswered though an earlier run's `c1` has a
    result. Each result answers the latest call of its id before it, so the stopped run's call is left out, and
    a result before any call of its id is too."""

    def call(message_id: str) -> MessageRecord:
        return MessageRecord(
            id=message_id, role="assistant", content=[ToolCallPart(tool_call_id="c1", tool_name="t", args={})]
        )

    def result(message_id: str) -> MessageRecord:
        return MessageRecord(
            id=message_id, role="tool", content=[ToolResultPart(tool_call_id="c1", tool_name="t", result=1)]
        )

    messages = [
        result("r0"),
        MessageRecord(id="u1", role="user", content="go"),
        call("a1"),
        result("r1"),
        MessageRecord(id="u2", role="user", content="again"),
        call("a2"),  # its run was canceled at the approval
        MessageRecord(id="u3", role="user", content="and again"),
        call("a3"),
        result("r3"),
    ]
    shown = with_answered_calls(messages)
    assert [m.id for m in shown] == ["u1", "a1", "r1", "u2", "u3", "a3", "r3"]
    assert with_answered_calls(shown) is shown
