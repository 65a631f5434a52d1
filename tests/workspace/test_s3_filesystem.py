"""S3Filesystem against a real S3 server (SeaweedFS, tests/s3.py): the same answers as LocalFilesystem, call by
call and tool by tool; and what only an object store has: key prefixes that never overlap, refused credentials,
an endpoint down, conditional writes between workers."""

from __future__ import annotations

import asyncio
import io
import os
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from keel.activities.failures import application_error
from keel.activities.tools import error_text
from keel.app import Agent, App
from keel.model_providers import ModelResponse, ScriptedModel
from keel.storage import Storage
from keel.workspace_providers import (
    WORKSPACE_TOOLS,
    FileExists,
    FilesystemError,
    FilesystemUnavailable,
    IsDirectory,
    LocalFilesystem,
    LocalSandbox,
    NotDirectory,
    PermissionDenied,
    S3Filesystem,
    StaleFile,
    Workspace,
    WorkspaceError,
    WorkspaceReadOnly,
    s3_objects,
)
from keel.workspace_providers.tools import ReadRecord, WorkspaceCall, tracker_path, workspace_tools
from keel.workspace_providers.types import FileStat
from tests.conftest import free_port, running_worker
from tests.s3 import READER_KEY, READER_SECRET, S3Server, seaweedfs_server
from tests.workspace.test_local_filesystem import HELLO, REFERENCE

FS, SB, SE = WORKSPACE_TOOLS.FILESYSTEM, WORKSPACE_TOOLS.SANDBOX, WORKSPACE_TOOLS.SEARCH
Step = Callable[[Any], Awaitable[Any]]


def s3fs(server: S3Server, bucket: str, prefix: str = "ws", **options: Any) -> S3Filesystem:
    keys = {"access_key_id": server.access_key, "secret_access_key": server.secret_key}
    return S3Filesystem(bucket, prefix=prefix, endpoint=server.endpoint, **{**keys, **options})


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    return s3_server.make_bucket()


def keys(server: S3Server, bucket: str) -> dict[str, str]:
    """Every key of the bucket with its ETag."""
    return {o.object_name or "": o.etag or "" for o in server.client().list_objects(bucket, recursive=True)}


async def outcome(step: Step, fs: Any) -> Any:
    """What a call gave, comparable across filesystems: its value (a stat without its times), or the error."""
    try:
        value = await step(fs)
    except WorkspaceError as err:
        return f"{err.error_name}: {err}"
    if isinstance(value, FileStat):
        return (value.name, value.path, value.type, value.size if value.type == "file" else None, value.mime_type)
    return value


