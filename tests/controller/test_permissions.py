"""The permission matrix of a session, through real turns: each category under each policy, Mastra's defaults, a
tool rule over its category's, a mode's allow-list, yolo. The scripted model's `probe` calls tools and says what
it was offered and got back; each tool writes `ran.log` when it really runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from keel import AgentController
from keel.client.controller import Session
from keel.storage import Storage
from keel.workflows import agent_session
from tests.controller.conftest import bound_controller
from tests.controller.test_sessions import user, wait_pending

CATEGORY_TOOLS = {
    "read": "search_docs",
    "edit": "save_note",
    "execute": "run_check",
    "mcp": "mcp_lookup",
    "other": "misc_ping",
}
"""A tool of each category (`tests.controller.apps.CATEGORIES`)."""
DENIED = "denied by this session's permissions"


@pytest.fixture(autouse=True)
def _isolated(data_dir: Path) -> None:
    """Every test's tools write into its own data dir."""


async def probe(session: Session, calls: dict[str, dict[str, Any]]) -> None:
    await session.send_message("probe " + json.dumps(calls))


async def report(session: Session) -> dict[str, Any]:
    """What the model answered at the end of the last turn: what it was offered, and got back from each call."""
    found: dict[str, Any] = json.loads((await session.thread.list_messages())[-1]["content"][0]["text"])
    return found


def ran(data_dir: Path) -> list[str]:
    log = data_dir / "ran.log"
    return sorted(line.split(" ")[0] for line in log.read_text().splitlines()) if log.exists() else []


async def events(session: Session, turns: int) -> list[dict[str, Any]]:
    """The session's events up to the end of its `turns`-th turn."""
    found: list[dict[str, Any]] = []
    async with asyncio.timeout(20):
        async for event in session.events(offset=0, display_state=False):
            found.append(event)
            if event["type"] == "agent_end":
                turns -= 1
                if turns == 0:
                    return found
    raise AssertionError("unreachable")


def asked(found: list[dict[str, Any]]) -> list[str]:
    return sorted(e["toolName"] for e in found if e["type"] == "tool_approval_required")


def probed(category: str) -> dict[str, Any]:
    return {"text": category}


def outcome(name: str, category: str) -> dict[str, Any]:
    """What a call that ran gives back."""
    if name == "search_docs":
        return {"found": f"docs about {category}"}
    if name == "save_note":
        return {"saved": category}
    return {"ran": name, "text": category}


@pytest.mark.parametrize("policy", ["allow", "ask", "deny"])
async def test_each_category_follows_its_policy(ctl: AgentController, data_dir: Path, policy: str) -> None:
    session = await ctl.create_session(user())
    for category in CATEGORY_TOOLS:
        await session.permissions.set_for_category(category, policy)
    assert await session.permissions.get() == {"categories": dict.fromkeys(CATEGORY_TOOLS, policy), "tools": {}}
    await probe(session, {name: probed(category) for category, name in CATEGORY_TOOLS.items()})

    if policy == "ask":  # each call waits for a decision, and runs once approved
        pending = (await session.snapshot()).pending
        assert sorted((p.kind, p.tool_name, p.category) for p in pending) == sorted(
            ("approval", name, category) for category, name in CATEGORY_TOOLS.items()
        )
        shown = await session.display_state.get()
        assert shown["isRunning"] and set(shown["pendingApprovals"]) == {p.tool_call_id for p in pending}
        assert ran(data_dir) == []
        for item in pending:
            await session.respond_to_tool_approval(item.tool_call_id, "approve")
        await session.settled()

    snapshot = await session.snapshot()
    assert snapshot.pending == [] and not snapshot.running
    got = await report(session)
    found = await events(session, 1)
    if policy == "deny":  # never offered, never run, never asked about
        assert not set(CATEGORY_TOOLS.values()) & set(got["offered"])
        for name in CATEGORY_TOOLS.values():
            assert got["results"][name]["isError"] and DENIED in str(got["results"][name]["result"])
        assert ran(data_dir) == [] and asked(found) == []
        assert not (data_dir / "notes.log").exists()
        return
    assert set(CATEGORY_TOOLS.values()) <= set(got["offered"])
    for category, name in CATEGORY_TOOLS.items():
        assert got["results"][name] == {"result": outcome(name, category), "isError": False, "denied": False}
    assert ran(data_dir) == sorted(CATEGORY_TOOLS.values())
    assert asked(found) == (sorted(CATEGORY_TOOLS.values()) if policy == "ask" else [])


