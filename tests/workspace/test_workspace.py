"""The `Workspace` alone (no Temporal): lifecycle, info, instructions, resolvers, mounts, the write lock, tool
listing and the retry rule of write_file."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from keel.workspace_providers import (
    WORKSPACE_TOOLS,
    LocalFilesystem,
    LocalSandbox,
    StaleFile,
    Workspace,
    WorkspaceError,
    WriteLockTimeout,
)
from keel.workspace_providers.tools import ReadRecord, WorkspaceCall, workspace_tools

FS, SB = WORKSPACE_TOOLS.FILESYSTEM, WORKSPACE_TOOLS.SANDBOX


async def test_the_lifecycle_goes_pending_ready_paused_ready_destroyed(tmp_path: Path) -> None:
    ws = Workspace(filesystem=LocalFilesystem(tmp_path / "ws"), sandbox=LocalSandbox(tmp_path / "ws"))
    statuses = [ws.status]
    await ws.init()
    statuses.append(ws.status)
    assert statuses == ["pending", "ready"] and (tmp_path / "ws").is_dir()
    await ws.stop()
    statuses.append(ws.status)
    await ws.init()
    statuses.append(ws.status)
    await ws.destroy()
    statuses.append(ws.status)
    assert statuses == ["pending", "ready", "paused", "ready", "destroyed"]
    assert (tmp_path / "ws").is_dir()  # destroy never deletes files


async def test_a_failing_init_leaves_the_error_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap here
    ws = Workspace(sandbox=LocalSandbox(tmp_path, isolation="bwrap"))
    with pytest.raises(WorkspaceError, match="bubblewrap"):
        await ws.init()
    assert ws.status == "error"


def test_constructor_errors_are_the_seeds() -> None:
    with pytest.raises(WorkspaceError, match="Workspace requires at least a filesystem, sandbox, or skills"):
        Workspace()
    fs = LocalFilesystem("/tmp/x")
    with pytest.raises(WorkspaceError, match='Cannot use both "filesystem" and "mounts"'):
        Workspace(filesystem=fs, mounts={"/a": fs})
    with pytest.raises(WorkspaceError, match='Cannot use "mounts" with a dynamic sandbox resolver'):
        Workspace(mounts={"/a": fs}, sandbox=lambda ctx: None)
    with pytest.raises(WorkspaceError, match="received a class"):
        Workspace(filesystem=LocalFilesystem)


async def test_get_info_reports_providers_and_dynamic_ones_without_resolving(tmp_path: Path) -> None:
    ws = Workspace(id="w1", name="One", filesystem=LocalFilesystem(tmp_path), sandbox=LocalSandbox(tmp_path))
    (tmp_path / "a.txt").write_text("a")
    info = await ws.get_info(include_file_count=True)
    assert (info["id"], info["name"], info["status"]) == ("w1", "One", "pending")
    assert info["filesystem"]["provider"] == "local" and info["filesystem"]["totalFiles"] == 1
    assert info["filesystem"]["metadata"]["basePath"] == str(tmp_path)
    assert info["sandbox"]["provider"] == "local"
    calls: list[Any] = []

    def resolver(ctx: Any) -> LocalFilesystem:
        calls.append(ctx)
        return LocalFilesystem(tmp_path / str(ctx.get("tenant", "none")))

    dynamic = Workspace(id="w2", filesystem=resolver, sandbox=lambda ctx: LocalSandbox(tmp_path))
    info = await dynamic.get_info(resolve_dynamic_providers=False)
    assert info["filesystem"] == {
        "id": "w2-dynamic-filesystem",
        "name": "DynamicFilesystem",
        "provider": "dynamic",
        "status": "pending",
    }
    assert info["sandbox"] == {"provider": "dynamic", "status": "pending"} and not calls
    info = await dynamic.get_info(request_context={"tenant": "t1"})
    assert info["filesystem"]["metadata"]["basePath"] == str(tmp_path / "t1")
    assert dynamic.filesystem is None and dynamic.has_filesystem_config() and dynamic.has_sandbox_config()
    assert Workspace(name="x", id="abcdefghij", filesystem=resolver).name == "x"
    assert Workspace(id="abcdefghij", filesystem=resolver).name == "workspace-abcdefgh"


async def test_instructions_join_the_providers_and_a_dynamic_sandbox_says_placeholder(tmp_path: Path) -> None:
    ws = Workspace(filesystem=LocalFilesystem(tmp_path), sandbox=LocalSandbox(tmp_path))
    text = ws.get_instructions()
    assert text.startswith(f'Local command execution. Working directory: "{tmp_path}".')
    assert f'Local filesystem at "{tmp_path}".' in text
    dynamic = Workspace(filesystem=LocalFilesystem(tmp_path), sandbox=lambda ctx: LocalSandbox(tmp_path))
    assert (await dynamic.get_instructions_async()).startswith("Dynamic sandbox configured.")
    resolved = Workspace(
        filesystem=LocalFilesystem(tmp_path),
        sandbox=lambda ctx: LocalSandbox(tmp_path),
        instructions={"dynamic_sandbox": "resolve"},
    )
    assert (await resolved.get_instructions_async()).startswith("Local command execution.")
    custom = Workspace(
        sandbox=lambda ctx: LocalSandbox(tmp_path),
        instructions={"dynamic_sandbox": lambda ctx: f"sandbox of {ctx.get('user')}"},
    )
    assert await custom.get_instructions_async({"user": "ann"}) == "sandbox of ann"


async def test_a_sandbox_cache_key_keeps_one_resolved_sandbox_per_key(tmp_path: Path) -> None:
    made: list[LocalSandbox] = []

    def resolver(ctx: Any) -> LocalSandbox:
        made.append(LocalSandbox(tmp_path / ctx["thread"]))
        return made[-1]

    ws = Workspace(sandbox=resolver, sandbox_cache_key=lambda ctx: ctx.get("thread"))
    a1 = await ws.resolve_sandbox({"thread": "a"})
    a2 = await ws.resolve_sandbox({"thread": "a"})
    b = await ws.resolve_sandbox({"thread": "b"})
    assert a1 is a2 and b is not a1 and len(made) == 2
    ws.clear_sandbox_cache("a")
    assert await ws.resolve_sandbox({"thread": "a"}) is not a1


async def test_set_tools_config_replaces_the_config(tmp_path: Path) -> None:
    ws = Workspace(filesystem=LocalFilesystem(tmp_path), tools={FS.DELETE: {"enabled": False}})
    assert FS.DELETE not in {t.name for t in await workspace_tools(ws)}
    ws.set_tools_config({FS.WRITE_FILE: {"enabled": False}})
    names = {t.name for t in await workspace_tools(ws)}
    assert FS.DELETE in names and FS.WRITE_FILE not in names
    ws.set_tools_config(None)
    assert ws.get_tools_config() is None
    with pytest.raises(WorkspaceError, match="unknown option"):
        ws.set_tools_config({FS.DELETE: {"enable": False}})
    with pytest.raises(WorkspaceError, match="unknown option 'requireApprovals'"):
        ws.set_tools_config({"requireApprovals": True})


async def test_two_parallel_writes_to_one_file_never_interleave(tmp_path: Path) -> None:
    fs = LocalFilesystem(tmp_path)
    ws = Workspace(filesystem=fs, tools={"write_lock_timeout_ms": 5000})
    tools = {t.name: t for t in await workspace_tools(ws)}
    order: list[str] = []
    original = fs.write_file

    async def slow_write(path: str, content: str | bytes, **kwargs: Any) -> None:
        order.append(f"start {content!r}")
        await asyncio.sleep(0.05)
        await original(path, content, **kwargs)
        order.append(f"end {content!r}")

    fs.write_file = slow_write  # type: ignore[method-assign]
    write = tools[FS.WRITE_FILE]
    await asyncio.gather(*(write.execute({"path": "f.txt", "content": c}, WorkspaceCall()) for c in ("a", "b")))
    assert order in (
        ["start 'a'", "end 'a'", "start 'b'", "end 'b'"],
        ["start 'b'", "end 'b'", "start 'a'", "end 'a'"],
    )


async def test_a_write_waits_for_the_lock_at_most_the_timeout(tmp_path: Path) -> None:
    ws = Workspace(filesystem=LocalFilesystem(tmp_path), write_lock_timeout_ms=100)
    write = next(t for t in await workspace_tools(ws) if t.name == FS.WRITE_FILE)
    async with ws.write_lock.hold("f.txt"):
        with pytest.raises(WriteLockTimeout, match=r'write-lock timeout on "f\.txt" after 100ms'):
            await write.execute({"path": "f.txt", "content": "x"}, WorkspaceCall())
    with pytest.raises(WorkspaceError, match=r"wrapWithWriteLock: input\.path is required"):
        await write.execute({"content": "x"}, WorkspaceCall())


async def test_a_retried_write_whose_first_attempt_wrote_succeeds_and_a_first_attempt_is_stale(
    tmp_path: Path,
) -> None:
    ws = Workspace(filesystem=LocalFilesystem(tmp_path))
    write = next(t for t in await workspace_tools(ws) if t.name == FS.WRITE_FILE)
    (tmp_path / "f.txt").write_text("new")
    os.utime(tmp_path / "f.txt", (1_700_000_000, 1_700_000_000))
    read_at = int(datetime(2020, 1, 1, tzinfo=UTC).timestamp() * 1000)  # older than the file: it changed since
    record = ReadRecord("f.txt", ws.filesystem.scope, read_at)
    args = {"path": "f.txt", "content": "new"}
    assert await write.execute(args, WorkspaceCall(read_record=record, attempt=2)) == "Wrote 3 bytes to f.txt"
    with pytest.raises(StaleFile):
        await write.execute(args, WorkspaceCall(read_record=record, attempt=1))
    with pytest.raises(StaleFile):
        await write.execute({"path": "f.txt", "content": "other"}, WorkspaceCall(read_record=record, attempt=2))


async def test_mounts_route_each_path_to_its_filesystem(tmp_path: Path) -> None:
    ws = Workspace(mounts={"/data": LocalFilesystem(tmp_path / "d"), "/docs": LocalFilesystem(tmp_path / "e")})
    await ws.init()
    tools = {t.name: t for t in await workspace_tools(ws)}
    wrote = await tools[FS.WRITE_FILE].execute({"path": "/data/a.txt", "content": "x"}, WorkspaceCall())
    assert wrote == "Wrote 1 bytes to /data/a.txt" and (tmp_path / "d" / "a.txt").read_text() == "x"
    with pytest.raises(WorkspaceError, match="no mount contains it"):
        await tools[FS.READ_FILE].execute({"path": "/elsewhere/a.txt"}, WorkspaceCall())


async def test_operation_timeout_bounds_a_filesystem_call(tmp_path: Path) -> None:
    fs = LocalFilesystem(tmp_path)
    ws = Workspace(filesystem=fs, operation_timeout=50)
    (tmp_path / "a.txt").write_text("a")

    async def slow_stat(path: str) -> Any:
        await asyncio.sleep(1)

    fs.stat = slow_stat  # type: ignore[method-assign]
    read = next(t for t in await workspace_tools(ws) if t.name == FS.READ_FILE)
    with pytest.raises(WorkspaceError, match=r"mastra_workspace_read_file timed out after 50ms \(operation_timeout\)"):
        await read.execute({"path": "a.txt"}, WorkspaceCall())
    assert not ws.can_bm25 and not ws.can_vector and not ws.can_hybrid and ws.skills is None


async def test_stopping_the_workspace_kills_the_commands_of_its_cached_resolver_sandboxes(tmp_path: Path) -> None:
    ws = Workspace(sandbox=lambda ctx: LocalSandbox(tmp_path / ctx["thread"]), sandbox_cache_key=lambda c: c["thread"])
    sandbox = await ws.resolve_sandbox({"thread": "t1"})
    handle = await sandbox.processes.spawn("sleep 77.5")
    await ws.stop()
    assert await handle.wait(5) is not None


async def test_read_file_answers_text_media_and_binary_as_mastra_does(tmp_path: Path) -> None:
    import base64

    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 20
    (tmp_path / "logo.png").write_bytes(png)
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    (tmp_path / "long.txt").write_text("".join(f"l{i}\n" for i in range(1, 13)))
    read = next(
        t for t in await workspace_tools(Workspace(filesystem=LocalFilesystem(tmp_path))) if t.name == FS.READ_FILE
    )
    media = await read.execute({"path": "logo.png"}, WorkspaceCall())
    assert media == {
        "__workspaceMedia": True,
        "text": "logo.png (28 bytes, image/png)",
        "mediaType": "image/png",
        "data": base64.b64encode(png).decode(),
    }
    binary = await read.execute({"path": "blob.bin"}, WorkspaceCall())
    assert binary.startswith("blob.bin (3 bytes, application/x-binary) — binary file not readable as text. Pass an")
    encoded = await read.execute({"path": "blob.bin", "encoding": "base64"}, WorkspaceCall())
    assert encoded.endswith("\nAAEC")
    ranged = await read.execute({"path": "long.txt", "offset": 9, "limit": 2}, WorkspaceCall())
    assert ranged == "long.txt (lines 9-10 of 13, 39 bytes)\n     9→l9\n    10→l10"
