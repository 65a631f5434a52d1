"""Every agent of the app as an MCP server, driven by the official `mcp` SDK's client over Streamable HTTP and SSE
and by `@mastra/client-js`'s MCP calls: the servers listed, an agent's tools (its workspace's included) listed with
their input schemas, a call that runs at once, and the demo agent's `save_note`, which waits in Temporal until
`temporal workflow signal --name tool_approval` approves it and then answers the waiting call. Every call is a
`ToolCall` execution: a client that went away while its call waited gets the result by calling again with the
same call id, and so does one whose API was killed (`kill -9`) under the waiting call."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from temporalio.client import Client

from keel.client import KeelClient
from keel.client.api import create_api
from keel.client.api.mcp_servers import CALL_ID_META, WORKFLOW_ID_META
from keel.client.api.server import serving
from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.client.errors import RunNotFound
from keel.storage import Storage
from tests.conftest import free_port, running_worker
from tests.http_api.apps import app
from tests.http_api.conftest import Api
from tests.http_api.test_api_crash import api_process, until_serving
from tests.test_temporal_cli import temporal

NOTE = {"title": "mcp-note", "text": "saved over MCP"}


@contextlib.asynccontextmanager
async def mcp_session(
    url: str, server_id: str, transport: str = "http", **options: Any
) -> AsyncIterator[ClientSession]:
    """An initialized `ClientSession` with the agent's MCP server, over Streamable HTTP or SSE."""
    async with contextlib.AsyncExitStack() as stack:
        if transport == "http":
            read, write, _ = await stack.enter_async_context(streamable_http_client(f"{url}/api/mcp/{server_id}/mcp"))
        else:
            read, write = await stack.enter_async_context(sse_client(f"{url}/api/mcp/{server_id}/sse"))
        session = await stack.enter_async_context(ClientSession(read, write, **options))
        await session.initialize()
        yield session


