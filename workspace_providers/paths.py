"""The one way a caller's path becomes something safe to open.

`Resolver.target()` checks a path's form and places it, lexically, under one of the roots (the base path and the
allowed paths). `Resolver.open()` then walks from that root's directory fd one component at a time with
`O_NOFOLLOW`: a symlink met on the way (or, when following, as the last component) is read and its target placed
again under a root and walked afresh, so a link leading out is refused when it is opened, even one swapped in
after the check. Operations act on the `Location` it yields with the `dir_fd` variants of `os` calls.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TypeVar

from keel.workspace_providers.errors import FilesystemError, PermissionDenied

T = TypeVar("T")

MAX_LINKS = 40
"""Symlinks followed while resolving one path, as the kernel's ELOOP limit."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_DRIVE = re.compile(r"^[A-Za-z]:")


@dataclass(frozen=True)
class Target:
    """A path placed under a root: walk `parts` (no `.`, `..` or empty parts) from the directory `root`."""

    root: str
    parts: tuple[str, ...]


@dataclass(frozen=True)
class Location:
    """An open directory and a name in it (``"."`` for the directory itself). `dir_fd` is closed on exit."""

    dir_fd: int
    name: str


def expand_tilde(path: str) -> str:
    """A leading ``~`` or ``~/`` as the home directory, as Mastra's `expandTilde`."""
    if path == "~" or path.startswith("~/"):
        return os.path.expanduser("~") + path[1:]
    return path


def check_form(path: str) -> None:
    """Refuse forms that never name a workspace file: NUL bytes, backslashes, drive letters, UNC paths."""
    problem = (
        "path contains a NUL byte"
        if "\0" in path
        else "backslashes are not supported; use forward slashes"
        if "\\" in path
        else "Windows drive paths are not supported"
        if _DRIVE.match(path)
        else "UNC paths are not supported"
        if path.startswith("//")
        else None
    )
    if problem:
        raise PermissionDenied(path, f"access ({problem})")


def _within(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


def _link_target(dir_fd: int, name: str) -> str | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def _open_dir(dir_fd: int, name: str, *, create: bool) -> int | str:
    """Open directory `name` under `dir_fd` without following a symlink: its fd, or the link's target."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
        with suppress(FileExistsError):
            os.mkdir(name, dir_fd=dir_fd)
        return _open_dir(dir_fd, name, create=False)
    except OSError as err:
        link = _link_target(dir_fd, name) if err.errno in (errno.ELOOP, errno.ENOTDIR) else None
        if link is None:
            raise
        return link


class Resolver:
    """Resolves caller paths against `base`; with `contained`, only inside `base` and `allowed` (absolute)."""

    def __init__(self, base: str, allowed: Sequence[str] = (), *, contained: bool = True) -> None:
        self.base, self.contained = base, contained
        self.roots = (base, *allowed)

    def target(self, user_path: str) -> Target:
        """Where `user_path` points, refused with `PermissionDenied` when outside every root."""
        check_form(user_path)
        expanded = expand_tilde(user_path)
        absolute = posixpath.normpath(posixpath.join(self.base, expanded))
        target = self._place(absolute)
        if target is None:
            raise PermissionDenied(user_path, self._hint(user_path))
        return target

    def _place(self, absolute: str) -> Target | None:
        if not self.contained:
            return Target("/", tuple(p for p in absolute.split("/") if p))
        candidates = {c for root in self.roots for c in (root, os.path.realpath(root))}
        root = max((c for c in candidates if _within(absolute, c)), key=len, default=None)
        if root is None:
            return None
        return Target(root, tuple(p for p in absolute[len(root) :].split("/") if p))

    def _hint(self, user_path: str) -> str:
        """Mastra's operation text for a refused path: for an absolute path, say how to write it relative."""
        stripped = user_path.lstrip("/")
        if not user_path.startswith("/") or not stripped:
            return "access"
        first = stripped.split("/", 1)[0]
        if first not in (".", "..") and os.path.exists(os.path.join(self.base, first)):
            return f'access (path is outside the workspace; use a relative path like "{stripped}")'
        return (
            'access (path is outside the workspace; use a path relative to the workspace root, without a leading "/")'
        )

    @contextmanager
    def open(self, user_path: str, target: Target, *, follow: bool = True, create: bool = False) -> Iterator[Location]:
        """Walk to `target`'s parent directory (creating missing ones with `create`). With `follow`, a symlink as
        the last component is resolved too; without, the link itself is yielded once its target checks out."""
        dir_fd, name = self._walk(user_path, target, follow=follow, create=create)
        try:
            if not follow and self.contained and _link_target(dir_fd, name) is not None:
                with suppress(OSError), self.open(user_path, target, follow=True):
                    pass
            yield Location(dir_fd, name)
        finally:
            os.close(dir_fd)

    def run(self, user_path: str, op: Callable[[Location], T], *, follow: bool = True, create: bool = False) -> T:
        """`op` at `user_path`'s location; walked again when `op` finds a symlink there (`ELOOP`: it was swapped in
        after the walk), so the link is resolved and checked like any other."""
        target = self.target(user_path)
        for _ in range(MAX_LINKS):
            with self.open(user_path, target, follow=follow, create=create) as location:
                try:
                    return op(location)
                except OSError as err:
                    if err.errno != errno.ELOOP:
                        raise
        raise _too_many_links(user_path)

    def _walk(self, user_path: str, target: Target, *, follow: bool, create: bool) -> tuple[int, str]:
        for _ in range(MAX_LINKS):
            dir_fd = os.open(target.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                here = os.path.realpath(target.root)
                *parents, last = target.parts or (".",)
                for i, name in enumerate(parents):
                    step = _open_dir(dir_fd, name, create=create)
                    if isinstance(step, str):
                        redirect = posixpath.join(here, step, *target.parts[i + 1 :])
                        break
                    os.close(dir_fd)
                    dir_fd, here = step, posixpath.join(here, name)
                else:
                    link = _link_target(dir_fd, last) if follow and last != "." else None
                    if link is None:
                        found, dir_fd = dir_fd, -1
                        return found, last
                    redirect = posixpath.join(here, link)
            finally:
                if dir_fd >= 0:
                    os.close(dir_fd)
            placed = self._place(posixpath.normpath(redirect))
            if placed is None:
                raise PermissionDenied(user_path, "access")
            target = placed
        raise _too_many_links(user_path)


def _too_many_links(user_path: str) -> FilesystemError:
    return FilesystemError(f"Too many levels of symbolic links: {user_path}", user_path)
