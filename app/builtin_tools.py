"""Tools every app has, for workflow steps: `ask-human` waits for a person's answer."""

from __future__ import annotations

from pydantic import BaseModel, Field

from keel.app.definitions import Tool, ToolContext, tool


class AskHumanInput(BaseModel):
    question: str = Field(min_length=1, description="What to ask")


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


@tool("ask-human")
async def ask_human(args: AskHumanInput, ctx: ToolContext) -> dict[str, str]:
    """Ask a person: the workflow suspends with `{question}` until resumed with `{answer}`, which it returns."""
    if ctx.resume_data is None:
        ctx.suspend({"question": args.question}, ANSWER_SCHEMA)
    return {"answer": str(ctx.resume_data["answer"])}


BUILTIN_TOOLS: tuple[Tool, ...] = (ask_human,)
