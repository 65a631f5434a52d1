"""The tools and instructions of a controller session's turn: the built-in tools Mastra's controller adds
(`ask_user`, `submit_plan`, `request_access`, the task list, `subagent`), and the tool set a turn offers after its
mode's allow-list and the session's permissions."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from keel.app.agent_tools import agent_instructions, agent_tools
from keel.app.controller import ControllerDefinition, ControllerError, Subagent
from keel.app.definitions import App, AppError, Tool, ToolContext, tool

ASK_USER = "ask_user"
SUBMIT_PLAN = "submit_plan"
REQUEST_ACCESS = "request_access"
SUBAGENT = "subagent"
TASK_TOOLS = ("task_write", "task_update", "task_complete", "task_check")

ANSWER_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
}
PLAN_RESUME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["approved", "rejected"]},
        "feedback": {"type": "string"},
        "path": {"type": "string"},
        "title": {"type": "string"},
        "plan": {"type": "string"},
    },
    "required": ["action"],
}
ACCESS_RESUME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"granted": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["granted"],
}


class Option(BaseModel):
    label: str = Field(description="Short display text for this option (1-5 words)")
    description: str | None = Field(default=None, description="Explanation of what this option means")


class AskUserInput(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    question: str = Field(min_length=1, description="The question to ask the user. Should be clear and specific.")
    options: list[Option] | None = Field(
        default=None,
        description="Optional choices. If provided, shows a selection list. If omitted, shows a free-text input.",
    )
    selection_mode: Literal["single_select", "multi_select"] | None = Field(
        default=None,
        alias="selectionMode",
        description="Controls how many provided options the user can select. Defaults to single_select when "
        "options are provided. Requires options.",
    )


@tool(ASK_USER)
async def ask_user(args: AskUserInput, ctx: ToolContext) -> dict[str, Any]:
    """Ask the user a question and wait for their response. Use this when you need clarification, want to
    validate assumptions, or need the user to make a decision between options. Provide options for structured
    choices (2-4 options), or omit them for open-ended questions. Use selectionMode to choose whether the user can
    pick one option or multiple options."""
    if args.selection_mode is not None and not args.options:
        return {"content": "Failed to ask user: selectionMode requires options.", "isError": True}
    if ctx.resume_data is None:
        payload: dict[str, Any] = {"question": args.question}
        if args.options:
            payload["options"] = [o.model_dump(exclude_none=True) for o in args.options]
            payload["selectionMode"] = args.selection_mode or "single_select"
        ctx.suspend(payload, ANSWER_SCHEMA)
    answer = ctx.resume_data
    text = ", ".join(str(a) for a in answer) if isinstance(answer, list) else str(answer)
    return {"content": f"User answered: {text}", "isError": False}


class SubmitPlanInput(BaseModel):
    path: str = Field(description="Path to the plan markdown file on disk (e.g. `.mastracode/plans/add-dark-mode.md`).")


@tool(SUBMIT_PLAN)
async def submit_plan(args: SubmitPlanInput, ctx: ToolContext) -> dict[str, Any]:
    """Submit a plan you wrote to a markdown file for review. Pass the `path` to that file (e.g.
    `.mastracode/plans/add-dark-mode.md`). Write/edit the file first — do not paste the plan contents here. Reuse the
    same file across revisions; only create a new file for a genuinely new plan. The user can approve, reject, or
    request changes. On approval, the system automatically switches to the default mode so you can implement."""
    if ctx.resume_data is None:
        ctx.suspend({"toolId": SUBMIT_PLAN, "path": args.path}, PLAN_RESUME_SCHEMA)
    decision: Mapping[str, Any] = ctx.resume_data
    plan = {k: decision[k] for k in ("title", "plan") if k in decision} | {"path": decision.get("path", args.path)}
    if decision["action"] == "approved":
        content = "Plan approved. Proceed with implementation following the approved plan."
        return {"content": content, "toolId": SUBMIT_PLAN, "submittedPlan": plan, "isError": False}
    feedback = decision.get("feedback")
    if feedback:
        content = (
            f"Plan was not approved. The user wants revisions.\n\nUser feedback: {feedback}\n\nPlease revise the plan "
            "based on the feedback and submit again with submit_plan."
        )
        plan["feedback"] = feedback
    else:
        content = (
            "Plan was not approved. The user will send revision instructions in their next message. Stop now and "
            "wait for the user to provide feedback before revising the plan."
        )
    return {"content": content, "toolId": SUBMIT_PLAN, "submittedPlan": plan, "isError": False}


class RequestAccessInput(BaseModel):
    reason: str = Field(min_length=1, description="Why the access is needed")
    category: Literal["read", "edit", "execute", "mcp", "other"] | None = Field(
        default=None, description="The tool category to be allowed for the rest of the session"
    )
    tool_name: str | None = Field(default=None, alias="toolName", description="One tool to be allowed instead")


@tool(REQUEST_ACCESS)
async def request_access(args: RequestAccessInput, ctx: ToolContext) -> dict[str, Any]:
    """Ask the user to allow a category of tools (or one tool) for the rest of the session, saying why. Waits for
    their answer."""
    if ctx.resume_data is None:
        payload = {"reason": args.reason} | args.model_dump(by_alias=True, exclude_none=True, exclude={"reason"})
        ctx.suspend(payload, ACCESS_RESUME_SCHEMA)
    decision: Mapping[str, Any] = ctx.resume_data
    target = args.category or args.tool_name or "the access"
    if decision["granted"]:
        return {"content": f"Access granted: {target} is allowed for the rest of the session.", "isError": False}
    reason = f" ({decision['reason']})" if decision.get("reason") else ""
    return {"content": f"Access refused: {target} stays as it was{reason}.", "isError": False}


# --- the task list ---------------------------------------------------------------------------------------------

TASKS_SETTING = "tasks"
TaskStatus = Literal["pending", "in_progress", "completed"]


class TaskItem(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    id: str | None = Field(
        default=None,
        min_length=1,
        description="Stable task identifier (for example, 'task_investigate_tests'). Keep this unchanged across "
        "updates.",
    )
    content: str = Field(min_length=1)
    status: TaskStatus
    active_form: str = Field(min_length=1, alias="activeForm")


class TaskWriteInput(BaseModel):
    tasks: list[TaskItem]


class TaskUpdateInput(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    id: str = Field(min_length=1)
    content: str | None = Field(default=None, min_length=1)
    status: TaskStatus | None = None
    active_form: str | None = Field(default=None, min_length=1, alias="activeForm")

    @model_validator(mode="after")
    def _changes_something(self) -> TaskUpdateInput:
        if self.content is None and self.status is None and self.active_form is None:
            raise ValueError("Provide at least one field to update.")
        return self


class TaskIdInput(BaseModel):
    id: str = Field(min_length=1)


class NoInput(BaseModel):
    pass


async def _tasks(ctx: ToolContext) -> list[dict[str, Any]] | None:
    if ctx.session is None:
        return None
    found = await ctx.session.get_thread_setting(TASKS_SETTING)
    return list(found) if isinstance(found, list) else []


async def _save_tasks(ctx: ToolContext, tasks: list[dict[str, Any]]) -> None:
    assert ctx.session is not None
    await ctx.session.set_thread_setting(TASKS_SETTING, tasks)
    await ctx.session.emit({"type": "task_updated", "tasks": tasks})


NO_MEMORY = {
    "content": "Task tools require a session's thread. No task was recorded.",
    "tasks": [],
    "isError": True,
}


def _slug(text: str) -> str:
    words, slug = re.findall(r"[a-z0-9]+", text.lower()), ""
    for word in words:  # Mastra's: words joined by `_`, cut at 48 characters (no trailing `_`)
        slug = (slug + "_" if slug else "") + word if len(slug) < 48 else slug
    return slug[:48] or "item"


def _with_ids(items: list[TaskItem], previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mastra's `assignTaskIds`: a task keeps the id it was given (the first of a repeated id); a task without one
    whose content appears once in this write reuses the id of the one earlier task with that content (unless an
    explicit id claims it); otherwise `task_<slug>`, `_<n>` for the content's n-th occurrence, made unique."""
    explicit = {t.id for t in items if t.id}
    omitted = Counter(t.content for t in items if not t.id)
    reusable: dict[int, str] = {}
    for index, item in enumerate(items):
        if not item.id and omitted[item.content] == 1:
            same = [p["id"] for p in previous if p["content"] == item.content and p["id"] not in explicit]
            if len(same) == 1:
                reusable[index] = same[0]
    reserved = explicit | set(reusable.values())
    used: set[str] = set()
    seen: Counter[str] = Counter()
    tasks = []
    for index, item in enumerate(items):
        seen[item.content] += 1
        task_id = item.id if item.id and item.id not in used else reusable.get(index)
        if task_id is None or task_id in used:
            base = f"task_{_slug(item.content)}" + (f"_{seen[item.content]}" if seen[item.content] > 1 else "")
            task_id, n = base, 2
            while task_id in used or task_id in reserved:
                task_id, n = f"{base}_{n}", n + 1
        used.add(task_id)
        tasks.append({"id": task_id, "content": item.content, "status": item.status, "activeForm": item.active_form})
    return tasks


