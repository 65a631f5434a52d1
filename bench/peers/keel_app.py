"""Keel's side of the peers bench: agent `bench` on `keel.OpenAIChatModel` (the fake model server, through
`OPENAI_BASE_URL`), with the tool `write_read` (`bench.peers.shared.write_read_file`, idempotent). Served by
`python worker.py --app bench.peers.keel_app:app` in a process of its own."""

from __future__ import annotations

from pydantic import BaseModel, Field

from bench.peers.shared import INSTRUCTIONS, TOOL_DESCRIPTION, TOOL_NAME, write_read_file
from keel import Agent, App, OpenAIChatModel, ToolContext, tool

MODEL_NAME = "keel-bench"


class WriteReadInput(BaseModel):
    path: str = Field(description="File name (written under the bench directory)")
    content: str = Field(description="What to write")


@tool(TOOL_NAME, description=TOOL_DESCRIPTION, idempotent=True)
async def write_read(args: WriteReadInput, ctx: ToolContext) -> dict[str, int]:
    return {"length": write_read_file(args.path, args.content)}


bench = Agent(
    id="bench",
    instructions=INSTRUCTIONS,
    model=OpenAIChatModel(MODEL_NAME),
    tools=(write_read,),
    max_steps=1000,
)

app = App.of(bench)
