"""AgentController sessions over HTTP with the real `@mastra/client-js` 1.47
(`client.getAgentController("assistant-controller").session(...)`): the quick start's events in the order the
real Mastra server sent them (tests/fixtures/mastra_controller_http.json), approvals and `ask_user` answers,
refusals as 4xx that client-js does not retry, state, permissions, threads, messages and goals; the SSE stream's
framing and its replay from an offset; and the channel webhook."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from keel.client.api import auth, controllers
from keel.client.controller import ControllerClient, Session
from keel.workflows.session_contracts import PendingItem
from tests.http_api import apps
from tests.http_api.conftest import Api

FIXTURE = json.loads((Path(__file__).parent.parent / "fixtures" / "mastra_controller_http.json").read_text())
CONTROLLER = "assistant-controller"

JS = """
const controller = client.getAgentController("assistant-controller");
const collect = async (session) => {
  const events = [];
  let wake = () => {};
  const sub = await session.subscribe({ onEvent: (e) => { events.push(e); wake(); }, reconnect: true });
  const until = async (pred, from = 0) => {
    const t0 = Date.now();
    for (;;) {
      const found = events.slice(from).find(pred);
      if (found) return found;
      if (Date.now() - t0 > 30000) throw new Error("timed out; saw " + events.map((e) => e.type).join(","));
      await new Promise((r) => { wake = r; setTimeout(r, 200); });
    }
  };
  return { events, until, stop: () => sub.unsubscribe() };
};
const answer = async (f) => {
  try { return { status: 200, value: (await f()) ?? null }; }
  catch (e) { return { status: e.status ?? String(e), body: e.body ?? null }; }
};
let calls = 0;
const counting = new MastraClient({ baseUrl: vars.url, fetch: (u, o) => { calls++; return fetch(u, o); } });
const types = (events) => events.filter((e) => e.type !== "display_state_changed").map((e) => e.type);
"""


def user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


def collapsed(kinds: list[str]) -> list[str]:
    """Consecutive `message_update`s as one (Keel streams text in more deltas than the recording's mock)."""
    return [k for i, k in enumerate(kinds) if not (k == "message_update" and i and kinds[i - 1] == k)]


def session_of(api: Api, resource_id: str, scope: str | None = None) -> Session:
    return ControllerClient(api.keel, api.storage, CONTROLLER).session(resource_id, scope)


async def pending(session: Session, kind: str = "approval") -> list[PendingItem]:
    async with asyncio.timeout(30):
        while not (found := [p for p in (await session.snapshot()).pending if p.kind == kind]):
            await asyncio.sleep(0.05)
    return found


async def test_the_quick_start_streams_what_mastra_streams(api: Api) -> None:
    out = await api.js(
        JS
        + """
        const session = controller.session(vars.user);
        const missing = await answer(() => session.state());  // nobody created it: reads do not make it
        const created = await session.create();
        const state = await session.state();
        const stream = await collect(session);
        await session.sendMessage("text hello from client-js");
        await stream.until((e) => e.type === "agent_end");
        stream.stop();
        return {
          missing, created, state,
          kinds: stream.events.map((e) => e.type),
          text: stream.events.filter((e) => e.type === "message_update").map((e) => e.event.delta).join(""),
          userCreatedAt: stream.events.find((e) => e.type === "message_start").message.createdAt,
          controllers: await client.listAgentControllers(),
          modes: await controller.listModes(),
          models: await controller.listModels(),
          workspace: await controller.workspaceStatus(),
          messages: await session.listMessages(created.threadId),
        };
        """,
        user=(resource := user()),
        url=api.url,
    )
    assert out["missing"]["status"] == 404 and "create it with POST" in out["missing"]["body"]["error"]
    thread_id = out["created"]["threadId"]
    assert out["created"] == {
        "controllerId": CONTROLLER,
        "resourceId": resource,
        "threadId": thread_id,
        "sessionId": f"keel-session:{CONTROLLER}:{resource}:",
    }
    state = out["state"]
    recorded = FIXTURE["client_js"]["state"]
    assert set(recorded) <= set(state)  # Mastra's fields, and Keel's
    assert state["omProgress"] == recorded["omProgress"] and state["settings"] == recorded["settings"]
    assert (state["threadId"], state["modeId"], state["running"], state["tasks"]) == (thread_id, "plan", False, [])
    assert state["pendingApprovals"] == [] and state["pendingSuspensions"] == []
    kinds = out["kinds"]
    assert kinds[1::2] == ["display_state_changed"] * (len(kinds) // 2)  # each event, then the state after it
    assert collapsed(kinds[::2]) == FIXTURE["client_js"]["subscribeEventTypes"]
    assert out["text"] == "echo: text hello from client-js"
    assert out["userCreatedAt"] is not None  # a valid Date (client-js hydrates it)
    assert {"id": CONTROLLER} in out["controllers"]
    assert [m["id"] for m in out["modes"]] == ["plan", "build", "review"] and out["modes"][0]["name"] == "Plan"
    model = {"id": "scripted/controller", "provider": "scripted", "modelName": "controller"}
    assert out["models"] == [model | {"hasApiKey": True, "useCount": 0}]  # no `models`: the agent's own
    assert out["workspace"] == {"hasWorkspace": True, "isReady": True}
    # no options: `?perPage=false`, all of them in Mastra's default order (newest first)
    assert [m["role"] for m in out["messages"]] == ["assistant", "user"]


async def test_approvals_over_http_and_refusals_client_js_does_not_retry(api: Api, data_dir: Path) -> None:
    out = await api.js(
        JS
        + """
        const session = controller.session(vars.user);
        const mine = counting.getAgentController("assistant-controller").session(vars.user);
        await session.create();
        const stream = await collect(session);
        await session.sendMessage('tool save_note {"text": "buy milk"}');
        const gate = await stream.until((e) => e.type === "tool_approval_required");
        const waiting = await session.state();
        let runs = [], threads = [];
        for (let i = 0; i < 50 && !runs.some((r) => r.runId === waiting.runId); i++) {  // visibility
          runs = await controller.listActiveRuns();
          threads = await session.listThreads();
          await new Promise((r) => setTimeout(r, 100));
        }
        calls = 0;
        const unknown = await answer(() => mine.approveTool("no-such-call", true));
        const unknownCalls = calls;
        await session.approveTool(gate.toolCallId, true);
        await stream.until((e) => e.type === "agent_end");
        const again = await answer(() => mine.approveTool(gate.toolCallId, false));
        const first = stream.events.length;
        await session.sendMessage('tool save_note {"text": "no thanks"}');
        const second = await stream.until((e) => e.type === "tool_approval_required", first);
        await session.approveTool(second.toolCallId, false);
        const declined = await stream.until((e) => e.type === "tool_end", first);
        await stream.until((e) => e.type === "agent_end", first);
        const third = stream.events.length;
        await session.sendMessage('tool save_note {"text": "stopped"}');
        await stream.until((e) => e.type === "tool_approval_required", third);
        await session.abort();
        const aborted = await stream.until((e) => e.type === "agent_end", third);
        stream.stop();
        return {
          gate, waiting, unknown, unknownCalls, again, declined, aborted, runs, threads,
          turn: types(stream.events.slice(0, first)),
          toolEnd: stream.events.find((e) => e.type === "tool_end"),
        };
        """,
        user=(resource := user()),
        url=api.url,
    )
    gate = out["gate"]
    assert (gate["toolName"], gate["args"]) == ("save_note", {"text": "buy milk"})
    [waiting] = out["waiting"]["pendingApprovals"]  # nothing waits unseen, even for a client that reconnects
    assert (waiting["toolCallId"], waiting["category"]) == (gate["toolCallId"], "edit")
    assert out["waiting"]["running"] is True
    run = {"runId": waiting["runId"], "resourceId": resource, "threadId": out["waiting"]["threadId"]}
    assert run in out["runs"]
    assert [t["state"] for t in out["threads"]] == ["active"]
    assert out["unknown"]["status"] == 404 and "No tool call 'no-such-call'" in out["unknown"]["body"]["error"]
    assert out["unknownCalls"] == 1  # a 4xx: client-js does not send it again
    assert out["again"]["status"] == 409 and "already decided" in out["again"]["body"]["error"]
    assert out["toolEnd"]["result"] == {"saved": "buy milk"} and out["toolEnd"]["isError"] is False
    assert (data_dir / "notes.log").read_text() == "buy milk\n"
    assert out["declined"]["denied"] is True and out["declined"]["result"] == "Tool call was not approved by the user"
    assert out["aborted"]["reason"] == "aborted"
    recorded = [e["type"] for e in FIXTURE["sse_approval_turn"] if e["type"] != "display_state_changed"]
    turn = collapsed(out["turn"])
    # Mastra's gate and outcome in its order. (The session ends the step's assistant message, with its usage,
    # before `tool_approval_required`, where Mastra keeps it open until the tool's result.)
    landmarks = ["agent_start", "tool_start", "tool_approval_required", "tool_end", "agent_end"]
    assert [k for k in turn if k in landmarks] == [k for k in recorded if k in landmarks]
    assert turn[:5] == recorded[:5]


async def test_ask_user_waits_for_an_answer_through_tool_suspension(api: Api) -> None:
    out = await api.js(
        JS
        + """
        const session = controller.session(vars.user, "tab-1");
        const created = await session.create();
        await session.setPermissionForTool("ask_user", "allow");
        const stream = await collect(session);
        await session.sendMessage("ask");
        const asked = await stream.until((e) => e.type === "tool_suspended");
        const waiting = await session.state();
        const wrong = await answer(() => session.respondToToolSuspension(asked.toolCallId, {not: "an answer"}));
        const unknown = await answer(() => session.respondToToolSuspension("nope", "SQLite"));
        await session.respondToToolSuspension(asked.toolCallId, "SQLite");
        await stream.until((e) => e.type === "agent_end");
        stream.stop();
        const messages = await session.listMessages(created.threadId);
        return {asked, waiting, wrong, unknown, last: messages[0]};  // newest first
        """,
        user=user(),
        url=api.url,
    )
    assert out["asked"]["suspendPayload"]["question"] == "Which database?"
    [waiting] = out["waiting"]["pendingSuspensions"]
    assert waiting["toolCallId"] == out["asked"]["toolCallId"] and waiting["toolName"] == "ask_user"
    assert out["waiting"]["sessionScope"] == "tab-1"
    assert out["wrong"]["status"] == 422 and "does not match its schema" in out["wrong"]["body"]["error"]
    assert out["unknown"]["status"] == 404
    assert "User answered: SQLite" in out["last"]["content"]["parts"][0]["text"]


async def test_state_modes_permissions_threads_messages_and_goals(api: Api) -> None:
    out = await api.js(
        JS
        + """
        const session = controller.session(vars.user);
        const mine = counting.getAgentController("assistant-controller").session(vars.user);
        const created = await session.create();
        const first = created.threadId;
        const r = {};
        calls = 0;
        r.unknownMode = await answer(() => mine.switchMode("nope"));
        r.unknownModeCalls = calls;
        r.badState = await answer(() => mine.setState({counter: "many"}));
        await session.setState({counter: 2});
        await session.switchMode("build");
        await session.switchModel("mock/build-choice");
        await session.setPermissionForCategory("edit", "allow");
        await session.setPermissionForTool("search_docs", "deny");
        r.permissions = await session.getPermissions();
        r.badCategory = await answer(() => mine.setPermissionForCategory("nope", "allow"));
        const stream = await collect(session);
        await session.sendMessage("text one");
        await stream.until((e) => e.type === "agent_end");
        stream.stop();
        r.state = await session.state();
        const second = await session.createThread("Second");
        r.afterCreate = (await session.state()).threadId === second.id;
        await session.renameThread(first, "Renamed");  // does not switch (Mastra's does)
        r.afterRename = (await session.state()).threadId === second.id;
        r.unknownSwitch = await answer(() => mine.switchThread("nope"));
        r.unknownDelete = await answer(() => mine.deleteThread("nope"));
        await session.switchThread(first);
        r.clone = await session.cloneThread({sourceThreadId: first, title: "Copy"});
        r.threads = await session.listThreads();
        await session.deleteThread(second.id);
        r.threadsAfterDelete = (await session.listThreads()).map((t) => t.id);
        r.oneThread = await session.listThreads(1);
        r.newest = await session.listMessages(first, 1);
        const oldestFirst = {field: "createdAt", direction: "ASC"};
        r.page = await session.listMessages(first, {page: 0, perPage: 1, orderBy: oldestFirst});
        r.unknownThreadMessages = await answer(() => mine.listMessages("nope"));
        r.noGoal = (await session.getGoal()) ?? null;
        r.updateNoGoal = await answer(() => mine.updateGoal({status: "paused"}));
        r.goal = await session.setGoal("Ship it", {maxRuns: 3});
        r.paused = await session.updateGoal({status: "paused"});
        await session.clearGoal();
        r.cleared = (await session.getGoal()) ?? null;
        r.resources = await session.getResourceIds();
        r.rekey = await answer(() => mine.setResourceId("someone-else"));
        await session.setResourceId(vars.user);  // its own: fine
        const once = new MastraClient({ baseUrl: vars.url, retries: 0 });
        r.om = await answer(() => once.getAgentController("assistant-controller").session(vars.user).getOMRecord());
        r.notification = await session.sendNotification({source: "ci", kind: "build", summary: "Build failed"});
        r.otherResource = await answer(() => controller.session("nobody-" + vars.user).getPermissions());
        return {r, first, second};
        """,
        user=(resource := user()),
        url=api.url,
    )
    r, first, second = out["r"], out["first"], out["second"]
    assert r["unknownMode"] == {"status": 404, "body": {"error": "Mode not found: nope"}}
    assert r["unknownModeCalls"] == 1  # Mastra answers 500 and client-js sends it four times
    assert r["badState"]["status"] == 422 and r["badState"]["body"]["error"].startswith("Invalid state update")
    assert r["badCategory"]["status"] == 400
    assert r["permissions"] == {
        "categories": {"edit": "allow"},
        "tools": {"search_docs": "deny"},
        "grants": {"categories": [], "tools": []},
    }
    assert (r["state"]["modeId"], r["state"]["modelId"]) == ("build", "mock/build-choice")
    assert r["state"]["tokenUsage"]["totalTokens"] > 0
    assert r["afterCreate"] and r["afterRename"]
    assert r["unknownSwitch"]["status"] == 404 and r["unknownDelete"]["status"] == 404
    assert r["clone"]["title"] == "Copy" and r["clone"]["resourceId"] == resource
    titles = {t["id"]: t["title"] for t in r["threads"]}
    assert titles[first] == "Renamed" and titles[second["id"]] == "Second" and titles[r["clone"]["id"]] == "Copy"
    assert all(t["state"] == "idle" for t in r["threads"])
    assert second["id"] not in r["threadsAfterDelete"] and len(r["oneThread"]) == 1
    assert [m["role"] for m in r["newest"]] == ["assistant"]
    assert [m["role"] for m in r["page"]["messages"]] == ["user"]
    assert (r["page"]["total"], r["page"]["hasMore"], r["page"]["perPage"]) == (2, True, 1)
    assert r["unknownThreadMessages"] == {"status": 404, "body": {"error": "Thread not found"}}
    assert r["noGoal"] is None and r["updateNoGoal"]["status"] == 404
    assert r["goal"] == {"objective": "Ship it", "status": "active", "runsUsed": 0, "maxRuns": 3}
    assert r["paused"]["status"] == "paused" and r["cleared"] is None
    assert r["resources"] == [resource]
    assert r["rekey"]["status"] == 409 and "cannot move to another resource" in r["rekey"]["body"]["error"]
    assert r["om"]["status"] == 501
    assert r["om"]["body"]["error"] == "Observational memory is not implemented in Keel"
    assert "observer" in r["om"]["body"]["details"]
    assert r["notification"]["accepted"] is True and r["notification"]["decision"] == "wake"
    assert r["otherResource"]["status"] == 404


async def frames(response: httpx.Response) -> AsyncIterator[str]:
    buffer = ""
    async for text in response.aiter_text():
        buffer += text
        while "\n\n" in buffer:
            frame, buffer = buffer.split("\n\n", 1)
            yield frame


async def until_end(found: AsyncIterator[str]) -> list[str]:
    shown = []
    async with asyncio.timeout(30):
        async for frame in found:
            if frame.startswith(":"):
                continue
            shown.append(frame)
            if '"type":"agent_end"' in frame:
                return shown
    raise AssertionError(f"the stream ended: {shown}")


def parsed(frame: str) -> tuple[int, dict[str, Any]]:
    id_line, data_line = frame.split("\n")
    assert id_line.startswith("id: ") and data_line.startswith("data: ")
    return int(id_line[4:]), json.loads(data_line[6:])


async def test_the_stream_is_mastras_sse_and_replays_from_an_offset_exactly_once(api: Api) -> None:
    base = f"{api.url}/api/agent-controller/{CONTROLLER}/sessions/{user()}"
    async with httpx.AsyncClient(timeout=30) as http:
        async with http.stream("GET", f"{base}/stream") as live:  # the session is made by subscribing
            assert live.status_code == 200
            recorded = FIXTURE["sse_on_connect"]["headers"]
            assert {k: live.headers.get(k) for k in recorded} == recorded
            reader = frames(live)
            assert await anext(reader) == ": connected"  # sent before anything happens
            assert (await http.post(f"{base}/messages", json={"message": "text replay me"})).status_code == 200
            seen = await until_end(reader)
        ids = [parsed(f)[0] for f in seen]
        kinds = [parsed(f)[1]["type"] for f in seen]
        # each event, then the display state after it with the same id (the last one's is not read)
        assert kinds[1::2] == ["display_state_changed"] * (len(kinds) // 2) and ids[:-1:2] == ids[1::2]
        assert kinds[0] == "agent_start" and ids == sorted(ids)
        middle = ids[6]
        async with http.stream("GET", f"{base}/stream", params={"offset": middle}) as again:
            replayed = await until_end(frames(again))
        assert replayed == seen[6:]  # the rest, each once, display states included
        async with http.stream("GET", f"{base}/stream?offset=0", headers={"Last-Event-ID": str(middle)}) as resumed:
            after = await until_end(frames(resumed))
        assert after == seen[8:]  # an EventSource's reconnect: after the last id it saw (the header wins)
        bad = await http.get(f"{base}/stream", headers={"Last-Event-ID": "x"})
        assert bad.status_code == 400


async def test_a_quiet_stream_sends_heartbeats(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controllers, "HEARTBEAT_SECONDS", 0.2)
    base = f"{api.url}/api/agent-controller/{CONTROLLER}/sessions/{user()}"
    async with httpx.AsyncClient(timeout=30) as http, http.stream("GET", f"{base}/stream") as live:
        reader = frames(live)
        assert [await anext(reader), await anext(reader), await anext(reader)] == [
            ": connected",
            ": heartbeat",
            ": heartbeat",
        ]


async def test_the_channel_webhook_starts_a_session_per_chat_thread(api: Api, data_dir: Path) -> None:
    hooks = f"{api.url}/api/agent-controllers/{CONTROLLER}/channels"
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=30) as http:
        first = await http.post(f"{hooks}/generic/webhook", json={"threadId": chat, "text": "explode text hi"})
        assert first.status_code == 200, first.text
        found = first.json()
        assert found["resourceId"] == f"channel:generic:{chat}" and found["newSession"] is True
        assert apps.STARTED.count((found["sessionId"], chat)) == 1  # its on_session_start failed: logged only
        session = session_of(api, found["resourceId"], chat)
        await session.settled(found["runId"])
        # generic cannot show approvals: its sessions run in yolo, so a tool call does not wait for anyone
        tool = {"threadId": chat, "text": 'tool save_note {"text": "from chat"}'}
        second = (await http.post(f"{hooks}/generic/webhook", json=tool)).json()
        assert "newSession" not in second and apps.STARTED.count((found["sessionId"], chat)) == 1
        done = await session.settled(second["runId"])
        assert done.pending == [] and done.permissions.yolo
        assert (data_dir / "notes.log").read_text() == "from chat\n"
        # a question the agent asks is answered by the next chat message
        asked = (await http.post(f"{hooks}/generic/webhook", json={"threadId": chat, "text": "ask"})).json()
        [question] = await pending(session, "suspension")
        reply = (await http.post(f"{hooks}/generic/webhook", json={"threadId": chat, "text": "SQLite"})).json()
        assert reply["answered"] == question.tool_call_id
        await session.settled(asked["runId"])
        last = (await session.thread.list_messages())[-1]["content"][0]["text"]
        assert "User answered: SQLite" in last
        # a platform that shows approvals: no yolo, the call waits for a decision; its own body shape
        who = f"ann-{uuid.uuid4().hex[:6]}"
        ops = {"channel": chat, "message": 'tool save_note {"text": "needs a yes"}', "user": who}
        gated = (await http.post(f"{hooks}/chatops/webhook", json=ops)).json()
        assert gated["resourceId"] == f"user:{who}"
        [waiting] = await pending(session_of(api, f"user:{who}", chat))
        assert waiting.tool_name == "save_note"
        ping = await http.post(f"{hooks}/chatops/webhook", json={"ping": True})
        assert ping.json() == {"ok": True, "ignored": True}
        unknown = await http.post(f"{hooks}/nope/webhook", json={"threadId": chat, "text": "hi"})
        assert unknown.status_code == 404 and "known: chatops, generic" in unknown.json()["error"]
        invalid = await http.post(f"{hooks}/generic/webhook", json={"text": "no thread"})
        assert invalid.status_code == 400 and invalid.json()["issues"][0]["field"] == "threadId"


def test_api_keys_scope_the_controller_routes_and_webhooks_as_agent_controllers() -> None:
    assert auth.required_scope("GET", "/api/agent-controller/a/sessions/u/stream") == "agent-controllers:read"
    assert auth.required_scope("POST", "/api/agent-controller/a/sessions/u/messages") == "agent-controllers:write"
    webhook = "/api/agent-controllers/a/channels/generic/webhook"
    assert auth.required_scope("POST", webhook) == "agent-controllers:write"


async def test_sessions_opened_at_once_on_different_threads_each_answer_their_own_thread(api: Api) -> None:
    """Found from outside: 5 creates of one resource's session at once, each naming its thread. Each binds the
    session to its thread in turn, and its answer names that thread; before, the answer was read afterwards, so
    a create asking for t0 answered t4 (3 of 5 trials)."""
    resource = user()
    path = f"/api/agent-controller/{CONTROLLER}/sessions"
    async with httpx.AsyncClient(base_url=api.url, timeout=60) as http:
        for trial in range(3):
            asked = [f"t{i}-{trial}-{resource}" for i in range(5)]
            answers = await asyncio.gather(
                *(http.post(path, json={"resourceId": resource, "threadId": thread}) for thread in asked)
            )
            assert [a.status_code for a in answers] == [200] * 5, [a.text for a in answers]
            assert [a.json()["threadId"] for a in answers] == asked
