"""Every way out of the workspace, tried with every operation: refused, and nothing outside read or written."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from keel.workspace_providers.errors import PermissionDenied
from keel.workspace_providers.local_filesystem import LocalFilesystem
from keel.workspace_providers.paths import Resolver

SECRET = b"SECRET\n"
SIBLINGS = ("ws2", "ws_backup", "ws.bak", "outside")

Op = Callable[[LocalFilesystem, str], Awaitable[Any]]
OPS: dict[str, Op] = {
    "read": lambda fs, p: fs.read_file(p),
    "write": lambda fs, p: fs.write_file(p, "pwned"),
    "edit": lambda fs, p: fs.edit_file(p, "SECRET", "pwned"),
    "list_tree": lambda fs, p: fs.list_tree(p),
    "stat": lambda fs, p: fs.stat(p),
    "delete": lambda fs, p: fs.delete(p, recursive=True),
    "mkdir": lambda fs, p: fs.mkdir(p),
    "grep": lambda fs, p: fs.grep("SECRET", path=p),
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """`ws` (the base) beside sibling folders holding secrets, with symlinks in `ws` leading out and in."""
    for name in SIBLINGS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "secret.txt").write_bytes(SECRET)
    ws = tmp_path / "ws"
    (ws / "real").mkdir(parents=True)
    (ws / "real" / "f.txt").write_text("inside SECRET\n")
    links = {
        "esc_file": "../ws2/secret.txt",
        "esc_dir": "../ws_backup",
        "chain1": "chain2",
        "chain2": "../ws.bak",
        "root_link": "/",
        "abs_link": str(tmp_path / "outside"),
        "in_dir": "real",
        "in_file": "real/f.txt",
        "in_abs": str(ws / "real"),
    }
    for name, target in links.items():
        (ws / name).symlink_to(target)
    (ws / "real" / "up").symlink_to("../../ws2")
    return tmp_path


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file and folder outside `ws`, with its contents."""
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root:
            dirnames.remove("ws")
        for name in dirnames:
            found[os.path.join(dirpath, name) + "/"] = b""
        for name in filenames:
            found[os.path.join(dirpath, name)] = Path(dirpath, name).read_bytes()
    return found


def escapes(root: Path) -> list[str]:
    return [
        "../ws2/secret.txt",
        "../ws_backup/secret.txt",
        "../ws.bak/secret.txt",
        "../ws2",
        "..",
        "a/../../ws2/secret.txt",
        "real/../../ws2/secret.txt",
        str(root / "ws2" / "secret.txt"),
        str(root / "ws_backup"),
        str(root / "ws.bak" / "secret.txt"),
        str(root / "ws") + "2/secret.txt",
        "/etc/passwd",
        "/",
        "~/x",
        "esc_file",
        "esc_dir/secret.txt",
        "esc_dir",
        "chain1/secret.txt",
        "root_link/etc/passwd",
        "abs_link/secret.txt",
        "real/up/secret.txt",
        "in_dir/up/secret.txt",
        "bad\0name",
        "real/f.txt\0",
        "C:\\x",
        "C:/x",
        "c:x",
        "real\\f.txt",
        "//server/share",
        "\\\\server\\share",
    ]


CASES = [(op, i) for op in OPS for i in range(30)]


@pytest.mark.parametrize(("op", "index"), CASES)
async def test_escape_is_refused(root: Path, op: str, index: int) -> None:
    path = escapes(root)[index]
    fs = LocalFilesystem(root / "ws")
    before, inside = snapshot(root), sorted(p.name for p in (root / "ws").iterdir())
    with pytest.raises(PermissionDenied) as caught:
        await OPS[op](fs, path)
    assert caught.value.path == path
    assert str(caught.value).startswith("Permission denied: access")
    assert snapshot(root) == before
    assert sorted(p.name for p in (root / "ws").iterdir()) == inside


def test_case_list_is_complete(root: Path) -> None:
    assert len(escapes(root)) == 30


async def test_hints_for_absolute_paths(root: Path) -> None:
    fs = LocalFilesystem(root / "ws")
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
    with pytest.raises(PermissionDenied) as caught:
        await fs.read_file("../../etc/passwd")
    assert str(caught.value) == "Permission denied: access on ../../etc/passwd"


@pytest.mark.parametrize("name", ["..test", "...", "%2e%2e", "a..b", ".%2e/x"])
async def test_odd_names_are_ordinary(root: Path, name: str) -> None:
    fs = LocalFilesystem(root / "ws")
    await fs.write_file(name, "ok")
    assert (root / "ws" / name).read_text() == "ok"
    assert await fs.read_file(name, encoding="utf-8") == "ok"


@pytest.mark.parametrize(
    "path", ["in_file", "in_dir/f.txt", "in_abs/f.txt", "real/../real/f.txt", "./real//f.txt", "{ws}/real/f.txt"]
)
async def test_paths_staying_inside_work(root: Path, path: str) -> None:
    fs = LocalFilesystem(root / "ws")
    path = path.format(ws=root / "ws")
    assert await fs.read_file(path) == b"inside SECRET\n"
    assert (await fs.stat(path)).type == "file"
    assert await fs.edit_file(path, "inside", "still inside") == f"Replaced 1 occurrence in {path} (lines 1)"
    assert (root / "ws" / "real" / "f.txt").read_text() == "still inside SECRET\n"
    assert (root / "ws" / "in_file").is_symlink()