def text_of(result: types.CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def until_suspended(keel: KeelClient, workflow_id: str) -> None:
    """Until the call's execution waits for approval (`KeelStatus=suspended`, as the Temporal UI shows it)."""
    async with asyncio.timeout(20):
        while True:
            with contextlib.suppress(RunNotFound):
                if (await keel.describe(workflow_id)).status == "suspended":
                    return
            await asyncio.sleep(0.05)


async def approve(dev_server: DevServer, workflow_id: str, tool_call_id: str) -> None:
    decision = json.dumps({"toolCallId": tool_call_id, "approved": True})
    await temporal(
        dev_server, "workflow", "signal", "--workflow-id", workflow_id, "--name", "tool_approval", "--input", decision
    )


async def test_client_js_lists_the_agents_as_mcp_servers_and_runs_their_tools_as_mastra_answers(api: Api) -> None:
    answers = await api.js(
        """
        const failed = async (promise) => { try { await promise; return null; } catch (e) { return String(e); } };
        const note = client.getMcpServerTool('demo', 'save_note');
        const suspended = await note.execute({ data: vars.note });
        const declinedOne = await note.execute({ data: vars.note });
        return {
          all: await client.getMcpServers(),
          page: await client.getMcpServers({ perPage: 2, page: 1 }),
          detail: await client.getMcpServerDetails('demo'),
          tools: await client.getMcpServerTools('multi'),
          echo: await client.getMcpServerTool('multi', 'echo').details(),
          ran: await client.getMcpServerTool('multi', 'echo').execute({ data: { text: 'hi' } }),
          invalid: await client.getMcpServerTool('multi', 'echo').execute({ data: { text: 7 } }),
          suspended,
          approved: await note.execute({
            data: vars.note, resumeData: { approved: true }, suspendPayload: suspended.suspendPayload,
          }),
          declined: await note.execute({
            data: vars.note, resumeData: { approved: false }, suspendPayload: declinedOne.suspendPayload,
          }),
          unknown: await failed(client.getMcpServerTools('nope')),
        };
        """,
        note=NOTE,
    )
    agents = list(app.agents)
    assert [s["id"] for s in answers["all"]["servers"]] == agents
    assert answers["all"]["total_count"] == len(agents) and answers["all"]["next"] is None
    demo = answers["all"]["servers"][0]
    assert demo["name"] == "Demo agent" and set(demo["version_detail"]) == {"version", "release_date", "is_latest"}
    assert [s["id"] for s in answers["page"]["servers"]] == agents[2:4]
    assert answers["page"]["next"] == "/api/mcp/v0/servers?perPage=2&page=2"
    assert answers["detail"]["id"] == "demo"
    assert answers["detail"]["remotes"][0] == {
        "transport_type": "streamable-http",
        "url": f"{api.url}/api/mcp/demo/mcp",
    }
    schema = {"properties": {"text": {"title": "Text", "type": "string"}}, "required": ["text"], "title": "EchoInput"}
    assert answers["tools"] == {
        "tools": [
            {
                "id": "echo",
                "name": "echo",
                "description": "Return the text.",
                "inputSchema": {**schema, "type": "object"},
            }
        ]
    }
    assert answers["echo"]["name"] == "echo" and answers["echo"]["inputSchema"]["required"] == ["text"]
    assert answers["ran"] == {"result": {"echo": "hi"}}
    assert answers["invalid"]["result"]["error"] is True
    assert answers["invalid"]["result"]["validationErrors"]["text"]["_errors"] == ["Input should be a valid string"]
    assert answers["suspended"]["status"] == "suspended"
    assert answers["suspended"]["resumeSchema"]["required"] == ["approved"]
    assert answers["suspended"]["suspendPayload"]["workflowId"].startswith("keel-tool-call-demo-save_note-")
    saved = answers["approved"]["result"]
    assert Path(saved["path"]).read_text() == NOTE["text"]
    assert answers["declined"] == {"result": {"error": "Tool call was not approved by the user"}}
    assert "MCP server with ID 'nope' not found" in answers["unknown"]


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_the_mcp_sdk_lists_an_agents_tools_and_calls_one_that_runs_at_once(api: Api, transport: str) -> None:
    async with mcp_session(api.url, "demo", transport) as session:
        listed = await session.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert next(iter(tools)) == "save_note" and "mastra_workspace_read_file" in tools  # its own, then its workspace's
    assert tools["save_note"].description == "Save a note to the notes folder."
    assert tools["save_note"].inputSchema["required"] == ["title", "text"]
    assert tools["save_note"].inputSchema["properties"]["title"]["maxLength"] == 80

    async with mcp_session(api.url, "multi", transport) as session:
        result = await session.call_tool("echo", {"text": "hello"})
        invalid = await session.call_tool("echo", {"text": 7})
        unknown = await session.call_tool("nope", {})
    assert not result.isError and text_of(result) == '{"echo":"hello"}'
    assert result.meta is not None
    workflow_id = result.meta[WORKFLOW_ID_META]
    assert workflow_id == f"keel-tool-call-multi-echo-{result.meta[CALL_ID_META]}"
    assert (await api.keel.describe(workflow_id)).status == "completed"  # the call was an execution in Temporal
    assert invalid.isError and text_of(invalid).startswith(
        "Tool validation failed. Please fix the following errors and try again:\n- text: Input should be a valid string"
    )
    assert unknown.isError and text_of(unknown) == "Unknown tool: nope"


async def test_save_note_waits_in_temporal_for_the_temporal_cli_to_approve_it_then_answers_the_call(
    api: Api, dev_server: DevServer, data_dir: Path
) -> None:
    said: list[Any] = []
    progressed: list[str | None] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        said.append(params.data)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.append(message)

    async with mcp_session(api.url, "demo", logging_callback=on_log) as session:
        call = asyncio.create_task(session.call_tool("save_note", NOTE, progress_callback=on_progress))
        async with asyncio.timeout(20):
            while not said:
                await asyncio.sleep(0.05)
        [waiting] = said
        await until_suspended(api.keel, waiting["workflowId"])
        await asyncio.sleep(0.2)
        assert not call.done()  # the call waits for the decision
        await approve(dev_server, waiting["workflowId"], waiting["toolCallId"])
        result = await asyncio.wait_for(call, 30)
    assert "temporal workflow signal --workflow-id " + waiting["workflowId"] in waiting["message"]
    assert progressed == [waiting["message"]]
    assert not result.isError and result.meta is not None and result.meta[WORKFLOW_ID_META] == waiting["workflowId"]
    saved = json.loads(text_of(result))
    assert Path(saved["path"]) == data_dir / "notes" / "mcp-note.md" and Path(saved["path"]).read_text() == NOTE["text"]
    assert (await api.keel.describe(waiting["workflowId"])).status == "completed"


async def test_a_call_abandoned_while_it_waited_answers_a_retry_with_the_same_call_id_once_approved(
    api: Api, dev_server: DevServer, data_dir: Path
) -> None:
    meta = {CALL_ID_META: "note-abandoned"}
    workflow_id = "keel-tool-call-demo-save_note-note-abandoned"
    async with mcp_session(api.url, "demo") as session:
        call = asyncio.create_task(session.call_tool("save_note", NOTE, meta=meta))
        await until_suspended(api.keel, workflow_id)
        call.cancel()  # the client gives up (a timeout, a dropped connection): the call's execution stays
        with contextlib.suppress(asyncio.CancelledError):
            await call
    await approve(dev_server, workflow_id, "note-abandoned")
    async with mcp_session(api.url, "demo") as session:
        again = await session.call_tool("save_note", NOTE, meta=meta)
    assert not again.isError and again.meta == {WORKFLOW_ID_META: workflow_id, CALL_ID_META: "note-abandoned"}
    assert Path(json.loads(text_of(again))["path"]).read_text() == NOTE["text"]
    assert (await api.keel.temporal.count_workflows(f"WorkflowId='{workflow_id}'")).count == 1


async def test_a_call_id_used_again_with_other_arguments_is_refused_not_answered_with_the_first_call(
    api: Api, dev_server: DevServer, data_dir: Path
) -> None:
    """A call id names one call: another call under it (other arguments, or another tool whose execution id
    reads the same) must not be approved as the first, nor answered with the first's result."""
    meta = {CALL_ID_META: "note-reused"}
    workflow_id = "keel-tool-call-demo-save_note-note-reused"
    other = {**NOTE, "text": "something else entirely"}
    async with mcp_session(api.url, "demo") as session:
        first = asyncio.create_task(session.call_tool("save_note", NOTE, meta=meta))
        await until_suspended(api.keel, workflow_id)
        refused = await session.call_tool("save_note", other, meta=meta)
        assert refused.isError
        assert "note-reused" in text_of(refused) and "other arguments" in text_of(refused)
        await approve(dev_server, workflow_id, "note-reused")
        answered = await first
    assert not answered.isError
    assert Path(json.loads(text_of(answered))["path"]).read_text() == NOTE["text"]
    async with mcp_session(api.url, "demo") as session:  # after the first call ended: still refused
        late = await session.call_tool("save_note", other, meta=meta)
    assert late.isError and "other arguments" in text_of(late)
    assert Path(json.loads(text_of(answered))["path"]).read_text() == NOTE["text"]


async def test_an_unknown_server_is_a_404_with_mastras_error(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url) as http:
        answers = [
            await http.post("/api/mcp/nope/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            await http.get("/api/mcp/nope/sse"),
            await http.post("/api/mcp/nope/messages?session_id=0", json={}),
            await http.get("/api/mcp/v0/servers/nope"),
            await http.post("/api/mcp/nope/tools/echo/execute", json={"data": {}}),
        ]
    assert [a.status_code for a in answers] == [404] * 5
    assert [a.json()["error"] for a in answers[:3]] == ["MCP server 'nope' not found"] * 3
    assert [a.json() for a in answers[3:]] == [{"error": "MCP server with ID 'nope' not found"}] * 2


@pytest.mark.timeout(120)
async def test_after_kill_9_of_the_api_under_a_waiting_call_a_new_api_answers_it_with_the_same_call_id(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    meta = {CALL_ID_META: "note-kill-9"}
    workflow_id = "keel-tool-call-demo-save_note-note-kill-9"
    async with running_worker(client, app, storage, task_queue) as keel:
        port = free_port()
        with api_process(dev_server, task_queue, tmp_path, port) as first:
            url = f"http://127.0.0.1:{port}"
            await until_serving(url)
            async with mcp_session(url, "demo") as session:
                call = asyncio.create_task(session.call_tool("save_note", NOTE, meta=meta))
                await until_suspended(keel, workflow_id)
                first.kill()  # kill -9 under the waiting call
                await asyncio.to_thread(first.wait)
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
        await approve(dev_server, workflow_id, "note-kill-9")  # the execution waited in Temporal, without any API
        port = free_port()
        with api_process(dev_server, task_queue, tmp_path, port):
            url = f"http://127.0.0.1:{port}"
            await until_serving(url)
            async with mcp_session(url, "demo") as session:
                again = await session.call_tool("save_note", NOTE, meta=meta)
    assert not again.isError and again.meta is not None and again.meta[WORKFLOW_ID_META] == workflow_id
    assert Path(json.loads(text_of(again))["path"]).read_text() == NOTE["text"]
    assert (await client.count_workflows(f"WorkflowId='{workflow_id}'")).count == 1


@pytest.mark.timeout(180)
async def test_a_call_waiting_while_the_temporal_server_is_down_answers_its_outcome_once_it_is_back(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    """The API waits on the call's execution through a Temporal outage longer than the client's own retries
    (about 10 s): the MCP call answers the tool's result, never an error that only says Temporal was away (which a
    client cannot tell from the tool's failure)."""
    cfg = DevServerConfig(host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp_path / "temporal")
    server = await DevServer(cfg).start(reuse=False)
    meta = {CALL_ID_META: "note-outage"}
    workflow_id = "keel-tool-call-demo-save_note-note-outage"
    try:
        client = await connect(cfg.address)
        async with running_worker(client, app, storage, task_queue) as keel:
            api = create_api(app, keel, storage)
            async with serving(api, "127.0.0.1", free_port()) as url, mcp_session(url, "demo") as session:
                call = asyncio.create_task(session.call_tool("save_note", NOTE, meta=meta))
                await until_suspended(keel, workflow_id)
                assert server.proc is not None
                server.proc.kill()  # kill -9 of the Temporal server under the waiting call
                await asyncio.to_thread(server.proc.wait)
                server.proc = None
                await asyncio.sleep(15)
                await server.start(reuse=False)  # on its database: the execution waits there still
                await approve(server, workflow_id, "note-outage")
                answered = await asyncio.wait_for(call, 60)
    finally:
        server.stop()
    assert not answered.isError, text_of(answered)
    assert Path(json.loads(text_of(answered))["path"]).read_text() == NOTE["text"]


async def test_a_call_whose_start_loses_the_server_midway_starts_once_it_is_back() -> None:
    """Found by the outage test above, red once in CI: the call's execution started (eagerly, so it was already
    waiting for approval), then the server was killed before the start's next request (the check that the
    caller's call id is this call's) answered. That `RPCError` ('tcp connect error') left the handler and became
    the MCP call's result. Starting a call is idempotent (its id is the execution's), so a start that loses the
    server is made again once the server answers; only a definite answer ends it. Once the start may have
    reached the server, no worker check is made again: a worker slow to poll the restarted server would make it
    `NoWorker` for a call whose execution exists (and a caller retrying under a new id would run the tool twice)."""
    from temporalio.service import RPCError, RPCStatusCode

    from keel.client.outages import TemporalUnavailable
    from keel.client.tool_calls import CALL_MEMO, ToolCalls
    from keel.protocol import args_digest

    args = {"text": "hi"}
    call = {"agentId": "demo", "toolName": "echo", "argsDigest": args_digest(args)}
    failures: dict[str, list[Exception]] = {
        # What `KeelClient.wait_for_worker` raises once its own second ask has lost its answer too.
        "workers": [TemporalUnavailable(RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b""))],
        "start": [RPCError("transport error", RPCStatusCode.UNKNOWN, b"")],
        "describe": [RPCError("tcp connect error", RPCStatusCode.UNKNOWN, b"")],
    }
    starts: list[str] = []
    checks: list[str] = []  # the worker check: until the start is sent (then the execution exists: no check)

    def fail(what: str) -> None:
        if failures[what]:
            raise failures[what].pop(0)

    class Description:
        async def memo(self) -> dict[str, Any]:
            return {CALL_MEMO: call}

    class Handle:
        id = "keel-tool-call-demo-echo-c-1"

        async def describe(self) -> Description:
            fail("describe")
            return Description()

    class Temporal:
        async def start_workflow(self, *args: Any, id: str, **kwargs: Any) -> Handle:
            fail("start")
            starts.append(id)
            return Handle()

    class Keel:
        temporal, task_queue, eager_start = Temporal(), "q", True

        async def wait_for_worker(self) -> None:
            checks.append("workers")
            fail("workers")

    class Echo:
        id, idempotent = "echo", True

        async def needs_approval(self, args: Any) -> bool:
            return False

    calls = ToolCalls(Keel())  # type: ignore[arg-type]
    started = await asyncio.wait_for(calls.start("demo", Echo(), args, call_id="c-1"), 20)  # type: ignore[arg-type]
    assert started.workflow_id == Handle.id and starts == [Handle.id, Handle.id]
    assert checks == ["workers", "workers"]  # failed once, then passed: none after the start went out
    assert not any(failures.values())


async def test_a_dropped_connection_under_the_result_wait_is_asked_again_not_answered_as_the_calls_error() -> None:
    """Found by `make chaos` (60 minutes): a Temporal server killed under the result's long poll fails it with
    `transport error` (status UNKNOWN, not UNAVAILABLE), which answered the MCP call 'Error: Temporal error ...'.
    Only a definite answer ends the wait; a connection lost on the way is asked again."""
    from temporalio.service import RPCError, RPCStatusCode

    from keel.client.tool_calls import StartedToolCall, ToolCalls
    from keel.workflows.contracts import ToolCallOutcome

    done = ToolCallOutcome(tool_call_id="c1", tool_name="echo", result={"echo": "hi"}, is_error=False)
    failures = [
        RPCError("transport error", RPCStatusCode.UNKNOWN, b""),
        RPCError("gone", RPCStatusCode.UNAVAILABLE, b""),
    ]

    class Handle:
        async def result(self) -> ToolCallOutcome:
            if failures:
                raise failures.pop(0)
            return done

    class Temporal:
        def get_workflow_handle(self, workflow_id: str, result_type: type) -> Handle:
            return Handle()

    class Keel:
        temporal = Temporal()

    calls = ToolCalls(Keel())  # type: ignore[arg-type]
    outcome = await asyncio.wait_for(calls.result(StartedToolCall("wf-1", "c1", "echo", False)), 10)
    assert outcome == done and not failures
