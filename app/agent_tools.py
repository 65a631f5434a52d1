"""The tools and instructions an agent has for one request: its own tools, then its workspace's tools (under the
workspace's tool configuration, evaluated with the request context) as ordinary `Tool`s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from keel.app.definitions import Agent, App, AppError, Tool, ToolContext, UnknownTool
from keel.workspace_providers import WorkspaceError
from keel.workspace_providers.tools import WorkspaceCall, WorkspaceTool, workspace_tools


def _as_tool(wt: WorkspaceTool, request_context: Mapping[str, Any]) -> Tool:
    async def execute(args: BaseModel, ctx: ToolContext) -> Any:
        call = WorkspaceCall(
            request_context=ctx.request_context,
            read_record=ctx.read_record,
            tool_call_id=ctx.tool_call_id,
            attempt=ctx.attempt,
        )
        try:
            return await wt.execute(args.model_dump(by_alias=True, exclude_unset=True), call)
        finally:
            effects = call.effects
            ctx.effects.update(
                (k, v)
                for k, v in (
                    ("read", effects.read),
                    ("cleared", effects.cleared),
                    ("process_started", effects.process_started),
                )
                if v is not None
            )

    async def approval(args: BaseModel) -> bool:
        return await wt.needs_approval(args.model_dump(by_alias=True, exclude_unset=True), request_context)

    return Tool(
        id=wt.name,
        description=wt.description,
        input_schema=wt.input_model,
        execute=execute,
        require_approval=approval,
        idempotent=wt.idempotent,
        parameters=wt.parameters,
        workspace_tool=wt,
    )


async def agent_tools(app: App, agent: Agent, request_context: Mapping[str, Any] | None = None) -> list[Tool]:
    """`agent`'s tools for this request. A workspace tool named like one of the agent's own raises `AppError`."""
    tools = list(agent.tools)
    workspace = app.workspace_of(agent)
    if workspace is None:
        return tools
    own = {t.id for t in tools}
    try:
        found = await workspace_tools(workspace, request_context, taken=own.__contains__)
    except WorkspaceError as err:
        raise AppError(f"Agent {agent.id!r}: {err}") from err
    return tools + [_as_tool(wt, request_context or {}) for wt in found]


async def agent_tool(app: App, agent: Agent, name: str, request_context: Mapping[str, Any] | None = None) -> Tool:
    for t in await agent_tools(app, agent, request_context):
        if t.id == name:
            return t
    raise UnknownTool(name, agent.id)


async def agent_instructions(app: App, agent: Agent, request_context: Mapping[str, Any] | None = None) -> str:
    """The agent's instructions, then its workspace's (what Mastra adds to the system message)."""
    workspace = app.workspace_of(agent)
    extra = await workspace.get_instructions_async(request_context) if workspace is not None else ""
    return "\n\n".join(p for p in (agent.instructions, extra) if p)
