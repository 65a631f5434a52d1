"""Each agent of the app as an MCP server, on the `mcp` SDK's low-level `Server`: the agent's tools (its
workspace's included) listed with their input schemas, and each `tools/call` a durable `ToolCall` execution
(`keel.client.tool_calls`). A tool whose policy asks for approval waits in Temporal until it is decided (the
`tool_approval` signal, as an `AgentRun`'s call), then the call answers.

Two transports, at Mastra's routes:

* Streamable HTTP (`/api/mcp/:serverId/mcp`), stateless: the SDK's session manager with `stateless=True`, one per
  request. Nothing of a client's session lives in the API, so any API process answers any of its requests, before
  and after a restart (Mastra's is stateful: its `Mcp-Session-Id` dies with the process). No GET stream: every
  answer and notification of a call travels on the POST that made it.
* SSE (`/api/mcp/:serverId/sse`, then POSTs to `/api/mcp/:serverId/messages`): the SDK's `SseServerTransport`
  (the POSTs must reach the process that holds the stream, as with Mastra's).

A call that waits for approval says so first, as a log message notification (and a progress notification when
the client sent a progress token) naming its execution and the `temporal workflow signal` that approves it. Every
result names its execution in `_meta` (`keel/workflowId`). A client that sends `_meta: {"keel/callId": "<id>"}`
names the execution itself: the same call id again (after a timeout, a dropped connection, an API restarted
or killed) attaches to the same execution and answers its result; the tool runs once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import quote

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from pydantic import ValidationError
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from keel.app import Agent, App, Tool
from keel.app.agent_tools import agent_tools
from keel.client.errors import KeelClientError
from keel.client.tool_calls import StartedToolCall, ToolCalls
from keel.workflows.contracts import ToolCallOutcome

MCP_PATH = "/api/mcp"
CALL_ID_META = "keel/callId"
"""`_meta` key of a `tools/call` request: the caller's id for the call (a retry with it attaches)."""
WORKFLOW_ID_META = "keel/workflowId"
"""`_meta` key of a `tools/call` result: the call's execution in Temporal."""


def keel_version() -> str:
    try:
        return version("keel")
    except PackageNotFoundError:
        return "0.0.0"


