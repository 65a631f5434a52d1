"""The app the HTTP API tests serve: the test agents (`tests.apps`), the definition tools and classifiers, a
code workflow, and the test AgentController (`tests.controller.apps`) with chat channels for its webhooks."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from pydantic import BaseModel

from keel.app import Agent, App, ToolContext, tool
from keel.app.controller import ChannelMessage, Channels
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from tests.apps import app as test_app
from tests.apps import pay
from tests.controller.apps import controller
from tests.http_api.vector_app import VECTORS
from tests.http_api.vector_app import WORKSPACES as VECTOR_WORKSPACES
from tests.http_api.workspace_app import AGENTS as WORKSPACE_AGENTS
from tests.workflows_json.code_workflows import Release


class PauseInput(BaseModel):
    seconds: float


@tool("pause")
async def pause(args: PauseInput, ctx: ToolContext) -> dict[str, float]:
    """Wait a while, then say how long."""
    await asyncio.sleep(args.seconds)
    return {"paused": args.seconds}


def slow_pay_script(request: ModelRequest) -> ModelResponse:
    """Pause 2 s, then pay 500 (which waits for an approval), then report."""
    done = tool_results_since_last_user(request)
    if not done:
        return ModelResponse(tool_calls=[ModelToolCall(id="pause", name="pause", args={"seconds": 2})])
    if len(done) == 1:
        return ModelResponse(tool_calls=[ModelToolCall(id="large", name="pay", args={"amount": 500})])
    return ModelResponse(text=", ".join(f"{r.tool_call_id}={r.result}" for r in done))


slow_payer = Agent(id="slow_payer", model=ScriptedModel(slow_pay_script, name="slow_payer"), tools=(pause, pay))


def slow_writer_script(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text=f"draft: {last_user_text(request)}")


slow_writer = Agent(
    id="slow_writer", model=ScriptedModel(slow_writer_script, name="slow_writer", chunk_size=8, delay=0.02)
)
"""The writer's answer, streamed 8 characters every 20 ms: each delta reaches the event log, and a client, apart."""

STARTED: list[tuple[str, str]] = []
"""(session id, chat thread) of each channel session's `on_session_start` (the API runs in the test's process)."""


async def on_session_start(session: Any, message: ChannelMessage) -> None:
    STARTED.append((session.id, message.thread_id))
    if message.text.startswith("explode"):
        raise RuntimeError("on_session_start failed (on purpose)")


def chatops(body: dict[str, Any]) -> ChannelMessage | None:
    """A platform whose events are `{channel, message, user}` and that shows approval buttons; `{ping: true}`
    events are not messages."""
    if body.get("ping"):
        return None
    return ChannelMessage(platform="chatops", thread_id=body["channel"], text=body["message"], user_id=body.get("user"))


channels = Channels(
    adapters={"chatops": chatops},
    resolve_resource_id=lambda message, default: f"user:{message.user_id}" if message.user_id else default,
    on_session_start=on_session_start,
    can_approve=("chatops",),
)

app = App(
    agents={**test_app.agents, slow_payer.id: slow_payer, slow_writer.id: slow_writer, **WORKSPACE_AGENTS},
    tools=dict(test_app.tools),
    classifiers=dict(test_app.classifiers),
    workflows=(Release,),
    controllers={controller.id: dataclasses.replace(controller.definition, channels=channels)},
    workspaces=VECTOR_WORKSPACES,
    vectors=VECTORS,
)
