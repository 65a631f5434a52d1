"""A model server that is down and then flaky (the chaos run's `model-kill`: a proxy restarting for a minute,
then answering two calls in five with a 429 or a broken stream) costs a run time, not its answer: the model step's
retries are bounded by about ten minutes of waiting, not by a handful of attempts an outage uses up."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client

from keel.app import Agent, App
from keel.model_providers import ModelRequest, ModelResponse, ModelRetryableError, ScriptedModel
from keel.storage import Storage
from keel.workflows.options import DEFAULT_OPTIONS
from tests.conftest import running_worker

FAILURES = 14
"""Calls that fail before the model answers: more than the 10 attempts (plus the local one) the step had."""


async def test_a_model_step_outlasts_a_model_server_down_and_flaky_for_more_attempts_than_it_used_to_have(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    calls: list[int] = []

    def down_then_flaky(request: ModelRequest) -> ModelResponse:
        calls.append(1)
        if len(calls) <= FAILURES:
            raise ModelRetryableError("Connection refused" if len(calls) < 8 else "slow down", retry_after=0.01)
        return ModelResponse(text="answered at last")

    agent = Agent(id="patient", model=ScriptedModel(down_then_flaky, name="patient"))
    # The default policy's attempts, its intervals cut to milliseconds so the test does not wait ten minutes.
    fast = dataclasses.replace(
        DEFAULT_OPTIONS.model_retry,
        initial_interval=timedelta(milliseconds=10),
        maximum_interval=timedelta(milliseconds=100),
    )
    options = dataclasses.replace(DEFAULT_OPTIONS, model_retry=fast)
    async with running_worker(client, App.of(agent), storage, task_queue, options=options) as keel:
        result = await keel.result(await keel.start_run("patient", "hello"))
    assert result.text == "answered at last"
    assert len(calls) == FAILURES + 1