def _summary(tasks: list[dict[str, Any]]) -> str:
    done = sum(t["status"] == "completed" for t in tasks)
    lines = [f"Tasks updated: [{done}/{len(tasks)} completed]"]
    current = next((t for t in tasks if t["status"] == "in_progress"), None)
    if current is not None:
        lines.append(f"Currently: {current['activeForm']} ({current['id']})")
    if tasks:
        lines.append("Task IDs:")
    lines.extend(f"- {t['id']}: {t['content']} ({t['status']})" for t in tasks)
    return "\n".join(lines)


def _not_found(task_id: str, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    known = (
        "\n".join(f"- {t['id']}: {t['content']} ({t['status']})" for t in tasks)
        if tasks
        else "No tasks are currently tracked."
    )
    prefix = "\n\nAvailable task IDs:\n" if tasks else "\n\n"
    return {"content": f"Task not found: {task_id}{prefix}{known}", "tasks": tasks, "isError": True}


@tool("task_write")
async def task_write(args: TaskWriteInput, ctx: ToolContext) -> dict[str, Any]:
    """Create and manage a structured task list for your current coding session. Pass the FULL task list each
    time (it replaces the previous list). Each task has: id (stable identifier), content (imperative), status
    (pending, in_progress, or completed), activeForm (present continuous). Mark tasks in_progress BEFORE starting
    work (only ONE at a time) and completed IMMEDIATELY after finishing."""
    previous = await _tasks(ctx)
    if previous is None:
        return NO_MEMORY
    if sum(t.status == "in_progress" for t in args.tasks) > 1:
        return {"content": "Only one task can be in_progress at a time.", "tasks": previous, "isError": True}
    tasks = _with_ids(args.tasks, previous)
    await _save_tasks(ctx, tasks)
    return {"content": _summary(tasks), "tasks": tasks, "isError": False}


@tool("task_update")
async def task_update(args: TaskUpdateInput, ctx: ToolContext) -> dict[str, Any]:
    """Update one task in the current task list by stable ID. Include only the fields that changed; use status
    to move a task between pending, in_progress and completed."""
    tasks = await _tasks(ctx)
    if tasks is None:
        return NO_MEMORY
    task = next((t for t in tasks if t["id"] == args.id), None)
    if task is None:
        return _not_found(args.id, tasks)
    if args.status == "in_progress":
        for other in tasks:
            if other["status"] == "in_progress":
                other["status"] = "pending"
    for key, value in (("content", args.content), ("status", args.status), ("activeForm", args.active_form)):
        if value is not None:
            task[key] = value
    await _save_tasks(ctx, tasks)
    return {"content": _summary(tasks), "tasks": tasks, "isError": False}


@tool("task_complete")
async def task_complete(args: TaskIdInput, ctx: ToolContext) -> dict[str, Any]:
    """Mark one task completed by stable ID."""
    tasks = await _tasks(ctx)
    if tasks is None:
        return NO_MEMORY
    task = next((t for t in tasks if t["id"] == args.id), None)
    if task is None:
        return _not_found(args.id, tasks)
    task["status"] = "completed"
    await _save_tasks(ctx, tasks)
    return {"content": _summary(tasks), "tasks": tasks, "isError": False}


@tool("task_check")
async def task_check(args: NoInput, ctx: ToolContext) -> dict[str, Any]:
    """Check the completion status of your current task list. Use this before finishing tracked work to ensure
    all tasks are completed."""
    tasks = await _tasks(ctx)
    if tasks is None:
        return NO_MEMORY
    if not tasks:
        content = "No tasks found. Consider using task_write to create a task list for complex work."
    else:
        counts = {s: sum(t["status"] == s for t in tasks) for s in ("completed", "in_progress", "pending")}
        done = counts["completed"] == len(tasks)
        content = (
            f"Task Status: [{counts['completed']}/{len(tasks)} completed]\n- Completed: {counts['completed']}\n"
            f"- In Progress: {counts['in_progress']}\n- Pending: {counts['pending']}\n\n"
            f"All tasks completed: {'YES' if done else 'NO'}"
        )
        if not done:
            content += "\n\nIncomplete tasks:\n"
            for title, status in (("In Progress", "in_progress"), ("Pending", "pending")):
                if counts[status]:
                    content += f"\n{title}:\n" + "".join(
                        f"- {t['id']}: {t['content']}\n" for t in tasks if t["status"] == status
                    )
            content += "\nContinue working on these tasks before ending."
    # Mastra's order: the task in progress first, then the pending ones
    incomplete = [t for s in ("in_progress", "pending") for t in tasks if t["status"] == s]
    summary = {
        "total": len(tasks),
        "completed": sum(t["status"] == "completed" for t in tasks),
        "inProgress": sum(t["status"] == "in_progress" for t in tasks),
        "pending": sum(t["status"] == "pending" for t in tasks),
        "incomplete": len(incomplete),
        "hasTasks": bool(tasks),
        "allCompleted": bool(tasks) and not incomplete,
    }
    return {"content": content, "tasks": tasks, "summary": summary, "incompleteTasks": incomplete, "isError": False}


# --- subagents -------------------------------------------------------------------------------------------------


class SubagentInput(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    agent_type: str = Field(alias="agentType", description="Type of subagent to spawn")
    task: str = Field(
        min_length=1,
        description="Clear, self-contained description of what the subagent should do. For non-forked subagents "
        "include all relevant context — the subagent cannot see the parent conversation.",
    )
    model_id: str | None = Field(
        default=None,
        alias="modelId",
        description="Optional model ID override for this task. Ignored when `forked: true` (the parent agent's model "
        "is used).",
    )
    forked: bool | None = Field(
        default=None,
        description="If true, fork the parent conversation: run on a copy of the parent thread with the parent "
        "agent's instructions and tools. Defaults to the subagent definition's `forked` setting.",
    )


async def _subagent_runs_in_the_workflow(args: SubagentInput, ctx: ToolContext) -> Any:
    raise AppError("The subagent tool is run by the session's turn workflow, not as an activity")


def subagent_tool(subagents: tuple[Subagent, ...]) -> Tool:
    """The built-in `subagent` tool: its call starts a child run (see `AgentRun`); this is its description and
    input schema, with the configured agent types."""
    kinds = "\n".join(f"- **{s.id}** ({s.name}): {s.description}" for s in subagents)
    schema = SubagentInput.model_json_schema(by_alias=True)
    schema["properties"]["agentType"]["enum"] = [s.id for s in subagents]
    return Tool(
        id=SUBAGENT,
        description=(
            "Delegate a focused task to a specialized subagent. The subagent runs independently with a constrained "
            "toolset, then returns its findings as text.\n\nAvailable agent types:\n"
            f"{kinds}\n\nBy default the subagent runs in its own context — it does NOT see the parent conversation "
            "history. Write a clear, self-contained task description.\n\nSet `forked: true` for context-dependent "
            "work that needs the parent conversation or prior tool results."
        ),
        input_schema=SubagentInput,
        execute=_subagent_runs_in_the_workflow,
        parameters=schema,
    )


BUILTIN_TOOLS: tuple[Tool, ...] = (
    ask_user,
    submit_plan,
    request_access,
    task_write,
    task_update,
    task_complete,
    task_check,
)


def builtin_tools(controller: ControllerDefinition) -> list[Tool]:
    found = [t for t in BUILTIN_TOOLS if t.id not in controller.disable_builtin_tools]
    if controller.subagents and SUBAGENT not in controller.disable_builtin_tools:
        found.append(subagent_tool(controller.subagents))
    return found


# --- a turn's tool set and instructions ---------------------------------------------------------------------------


def category_of(controller: ControllerDefinition, t: Tool) -> str | None:
    workspace_name = t.workspace_tool.workspace_tool_name if t.workspace_tool is not None else None
    return controller.category(t.id, workspace_name=workspace_name)


async def turn_tools(
    app: App,
    controller: ControllerDefinition,
    mode_id: str,
    request_context: Mapping[str, Any] | None,
    *,
    subagent_id: str | None = None,
) -> list[Tool]:
    """Every tool a turn of the mode may call (before the session's permissions): the agent's and its
    workspace's, the built-ins, the controller's and the mode's; a mode's `available_tools` keeps only those
    names. A subagent's turn: its allowed controller and workspace tools only."""
    agent = controller.agent
    own = await agent_tools(app, agent, request_context)
    if subagent_id is not None:
        sub = next((s for s in controller.subagents if s.id == subagent_id), None)
        if sub is None:
            raise ControllerError(f"Unknown agent type: {subagent_id}")
        workspace = [t for t in own if t.workspace_tool is not None]
        if sub.allowed_workspace_tools is not None:
            workspace = [t for t in workspace if t.id in sub.allowed_workspace_tools]
        allowed = [t for t in controller.tools if t.id in sub.allowed_controller_tools]
        return _unique(workspace + allowed)
    mode = controller.mode(mode_id)
    tools = _unique(own + builtin_tools(controller) + list(controller.tools) + list(mode.own_tools))
    if mode.available_tools is not None:
        tools = [t for t in tools if t.id in mode.available_tools]
    return tools


def _unique(tools: list[Tool]) -> list[Tool]:
    seen: set[str] = set()
    found = []
    for t in tools:
        if t.id in seen:
            raise AppError(f"Two tools of a controller session are named {t.id!r}")
        seen.add(t.id)
        found.append(t)
    return found


async def turn_instructions(
    app: App,
    controller: ControllerDefinition,
    mode_id: str,
    request_context: Mapping[str, Any] | None,
    *,
    subagent_id: str | None = None,
) -> str:
    """The agent's instructions (and its workspace's), the controller's, then the mode's; a subagent's own."""
    base = await agent_instructions(app, controller.agent, request_context)
    if subagent_id is not None:
        sub = next(s for s in controller.subagents if s.id == subagent_id)
        workspace = base[len(controller.agent.instructions) :].strip()
        return "\n\n".join(p for p in (sub.instructions, workspace) if p)
    mode = controller.mode(mode_id)
    return "\n".join(p for p in (base, controller.instructions, mode.instructions) if p)
