"""`/api/mcp`: every agent of the app as an MCP server (`keel.client.api.mcp_servers`), at Mastra's routes; the
server's id is the agent's.

    GET  /mcp/v0/servers                        {servers: [{id, name, description?, version_detail}], total_count, next}
    GET  /mcp/v0/servers/:id                    Mastra's server detail, with `remotes` (the transports' URLs)
    GET  /mcp/:serverId/tools                   {tools: [{id, name, description, inputSchema}]}
    GET  /mcp/:serverId/tools/:toolId           {name, description, inputSchema}
    POST /mcp/:serverId/tools/:toolId/execute   {result}; a call that waits for approval: {status: "suspended", ...}
    GET  /mcp/:serverId/resources               {resources: []}
    POST /mcp/:serverId/resources/read          404 (agents have no resources)
    POST /mcp/:serverId/mcp                     the MCP Streamable HTTP transport
    GET  /mcp/:serverId/sse, POST /mcp/:serverId/messages   the MCP SSE transport

Every tool call, over MCP or `execute`, is a `ToolCall` execution in Temporal (`keel.client.tool_calls`). Over
MCP the call waits through an approval; `execute` answers client-js's suspended shape instead, and the same
`execute` with `resumeData: {approved, reason?}` and the echoed `suspendPayload` decides the call and answers
its result. Both take a caller's call id (MCP: `_meta["keel/callId"]`; `execute`: `callId`) under which a repeated
call attaches to the same execution.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import Field, ValidationError
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from keel.app import Tool
from keel.client.api.bodies import Lenient
from keel.client.api.context import ApiContext, QueryContext
from keel.client.api.errors import ApiError, bad_request, not_found
from keel.client.api.mcp_servers import (
    MCP_PATH,
    AgentServer,
    McpServers,
    keel_version,
    validation_failure,
    validation_issues,
)
from keel.client.errors import RunClosed, ToolCallRejected
from keel.client.tool_calls import CALL_ID, StartedToolCall, ToolCalls
from keel.workflows.tool_call import tool_call_workflow_id

router = APIRouter(prefix="/mcp", tags=["mcp"])

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
}
"""The `resumeSchema` of a call that waits for approval."""


def mcp_servers(app: Any) -> McpServers:
    """The API's MCP servers (`app` is the FastAPI app), made on first use."""
    found: McpServers | None = getattr(app.state, "keel_mcp", None)
    if found is None:
        context: ApiContext = app.state.keel
        found = McpServers(context.app, ToolCalls(context.keel))
        app.state.keel_mcp = found
    return found


def _servers(request: Request) -> McpServers:
    return mcp_servers(request.app)


Servers = Annotated[McpServers, Depends(_servers)]


def _server(servers: McpServers, server_id: str) -> AgentServer:
    server = servers.get(server_id)
    if server is None:
        raise not_found(f"MCP server with ID '{server_id}' not found")
    return server


async def _tool(server: AgentServer, tool_id: str, request_context: dict[str, Any] | None) -> Tool:
    tool = await server.tool(tool_id, request_context)
    if tool is None:
        raise not_found(f"Tool with ID '{tool_id}' not found on MCP server '{server.agent.id}'")
    return tool


def _tool_info(tool: Tool) -> dict[str, Any]:
    return {"name": tool.id, "description": tool.description, "inputSchema": dict(tool.spec.parameters)}


Page = Annotated[int | None, Query(ge=0)]


@router.get("/v0/servers")
async def list_servers(
    servers: Servers, page: Page = None, perPage: Page = None, offset: Page = None, limit: Page = None
) -> dict[str, Any]:
    """Mastra's paging: `page`/`perPage`, or the older `offset`/`limit` (whose `next` keeps their form)."""
    ids = servers.ids()
    legacy = (limit is not None or offset is not None) and page is None and perPage is None
    per_page = perPage if perPage is not None else limit
    if page is None and offset is not None and per_page:
        page = offset // per_page
    start = page * per_page if page is not None and per_page is not None else 0
    shown, next_url = ids, None
    if per_page is not None:
        shown = ids[start : start + per_page]
        if start + per_page < len(ids):
            after = (
                f"limit={per_page}&offset={start + per_page}"
                if legacy
                else f"perPage={per_page}&page={(page or 0) + 1}"
            )
            next_url = f"{MCP_PATH}/v0/servers?{after}"
    infos = [server.info() for server in (servers.get(i) for i in shown) if server is not None]
    return {"servers": infos, "total_count": len(ids), "next": next_url}


@router.get("/v0/servers/{server_id}")
async def get_server(request: Request, servers: Servers, server_id: str, version: str | None = None) -> dict[str, Any]:
    """Mastra's `getServerDetail()`; `remotes` (where a client connects) is Keel's addition."""
    server = _server(servers, server_id)
    if version is not None and version != keel_version():
        raise not_found(
            f"MCP server with ID '{server_id}' found, but not version '{version}'. Available version: {keel_version()}"
        )
    base = f"{str(request.base_url).rstrip('/')}{MCP_PATH}/{server_id}"
    remotes = [
        {"transport_type": "streamable-http", "url": f"{base}/mcp"},
        {"transport_type": "sse", "url": f"{base}/sse"},
    ]
    return {**server.info(), "remotes": remotes}


@router.get("/{server_id}/tools")
async def list_tools(servers: Servers, server_id: str, request_context: QueryContext) -> dict[str, Any]:
    tools = await _server(servers, server_id).tools(request_context)
    return {"tools": [{"id": t.id, **_tool_info(t)} for t in tools]}


