"""The app the HTTP API tests serve: the test agents (`tests.apps`), the definition tools and classifiers, and
a code workflow."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from keel.app import Agent, App, ToolContext, tool
from keel.model_providers import ModelRequest, ModelResponse, ModelToolCall, ScriptedModel, tool_results_since_last_user
from tests.apps import app as test_app
from tests.apps import pay
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

app = App(
    agents={**test_app.agents, slow_payer.id: slow_payer},
    tools=dict(test_app.tools),
    classifiers=dict(test_app.classifiers),
    workflows=(Release,),
)
