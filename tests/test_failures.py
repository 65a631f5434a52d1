"""One table decides how each domain error reaches Temporal; activities raise through it."""

from __future__ import annotations

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from keel.activities import AgentActivities
from keel.activities.failures import FAILURES, application_error
from keel.app import Agent, App, UnknownAgent, UnknownTool
from keel.model_providers import ModelError, ModelRequestError, ModelRetryableError, OpenAIChatModel
from keel.protocol import MessageRecord
from keel.storage import Storage, StorageUnavailable, ThreadNotFound
from keel.workflows.contracts import ModelStepInput, PendingWrites, ToolCallInput, ToolsThenModelInput
from tests.apps import app as test_app


@pytest.mark.parametrize(
    ("err", "type_", "retryable"),
    [
        (UnknownAgent("x", ["demo"]), "UnknownAgent", False),
        (UnknownTool("t", "demo"), "UnknownTool", False),
        (ModelRetryableError("429", retry_after=3), "ModelRetryableError", True),
        (ModelRequestError("400"), "ModelRequestError", False),
        (ModelError("not JSON"), "ModelResponseError", False),
        (ThreadNotFound("t1"), "ThreadNotFound", False),
        (StorageUnavailable("down"), "StorageUnavailable", True),
    ],
)
def test_each_domain_error_gets_its_type_and_retryability(err: Exception, type_: str, retryable: bool) -> None:
    mapped = application_error(err)
    assert mapped is not None and (mapped.type, mapped.non_retryable) == (type_, not retryable)


def test_the_table_lists_each_exception_once_and_every_row_is_reachable() -> None:
    classes = [row.exception for row in FAILURES]
    assert len(classes) == len(set(classes))
    for i, row in enumerate(FAILURES):  # no row is shadowed by a more general one above it
        assert not any(issubclass(row.exception, earlier) for earlier in classes[:i]), row


def model_input(thread_id: str) -> ModelStepInput:
    return ModelStepInput(
        run_id="r1", agent_id="multi", thread_id=thread_id, resource_id="u1", step=2, message_id="r1-m2",
        writes=PendingWrites(messages=[MessageRecord(id="r1-m1", role="user", content="steps=1")]),
    )  # fmt: skip


async def test_writing_to_a_thread_that_does_not_exist_fails_without_retries(storage: Storage) -> None:
    step = ToolsThenModelInput(
        tools=[
            ToolCallInput(
                run_id="r1",
                agent_id="multi",
                thread_id="missing",
                resource_id="u1",
                step=1,
                tool_call_id="c1",
                tool_name="echo",
                args={"text": "x"},
                result_message_id="r1-s1-c1",
            )
        ],
        tool_timeout_seconds=5,
        model=model_input("missing"),
    )
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(AgentActivities(test_app, storage).tools_then_model, step)
    assert (caught.value.type, caught.value.non_retryable) == ("ThreadNotFound", True)


async def test_a_malformed_model_answer_is_a_response_error_not_a_request_error(storage: Storage) -> None:
    garbage = httpx.MockTransport(lambda request: httpx.Response(200, text="data: {nope\n\n"))
    model = OpenAIChatModel("m", base_url="http://model.test/v1", api_key="k", transport=garbage)
    app = App.of(Agent(id="multi", model=model))
    await storage.create_thread("t1", "u1")
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(AgentActivities(app, storage).model_step, model_input("t1"))
    assert (caught.value.type, caught.value.non_retryable) == ("ModelResponseError", True)


async def test_a_tool_gone_since_the_step_planned_it_is_an_error_for_the_model(storage: Storage) -> None:
    call = ToolCallInput(
        run_id="r1", agent_id="multi", thread_id="t1", resource_id="u1", step=1,
        tool_call_id="c1", tool_name="removed_tool", args={}, result_message_id="r1-s1-c1",
    )  # fmt: skip
    result = await ActivityEnvironment().run(AgentActivities(test_app, storage).tool_call, call)
    assert result.is_error and "has no tool 'removed_tool'" in result.result["error"]
