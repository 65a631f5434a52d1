"""A step's tool calls and the next model call run as one activity: each tool result is stored before the model
is called, a retry of the activity reuses the stored results, and a tool that hangs or gives up becomes a tool
error the model sees instead of failing the step."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from keel.activities import AgentActivities
from keel.app import Agent, App, ToolContext, tool
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelRetryableError,
    ScriptedModel,
    tool_results_since_last_user,
)
from keel.storage import Storage, StoredMessage
from keel.workflows.contracts import (
    ModelStepInput,
    ToolCallInput,
    ToolsThenModelInput,
    ToolsThenModelResult,
)


class Arg(BaseModel):
    mode: str


def step_input(*modes: str, timeout: float = 30.0) -> ToolsThenModelInput:
    tools = [
        ToolCallInput(
            run_id="r1",
            agent_id="a",
            thread_id="t1",
            resource_id="u1",
            step=1,
            tool_call_id=f"call_{i}",
            tool_name="work",
            args={"mode": mode},
            result_message_id=f"r1-s1-call_{i}",
        )
        for i, mode in enumerate(modes)
    ]
    model = ModelStepInput(
        run_id="r1",
        agent_id="a",
        thread_id="t1",
        resource_id="u1",
        step=2,
        message_id="r1-m3",
    )
    return ToolsThenModelInput(tools=tools, tool_timeout_seconds=timeout, model=model)


class Harness:
    def __init__(self, storage: Storage, *, model_failures: int = 0) -> None:
        self.storage = storage
        self.runs: list[str] = []
        self.model_calls = 0
        self.seen: list[list[object]] = []

        @tool("work")
        async def work(args: Arg, ctx: ToolContext) -> str:
            self.runs.append(args.mode)
            if args.mode == "hang":
                await asyncio.sleep(30)
            if args.mode == "slow":
                await asyncio.sleep(0.3)
            if args.mode == "give-up":
                raise ApplicationError("the service said no", non_retryable=True)
            if args.mode == "retry-me":
                raise ApplicationError("try again later")
            return f"did {args.mode}"

        def script(request: ModelRequest) -> ModelResponse:
            self.model_calls += 1
            if self.model_calls <= model_failures:
                raise ModelRetryableError("rate limited", status=429, retry_after=0)
            results = tool_results_since_last_user(request)
            self.seen.append([r.result for r in results])
            return ModelResponse(text="; ".join(str(r.result) for r in results))

        app = App.of(Agent(id="a", model=ScriptedModel(script), tools=(work,)))
        self.activities = AgentActivities(app, storage)

    async def attempt(self, n: int, input: ToolsThenModelInput) -> ToolsThenModelResult:
        # What step 1 of the run did: the thread and the user's message.
        await self.storage.create_thread("t1", "u1")
        user = StoredMessage(
            id="r1-m1",
            thread_id="t1",
            resource_id="u1",
            role="user",
            content="go",
            run_id="r1",
            created_at=datetime.now(UTC),
        )
        await self.storage.save_messages([user])
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, attempt=n)
        return await env.run(self.activities.tools_then_model, input)


async def test_a_retried_step_reuses_stored_tool_results_and_runs_the_model_again(storage: Storage) -> None:
    h = Harness(storage, model_failures=1)
    with pytest.raises(ApplicationError, match="rate limited"):
        await h.attempt(1, step_input("a", "b"))
    assert sorted(h.runs) == ["a", "b"]

    result = await h.attempt(2, step_input("a", "b"))
    assert sorted(h.runs) == ["a", "b"]  # not run again
    assert [r.result for r in result.tool_results] == ["did a", "did b"]
    assert result.model.text == "did a; did b"
    assert h.model_calls == 2


async def test_a_hanging_tool_becomes_a_tool_error_and_the_model_still_runs(storage: Storage) -> None:
    h = Harness(storage)
    result = await h.attempt(1, step_input("hang", "quick", timeout=0.2))
    hung, quick = result.tool_results
    assert hung.is_error and "did not complete within 0.2 s" in hung.result["error"]
    assert (quick.is_error, quick.result) == (False, "did quick")
    assert h.model_calls == 1 and "did quick" in result.model.text


async def test_a_tool_that_gives_up_is_reported_to_the_model(storage: Storage) -> None:
    h = Harness(storage)
    result = await h.attempt(1, step_input("give-up"))
    [outcome] = result.tool_results
    assert outcome.is_error and "the service said no" in outcome.result["error"]
    assert h.model_calls == 1


async def test_a_tool_asking_for_a_retry_retries_the_step_without_storing_a_result(storage: Storage) -> None:
    h = Harness(storage)
    with pytest.raises(ApplicationError, match="try again later"):
        await h.attempt(1, step_input("retry-me"))
    assert h.model_calls == 0
    assert await storage.get_messages(["r1-s1-call_0"]) == []


async def test_when_one_tool_asks_for_a_retry_the_others_finish_and_are_kept(storage: Storage) -> None:
    h = Harness(storage)
    with pytest.raises(ApplicationError, match="try again later"):
        await h.attempt(1, step_input("retry-me", "slow"))
    assert [m.id for m in await storage.get_messages(["r1-s1-call_0", "r1-s1-call_1"])] == ["r1-s1-call_1"]
