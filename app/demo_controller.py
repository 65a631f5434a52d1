"""The demo's AgentController, `assistant-controller`: plan, then build, on scripted models (no LLM key needed).

In `plan` (the default mode: read-only workspace tools) the `assistant` asks which language the script should be in
(`ask_user`), has the `explorer` subagent list the workspace (on its own scripted model), saves a short plan that
quotes the answer (`save_plan`, under `plans/`) and submits it (`submit_plan`). Approved, the session switches to
`build` and the same turn goes on there: the assistant writes the script into the workspace (an `edit`: it waits for
your approval) and says how to run it. Rejected with feedback, it revises the plan once and submits it again;
rejected without, it waits for your next message and takes it as the feedback.

The script decides from the request alone: the tools it is offered (no write tool: plan mode) and the tool results
since the user's last message. Reads and the conversation tools are allowed from the start; edits and commands ask.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from keel.app.controller import Category, ControllerDefinition, Mode, Subagent, controller_definition
from keel.app.controller_tools import ASK_USER, REQUEST_ACCESS, SUBAGENT, SUBMIT_PLAN, TASK_TOOLS
from keel.app.definitions import Agent, Tool, ToolContext, tool
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from keel.protocol.messages import ToolCallPart, ToolResultPart
from keel.workspace_providers import WORKSPACE_TOOLS, Workspace

FS = WORKSPACE_TOOLS.FILESYSTEM
SAVE_PLAN = "save_plan"
QUESTION = "Which language should the script be in?"
LANGUAGES = {  # the answer -> the file, its content after the request's comment line, how to run it
    "Python": ("hello.py", 'print("Hello from Keel!")\n', "python hello.py"),
    "Shell": ("hello.sh", 'echo "Hello from Keel!"\n', "sh hello.sh"),
}
PLAN_MODE_TOOLS = (FS.LIST_FILES, FS.READ_FILE, FS.GREP, FS.FILE_STAT, ASK_USER, SUBMIT_PLAN, SUBAGENT, SAVE_PLAN)
CATEGORIES: dict[str, Category] = {
    # the workspace tools have theirs (`WORKSPACE_TOOL_CATEGORIES`); these talk to the user or change nothing
    **{name: "other" for name in (ASK_USER, SUBMIT_PLAN, REQUEST_ACCESS, SUBAGENT, SAVE_PLAN, *TASK_TOOLS)},
    **{name: "read" for name in ("skill", "skill_search", "skill_read")},
}
PERMISSIONS = {"categories": {"read": "allow", "other": "allow", "edit": "ask", "execute": "ask"}}


# --- the assistant's script ------------------------------------------------------------------------------------


def assistant_script(request: ModelRequest) -> ModelResponse:
    if FS.WRITE_FILE in {t.name for t in request.tools}:
        return _build(request)
    return _plan(request)


def _plan(request: ModelRequest) -> ModelResponse:
    results = tool_results_since_last_user(request)
    if not results:
        before = _all_results(request)
        if before and _rejected(before[-1]):  # the plan was turned down without a word: this message says why
            return _save_plan(request, feedback=last_user_text(request))
        args = {"question": QUESTION, "options": [{"label": name} for name in LANGUAGES]}
        return _call("Before I plan this, one question.", ASK_USER, args)
    last = results[-1]
    if last.denied or last.is_error:
        return ModelResponse(text=f"{last.tool_name} did not go through ({_content(last.result)}): I stopped here.")
    if last.tool_name == ASK_USER:
        task = "List the files in the workspace and summarise what is there."
        return _call(
            "Let me have the explorer look at the workspace.", SUBAGENT, {"agentType": "explorer", "task": task}
        )
    if last.tool_name == SUBAGENT:
        return _save_plan(request)
    if last.tool_name == SAVE_PLAN:
        return _call("", SUBMIT_PLAN, {"path": _plan_path(request)})
    if last.tool_name == SUBMIT_PLAN and _rejected(last):
        feedback = _feedback(last)
        if feedback and sum(_rejected(r) for r in results) < 2:
            return _save_plan(request, feedback=feedback)
        return ModelResponse(text="Understood, I won't build that. Tell me what to change and I'll revise the plan.")
    return ModelResponse(text="The plan is approved; switch to build mode to carry it out.")


def _save_plan(request: ModelRequest, feedback: str | None = None) -> ModelResponse:
    answer = _answer(request)
    name, _, _ = LANGUAGES.get(answer, LANGUAGES["Python"])
    lines = [
        f"# Plan: {_task(request)}",
        f'- You answered "{answer}": the script is `{name}`.',
        f"- The explorer found: {_explorer_summary(request)}",
        f"- Build mode writes `{name}` (you approve the write), then says how to run it.",
    ]
    if feedback:
        lines.append(f'- Revised for your feedback: "{feedback}".')
    plan = "\n".join(lines) + "\n"
    intro = "I revised the plan:" if feedback else "Here is my plan:"
    return _call(f"{intro}\n{plan}", SAVE_PLAN, {"path": _plan_path(request), "plan": plan})


def _build(request: ModelRequest) -> ModelResponse:
    writes = [r for r in tool_results_since_last_user(request) if r.tool_name == FS.WRITE_FILE]
    name, body, run = LANGUAGES.get(_answer(request), LANGUAGES["Python"])
    if not writes:
        content = f"# {_task(request)}\n{body}"
        return _call(f"Building the plan: writing {name}.", FS.WRITE_FILE, {"path": name, "content": content})
    last = writes[-1]
    if last.denied:
        return ModelResponse(text=f"You declined the write, so {name} was not written. Nothing changed.")
    if last.is_error:
        return ModelResponse(text=f"Writing {name} failed: {_content(last.result)}")
    return ModelResponse(text=f"Done: {name} is in the workspace ({_content(last.result)}). Run it with `{run}`.")


# --- the explorer's script (the subagent) ------------------------------------------------------------------------


def explorer_script(request: ModelRequest) -> ModelResponse:
    listed = [r for r in tool_results_since_last_user(request) if r.tool_name == FS.LIST_FILES]
    if not listed:
        return _call("", FS.LIST_FILES, {"path": ".", "maxDepth": 1})
    lines = [line for line in _content(listed[-1].result).splitlines() if line.strip()]
    entries = [line.strip(" │├└─") for line in lines[1:-1]]
    shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
    total = lines[-1] if lines else "nothing"
    return ModelResponse(text=f"The workspace has {total}" + (f": {shown}." if shown else "."))


# --- reading the conversation -----------------------------------------------------------------------------------


def _call(text: str, name: str, args: dict[str, Any]) -> ModelResponse:
    return ModelResponse(text=text, tool_calls=[ModelToolCall(id=f"{name}_1", name=name, args=args)])


def _parts(request: ModelRequest) -> list[tuple[str, Any]]:
    """Every user text, tool call and tool result of the conversation, in order."""
    found: list[tuple[str, Any]] = []
    for message in request.messages:
        if isinstance(message.content, str):
            found.append(("text", message.content) if message.role == "user" else ("other", None))
            continue
        for part in message.content:
            if isinstance(part, ToolCallPart | ToolResultPart):
                found.append(("part", part))
            elif message.role == "user":
                found.append(("text", part.text))
    return found


def _all_results(request: ModelRequest) -> list[ToolResultPart]:
    return [p for kind, p in _parts(request) if kind == "part" and isinstance(p, ToolResultPart)]


def _task(request: ModelRequest) -> str:
    """What the user asked for: their message before the question (the last message, before any question)."""
    said, task = "", ""
    for kind, part in _parts(request):
        if kind == "text":
            said = part
        elif isinstance(part, ToolCallPart) and part.tool_name == ASK_USER:
            task = said
    return " ".join((task or last_user_text(request)).split())[:80] or "the script"


def _answer(request: ModelRequest) -> str:
    answers = [r for r in _all_results(request) if r.tool_name == ASK_USER and not r.is_error and not r.denied]
    if not answers:
        return "Python"
    return _content(answers[-1].result).removeprefix("User answered: ")


def _explorer_summary(request: ModelRequest) -> str:
    found = [r for r in _all_results(request) if r.tool_name == SUBAGENT]
    return _content(found[-1].result) if found else "(nothing yet)"


def _plan_path(request: ModelRequest) -> str:
    slug = "-".join(re.findall(r"[a-z0-9]+", _task(request).lower()))[:40].strip("-")
    return f"plans/{slug or 'plan'}.md"


def _rejected(result: ToolResultPart) -> bool:
    return result.tool_name == SUBMIT_PLAN and _content(result.result).startswith("Plan was not approved")


def _feedback(result: ToolResultPart) -> str | None:
    plan = result.result.get("submittedPlan") if isinstance(result.result, dict) else None
    feedback = plan.get("feedback") if isinstance(plan, dict) else None
    return feedback if isinstance(feedback, str) and feedback else None


def _content(result: Any) -> str:
    if isinstance(result, dict) and isinstance(result.get("content"), str):
        return str(result["content"])
    return result if isinstance(result, str) else json.dumps(result)


# --- the controller ----------------------------------------------------------------------------------------------


class PlanInput(BaseModel):
    path: str = Field(pattern=r"^plans/[\w.-]+\.md$", description="Where the plan goes: plans/NAME.md")
    plan: str = Field(min_length=1, description="The plan, in markdown")


def save_plan_tool(workspace: Workspace) -> Tool:
    @tool(SAVE_PLAN)
    async def save_plan(args: PlanInput, ctx: ToolContext) -> str:
        """Save a plan (markdown) under `plans/` in the workspace, for `submit_plan` to submit."""
        await workspace.filesystem.write_file(args.path, args.plan)
        return f"Saved the plan to {args.path}"

    return save_plan


def assistant_controller(workspace: Workspace) -> ControllerDefinition:
    """`assistant-controller` on `workspace`, with the `assistant` agent and the `explorer` subagent (its
    definition: `keel.AgentController.from_definition` gives it sessions)."""
    assistant = ScriptedModel(assistant_script, name="assistant")
    explorer = ScriptedModel(explorer_script, name="explorer")
    agent = Agent(
        id="assistant",
        name="Assistant",
        description="Plans a small script with you (a question, a look at the workspace, a plan), then writes it.",
        instructions="You help the user write small scripts in the demo workspace.",
        model=assistant,
    )
    return controller_definition(
        "assistant-controller",
        agent,
        workspace=workspace,
        modes=[
            Mode(
                "plan",
                name="Plan",
                default=True,
                instructions="Plan mode: change nothing. Ask what you need to know (ask_user), have the explorer "
                "look at the workspace, save a short plan under plans/ (save_plan) and submit it (submit_plan).",
                additional_tools=(save_plan_tool(workspace),),
                available_tools=PLAN_MODE_TOOLS,
                transitions_to="build",
            ),
            Mode("build", name="Build", instructions="Build mode: carry out the approved plan, then say what you did."),
        ],
        subagents=[
            Subagent(
                id="explorer",
                name="Explorer",
                description="Lists and reads the workspace's files and summarises what is there; changes nothing.",
                instructions="List the workspace's files and summarise what is there.",
                allowed_workspace_tools=(FS.LIST_FILES, FS.READ_FILE),
                default_model_id=explorer.model_id,
                max_steps=5,
            )
        ],
        models={m.model_id: m for m in (assistant, explorer)},
        tool_category_resolver=CATEGORIES.get,
        initial_state={"permissionRules": PERMISSIONS},
    )
