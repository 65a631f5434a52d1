"""Mastra's OpenAI-compatible Responses and Conversations routes, driven by the official `openai` SDK, unmodified:
an agent as the model, streamed and not; stored responses retrieved, chained and deleted; conversations as
threads. Every response is an `AgentRun` the Temporal client sees, under the response's id."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI, BadRequestError, NotFoundError

from keel.client.api.auth import required_scope
from tests.http_api.conftest import Api


@pytest.fixture
async def openai(api: Api) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=f"{api.url}/api/v1", api_key="x", max_retries=0) as client:
        yield client


async def test_a_response_is_an_agent_run_answered_whole_or_streamed(api: Api, openai: AsyncOpenAI) -> None:
    whole = await openai.responses.create(model="writer", input="hello there")
    assert whole.status == "completed" and whole.output_text == "draft: hello there"
    assert whole.model == "writer" and whole.usage is not None and whole.usage.output_tokens > 0
    assert (await api.keel.describe(whole.id)).status == "completed"
    with pytest.raises(NotFoundError):  # not stored (Mastra's default): nothing to retrieve
        await openai.responses.retrieve(whole.id)

    said = "a message long enough to reach the client in several deltas"
    async with openai.responses.stream(model="slow_writer", input=said) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == final.output_text == f"draft: {said}"
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))

    raw = await openai.responses.create(model="writer", input="raw events", stream=True)
    text = "".join([e.delta async for e in raw if e.type == "response.output_text.delta"])
    assert text == "draft: raw events"


async def test_stored_responses_chain_and_are_retrieved_and_deleted(api: Api, openai: AsyncOpenAI) -> None:
    first = await openai.responses.create(model="listener", input="first", store=True)
    second = await openai.responses.create(model="listener", input="second", previous_response_id=first.id, store=True)
    assert second.output_text == "heard: first | second"
    assert second.previous_response_id == first.id
    conversation = (first.model_extra or {})["conversation_id"]
    assert conversation and (second.model_extra or {})["conversation_id"] == conversation

    retrieved = await openai.responses.retrieve(second.id)
    assert retrieved.model_dump() == second.model_dump()

    await openai.responses.delete(first.id)
    with pytest.raises(NotFoundError):
        await openai.responses.retrieve(first.id)
    with pytest.raises(NotFoundError):
        await openai.responses.create(model="listener", input="again", previous_response_id=first.id)
    third = await openai.responses.create(model="listener", input="third", previous_response_id=second.id)
    assert third.output_text == "heard: second | third"  # the deleted turn is out of the conversation


async def test_tool_calls_are_function_call_items_and_an_approval_leaves_the_response_incomplete(
    api: Api, openai: AsyncOpenAI
) -> None:
    async with openai.responses.stream(model="multi", input="steps=2") as stream:
        called = [
            e.item.call_id
            async for e in stream
            if e.type == "response.output_item.done" and e.item.type == "function_call"
        ]
        stepped = await stream.get_final_response()
    assert called == ["call_1", "call_2"] and stepped.output_text == "step 1step 2done after 2 tool calls"
    assert [o.type for o in stepped.output] == ["message", "function_call", "function_call_output"] * 2 + ["message"]

    waiting = await openai.responses.create(model="payer", input="pay", store=True)
    assert waiting.status == "incomplete"
    assert [(o.type, getattr(o, "call_id", None)) for o in waiting.output] == [
        ("function_call", "small"),
        ("function_call", "large"),
    ]
    async with httpx.AsyncClient(base_url=api.url) as http:  # decided as any run: the response id is its run id
        decided = await http.post(
            "/api/agents/payer/approve-tool-call-generate", json={"runId": waiting.id, "toolCallId": "large"}
        )
    assert decided.status_code == 200
    done = await openai.responses.retrieve(waiting.id)
    assert done.status == "completed" and "large={'paid': 500}" in done.output_text
    outputs = [o for o in done.output if o.type == "function_call_output"]
    assert {o.call_id: o.output for o in outputs} == {"small": '{"paid":5}', "large": '{"paid":500}'}


async def test_a_conversation_is_a_thread_its_items_the_messages(api: Api, openai: AsyncOpenAI) -> None:
    conversation = await openai.conversations.create(metadata={"topic": "greetings"})
    assert conversation.metadata == {"topic": "greetings"}
    assert (await api.storage.get_thread(conversation.id)) is not None
    one = await openai.responses.create(model="listener", input="one", conversation=conversation.id)
    two = await openai.responses.create(model="listener", input="two", conversation={"id": conversation.id})
    assert (one.output_text, two.output_text) == ("heard: one", "heard: one | two")

    page = await openai.conversations.items.list(conversation.id)
    said = [(i.role, getattr(i.content[0], "text", None)) for i in page.data if i.type == "message"]
    assert said == [
        ("user", "one"),
        ("assistant", "heard: one"),
        ("user", "two"),
        ("assistant", "heard: one | two"),
    ]
    assert page.data[-1].id == two.output[-1].id  # a response's message is the conversation's item
    assert (await openai.conversations.retrieve(conversation.id)).id == conversation.id
    mastra = await api.js(  # the same conversation through `@mastra/client-js`, in Mastra's own parameters
        """
        const three = await client.responses.create({agent_id: "listener", conversation_id: vars.id, input: "three"});
        const items = await client.conversations.items.list(vars.id);
        return {text: three.output_text, conversation: three.conversation_id, items: items.data.length};
        """,
        id=conversation.id,
    )
    assert mastra == {"text": "heard: one | two | three", "conversation": conversation.id, "items": 6}

    deleted = await openai.conversations.delete(conversation.id)
    assert deleted.deleted is True
    with pytest.raises(NotFoundError):
        await openai.conversations.retrieve(conversation.id)
    with pytest.raises(NotFoundError):
        await openai.responses.create(model="listener", input="four", conversation=conversation.id)


async def test_responses_at_once_in_one_conversation_list_items_of_unique_ids_the_sdk_pages_through(
    api: Api, openai: AsyncOpenAI
) -> None:
    """Found from outside: runs at once on one thread each name their calls `call_1`, `call_2` (a model may
    repeat ids; Keel renames a repeat only once the earlier call is in the thread). A function call's item id is
    its call id, as in Mastra: the list held duplicate ids, and the SDK, paging `after` one, looped for good."""
    conversation = await openai.conversations.create()
    said = await asyncio.gather(
        *(openai.responses.create(model="multi", input="steps=2", conversation=conversation.id) for _ in range(3))
    )
    assert [r.status for r in said] == ["completed"] * 3
    whole = (await openai.conversations.items.list(conversation.id, limit=100)).data
    ids: list[str] = []
    async for item in openai.conversations.items.list(conversation.id, limit=1):
        ids.append(str(item.id))
        assert len(ids) <= len(whole), "the pages never end"
    assert ids == [i.id for i in whole] and len(set(ids)) == len(ids)
    calls = sorted(str(i.call_id) for i in whole if i.type == "function_call")
    assert len(calls) >= 3 and calls == sorted(str(i.call_id) for i in whole if i.type == "function_call_output")


async def test_an_assistant_message_given_as_input_is_not_the_responses_output(api: Api, openai: AsyncOpenAI) -> None:
    """Found from outside: the output was every assistant message of the run, its input's included, so an
    earlier turn given as input came back first in `output` and `output_text` (125 of 500 mixed inputs)."""
    given: Any = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "EARLIER TURN"},
        {"role": "user", "content": "two"},
    ]
    for store in (False, True):
        answered = await openai.responses.create(model="listener", input=given, store=store)
        assert answered.output_text == "heard: one | two", answered.output_text
        assert [o.type for o in answered.output] == ["message"]
        if store:
            again = await openai.responses.retrieve(answered.id)
            assert again.output_text == "heard: one | two" and len(again.output) == 1


async def test_caller_mistakes_are_answered_with_a_4xx_in_mastras_error_shape(api: Api, openai: AsyncOpenAI) -> None:
    with pytest.raises(NotFoundError) as unknown:
        await openai.responses.create(model="nope", input="hi")
    assert unknown.value.response.json() == {"error": "Agent with id nope not found"}
    with pytest.raises(BadRequestError) as bad:
        await openai.responses.create(
            model="writer", input="hi", extra_body={"input": [{"role": "robot", "content": "hi"}]}
        )
    assert bad.value.response.json()["error"] == "Invalid request body"
    with pytest.raises(BadRequestError) as other_model:
        await openai.responses.create(model="gpt-4o", input="hi", extra_body={"agent_id": "writer"})
    assert "runs its own model" in other_model.value.response.json()["error"]
    with pytest.raises(NotFoundError) as missing:
        await openai.responses.retrieve("resp-missing")
    assert missing.value.response.json() == {"error": "Stored response resp-missing was not found"}
    async with httpx.AsyncClient(base_url=api.url) as http:
        no_agent = await http.post("/api/v1/responses", json={"input": "hi"})
        no_conversation = await http.get("/api/v1/conversations/none/items")
    assert no_agent.status_code == 400 and "agent_id is required" in no_agent.json()["error"]
    assert no_conversation.status_code == 404 and no_conversation.json() == {"error": "Conversation none was not found"}


def test_the_openai_routes_need_the_agents_scopes_as_mastras_permissions_say() -> None:
    assert required_scope("POST", "/api/v1/responses") == "agents:write"
    assert required_scope("GET", "/api/v1/conversations/c1/items") == "agents:read"
    assert required_scope("DELETE", "/api/v1/responses/r1") == "agents:write"
