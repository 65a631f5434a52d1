"""The bundled demo app: agent `demo` on a scripted model, so everything runs without an LLM key.

Its first step calls `save_note`, which requires approval. Approved, the note is written and the final text
quotes the tool's result; declined, the tool never runs and the final text says so.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from pydantic import BaseModel, Field

from keel.app.definitions import Agent, App, ToolContext, tool
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from keel.protocol.settings import load_settings


class NoteInput(BaseModel):
    title: str = Field(min_length=1, max_length=80, description="A short title; becomes the file name")
    text: str = Field(description="The note's body")


def notes_dir() -> Path:
    return load_settings().data_dir / "notes"


@tool("save_note", require_approval=True)
async def save_note(args: NoteInput, ctx: ToolContext) -> dict[str, object]:
    """Save a note to the notes folder."""
    slug = re.sub(r"[^a-zA-Z0-9_-]+", "-", args.title).strip("-") or "note"
    path = notes_dir() / f"{slug}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{ctx.tool_call_id}.tmp")
    tmp.write_text(args.text)
    tmp.replace(path)  # atomic: a crash never leaves a half-written note
    digest = hashlib.sha256(args.text.encode()).hexdigest()[:12]
    return {"path": str(path), "bytes": len(args.text.encode()), "sha256": digest}


def demo_script(request: ModelRequest) -> ModelResponse:
    results = tool_results_since_last_user(request)
    if not results:
        text = last_user_text(request) or "hello"
        return ModelResponse(
            text="I'll save that as a note.",
            tool_calls=[ModelToolCall(id="call_1", name="save_note", args={"title": "demo", "text": text})],
        )
    last = results[-1]
    if last.denied:
        return ModelResponse(text="The save_note call was declined, so I did not save the note.")
    if last.is_error:
        return ModelResponse(text=f"Saving the note failed: {last.result}")
    return ModelResponse(text=f"Saved your note. Tool result: {json.dumps(last.result)}")


demo = Agent(
    id="demo",
    name="Demo agent",
    description="Saves what you say as a note, after you approve it.",
    instructions="Save the user's message as a note.",
    model=ScriptedModel(demo_script, name="demo"),
    tools=(save_note,),
)

app = App.of(demo)
