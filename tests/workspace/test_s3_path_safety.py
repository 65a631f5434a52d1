"""The path-safety matrix on an S3Filesystem: every way out of the workspace's key prefix, with every operation
and every file tool, is refused, and no object of the bucket is read, written or deleted.

The escapes are test_path_safety's, less its 8 through symlinks (a bucket has none: `esc_file` is an ordinary
name there), plus 8 that aim at the sibling prefixes and the bucket's root: 30 in all."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from keel.activities.tools import error_text
from keel.workspace_providers import PermissionDenied, S3Filesystem, Workspace
from keel.workspace_providers.tools import WorkspaceCall, workspace_tools
from tests.s3 import S3Server
from tests.workspace.test_path_safety import OPS, SECRET, SIBLINGS, escapes
from tests.workspace.test_path_safety_runs import TOOLS

THROUGH_LINKS = ("esc_file", "esc_dir", "chain1/", "root_link/", "abs_link/", "real/up/", "in_dir/up/")
S3_ESCAPES = [
    "../ws/real/f.txt",  # out and back in: a path may not climb above the workspace root at all
    "../ws2/",
    "./../ws_backup/secret.txt",
    "real/../../outside/secret.txt",
    "/ws2/secret.txt",
    "/ws/real/f.txt",
    "../../../../../ws2/secret.txt",
    "../secret.txt",
]


def s3_escapes() -> list[str]:
    local = [p for p in escapes(Path("/srv/keel")) if not p.startswith(THROUGH_LINKS)]
    return [*local, *S3_ESCAPES]


@pytest.fixture(scope="module")
async def layout(s3_server: S3Server) -> AsyncIterator[tuple[S3Server, str]]:
    """A bucket with the workspace `ws/` beside prefixes holding secrets, a key named `ws` and one at the root."""
    bucket = s3_server.make_bucket()
    client = s3_server.client()
    for key in [*(f"{name}/secret.txt" for name in SIBLINGS), "ws", "secret.txt", "ws/real/f.txt"]:
        body = b"inside SECRET\n" if key.startswith("ws/") else SECRET
        client.put_object(bucket, key, io.BytesIO(body), len(body))
    yield s3_server, bucket


def snapshot(server: S3Server, bucket: str) -> dict[str, str]:
    return {o.object_name or "": o.etag or "" for o in server.client().list_objects(bucket, recursive=True)}


def workspace_fs(server: S3Server, bucket: str) -> S3Filesystem:
    return S3Filesystem(
        bucket,
        prefix="ws",
        endpoint=server.endpoint,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
    )


def test_case_list_is_complete() -> None:
    assert len(s3_escapes()) == 30


CASES = [(op, i) for op in OPS for i in range(30)]


@pytest.mark.parametrize(("op", "index"), CASES)
async def test_escape_is_refused(layout: tuple[S3Server, str], op: str, index: int) -> None:
    server, bucket = layout
    path = s3_escapes()[index]
    before = snapshot(server, bucket)
    with pytest.raises(PermissionDenied) as caught:
        await OPS[op](workspace_fs(server, bucket), path)  # type: ignore[arg-type]
    assert caught.value.path == path
    assert str(caught.value).startswith("Permission denied: access")
    assert snapshot(server, bucket) == before


async def test_every_escape_with_every_file_tool_is_refused(layout: tuple[S3Server, str]) -> None:
    server, bucket = layout
    tools = {t.name: t for t in await workspace_tools(Workspace(filesystem=workspace_fs(server, bucket)))}
    before, problems = snapshot(server, bucket), []
    for path in s3_escapes():
        for op, (tool, extra) in TOOLS.items():
            try:
                outcome = await tools[tool].execute({"path": path, **extra}, WorkspaceCall())
            except Exception as err:
                outcome = {"error": error_text(err)}
            if not outcome.get("error", "").startswith("PermissionError: Permission denied: access"):
                problems.append(f"{op} {path!r}: {outcome!r}")
    assert not problems, "\n".join(problems)
    assert snapshot(server, bucket) == before and len(s3_escapes()) * len(TOOLS) == 240


async def test_hints_for_absolute_paths_name_the_relative_path_when_it_exists(layout: tuple[S3Server, str]) -> None:
    fs = workspace_fs(*layout)
    with pytest.raises(PermissionDenied) as caught:
        await fs.read_file("/real/f.txt")
    assert str(caught.value) == (
        "Permission denied: access (path is outside the workspace; "
        'use a relative path like "real/f.txt") on /real/f.txt'
    )
    with pytest.raises(PermissionDenied) as caught:
        await fs.read_file("/etc/passwd")
    assert caught.value.operation == (
        'access (path is outside the workspace; use a path relative to the workspace root, without a leading "/")'
    )


@pytest.mark.parametrize("path", ["real/../real/f.txt", "./real//f.txt", "real/./f.txt", "real/f.txt"])
async def test_paths_staying_inside_work(layout: tuple[S3Server, str], path: str) -> None:
    fs = workspace_fs(*layout)
    assert await fs.read_file(path) == b"inside SECRET\n"
    assert (await fs.stat(path)).path == "real/f.txt"


@pytest.mark.parametrize("name", ["..test", "...", "%2e%2e", "a..b", ".%2e", "sp ace", "q?x#y", "é"])
async def test_odd_names_are_ordinary_keys(s3_server: S3Server, name: str) -> None:
    bucket = s3_server.make_bucket()
    fs = workspace_fs(s3_server, bucket)
    await fs.write_file(f"{name}/f.txt", "ok")
    assert snapshot(s3_server, bucket).keys() == {f"ws/{name}/f.txt"}
    assert await fs.read_file(f"{name}/f.txt", encoding="utf-8") == "ok"
    assert [e.name for e in await fs.readdir(".", recursive=True)] == [name, f"{name}/f.txt"]