class AgentServer:
    """One agent as an MCP server: the SDK's `Server` with its handlers, and its SSE transport (its sessions)."""

    def __init__(self, app: App, agent: Agent, calls: ToolCalls, release_date: str) -> None:
        self.app, self.agent, self.calls = app, agent, calls
        self.release_date = release_date
        self.server: Server[Any, Any] = Server(
            agent.display_name, version=keel_version(), instructions=agent.description or None
        )
        self.server.list_tools()(self._list_tools)  # type: ignore[no-untyped-call]  # the SDK leaves it untyped
        # Arguments are validated as the agent's runs validate them (the tool's pydantic model), with Mastra's text.
        self.server.call_tool(validate_input=False)(self._call_tool)
        # Declares the `logging` capability (as Mastra's does): a call waiting for approval says so in a log message.
        self.server.set_logging_level()(self._set_logging_level)  # type: ignore[no-untyped-call]
        self.sse = SseServerTransport(f"{MCP_PATH}/{quote(agent.id, safe='')}/messages")

    # --- what Mastra's `MCPServer` answers -------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Mastra's `getServerInfo()`."""
        found: dict[str, Any] = {"id": self.agent.id, "name": self.agent.display_name}
        if self.agent.description:
            found["description"] = self.agent.description
        found["version_detail"] = {"version": keel_version(), "release_date": self.release_date, "is_latest": True}
        return found

    async def tools(self, request_context: Mapping[str, Any] | None = None) -> list[Tool]:
        return await agent_tools(self.app, self.agent, request_context)

    async def tool(self, name: str, request_context: Mapping[str, Any] | None = None) -> Tool | None:
        return next((t for t in await self.tools(request_context) if t.id == name), None)

    # --- the MCP handlers ------------------------------------------------------------------------------

    async def _list_tools(self) -> list[types.Tool]:
        return [
            types.Tool(name=t.id, description=t.description, inputSchema=dict(t.spec.parameters))
            for t in await self.tools()
        ]

    async def _set_logging_level(self, level: types.LoggingLevel) -> None:
        """Accepted; the only messages sent (a call waiting for approval) are always wanted."""

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        context = self.server.request_context
        extra = (context.meta.model_extra or {}) if context.meta is not None else {}
        call_id = extra.get(CALL_ID_META)
        if call_id is not None and not isinstance(call_id, str):
            return error_result(f"Invalid _meta: {CALL_ID_META} must be a string")
        tool = await self.tool(name)
        if tool is None:
            return error_result(f"Unknown tool: {name}")
        try:
            tool.parse_args(arguments)
        except ValidationError as err:
            return error_result(validation_failure(err, arguments))
        try:
            started = await self.calls.start(self.agent.id, tool, arguments, call_id=call_id, caller="mcp")
        except KeelClientError as err:
            return error_result(f"Error: {err}")
        if started.requires_approval:
            text = (
                f"{name} needs approval: its execution (workflow {started.workflow_id}, tool call "
                f"{started.tool_call_id}) waits in Temporal until decided. Approve: {started.approval_command()}"
            )
            data = {"message": text, "workflowId": started.workflow_id, "toolCallId": started.tool_call_id}
            await context.session.send_log_message("info", data, logger="keel", related_request_id=context.request_id)
            token = context.meta.progressToken if context.meta is not None else None
            if token is not None:
                await context.session.send_progress_notification(
                    token, 0, message=text, related_request_id=str(context.request_id)
                )
        try:
            outcome = await self.calls.result(started)
        except KeelClientError as err:
            return error_result(f"Error: {err}", started)
        return call_result(outcome, started)

    # --- transports (ASGI) -----------------------------------------------------------------------------

    async def streamable_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":  # stateless: no standalone stream to GET, no session to DELETE
            body = {"jsonrpc": "2.0", "error": {"code": -32000, "message": "Method not allowed."}, "id": None}
            await JSONResponse(body, 405, headers={"Allow": "POST"})(scope, receive, send)
            return
        manager = StreamableHTTPSessionManager(self.server, stateless=True)
        async with manager.run():
            await manager.handle_request(scope, receive, send)

    async def sse_stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self.sse.connect_sse(scope, receive, send) as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    async def sse_message(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.sse.handle_post_message(scope, receive, send)


class McpServers:
    """The app's agents as MCP servers (by agent id), made on first use; one per API."""

    def __init__(self, app: App, calls: ToolCalls) -> None:
        self.app, self.calls = app, calls
        # Mastra's default `releaseDate`: when the server was made.
        self.release_date = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        self._servers: dict[str, AgentServer] = {}

    def ids(self) -> list[str]:
        return list(self.app.agents)

    def get(self, server_id: str) -> AgentServer | None:
        agent = self.app.agents.get(server_id)
        if agent is None:
            return None
        if server_id not in self._servers:
            self._servers[server_id] = AgentServer(self.app, agent, self.calls, self.release_date)
        return self._servers[server_id]


# --- results as Mastra's `MCPServer` words them ----------------------------------------------------------------


def error_result(text: str, call: StartedToolCall | None = None) -> types.CallToolResult:
    meta = {WORKFLOW_ID_META: call.workflow_id, CALL_ID_META: call.tool_call_id} if call is not None else None
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=True, _meta=meta)


def call_result(outcome: ToolCallOutcome, call: StartedToolCall) -> types.CallToolResult:
    """The tool's result as text (a string as is, else its JSON); an error, a declined call and a failed
    execution as `isError` results; `_meta` names the execution."""
    result = outcome.result
    if outcome.is_error:
        message = result.get("error") if isinstance(result, dict) else None
        text = message if isinstance(message, str) else compact_json(result)
        return error_result(text if outcome.declined else f"Error: {text}", call)
    text = result if isinstance(result, str) else compact_json(result)
    meta = {WORKFLOW_ID_META: call.workflow_id, CALL_ID_META: call.tool_call_id}
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=False, _meta=meta)


def compact_json(value: Any) -> str:
    """`JSON.stringify(value)`."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def validation_issues(err: ValidationError) -> list[tuple[str, str]]:
    return [(".".join(str(p) for p in e["loc"]) or "root", e["msg"]) for e in err.errors()]


def validation_failure(err: ValidationError, arguments: Any) -> str:
    """Mastra's text for arguments that fail the tool's schema."""
    lines = "\n".join(f"- {path}: {message}" for path, message in validation_issues(err))
    return (
        "Tool validation failed. Please fix the following errors and try again:\n"
        f"{lines}\n\nProvided arguments: {json.dumps(arguments, indent=2)}"
    )


__all__ = ["CALL_ID_META", "MCP_PATH", "WORKFLOW_ID_META", "AgentServer", "McpServers", "call_result"]