# --- the same answers as a local disk -------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 20
STEPS: list[Step] = [
    *(lambda fs, m=m, a=a, k=k: getattr(fs, m)(*a, **k) for m, a, k, _ in REFERENCE),
    # test_local_filesystem.test_errors
    lambda fs: fs.read_file("dir"),
    lambda fs: fs.read_file("dir/a.txt/x"),
    lambda fs: fs.readdir("dir/a.txt"),
    lambda fs: fs.readdir("nope"),
    lambda fs: fs.list_tree("nope"),
    lambda fs: fs.write_file("new/b.txt", "x", recursive=False),
    lambda fs: fs.write_file("dir/a.txt/b", "x"),
    lambda fs: fs.write_file("dir", "x"),
    lambda fs: fs.append_file("dir", "x"),
    lambda fs: fs.delete_file("dir"),
    lambda fs: fs.delete_file("nope"),
    lambda fs: fs.rmdir("dir"),
    lambda fs: fs.rmdir("dir/a.txt"),
    lambda fs: fs.rmdir("nope"),
    lambda fs: fs.rmdir("."),
    lambda fs: fs.delete("dir"),
    lambda fs: fs.mkdir("dir/a.txt"),
    lambda fs: fs.mkdir("x/y", recursive=False),
    lambda fs: fs.edit_file("nope.txt", "a", "b"),
    lambda fs: fs.stat("nope"),
    lambda fs: fs.copy_file("nope", "x"),
    lambda fs: fs.copy_file("dir", "x"),
    lambda fs: fs.copy_file("dir/a.txt", "dir", overwrite=True),
    lambda fs: fs.copy_file("dir", "dir/inner", recursive=True),
    lambda fs: fs.move_file("nope", "x"),
    lambda fs: fs.delete_file("nope", force=True),
    lambda fs: fs.rmdir("nope", force=True),
    lambda fs: fs.mkdir("dir"),
    lambda fs: fs.readdir("."),
    lambda fs: fs.stat("dir/a.txt"),
    lambda fs: fs.stat("./dir/"),
    lambda fs: fs.stat("."),
    lambda fs: fs.exists("dir/a.txt"),
    lambda fs: fs.exists("nope"),
    lambda fs: fs.exists("dir/a.txt/x"),
    # encodings and binary edits
    lambda fs: fs.write_file("b.bin", b"\x00\xffA"),
    *(lambda fs, e=e: fs.read_file("b.bin", encoding=e) for e in (None, "base64", "hex", "binary", "utf8")),
    lambda fs: fs.write_file("img.png", b"\x89PNG\x00\x01"),
    lambda fs: fs.edit_file("img.png", "PNG", "x"),
    lambda fs: fs.edit_file("dir/a.txt", "", "x"),
    lambda fs: fs.edit_file("dir/a.txt", "beta\n", "b\nc\nd\n"),
    lambda fs: fs.read_file("dir/a.txt", encoding="utf-8"),
    # test_copy_move_append
    lambda fs: fs.copy_file("dir/a.txt", "copy/deep/a.txt"),
    lambda fs: fs.copy_file("dir/a.txt", "copy/deep/a.txt", overwrite=False),
    lambda fs: fs.write_file("dir/sub/b.txt", "b"),
    lambda fs: fs.write_file("tree/a.txt", "keep"),
    lambda fs: fs.copy_file("dir", "tree", recursive=True, overwrite=False),
    lambda fs: fs.readdir("tree", recursive=True),
    lambda fs: fs.read_file("tree/a.txt"),
    lambda fs: fs.move_file("tree/sub/b.txt", "moved/b.txt"),
    lambda fs: fs.readdir("tree", recursive=True),
    lambda fs: fs.move_file("dir/a.txt", "tree/a.txt", overwrite=False),
    lambda fs: fs.move_file("dir", "tree", overwrite=False),
    lambda fs: fs.move_file("dir/a.txt", "tree/a.txt"),
    lambda fs: fs.move_file("tree", "renamed", overwrite=False),
    lambda fs: fs.readdir(".", recursive=True),
    lambda fs: fs.append_file("log/out.log", "one\n"),
    lambda fs: fs.append_file("log/out.log", b"two\n"),
    lambda fs: fs.read_file("log/out.log"),
    lambda fs: fs.delete("renamed", recursive=True),
    lambda fs: fs.delete("moved/b.txt"),
    lambda fs: fs.readdir(".", recursive=True),
    # test_gitignore
    lambda fs: fs.write_file(".gitignore", "build/\n*.log\n!keep.log\n# comment\n/top.txt\n"),
    *(lambda fs, n=n: fs.write_file(n, "needle\n") for n in ("build/out.txt", "a.log", "keep.log", "top.txt")),
    lambda fs: fs.write_file("dir/top.txt", "needle\n"),
    lambda fs: fs.list_tree("."),
    lambda fs: fs.list_tree(".", respect_gitignore=False),
    lambda fs: fs.list_tree("build"),
    lambda fs: fs.grep("needle"),
    lambda fs: fs.grep("needle", path="build"),
    # test_readdir_and_tree_options
    *(lambda fs, n=n: fs.write_file(n, "TODO\n") for n in ("src/a.ts", "src/b.py", "src/node_modules/x.ts")),
    *(lambda fs, n=n: fs.write_file(n, "TODO\n") for n in ("src/deep/c.ts", ".env")),
    lambda fs: fs.readdir("src", recursive=True),
    lambda fs: fs.readdir("src", extension=".ts"),
    lambda fs: fs.readdir("src", recursive=True, extension="ts"),
    lambda fs: fs.list_tree("src", exclude="node_modules|deep"),
    lambda fs: fs.list_tree(".", dirs_only=True, max_depth=5),
    lambda fs: fs.list_tree("src", extension="py", max_depth=1),
    lambda fs: fs.list_tree(".", pattern=["", " "], max_depth=0),
    # test_grep_details
    lambda fs: fs.write_file("g/one.txt", "needle 1\na\nb\nc\nd\nneedle 2\n" + "x" * 600 + "needle\n"),
    lambda fs: fs.write_file("g/data.bin", "needle\n"),
    lambda fs: fs.grep("a" * 1001),
    lambda fs: fs.grep("("),
    lambda fs: fs.grep("needle", path="g/one.txt", context_lines=1),
    lambda fs: fs.grep("needle", path="g/data.bin"),
    lambda fs: fs.grep("needle", path="nowhere"),
    lambda fs: fs.grep("(?<n>needle) (\\d)\\k<n>?", path="g/**/*.txt"),
    lambda fs: fs.grep("T[O]DO", path="src", include_hidden=True, max_count=1),
    # directories emptied stay, as on a disk; an empty directory is listed
    lambda fs: fs.mkdir("empty/inner"),
    lambda fs: fs.list_tree("empty"),
    lambda fs: fs.delete("src/deep/c.ts"),
    lambda fs: fs.list_tree("src", max_depth=3),
    lambda fs: fs.delete("src/deep"),
    lambda fs: fs.delete("empty"),
    lambda fs: fs.delete("empty", recursive=True),
    lambda fs: fs.rmdir("src/node_modules", recursive=True),
    lambda fs: fs.list_tree(".", max_depth=4, show_hidden=True),
    lambda fs: fs.readdir(".", recursive=True),
]


