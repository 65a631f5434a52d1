"""`/api/tools`: the app's tools (the built-ins, every agent's own, the app's), described and executed on a
worker (a standalone activity, as `keel tool` runs one)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field, ValidationError

from keel.app import Tool, UnknownTool
from keel.client.api.bodies import Lenient
from keel.client.api.context import Ctx
from keel.client.api.errors import not_found
from keel.client.api.shapes import tool_details

router = APIRouter(prefix="/tools", tags=["tools"])


class ToolExecuteBody(Lenient):
    data: Any = None
    request_context: dict[str, Any] | None = Field(None, alias="requestContext")


def _tool(ctx: Ctx, tool_id: str) -> Tool:
    try:
        return ctx.app.tool(tool_id)
    except UnknownTool:
        raise not_found("Tool not found") from None


@router.get("")
async def list_tools(ctx: Ctx) -> dict[str, Any]:
    return {tool_id: tool_details(t) for tool_id, t in ctx.app.workflow_tools().items()}


@router.get("/{tool_id}")
async def get_tool(ctx: Ctx, tool_id: str) -> dict[str, Any]:
    return tool_details(_tool(ctx, tool_id))


@router.post("/{tool_id}/execute")
async def execute_tool(ctx: Ctx, tool_id: str, body: ToolExecuteBody) -> Any:
    """The tool's return value. Input that fails validation is answered as Mastra does: HTTP 200 with
    `{error: true, message, validationErrors}` (checked here first, so no worker is bothered)."""
    tool = _tool(ctx, tool_id)
    data = body.data if body.data is not None else {}
    try:
        tool.parse_args(data if isinstance(data, dict) else {"": data})
    except ValidationError as err:
        fields: dict[str, Any] = {}
        for e in err.errors():
            name = ".".join(str(p) for p in e["loc"]) or "input"
            fields.setdefault(name, {"errors": [], "fields": {}})["errors"].append(e["msg"])
        message = f"Tool input validation failed for {tool_id}. " + "; ".join(
            f"{k}: {', '.join(v['errors'])}" for k, v in fields.items()
        )
        return {"error": True, "message": message, "validationErrors": {"errors": [], "fields": fields}}
    result = await ctx.keel.execute_tool(None, tool_id, data, request_context=body.request_context)
    return result.result
