"""`keel tool`, `keel agents` and `keel workspaces` as a user runs them, against an in-process worker."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import Client

from keel.client.devserver import DevServer
from keel.storage import Storage
from tests.conftest import running_worker
from tests.test_cli import Keel
from tests.workspace.apps import guarded_workspace, plan_agent


async def test_keel_tool_prints_the_output_and_a_tool_error_is_one_line_with_exit_2(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    from keel.app import App

    keel = Keel(dev_server, task_queue, tmp_path, data_dir)
    keel.env["KEEL_APP"] = "tests.workspace.apps:app"
    app = App.of(plan_agent("guarded", guarded_workspace()))
    async with running_worker(client, app, storage, task_queue):
        code, out, err = await keel(
            "tool", "guarded", "mastra_workspace_write_file", "--args", '{"path": "a.txt", "content": "hi\\n"}'
        )
        assert (code, out, err) == (0, "Wrote 3 bytes to a.txt\n", "")
        code, out, _ = await keel("tool", "guarded", "mastra_workspace_read_file", "--args", '{"path": "a.txt"}')
        assert (code, out) == (0, "a.txt (3 bytes)\n     1→hi\n     2→\n")
        code, out, err = await keel("tool", "guarded", "mastra_workspace_read_file", "--args", '{"path": "../x"}')
        assert code == 2 and out == ""
        assert err == "error: Tool 'mastra_workspace_read_file': PermissionError: Permission denied: access on ../x\n"
        code, _, err = await keel("tool", "guarded", "mastra_workspace_read_file", "--args", '{"path": 1}')
        assert code == 2 and "Invalid arguments for tool 'mastra_workspace_read_file'" in err
        assert len(err.splitlines()) == 1
        code, _, err = await keel("tool", "guarded", "nope")
        assert code == 2 and "Agent 'guarded' has no tool 'nope'" in err
        code, _, err = await keel("tool", "guarded", "mastra_workspace_read_file", "--args", "[1]")
        assert code == 2 and "--args must be a JSON object" in err


async def test_keel_agents_lists_workspace_tools_and_keel_workspaces_their_info(
    dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    keel = Keel(dev_server, task_queue, tmp_path, data_dir)
    keel.env["KEEL_APP"] = "keel.app.demo:app"
    code, out, err = await keel("agents", "--json")
    assert code == 0, err
    agents = {a["id"]: a for a in json.loads(out)}
    coder_tools = {t["id"]: t for t in agents["coder"]["tools"]}
    # Mastra's eleven file and command tools, search and index, LSP, and the three skill tools
    assert len(coder_tools) == 17 and agents["coder"]["workspaceId"] == "demo-workspace"
    assert {"mastra_workspace_search", "mastra_workspace_index", "mastra_workspace_lsp_inspect", "skill"} <= set(
        coder_tools
    )
    assert coder_tools["mastra_workspace_execute_command"]["idempotent"] is False
    assert coder_tools["mastra_workspace_read_file"]["workspaceTool"] == "mastra_workspace_read_file"
    code, out, _ = await keel("agents")
    assert code == 0 and "  - mastra_workspace_grep: Search file contents using a regex pattern." in out
    code, out, err = await keel("workspaces", "--json", "--file-count")
    assert code == 0, err
    [info] = json.loads(out)
    assert info["id"] == "demo-workspace" and info["filesystem"]["provider"] == "local"
    assert info["filesystem"]["metadata"]["basePath"] == str(data_dir / "workspace")
    code, out, _ = await keel("workspaces")
    assert code == 0 and out.startswith("demo-workspace  Demo workspace")
