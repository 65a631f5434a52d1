"""An agent on the OpenAI-compatible provider, against a real HTTP server on loopback speaking the API."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from temporalio.client import Client

from keel.app import Agent, App
from keel.client import RunFailed
from keel.client.devserver import DevServer
from keel.model_providers import OpenAIChatModel
from keel.storage import Storage
from tests.apps import echo, hold
from tests.conftest import running_worker
from tests.fake_openai import FakeOpenAI, delta, finish, sse
from tests.test_agent_run import wait_for_pending
from tests.test_temporal_cli import ui_api


def openai_app(server: FakeOpenAI) -> App:
    model = OpenAIChatModel("fake-model", base_url=server.base_url, api_key="sk-test")
    return App.of(Agent(id="gpt", instructions="Be brief.", model=model, tools=(echo,)))


async def test_rate_limited_model_is_retried_after_retry_after_ms_and_tool_results_go_back_to_it(
    client: Client, storage: Storage, task_queue: str, fake_openai: FakeOpenAI
) -> None:
    tool_call = {"index": 0, "id": "call_x", "type": "function", "function": {"name": "echo", "arguments": ""}}
    fake_openai.replies = [
        (429, {"retry-after-ms": "2500", "content-type": "application/json"}, b'{"error":{"message":"slow down"}}'),
        sse(
            delta(role="assistant", content="Let me "),
            delta(content="echo."),
            delta(tool_calls=[tool_call]),
            delta(tool_calls=[{"index": 0, "function": {"arguments": '{"text": "hi"}'}}]),
            finish("tool_calls"),
        ),
        sse(delta(role="assistant", content="It said hi."), finish("stop", 30, 4)),
    ]
    async with running_worker(client, openai_app(fake_openai), storage, task_queue) as keel:
        run_id = await keel.start_run("gpt", "echo hi")
        result = await keel.result(run_id)
    assert result.text == "It said hi."
    assert [r.payload.result for r in result.tool_results] == [{"echo": "hi"}]
    assert result.usage is not None and result.usage.input_tokens == 40 and result.usage.output_tokens == 9
    (t_429, first), (t_retry, _), (_, last) = fake_openai.requests
    assert t_retry - t_429 >= 2.4, "the retry did not wait for retry-after-ms"
    assert first["model"] == "fake-model" and first["tools"][0]["function"]["name"] == "echo"
    assert last["messages"][0] == {"role": "system", "content": "Be brief."}
    assert last["messages"][-1] == {"role": "tool", "tool_call_id": "call_x", "content": '{"echo": "hi"}'}
    texts = [e.payload["text"] for e in await storage.read_events(run_id) if e.type == "text-delta"]
    assert "".join(texts) == "Let me echo.It said hi."


async def test_a_rejected_model_request_fails_the_run_at_once_with_the_providers_message(
    client: Client, storage: Storage, task_queue: str, fake_openai: FakeOpenAI
) -> None:
    body = b'{"error":{"message":"Incorrect API key provided"}}'
    fake_openai.replies = [(401, {"content-type": "application/json"}, body)]
    async with running_worker(client, openai_app(fake_openai), storage, task_queue) as keel:
        run_id = await keel.start_run("gpt", "hello")
        with pytest.raises(RunFailed, match="Incorrect API key provided"):
            await keel.result(run_id)
    assert len(fake_openai.requests) == 1


async def test_retries_of_the_first_model_step_show_in_the_ui_as_a_pending_activity(
    client: Client, storage: Storage, task_queue: str, fake_openai: FakeOpenAI, dev_server: DevServer
) -> None:
    limited = (429, {"retry-after": "1", "content-type": "application/json"}, b'{"error":{"message":"slow down"}}')
    fake_openai.replies = [limited, limited, limited, sse(delta(content="Finally."), finish("stop"))]
    async with running_worker(client, openai_app(fake_openai), storage, task_queue) as keel:
        run_id = await keel.start_run("gpt", "hello")
        async with ui_api(dev_server) as (http, api), asyncio.timeout(30):
            while True:  # the local attempt failed; the step now retries as an activity the UI lists
                pending = (await http.get(f"{api}/workflows/{run_id}")).json().get("pendingActivities", [])
                if pending and pending[0].get("attempt", 1) >= 2:
                    break
                await asyncio.sleep(0.2)
        result = await keel.result(run_id)
    assert pending[0]["activityType"]["name"] == "keel.model_step"
    assert "slow down" in pending[0]["lastFailure"]["message"]
    assert result.text == "Finally."


def as_strict_as_openai(reply: tuple[int, dict[str, str], bytes]) -> Any:
    """A responder that refuses, as OpenAI's API does (400), an assistant message with tool calls that the tool
    messages right after it do not all answer, or a tool message answering no call of the assistant message
    before it; else gives `reply`."""

    def refuse(problem: str) -> tuple[int, dict[str, str], bytes]:
        return 400, {"content-type": "application/json"}, json.dumps({"error": {"message": problem}}).encode()

    def respond(body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        waiting: set[str] = set()
        for message in body["messages"]:
            if message["role"] == "tool":
                if message["tool_call_id"] not in waiting:
                    return refuse(f"tool message {message['tool_call_id']} answers no preceding tool call")
                waiting.discard(message["tool_call_id"])
                continue
            if waiting:
                return refuse(f"An assistant message with 'tool_calls' must be followed by tool messages: {waiting}")
            waiting = {c["id"] for c in message.get("tool_calls") or []}
        if waiting:
            return refuse(f"An assistant message with 'tool_calls' must be followed by tool messages: {waiting}")
        return reply

    return respond


async def test_a_thread_whose_run_was_canceled_at_an_approval_goes_on_with_a_strict_model(
    client: Client, storage: Storage, task_queue: str, fake_openai: FakeOpenAI
) -> None:
    """A run canceled (or aborted, or terminated) while its tool call waits for approval leaves the call in its
    thread with no result, as Mastra's does (shown as a call). The model is never shown such a call: Mastra drops
    calls without a result from the prompt, and OpenAI's API refuses them. Before, every later run on the
    thread failed with the provider's 400."""
    call = {"index": 0, "id": "call_h", "type": "function", "function": {"name": "hold", "arguments": "{}"}}
    fake_openai.replies = [sse(delta(role="assistant", tool_calls=[call]), finish("tool_calls"))]
    fake_openai.responder = as_strict_as_openai(sse(delta(role="assistant", content="Hello again."), finish("stop")))
    model = OpenAIChatModel("fake-model", base_url=fake_openai.base_url, api_key="sk-test")
    app = App.of(Agent(id="gpt", model=model, tools=(echo, hold)))
    async with running_worker(client, app, storage, task_queue) as keel:
        first = await keel.start_run("gpt", "hold on")
        await wait_for_pending(keel, first)
        await keel.cancel(first)
        thread_id = (await keel.describe(first)).thread_id
        assert thread_id is not None
        second = await keel.start_run("gpt", "hello", thread_id=thread_id)
        result = await keel.result(second)
    assert result.text == "Hello again."
    sent = fake_openai.requests[-1][1]["messages"]
    assert [m["role"] for m in sent] == ["user", "user"]  # the call without a result is not shown
    messages, _ = await storage.list_messages(thread_id)
    assert any(m.role == "assistant" and "call_h" in str(m.content) for m in messages)  # the thread keeps it


