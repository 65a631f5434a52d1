"""The path-safety matrix through a real worker: every escape, with every file tool, sent as `keel tool` sends
it (a standalone activity), is refused with a clear error, and nothing outside the workspace is read or
written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.client import Client

from keel.app import App
from keel.storage import Storage
from keel.workspace_providers import WORKSPACE_TOOLS, LocalFilesystem, Workspace
from tests.conftest import running_worker
from tests.workspace.apps import plan_agent
from tests.workspace.test_path_safety import escapes, root, snapshot

FS = WORKSPACE_TOOLS.FILESYSTEM
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "read": (FS.READ_FILE, {}),
    "write": (FS.WRITE_FILE, {"content": "pwned"}),
    "edit": (FS.EDIT_FILE, {"old_string": "SECRET", "new_string": "pwned"}),
    "list": (FS.LIST_FILES, {}),
    "stat": (FS.FILE_STAT, {}),
    "delete": (FS.DELETE, {"recursive": True}),
    "mkdir": (FS.MKDIR, {}),
    "grep": (FS.GREP, {"pattern": "SECRET"}),
}
__all__ = ["root"]  # the fixture, shared with the provider-level matrix


async def test_every_escape_with_every_file_tool_is_refused_on_a_real_worker(
    client: Client, storage: Storage, task_queue: str, root: Path
) -> None:
    app = App.of(plan_agent("a", Workspace(filesystem=LocalFilesystem(root / "ws"))))
    problems: list[str] = []
    async with running_worker(client, app, storage, task_queue) as keel:
        for path in escapes(root):
            for op, (tool, extra) in TOOLS.items():
                before = snapshot(root)
                outcome = await keel.execute_tool("a", tool, {"path": path, **extra})
                error = outcome.result.get("error", "") if isinstance(outcome.result, dict) else ""
                if not (outcome.is_error and error.startswith("PermissionError: Permission denied: access")):
                    problems.append(f"{op} {path!r}: {outcome.result!r}")
                if snapshot(root) != before:
                    problems.append(f"{op} {path!r} changed something outside the workspace")
    assert not problems, "\n".join(problems)
    assert len(escapes(root)) * len(TOOLS) == 240


async def test_odd_but_ordinary_names_work_on_a_real_worker(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    app = App.of(plan_agent("a", Workspace(filesystem=LocalFilesystem(tmp_path))))
    async with running_worker(client, app, storage, task_queue) as keel:
        for name in ("..test", "...", "%2e%2e", "a..b/..c"):
            wrote = await keel.execute_tool("a", FS.WRITE_FILE, {"path": f"{name}/f.txt", "content": "ok"})
            assert wrote.result == f"Wrote 2 bytes to {name}/f.txt", name
            assert (tmp_path / name / "f.txt").read_text() == "ok"