async def test_every_call_answers_as_on_a_local_disk(s3_server: S3Server, bucket: str, tmp_path: Path) -> None:
    local, remote = LocalFilesystem(tmp_path / "ws"), s3fs(s3_server, bucket)
    for fs in (local, remote):
        await fs.write_file("dir/a.txt", "alpha\nbeta\ngamma\n")
    started = time.monotonic()
    expected = [await outcome(step, local) for step in STEPS]
    local_seconds, started = time.monotonic() - started, time.monotonic()
    answers = [await outcome(step, remote) for step in STEPS]
    remote_seconds = time.monotonic() - started
    different = [(i, e, a) for i, (e, a) in enumerate(zip(expected, answers, strict=True)) if e != a]
    assert different == []
    assert [a for (_, _, _, want), a in zip(REFERENCE, answers, strict=False) if want is not None] == [
        want for _, _, _, want in REFERENCE if want is not None
    ]  # Mastra's own text, not only the local filesystem's
    assert remote_seconds < 30, (local_seconds, remote_seconds)


def _normalised(output: Any) -> Any:
    """A tool answer without what differs between two runs anywhere: times, PIDs, a directory's own size."""
    if not isinstance(output, str):
        return output
    output = re.sub(r"Modified: \S+", "Modified: <t>", output)
    output = re.sub(r"Type: directory Size: \d+", "Type: directory Size: <n>", output)
    return re.sub(r"(PID:? |Process )\d+", r"\1<pid>", output)


TOOL_STEPS: list[tuple[str, dict[str, Any]]] = [
    (FS.READ_FILE, {"path": "notes/hello.txt"}),
    (FS.READ_FILE, {"path": "notes/hello.txt", "offset": 2, "limit": 1}),
    (FS.READ_FILE, {"path": "logo.png"}),
    (FS.READ_FILE, {"path": "blob.bin"}),
    (FS.READ_FILE, {"path": "blob.bin", "encoding": "base64"}),
    (FS.READ_FILE, {"path": "missing.txt"}),
    (FS.WRITE_FILE, {"path": "docs/guide.md", "content": "never read"}),
    (FS.WRITE_FILE, {"path": "notes/new.txt", "content": "x", "overwrite": False}),
    (FS.READ_FILE, {"path": "notes/new.txt"}),
    (FS.WRITE_FILE, {"path": "notes/new.txt", "content": "y", "overwrite": False}),
    (FS.EDIT_FILE, {"path": "notes/hello.txt", "old_string": "world", "new_string": "WORLD"}),
    (FS.EDIT_FILE, {"path": "notes/hello.txt", "old_string": "hello", "new_string": "bye"}),
    (FS.READ_FILE, {"path": "notes/hello.txt", "showLineNumbers": False}),
    (FS.EDIT_FILE, {"path": "notes/hello.txt", "old_string": "ello", "new_string": "i"}),
    (FS.READ_FILE, {"path": "notes/hello.txt", "limit": 1}),
    (FS.EDIT_FILE, {"path": "notes/hello.txt", "old_string": "ello", "new_string": "i", "replace_all": True}),
    (FS.READ_FILE, {"path": "notes/hello.txt"}),
    (FS.WRITE_FILE, {"path": "notes/hello.txt", "content": "rewritten\n"}),
    (FS.MKDIR, {"path": "src/pkg"}),
    (FS.MKDIR, {"path": "notes/new.txt"}),
    (FS.WRITE_FILE, {"path": "src/pkg/mod.py", "content": "def f():\n    return 42\n"}),
    (FS.LIST_FILES, {}),
    (FS.LIST_FILES, {"path": "src", "maxDepth": 1}),
    (FS.LIST_FILES, {"showHidden": True, "maxDepth": 5}),
    (FS.LIST_FILES, {"pattern": "**/*.py", "maxDepth": 5}),
    (FS.LIST_FILES, {"dirsOnly": True, "exclude": "pkg"}),
    (FS.LIST_FILES, {"path": "nope"}),
    (FS.FILE_STAT, {"path": "notes/hello.txt"}),
    (FS.FILE_STAT, {"path": "src"}),
    (FS.FILE_STAT, {"path": "nope"}),
    (FS.GREP, {"pattern": "hello"}),
    (FS.GREP, {"pattern": "HELLO", "caseSensitive": False, "contextLines": 1}),
    (FS.GREP, {"pattern": "return \\d+", "path": "src"}),
    (FS.GREP, {"pattern": "secret", "includeHidden": True, "maxCount": 1}),
    (FS.DELETE, {"path": "src/pkg/mod.py"}),
    (FS.LIST_FILES, {"path": "src"}),
    (FS.DELETE, {"path": "src"}),
    (FS.DELETE, {"path": "src", "recursive": True}),
    (FS.DELETE, {"path": "src"}),
    (SE.INDEX, {"path": "docs/extra.md", "content": "gamma delta\nepsilon"}),
    (SE.SEARCH, {"query": "hello world"}),
    (SE.SEARCH, {"query": "gamma", "topK": 1}),
    (SB.EXECUTE_COMMAND, {"command": "echo hi; echo oops >&2"}),
    (SB.EXECUTE_COMMAND, {"command": "echo started; sleep 0.2; echo done", "background": True}),
    (SB.GET_PROCESS_OUTPUT, {"pid": "$pid", "wait": True}),
    (SB.EXECUTE_COMMAND, {"command": "sleep 30", "background": True}),
    (SB.KILL_PROCESS, {"pid": "$pid"}),
    (SB.GET_PROCESS_OUTPUT, {"pid": "123456789"}),
]


