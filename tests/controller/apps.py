"""The controllers the session tests run: a scripted model that answers from the conversation, so each test
says what it wants in its message (`text`, `tool NAME ARGS`, `probe {NAME: ARGS}`, `ask`, `plan`, `sub TYPE`)."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from keel import AgentController, Mode, Subagent
from keel.app import Agent, App, ToolContext, tool
from keel.app.controller import Category
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from keel.workspace_providers import LocalFilesystem, Workspace


class Note(BaseModel):
    text: str


def _data_dir() -> Path:
    return Path(os.environ.get("KEEL_DATA_DIR", ".keel"))


def _ran(name: str, text: str) -> dict[str, Any]:
    """What the permission tests' tools do: say in `ran.log` that they ran (so a test sees a call that ran)."""
    root = _data_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "ran.log", "a") as f:
        f.write(f"{name} {text}\n")
    return {"ran": name, "text": text}


@tool("save_note")
async def save_note(args: Note, ctx: ToolContext) -> dict[str, Any]:
    """Save a note (a custom tool: category `edit`)."""
    root = _data_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "notes.log", "a") as f:
        f.write(f"{args.text}\n")
    _ran("save_note", args.text)
    return {"saved": args.text}


@tool("search_docs")
async def search_docs(args: Note, ctx: ToolContext) -> dict[str, Any]:
    """Search the docs (a controller tool: category `read`)."""
    _ran("search_docs", args.text)
    return {"found": f"docs about {args.text}"}


@tool("run_check")
async def run_check(args: Note, ctx: ToolContext) -> dict[str, Any]:
    """Run the project's checks (a controller tool: category `execute`)."""
    return _ran("run_check", args.text)


@tool("mcp_lookup")
async def mcp_lookup(args: Note, ctx: ToolContext) -> dict[str, Any]:
    """Look something up on an MCP server (a controller tool: category `mcp`)."""
    return _ran("mcp_lookup", args.text)


@tool("misc_ping")
async def misc_ping(args: Note, ctx: ToolContext) -> dict[str, Any]:
    """Ping (a controller tool: category `other`)."""
    return _ran("misc_ping", args.text)


@tool("free_echo")
async def free_echo(args: Note, ctx: ToolContext) -> dict[str, Any]:
    """Echo (a controller tool the resolver does not categorise)."""
    return _ran("free_echo", args.text)


def probe(request: ModelRequest, said: str) -> ModelResponse:
    """`probe {"NAME": {ARGS}, ...}`: call each tool at once (`probe {}`: none), then answer with a JSON report of
    the tool names the model was offered and what each call gave back."""
    results = tool_results_since_last_user(request)
    calls = json.loads(said.split(" ", 1)[1]) if " " in said else {}
    if calls and not results:
        return ModelResponse(
            tool_calls=[ModelToolCall(id=f"probe_{i}", name=n, args=a) for i, (n, a) in enumerate(calls.items(), 1)]
        )
    report = {
        "offered": sorted(t.name for t in request.tools),
        "results": {r.tool_name: {"result": r.result, "isError": r.is_error, "denied": r.denied} for r in results},
    }
    return ModelResponse(text=json.dumps(report, sort_keys=True))


