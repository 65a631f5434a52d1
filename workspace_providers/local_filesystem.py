"""Mastra's `LocalFilesystem`: a workspace filesystem in a folder on the local disk.

Every path goes through `paths.Resolver` (containment, symlinks, no check-then-use race) and every disk call runs
in a worker thread. Writes are atomic: a temporary file in the same directory, fsynced, then renamed over.
"""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath
import random
import secrets
import shutil
import stat as st
import string
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from keel.workspace_providers import file_content
from keel.workspace_providers.errors import (
    DirectoryNotEmpty,
    DirectoryNotFound,
    FileExists,
    FileNotFound,
    FilesystemError,
    FilesystemUnavailable,
    IsDirectory,
    NotDirectory,
    PermissionDenied,
    StaleFile,
    WorkspaceError,
    WorkspaceReadOnly,
)
from keel.workspace_providers.file_tree import Listing, TreeOptions, format_tree
from keel.workspace_providers.grep import grep
from keel.workspace_providers.paths import Location, Resolver, expand_tilde
from keel.workspace_providers.types import FileEntry, FileStat

T = TypeVar("T")
Instructions = str | Callable[[Mapping[str, Any] | None], str]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MIME = dict(
    pair.split("=")
    for pair in (
        "txt=text/plain html=text/html htm=text/html css=text/css csv=text/csv md=text/markdown "
        "js=application/javascript mjs=application/javascript ts=application/typescript "
        "tsx=application/typescript jsx=application/javascript json=application/json xml=application/xml "
        "yaml=text/yaml yml=text/yaml py=text/x-python rb=text/x-ruby go=text/x-go rs=text/x-rust "
        "java=text/x-java c=text/x-c cpp=text/x-c++ h=text/x-c hpp=text/x-c++ sh=text/x-sh bash=text/x-sh "
        "zsh=text/x-sh toml=text/toml ini=text/plain env=text/plain sql=text/x-sql graphql=application/graphql "
        "gql=application/graphql vue=text/x-vue svelte=text/x-svelte scss=text/x-scss sass=text/x-sass "
        "less=text/x-less php=application/x-php swift=text/x-swift kt=text/x-kotlin kts=text/x-kotlin "
        "dart=application/dart lua=text/x-lua r=text/x-r tf=text/x-terraform tfvars=text/x-terraform "
        "mdx=text/markdown sas=text/plain log=text/plain jsonl=application/jsonl png=image/png jpg=image/jpeg "
        "jpeg=image/jpeg gif=image/gif svg=image/svg+xml webp=image/webp ico=image/x-icon bmp=image/bmp "
        "tiff=image/tiff tif=image/tiff heic=image/heic heif=image/heif avif=image/avif pdf=application/pdf "
        "mp3=audio/mpeg wav=audio/wav ogg=audio/ogg flac=audio/flac m4a=audio/mp4 aac=audio/aac mp4=video/mp4 "
        "webm=video/webm mov=video/quicktime avi=video/x-msvideo mkv=video/x-matroska zip=application/zip "
        "tar=application/x-tar gz=application/gzip tgz=application/gzip bz2=application/x-bzip2 "
        "7z=application/x-7z-compressed rar=application/vnd.rar "
        "exe=application/vnd.microsoft.portable-executable dll=application/vnd.microsoft.portable-executable "
        "so=application/x-sharedlib dylib=application/x-sharedlib bin=application/x-binary "
        "dat=application/x-binary dmg=application/x-apple-diskimage iso=application/x-iso9660-image "
        "deb=application/vnd.debian.binary-package rpm=application/x-rpm doc=application/msword "
        "docx=application/vnd.openxmlformats-officedocument.wordprocessingml.document "
        "xls=application/vnd.ms-excel xlsx=application/vnd.openxmlformats-officedocument.spreadsheetml.sheet "
        "ppt=application/vnd.ms-powerpoint "
        "pptx=application/vnd.openxmlformats-officedocument.presentationml.presentation ttf=font/ttf otf=font/otf "
        "woff=font/woff woff2=font/woff2 wasm=application/wasm class=application/java-vm "
        "pyc=application/x-python-code"
    ).split()
)