async def run_tools(fs: Any, sandbox_dir: Path) -> list[Any]:
    """TOOL_STEPS on a workspace of `fs` (BM25 over `notes` and `docs`, writes needing a read first), keeping the
    read records as a run does."""
    for path, content in (("notes/hello.txt", HELLO), ("docs/guide.md", "# Guide\nhello world\n")):
        await fs.write_file(path, content)
    await fs.write_file("logo.png", PNG)
    await fs.write_file("blob.bin", b"\x00\x01\x02")
    await fs.write_file(".hidden/secret.txt", "secret\n")
    ws = Workspace(
        filesystem=fs,
        sandbox=LocalSandbox(sandbox_dir),
        bm25=True,
        auto_index_paths=["notes", "docs/**/*.md"],
        tools={FS.WRITE_FILE: {"require_read_before_write": True}, FS.EDIT_FILE: {"require_read_before_write": True}},
    )
    await ws.init()
    tools = {t.name: t for t in await workspace_tools(ws)}
    records: dict[str, ReadRecord] = {}
    outputs: list[Any] = []
    for name, raw in TOOL_STEPS:
        pids = re.findall(r"PID: (\d+)", " ".join(o for o in outputs if isinstance(o, str)))
        args = {k: (pids[-1] if v == "$pid" else v) for k, v in raw.items()}
        call = WorkspaceCall(read_record=records.get(tracker_path(str(args.get("path", "")))))
        try:
            output = await tools[name].execute(args, call)
        except Exception as err:
            output = {"error": error_text(err)}
        if call.effects.read is not None:
            records[call.effects.read.path] = call.effects.read
        if call.effects.cleared is not None:
            records.pop(call.effects.cleared, None)
        outputs.append(output)
    await ws.destroy()
    return outputs


async def test_every_workspace_tool_answers_as_on_a_local_disk(
    s3_server: S3Server, bucket: str, tmp_path: Path
) -> None:
    expected = await run_tools(LocalFilesystem(tmp_path / "ws"), tmp_path / "sb1")
    answers = await run_tools(s3fs(s3_server, bucket), tmp_path / "sb2")
    assert [_normalised(a) for a in answers] == [_normalised(e) for e in expected]
    every_tool = {v for group in (FS, SB, SE) for k, v in vars(group).items() if not k.startswith("_")}
    assert {name for name, _ in TOOL_STEPS} == every_tool and len(every_tool) == 13
    by_step = dict(zip(range(len(TOOL_STEPS)), answers, strict=True))
    not_read = 'FileReadRequiredError: File "{}" has not been read. You must read a file before writing to it.'
    assert by_step[0] == "notes/hello.txt (24 bytes)\n     1→Hello\n     2→world\n     3→hello again\n     4→"
    assert by_step[2]["mediaType"] == "image/png" and by_step[5] == {
        "error": "FileNotFoundError: File not found: missing.txt"
    }
    assert by_step[6] == {"error": not_read.format("docs/guide.md")}
    assert by_step[9] == {"error": "FileExistsError: File already exists: notes/new.txt"}
    assert by_step[10] == "Replaced 1 occurrence in notes/hello.txt (lines 2)"
    assert by_step[11] == {"error": not_read.format("notes/hello.txt")}  # the write cleared the read
    assert by_step[13].startswith("The specified text appears 2 times. Provide more surrounding context")
    assert by_step[15] == "Replaced 2 occurrences in notes/hello.txt (lines 1, 3)"
    assert by_step[16] == "notes/hello.txt (18 bytes)\n     1→Hi\n     2→WORLD\n     3→hi again\n     4→"
    assert answers[TOOL_STEPS.index((FS.LIST_FILES, {}))] == (
        ".\ndocs\n\tguide.md\nnotes\n\thello.txt\n\tnew.txt\nsrc\n\tpkg\nblob.bin\nlogo.png\n\n"
        "4 directories, 5 files (truncated at depth 2)"
    )
    emptied = TOOL_STEPS.index((FS.LIST_FILES, {"path": "src"}))
    assert answers[emptied] == ".\npkg\n\n1 directory, 0 files"  # src after its only file was deleted
    assert answers[TOOL_STEPS.index((SE.SEARCH, {"query": "hello world"}))] == (
        "notes/hello.txt:1-3: Hello\nworld\nhello again\n\ndocs/guide.md:2-2: # Guide\nhello world\n\n---\n"
        "2 results (bm25 search)"
    )


