"""A workspace of mounts (`Workspace(mounts={"/data": S3Filesystem(...), "/src": LocalFilesystem(...)})`) on a real
S3 server (SeaweedFS): one tree for the file tools, each path on its own filesystem, copies and moves across
them; what commands in the sandbox see (the local mount, bind-mounted under bubblewrap; for the S3 one a line
saying they cannot); the `on_mount` hook; and the coder demo and a plan run over it on a real worker."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Literal

import pytest
from temporalio.client import Client

from keel.app import Agent, App
from keel.app import demo as demo_module
from keel.model_providers import ModelRequest, ModelResponse, ModelToolCall, ScriptedModel
from keel.storage import Storage
from keel.workspace_providers import (
    WORKSPACE_TOOLS,
    LocalFilesystem,
    LocalSandbox,
    PermissionDenied,
    S3Filesystem,
    Workspace,
    WorkspaceError,
)
from keel.workspace_providers.composite_filesystem import CompositeFilesystem
from keel.workspace_providers.sandbox_mounts import OnMountArgs
from keel.workspace_providers.tools import WorkspaceCall, workspace_tools
from tests.conftest import running_worker
from tests.s3 import S3Server
from tests.workspace.apps import plan_agent

FS, SB = WORKSPACE_TOOLS.FILESYSTEM, WORKSPACE_TOOLS.SANDBOX
Isolation = Literal["none", "bwrap"]
NOT_VISIBLE = "keel: /data is a mount (S3Filesystem) that commands in this sandbox cannot see"


def isolation_or_skip(isolation: Isolation) -> Isolation:
    if isolation == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bwrap missing")
    return isolation


def s3fs(server: S3Server, bucket: str) -> S3Filesystem:
    return S3Filesystem(
        bucket,
        prefix="ws",
        endpoint=server.endpoint,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
    )


def mounted(tmp_path: Path, server: S3Server, bucket: str, isolation: Isolation = "none", **options: Any) -> Workspace:
    return Workspace(
        id="mounted",
        mounts={"/data": s3fs(server, bucket), "/src": LocalFilesystem(tmp_path / "src")},
        sandbox=LocalSandbox(tmp_path / "sandbox", isolation=isolation),
        **options,
    )


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    return s3_server.make_bucket()


async def tool_runner(ws: Workspace) -> Any:
    tools = {t.name: t for t in await workspace_tools(ws)}

    async def call(name: str, **args: Any) -> Any:
        return await tools[name].execute(args, WorkspaceCall())

    return call


def objects(server: S3Server, bucket: str) -> dict[str, bytes]:
    client = server.client()
    found = {}
    for o in client.list_objects(bucket, recursive=True):
        response = client.get_object(bucket, o.object_name or "")
        found[o.object_name or ""] = response.read()
        response.close()
    return found


async def test_list_files_of_root_shows_both_mounts_and_each_path_is_read_and_written_on_its_own_filesystem(
    tmp_path: Path, s3_server: S3Server, bucket: str
) -> None:
    ws = mounted(tmp_path, s3_server, bucket)
    await ws.init()
    call = await tool_runner(ws)
    assert await call(FS.WRITE_FILE, path="/data/reports/q1.md", content="# Q1\nrevenue up\n") == (
        "Wrote 16 bytes to /data/reports/q1.md"
    )
    assert await call(FS.WRITE_FILE, path="/src/app.py", content="print('revenue')\n") == (
        "Wrote 17 bytes to /src/app.py"
    )
    assert objects(s3_server, bucket) == {"ws/reports/q1.md": b"# Q1\nrevenue up\n"}
    assert (tmp_path / "src" / "app.py").read_text() == "print('revenue')\n"

    assert await call(FS.LIST_FILES, path="/") == (
        ".\ndata\n\treports\nsrc\n\tapp.py\n\n3 directories, 1 file (truncated at depth 2)"
    )
    assert await call(FS.LIST_FILES, path="/", maxDepth=3) == (
        ".\ndata\n\treports\n\t\tq1.md\nsrc\n\tapp.py\n\n3 directories, 2 files"
    )
    assert await call(FS.LIST_FILES, path="/data") == ".\nreports\n\tq1.md\n\n1 directory, 1 file"
    assert await call(FS.GREP, pattern="revenue", path="/") == (
        "2 matches across 2 files\n---\n/data/reports/q1.md:2:1: revenue up\n/src/app.py:1:8: print('revenue')"
    )
    assert await call(FS.READ_FILE, path="/data/reports/q1.md") == (
        "/data/reports/q1.md (16 bytes)\n     1→# Q1\n     2→revenue up\n     3→"
    )
    edited = await call(FS.EDIT_FILE, path="/data/reports/q1.md", old_string="up", new_string="down")
    assert edited == "Replaced 1 occurrence in /data/reports/q1.md (lines 2)"
    assert (await call(FS.FILE_STAT, path="/")).startswith("/ Type: directory Size: 0 bytes")
    assert (await call(FS.FILE_STAT, path="/src/app.py")).startswith("/src/app.py Type: file Size: 17 bytes")
    with pytest.raises(PermissionDenied, match=r"no mount contains it; mounts: /data, /src"):
        await call(FS.READ_FILE, path="/etc/passwd")
    with pytest.raises(WorkspaceError, match=r"File not found: /data/missing\.txt"):
        await call(FS.READ_FILE, path="/data/missing.txt")
    with pytest.raises(PermissionDenied, match=r"access \(no mount contains it; mounts: /data, /src\) on /top.txt"):
        await call(FS.WRITE_FILE, path="/top.txt", content="x")
    assert [(e.name, e.type) for e in await ws.filesystem.readdir("/")] == [("data", "directory"), ("src", "directory")]
    assert [e.name for e in await ws.filesystem.readdir("/", recursive=True)] == [
        "data", "data/reports", "data/reports/q1.md", "src", "src/app.py",
    ]  # fmt: skip
    await ws.destroy()


async def test_files_and_directories_copy_and_move_across_mounts(
    tmp_path: Path, s3_server: S3Server, bucket: str
) -> None:
    ws = mounted(tmp_path, s3_server, bucket)
    await ws.init()
    fs = ws.filesystem
    await fs.write_file("/src/lib/a.py", "A = 1\n")
    await fs.write_file("/src/lib/sub/b.py", "B = 2\n")
    await fs.copy_file("/src/lib/a.py", "/data/a.py")
    await fs.copy_file("/src/lib", "/data/lib", recursive=True)
    assert objects(s3_server, bucket) == {
        "ws/a.py": b"A = 1\n", "ws/lib/a.py": b"A = 1\n", "ws/lib/sub/b.py": b"B = 2\n",
    }  # fmt: skip
    await fs.move_file("/data/lib", "/src/moved")
    assert objects(s3_server, bucket) == {"ws/a.py": b"A = 1\n"}
    assert (tmp_path / "src" / "moved" / "sub" / "b.py").read_text() == "B = 2\n"
    await fs.move_file("/data/a.py", "/src/a.py")
    assert objects(s3_server, bucket) == {} and (tmp_path / "src" / "a.py").read_text() == "A = 1\n"
    await fs.write_file("/data/keep.txt", "old")
    with pytest.raises(WorkspaceError, match="File already exists"):
        await fs.copy_file("/src/a.py", "/data/keep.txt", overwrite=False)
    with pytest.raises(WorkspaceError, match="is a directory"):
        await fs.copy_file("/src/lib", "/data/lib2")
    await fs.move_file("/src/a.py", "/src/b.py")  # within one mount: the mount's own move
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == ["b.py", "lib", "moved"]
    await ws.destroy()


def test_mount_paths_may_not_be_the_root_twice_or_nested_and_exclude_a_filesystem(tmp_path: Path) -> None:
    fs = LocalFilesystem(tmp_path)
    with pytest.raises(WorkspaceError, match='cannot be "/"'):
        CompositeFilesystem({"/": fs})
    with pytest.raises(WorkspaceError, match="Two mounts at '/a'"):
        CompositeFilesystem({"/a": fs, "a/": fs})
    with pytest.raises(WorkspaceError, match='Nested mount paths are not supported: "/a/b" is nested under "/a"'):
        CompositeFilesystem({"/a": fs, "/a/b": fs})
    with pytest.raises(WorkspaceError, match='Cannot use both "filesystem" and "mounts"'):
        Workspace(filesystem=fs, mounts={"/a": fs})
    deep = CompositeFilesystem({"/mnt/one": fs, "/mnt/two": LocalFilesystem(tmp_path / "2"), "/x": fs})
    assert [e.name for e in deep.virtual_entries("/")] == ["mnt", "x"]
    assert [e.name for e in deep.virtual_entries("/mnt")] == ["one", "two"]
    assert deep.route("/mnt/one/a/../b.txt") == (fs, "b.txt") and deep.route("mnt/one") == (fs, ".")
    assert deep.is_virtual("/mnt") and not deep.is_virtual("/mnt/one")


@pytest.mark.parametrize("isolation", ["none", "bwrap"])
async def test_a_command_sees_the_local_mount_and_is_told_it_cannot_see_the_s3_mount(
    tmp_path: Path, s3_server: S3Server, bucket: str, isolation: Isolation
) -> None:
    ws = mounted(tmp_path, s3_server, bucket, isolation_or_skip(isolation))
    await ws.init()
    call = await tool_runner(ws)
    await call(FS.WRITE_FILE, path="/src/hello.py", content="print('hi')\n")
    await call(FS.WRITE_FILE, path="/data/notes.md", content="notes\n")
    assert await call(SB.EXECUTE_COMMAND, command="cat src/hello.py && ls src") == "print('hi')\nhello.py\n"
    # A command's writes in the mount are the filesystem's files.
    await call(SB.EXECUTE_COMMAND, command="echo made > src/made.txt")
    assert await call(FS.READ_FILE, path="/src/made.txt", showLineNumbers=False) == "/src/made.txt (5 bytes)\nmade\n"
    assert await call(SB.EXECUTE_COMMAND, command="ls", cwd="/src") == "hello.py\nmade.txt\n"
    failed = await call(SB.EXECUTE_COMMAND, command="cat data/notes.md")
    assert failed.startswith(f"stderr:\n{NOT_VISIBLE} (S3Filesystem mounts need FUSE, which this sandbox does not")
    assert "read and write it with the workspace file tools (paths under /data)" in failed
    assert failed.endswith("Exit code: 1")
    assert "keel:" not in await call(SB.EXECUTE_COMMAND, command="echo database metadata")

    instructions = ws.get_instructions()
    absolute = " (also /src)" if isolation == "bwrap" else ""
    assert f"Workspace mounts in commands:\n- /data: not visible to commands; use the file tools for paths under it\n" \
        f"- /src: ./src{absolute}" in instructions  # fmt: skip
    assert "Filesystem mount points (use these path prefixes):\n- /data: S3Filesystem (read-write)" in instructions
    if isolation == "bwrap":  # the mount at its own path too, and nothing else of the host
        assert await call(SB.EXECUTE_COMMAND, command="cat /src/hello.py") == "print('hi')\n"
        (tmp_path / "secret.txt").write_text("not for commands")
        assert await call(SB.EXECUTE_COMMAND, command=f"ls {tmp_path}") == "sandbox\nsrc\n"
    await ws.destroy()
    assert not (tmp_path / "sandbox" / "src").exists() and (tmp_path / "src" / "hello.py").exists()


async def test_a_read_only_local_mount_is_read_only_to_commands_under_bubblewrap(tmp_path: Path) -> None:
    isolation_or_skip("bwrap")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("guide\n")
    ws = Workspace(
        mounts={"/docs": LocalFilesystem(tmp_path / "docs", read_only=True), "/out": LocalFilesystem(tmp_path / "o")},
        sandbox=LocalSandbox(tmp_path / "sandbox", isolation="bwrap"),
    )
    await ws.init()
    sandbox = ws.sandbox
    command = "cat docs/guide.md /docs/guide.md && cp docs/guide.md out/ && rm docs/guide.md"
    result = await sandbox.execute_command(command)
    assert result.stdout == "guide\nguide\n" and "Read-only file system" in result.stderr and result.exit_code == 1
    assert (tmp_path / "o" / "guide.md").read_text() == "guide\n" and (tmp_path / "docs" / "guide.md").exists()
    with pytest.raises(PermissionDenied, match=r"writeFile \(filesystem is read-only\) on /docs/new.md"):
        await ws.filesystem.write_file("/docs/new.md", "x")
    await ws.destroy()


async def test_the_on_mount_hook_skips_a_mount_or_shows_a_directory_of_its_own(
    tmp_path: Path, s3_server: S3Server, bucket: str
) -> None:
    synced = tmp_path / "synced"  # what a FUSE mount the app made would be
    synced.mkdir()
    (synced / "notes.md").write_text("from the hook\n")
    seen: list[OnMountArgs] = []

    async def on_mount(args: OnMountArgs) -> Any:
        seen.append(args)
        if args.mount_path == "/src":
            return False
        return {"success": True, "host_path": str(synced)}

    ws = mounted(tmp_path, s3_server, bucket, on_mount=on_mount)
    await ws.init()
    sandbox = ws.sandbox
    assert [(a.mount_path, (a.config or {}).get("type"), a.workspace is ws) for a in seen] == [
        ("/data", "s3", True), ("/src", "local", True),
    ]  # fmt: skip
    assert seen[0].config == {
        "type": "s3", "bucket": bucket, "prefix": "ws/", "region": "us-east-1", "endpoint": s3_server.endpoint,
        "readOnly": False,
    }  # fmt: skip
    result = await sandbox.execute_command("cat data/notes.md; ls src")
    assert result.stdout == "from the hook\n"
    skipped = "keel: /src is a mount (LocalFilesystem) that commands in this sandbox cannot see"
    assert f"{skipped} (Skipped by onMount hook)" in result.stderr
    assert {p: (e.state, e.error) for p, e in sandbox.mounts.entries.items()} == {
        "/data": ("mounted", None), "/src": ("unsupported", "Skipped by onMount hook"),
    }  # fmt: skip
    await ws.destroy()


def test_a_mount_path_taken_by_a_directory_with_files_is_not_hidden(tmp_path: Path) -> None:
    import asyncio

    (tmp_path / "sandbox" / "src").mkdir(parents=True)
    (tmp_path / "sandbox" / "src" / "mine.txt").write_text("keep")
    ws = Workspace(mounts={"/src": LocalFilesystem(tmp_path / "src")}, sandbox=LocalSandbox(tmp_path / "sandbox"))
    asyncio.run(ws.init())
    entry = ws.sandbox.mounts.get("/src")
    assert entry is not None and entry.state == "error"
    assert entry.error is not None and "directory exists and is not empty" in entry.error
    assert (tmp_path / "sandbox" / "src" / "mine.txt").read_text() == "keep"


# --- on a real worker ---------------------------------------------------------------------------------------


def on_mounts(value: Any) -> Any:
    """A coder step's argument with its paths under the `/src` mount (`coder/...` → `/src/coder/...`; in
    commands, which start in the sandbox's working directory, `src/coder/...`)."""
    if isinstance(value, str):
        return re.sub(r"(?<![\w/])coder\b", "src/coder", value)
    return value