@router.get("/{server_id}/tools/{tool_id}")
async def get_tool(servers: Servers, server_id: str, tool_id: str, request_context: QueryContext) -> dict[str, Any]:
    return _tool_info(await _tool(_server(servers, server_id), tool_id, request_context))


class McpExecuteBody(Lenient):
    data: Any = None
    resume_data: Any = Field(None, alias="resumeData")
    suspend_payload: Any = Field(None, alias="suspendPayload")
    call_id: str | None = Field(None, alias="callId")
    """Keel's: the caller's id for the call; the same id again attaches to the same execution."""


@router.post("/{server_id}/tools/{tool_id}/execute")
async def execute_tool(
    servers: Servers, server_id: str, tool_id: str, body: McpExecuteBody, request_context: QueryContext
) -> dict[str, Any]:
    """`{result}` once the call's execution answers. A tool that waits for approval answers client-js's
    `{status: "suspended", suspendPayload, resumeSchema}` at once; the same call with `resumeData: {approved,
    reason?}` and the `suspendPayload` decides it and answers its result. Arguments that fail the tool's schema
    answer Mastra's `{result: {error: true, message, validationErrors}}`."""
    server = _server(servers, server_id)
    tool = await _tool(server, tool_id, request_context)
    if body.resume_data is not None:
        return await _resume(server, tool, body)
    data = body.data if body.data is not None else {}
    try:
        tool.input_schema.model_validate(data)
    except ValidationError as err:
        return {"result": _validation_result(err, data)}
    if body.call_id is not None and not CALL_ID.fullmatch(body.call_id):
        raise bad_request("callId: up to 128 letters, digits and _ . : - (starting with a letter or digit)")
    call = await server.calls.start(
        server.agent.id, tool, data, call_id=body.call_id, request_context=request_context, caller="http"
    )
    if call.requires_approval and not (body.call_id is not None and await server.calls.closed(call)):
        return {
            "status": "suspended",
            "suspendPayload": {
                "reason": "approval",
                "message": f"{tool.id} waits for approval: {call.approval_command()}",
                "workflowId": call.workflow_id,
                "toolCallId": call.tool_call_id,
                "toolName": tool.id,
                "args": data,
            },
            "resumeSchema": APPROVAL_SCHEMA,
        }
    return {"result": (await server.calls.result(call)).result}


async def _resume(server: AgentServer, tool: Tool, body: McpExecuteBody) -> dict[str, Any]:
    payload = body.suspend_payload if isinstance(body.suspend_payload, dict) else {}
    call_id = payload.get("toolCallId")
    if not isinstance(call_id, str) or not CALL_ID.fullmatch(call_id):
        raise bad_request("suspendPayload: echo the suspended answer's suspendPayload (its toolCallId)")
    decision = body.resume_data if isinstance(body.resume_data, dict) else {}
    approved, reason = decision.get("approved"), decision.get("reason")
    if not isinstance(approved, bool) or not (reason is None or isinstance(reason, str)):
        raise bad_request("resumeData must be {approved: boolean, reason?: string}", APPROVAL_SCHEMA)
    # Derived, not taken from the payload: this route decides only calls of this server's tool.
    call = StartedToolCall(tool_call_workflow_id(server.agent.id, tool.id, call_id), call_id, tool.id, True)
    try:
        await server.calls.keel.approve(call.workflow_id, call_id, approved=approved, reason=reason)
    except (ToolCallRejected, RunClosed):
        pass  # decided already (a repeated resume): the execution's outcome stands
    return {"result": (await server.calls.result(call)).result}


def _validation_result(err: ValidationError, data: Any) -> dict[str, Any]:
    """Mastra's answer for arguments that fail the schema, `validationErrors` in zod's `format()` shape."""
    formatted: dict[str, Any] = {"_errors": []}
    for path, message in validation_issues(err):
        node = formatted
        if path != "root":
            for part in path.split("."):
                node = node.setdefault(part, {"_errors": []})
        node["_errors"].append(message)
    return {"error": True, "message": validation_failure(err, data), "validationErrors": formatted}


@router.get("/{server_id}/resources")
async def list_resources(servers: Servers, server_id: str) -> dict[str, Any]:
    _server(servers, server_id)
    return {"resources": []}


class ReadResourceBody(Lenient):
    uri: str


@router.post("/{server_id}/resources/read")
async def read_resource(servers: Servers, server_id: str, body: ReadResourceBody) -> dict[str, Any]:
    _server(servers, server_id)
    raise ApiError(404, f"Resource '{body.uri}' not found on server '{server_id}'")


class _Transport:
    """An MCP transport endpoint (an ASGI app: the SDK's transports answer on the raw connection)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server_id = scope["path_params"]["server_id"]
        server = mcp_servers(scope["app"]).get(server_id)
        if server is None:
            await JSONResponse({"error": f"MCP server '{server_id}' not found"}, 404)(scope, receive, send)
        elif self.kind == "http":
            await server.streamable_http(scope, receive, send)
        elif self.kind == "sse":
            await server.sse_stream(scope, receive, send)
        else:
            await server.sse_message(scope, receive, send)


# Starlette routes (under the router's prefix: `include_router` adds the API's): an endpoint that is an object
# rather than a function is served as an ASGI app, and left out of the OpenAPI document.
router.routes.extend(
    Route(f"{router.prefix}/{{server_id}}/{path}", endpoint=_Transport(kind), methods=methods, include_in_schema=False)
    for path, kind, methods in (
        ("mcp", "http", ["GET", "POST", "DELETE"]),
        ("sse", "sse", ["GET"]),
        ("messages", "messages", ["POST"]),
    )
)
