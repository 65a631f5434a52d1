"""The bench agent: `bench` on a `ScriptedModel` that calls `write_read` once per step.

The user message is ``steps=N``. Each model step counts the tool results since the last user message; while
there are fewer than N it calls `write_read` (call id ``call_<k>``), then it answers with text. So a run makes
N+1 model steps and N tool calls; start it with ``max_steps=N+1``.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from keel.app.definitions import Agent, App, ToolContext, tool
from keel.app.demo import demo
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)

_STEPS = re.compile(r"steps\s*=\s*(\d+)")
_dirs: dict[str, Path] = {}


def bench_dir() -> Path:
    """Where `write_read` writes: $KEEL_BENCH_DIR (created on first use), else a temp dir made once."""
    key = os.environ.get("KEEL_BENCH_DIR", "")
    found = _dirs.get(key)
    if found is None:
        found = Path(key) if key else Path(tempfile.mkdtemp(prefix="keel-bench-files-"))
        found.mkdir(parents=True, exist_ok=True)
        _dirs[key] = found
    return found


def write_read_file(path: str, content: str) -> int:
    """The tool's work, shared with the bare baseline: write a small file, read it back, return its length."""
    target = bench_dir() / Path(path).name
    target.write_text(content)
    return len(target.read_text())


class WriteReadInput(BaseModel):
    path: str = Field(description="File name (written under the bench directory)")
    content: str = Field(description="What to write")


@tool("write_read")
async def write_read(args: WriteReadInput, ctx: ToolContext) -> dict[str, int]:
    """Write a small file, read it back and return its length."""
    return {"length": write_read_file(args.path, args.content)}


def decide(steps: int, done: int) -> ModelToolCall | None:
    """The scripted decision after `done` tool results: the next call, or None to answer."""
    if done >= steps:
        return None
    k = done + 1
    return ModelToolCall(
        id=f"call_{k}", name="write_read", args={"path": f"step-{k}.txt", "content": f"step {k} of {steps}"}
    )


def bench_script(request: ModelRequest) -> ModelResponse:
    match = _STEPS.search(last_user_text(request))
    steps = int(match.group(1)) if match else 1
    done = len(tool_results_since_last_user(request))
    call = decide(steps, done)
    if call is None:
        return ModelResponse(text=f"done: {done} steps")
    return ModelResponse(tool_calls=[call])


bench = Agent(
    id="bench",
    name="Bench agent",
    description="Calls write_read once per step, N times (message 'steps=N').",
    model=ScriptedModel(bench_script, name="bench"),
    tools=(write_read,),
    max_steps=1000,
)

app = App.of(bench, demo)