async def test_with_no_rule_every_tool_asks_as_mastras_default(ctl: AgentController, data_dir: Path) -> None:
    """Mastra: no rule, no grant, no yolo: `ask`, for every category, an uncategorised tool and a built-in alike;
    `always_allow_category` on an uncategorised call approves it and grants nothing."""
    session = await ctl.create_session(user())
    assert await session.permissions.get() == {"categories": {}, "tools": {}}
    state = await session.state.get()
    assert state["permissionRules"] == {"categories": {}, "tools": {}} and state["yolo"] is False
    calls = {name: probed(category) for category, name in CATEGORY_TOOLS.items()}
    calls |= {"free_echo": probed("none"), "task_check": {}, "mastra_workspace_list_files": {"path": "."}}
    await probe(session, calls)
    pending = {p.tool_name: p for p in (await session.snapshot()).pending}
    expected: dict[str, str | None] = {name: category for category, name in CATEGORY_TOOLS.items()}
    expected |= {"free_echo": None, "task_check": None, "mastra_workspace_list_files": "read"}
    assert {name: p.category for name, p in pending.items()} == expected
    assert {p.kind for p in pending.values()} == {"approval"} and ran(data_dir) == []

    await session.respond_to_tool_approval(pending["free_echo"].tool_call_id, "always_allow_category")
    assert await session.permissions.grants() == {"categories": [], "tools": []}
    for name, item in pending.items():
        if name != "free_echo":
            await session.respond_to_tool_approval(item.tool_call_id, "approve")
    snapshot = await session.settled()
    assert snapshot.pending == [] and not snapshot.running
    got = await report(session)
    assert all(not r["denied"] for r in got["results"].values()) and set(got["results"]) == set(calls)
    assert got["results"]["task_check"]["result"]["summary"]["hasTasks"] is False
    assert ran(data_dir) == sorted([*CATEGORY_TOOLS.values(), "free_echo"])
    assert asked(await events(session, 1)) == sorted(calls)


async def test_a_tool_rule_beats_its_categorys_rule_both_ways(ctl: AgentController, data_dir: Path) -> None:
    session = await ctl.create_session(user())
    await session.permissions.set_for_category("execute", "deny")
    await session.permissions.set_for_tool("run_check", "allow")  # allowed in a denied category
    await session.permissions.set_for_category("other", "allow")
    await session.permissions.set_for_tool("misc_ping", "deny")  # denied in an allowed category
    await session.permissions.set_for_category("mcp", "deny")
    await session.permissions.set_for_tool("mcp_lookup", "ask")  # Mastra (rec o): a tool `ask` beats a category deny
    await probe(session, {"run_check": probed("x"), "misc_ping": probed("y"), "mcp_lookup": probed("z")})
    [pending] = (await session.snapshot()).pending
    assert (pending.tool_name, pending.category) == ("mcp_lookup", "mcp")
    await session.respond_to_tool_approval(pending.tool_call_id, "approve")
    await session.settled()
    got = await report(session)
    assert {"run_check", "mcp_lookup"} <= set(got["offered"]) and "misc_ping" not in got["offered"]
    assert got["results"]["run_check"] == {"result": outcome("run_check", "x"), "isError": False, "denied": False}
    assert got["results"]["mcp_lookup"]["result"] == outcome("mcp_lookup", "z")
    assert got["results"]["misc_ping"]["isError"] and DENIED in str(got["results"]["misc_ping"]["result"])
    assert ran(data_dir) == ["mcp_lookup", "run_check"]
    assert asked(await events(session, 1)) == ["mcp_lookup"]