def mime_type(name: str) -> str:
    """The MIME type Mastra gives a file name (by extension; ``application/octet-stream`` otherwise)."""
    stem = posixpath.basename(name)
    dot = stem.rfind(".")
    return _MIME.get(stem[dot + 1 :].lower(), "application/octet-stream") if dot > 0 else "application/octet-stream"


def _dirname(path: str) -> str:
    return posixpath.dirname(path.rstrip("/")) or "."


def _from_ns(ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ns // 1000)


def _ms(moment: datetime) -> int:
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
    return (aware - _EPOCH) // timedelta(milliseconds=1)


def _base36(n: int) -> str:
    digits = string.digits + string.ascii_lowercase
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out or "0"


def _stat(loc: Location) -> os.stat_result:
    """The entry at a followed `loc`; a symlink there was swapped in after the walk: `ELOOP` walks again."""
    info = os.stat(loc.name, dir_fd=loc.dir_fd, follow_symlinks=False)
    if st.S_ISLNK(info.st_mode):
        raise OSError(errno.ELOOP, "symlink appeared", loc.name)
    return info


def _stat_or_none(loc: Location) -> os.stat_result | None:
    try:
        return _stat(loc)
    except FileNotFoundError:
        return None


def _open(loc: Location, flags: int, mode: int = 0o666) -> int:
    try:
        return os.open(loc.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=loc.dir_fd)
    except NotADirectoryError:
        _stat(loc)
        raise


MAX_READ_BYTES = 64 * 1024 * 1024
"""Reading (and grepping, editing, copying) a larger file is refused: the worker holds a file whole to read it."""


def _read(loc: Location) -> bytes:
    fd = _open(loc, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if st.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if not st.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "Not a regular file")
        if info.st_size > MAX_READ_BYTES:
            raise OSError(errno.EFBIG, f"File too large to read ({info.st_size} bytes, at most {MAX_READ_BYTES})")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _replace(loc: Location, data: bytes, *, mode: int | None, overwrite: bool) -> None:
    """Write `data` to a temporary file beside `loc`, fsync, and rename it over (or link it, when not
    `overwrite`, which fails if the name exists). Nothing is left behind on failure."""
    temp = f".keel-{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=loc.dir_fd)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, st.S_IMODE(mode))
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            os.rename(temp, loc.name, src_dir_fd=loc.dir_fd, dst_dir_fd=loc.dir_fd)
        else:
            os.link(temp, loc.name, src_dir_fd=loc.dir_fd, dst_dir_fd=loc.dir_fd)
    finally:
        with suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=loc.dir_fd)


class _Disk:
    """The synchronous operations, on caller paths; raises the workspace's errors. Runs in worker threads."""

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver

    def run(
        self,
        path: str,
        op: Callable[[Location], T],
        *,
        follow: bool = True,
        create: bool = False,
        errors: Mapping[int, Callable[[], WorkspaceError]] | None = None,
    ) -> T:
        """`op` at `path`, an `OSError` turned into the workspace error `errors` (by errno) or a default gives."""
        try:
            return self.resolver.run(path, op, follow=follow, create=create)
        except OSError as err:
            raise _error(err, path, errors or {}) from None

    def read(self, path: str) -> bytes:
        return self.run(path, _read)

    def kind(self, path: str, *, follow: bool = True) -> str:
        """``"directory"`` or ``"file"`` (a symlink not followed is a file)."""

        def op(loc: Location) -> os.stat_result:
            return os.stat(loc.name, dir_fd=loc.dir_fd, follow_symlinks=False) if not follow else _stat(loc)

        return "directory" if st.S_ISDIR(self.run(path, op, follow=follow).st_mode) else "file"

    def mkdir(self, path: str, *, recursive: bool) -> None:
        def op(loc: Location) -> None:
            try:
                os.mkdir(loc.name, dir_fd=loc.dir_fd)
            except FileExistsError:
                if not st.S_ISDIR(_stat(loc).st_mode):
                    raise FileExists(path) from None

        parent = _dirname(path)
        errors = {errno.ENOENT: lambda: DirectoryNotFound(parent), errno.ENOTDIR: lambda: NotDirectory(parent)}
        self.run(path, op, create=recursive, errors=errors)

    def read_text(self, path: str) -> str:
        return self.read(path).decode("utf-8", "replace")

    def gitignore(self) -> str | None:
        try:
            return self.read_text(".gitignore")
        except FileNotFound:
            return None

    def scan(self, path: str) -> Listing:
        def op(loc: Location) -> Listing:
            fd = _open(loc, os.O_RDONLY | os.O_DIRECTORY)
            try:
                with os.scandir(fd) as found:
                    entries = sorted(found, key=lambda e: e.name)
                return [self._entry(path, fd, e) for e in entries]
            finally:
                os.close(fd)

        return self.run(
            path, op, errors={errno.ENOENT: lambda: DirectoryNotFound(path), errno.ENOTDIR: lambda: NotDirectory(path)}
        )

    def _entry(self, parent: str, fd: int, entry: os.DirEntry[str]) -> tuple[FileEntry, str | None]:
        if entry.is_symlink():
            try:
                kind = self.kind(posixpath.join(parent, entry.name))
            except WorkspaceError:
                kind = "file"
            return FileEntry(entry.name, "directory" if kind == "directory" else "file", None, True), os.readlink(
                entry.name, dir_fd=fd
            )
        if entry.is_dir(follow_symlinks=False):
            return FileEntry(entry.name, "directory"), None
        return FileEntry(entry.name, "file", entry.stat(follow_symlinks=False).st_size), None


