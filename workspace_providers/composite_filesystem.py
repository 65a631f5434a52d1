"""`CompositeFilesystem`: several filesystems under path prefixes (a workspace's `mounts`), after Mastra's.

Routing: a path goes to the mount whose path is its longest prefix, with the prefix stripped (`/data/a.txt` is
`a.txt` of the `/data` mount); a relative path is taken from `/`. Mount paths may not nest (Mastra refuses it too).
The directories above the mounts (`/`, and `/mnt` for a mount at `/mnt/a`) are virtual: they list the mount points
below them, exist, stat as directories and cannot be written. A path under no mount and above none is refused
with `PermissionDenied` naming the mounts.

Across two mounts, copy reads the source and writes the destination (a directory file by file) and move copies
then deletes the source; within one mount both are the mount's own. A write to a read-only mount is refused here
(Mastra's `PermissionError`) before it reaches the mount. `list_files` and `grep` walk the mounts as one tree,
each mount's root `.gitignore` applying to its own files. A mount's errors name the path as the caller gave it.

What commands in the sandbox see of the mounts is the sandbox's part (`sandbox_mounts`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import posixpath
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any

from keel.workspace_providers.errors import FileNotFound, PermissionDenied, WorkspaceError
from keel.workspace_providers.file_tree import Listing, TreeOptions, format_tree, root_ignore_filter
from keel.workspace_providers.gitignore import IgnoreFilter
from keel.workspace_providers.grep import GrepSource, grep
from keel.workspace_providers.types import FileEntry, FileStat

logger = logging.getLogger(__name__)


def normalize(path: str) -> str:
    """A workspace path as an absolute, normalised one: ``data/x/`` and ``/data/./x`` are ``/data/x``."""
    clean = posixpath.normpath("/" + (path or "/").replace("\\", "/"))
    return "/" + clean.strip("/")


class CompositeFilesystem:
    """Filesystems mounted at paths, seen as one: `mounts` maps each mount path to a filesystem provider.

    Raises:
        WorkspaceError: no mounts, a mount at ``/``, the same path twice, or nested mount paths.
    """

    provider = "composite"
    name = "CompositeFilesystem"

    def __init__(self, mounts: Mapping[str, Any]) -> None:
        if not mounts:
            raise WorkspaceError("CompositeFilesystem requires at least one mount")
        self.mounts: dict[str, Any] = {}
        for prefix, fs in mounts.items():
            clean = normalize(prefix)
            if clean == "/":
                raise WorkspaceError('A mount path cannot be "/"')
            if clean in self.mounts:
                raise WorkspaceError(f"Two mounts at {clean!r}")
            self.mounts[clean] = fs
        for a in self.mounts:
            for b in self.mounts:
                if b.startswith(a + "/"):
                    raise WorkspaceError(f'Nested mount paths are not supported: "{b}" is nested under "{a}"')
        self.id = "composite-" + "-".join(fs.id for fs in self.mounts.values())
        self.read_only = all(getattr(fs, "read_only", False) for fs in self.mounts.values())
        self.status = "pending"

    @property
    def scope(self) -> str:
        return "composite:" + ",".join(f"{p}={getattr(fs, 'scope', fs.id)}" for p, fs in sorted(self.mounts.items()))

    @property
    def mount_paths(self) -> list[str]:
        return list(self.mounts)

    # --- routing -----------------------------------------------------------------------------------------------

    def resolve(self, path: str) -> tuple[str, Any, str] | None:
        """(mount path, filesystem, path inside it: ``.`` for its root) for `path`, or None outside every mount."""
        clean = normalize(path)
        best = max((p for p in self.mounts if clean == p or clean.startswith(p + "/")), key=len, default=None)
        if best is None:
            return None
        return best, self.mounts[best], clean[len(best) :].lstrip("/") or "."

    def route(self, path: str) -> tuple[Any, str]:
        """The mount `path` falls in and the path inside it; outside every mount → `PermissionDenied`."""
        found = self.resolve(path)
        if found is None:
            raise PermissionDenied(path, f"access (no mount contains it; mounts: {', '.join(sorted(self.mounts))})")
        return found[1], found[2]

    def is_virtual(self, path: str) -> bool:
        """Whether `path` is a directory above mount points (``/`` always is)."""
        clean = normalize(path)
        return clean == "/" or any(p.startswith(clean + "/") for p in self.mounts)

    def virtual_entries(self, path: str) -> list[FileEntry]:
        """The entries of a virtual directory: the next component of each mount path below it, as directories."""
        clean = normalize(path)
        base = "" if clean == "/" else clean
        names = {p[len(base) + 1 :].split("/")[0] for p in self.mounts if p.startswith(base + "/")}
        return [FileEntry(name=n, type="directory") for n in sorted(names)]

    def _writable(self, path: str, operation: str) -> None:
        if self.is_virtual(path):
            raise PermissionDenied(path, f"{operation} (a directory of mount points: write inside a mount)")
        if getattr(self.route(path)[0], "read_only", False):
            raise PermissionDenied(path, f"{operation} (filesystem is read-only)")

    async def _on(self, path: str, call: Callable[[Any, str], Any]) -> Any:
        """`call(filesystem, inner path)` on `path`'s mount; its errors name `path`, not the inner path."""
        fs, inner = self.route(path)
        try:
            return await call(fs, inner)
        except WorkspaceError as err:
            raise _renamed(err, inner, path) from None

    # --- lifecycle and description ----------------------------------------------------------------------------

    async def init(self) -> None:
        """Start every mount; one that fails is logged and left to start on first use (an object store down at
        start does not take the local mounts with it), as in Mastra."""
        self.status = "initializing"
        for path, fs in self.mounts.items():
            init = getattr(fs, "init", None)
            if init is None:
                continue
            try:
                await init()
            except Exception as err:
                logger.warning('mount "%s" failed to initialize: %s', path, err)
        self.status = "ready"

    async def destroy(self) -> None:
        errors: list[Exception] = []
        for fs in self.mounts.values():
            destroy = getattr(fs, "destroy", None)
            if destroy is None:
                continue
            try:
                await destroy()
            except Exception as err:
                errors.append(err)
        if errors:
            self.status = "error"
            raise WorkspaceError(f"Some filesystems failed to destroy: {'; '.join(str(e) for e in errors)}")
        self.status = "destroyed"

    def get_info(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "provider": self.provider,
            "status": self.status,
            "metadata": {"mounts": {p: fs.get_info() for p, fs in self.mounts.items()}},
        }

    def get_instructions(self, request_context: Mapping[str, Any] | None = None) -> str:
        lines = [
            f"- {p}: {getattr(fs, 'name', fs.provider)} ({'read-only' if fs.read_only else 'read-write'})"
            for p, fs in self.mounts.items()
        ]
        return "Filesystem mount points (use these path prefixes):\n" + "\n".join(lines)

    # --- reading -----------------------------------------------------------------------------------------------

    async def readdir(
        self, path: str = ".", *, recursive: bool = False, extension: str | None = None
    ) -> list[FileEntry]:
        """A mount's directory, or a virtual one's mount points (with `recursive`, what is below them too)."""
        if not self.is_virtual(path):
            entries: list[FileEntry] = await self._on(
                path, lambda fs, inner: fs.readdir(inner, recursive=recursive, extension=extension)
            )
            return entries
        found: list[FileEntry] = []
        base = normalize(path)
        for entry in self.virtual_entries(path):
            found.append(entry)
            if recursive:
                below = await self.readdir(posixpath.join(base, entry.name), recursive=True, extension=extension)
                found += [FileEntry(f"{entry.name}/{e.name}", e.type, e.size, e.is_symlink) for e in below]
        return found

    async def exists(self, path: str) -> bool:
        if self.is_virtual(path):
            return True
        found = self.resolve(path)
        if found is None:
            return False
        _, fs, inner = found
        return True if inner == "." else bool(await fs.exists(inner))

    async def stat(self, path: str) -> FileStat:
        """A mount's stat (its `path` the composite's); a virtual directory or a mount's root is a directory of
        size 0 (times: now)."""
        clean = normalize(path)
        if self.is_virtual(path) or self.route(path)[1] == ".":
            now = datetime.now(UTC)
            return FileStat(posixpath.basename(clean), clean, "directory", 0, now, now)
        stat: FileStat = await self._on(path, lambda fs, inner: fs.stat(inner))
        return dataclasses.replace(stat, path=clean)

    async def read_file(self, path: str, **options: Any) -> Any:
        return await self._on(path, lambda fs, inner: fs.read_file(inner, **options))

    async def list_tree(
        self,
        path: str = ".",
        *,
        max_depth: int = 2,
        show_hidden: bool = False,
        dirs_only: bool = False,
        exclude: str | None = None,
        extension: str | None = None,
        pattern: str | list[str] | None = None,
        respect_gitignore: bool = True,
    ) -> str:
        """Mastra's list_files text over the mounts as one tree (``/`` shows every mount point)."""
        patterns = [pattern] if isinstance(pattern, str) else pattern or []
        patterns = [p for p in patterns if p.strip()]
        options = TreeOptions(
            max_depth, show_hidden, dirs_only, exclude or None, extension or None, patterns or None, respect_gitignore
        )
        source = _CompositeSource(self, respect_gitignore=respect_gitignore)
        return await self._walk(path, partial(format_tree, source, path, options))

    async def grep(
        self,
        pattern: str,
        *,
        path: str = ".",
        context_lines: int = 0,
        max_count: int | None = None,
        case_sensitive: bool = True,
        include_hidden: bool = False,
    ) -> str:
        """Mastra's grep text over the mounts as one tree; paths in it are the composite's (``/data/a.txt``)."""
        search = partial(
            grep,
            _CompositeSource(self, respect_gitignore=True),
            pattern,
            path=path,
            context_lines=context_lines,
            max_count=max_count,
            case_sensitive=case_sensitive,
            include_hidden=include_hidden,
        )
        return await self._walk(path, search)

    async def _walk(self, path: str, walk: Callable[[], str]) -> str:
        base = path.split("*", 1)[0]
        if not self.is_virtual(base):
            self.route(base)  # outside every mount: refused, not walked around
        for fs in self.mounts.values():
            if getattr(fs, "status", "ready") != "ready" and hasattr(fs, "init"):
                await fs.init()
        return await asyncio.to_thread(walk)

    # --- writing -----------------------------------------------------------------------------------------------

    async def _write(self, operation: str, path: str, call: Callable[[Any, str], Any]) -> Any:
        self._writable(path, operation)
        return await self._on(path, call)

    async def write_file(self, path: str, content: str | bytes, **options: Any) -> None:
        await self._write("writeFile", path, lambda fs, inner: fs.write_file(inner, content, **options))

    async def append_file(self, path: str, content: str | bytes) -> None:
        await self._write("appendFile", path, lambda fs, inner: fs.append_file(inner, content))

    async def edit_file(self, path: str, old_string: str, new_string: str, **options: Any) -> str:
        message: str = await self._write(
            "edit_file", path, lambda fs, inner: fs.edit_file(inner, old_string, new_string, **options)
        )
        return _with_path(message, self.route(path)[1], path)

    async def delete_file(self, path: str, **options: Any) -> None:
        await self._write("deleteFile", path, lambda fs, inner: fs.delete_file(inner, **options))

    async def delete(self, path: str, *, recursive: bool = False) -> None:
        await self._write("delete", path, lambda fs, inner: fs.delete(inner, recursive=recursive))

    async def mkdir(self, path: str, *, recursive: bool = True) -> None:
        if self.is_virtual(path) or self.route(path)[1] == ".":
            return  # a mount point or a directory above them: there already
        await self._write("mkdir", path, lambda fs, inner: fs.mkdir(inner, recursive=recursive))

    async def rmdir(self, path: str, **options: Any) -> None:
        await self._write("rmdir", path, lambda fs, inner: fs.rmdir(inner, **options))

    async def copy_file(self, src: str, dest: str, *, overwrite: bool = True, recursive: bool = False) -> None:
        """Copy within a mount (the mount's own copy) or across two (read, then write; a directory with
        `recursive`, file by file, keeping the files already there unless `overwrite`)."""
        src_fs, src_inner = self.route(src)
        dest_fs, dest_inner = self.route(dest)
        self._writable(dest, "copyFile")
        if src_fs is dest_fs:
            await self._on(
                src, lambda fs, _: fs.copy_file(src_inner, dest_inner, overwrite=overwrite, recursive=recursive)
            )
            return
        directory = (await self.stat(src)).type == "directory"
        for source, target in await self._pairs(src, dest, directory=directory, recursive=recursive):
            if directory and not overwrite and await self.exists(target):
                continue
            data = await self.read_file(source)
            await self._on(target, partial(_write_to, data=data, overwrite=overwrite))

    async def move_file(self, src: str, dest: str, *, overwrite: bool = True) -> None:
        """Move within a mount (the mount's own move) or across two (copy, then delete the source)."""
        src_fs, src_inner = self.route(src)
        dest_fs, dest_inner = self.route(dest)
        self._writable(dest, "moveFile")
        self._writable(src, "moveFile")
        if src_fs is dest_fs:
            await self._on(src, lambda fs, _: fs.move_file(src_inner, dest_inner, overwrite=overwrite))
            return
        await self.copy_file(src, dest, overwrite=overwrite, recursive=True)
        await self.delete(src, recursive=True)

    async def _pairs(self, src: str, dest: str, *, directory: bool, recursive: bool) -> list[tuple[str, str]]:
        """(source file, destination file) for a copy across mounts: one file, or a directory's files."""
        if not directory:
            return [(src, dest)]
        if not recursive:
            raise WorkspaceError(f"copyFile: {src} is a directory (use recursive)", src)
        entries = await self.readdir(src, recursive=True)
        files = [e.name for e in entries if e.type == "file"]
        for empty in [".", *(e.name for e in entries if e.type == "directory")]:
            if not any(f.startswith(f"{empty}/") or empty == "." for f in files):
                await self.mkdir(posixpath.join(normalize(dest), empty))  # files bring their directories along
        return [(posixpath.join(normalize(src), f), posixpath.join(normalize(dest), f)) for f in files]