# --- keys, credentials, outages ---------------------------------------------------------------------------------


async def test_prefix_ws_never_reaches_ws2_nor_a_key_named_ws(s3_server: S3Server, bucket: str) -> None:
    client = s3_server.client()
    for key in ("ws2/secret.txt", "ws", "ws-old/secret.txt", "wsx"):
        client.put_object(bucket, key, io.BytesIO(b"SECRET\n"), 7)
    ws, ws2 = s3fs(s3_server, bucket, "ws"), s3fs(s3_server, bucket, "/ws2/")
    await ws.write_file("secret.txt", "mine\n")
    await ws.write_file("dir/a.txt", "a\n")
    assert await ws.list_tree(".") == ".\ndir\n\ta.txt\nsecret.txt\n\n1 directory, 2 files"
    assert await ws.grep("SECRET", case_sensitive=True) == "0 matches across 0 files\n---"
    assert [e.name for e in await ws.readdir(".", recursive=True)] == ["dir", "dir/a.txt", "secret.txt"]
    assert await ws2.read_file("secret.txt") == b"SECRET\n" and ws2.prefix == "ws2/"
    await ws.delete("dir", recursive=True)
    await ws.delete_file("secret.txt")
    assert sorted(keys(s3_server, bucket)) == ["ws", "ws-old/secret.txt", "ws2/secret.txt", "wsx"]
    whole = s3fs(s3_server, bucket, "")
    assert [(e.name, e.type) for e in await whole.readdir(".")] == [
        ("ws", "file"),
        ("ws-old", "directory"),
        ("ws2", "directory"),
        ("wsx", "file"),
    ]


async def test_bad_credentials_are_a_clear_non_retryable_error_naming_the_bucket(
    s3_server: S3Server, bucket: str
) -> None:
    fs = s3fs(s3_server, bucket, secret_access_key="wrong-secret")
    with pytest.raises(PermissionDenied) as caught:
        await fs.read_file("a.txt")
    assert re.fullmatch(
        re.escape(f'Permission denied: access (S3 refused the request to bucket "{bucket}" at {s3_server.endpoint}: ')
        + "(SignatureDoesNotMatch|AccessDenied)"
        + re.escape(f"; check the credentials and bucket policy) on s3://{bucket}/ws/"),
        str(caught.value),
    )
    assert fs.status == "error" and not caught.value.retryable
    failure = application_error(caught.value)
    assert failure is not None and failure.non_retryable
    ws = Workspace(filesystem=fs)
    read = next(t for t in await workspace_tools(ws) if t.name == FS.READ_FILE)
    with pytest.raises(PermissionDenied, match=f'bucket "{bucket}"'):
        await read.execute({"path": "a.txt"}, WorkspaceCall())
    unknown = s3fs(s3_server, bucket, access_key_id="nobody", secret_access_key="x")
    with pytest.raises(PermissionDenied, match=f'bucket "{bucket}" at .*: (AccessDenied|InvalidAccessKeyId)'):
        await unknown.stat(".")


async def test_an_identity_without_write_permission_is_refused_naming_the_bucket(
    s3_server: S3Server, bucket: str
) -> None:
    await s3fs(s3_server, bucket).write_file("a.txt", "a")
    reader = s3fs(s3_server, bucket, access_key_id=READER_KEY, secret_access_key=READER_SECRET)
    assert await reader.read_file("a.txt") == b"a"
    assert await reader.list_tree(".") == ".\na.txt\n\n0 directories, 1 file"
    denied = f'^Permission denied: access .*bucket "{bucket}".*AccessDenied.* on b.txt$'
    with pytest.raises(PermissionDenied, match=denied):
        await reader.write_file("b.txt", "b")
    assert sorted(keys(s3_server, bucket)) == ["ws/a.txt"]


