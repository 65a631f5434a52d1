"""The writing half of `S3Filesystem`: each function takes the bucket's `S3Objects` and a caller path, runs in a
worker thread, and raises the workspace's errors.

Writes are checked as a disk would check them (`check_place`: no file among the parents, no directory where the
file goes; the requests go out together). They stay consistent between workers without a lock: a write with
`expected` (the mtime the agent read), an edit and an append are PUTs conditional on the ETag they read
(``If-Match``), a file that must not exist yet is created with ``If-None-Match: *``. An edit or append that loses to
another writer reads again and retries; a write with `expected` is `StaleFile`. `mkdir` writes a directory's
marker, and so does removing the last entry of a directory (see `s3_objects`). A move is a copy then a delete; a
directory's goes object by object, so it is not atomic, and a move retried after a crash finds what is left of
the source and completes it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from keel.workspace_providers import file_content
from keel.workspace_providers.errors import (
    DirectoryNotEmpty,
    DirectoryNotFound,
    FileExists,
    FileNotFound,
    FilesystemError,
    IsDirectory,
    NotDirectory,
    PermissionDenied,
    StaleFile,
)
from keel.workspace_providers.local_filesystem import mime_type
from keel.workspace_providers.s3_objects import MTIME, Head, Parts, S3Objects, mtime_ms, mtime_stamp, parent_of

if TYPE_CHECKING:
    from minio.datatypes import Object

CONFLICT_ATTEMPTS = 10
"""An edit or append whose conditional write lost to another writer reads again and retries (after a short
random pause, so writers racing in step spread out), this many times."""


def _attempts() -> Iterator[int]:
    """`CONFLICT_ATTEMPTS` turns, a random pause growing between them (this runs in a worker thread)."""
    for attempt in range(CONFLICT_ATTEMPTS):
        if attempt:
            time.sleep(random.uniform(0, 0.02 * attempt))
        yield attempt


def _head_of(store: S3Objects, parts: Parts) -> Head | None:
    return store.head(store.key(parts))


def check_place(store: S3Objects, parts: Parts, path: str, *, recursive: bool, directory: bool = False) -> bool:
    """Refuse writing `path` where a disk would: a file among its parents (`NotDirectory`), a missing parent
    without `recursive` (`DirectoryNotFound`), a directory there (`IsDirectory`; for a `directory`, a file
    there is `FileExists`). Returns whether a directory is there already. The requests go out together."""
    return place_and_head(store, parts, path, recursive=recursive, directory=directory)[0]


def place_and_head(
    store: S3Objects,
    parts: Parts,
    path: str,
    *,
    recursive: bool,
    directory: bool = False,
    head: bool = False,
    alongside: Callable[[], object] | None = None,
) -> tuple[bool, Head | None]:
    """`check_place`, and (with `head`, or for a `directory`) the object at `path`, in the same round trip; so is
    `alongside` (a write's own request, not made for the root), made first in this thread while the checks go
    out from others."""
    if not parts:
        if not directory:
            raise IsDirectory(path)
        return True, None
    parents = [parts[:i] for i in range(1, len(parts))]
    calls: list[Callable[[], object]] = [alongside] if alongside else []
    calls.append(partial(store.is_dir, parts))
    heads = directory or head  # a file there matters to a directory; a file's write replaces it
    if heads:
        calls.append(partial(_head_of, store, parts))
    calls += [partial(_head_of, store, p) for p in parents]
    if not recursive and parents:
        calls.append(partial(store.is_dir, parents[-1]))
    answers = store.concurrently(calls)
    is_dir, *rest = answers[1:] if alongside else answers
    here = rest.pop(0) if heads else None
    if any(rest[: len(parents)]):
        raise NotDirectory(parent_of(path))
    if not recursive and parents and not rest[-1]:
        raise DirectoryNotFound(parent_of(path))
    if directory and here is not None:
        raise FileExists(path)
    if is_dir and not directory:
        raise IsDirectory(path)
    return bool(is_dir), cast(Head | None, here)


def _modified_now(store: S3Objects, key: str) -> datetime:
    head = store.head(key)
    return head.modified if head else datetime.now(UTC)


def write(
    store: S3Objects, path: str, data: bytes, *, overwrite: bool, recursive: bool, expected: datetime | None
) -> None:
    """One PUT with the checks, or after them: plain, or conditional when the file must be the one read
    (`expected`) or must not exist yet (not `overwrite`).

    A write without `expected` that may create its parents (`recursive`), of a file this filesystem has not seen
    there (`S3Objects.seen`: read, stat'd or written by it), creates the file (``If-None-Match: *``) in the round
    trip of the checks, so a new file takes one round trip, not two. A check that then refuses deletes what that
    PUT created (nothing was there: the condition held) before it raises (a worker killed between the two leaves
    it); a file there after all fails the PUT, and is then `FileExists` or, with `overwrite`, written over by a
    second PUT (two round trips, as before). A file seen there is checked first and written after, without the
    PUT that would fail. (Without `recursive` the checks come first too: a refused write into a missing
    directory must not leave the folders its PUT made on a store with a real directory tree, such as SeaweedFS.)
    """
    parts = store.parts(path)
    with store.failing(path):
        key = store.key(parts)
        if expected is None and recursive and not store.seen(key):
            created: list[bool | Exception] = []

            def create() -> None:
                try:
                    created.append(store.put_if(key, data, {"If-None-Match": "*"}))
                except Exception as err:  # the checks' refusal, when there is one, is the answer
                    created.append(err)

            try:
                place_and_head(store, parts, path, recursive=True, alongside=create)
            except Exception:
                if created == [True]:
                    store.delete(key)
                raise
            if isinstance(created[0], Exception):
                raise created[0]
            if created[0]:
                return
            if not overwrite:
                raise FileExists(path)
            store.put(key, data)
            return
        _, head = place_and_head(store, parts, path, recursive=recursive, head=expected is not None)
        if head is not None and expected is not None:
            if mtime_ms(head.modified) != mtime_ms(expected):
                raise StaleFile(path, expected, head.modified)
            if not overwrite:
                raise FileExists(path)
        if head is not None:
            condition = {"If-Match": f'"{head.etag}"'}
        elif expected is not None or not overwrite:
            condition = {"If-None-Match": "*"}
        else:
            condition = {}
        if store.put_if(key, data, condition):
            return
        if expected is None or (not overwrite and head is None):
            raise FileExists(path)
        raise StaleFile(path, expected, _modified_now(store, key))


def append(store: S3Objects, path: str, data: bytes) -> None:
    """Read, then write the longer content on the condition that nothing changed in between."""
    parts = store.parts(path)
    with store.failing(path):
        key = store.key(parts)
        for _ in _attempts():
            try:
                current, head = store.get(path)
            except FileNotFound:
                current, head = b"", None
                check_place(store, parts, path, recursive=True)
            condition = {"If-Match": f'"{head.etag}"'} if head else {"If-None-Match": "*"}
            if store.put_if(key, current + data, condition):
                return
        raise FilesystemError(f"{path} kept changing during the append ({CONFLICT_ATTEMPTS} attempts)", path)


def edit(store: S3Objects, path: str, old: str, new: str, *, replace_all: bool, expected: datetime | None) -> str:
    """Mastra's edit, written on the condition that the object is still the one read: an edit by another
    worker in between is read and edited again (with `expected`, it is `StaleFile`)."""
    parts = store.parts(path)
    with store.failing(path):
        key = store.key(parts)
        for _ in _attempts():
            data, head = store.get(path)
            message, edited = file_content.edit(data, path, old, new, replace_all=replace_all)
            if edited is None:
                return message
            if expected is not None and mtime_ms(head.modified) != mtime_ms(expected):
                raise StaleFile(path, expected, head.modified)
            if store.put_if(key, edited, {"If-Match": f'"{head.etag}"'}):
                return message
            if expected is not None:
                raise StaleFile(path, expected, _modified_now(store, key))
        raise FilesystemError(f"{path} kept changing during the edit ({CONFLICT_ATTEMPTS} attempts)", path)


def mkdir(store: S3Objects, path: str, *, recursive: bool) -> None:
    """Write the directory's marker, unless a directory is there already."""
    parts = store.parts(path)
    with store.failing(path):
        if parts and not check_place(store, parts, path, recursive=recursive, directory=True):
            store.put(store.dir_key(parts), b"")


def keep_dir(store: S3Objects, parts: Parts) -> None:
    """Write the directory's marker if nothing is left in it (see the module docstring)."""
    if parts and not store.is_dir(parts):
        store.put(store.dir_key(parts), b"")


def delete_file(store: S3Objects, path: str, *, force: bool) -> None:
    """Delete the object (keeping its directory, as a disk does)."""
    parts = store.parts(path)
    with store.failing(path):
        if not parts or store.head(store.key(parts)) is None:
            if store.is_dir(parts):
                raise IsDirectory(path)
            if not force:
                raise FileNotFound(path)
            return
        store.delete(store.key(parts))
        keep_dir(store, parts[:-1])


def rmdir(store: S3Objects, path: str, *, recursive: bool, force: bool) -> None:
    """Delete the directory's marker and, with `recursive`, everything under it; never the workspace root."""
    parts = store.parts(path)
    with store.failing(path):
        if not parts:
            raise PermissionDenied(path, "rmdir")
        objects = store.list_all(parts)
        if not objects:
            if store.head(store.key(parts)) is not None:
                raise NotDirectory(path)
            if not force:
                raise DirectoryNotFound(path)
            return
        marker = store.dir_key(parts)
        if not recursive and any(o.object_name != marker for o in objects):
            raise DirectoryNotEmpty(path)
        _remove_tree(store, parts, objects, path)
        keep_dir(store, parts[:-1])


def _remove_tree(store: S3Objects, parts: Parts, objects: Sequence[Object], path: str) -> None:
    """Delete the objects, then every folder prefix below `parts`, deepest first: S3-compatible stores
    backed by a real directory tree (SeaweedFS) would otherwise keep listing the emptied folders."""
    keys = [o.object_name or "" for o in objects]
    folders = {k[: i + 1] for k in keys for i, c in enumerate(k) if c == "/" and i >= len(store.dir_key(parts))}
    store.remove([k for k in keys if not k.endswith("/")], path)
    store.remove(sorted(folders | {store.dir_key(parts)}, key=lambda f: (-f.count("/"), f)), path)


def _copy_object(store: S3Objects, source: str, dest: str) -> None:
    from minio.commonconfig import CopySource

    metadata: dict[str, Any] = {"Content-Type": mime_type(dest), MTIME: mtime_stamp()}
    store.client.copy_object(
        store.loc.bucket, dest, CopySource(store.loc.bucket, source), metadata=metadata, metadata_directive="REPLACE"
    )


def copy(store: S3Objects, src: str, dest: str, *, overwrite: bool, recursive: bool, move: bool = False) -> None:
    """Copy (or, with `move`, copy then delete) a file, or a directory object by object: not atomic; a move
    retried after a crash finds what is left of the source and completes."""
    source, target = store.parts(src), store.parts(dest)
    with store.failing(src):
        if source and store.head(store.key(source)) is not None:
            if not overwrite and store.head(store.key(target)) is not None:
                raise FileExists(dest)
            check_place(store, target, dest, recursive=True)
            _copy_object(store, store.key(source), store.key(target))
            if move:
                store.delete(store.key(source))
                keep_dir(store, source[:-1])
            return
        objects = store.list_all(source)
        if not objects and source:
            raise FileNotFound(src)
        if not recursive:
            raise IsDirectory(src)
        if target[: len(source)] == source:
            raise FilesystemError(f"Cannot copy a directory into itself: {src} -> {dest}", dest)
        if check_place(store, target, dest, recursive=True, directory=True) and move:
            if not overwrite:
                raise FileExists(dest)
            if _names(store, target):
                raise DirectoryNotEmpty(dest)
        _copy_tree(store, source, target, objects, overwrite)
        if move:
            _remove_tree(store, source, objects, src)
            keep_dir(store, source[:-1])


def _names(store: S3Objects, parts: Parts) -> list[str]:
    marker = store.dir_key(parts)
    return [o.object_name or "" for o in store.list_all(parts) if o.object_name != marker]


def _copy_tree(store: S3Objects, source: Parts, target: Parts, objects: Sequence[Object], overwrite: bool) -> None:
    """Every object under `source` to the same place under `target` (several at once); without `overwrite`,
    those already there are kept."""
    start, into = len(store.dir_key(source)), store.dir_key(target)
    taken = set() if overwrite else {o.object_name for o in store.list_all(target)}
    pairs = [(o.object_name or "", into + (o.object_name or "")[start:]) for o in objects]
    store.concurrently([partial(_copy_or_mark, store, s, d) for s, d in pairs if d not in taken])
    keep_dir(store, target)


def _copy_or_mark(store: S3Objects, source: str, dest: str) -> None:
    if source.endswith("/"):
        store.put(dest, b"")
    else:
        _copy_object(store, source, dest)
