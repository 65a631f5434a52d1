"""LocalFilesystem against the outputs Mastra printed (replayed call by call), and each method's errors."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from keel.workspace_providers.errors import (
    DirectoryNotEmpty,
    DirectoryNotFound,
    FileExists,
    FileNotFound,
    FilesystemError,
    FilesystemUnavailable,
    IsDirectory,
    NotDirectory,
    StaleFile,
    WorkspaceReadOnly,
)
from keel.workspace_providers.local_filesystem import LocalFilesystem
from keel.workspace_providers.types import FileEntry


@pytest.fixture
async def fs(tmp_path: Path) -> AsyncIterator[LocalFilesystem]:
    """A fresh workspace with ``dir/a.txt``, as the reference run starts."""
    fs = LocalFilesystem(tmp_path / "ws")
    await fs.init()
    await fs.write_file("dir/a.txt", "alpha\nbeta\ngamma\n")
    yield fs
    await fs.destroy()


HELLO = "Hello\nworld\nhello again\n"

# (method, args, kwargs, Mastra's output) in the order of the reference's "# tool calls"; None: no text compared.
REFERENCE: list[tuple[str, tuple[Any, ...], dict[str, Any], str | None]] = [
    ("write_file", ("notes/hello.txt", HELLO), {}, None),
    ("grep", ("hello",), {"path": "."}, "1 match across 1 file\n---\n./notes/hello.txt:3:1: hello again"),
    (
        "grep",
        ("hello",),
        {"path": ".", "case_sensitive": False, "context_lines": 1},
        "2 matches across 1 file\n---\n./notes/hello.txt:1:1: Hello\n./notes/hello.txt:2- world\n"
        "./notes/hello.txt:3:1: hello again\n./notes/hello.txt:4- ",
    ),
    (
        "grep",
        ("hello",),
        {"path": ".", "include_hidden": True, "max_count": 1},
        "1 match across 1 file\n---\n./notes/hello.txt:3:1: hello again",
    ),
    ("write_file", ("notes/hello.txt", "overwrite without flag\n"), {}, None),
    ("write_file", ("notes/hello.txt", HELLO), {"overwrite": True}, None),
    ("edit_file", ("notes/hello.txt", "world", "WORLD"), {}, "Replaced 1 occurrence in notes/hello.txt (lines 2)"),
    (
        "edit_file",
        ("notes/hello.txt", "ello", "i"),
        {},
        "The specified text appears 2 times. Provide more surrounding context to make the match unique, or use "
        "replace_all to replace all occurrences.",
    ),
    (
        "edit_file",
        ("notes/hello.txt", "ello", "i"),
        {"replace_all": True},
        "Replaced 2 occurrences in notes/hello.txt (lines 1, 3)",
    ),
    (
        "edit_file",
        ("notes/hello.txt", "not-there", "x"),
        {},
        "The specified text was not found. Make sure you use the exact text from the file.",
    ),
    ("mkdir", ("src/pkg",), {}, None),
    ("write_file", ("src/pkg/mod.py", "def f():\n    return 42\n"), {}, None),
    ("write_file", (".hidden/x.txt", "hidden hello\n"), {}, None),
    (
        "list_tree",
        (".",),
        {},
        ".\ndir\n\ta.txt\nnotes\n\thello.txt\nsrc\n\tpkg\n\n4 directories, 2 files (truncated at depth 2)",
    ),
    ("list_tree", (".",), {"max_depth": 1}, ".\ndir\nnotes\nsrc\n\n3 directories, 0 files (truncated at depth 1)"),
    (
        "list_tree",
        (".",),
        {"show_hidden": True},
        ".\n.hidden\n\tx.txt\ndir\n\ta.txt\nnotes\n\thello.txt\nsrc\n\tpkg\n\n"
        "5 directories, 3 files (truncated at depth 2)",
    ),
    (
        "list_tree",
        (".",),
        {"pattern": "**/*.py"},
        ".\ndir\nnotes\nsrc\n\tpkg\n\n4 directories, 0 files (truncated at depth 2)",
    ),
    (
        "list_tree",
        (".",),
        {"pattern": "**/*.py", "max_depth": 5},
        ".\ndir\nnotes\nsrc\n\tpkg\n\t\tmod.py\n\n4 directories, 1 file",
    ),
    (
        "grep",
        ("hi",),
        {"path": ".", "case_sensitive": False},
        "2 matches across 1 file\n---\n./notes/hello.txt:1:1: Hi\n./notes/hello.txt:3:1: hi again",
    ),
    ("grep", ("return \\d+",), {"path": "src"}, "1 match across 1 file\n---\nsrc/pkg/mod.py:2:5:     return 42"),
    ("grep", ("zzz-no-match",), {"path": "."}, "0 matches across 0 files\n---"),
    ("delete", ("src/pkg/mod.py",), {}, None),
    ("write_file", ("agent/a.txt", "one\ntwo\n"), {}, None),
    ("edit_file", ("agent/a.txt", "two", "TWO"), {}, "Replaced 1 occurrence in agent/a.txt (lines 2)"),
    ("list_tree", ("agent",), {}, ".\na.txt\n\n0 directories, 1 file"),
    ("grep", ("TWO",), {"path": "agent"}, "1 match across 1 file\n---\nagent/a.txt:2:1: TWO"),
]


async def test_replays_the_reference_outputs(fs: LocalFilesystem) -> None:
    for method, args, kwargs, expected in REFERENCE:
        result = await getattr(fs, method)(*args, **kwargs)
        if expected is not None:
            assert result == expected, (method, args, kwargs)


async def test_reference_direct_api(fs: LocalFilesystem) -> None:
    info = fs.get_info()
    assert info == {
        "id": fs.id,
        "name": "LocalFilesystem",
        "provider": "local",
        "status": "ready",
        "metadata": {"basePath": fs.base_path, "contained": True},
    }
    assert fs.id.startswith("local-fs-") and fs.scope == f"local:{fs.base_path}"
    assert await fs.read_file("dir/a.txt", encoding="utf-8") == "alpha\nbeta\ngamma\n"
    assert await fs.read_file("dir/a.txt") == b"alpha\nbeta\ngamma\n"
    assert await fs.exists("dir/a.txt") and not await fs.exists("nope") and not await fs.exists("dir/a.txt/x")
    st = await fs.stat("dir/a.txt")
    assert (st.name, st.type, st.size, st.mime_type, st.path) == ("a.txt", "file", 17, "text/plain", "dir/a.txt")
    assert (await fs.stat("./dir/")).type == "directory" and (await fs.stat("./dir/")).mime_type is None
    assert await fs.readdir("dir") == [FileEntry("a.txt", "file", 17)]
    assert await fs.readdir(".") == [FileEntry("dir", "directory")]
    with pytest.raises(FileNotFound, match=r"^File not found: missing\.txt$"):
        await fs.read_file("missing.txt")
    with pytest.raises(FileExists, match=r"^File already exists: dir/a\.txt$"):
        await fs.write_file("dir/a.txt", "x", overwrite=False)
    with pytest.raises(FileNotFound, match=r"^File not found: src/pkg/mod\.py$"):
        await fs.delete("src/pkg/mod.py")


async def test_read_encodings(fs: LocalFilesystem) -> None:
    await fs.write_file("b.bin", b"\x00\xffA")
    assert await fs.read_file("b.bin", encoding="base64") == "AP9B"
    assert await fs.read_file("b.bin", encoding="hex") == "00ff41"
    assert await fs.read_file("b.bin", encoding="binary") == "\x00\xffA"
    assert await fs.read_file("b.bin", encoding="utf8") == "\x00\ufffdA"
    with pytest.raises(ValueError):
        await fs.read_file("b.bin", encoding="utf-16")


async def test_lifecycle_and_instructions(tmp_path: Path) -> None:
    fs = LocalFilesystem(tmp_path / "new" / "ws", id="mine", instructions=lambda ctx: f"custom {ctx}")
    assert fs.status == "pending" and fs.id == "mine"
    assert fs.get_instructions({"a": 1}) == "custom {'a': 1}"
    await fs.write_file("x.txt", "x")
    assert fs.status == "ready"
    await fs.destroy()
    assert fs.status == "destroyed" and (tmp_path / "new" / "ws" / "x.txt").exists()
    base = str(tmp_path / "ws")
    assert LocalFilesystem(base).get_instructions() == (
        f'Local filesystem at "{base}". Relative paths resolve from this directory. '
        "File access is restricted to this directory."
    )
    assert (
        LocalFilesystem(base, contained=False)
        .get_instructions()
        .endswith("Containment is disabled, so any path on the host filesystem is accessible.")
    )
    assert LocalFilesystem(base, instructions="").get_instructions() == ""


async def test_errors(fs: LocalFilesystem) -> None:
    base = Path(fs.base_path)
    cases: list[tuple[Any, type[Exception], str]] = [
        (fs.read_file("dir"), IsDirectory, "Path is a directory: dir"),
        (fs.read_file("dir/a.txt/x"), FileNotFound, "File not found: dir/a.txt/x"),
        (fs.readdir("dir/a.txt"), NotDirectory, "Path is not a directory: dir/a.txt"),
        (fs.readdir("nope"), DirectoryNotFound, "Directory not found: nope"),
        (fs.list_tree("nope"), DirectoryNotFound, "Directory not found: nope"),
        (fs.write_file("new/b.txt", "x", recursive=False), DirectoryNotFound, "Directory not found: new"),
        (fs.write_file("dir/a.txt/b", "x"), NotDirectory, "Path is not a directory: dir/a.txt"),
        (fs.write_file("dir", "x"), IsDirectory, "Path is a directory: dir"),
        (fs.append_file("dir", "x"), IsDirectory, "Path is a directory: dir"),
        (fs.delete_file("dir"), IsDirectory, "Path is a directory: dir"),
        (fs.delete_file("nope"), FileNotFound, "File not found: nope"),
        (fs.rmdir("dir"), DirectoryNotEmpty, "Directory not empty: dir"),
        (fs.rmdir("dir/a.txt"), NotDirectory, "Path is not a directory: dir/a.txt"),
        (fs.rmdir("nope"), DirectoryNotFound, "Directory not found: nope"),
        (fs.delete("dir"), DirectoryNotEmpty, "Directory not empty: dir"),
        (fs.mkdir("dir/a.txt"), FileExists, "File already exists: dir/a.txt"),
        (fs.mkdir("x/y", recursive=False), DirectoryNotFound, "Directory not found: x"),
        (fs.edit_file("nope.txt", "a", "b"), FileNotFound, "File not found: nope.txt"),
        (fs.stat("nope"), FileNotFound, "File not found: nope"),
        (fs.copy_file("nope", "x"), FileNotFound, "File not found: nope"),
        (fs.copy_file("dir", "x"), IsDirectory, "Path is a directory: dir"),
        (fs.copy_file("dir/a.txt", "dir", overwrite=True), IsDirectory, "Path is a directory: dir"),
        (fs.copy_file("dir", "dir/inner", recursive=True), FilesystemError, "Cannot copy a directory into itself"),
        (fs.move_file("nope", "x"), FileNotFound, "File not found: nope"),
    ]
    for call, error, message in cases:
        with pytest.raises(error) as caught:
            await call
        assert str(caught.value).startswith(message), message
    await fs.delete_file("nope", force=True)
    await fs.rmdir("nope", force=True)
    await fs.mkdir("dir")
    assert sorted(os.listdir(base)) == ["dir"] and os.listdir(base / "dir") == ["a.txt"]


async def test_edit_binary_file(fs: LocalFilesystem) -> None:
    await fs.write_file("img.png", b"\x89PNG\x00\x01")
    assert await fs.edit_file("img.png", "PNG", "x") == "Cannot edit binary files. Use the write file tool instead."
    assert await fs.read_file("img.png") == b"\x89PNG\x00\x01"
    assert await fs.edit_file("dir/a.txt", "", "x") == (
        "The specified text was not found. Make sure you use the exact text from the file."
    )
    assert await fs.edit_file("dir/a.txt", "beta\n", "b\nc\nd\n") == "Replaced 1 occurrence in dir/a.txt (lines 2-5)"


async def test_atomic_write(fs: LocalFilesystem, monkeypatch: pytest.MonkeyPatch) -> None:
    target = Path(fs.base_path) / "dir" / "a.txt"
    target.chmod(0o640)
    await fs.write_file("dir/a.txt", "new\n")
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o640

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(FilesystemError, match=r"Input/output error: dir/a\.txt"):
        await fs.write_file("dir/a.txt", "half")
    with pytest.raises(FilesystemError):
        await fs.edit_file("dir/a.txt", "new", "half")
    assert target.read_text() == "new\n"
    assert os.listdir(target.parent) == ["a.txt"]


async def test_a_full_disk_is_an_outage_to_wait_out_not_a_failure_of_the_call(
    fs: LocalFilesystem, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = Path(fs.base_path) / "dir" / "a.txt"

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(FilesystemUnavailable, match=r"No space left on device: dir/a\.txt"):
        await fs.write_file("dir/a.txt", "more than fits")
    with pytest.raises(FilesystemUnavailable):
        await fs.edit_file("dir/a.txt", "alpha", "omega")
    assert target.read_text() == "alpha\nbeta\ngamma\n"
    assert os.listdir(target.parent) == ["a.txt"]  # no temporary file left


async def test_expected_mtime(fs: LocalFilesystem) -> None:
    seen = (await fs.stat("dir/a.txt")).modified_at
    await fs.write_file("dir/a.txt", "v2", expected_mtime=seen)
    now = (await fs.stat("dir/a.txt")).modified_at
    past = now - timedelta(seconds=5)
    os.utime(Path(fs.base_path) / "dir" / "a.txt", (past.timestamp(), past.timestamp()))
    with pytest.raises(StaleFile) as caught:
        await fs.write_file("dir/a.txt", "v3", expected_mtime=now)
    expected, actual = now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3], past.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    assert str(caught.value) == (
        f"File was modified externally: dir/a.txt (expected mtime {expected}Z, actual {actual}Z)"
    )
    with pytest.raises(StaleFile):
        await fs.edit_file("dir/a.txt", "v2", "v3", expected_mtime=now)
    assert await fs.read_file("dir/a.txt") == b"v2"
    await fs.write_file("fresh.txt", "ok", expected_mtime=now)


async def test_read_only(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("a")
    fs = LocalFilesystem(tmp_path / "ws", read_only=True)
    assert fs.get_info()["metadata"] == {"basePath": fs.base_path, "contained": True, "readOnly": True}
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
        with pytest.raises(WorkspaceReadOnly) as caught:
            await call
        assert str(caught.value) == f"Workspace is in read-only mode. Cannot perform: {operation}"
    assert await fs.read_file("a.txt") == b"a" and os.listdir(tmp_path / "ws") == ["a.txt"]


async def test_copy_move_append(fs: LocalFilesystem) -> None:
    base = Path(fs.base_path)
    await fs.copy_file("dir/a.txt", "copy/deep/a.txt")
    assert (base / "copy" / "deep" / "a.txt").read_text() == "alpha\nbeta\ngamma\n"
    with pytest.raises(FileExists):
        await fs.copy_file("dir/a.txt", "copy/deep/a.txt", overwrite=False)
    await fs.write_file("dir/sub/b.txt", "b")
    await fs.write_file("tree/a.txt", "keep")
    await fs.copy_file("dir", "tree", recursive=True, overwrite=False)
    assert (base / "tree" / "a.txt").read_text() == "keep" and (base / "tree" / "sub" / "b.txt").read_text() == "b"
    await fs.move_file("tree/sub/b.txt", "moved/b.txt")
    assert (base / "moved" / "b.txt").read_text() == "b" and not (base / "tree" / "sub" / "b.txt").exists()
    with pytest.raises(FileExists):
        await fs.move_file("dir/a.txt", "tree/a.txt", overwrite=False)
    with pytest.raises(FileExists):
        await fs.move_file("dir", "tree", overwrite=False)
    await fs.move_file("dir/a.txt", "tree/a.txt")
    assert (base / "tree" / "a.txt").read_text() == "alpha\nbeta\ngamma\n"
    await fs.move_file("tree", "renamed", overwrite=False)
    assert (base / "renamed" / "sub").is_dir()
    await fs.append_file("log/out.log", "one\n")
    await fs.append_file("log/out.log", b"two\n")
    assert (base / "log" / "out.log").read_text() == "one\ntwo\n"
    await fs.delete("renamed", recursive=True)
    assert not (base / "renamed").exists()


async def test_gitignore(fs: LocalFilesystem) -> None:
    await fs.write_file(".gitignore", "build/\n*.log\n!keep.log\n# comment\n/top.txt\n")
    for name in ("build/out.txt", "a.log", "keep.log", "top.txt", "dir/top.txt", "dir/b.log"):
        await fs.write_file(name, "needle\n")
    assert await fs.list_tree(".") == (".\ndir\n\ta.txt\n\ttop.txt\nkeep.log\n\n1 directory, 3 files")
    unfiltered = await fs.list_tree(".", respect_gitignore=False)
    assert "build\n\tout.txt" in unfiltered and "a.log" in unfiltered
    assert await fs.list_tree("build") == ".\nout.txt\n\n0 directories, 1 file"
    assert await fs.grep("needle") == "2 matches across 2 files\n---\n./dir/top.txt:1:1: needle\n./keep.log:1:1: needle"
    assert await fs.grep("needle", path="build") == "1 match across 1 file\n---\nbuild/out.txt:1:1: needle"


async def test_readdir_and_tree_options(fs: LocalFilesystem) -> None:
    for name in ("src/a.ts", "src/b.py", "src/node_modules/x.ts", "src/deep/c.ts", ".env"):
        await fs.write_file(name, "TODO\n")
    names = [e.name for e in await fs.readdir(".", recursive=True)]
    assert names == [
        ".env",
        "dir",
        "dir/a.txt",
        "src",
        "src/a.ts",
        "src/b.py",
        "src/deep",
        "src/deep/c.ts",
        "src/node_modules",
        "src/node_modules/x.ts",
    ]
    assert [e.name for e in await fs.readdir("src", extension=".ts")] == ["a.ts", "deep", "node_modules"]
    assert await fs.list_tree("src", exclude="node_modules|deep") == ".\na.ts\nb.py\n\n0 directories, 2 files"
    assert (
        await fs.list_tree(".", dirs_only=True, max_depth=5)
        == ".\ndir\nsrc\n\tdeep\n\tnode_modules\n\n4 directories, 0 files"
    )
    assert await fs.list_tree("src", extension="py", max_depth=1) == (
        ".\ndeep\nnode_modules\nb.py\n\n2 directories, 1 file (truncated at depth 1)"
    )
    assert (
        await fs.list_tree(".", pattern=["", " "], max_depth=0) == ".\n\n0 directories, 0 files (truncated at depth 0)"
    )
    (Path(fs.base_path) / "link").symlink_to("src")
    assert "link -> src\n" in await fs.list_tree(".", max_depth=1)


async def test_grep_details(fs: LocalFilesystem) -> None:
    long = "x" * 600 + "needle"
    await fs.write_file("g/one.txt", "needle 1\na\nb\nc\nd\nneedle 2\n" + long + "\n")
    await fs.write_file("g/data.bin", "needle\n")
    assert await fs.grep("a" * 1001) == "Error: Pattern too long (1001 chars, max 1000). Use a shorter pattern."
    assert (await fs.grep("(")).startswith("Error: Invalid regex pattern: Invalid regular expression: /(/g: ")
    assert await fs.grep("needle", path="g/one.txt", context_lines=1) == (
        "3 matches across 1 file\n---\ng/one.txt:1:1: needle 1\ng/one.txt:2- a\n--\ng/one.txt:5- d\n"
        f"g/one.txt:6:1: needle 2\ng/one.txt:7:601: {'x' * 500}...\ng/one.txt:8- "
    )
    assert await fs.grep("needle", path="g/data.bin") == (
        "0 matches across 0 files (1 file skipped: unsupported extension)\n---"
    )
    assert (
        await fs.grep("needle", path="nowhere")
        == "0 matches across 0 files (target path not found: nothing searched)\n---"
    )
    assert await fs.grep("(?<n>needle) (\\d)\\k<n>?", path="g/**/*.txt") == (
        "2 matches across 1 file\n---\ng/one.txt:1:1: needle 1\ng/one.txt:6:1: needle 2"
    )
    assert await fs.grep("[[a]", path="dir") == (
        "3 matches across 1 file\n---\ndir/a.txt:1:1: alpha\ndir/a.txt:2:4: beta\ndir/a.txt:3:2: gamma"
    )
    await fs.write_file("many.txt", "hit\n" * 1200)
    assert (await fs.grep("hit")).startswith("1000 matches across 1 file (truncated at 1000)\n---\n./many.txt:1:1: hit")


async def test_a_catastrophic_pattern_stops_the_search_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from keel.workspace_providers import grep as grep_module

    monkeypatch.setattr(grep_module, "SEARCH_SECONDS", 0.3)
    (tmp_path / "a.txt").write_text("a" * 30000 + "!\n")
    out = await LocalFilesystem(tmp_path).grep(r"(a|aa)+$", path=".")
    assert out == "0 matches across 0 files (search stopped after 0.3 s: simplify the pattern)\n---"


async def test_a_file_over_the_read_limit_is_refused_not_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from keel.workspace_providers import local_filesystem

    monkeypatch.setattr(local_filesystem, "MAX_READ_BYTES", 1000)
    (tmp_path / "big.log").write_text("x" * 1001)
    with pytest.raises(FilesystemError, match=r"File too large to read \(1001 bytes, at most 1000\): big.log"):
        await LocalFilesystem(tmp_path).read_file("big.log")


async def test_a_directory_is_not_copied_into_itself_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f.txt").write_text("x")
    (tmp_path / "link").symlink_to("src")
    fs = LocalFilesystem(tmp_path)
    with pytest.raises(FilesystemError, match="Cannot copy a directory into itself"):
        await fs.copy_file("src", "link/sub", recursive=True)
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == ["f.txt"]