def script(request: ModelRequest) -> ModelResponse | Awaitable[ModelResponse]:
    """`text X` answers X; `tool NAME {json}` calls NAME (one call per turn, then says what came back);
    `slowtool NAME {json}`: the same, its step taking 3 s (each ask noted in slow.log: a step a worker can be
    killed under);
    `tools NAME NAME ...` calls each; `probe {...}`: see `probe`; `ask`: ask_user; `plan PATH`: submit_plan;
    `sub TYPE TASK`: a subagent; `longsub N`: one whose call id is N + 4 characters (`longfork N`: forked);
    `bignote N`: save_note of N KiB."""
    said = last_user_text(request)
    if said.startswith("probe"):
        return probe(request, said)
    results = tool_results_since_last_user(request)
    if results:
        return ModelResponse(text="got: " + " | ".join(json.dumps(r.result, sort_keys=True) for r in results))
    if said.startswith("Goal:"):  # the goal's judge: met when the objective says "finish"
        done = "finish" in said.split("\n")[0]
        return ModelResponse(text=json.dumps({"done": done, "reason": "finished" if done else "keep going"}))
    words = said.split(" ", 2)
    kind = words[0]
    if kind == "tool":
        args = json.loads(words[2]) if len(words) > 2 else {}
        return ModelResponse(tool_calls=[ModelToolCall(id="call_1", name=words[1], args=args)])
    if kind == "slowtool":
        return _slowly(ModelResponse(tool_calls=[ModelToolCall(id="call_1", name=words[1], args=json.loads(words[2]))]))
    if kind == "tools":
        names = said.split()[1:]
        calls = [ModelToolCall(id=f"call_{i}", name=n, args={"text": n}) for i, n in enumerate(names, 1)]
        return ModelResponse(tool_calls=calls)
    if kind == "ask":
        args = {"question": "Which database?", "options": [{"label": "SQLite"}, {"label": "PostgreSQL"}]}
        return ModelResponse(tool_calls=[ModelToolCall(id="ask_1", name="ask_user", args=args)])
    if kind == "plan":
        return ModelResponse(tool_calls=[ModelToolCall(id="plan_1", name="submit_plan", args={"path": words[1]})])
    if kind == "sub":
        args = {"agentType": words[1], "task": words[2] if len(words) > 2 else "look around"}
        return ModelResponse(tool_calls=[ModelToolCall(id="sub_1", name="subagent", args=args)])
    if kind == "bignote":  # save_note of N KiB of "x", from a short message: `bignote N`
        args = {"text": "x" * (int(words[1]) * 1024)}
        return ModelResponse(tool_calls=[ModelToolCall(id="call_1", name="save_note", args=args)])
    if kind in ("longsub", "longfork"):  # a subagent call whose id is as long as asked (forked: `longfork N`)
        args = {"agentType": "explore", "task": "look around", "forked": kind == "longfork"}
        return ModelResponse(tool_calls=[ModelToolCall(id="sub_" + "x" * int(words[1]), name="subagent", args=args)])
    if kind == "subs":
        calls = [
            ModelToolCall(id="sub_1", name="subagent", args={"agentType": "explore", "task": "look one"}),
            ModelToolCall(id="sub_2", name="subagent", args={"agentType": "explore", "task": "look two"}),
            ModelToolCall(
                id="sub_3", name="subagent", args={"agentType": "explore", "task": "history", "forked": True}
            ),
        ]
        return ModelResponse(tool_calls=calls)
    if kind == "history":  # what a forked subagent sees: the parent's conversation
        return ModelResponse(text=" / ".join(str(m.content) for m in request.messages if m.role == "user"))
    if kind == "instructions":
        return ModelResponse(text=request.instructions)
    if kind == "offered":
        return ModelResponse(text=",".join(sorted(t.name for t in request.tools)))
    if kind == "look":  # a subagent's task: a slow look around, so parallel ones overlap
        return ModelResponse(text=f"echo: {said}")
    return ModelResponse(text=f"echo: {said}")


async def _slowly(response: ModelResponse) -> ModelResponse:
    root = _data_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "slow.log", "a") as f:
        f.write("asked\n")
    await asyncio.sleep(3)
    return response


WORKSPACE_DIR = Path(tempfile.gettempdir()) / f"keel-tests-controller-{os.getpid()}"

agent = Agent(
    id="assistant",
    model=ScriptedModel(script, name="controller", chunk_size=4),
    instructions="Agent instructions.",
    tools=(save_note,),
)


class SessionState(BaseModel):
    counter: int = 0
    project: str | None = None


CATEGORIES: dict[str, Category] = {
    "save_note": "edit",
    "search_docs": "read",
    "run_check": "execute",
    "mcp_lookup": "mcp",
    "misc_ping": "other",
}
"""One controller tool per category; `free_echo` and the built-ins have none (the workspace's tools: Keel's table)."""

controller = AgentController(
    "assistant-controller",
    agent,
    workspace=Workspace(id="controller-ws", filesystem=LocalFilesystem(WORKSPACE_DIR)),
    instructions="Controller instructions.",
    modes=[
        Mode("plan", name="Plan", default=True, instructions="Plan mode instructions.", transitions_to="build"),
        Mode("build", name="Build", instructions="Build mode instructions."),
        Mode(
            "review",
            name="Review",
            instructions="Review mode.",
            available_tools=("mastra_workspace_read_file", "ask_user", "save_note", "search_docs"),
        ),
    ],
    tools=(search_docs, run_check, mcp_lookup, misc_ping, free_echo),
    subagents=[
        Subagent(
            id="explore",
            name="Explorer",
            description="Looks around the workspace.",
            instructions="You explore.",
            allowed_controller_tools=("search_docs",),
            allowed_workspace_tools=("mastra_workspace_list_files",),
        )
    ],
    tool_category_resolver=CATEGORIES.get,
    state_schema=SessionState,
    initial_state={"project": "demo"},
)

app = App.of(controllers=[controller])
