"""Every workspace tool option through a real run: enabled (bool and function), approval by function, name
remapping (what the model calls and what events say), duplicate names, hooks, token limits, read-only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from keel.app import Agent, App
from keel.app.agent_tools import agent_tools
from keel.model_providers import ModelRequest, ModelResponse, ScriptedModel
from keel.storage import Storage
from keel.workspace_providers import WORKSPACE_TOOLS, LocalFilesystem, LocalSandbox, Workspace, WorkspaceError
from keel.workspace_providers.tool_config import ToolConfigContext, ToolHookContext
from keel.workspace_providers.tools import workspace_tools
from tests.conftest import running_worker
from tests.test_agent_run import wait_for_pending
from tests.workspace.apps import plan_agent, plan_script

FS, SB = WORKSPACE_TOOLS.FILESYSTEM, WORKSPACE_TOOLS.SANDBOX


def workspace(root: Path, **tools: Any) -> Workspace:
    return Workspace(filesystem=LocalFilesystem(root), sandbox=LocalSandbox(root), tools=tools or None)


def recording_agent(ws: Workspace, seen: list[ModelRequest]) -> Agent:
    def script(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return plan_script(request)

    return Agent(id="a", model=ScriptedModel(script), workspace=ws, max_steps=20)


async def test_a_disabled_tool_is_absent_from_the_models_tool_list_and_a_function_decides_per_request(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    def admins_only(ctx: ToolConfigContext) -> bool:
        return ctx.request_context.get("role") == "admin"

    ws = workspace(tmp_path, **{FS.DELETE: {"enabled": False}, SB.EXECUTE_COMMAND: {"enabled": admins_only}})
    seen: list[ModelRequest] = []
    async with running_worker(client, App.of(recording_agent(ws, seen)), storage, task_queue) as keel:
        await keel.result(await keel.start_run("a", "[]", request_context={"role": "user"}))
        await keel.result(await keel.start_run("a", "[]", request_context={"role": "admin"}))
        run_id = await keel.start_run("a", json.dumps([[[FS.DELETE, {"path": "x"}]]]))
        denied = json.loads((await keel.result(run_id)).text)
    user_tools, admin_tools = ({t.name for t in r.tools} for r in seen[:2])
    assert FS.DELETE not in user_tools | admin_tools
    assert SB.EXECUTE_COMMAND not in user_tools and SB.EXECUTE_COMMAND in admin_tools
    assert FS.READ_FILE in user_tools
    assert denied[0]["error"].startswith(f"Tool {FS.DELETE!r} not found. Available tools: ")


async def test_an_enabled_function_that_raises_disables_the_tool(tmp_path: Path) -> None:
    def broken(ctx: ToolConfigContext) -> bool:
        raise RuntimeError("boom")

    tools = await workspace_tools(workspace(tmp_path, **{FS.GREP: {"enabled": broken}}))
    assert FS.GREP not in {t.name for t in tools}


async def test_approval_is_asked_only_when_the_function_says_so(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    def protected(ctx: ToolConfigContext) -> bool:
        assert ctx.args is not None
        return str(ctx.args["path"]).startswith("protected/")

    ws = workspace(tmp_path, **{FS.WRITE_FILE: {"require_approval": protected}})
    app = App.of(plan_agent("a", ws))
    free = json.dumps([[[FS.WRITE_FILE, {"path": "free/a.txt", "content": "a"}]]])
    guarded = json.dumps([[[FS.WRITE_FILE, {"path": "protected/b.txt", "content": "b"}]]])
    async with running_worker(client, app, storage, task_queue) as keel:
        assert json.loads((await keel.result(await keel.start_run("a", free))).text) == ["Wrote 1 bytes to free/a.txt"]
        run_id = await keel.start_run("a", guarded)
        [call_id] = await wait_for_pending(keel, run_id)
        assert not (tmp_path / "protected" / "b.txt").exists()
        await keel.approve(run_id, call_id)
        assert json.loads((await keel.result(run_id)).text) == ["Wrote 1 bytes to protected/b.txt"]


async def test_a_renamed_tool_is_called_and_reported_by_its_new_name(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("hi\n")
    ws = workspace(tmp_path, **{FS.READ_FILE: {"name": "view"}, FS.GREP: {"name": "search_content"}})
    seen: list[ModelRequest] = []
    app = App.of(recording_agent(ws, seen))
    plan = [[["view", {"path": "a.txt"}]], [[FS.READ_FILE, {"path": "a.txt"}]]]
    async with running_worker(client, app, storage, task_queue) as keel:
        run_id = await keel.start_run("a", json.dumps(plan))
        result = await keel.result(run_id)
    names = {t.name for t in seen[0].tools}
    assert {"view", "search_content"} <= names and FS.READ_FILE not in names and FS.GREP not in names
    outputs = json.loads(result.text)
    assert outputs[0] == "a.txt (3 bytes)\n     1→hi\n     2→"
    assert outputs[1]["error"].startswith(f"Tool {FS.READ_FILE!r} not found")
    assert result.tool_results[0].payload.tool_name == "view"
    stored = await storage.read_events(run_id)
    assert [e.payload["toolName"] for e in stored if e.type == "tool-result"] == ["view"]
    assert [e.payload["toolName"] for e in stored if e.type == "tool-call"] == ["view", FS.READ_FILE]


async def test_duplicate_names_raise_and_fail_the_run_at_once(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    clash = workspace(tmp_path, **{FS.READ_FILE: {"name": "x"}, FS.GREP: {"name": "x"}})
    with pytest.raises(WorkspaceError, match='Duplicate workspace tool name "x": tool "mastra_workspace_grep"'):
        await workspace_tools(clash)
    app = App.of(plan_agent("a", clash))
    async with running_worker(client, app, storage, task_queue) as keel:
        run_id = await keel.start_run("a", "[]")
        with pytest.raises(Exception, match="Duplicate workspace tool name"):
            await keel.result(run_id)
    handle = client.get_workflow_handle(run_id)
    with pytest.raises(WorkflowFailureError):
        await handle.result()


async def test_a_workspace_tool_named_like_one_of_the_agents_own_tools_raises(tmp_path: Path) -> None:
    from tests.apps import echo

    ws = workspace(tmp_path, **{FS.GREP: {"name": "echo"}})
    agent = Agent(id="a", model=ScriptedModel(plan_script), tools=(echo,), workspace=ws)
    with pytest.raises(Exception, match='Duplicate workspace tool name "echo"'):
        await agent_tools(App.of(agent), agent)


async def test_hooks_skip_a_call_and_observe_every_call_with_its_output_or_error(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    observed: list[ToolHookContext] = []

    def before(ctx: ToolHookContext) -> dict[str, Any] | None:
        if ctx.workspace_tool_name == FS.DELETE:
            return {"proceed": False, "output": "deleting is switched off here"}
        return None

    async def after(ctx: ToolHookContext) -> None:
        observed.append(ctx)

    (tmp_path / "keep.txt").write_text("x")
    ws = workspace(
        tmp_path,
        hooks={"before_tool_call": before, "after_tool_call": after},
        **{FS.FILE_STAT: {"name": "stat"}},
    )
    plan = [[[FS.DELETE, {"path": "keep.txt"}]], [["stat", {"path": "keep.txt"}]], [[FS.READ_FILE, {"path": "no"}]]]
    async with running_worker(client, App.of(plan_agent("a", ws)), storage, task_queue) as keel:
        outputs = json.loads((await keel.result(await keel.start_run("a", json.dumps(plan)))).text)
    assert outputs[0] == "deleting is switched off here"
    assert (tmp_path / "keep.txt").exists()
    assert [(o.tool_name, o.workspace_tool_name) for o in observed] == [
        ("stat", FS.FILE_STAT),
        (FS.READ_FILE, FS.READ_FILE),
    ]
    assert observed[0].output.startswith("keep.txt Type: file Size: 1 bytes") and observed[0].error is None
    assert observed[1].output is None and type(observed[1].error).__name__ == "FileNotFound"


async def test_max_output_tokens_caps_a_tools_output_with_a_marker(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "big.txt").write_text("".join(f"line {i} of a long file\n" for i in range(2000)))
    ws = workspace(tmp_path, **{FS.READ_FILE: {"max_output_tokens": 50}})
    plan = [[[FS.READ_FILE, {"path": "big.txt"}]], [[FS.GREP, {"pattern": "line", "path": "."}]]]
    async with running_worker(client, App.of(plan_agent("a", ws)), storage, task_queue) as keel:
        read, grep = json.loads((await keel.result(await keel.start_run("a", json.dumps(plan)))).text)
    assert read.startswith("big.txt (")
    assert "\n[output truncated: showing first ~50 of ~" in read and read.endswith(" tokens]")
    assert len(read) < 400
    assert "[output truncated: showing first ~2000 of ~" in grep  # the default limit


async def test_a_read_only_filesystem_offers_no_write_tool(tmp_path: Path) -> None:
    ws = Workspace(filesystem=LocalFilesystem(tmp_path, read_only=True))
    names = {t.name for t in await workspace_tools(ws)}
    assert names == {FS.READ_FILE, FS.LIST_FILES, FS.FILE_STAT, FS.GREP}
