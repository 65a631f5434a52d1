"""A plan-driven agent for workspace tests: the user message is a JSON list of steps, each a list of
`[tool, args]` calls made together in one model step; the final text is the JSON list of every call's result.
An argument `"$pid"` stands for the PID of the last background process started."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from keel.app import Agent, App
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from keel.workspace_providers import WORKSPACE_TOOLS, LocalFilesystem, LocalSandbox, Workspace

FS = WORKSPACE_TOOLS.FILESYSTEM


def _substitute(args: dict[str, Any], results: list[Any]) -> dict[str, Any]:
    pids = [m.group(1) for r in results if isinstance(r, str) for m in [re.search(r"PID: (\w+)\)", r)] if m]
    return {k: (pids[-1] if v == "$pid" and pids else v) for k, v in args.items()}


def plan_script(request: ModelRequest) -> ModelResponse:
    plan: list[list[list[Any]]] = json.loads(last_user_text(request))
    done = tool_results_since_last_user(request)
    results = [r.result for r in done]
    calls_before = 0
    for index, step in enumerate(plan):
        if len(done) < calls_before + len(step):
            return ModelResponse(
                tool_calls=[
                    ModelToolCall(id=f"s{index}c{i}", name=name, args=_substitute(args, results))
                    for i, (name, args) in enumerate(step)
                ]
            )
        calls_before += len(step)
    return ModelResponse(text=json.dumps(results))


def plan_agent(id: str, workspace: Workspace, *, max_steps: int = 50) -> Agent:
    return Agent(id=id, model=ScriptedModel(plan_script, name="plan"), workspace=workspace, max_steps=max_steps)


def workspace_root() -> Path:
    return Path(os.environ.get("KEEL_DATA_DIR", ".keel")) / "ws"


def guarded_workspace() -> Workspace:
    """Writes need a read first; `write_file` asks for approval (so a test can stop a run between the two)."""
    root = workspace_root()
    return Workspace(
        id="guarded",
        filesystem=LocalFilesystem(root),
        sandbox=LocalSandbox(root),
        tools={
            FS.WRITE_FILE: {"require_approval": True, "require_read_before_write": True},
            FS.EDIT_FILE: {"require_read_before_write": True},
        },
    )


def procs_workspace() -> Workspace:
    """A process follow-up asks for approval (so a test can stop a run between the start and the follow-up)."""
    root = workspace_root()
    return Workspace(
        id="procs",
        filesystem=LocalFilesystem(root),
        sandbox=LocalSandbox(root),
        tools={WORKSPACE_TOOLS.SANDBOX.GET_PROCESS_OUTPUT: {"require_approval": True}},
    )


app = App.of(plan_agent("guarded", guarded_workspace()), plan_agent("procs", procs_workspace()))
