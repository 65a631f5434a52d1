"""The app `bench/controller.py` runs: one agent, and an AgentController on it, with the scripted model
`bench/mastra/controller_bench.mjs` gives Mastra's AgentController.

- a message starting `tool` makes the model call `note` once (a fresh call id per turn), then answer
  `noted: <result>`; any other message is answered with `TEXT`, streamed in `CHUNK`-character deltas;
- `note` (category `edit`) returns `{"saved": <length of its text>}`; a bare `AgentRun` runs it without asking
  (no `require_approval`), a session once its permission is `allow` (the bench sets it, as Mastra's side does);
- the controller has one mode, `build`, no workspace, no instructions of its own.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from keel import AgentController, Mode
from keel.app import Agent, App, ToolContext, tool
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)

TEXT = "Hello from the scripted model, streamed to the subscriber in small deltas."
CHUNK = 8
"""TEXT is 74 characters: 10 deltas, on both sides."""

AGENT_ID = "ctl-bench"
CONTROLLER_ID = "bench-controller"


class NoteInput(BaseModel):
    text: str


@tool("note")
async def note(args: NoteInput, ctx: ToolContext) -> dict[str, int]:
    """Save a note."""
    return {"saved": len(args.text)}


def script(request: ModelRequest) -> ModelResponse:
    results = tool_results_since_last_user(request)
    if results:
        return ModelResponse(text="noted: " + json.dumps(results[0].result, separators=(",", ":")))
    if last_user_text(request).startswith("tool"):
        turn = sum(1 for m in request.messages if m.role == "user")
        return ModelResponse(tool_calls=[ModelToolCall(id=f"call_note_{turn}", name="note", args={"text": "x"})])
    return ModelResponse(text=TEXT)


agent = Agent(
    id=AGENT_ID,
    name="Controller bench",
    model=ScriptedModel(script, name=AGENT_ID, chunk_size=CHUNK),
    tools=(note,),
)
controller = AgentController(
    CONTROLLER_ID,
    agent,
    modes=[Mode("build", name="Build", default=True)],
    tool_category_resolver={"note": "edit"}.get,
)
app = App.of(agent, controllers=[controller])
