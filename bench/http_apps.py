"""The app `bench/http_api.py` serves: the same agents, tools and definitions `bench/mastra/server.mjs` gives
Mastra's server.

- `bench`: `steps=N` -> N `write_read` calls, then `done: N steps` (bench/apps.py);
- `ticker`: `ticks=K gap=D` -> K text deltas D ms apart, each `<T>`, T the wall-clock epoch ms when the model
  emitted it (so a client in another process measures each delta's delivery latency);
- `approver`: calls `save_note`, which waits for an approval, then answers `saved`;
- the workflow tools `double` and `ask-human` of the stored definitions `three` and `ask`.
"""

from __future__ import annotations

import asyncio
import re
import time

from pydantic import BaseModel

from bench.apps import bench
from keel.app import Agent, App, ToolContext, tool
from keel.model_providers import (
    ChatModel,
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from keel.model_providers.base import OnDelta
from tests.workflows_json.apps import app as workflow_app


class Ticker(ChatModel):
    """K deltas D ms apart, each stamped when it is handed to the run (not when storage takes it)."""

    model_id = "scripted/ticker"

    async def generate(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        text = last_user_text(request)
        ticks = int(m.group(1)) if (m := re.search(r"ticks=(\d+)", text)) else 20
        gap = int(m.group(1)) if (m := re.search(r"gap=(\d+)", text)) else 20
        parts = []
        for i in range(ticks):
            if i:
                await asyncio.sleep(gap / 1000)
            parts.append(f"<{time.time() * 1000:.3f}>")
            await on_delta(parts[-1])
        return ModelResponse(text="".join(parts))


class Note(BaseModel):
    text: str


@tool("save_note", require_approval=True)
async def save_note(args: Note, ctx: ToolContext) -> dict[str, bool]:
    """Save a note (after a person approves)."""
    return {"saved": True}


def approver_script(request: ModelRequest) -> ModelResponse:
    if tool_results_since_last_user(request):
        return ModelResponse(text="saved")
    said = last_user_text(request)
    return ModelResponse(tool_calls=[ModelToolCall(id="call_1", name="save_note", args={"text": said})])


ticker = Agent(id="ticker", name="Ticker", model=Ticker())
approver = Agent(id="approver", name="Approver", model=ScriptedModel(approver_script), tools=(save_note,))
app = App.of(bench, ticker, approver, tools=tuple(workflow_app.tools.values()))