async def test_an_imported_thread_that_uses_a_call_id_twice_goes_on_with_a_strict_model(
    client: Client, storage: Storage, task_queue: str, fake_openai: FakeOpenAI
) -> None:
    """Keel's own runs give a call id a model used again in the thread a suffix (`call_0-2`); messages saved
    into a thread from outside (an import, the memory API) keep theirs. There `call_0` was answered once, then
    left unanswered: the model is shown the answered call only. Before, the ids matched as sets and the
    unanswered call was sent, which OpenAI refuses."""
    from datetime import UTC, datetime, timedelta

    from keel.protocol.messages import Role, ToolCallPart, ToolResultPart
    from keel.storage import StoredMessage

    def saved(n: int, role: Role, content: Any) -> StoredMessage:
        at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n)
        return StoredMessage(id=f"m{n}", thread_id="imported", resource_id="user", role=role, content=content,
                             created_at=at)  # fmt: skip

    call = ToolCallPart(tool_call_id="call_0", tool_name="echo", args={"text": "hi"})
    await storage.create_thread("imported", "user")
    await storage.save_messages(
        [
            saved(1, "user", "echo hi"),
            saved(2, "assistant", [call]),
            saved(3, "tool", [ToolResultPart(tool_call_id="call_0", tool_name="echo", result={"echo": "hi"})]),
            saved(4, "user", "hold on"),
            saved(5, "assistant", [call.model_copy(update={"tool_name": "hold", "args": {}})]),
        ]
    )
    fake_openai.responder = as_strict_as_openai(sse(delta(role="assistant", content="Hello again."), finish("stop")))
    model = OpenAIChatModel("fake-model", base_url=fake_openai.base_url, api_key="sk-test")
    app = App.of(Agent(id="gpt", model=model, tools=(echo, hold)))
    async with running_worker(client, app, storage, task_queue) as keel:
        result = await keel.result(await keel.start_run("gpt", "hello", thread_id="imported", resource_id="user"))
    assert result.text == "Hello again."
    sent = fake_openai.requests[-1][1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user", "user"]