def mounted_coder_steps() -> list[tuple[str, dict[str, object]]]:
    steps = []
    for name, args in demo_module.CODER_STEPS:
        if name == WORKSPACE_TOOLS.LSP.LSP_INSPECT:
            continue  # language servers run in one local directory: a workspace of mounts has no LSP
        moved = {k: on_mounts(v) for k, v in args.items()}
        if "path" in moved and name != SB.EXECUTE_COMMAND:
            moved["path"] = "/" + str(moved["path"])
        steps.append((name, moved))
    return steps


async def test_the_coder_demo_runs_over_a_workspace_of_an_s3_and_a_local_mount(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path, s3_server: S3Server, bucket: str
) -> None:
    steps = mounted_coder_steps()
    isolation: Isolation = "bwrap" if shutil.which("bwrap") else "none"

    def script(request: ModelRequest) -> ModelResponse:
        return _coder(request, steps)

    ws = mounted(
        tmp_path,
        s3_server,
        bucket,
        isolation,
        bm25=True,
        auto_index_paths=["/src/coder"],
        skills=["demo_skills"],
        skill_source=LocalFilesystem(demo_module.DEMO_SKILLS.parent, read_only=True),
    )
    coder = Agent(id="coder", model=ScriptedModel(script, name="coder"), max_steps=len(steps) + 1, workspace=ws)
    async with running_worker(client, App.of(coder), storage, task_queue) as keel:
        result = await keel.result(await keel.start_run("coder", "go"))
    outputs = {r.payload.tool_name: r.payload.result for r in result.tool_results}
    assert outputs["mastra_workspace_write_file"] == "Wrote 38 bytes to /src/coder/hello.py"
    assert outputs["mastra_workspace_read_file"] == (
        "/src/coder/hello.py (38 bytes)\n     1→def greet():\n     2→    return 'hello world'\n     3→"
    )
    assert outputs["mastra_workspace_edit_file"] == "Replaced 1 occurrence in /src/coder/hello.py (lines 2)"
    assert outputs["mastra_workspace_list_files"] == ".\nhello.py\n\n0 directories, 1 file"
    assert outputs["mastra_workspace_grep"] == (
        "1 match across 1 file\n---\n/src/coder/hello.py:2:13:     return 'hello Keel'"
    )
    assert outputs["mastra_workspace_file_stat"].startswith("/src/coder/hello.py Type: file Size: 37 bytes")
    assert outputs["mastra_workspace_execute_command"] == "def greet():\n    return 'hello Keel'\n2\n"
    assert outputs["mastra_workspace_index"] == "Indexed /src/coder/hello.py"
    assert outputs["mastra_workspace_search"].startswith("/src/coder/hello.py:1-2: def greet():")
    assert outputs["skill"].startswith("# Writing Python in the demo workspace")
    assert outputs["mastra_workspace_delete"] == "Deleted /src/coder/hello.py"
    assert len(result.tool_results) == len(steps) and not any(r.payload.is_error for r in result.tool_results)
    assert not (tmp_path / "src" / "coder" / "hello.py").exists()


