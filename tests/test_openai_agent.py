"""An agent on the OpenAI-compatible provider, against a real HTTP server on loopback speaking the API."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from temporalio.client import Client

from keel.app import Agent, App
from keel.client import RunFailed
from keel.client.devserver import DevServer
from keel.model_providers import OpenAIChatModel
from keel.storage import Storage
from tests.apps import echo
from tests.conftest import running_worker
from tests.test_temporal_cli import ui_api


class FakeOpenAI(ThreadingHTTPServer):
    """Answers /v1/chat/completions from a queue of (status, headers, body) replies and records requests."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies: list[tuple[int, dict[str, str], bytes]] = []
        self.requests: list[tuple[float, dict[str, Any]]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: FakeOpenAI

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append((time.monotonic(), body))
        status, headers, payload = self.server.replies.pop(0)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


def sse(*chunks: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return 200, {"content-type": "text/event-stream"}, data.encode()


def delta(**d: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def finish(reason: str, prompt: int = 10, completion: int = 5) -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


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
