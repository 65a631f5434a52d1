"""Workspace tools in real agent runs on a real worker: the coder demo, `keel tool`'s standalone activity,
what the model is shown."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from keel.app import Agent, App
from keel.model_providers import ModelRequest, ModelResponse, ScriptedModel
from keel.storage import Storage
from keel.workspace_providers import Workspace
from keel.workspace_providers.local_filesystem import LocalFilesystem
from keel.workspace_providers.local_sandbox import LocalSandbox
from keel.workspace_providers.tool_specs import TOOL_SPECS
from tests.conftest import running_worker


async def test_a_coder_run_uses_every_tool_and_answers_with_mastras_strings(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    from keel.app import demo as demo_module

    ws = demo_module.demo_workspace()
    coder = Agent(
        id="coder",
        model=demo_module.coder.model,
        max_steps=demo_module.coder.max_steps,
        workspace=ws,
    )
    app = App.of(coder)
    async with running_worker(client, app, storage, task_queue) as keel:
        run_id = await keel.start_run("coder", "go")
        result = await keel.result(run_id)
    outputs = {r.payload.tool_name: r.payload.result for r in result.tool_results}
    assert outputs["mastra_workspace_write_file"] == "Wrote 38 bytes to coder/hello.py"
    assert outputs["mastra_workspace_read_file"] == (
        "coder/hello.py (38 bytes)\n     1→def greet():\n     2→    return 'hello world'\n     3→"
    )
    assert outputs["mastra_workspace_edit_file"] == "Replaced 1 occurrence in coder/hello.py (lines 2)"
    assert outputs["mastra_workspace_list_files"] == ".\nhello.py\n\n0 directories, 1 file"
    assert outputs["mastra_workspace_grep"] == (
        "1 match across 1 file\n---\ncoder/hello.py:2:13:     return 'hello Keel'"
    )
    assert outputs["mastra_workspace_file_stat"].startswith("coder/hello.py Type: file Size: 37 bytes Modified: ")
    assert outputs["mastra_workspace_execute_command"] == "def greet():\n    return 'hello Keel'\n2\n"
    assert outputs["mastra_workspace_index"] == "Indexed coder/hello.py"
    assert outputs["mastra_workspace_search"] == (
        "coder/hello.py:1-2: def greet():\n    return 'hello Keel'\n\n---\n1 result (bm25 search)"
    )
    assert (
        outputs["skill"].startswith("# Writing Python in the demo workspace")
        and "references/checklist.md" in (outputs["skill"])
    )
    assert outputs["mastra_workspace_lsp_inspect"] == {
        "hover": {"value": "```python\ngreet()\n```\n", "kind": "markdown"}
    }
    assert outputs["mastra_workspace_delete"] == "Deleted coder/hello.py"
    assert not (data_dir / "workspace" / "coder" / "hello.py").exists()


async def test_the_model_sees_mastras_names_descriptions_and_schemas_and_the_workspace_instructions(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    seen: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(text="ok")

    ws = Workspace(filesystem=LocalFilesystem(tmp_path / "ws"), sandbox=LocalSandbox(tmp_path / "ws"))
    app = App.of(Agent(id="a", model=ScriptedModel(script), instructions="Be brief.", workspace=ws))
    async with running_worker(client, app, storage, task_queue) as keel:
        await keel.result(await keel.start_run("a", "hi"))
    request = seen[0]
    advertised = {t.name: {"description": t.description, "inputSchema": t.parameters} for t in request.tools}
    assert advertised == {k: v for k, v in TOOL_SPECS.items() if k != "mastra_workspace_index"}  # no search here
    assert request.instructions.startswith("Be brief.\n\nLocal command execution.")
    assert f'Local filesystem at "{tmp_path / "ws"}"' in request.instructions


async def test_keel_tool_runs_one_tool_as_a_standalone_activity(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    ws = Workspace(filesystem=LocalFilesystem(tmp_path / "ws"))
    app = App.of(Agent(id="a", model=ScriptedModel(lambda r: ModelResponse(text="")), workspace=ws))
    async with running_worker(client, app, storage, task_queue) as keel:
        wrote = await keel.execute_tool("a", "mastra_workspace_write_file", {"path": "x/y.txt", "content": "hi\n"})
        read = await keel.execute_tool("a", "mastra_workspace_read_file", {"path": "x/y.txt"})
        missing = await keel.execute_tool("a", "mastra_workspace_read_file", {"path": "nope.txt"})
    assert (wrote.result, wrote.is_error) == ("Wrote 3 bytes to x/y.txt", False)
    assert read.result == "x/y.txt (3 bytes)\n     1→hi\n     2→"
    assert missing.is_error and missing.result == {"error": "FileNotFoundError: File not found: nope.txt"}


async def test_keel_tool_with_bad_arguments_fails_without_running(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    from keel.client.errors import ToolFailed

    ws = Workspace(filesystem=LocalFilesystem(tmp_path / "ws"))
    app = App.of(Agent(id="a", model=ScriptedModel(lambda r: ModelResponse(text="")), workspace=ws))
    async with running_worker(client, app, storage, task_queue) as keel:
        with pytest.raises(ToolFailed, match="Invalid arguments for tool 'mastra_workspace_read_file'"):
            await keel.execute_tool("a", "mastra_workspace_read_file", {"path": 123})
