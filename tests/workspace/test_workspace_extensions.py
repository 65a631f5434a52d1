"""Skills and LSP attached to a `Workspace` by its own options (`skills=`, `lsp=`): the tools an agent gets, the
instructions, the configuration rules, and the lifecycle the workspace owns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from keel.workspace_providers import WORKSPACE_TOOLS, LocalFilesystem, LocalSandbox, Workspace, WorkspaceError
from keel.workspace_providers.tools import WorkspaceCall, workspace_tools

SKILL = """---
name: {name}
description: {description}
---
Instructions of {name}.
"""


def write_skill(root: Path, name: str, description: str = "A skill for tests.") -> None:
    (root / "skills" / name / "references").mkdir(parents=True)
    (root / "skills" / name / "SKILL.md").write_text(SKILL.format(name=name, description=description))
    (root / "skills" / name / "references" / "notes.md").write_text("line one\nline two\n")


async def test_skills_come_from_the_workspace_filesystem_with_their_tools_and_instructions(tmp_path: Path) -> None:
    write_skill(tmp_path, "release-notes", "Write release notes.")
    ws = Workspace(filesystem=LocalFilesystem(tmp_path), skills=["skills"])
    await ws.init()
    tools = {t.name: t for t in await workspace_tools(ws)}
    assert {"skill", "skill_search", "skill_read"} <= set(tools)
    instructions = await ws.get_instructions_async({})
    assert "<available_skills>" in instructions and "<name>release-notes</name>" in instructions
    assert instructions.startswith('Local filesystem at "')  # the filesystem's own instructions first
    loaded = await tools["skill"].execute({"name": "release-notes"}, WorkspaceCall())
    assert loaded.startswith("Instructions of release-notes.") and "- references/notes.md" in loaded
    read = await tools["skill_read"].execute(
        {"skillName": "release-notes", "path": "references/notes.md"}, WorkspaceCall()
    )
    assert "line two" in read
    with pytest.raises(WorkspaceError, match=r"\.\./"):
        await tools["skill_read"].execute({"skillName": "release-notes", "path": "../../secret"}, WorkspaceCall())
    assert ws.skills is not None and [s.name for s in await ws.skills.list()] == ["release-notes"]


async def test_skills_follow_a_resolver_filesystem_per_request(tmp_path: Path) -> None:
    for tenant in ("a", "b"):
        write_skill(tmp_path / tenant, f"skill-of-{tenant}")
    ws = Workspace(
        filesystem=lambda ctx: LocalFilesystem(tmp_path / ctx["tenant"]),
        skills=["skills"],
    )
    await ws.init()
    a = await ws.get_instructions_async({"tenant": "a"})
    b = await ws.get_instructions_async({"tenant": "b"})
    assert "skill-of-a" in a and "skill-of-b" not in a
    assert "skill-of-b" in b and "skill-of-a" not in b


async def test_a_skill_tool_name_taken_by_the_agent_is_an_error(tmp_path: Path) -> None:
    write_skill(tmp_path, "x-skill")
    ws = Workspace(filesystem=LocalFilesystem(tmp_path), skills=["skills"])
    with pytest.raises(WorkspaceError, match='Duplicate tool name "skill_read"'):
        await workspace_tools(ws, taken={"skill_read"}.__contains__)


async def test_lsp_gives_the_inspect_tool_renamable_by_the_tools_config(tmp_path: Path) -> None:
    (tmp_path / "util.py").write_text("def double(x):\n    return 2 * x\n")
    (tmp_path / "main.py").write_text("from util import double\n\nprint(double(21))\n")
    ws = Workspace(
        filesystem=LocalFilesystem(tmp_path),
        sandbox=LocalSandbox(tmp_path),
        lsp=True,
        tools={WORKSPACE_TOOLS.LSP.LSP_INSPECT: {"name": "lsp_inspect"}},
    )
    await ws.init()
    try:
        tools = {t.name: t for t in await workspace_tools(ws)}
        assert "lsp_inspect" in tools and "mastra_workspace_lsp_inspect" not in tools
        assert tools["lsp_inspect"].parameters["required"] == ["path", "line", "match"]
        answer = await tools["lsp_inspect"].execute(
            {"path": "main.py", "line": 3, "match": "print(<<<double(21))"}, WorkspaceCall()
        )
        assert [d["location"].rsplit("/", 1)[-1] for d in answer["definition"]] == ["util.py:L1:C5"]
        assert "double" in answer["hover"]["value"]
        pids = ws.lsp.server_pids()
        assert pids
    finally:
        await ws.destroy()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"language server {pid} outlived destroy()"


async def test_lsp_with_a_resolver_filesystem_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="lsp cannot be used with a resolver filesystem or sandbox"):
        Workspace(filesystem=lambda ctx: LocalFilesystem(tmp_path), lsp=True)
    with pytest.raises(WorkspaceError, match="lsp cannot be used with a resolver"):
        Workspace(filesystem=LocalFilesystem(tmp_path), sandbox=lambda ctx: LocalSandbox(tmp_path), lsp=True)