def _error(err: OSError, path: str, errors: Mapping[int, Callable[[], WorkspaceError]]) -> WorkspaceError:
    code = err.errno or 0
    if code in errors:
        return errors[code]()
    if code in (errno.ENOENT, errno.ENOTDIR):
        return FileNotFound(path)
    if code == errno.EEXIST:
        return FileExists(path)
    if code == errno.EISDIR:
        return IsDirectory(path)
    if code == errno.ENOTEMPTY:
        return DirectoryNotEmpty(path)
    if code in (errno.EACCES, errno.EPERM):
        return PermissionDenied(path, "access")
    if code in (errno.ENOSPC, errno.EDQUOT):  # a full disk or quota: space may come back, as a store comes up
        return FilesystemUnavailable(f"{err.strerror}: {path}", path)
    return FilesystemError(f"{err.strerror}: {path}", path)


class LocalFilesystem:
    """A workspace filesystem backed by the folder `base_path`, named and behaving as Mastra's."""

    provider = "local"
    name = "LocalFilesystem"

    def __init__(
        self,
        base_path: str | os.PathLike[str],
        *,
        contained: bool = True,
        read_only: bool = False,
        allowed_paths: Sequence[str | os.PathLike[str]] = (),
        id: str | None = None,
        instructions: Instructions | None = None,
    ) -> None:
        rand = "".join(random.choices(string.digits + string.ascii_lowercase, k=6))
        self.id = id or f"local-fs-{_base36(int(time.time() * 1000))}-{rand}"
        self.base_path = os.path.abspath(expand_tilde(os.fspath(base_path)))
        self.contained, self.read_only = contained, read_only
        self.allowed_paths = tuple(
            os.path.normpath(os.path.join(self.base_path, expand_tilde(os.fspath(p)))) for p in allowed_paths
        )
        self.status = "pending"
        self._instructions = instructions
        self._disk = _Disk(Resolver(self.base_path, self.allowed_paths, contained=contained))

    @property
    def scope(self) -> str:
        """Identifies this filesystem for a read tracker."""
        return f"local:{self.base_path}"

    @property
    def tree_source(self) -> _Disk:
        """The synchronous view `list_files` and `grep` walk (`scan`, `kind`, `read_text`, `gitignore`): how a
        `CompositeFilesystem` walks this filesystem as one of its mounts."""
        return self._disk

    def get_mount_config(self) -> dict[str, Any]:
        """What a sandbox needs to show this filesystem to commands (Mastra's `getMountConfig()`)."""
        return {"type": "local", "basePath": self.base_path}

    async def init(self) -> None:
        """Create the base directory; status becomes ``ready``."""
        try:
            await asyncio.to_thread(os.makedirs, self.base_path, exist_ok=True)
        except BaseException:
            self.status = "error"
            raise
        self.status = "ready"

    async def destroy(self) -> None:
        """Status becomes ``destroyed``; the files stay."""
        self.status = "destroyed"

    def get_info(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"basePath": self.base_path, "contained": self.contained}
        if self.allowed_paths:
            metadata["allowedPaths"] = list(self.allowed_paths)
        if self.read_only:
            metadata["readOnly"] = True
        return {
            "id": self.id,
            "name": self.name,
            "provider": self.provider,
            "status": self.status,
            "metadata": metadata,
        }

    def get_instructions(self, request_context: Mapping[str, Any] | None = None) -> str:
        """The override when given (a callable gets `request_context`), else Mastra's default text."""
        if isinstance(self._instructions, str):
            return self._instructions
        if self._instructions is not None:
            return self._instructions(request_context)
        parts = [f'Local filesystem at "{self.base_path}". Relative paths resolve from this directory.']
        if not self.contained:
            parts.append("Containment is disabled, so any path on the host filesystem is accessible.")
        elif self.allowed_paths:
            parts.append(
                "File access is restricted to this directory and the following allowed paths: "
                f"{', '.join(self.allowed_paths)}."
            )
        else:
            parts.append("File access is restricted to this directory.")
        return " ".join(parts)

    async def _call(self, fn: Callable[[], T]) -> T:
        if self.status != "ready":
            await self.init()
        return await asyncio.to_thread(fn)

    def _writable(self, operation: str, path: str) -> None:
        if self.read_only:
            raise WorkspaceReadOnly(operation, path)

    # --- reading -----------------------------------------------------------------------------------------------

    async def read_file(self, path: str, *, encoding: str | None = None) -> bytes | str:
        """The file's bytes, or with `encoding` (utf-8, utf8, base64, hex, binary, latin1) a string."""
        return file_content.decode(await self._call(partial(self._disk.read, path)), encoding)

    async def exists(self, path: str) -> bool:
        """Whether something is there; `PermissionDenied` for a path outside the workspace, as Mastra."""

        def op(loc: Location) -> bool:
            return _stat_or_none(loc) is not None

        try:
            return await self._call(partial(self._disk.run, path, op))
        except FileNotFound:
            return False

    async def stat(self, path: str) -> FileStat:
        absolute = posixpath.normpath(posixpath.join(self.base_path, expand_tilde(path)))

        def op(loc: Location) -> FileStat:
            info = _stat(loc)
            is_dir = st.S_ISDIR(info.st_mode)
            name = posixpath.basename(absolute)
            return FileStat(
                name=name,
                path=os.path.relpath(absolute, self.base_path),
                type="directory" if is_dir else "file",
                size=info.st_size,
                created_at=_from_ns(getattr(info, "st_birthtime_ns", info.st_ctime_ns)),
                modified_at=_from_ns(info.st_mtime_ns),
                mime_type=mime_type(name) if st.S_ISREG(info.st_mode) else None,
            )

        return await self._call(partial(self._disk.run, path, op))

    async def readdir(
        self, path: str = ".", *, recursive: bool = False, extension: str | None = None
    ) -> list[FileEntry]:
        """The directory's entries by name; `recursive` names nested ones ``dir/name`` (symlinked directories are
        listed, not entered); `extension` (``.ts`` or ``ts``) filters files."""

        def walk(directory: str, depth: int) -> list[FileEntry]:
            found: list[FileEntry] = []
            for entry, _ in self._disk.scan(directory):
                if extension and entry.type == "file" and not entry.is_symlink:
                    ext = posixpath.splitext(entry.name)[1]
                    if extension not in (ext, ext[1:]):
                        continue
                found.append(entry)
                if recursive and entry.type == "directory" and not entry.is_symlink and depth > 0:
                    nested = walk(posixpath.join(directory, entry.name), depth - 1)
                    found.extend(FileEntry(f"{entry.name}/{e.name}", e.type, e.size, e.is_symlink) for e in nested)
            return found

        return await self._call(partial(walk, path, 100))

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
        """Exactly Mastra's list_files tool text (before any token limit); empty patterns mean no pattern."""
        patterns = [pattern] if isinstance(pattern, str) else pattern or []
        patterns = [p for p in patterns if p.strip()]
        options = TreeOptions(
            max_depth, show_hidden, dirs_only, exclude or None, extension or None, patterns or None, respect_gitignore
        )
        return await self._call(partial(format_tree, self._disk, path, options))

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
        """Exactly Mastra's grep tool text (before any token limit)."""
        search = partial(
            grep,
            self._disk,
            pattern,
            path=path,
            context_lines=context_lines,
            max_count=max_count,
            case_sensitive=case_sensitive,
            include_hidden=include_hidden,
        )
        return await self._call(search)

    # --- writing -----------------------------------------------------------------------------------------------

    def _write(
        self, path: str, data: bytes, *, overwrite: bool, recursive: bool, expected: datetime | None, mode: int | None
    ) -> None:
        def op(loc: Location) -> None:
            info = _stat_or_none(loc)
            if info is not None and st.S_ISDIR(info.st_mode):
                raise IsDirectory(path)
            if info is not None and expected is not None and info.st_mtime_ns // 1_000_000 != _ms(expected):
                raise StaleFile(path, expected, _from_ns(info.st_mtime_ns))
            keep = mode if mode is not None else info.st_mode if info is not None else None
            _replace(loc, data, mode=keep, overwrite=overwrite)

        parent = _dirname(path)
        errors: dict[int, Callable[[], WorkspaceError]] = {
            errno.ENOENT: lambda: DirectoryNotFound(parent),
            errno.ENOTDIR: lambda: NotDirectory(parent),
            errno.EEXIST: lambda: FileExists(path),
        }
        self._disk.run(path, op, create=recursive, errors=errors)

    async def write_file(
        self,
        path: str,
        content: str | bytes,
        *,
        overwrite: bool = True,
        recursive: bool = True,
        expected_mtime: datetime | None = None,
    ) -> None:
        """Write atomically, keeping an existing file's mode. `recursive` creates parent directories;
        `expected_mtime` (compared in milliseconds) refuses with `StaleFile` a file changed since."""
        self._writable("writeFile", path)
        data = content.encode() if isinstance(content, str) else content
        write = partial(
            self._write, path, data, overwrite=overwrite, recursive=recursive, expected=expected_mtime, mode=None
        )
        await self._call(write)

    async def append_file(self, path: str, content: str | bytes) -> None:
        self._writable("appendFile", path)
        data = content.encode() if isinstance(content, str) else content

        def op(loc: Location) -> None:
            fd = _open(loc, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)

        await self._call(partial(self._disk.run, path, op, create=True))

    async def edit_file(
        self,
        path: str,
        old_string: str,
        new_string: str,
        *,
        replace_all: bool = False,
        expected_mtime: datetime | None = None,
    ) -> str:
        """Replace `old_string` (unique unless `replace_all`); the message Mastra's edit tool returns."""
        self._writable("edit_file", path)
        data = await self._call(partial(self._disk.read, path))
        message, edited = file_content.edit(data, path, old_string, new_string, replace_all=replace_all)
        if edited is not None:
            write = partial(
                self._write, path, edited, overwrite=True, recursive=True, expected=expected_mtime, mode=None
            )
            await self._call(write)
        return message

    async def delete_file(self, path: str, *, force: bool = False) -> None:
        """Remove a file (a symlink itself, not its target)."""
        self._writable("deleteFile", path)

        def op(loc: Location) -> None:
            info = os.stat(loc.name, dir_fd=loc.dir_fd, follow_symlinks=False)
            if st.S_ISDIR(info.st_mode):
                raise IsDirectory(path)
            os.unlink(loc.name, dir_fd=loc.dir_fd)

        try:
            await self._call(partial(self._disk.run, path, op, follow=False))
        except FileNotFound:
            if not force:
                raise

    async def rmdir(self, path: str, *, recursive: bool = False, force: bool = False) -> None:
        """Remove a directory; non-empty ones only with `recursive` (never following symlinks inside)."""
        self._writable("rmdir", path)

        def op(loc: Location) -> None:
            info = os.stat(loc.name, dir_fd=loc.dir_fd, follow_symlinks=False)
            if not st.S_ISDIR(info.st_mode):
                raise NotDirectory(path)
            if loc.name == ".":
                raise PermissionDenied(path, "rmdir")
            if recursive:
                shutil.rmtree(loc.name, dir_fd=loc.dir_fd)
            else:
                os.rmdir(loc.name, dir_fd=loc.dir_fd)

        try:
            await self._call(
                partial(self._disk.run, path, op, follow=False, errors={errno.ENOENT: lambda: DirectoryNotFound(path)})
            )
        except DirectoryNotFound:
            if not force:
                raise

    async def delete(self, path: str, *, recursive: bool = False) -> None:
        """What Mastra's delete tool does: a directory with `rmdir` (forced when `recursive`), else `delete_file`."""
        self._writable("delete", path)
        if await self._call(partial(self._disk.kind, path, follow=False)) == "directory":
            await self.rmdir(path, recursive=recursive, force=recursive)
        else:
            await self.delete_file(path)

    async def mkdir(self, path: str, *, recursive: bool = True) -> None:
        """Create a directory (and, with `recursive`, its parents); an existing directory is fine."""
        self._writable("mkdir", path)
        await self._call(partial(self._disk.mkdir, path, recursive=recursive))

    def _copy(self, src: str, dest: str, *, overwrite: bool, recursive: bool) -> None:
        if self._disk.kind(src) == "file":
            data, info = self._disk.run(src, lambda loc: (_read(loc), _stat(loc)))
            self._write(dest, data, overwrite=overwrite, recursive=True, expected=None, mode=info.st_mode)
            return
        if not recursive:
            raise IsDirectory(src)
        source, target = self._disk.resolver.target(src), self._disk.resolver.target(dest)
        # By real path: `link/sub` with `link -> src` is inside `src` too.
        real_src = os.path.realpath(os.path.join(source.root, *source.parts))
        real_dest = os.path.realpath(os.path.join(target.root, *target.parts))
        if real_dest == real_src or real_dest.startswith(real_src.rstrip(os.sep) + os.sep):
            raise FilesystemError(f"Cannot copy a directory into itself: {src} -> {dest}", dest)
        self._disk.mkdir(dest, recursive=True)
        for entry, _ in self._disk.scan(src):
            if entry.type == "directory" and entry.is_symlink:
                continue
            try:
                self._copy(f"{src}/{entry.name}", f"{dest}/{entry.name}", overwrite=overwrite, recursive=True)
            except FileExists:
                if overwrite:
                    raise

    async def copy_file(self, src: str, dest: str, *, overwrite: bool = True, recursive: bool = False) -> None:
        """Copy a file (a directory with `recursive`; then existing files are skipped unless `overwrite`)."""
        self._writable("copyFile", src)
        await self._call(partial(self._copy, src, dest, overwrite=overwrite, recursive=recursive))

    def _move(self, src: str, dest: str, *, overwrite: bool) -> None:
        resolver = self._disk.resolver
        source, target = resolver.target(src), resolver.target(dest)
        is_dir = self._disk.kind(src, follow=False) == "directory"
        try:
            with (
                resolver.open(src, source, follow=False) as a,
                resolver.open(dest, target, follow=False, create=True) as b,
            ):
                names = {"src_dir_fd": a.dir_fd, "dst_dir_fd": b.dir_fd}
                if overwrite or is_dir:
                    if not overwrite and _stat_or_none(b) is not None:
                        raise FileExists(dest)
                    os.rename(a.name, b.name, **names)
                else:
                    os.link(a.name, b.name, follow_symlinks=False, **names)
                    os.unlink(a.name, dir_fd=a.dir_fd)
        except OSError as err:
            if err.errno != errno.EXDEV:
                missing = {errno.ENOENT: lambda: FileNotFound(src), errno.ENOTDIR: lambda: NotDirectory(_dirname(dest))}
                raise _error(err, dest, missing) from None
            self._copy(src, dest, overwrite=overwrite, recursive=True)
            remove = partial(shutil.rmtree) if is_dir else os.unlink
            self._disk.run(src, lambda loc: remove(loc.name, dir_fd=loc.dir_fd), follow=False)

    async def move_file(self, src: str, dest: str, *, overwrite: bool = True) -> None:
        """Rename `src` to `dest` (creating `dest`'s parents), copying then deleting across devices."""
        self._writable("moveFile", src)
        await self._call(partial(self._move, src, dest, overwrite=overwrite))