async def test_an_endpoint_down_is_a_retryable_error(bucket: str) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    fs = S3Filesystem(bucket, endpoint=endpoint, access_key_id="k", secret_access_key="s")
    started = time.monotonic()
    with pytest.raises(FilesystemUnavailable) as caught:
        await fs.write_file("a.txt", "a")
    assert time.monotonic() - started < 5
    assert caught.value.retryable and fs.status == "error"
    assert str(caught.value) == (
        f'S3 endpoint {endpoint} unreachable (bucket "{bucket}" at {endpoint}): Connection refused'
    )
    assert error_text(caught.value).startswith("FilesystemUnavailableError: S3 endpoint")


async def test_a_missing_bucket_is_named(s3_server: S3Server) -> None:
    with pytest.raises(FilesystemError, match=f'^Bucket "keel-missing" not found at {s3_server.endpoint}$'):
        await s3fs(s3_server, "keel-missing").init()


async def test_read_only_refuses_every_write_and_offers_no_write_tool(s3_server: S3Server, bucket: str) -> None:
    await s3fs(s3_server, bucket).write_file("a.txt", "a")
    fs = s3fs(s3_server, bucket, read_only=True)
    assert fs.get_info()["metadata"]["readOnly"] is True
    assert fs.get_instructions() == (
        f'S3 storage in bucket "{bucket}". Read-only storage - files are retained across sessions.'
    )
    calls = [
        ("writeFile", fs.write_file("a.txt", "b")),
        ("appendFile", fs.append_file("a.txt", "b")),
        ("edit_file", fs.edit_file("a.txt", "a", "b")),
        ("deleteFile", fs.delete_file("a.txt")),
        ("copyFile", fs.copy_file("a.txt", "b.txt")),
        ("moveFile", fs.move_file("a.txt", "b.txt")),
        ("mkdir", fs.mkdir("d")),
        ("rmdir", fs.rmdir(".")),
        ("delete", fs.delete("a.txt")),
    ]
    for operation, call in calls:
        with pytest.raises(WorkspaceReadOnly, match=f"^Workspace is in read-only mode. Cannot perform: {operation}$"):
            await call
    names = {t.name for t in await workspace_tools(Workspace(filesystem=fs))}
    assert names == {FS.READ_FILE, FS.LIST_FILES, FS.FILE_STAT, FS.GREP}
    assert await fs.read_file("a.txt") == b"a" and list(keys(s3_server, bucket)) == ["ws/a.txt"]


# --- writes between workers ------------------------------------------------------------------------------------


def _external_write(server: S3Server, bucket: str, key: str, body: bytes, mtime: str | None = None) -> None:
    metadata = {"mtime": mtime} if mtime else None
    server.client().put_object(bucket, key, io.BytesIO(body), len(body), metadata=metadata)  # type: ignore[arg-type]


def _interfering(fs: S3Filesystem, action: Callable[[], None]) -> list[str]:
    """Run `action` (another writer) just before each of the filesystem's next PUTs; returns the keys put."""
    objects, put, seen = fs._objects, fs._objects.put, []

    def racing(key: str, data: bytes, condition: dict[str, str] | None = None) -> None:
        seen.append(key)
        if len(seen) == 1:
            action()
        put(key, data, condition)

    objects.put = racing  # type: ignore[method-assign]
    return seen


async def test_a_write_refused_by_its_checks_leaves_no_object_behind(s3_server: S3Server, bucket: str) -> None:
    """A new file is created in the round trip of its checks; when they refuse (a directory there, a file among
    the parents), what that PUT made is gone again, and an existing file is written over or kept as asked."""
    fs = s3fs(s3_server, bucket)
    await fs.write_file("dir/a.txt", "a")
    before = keys(s3_server, bucket)
    with pytest.raises(IsDirectory):
        await fs.write_file("dir", "x")
    with pytest.raises(NotDirectory):
        await fs.write_file("dir/a.txt/b.txt", "x")
    with pytest.raises(FileExists):
        await fs.write_file("dir/a.txt", "x", overwrite=False)
    assert keys(s3_server, bucket) == before
    assert await fs.read_file("dir/a.txt", encoding="utf-8") == "a"
    await fs.write_file("dir/a.txt", "again")
    assert await fs.read_file("dir/a.txt", encoding="utf-8") == "again"
    other = s3fs(s3_server, bucket)  # another worker's, which has not seen the file: its create fails, it overwrites
    await other.write_file("dir/a.txt", "theirs")
    with pytest.raises(FileExists):
        await s3fs(s3_server, bucket).write_file("dir/a.txt", "x", overwrite=False)
    assert await fs.read_file("dir/a.txt", encoding="utf-8") == "theirs"
    assert [e.name for e in await fs.readdir(".", recursive=True)] == ["dir", "dir/a.txt"]


