"""The app of the tracing tests (tests/test_tracing.py), in-process and in a worker process: an agent on the
OpenAI-compatible provider whose tool needs approval (its server and key from `OPENAI_BASE_URL` and
`OPENAI_API_KEY`), a scripted agent whose tool fails, and (`scribe_app`) one that writes a file in a workspace."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from keel.app import Agent, App, ToolContext, tool
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    OpenAIChatModel,
    ScriptedModel,
    tool_results_since_last_user,
)
from keel.workspace_providers import WORKSPACE_TOOLS, LocalFilesystem, Workspace


class ShipInput(BaseModel):
    item: str


@tool("ship", require_approval=True)
async def ship(args: ShipInput, ctx: ToolContext) -> dict[str, str]:
    """Ship an item."""
    return {"shipped": args.item}


class FuseInput(BaseModel):
    fuse: str


@tool("explode")
async def explode(args: FuseInput, ctx: ToolContext) -> dict[str, str]:
    """Fail, always."""
    raise ValueError(f"the {args.fuse} fuse was lit")


def fails_script(request: ModelRequest) -> ModelResponse:
    """Call `explode` once, then report what it answered."""
    results = tool_results_since_last_user(request)
    if not results:
        return ModelResponse(
            text="", tool_calls=[ModelToolCall(id="call_boom", name="explode", args={"fuse": "short"})]
        )
    return ModelResponse(text=f"It failed: {results[-1].result}")


gpt = Agent(id="gpt", instructions="Be brief.", model=OpenAIChatModel("fake-model"), tools=(ship,))
fails = Agent(id="fails", model=ScriptedModel(fails_script, name="fuse"), tools=(explode,))
app = App.of(gpt, fails)


def scribe_script(request: ModelRequest) -> ModelResponse:
    """Write `notes/today.md` in the workspace, then say so."""
    if not tool_results_since_last_user(request):
        args = {"path": "notes/today.md", "content": "tracing works"}
        return ModelResponse(
            tool_calls=[ModelToolCall(id="call_write", name=WORKSPACE_TOOLS.FILESYSTEM.WRITE_FILE, args=args)]
        )
    return ModelResponse(text="Written.")


def scribe_app(root: Path) -> App:
    workspace = Workspace(id="scribe-ws", filesystem=LocalFilesystem(root))
    return App.of(Agent(id="scribe", model=ScriptedModel(scribe_script, name="scribe"), workspace=workspace))
