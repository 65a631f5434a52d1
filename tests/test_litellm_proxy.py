"""Against a real third-party OpenAI-compatible server, LiteLLM's proxy (started here, offline, with a provider of
our own inside it): an error object in the middle of a stream is classified like an HTTP status."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from keel.app import Agent, App
from keel.client import RunFailed
from keel.model_providers import ModelRequest, ModelRequestError, OpenAIChatModel
from keel.protocol import MessageRecord
from keel.storage import Storage
from tests.conftest import free_port, running_worker

HANDLER = '''
import litellm
from litellm import CustomLLM
from litellm.types.utils import GenericStreamingChunk

CALLS: dict[str, int] = {}


def chunk(text, finished=False):
    return GenericStreamingChunk(
        text=text, is_finished=finished, finish_reason="stop" if finished else None, usage=None, index=0,
        tool_use=None,
    )


class Scripted(CustomLLM):
    """`limited`: rate limited in the middle of the first stream, then answers. `broken`: a 400 mid-stream."""

    async def astreaming(self, *args, **kwargs):
        model = kwargs.get("model", "")
        CALLS[model] = CALLS.get(model, 0) + 1
        yield chunk("Hel")
        if "broken" in model:
            raise litellm.BadRequestError(message="no such thing", llm_provider="keel-test", model=model)
        if CALLS[model] == 1:
            raise litellm.RateLimitError(message="slow down", llm_provider="keel-test", model=model)
        yield chunk("lo after a rate limit", finished=True)

    def streaming(self, *args, **kwargs):
        raise NotImplementedError


scripted = Scripted()
'''

CONFIG = """
model_list:
  - model_name: limited
    litellm_params: {model: keel-test/limited}
  - model_name: broken
    litellm_params: {model: keel-test/broken}
litellm_settings:
  custom_provider_map:
    - {"provider": "keel-test", "custom_handler": handler.scripted}
"""


@pytest.fixture(scope="module")
def litellm_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("litellm")
    (root / "handler.py").write_text(HANDLER)
    (root / "config.yaml").write_text(CONFIG)
    port = free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False", "PYTHONPATH": str(root)}
    litellm = Path(sys.executable).parent / "litellm"
    with open(root / "proxy.log", "wb") as log:
        proc = subprocess.Popen(
            [str(litellm), "--config", "config.yaml", "--host", "127.0.0.1", "--port", str(port)],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{base}/health/liveliness", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"LiteLLM proxy did not start: {(root / 'proxy.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield f"{base}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def proxy_app(base_url: str) -> App:
    return App.of(
        *(
            Agent(id=name, model=OpenAIChatModel(name, base_url=base_url, api_key="sk-local"))
            for name in ("limited", "broken")
        )
    )


async def test_a_rate_limit_in_the_middle_of_a_litellm_stream_is_retried(
    client: Client, storage: Storage, task_queue: str, litellm_proxy: str
) -> None:
    async with running_worker(client, proxy_app(litellm_proxy), storage, task_queue) as keel:
        run_id = await keel.start_run("limited", "hi")
        result = await keel.result(run_id)
    assert result.text == "Hello after a rate limit"
    attempts = {e.attempt for e in await storage.read_events(run_id) if e.source == "model:1"}
    assert attempts == {1, 2}  # the first stream broke off with the rate limit; the retry answered


async def test_litellms_mid_stream_errors_are_classified_like_http_statuses(litellm_proxy: str) -> None:
    request = ModelRequest(messages=[MessageRecord(id="m1", role="user", content="hi")])
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    async with OpenAIChatModel("broken", base_url=litellm_proxy, api_key="sk-local") as broken:
        with pytest.raises(ModelRequestError, match="no such thing"):
            await broken.generate(request, on_delta)
    assert deltas == ["Hel"]


async def test_a_bad_request_in_the_middle_of_a_stream_fails_the_run_at_once(
    client: Client, storage: Storage, task_queue: str, litellm_proxy: str
) -> None:
    async with running_worker(client, proxy_app(litellm_proxy), storage, task_queue) as keel:
        run_id = await keel.start_run("broken", "hi")
        with pytest.raises(RunFailed, match="no such thing"):
            await keel.result(run_id)
    assert {e.attempt for e in await storage.read_events(run_id) if e.source == "model:1"} == {1}