async def test_a_stale_expected_mtime_fails_the_write(s3_server: S3Server, bucket: str) -> None:
    fs = s3fs(s3_server, bucket)
    await fs.write_file("a.txt", "v1")
    seen = (await fs.stat("a.txt")).modified_at
    assert seen.microsecond % 1000 == 0 and seen.timestamp() == pytest.approx(time.time(), abs=30)
    await fs.write_file("a.txt", "v2", expected_mtime=seen)
    _external_write(s3_server, bucket, "ws/a.txt", b"theirs", mtime="1700000000.5")
    now = (await fs.stat("a.txt")).modified_at
    assert now.timestamp() == 1700000000.5
    with pytest.raises(StaleFile) as caught:
        await fs.write_file("a.txt", "v3", expected_mtime=seen)
    assert str(caught.value).startswith("File was modified externally: a.txt (expected mtime ")
    assert str(caught.value).endswith(", actual 2023-11-14T22:13:20.500Z)")
    with pytest.raises(StaleFile):
        await fs.edit_file("a.txt", "theirs", "mine", expected_mtime=seen)
    assert await fs.read_file("a.txt") == b"theirs"
    await fs.write_file("fresh.txt", "ok", expected_mtime=seen)
    _external_write(s3_server, bucket, "ws/plain.txt", b"no metadata")
    plain = await fs.stat("plain.txt")
    assert plain.modified_at == plain.created_at and plain.modified_at.microsecond == 0  # LastModified, seconds


async def test_a_write_racing_another_worker_after_the_check_is_stale_not_lost(
    s3_server: S3Server, bucket: str
) -> None:
    fs = s3fs(s3_server, bucket)
    await fs.write_file("a.txt", "v1")
    seen = (await fs.stat("a.txt")).modified_at
    put = _interfering(fs, lambda: _external_write(s3_server, bucket, "ws/a.txt", b"theirs"))
    with pytest.raises(StaleFile):
        await fs.write_file("a.txt", "mine", expected_mtime=seen)
    assert put == ["ws/a.txt"] and await fs.read_file("a.txt") == b"theirs"
    _interfering(fs, lambda: _external_write(s3_server, bucket, "ws/new.txt", b"theirs"))
    with pytest.raises(WorkspaceError, match=r"^File already exists: new\.txt$"):
        await fs.write_file("new.txt", "mine", overwrite=False)
    assert await fs.read_file("new.txt") == b"theirs"


async def test_an_edit_racing_another_worker_edits_their_version(s3_server: S3Server, bucket: str) -> None:
    fs = s3fs(s3_server, bucket)
    await fs.write_file("a.txt", "one two\n")
    put = _interfering(fs, lambda: _external_write(s3_server, bucket, "ws/a.txt", b"one two three\n"))
    assert await fs.edit_file("a.txt", "one", "ONE") == "Replaced 1 occurrence in a.txt (lines 1)"
    assert put == ["ws/a.txt", "ws/a.txt"] and await fs.read_file("a.txt") == b"ONE two three\n"
    _interfering(fs, lambda: _external_write(s3_server, bucket, "ws/log.txt", b"theirs\n"))
    await fs.append_file("log.txt", "mine\n")
    assert await fs.read_file("log.txt") == b"theirs\nmine\n"


async def test_two_workers_appending_at_once_lose_nothing(s3_server: S3Server, bucket: str) -> None:
    first, second = s3fs(s3_server, bucket), s3fs(s3_server, bucket)
    await asyncio.gather(*(fs.append_file("log.txt", f"{i}\n") for i in range(4) for fs in (first, second)))
    lines = (await first.read_file("log.txt", encoding="utf-8")).splitlines()
    assert sorted(lines) == sorted(str(i) for i in range(4) for _ in range(2))


# --- the rest of the provider ----------------------------------------------------------------------------------


