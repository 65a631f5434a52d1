"""The `files` agents of the HTTP API tests: the workspace `api-files` is a folder of the temp dir with BM25 search
and one skill, `api-files-read-only` the same folder read-only; `/api/workspaces` serves them
(tests/http_api/test_workspaces.py).

The skill is written on import: a worker discovers a workspace's skills when it starts, and looks at the disk
again only after a cooldown, so it must be there before the first worker of the session."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from keel.app import Agent
from keel.model_providers import ModelResponse, ScriptedModel
from keel.workspace_providers import LocalFilesystem, Workspace

FILES_DIR = Path(tempfile.gettempdir()) / f"keel-tests-api-files-{os.getpid()}"

SKILL_MD = """---
name: release-notes
description: How to write the release notes of a Keel release. Use it when asked for release notes.
license: Apache-2.0
---
# Release notes

Group the changes by component, newest first, and link each to its issue.
"""
STYLE_MD = "# Style\n\nWrite in the past tense: 'Added', 'Fixed'. One line per change.\n"


def _write_skill(root: Path) -> None:
    skill = root / "skills" / "release-notes"
    (skill / "references").mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(SKILL_MD)
    (skill / "references" / "style.md").write_text(STYLE_MD)


_write_skill(FILES_DIR)

files_workspace = Workspace(
    id="api-files",
    name="API files",
    filesystem=LocalFilesystem(FILES_DIR),
    bm25=True,
    skills=["skills"],
)

files = Agent(
    id="files",
    name="Files",
    model=ScriptedModel(lambda request: ModelResponse(text="ok"), name="files"),
    workspace=files_workspace,
)
"""Never run by these tests: it gives the app the workspace, as a Mastra agent's workspace is registered."""

reader = Agent(
    id="files_reader",
    model=ScriptedModel(lambda request: ModelResponse(text="ok"), name="files_reader"),
    workspace=Workspace(id="api-files-read-only", filesystem=LocalFilesystem(FILES_DIR, read_only=True)),
)
"""The same folder, read-only."""

AGENTS = {files.id: files, reader.id: reader}
