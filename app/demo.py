"""The bundled demo app, on scripted models, so everything runs without an LLM key.

- `demo`: its first step calls `save_note`, which requires approval. Approved, the note is written and the final
  text quotes the tool's result; declined, the tool never runs and the final text says so. It also has the demo
  workspace's tools.
- `coder`: writes, reads, edits, lists, greps, stats a file in the demo workspace, runs a command on it, indexes
  and searches it (BM25), loads the bundled `keel-python` skill, asks the language server about it (LSP, with
  `pip install 'keel[lsp]'`; without pylsp the tool answers what to install) and deletes it, one tool per step,
  so every workspace tool shows in the Temporal UI.
- `assistant-controller` (`app/demo_controller.py`): an AgentController for `keel chat`, plan mode then build mode:
  a question, a subagent, a plan to approve, a file written into the demo workspace.

The demo workspace lives in `.keel/workspace` (`$KEEL_DATA_DIR/workspace`). Commands run under bubblewrap
(no network, no writes outside the workspace) when it is installed; without it, `execute_command` asks for
approval first.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

from pydantic import BaseModel, Field

from keel.app.definitions import Agent, App, ToolContext, tool
from keel.app.demo_controller import assistant_controller as make_assistant_controller
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from keel.protocol.settings import load_settings
from keel.workspace_providers import WORKSPACE_TOOLS, Workspace
from keel.workspace_providers.local_filesystem import LocalFilesystem
from keel.workspace_providers.local_sandbox import LocalSandbox


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


CODER_FILE = "coder/hello.py"
CODER_STEPS: tuple[tuple[str, dict[str, object]], ...] = (
    (
        WORKSPACE_TOOLS.FILESYSTEM.WRITE_FILE,
        {"path": CODER_FILE, "content": "def greet():\n    return 'hello world'\n"},
    ),
    (WORKSPACE_TOOLS.FILESYSTEM.READ_FILE, {"path": CODER_FILE}),
    (WORKSPACE_TOOLS.FILESYSTEM.EDIT_FILE, {"path": CODER_FILE, "old_string": "world", "new_string": "Keel"}),
    (WORKSPACE_TOOLS.FILESYSTEM.LIST_FILES, {"path": "coder"}),
    (WORKSPACE_TOOLS.FILESYSTEM.GREP, {"pattern": "hello", "path": "coder"}),
    (WORKSPACE_TOOLS.FILESYSTEM.FILE_STAT, {"path": CODER_FILE}),
    (WORKSPACE_TOOLS.SANDBOX.EXECUTE_COMMAND, {"command": f"cat {CODER_FILE} && wc -l < {CODER_FILE}"}),
    (WORKSPACE_TOOLS.SEARCH.INDEX, {"path": CODER_FILE, "content": "def greet():\n    return 'hello Keel'\n"}),
    (WORKSPACE_TOOLS.SEARCH.SEARCH, {"query": "greet Keel", "topK": 3}),
    ("skill", {"name": "keel-python"}),
    (WORKSPACE_TOOLS.LSP.LSP_INSPECT, {"path": CODER_FILE, "line": 1, "match": "def <<<greet():"}),
    (WORKSPACE_TOOLS.FILESYSTEM.DELETE, {"path": CODER_FILE}),
)
DEMO_SKILLS = Path(__file__).resolve().parent / "demo_skills"


def coder_script(request: ModelRequest) -> ModelResponse:
    """One workspace tool per step, in `CODER_STEPS` order; then a summary of what each returned."""
    done = tool_results_since_last_user(request)
    if len(done) < len(CODER_STEPS):
        name, args = CODER_STEPS[len(done)]
        return ModelResponse(tool_calls=[ModelToolCall(id=f"call_{len(done) + 1}", name=name, args=args)])
    lines = [f"- {r.tool_name.removeprefix('mastra_workspace_')}: {_first_line(r.result)}" for r in done]
    return ModelResponse(text="Done. What each tool returned:\n" + "\n".join(lines))


def _first_line(result: object) -> str:
    text = result if isinstance(result, str) else json.dumps(result)
    return text.splitlines()[0] if text else ""


def demo_workspace() -> Workspace:
    """`.keel/workspace` with its files and commands (bubblewrap isolation when installed, else approval), BM25
    search over it, the bundled skills (read-only, from the package) and LSP."""
    root = load_settings().data_dir / "workspace"
    isolated = shutil.which("bwrap") is not None
    return Workspace(
        id="demo-workspace",
        name="Demo workspace",
        filesystem=LocalFilesystem(root),
        sandbox=LocalSandbox(root, isolation="bwrap" if isolated else "none"),
        tools={WORKSPACE_TOOLS.SANDBOX.EXECUTE_COMMAND: {"require_approval": not isolated}},
        bm25=True,
        auto_index_paths=["coder"],
        skills=["demo_skills"],
        skill_source=LocalFilesystem(DEMO_SKILLS.parent, read_only=True),
        lsp=True,
    )


workspace = demo_workspace()

demo = Agent(
    id="demo",
    name="Demo agent",
    description="Saves what you say as a note, after you approve it.",
    instructions="Save the user's message as a note.",
    model=ScriptedModel(demo_script, name="demo"),
    tools=(save_note,),
    workspace=workspace,
)

coder = Agent(
    id="coder",
    name="Coder",
    description="Writes, reads, edits, lists, greps, stats, indexes, searches, inspects (LSP) and deletes a file, "
    "runs a command and loads a skill, in the workspace.",
    instructions="Work on files in the workspace.",
    model=ScriptedModel(coder_script, name="coder"),
    max_steps=len(CODER_STEPS) + 1,
    workspace=workspace,
)

assistant_controller = make_assistant_controller(workspace)

app = App.of(demo, coder, controllers=[assistant_controller])