async def test_info_instructions_lifecycle_and_credentials_from_the_environment(
    s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs = s3fs(s3_server, bucket, prefix="team/ws", id="mine")
    assert (fs.id, fs.status, fs.scope) == ("mine", "pending", f"s3:{s3_server.endpoint}/{bucket}/team/ws/")
    await fs.init()
    assert fs.get_info() == {
        "id": "mine",
        "name": "S3Filesystem",
        "provider": "s3",
        "status": "ready",
        "metadata": {"bucket": bucket, "region": "us-east-1", "endpoint": s3_server.endpoint, "prefix": "team/ws/"},
    }
    assert fs.get_instructions() == (
        f'S3 storage in bucket "{bucket}". Persistent storage - files are retained across sessions.'
    )
    custom = S3Filesystem(bucket, instructions=lambda ctx: f"custom {ctx}")
    assert custom.get_instructions({"a": 1}) == "custom {'a': 1}"
    assert S3Filesystem(bucket).id.startswith("s3-fs-")
    await fs.destroy()
    assert fs.status == "destroyed"
    for name, value in {
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
        "AWS_ENDPOINT_URL_S3": s3_server.endpoint,
    }.items():
        monkeypatch.setenv(name, value)
    from_env = S3Filesystem(bucket, prefix="team/ws")
    await from_env.write_file("a.txt", "from env")
    assert keys(s3_server, bucket).keys() == {"team/ws/a.txt"}
    ws = Workspace(filesystem=from_env)
    info = await ws.get_info(include_file_count=True)
    assert info["filesystem"]["provider"] == "s3" and info["filesystem"]["totalFiles"] == 1
    with pytest.raises(WorkspaceError, match="both access_key_id and secret_access_key"):
        S3Filesystem(bucket, access_key_id="only-the-key")
    with pytest.raises(WorkspaceError, match="endpoint must be"):
        S3Filesystem(bucket, endpoint="http://host/path")


async def test_a_file_over_the_read_limit_is_refused_not_loaded(
    s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_objects, "MAX_READ_BYTES", 1000)
    fs = s3fs(s3_server, bucket)
    await fs.write_file("big.log", "x" * 1001)
    with pytest.raises(FilesystemError, match=r"^File too large to read \(1001 bytes, at most 1000\): big.log$"):
        await fs.read_file("big.log")


async def test_an_emptied_directory_leaves_no_folder_behind_on_the_server(s3_server: S3Server, bucket: str) -> None:
    fs = s3fs(s3_server, bucket)
    await fs.write_file("a/b/c/d.txt", "d")
    await fs.mkdir("a/empty")
    await fs.copy_file("a", "copy", recursive=True)
    assert [e.name for e in await fs.readdir("copy", recursive=True)] == ["b", "b/c", "b/c/d.txt", "empty"]
    await fs.delete("a", recursive=True)
    await fs.move_file("copy", "moved")
    assert await fs.list_tree(".", max_depth=5) == ".\nmoved\n\tb\n\t\tc\n\t\t\td.txt\n\tempty\n\n4 directories, 1 file"
    await fs.delete("moved", recursive=True)
    assert keys(s3_server, bucket) == {} and await fs.list_tree(".") == ".\n\n0 directories, 0 files"
    assert [o.object_name for o in s3_server.client().list_objects(bucket, prefix="ws/moved/")] == []


async def test_keel_tool_runs_s3_workspace_tools_on_a_real_worker(
    client: Client, storage: Storage, task_queue: str, s3_server: S3Server, bucket: str
) -> None:
    ws = Workspace(filesystem=s3fs(s3_server, bucket))
    app = App.of(Agent(id="a", model=ScriptedModel(lambda r: ModelResponse(text="")), workspace=ws))
    async with running_worker(client, app, storage, task_queue) as keel:
        wrote = await keel.execute_tool("a", FS.WRITE_FILE, {"path": "x/y.txt", "content": "hi\n"})
        read = await keel.execute_tool("a", FS.READ_FILE, {"path": "x/y.txt"})
        missing = await keel.execute_tool("a", FS.READ_FILE, {"path": "nope.txt"})
        outside = await keel.execute_tool("a", FS.READ_FILE, {"path": "../ws2/secret.txt"})
    assert (wrote.result, wrote.is_error) == ("Wrote 3 bytes to x/y.txt", False)
    assert read.result == "x/y.txt (3 bytes)\n     1→hi\n     2→"
    assert missing.is_error and missing.result == {"error": "FileNotFoundError: File not found: nope.txt"}
    assert outside.result == {"error": "PermissionError: Permission denied: access on ../ws2/secret.txt"}
    assert keys(s3_server, bucket).keys() == {"ws/x/y.txt"}


def test_the_server_leaves_no_process_and_no_socket_behind() -> None:
    with seaweedfs_server() as server:
        assert server.client().list_buckets() == []
        pid, ports = server.pid, server.ports
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not [p for port in ports for p in Path("/tmp").glob(f"seaweedfs-*-{port}.sock")]


def test_the_keys_a_filesystem_remembers_seeing_are_bounded() -> None:
    """Which files a filesystem has seen (so a write of one goes check-then-PUT) is a hint kept for the last
    `SEEN_KEYS` keys: a worker writing millions of files holds no more; a deleted key is forgotten."""
    objects = S3Filesystem("b", endpoint="http://127.0.0.1:1", access_key_id="a", secret_access_key="b")._objects
    for i in range(s3_objects.SEEN_KEYS + 10):
        objects.saw(f"k{i}")
    assert not objects.seen("k9") and objects.seen("k10") and objects.seen(f"k{s3_objects.SEEN_KEYS + 9}")
    objects.saw("k10", there=False)
    assert not objects.seen("k10")
