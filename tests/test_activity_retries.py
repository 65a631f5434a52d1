"""A model step executed again (a retry, or a local activity re-run after a lost workflow task) replaces what
its earlier execution wrote instead of adding to it."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.testing import ActivityEnvironment

from keel.activities import AgentActivities
from keel.app import Agent, App
from keel.client.run_events import follow
from keel.model_providers import ChatModel, ModelRequest, ModelResponse, ModelToolCall, ScriptedModel
from keel.model_providers.base import OnDelta
from keel.protocol import MessageRecord, TextPart, ToolCallPart
from keel.storage import Storage
from keel.workflows.contracts import ModelStepInput, PendingWrites
from tests.apps import echo

HI = MessageRecord(id="r1-m1", role="user", content="hi")


def step_input(step: int, message_id: str, writes: list[MessageRecord]) -> ModelStepInput:
    """Step `step` of run r1 (agent a, thread t1), answering as `message_id`, with `writes` to store first."""
    return ModelStepInput(
        run_id="r1", agent_id="a", thread_id="t1", resource_id="u1", step=step, message_id=message_id,
        writes=PendingWrites(messages=writes),
    )  # fmt: skip


class CutOff(ChatModel):
    """Streams its first answer and then hangs, as a worker killed mid-stream leaves it; answers anew after."""

    model_id = "scripted/cut-off"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.streamed = asyncio.Event()

    async def generate(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        self.requests.append(request)
        text = f"answer {len(self.requests)}"
        for i in range(0, len(text), 4):
            await on_delta(text[i : i + 4])
        if len(self.requests) == 1:
            self.streamed.set()
            await asyncio.sleep(3600)
        return ModelResponse(text=text)


async def test_a_model_step_executed_again_after_a_lost_stream_replaces_its_message_and_supersedes_its_events(
    storage: Storage,
) -> None:
    model = CutOff()
    activities = AgentActivities(App.of(Agent(id="a", model=model)), storage)
    step = step_input(1, "r1-m2", [HI])
    env = ActivityEnvironment()  # attempt 1 both times, as for a local activity re-run on another worker
    first = asyncio.ensure_future(env.run(activities.model_step, step))
    await asyncio.wait_for(model.streamed.wait(), 10)
    async with asyncio.timeout(10):  # its deltas reach the event log (written in the background)
        while not [e for e in await storage.read_events("r1") if e.type == "text-delta"]:
            await asyncio.sleep(0.01)
    first.cancel()  # the worker is gone before the step stored an answer
    with pytest.raises(asyncio.CancelledError):
        await first
    second = await env.run(activities.model_step, step)

    assert second.text == "answer 2"
    assert [m.id for m in model.requests[1].messages] == ["r1-m1"]  # not its own earlier answer
    messages, _ = await storage.list_messages("t1")
    assert [m.id for m in messages] == ["r1-m1", "r1-m2"]
    assert messages[1].content == [TextPart(text="answer 2")]
    attempts = {e.attempt for e in await storage.read_events("r1") if e.source == "model:1"}
    assert attempts == {1, 2}
    shown = [s.event.payload["text"] async for s in follow(storage, "r1") if s.event.type == "text-delta"]
    assert "".join(shown) == "answer 2"


async def test_a_model_step_executed_again_after_it_stored_its_answer_returns_it_and_writes_nothing(
    storage: Storage,
) -> None:
    requests: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return ModelResponse(text=f"answer {len(requests)}")

    activities = AgentActivities(App.of(Agent(id="a", model=ScriptedModel(script, chunk_size=4))), storage)
    step = step_input(1, "r1-m2", [HI])
    env = ActivityEnvironment()
    first = await env.run(activities.model_step, step)
    events = await storage.read_events("r1")
    second = await env.run(activities.model_step, step)

    assert second == first.model_copy(update={"reused": True, "heard_all": True})
    assert first.text == "answer 1" and len(requests) == 1
    assert not first.reused  # the workflow is told the second answer is the stored one
    assert await storage.read_events("r1") == events
    messages, _ = await storage.list_messages("t1")
    assert [m.content for m in messages] == ["hi", [TextPart(text="answer 1")]]


async def test_a_message_delivered_after_a_step_answered_stays_unheard_in_every_later_execution(
    storage: Storage,
) -> None:
    """A step answered and stored its answer, then its workflow task was lost (the completion refused because a
    message was delivered meanwhile); each execution after that finds the stored answer and has the delivered
    message among its writes. Every one must say the answer did not hear it, so the run takes a step that does.
    Before, the first of them stored the message and a later one (its worker killed in between) took it as
    heard: the run ended without answering it (chaos seed 63, a `chatter` session: 'say ...-2' never answered)."""
    requests: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return ModelResponse(text=f"answer {len(requests)}")

    activities = AgentActivities(App.of(Agent(id="a", model=ScriptedModel(script, chunk_size=4))), storage)
    step = step_input(1, "r1-m2", [HI])
    env = ActivityEnvironment()
    first = await env.run(activities.model_step, step)
    delivered = MessageRecord(id="r1-delivered-d1", role="user", content="also this")
    again = step_input(1, "r1-m2", [HI, delivered])
    lost = await env.run(activities.model_step, again)  # its workflow task lost with its worker
    last = await env.run(activities.model_step, again)

    assert not first.unheard and lost.unheard and last.unheard and len(requests) == 1
    messages, _ = await storage.list_messages("t1")
    assert [m.content for m in messages].count("also this") == 1


async def test_a_step_that_heard_the_delivered_messages_says_so_when_an_execution_after_it_reuses_its_answer(
    storage: Storage,
) -> None:
    """Chaos seed 65, a `chatter` session: step 1 answered "say 0" and its workflow task was refused (messages 1
    and 2 were delivered meanwhile); the next execution reused step 1 (not hearing 1 and 2), asked the model at
    step 2 (which heard them: "heard say 1 | say 2") and was lost with its worker; the execution after it reused
    both answers, but nothing told it step 2 had heard them, so it asked the model a third time with nothing new
    to hear: the session showed an empty answer. A reused answer now says whether it heard every message in the
    thread before it, and nothing came after it (`heard_all`), so the run ends there."""
    requests: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        said: list[str] = []
        for message in reversed(request.messages):
            if message.role == "assistant":
                break
            said.insert(0, str(message.content))
        return ModelResponse(text="heard " + " | ".join(said))

    activities = AgentActivities(App.of(Agent(id="a", model=ScriptedModel(script, chunk_size=4))), storage)
    said = [MessageRecord(id=f"r1-d{k}", role="user", content=f"say {k}") for k in range(3)]

    def step(n: int, writes: list[MessageRecord]) -> ModelStepInput:
        return step_input(n, f"r1-a{n}", writes)

    env = ActivityEnvironment()
    await env.run(activities.model_step, step(1, said[:1]))  # its workflow task refused: 1 and 2 came
    lost = [await env.run(activities.model_step, step(1, said)), await env.run(activities.model_step, step(2, []))]
    last = [await env.run(activities.model_step, step(1, said)), await env.run(activities.model_step, step(2, []))]

    assert [r.text for r in last] == ["heard say 0", "heard say 1 | say 2"] and len(requests) == 2
    assert lost[0].unheard and last[0].unheard and not last[0].heard_all  # step 1 did not hear 1 and 2
    assert last[1].reused and not last[1].unheard and last[1].heard_all  # step 2 did: the run ends after it

    later = MessageRecord(id="r1-d3", role="user", content="say 3")  # one more, delivered before this execution
    again = await env.run(activities.model_step, step(1, [*said, later]))
    assert again.unheard and not (await env.run(activities.model_step, step(2, []))).heard_all  # 3 is unheard


async def test_tool_call_ids_repeated_within_one_answer_are_made_unique(storage: Storage) -> None:
    def script(request: ModelRequest) -> ModelResponse:
        calls = [ModelToolCall(id="call_0", name="echo", args={"text": str(i)}) for i in range(3)]
        return ModelResponse(tool_calls=calls)

    activities = AgentActivities(App.of(Agent(id="a", model=ScriptedModel(script), tools=(echo,))), storage)
    step = step_input(1, "r1-m2", [HI])
    result = await ActivityEnvironment().run(activities.model_step, step)
    assert [c.tool_call_id for c in result.tool_calls] == ["call_0", "call_0-2", "call_0-3"]
    [_, assistant] = (await storage.list_messages("t1"))[0]
    assert [p.tool_call_id for p in assistant.content if isinstance(p, ToolCallPart)] == [
        "call_0",
        "call_0-2",
        "call_0-3",
    ]