async def test_links_inside_are_listed_not_entered(root: Path) -> None:
    fs = LocalFilesystem(root / "ws")
    tree = await fs.list_tree(".", max_depth=3)
    assert "in_dir -> real\n" in tree and "esc_dir -> ../ws_backup\n" in tree
    assert "\tsecret.txt" not in tree
    grep = await fs.grep("SECRET")
    assert grep == "1 match across 1 file\n---\n./real/f.txt:1:8: inside SECRET"
    entries = {e.name: e for e in await fs.readdir(".")}
    assert entries["in_dir"].type == "directory" and entries["in_dir"].is_symlink
    assert entries["esc_dir"].type == "file" and entries["esc_dir"].is_symlink


async def test_delete_of_an_inside_link_removes_the_link(root: Path) -> None:
    fs = LocalFilesystem(root / "ws")
    await fs.delete("in_file")
    assert not (root / "ws" / "in_file").exists() and (root / "ws" / "real" / "f.txt").exists()


async def test_uncontained_reaches_out_but_still_refuses_bad_forms(root: Path) -> None:
    fs = LocalFilesystem(root / "ws", contained=False)
    assert await fs.read_file("../ws2/secret.txt") == SECRET
    assert await fs.read_file(str(root / "ws.bak" / "secret.txt")) == SECRET
    assert await fs.read_file("esc_dir/secret.txt") == SECRET
    for bad in ("x\0y", "//server/share", "\\\\server\\share", "C:\\x"):
        with pytest.raises(PermissionDenied):
            await fs.read_file(bad)


async def test_allowed_paths_are_extra_roots(root: Path) -> None:
    fs = LocalFilesystem(root / "ws", allowed_paths=["../ws2"])
    assert fs.allowed_paths == (str(root / "ws2"),)
    assert await fs.read_file("../ws2/secret.txt") == SECRET
    assert await fs.read_file("esc_file") == SECRET
    assert await fs.read_file(str(root / "ws2" / "secret.txt")) == SECRET
    for outside in ("../ws_backup/secret.txt", "esc_dir/secret.txt", str(root / "ws2") + "x"):
        with pytest.raises(PermissionDenied):
            await fs.read_file(outside)
    assert "following allowed paths: " + str(root / "ws2") in fs.get_instructions()


async def test_directory_swapped_for_link_after_check_is_refused(root: Path) -> None:
    ws = root / "ws"
    (ws / "sub").mkdir()
    (ws / "sub" / "secret.txt").write_text("mine")
    resolver = Resolver(str(ws))
    target = resolver.target("sub/secret.txt")
    (ws / "sub").rename(ws / "gone")
    (ws / "sub").symlink_to("../ws2")
    with pytest.raises(PermissionDenied):
        with resolver.open("sub/secret.txt", target):
            pass


async def test_swap_during_walk_is_seen_at_open(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parent directory turned into a link just before the walk opens it: the walk opens the link, not follows."""
    ws = root / "ws"
    (ws / "sub").mkdir()
    (ws / "sub" / "secret.txt").write_text("mine")
    real_open = os.open
    swapped: list[str] = []

    def racing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "sub" and not swapped:
            (ws / "sub").rename(ws / "gone")
            (ws / "sub").symlink_to("../ws2")
            swapped.append(path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", racing_open)
    fs = LocalFilesystem(ws)
    before = snapshot(root)
    attempts: list[Callable[[], Awaitable[Any]]] = [
        lambda: fs.read_file("sub/secret.txt"),
        lambda: fs.write_file("sub/secret.txt", "pwned"),
    ]
    for attempt in attempts:
        swapped.clear()
        with pytest.raises(PermissionDenied):
            await attempt()
        assert swapped == ["sub"]
        (ws / "sub").unlink()
        (ws / "gone").rename(ws / "sub")
    assert snapshot(root) == before


async def test_file_swapped_for_link_before_open_is_refused(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last component checked as a file, then replaced by a link out before it is opened (O_NOFOLLOW)."""
    ws = root / "ws"
    real_open = os.open
    swapped: list[bool] = []

    def racing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "f.txt" and not swapped:
            (ws / "real" / "f.txt").unlink()
            (ws / "real" / "f.txt").symlink_to(root / "ws2" / "secret.txt")
            swapped.append(True)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", racing_open)
    fs = LocalFilesystem(ws)
    with pytest.raises(PermissionDenied):
        await fs.read_file("real/f.txt")
    assert swapped == [True]
    assert (root / "ws2" / "secret.txt").read_bytes() == SECRET


async def test_walk_never_passes_a_link_to_the_kernel(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every component is opened relative to a directory fd, with O_NOFOLLOW."""
    real_open = os.open
    calls: list[tuple[Any, int, Any]] = []

    def spy(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        calls.append((path, flags, kwargs.get("dir_fd")))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    fs = LocalFilesystem(root / "ws")
    await fs.init()
    assert await fs.read_file("in_dir/f.txt") == b"inside SECRET\n"
    relative = [c for c in calls if not str(c[0]).startswith("/")]
    assert relative and all(c[2] is not None and c[1] & os.O_NOFOLLOW for c in relative)
    assert all("/" not in str(c[0]) for c in relative)