async def test_a_modes_allowlist_limits_the_offer_and_a_deny_beats_it(ctl: AgentController, data_dir: Path) -> None:
    session = await ctl.create_session(user())
    await session.mode.switch("review")  # available_tools: read_file, ask_user, save_note, search_docs
    await session.permissions.set_for_category("execute", "allow")  # run_check would run, were it offered
    await session.permissions.set_for_tool("search_docs", "allow")
    await probe(session, {"run_check": probed("x"), "search_docs": probed("y")})
    got = await report(session)
    assert got["offered"] == ["ask_user", "mastra_workspace_read_file", "save_note", "search_docs"]
    assert got["results"]["run_check"]["isError"] and "not found" in str(got["results"]["run_check"]["result"])
    assert got["results"]["search_docs"] == {"result": outcome("search_docs", "y"), "isError": False, "denied": False}
    assert ran(data_dir) == ["search_docs"]

    # Listed, and denied: by its tool rule (save_note), by its category's (the workspace's read_file is `read`;
    # search_docs is `read` too, but its own `allow` beats its category's deny).
    await session.permissions.set_for_tool("save_note", "deny")
    await session.permissions.set_for_category("read", "deny")
    await probe(session, {"save_note": probed("z"), "mastra_workspace_read_file": {"path": "x.md"}})
    got = await report(session)
    assert got["offered"] == ["ask_user", "search_docs"]
    for name in ("save_note", "mastra_workspace_read_file"):
        assert got["results"][name]["isError"] and DENIED in str(got["results"][name]["result"])
    assert (await session.snapshot()).pending == []
    assert ran(data_dir) == ["search_docs"] and not (data_dir / "notes.log").exists()
    assert asked(await events(session, 2)) == []


async def test_yolo_runs_without_asking_but_a_tool_deny_still_refuses(ctl: AgentController, data_dir: Path) -> None:
    session = await ctl.create_session(user())
    await session.state.set({"yolo": True})
    await session.permissions.set_for_tool("run_check", "deny")
    await session.permissions.set_for_category("mcp", "deny")  # Mastra (rec o): yolo beats a category deny
    calls = {"free_echo": probed("a"), "save_note": probed("b"), "mcp_lookup": probed("c"), "run_check": probed("d")}
    await probe(session, calls)
    snapshot = await session.snapshot()
    assert snapshot.pending == [] and not snapshot.running and snapshot.state["yolo"] is True
    got = await report(session)
    assert "run_check" not in got["offered"] and {"free_echo", "save_note", "mcp_lookup"} <= set(got["offered"])
    assert got["results"]["run_check"]["isError"] and DENIED in str(got["results"]["run_check"]["result"])
    for name, args in calls.items():
        if name != "run_check":
            assert got["results"][name] == {"result": outcome(name, args["text"]), "isError": False, "denied": False}
    assert ran(data_dir) == ["free_echo", "mcp_lookup", "save_note"]
    assert asked(await events(session, 1)) == []

    await session.state.set({"yolo": False})  # without yolo the same uncategorised tool asks again
    await probe(session, {"free_echo": probed("again")})
    [pending] = await wait_pending(session)
    assert pending.tool_name == "free_echo"
    await session.respond_to_tool_approval(pending.tool_call_id, "decline")
    await session.settled()
    assert ran(data_dir) == ["free_echo", "mcp_lookup", "save_note"]


async def test_calls_past_what_a_session_keeps_waiting_are_declined_saying_so(
    client: Client, storage: Storage, task_queue: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session keeps at most `MAX_PENDING` calls waiting for a decision. A step asking for more has the rest
    declined at once, the reason told to the model, instead of waiting for a decision nobody can give (the
    session shows no event for them and refuses an approval of their ids)."""
    monkeypatch.setattr(agent_session, "MAX_PENDING", 2)
    async with bound_controller(client, storage, task_queue, sandboxed=False) as ctl:
        session = await ctl.create_session(user())
        await probe(session, {name: probed(category) for category, name in CATEGORY_TOOLS.items()})
        pending = await wait_pending(session)
        assert len(pending) == 2
        for item in pending:
            await session.respond_to_tool_approval(item.tool_call_id, "approve")
        await asyncio.wait_for(session.settled(), 30)
        got = await report(session)
        found = await events(session, 1)
    approved = sorted(p.tool_name for p in pending)
    assert ran(data_dir) == approved
    assert len(asked(found)) == 2
    assert [e["message"] for e in found if e["type"] == "info" and "Declined" in e["message"]]
    for name in set(CATEGORY_TOOLS.values()) - set(approved):
        declined = got["results"][name]
        assert declined["denied"] and "2 tool calls already wait for a decision" in declined["result"], declined