async def _write_to(fs: Any, inner: str, *, data: bytes, overwrite: bool) -> None:
    await fs.write_file(inner, data, overwrite=overwrite)


def _with_path(message: str, inner: str, outer: str) -> str:
    """A mount's edit message (``Replaced 1 occurrence in a.txt (lines 2)``) naming `outer` for the path."""
    at = message.rfind(f" {inner}")
    return message if at < 0 else message[:at] + f" {outer}" + message[at + len(inner) + 1 :]


def _renamed(err: WorkspaceError, inner: str, outer: str) -> WorkspaceError:
    """`err` with its path (and its message, where it ends with the path) as the caller named it."""
    if err.path is not None and err.path == inner and err.args and isinstance(err.args[0], str):
        text = err.args[0]
        if text.endswith(inner):
            err.args = (text[: len(text) - len(inner)] + outer, *err.args[1:])
        err.path = outer
    return err


class _CompositeSource:
    """The mounts as one synchronous tree for `format_tree` and `grep` (they run in a worker thread): virtual
    directories from the mount paths, everything else from each mount's own source (`tree_source`), filtered by
    that mount's root `.gitignore`."""

    def __init__(self, composite: CompositeFilesystem, *, respect_gitignore: bool) -> None:
        self.composite = composite
        self.respect_gitignore = respect_gitignore
        self._ignores: dict[str, IgnoreFilter | None] = {}

    def _mount(self, path: str) -> tuple[str, GrepSource, str]:
        found = self.composite.resolve(path)
        if found is None:
            self.composite.route(path)  # raises PermissionDenied
            raise FileNotFound(path)
        mount, fs, inner = found
        source = getattr(fs, "tree_source", None)
        if source is None:
            raise WorkspaceError(f"{type(fs).__name__} at {mount} cannot be listed through mounts", path)
        return mount, source, inner

    def _ignored(self, mount: str, source: GrepSource) -> IgnoreFilter | None:
        if mount not in self._ignores:
            self._ignores[mount] = root_ignore_filter(source, ".") if self.respect_gitignore else None
        return self._ignores[mount]

    def scan(self, path: str) -> Listing:
        if self.composite.is_virtual(path):
            return [(e, None) for e in self.composite.virtual_entries(path)]
        mount, source, inner = self._mount(path)
        listing = source.scan(inner)
        ignored = self._ignored(mount, source)
        if ignored is None:
            return listing
        base = "" if inner == "." else inner.strip("/") + "/"
        return [(e, t) for e, t in listing if not ignored(base + e.name + ("/" if e.type == "directory" else ""))]

    def gitignore(self) -> str | None:
        return None  # each mount's own is applied by `scan`

    def kind(self, path: str) -> str:
        if self.composite.is_virtual(path):
            return "directory"
        _, source, inner = self._mount(path)
        return source.kind(inner)

    def read_text(self, path: str) -> str:
        _, source, inner = self._mount(path)
        return source.read_text(inner)
