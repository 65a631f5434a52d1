"""A step's tool calls and the next model call run as one activity: each tool result is stored before the model
is called, a retry of the activity reuses the stored results, and a tool that hangs or gives up becomes a tool
error the model sees instead of failing the step."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
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
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from keel.protocol import MessageRecord, ToolCallPart
from keel.storage import Storage, StoredMessage
from keel.workflows.contracts import (
    ModelStepInput,
    PendingWrites,
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
        self.attempts: dict[str, list[int]] = {}
        self.model_calls = 0
        self.seen: list[list[object]] = []

        @tool("work")
        async def work(args: Arg, ctx: ToolContext) -> str:
            self.runs.append(args.mode)
            self.attempts.setdefault(args.mode, []).append(ctx.attempt)
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
        # Step 1's answer: the calls this step runs (a model is shown a result only with its call).
        calls = [ToolCallPart(tool_call_id=t.tool_call_id, tool_name=t.tool_name, args=t.args) for t in input.tools]
        answer = StoredMessage(
            id="r1-m2",
            thread_id="t1",
            resource_id="u1",
            role="assistant",
            content=list(calls),
            run_id="r1",
            created_at=datetime.now(UTC),
        )
        await self.storage.save_messages([user, answer])
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
    assert result.model is not None and result.model.text == "did a; did b"
    assert h.model_calls == 2


async def test_a_hanging_tool_becomes_a_tool_error_and_the_model_still_runs(storage: Storage) -> None:
    h = Harness(storage)
    result = await h.attempt(1, step_input("hang", "quick", timeout=0.2))
    hung, quick = result.tool_results
    assert hung.is_error and "did not complete within 0.2 s" in hung.result["error"]
    assert (quick.is_error, quick.result) == (False, "did quick")
    assert h.model_calls == 1 and result.model is not None and "did quick" in result.model.text


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


async def test_a_re_executed_step_reuses_stored_results_and_tells_re_run_tools_their_attempt(
    storage: Storage,
) -> None:
    # A local activity lost with its workflow task runs again from scratch, and Temporal says attempt 1 again.
    h = Harness(storage)
    first = asyncio.ensure_future(h.attempt(1, step_input("a", "slow")))
    async with asyncio.timeout(10):
        while await storage.get_messages(["r1-s1-call_0"]) == [] or "slow" not in h.runs:
            await asyncio.sleep(0.01)
    first.cancel()  # the worker is gone: "slow" never stored its result
    with pytest.raises(asyncio.CancelledError):
        await first
    assert h.model_calls == 0

    result = await h.attempt(1, step_input("a", "slow"))
    assert h.runs == ["a", "slow", "slow"]  # "a" finished and was stored: not run again
    assert h.attempts == {"a": [1], "slow": [1, 2]}  # the re-run is told it may have run before
    assert [r.result for r in result.tool_results] == ["did a", "did slow"]
    assert h.model_calls == 1


async def test_a_re_executed_step_says_whether_what_came_with_it_was_heard_by_its_stored_answer(
    storage: Storage,
) -> None:
    """A step executed again after its answer was stored: what came with it that was in the thread then (the
    same writes as the first execution) was heard; a message delivered since was not, and the workflow must
    take one more step for it (and only then: review found every re-executed step with writes taking one)."""
    h = Harness(storage)
    delivered = MessageRecord(id="r1-d-msg-1", role="user", content="also this")
    first_input = step_input("a")
    first_input.model.writes = PendingWrites(messages=[delivered])
    first = await h.attempt(1, first_input)
    assert first.model is not None and not first.model.reused
    again = await h.attempt(1, first_input)  # lost with its workflow task: the same input again
    assert again.model is not None and again.model.reused and not again.model.unheard
    later = MessageRecord(id="r1-d-msg-2", role="user", content="and this, sent while it ran")
    with_more = step_input("a")
    with_more.model.writes = PendingWrites(messages=[delivered, later])
    third = await h.attempt(1, with_more)
    assert third.model is not None and third.model.reused and third.model.unheard
    assert [m.id for m in await storage.get_messages(["r1-d-msg-2"])] == ["r1-d-msg-2"]  # kept for the next step
    assert h.model_calls == 1


async def test_a_re_executed_step_returns_the_model_answer_it_stored_without_asking_again(
    storage: Storage,
) -> None:
    h = Harness(storage)
    first = await h.attempt(1, step_input("a"))
    again = await h.attempt(1, step_input("a"))  # the same step, executed again after a lost workflow task
    assert h.model_calls == 1
    assert again.model is not None and first.model is not None
    assert again.model.reused and not first.model.reused  # the workflow knows the model was not asked again
    assert (
        again.model_copy(update={"model": again.model.model_copy(update={"reused": False, "heard_all": None})}) == first
    )
    assert h.runs == ["a"]


async def test_a_re_executed_model_step_keeps_the_plan_it_stored_though_the_model_would_answer_anew(
    storage: Storage,
) -> None:
    # Real models give fresh tool call ids each time they are asked: asking again after a lost workflow task
    # would plan other calls than the ones whose tools may already have run.
    asked: list[str] = []

    def script(request: ModelRequest) -> ModelResponse:
        asked.append(last_user_text(request))
        return ModelResponse(
            tool_calls=[ModelToolCall(id=f"call_{uuid.uuid4().hex[:8]}", name="work", args={"mode": "a"})]
        )

    @tool("work")
    async def work(args: Arg, ctx: ToolContext) -> str:
        return "ok"

    activities = AgentActivities(App.of(Agent(id="a", model=ScriptedModel(script), tools=(work,))), storage)
    step = ModelStepInput(
        run_id="r1",
        agent_id="a",
        thread_id="t1",
        resource_id="u1",
        step=1,
        message_id="r1-m2",
        execution_id="exec-1",
        writes=PendingWrites(messages=[MessageRecord(id="r1-m1", role="user", content="go")]),
    )
    first = await ActivityEnvironment().run(activities.model_step, step)
    again = await ActivityEnvironment().run(activities.model_step, step)
    assert asked == ["go"]
    assert [c.tool_call_id for c in again.tool_calls] == [c.tool_call_id for c in first.tool_calls]
    [message] = await storage.get_messages(["r1-m2"])
    assert [p.tool_call_id for p in message.content if isinstance(p, ToolCallPart)] == [
        c.tool_call_id for c in first.tool_calls
    ]


def test_step_results_leave_out_only_fields_that_default_to_none() -> None:
    # A compact result drops its None fields: a field that may be None must read back as None when absent.
    from keel.workflows import contracts

    compact = [c for c in vars(contracts).values() if isinstance(c, type) and issubclass(c, contracts.CompactResult)]
    assert {c.__name__ for c in compact} >= {"ModelStepResult", "ToolCallResult", "ToolsThenModelResult"}
    for model in compact:
        for name, field in model.model_fields.items():
            if "None" in str(field.annotation):
                assert field.default is None, f"{model.__name__}.{name} may be None but defaults to {field.default!r}"
    step = contracts.ToolsThenModelResult(
        tool_results=[contracts.ToolCallResult(tool_call_id="c", tool_name="t", result=None)],
        model=contracts.ModelStepResult(message_id="m"),
    )
    assert "null" not in step.model_dump_json()
    assert contracts.ToolsThenModelResult.model_validate_json(step.model_dump_json()) == step