def _coder(request: ModelRequest, steps: list[tuple[str, dict[str, object]]]) -> ModelResponse:
    """The demo's coder script over `steps`."""
    from keel.model_providers import tool_results_since_last_user

    done = tool_results_since_last_user(request)
    if len(done) < len(steps):
        name, args = steps[len(done)]
        return ModelResponse(tool_calls=[ModelToolCall(id=f"call_{len(done) + 1}", name=name, args=args)])
    return ModelResponse(text="Done.")


async def test_a_plan_run_lists_both_mounts_and_works_across_them_on_a_real_worker(
    client: Client, storage: Storage, task_queue: str, tmp_path: Path, s3_server: S3Server, bucket: str
) -> None:
    ws = mounted(tmp_path, s3_server, bucket, "bwrap" if shutil.which("bwrap") else "none")
    plan = [
        [[FS.WRITE_FILE, {"path": "/data/in.csv", "content": "a,b\n1,2\n"}]],
        [[FS.WRITE_FILE, {"path": "/src/sum.sh", "content": "cut -d, -f1 \"$1\" | tail -n +2\n"}]],
        [[FS.LIST_FILES, {"path": "/"}]],
        [[FS.READ_FILE, {"path": "/data/in.csv", "showLineNumbers": False}]],
        [[SB.EXECUTE_COMMAND, {"command": "sh src/sum.sh data/in.csv"}]],
        [[FS.WRITE_FILE, {"path": "/src/in.csv", "content": "a,b\n1,2\n"}]],
        [[SB.EXECUTE_COMMAND, {"command": "sh src/sum.sh src/in.csv > src/out.txt && cat src/out.txt"}]],
        [[FS.READ_FILE, {"path": "/src/out.txt", "showLineNumbers": False}]],
    ]  # fmt: skip
    async with running_worker(client, App.of(plan_agent("planner", ws)), storage, task_queue) as keel:
        result = await keel.result(await keel.start_run("planner", json.dumps(plan)))
    answers = json.loads(result.text)
    assert answers[:3] == [
        "Wrote 8 bytes to /data/in.csv",
        "Wrote 30 bytes to /src/sum.sh",
        ".\ndata\n\tin.csv\nsrc\n\tsum.sh\n\n2 directories, 2 files",
    ]
    assert answers[3] == "/data/in.csv (8 bytes)\na,b\n1,2\n"
    assert NOT_VISIBLE in answers[4] and "No such file" in answers[4]
    assert answers[6:] == ["1\n", "/src/out.txt (2 bytes)\n1\n"]
    assert objects(s3_server, bucket) == {"ws/in.csv": b"a,b\n1,2\n"}
