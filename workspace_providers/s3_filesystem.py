"""Mastra's `S3Filesystem` (`@mastra/s3`): a workspace filesystem in an S3 bucket, under an optional key prefix,
on any S3-compatible store (AWS, R2, MinIO, SeaweedFS), through the `minio` client.

It answers the workspace tools as `LocalFilesystem` does, with the same text (`list_files` and `grep` walk the
same tree formatter and grep). How paths become keys and what a directory is: `s3_objects`. How writes stay
consistent: within a worker, the workspace's per-file write lock serialises the write tools as for local files;
between workers, `s3_writes` makes every read-modify-write a conditional PUT. How failures map to workspace
errors: `s3_client` (an endpoint that cannot be reached is the retryable `FilesystemUnavailable`; refused
credentials are `PermissionDenied` naming the bucket). minio blocks, so every operation runs in a worker thread.

What differs from a disk: a directory's size is 0 and its times are those of the first object under it; a
move is a copy then a delete (a directory's, object by object: not atomic); there are no symlinks; an absolute
path is always outside the workspace (there is no host path inside a bucket), and so is one that climbs above
the workspace root, even to come back (``../ws/a.txt``).
"""

from __future__ import annotations

import asyncio
import random
import string
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from keel.workspace_providers import file_content, s3_writes
from keel.workspace_providers.errors import FileNotFound, FilesystemError, WorkspaceError, WorkspaceReadOnly
from keel.workspace_providers.file_tree import TreeOptions, format_tree
from keel.workspace_providers.grep import grep
from keel.workspace_providers.s3_client import S3Location, provider_name, translate
from keel.workspace_providers.s3_objects import S3Objects
from keel.workspace_providers.types import FileEntry, FileStat

T = TypeVar("T")
Instructions = str | Callable[[Mapping[str, Any] | None], str]


def _base36(n: int) -> str:
    digits = string.digits + string.ascii_lowercase
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out or "0"


class S3Filesystem:
    """A workspace filesystem in `bucket` (under `prefix`), named and behaving as Mastra's.

    Args:
        bucket: the bucket; it must exist (`init()` checks it).
        prefix: a key prefix the workspace lives under (``ws`` and ``/ws/`` are the same: keys ``ws/...``).
        endpoint: the store's URL (``http://127.0.0.1:8333``); default ``AWS_ENDPOINT_URL_S3``, then
            ``AWS_ENDPOINT_URL``, then AWS.
        region: default ``AWS_REGION``, then ``AWS_DEFAULT_REGION``, then ``us-east-1``.
        access_key_id, secret_access_key: default ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (with
            ``AWS_SESSION_TOKEN``); with none anywhere, requests are anonymous (a public bucket).
        read_only: every write raises `WorkspaceReadOnly` (and the write tools are not offered).
        id: default ``s3-fs-<time>-<random>``.
        session_token: temporary credentials' token, with explicit keys.
        instructions: replaces Mastra's instructions text (a function gets the request context).
    """

    provider = "s3"
    name = "S3Filesystem"

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        read_only: bool = False,
        id: str | None = None,
        session_token: str | None = None,
        instructions: Instructions | None = None,
    ) -> None:
        if not bucket or "/" in bucket:
            raise WorkspaceError(f"S3Filesystem needs a bucket name, not {bucket!r}")
        rand = "".join(random.choices(string.digits + string.ascii_lowercase, k=6))
        self.id = id or f"s3-fs-{_base36(int(time.time() * 1000))}-{rand}"
        self.location = S3Location.resolve(
            bucket, prefix, endpoint, region, access_key_id, secret_access_key, session_token
        )
        self.read_only = read_only
        self.status = "pending"
        self._instructions = instructions
        self._objects = S3Objects(self.location)

    @property
    def bucket(self) -> str:
        return self.location.bucket

    @property
    def prefix(self) -> str:
        """The key prefix, ``""`` or ending in ``/``."""
        return self.location.prefix

    @property
    def scope(self) -> str:
        """Identifies this filesystem for a read tracker."""
        return f"s3:{self.location.endpoint}/{self.bucket}/{self.prefix}"

    @property
    def tree_source(self) -> S3Objects:
        """The synchronous view `list_files` and `grep` walk (`scan`, `kind`, `read_text`, `gitignore`): how a
        `CompositeFilesystem` walks this filesystem as one of its mounts."""
        return self._objects

    def get_mount_config(self) -> dict[str, Any]:
        """Where the objects are, for a sandbox's `on_mount` hook (Mastra's `getMountConfig()`; no credentials:
        the hook has the filesystem's `location`)."""
        config = {"type": "s3", "bucket": self.bucket, "prefix": self.prefix, "region": self.location.region}
        return {**config, "endpoint": self.location.endpoint, "readOnly": self.read_only}

    async def init(self) -> None:
        """Check that the bucket exists and the credentials open it; status becomes ``ready``."""
        where = f"s3://{self.bucket}/{self.prefix}"

        def check() -> None:
            try:
                found = self._objects.client.bucket_exists(self.bucket)
            except Exception as err:
                raise translate(err, where, self.location) from err
            if not found:
                raise FilesystemError(f'Bucket "{self.bucket}" not found at {self.location.endpoint}', where)

        try:
            await asyncio.to_thread(check)
        except BaseException:
            self.status = "error"
            raise
        self.status = "ready"

    async def destroy(self) -> None:
        """Status becomes ``destroyed``; the objects stay."""
        self._objects.close()
        self.status = "destroyed"

    def get_info(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"bucket": self.bucket, "region": self.location.region}
        if self.location.endpoint_given:
            metadata["endpoint"] = self.location.endpoint
        if self.prefix:
            metadata["prefix"] = self.prefix
        if self.read_only:
            metadata["readOnly"] = True
        info = {"id": self.id, "name": self.name, "provider": self.provider, "status": self.status}
        return {**info, "metadata": metadata}

    def get_instructions(self, request_context: Mapping[str, Any] | None = None) -> str:
        """The override when given (a callable gets `request_context`), else Mastra's default text."""
        if isinstance(self._instructions, str):
            return self._instructions
        if self._instructions is not None:
            return self._instructions(request_context)
        access = "Read-only" if self.read_only else "Persistent"
        return (
            f'{provider_name(self.location)} storage in bucket "{self.bucket}". '
            f"{access} storage - files are retained across sessions."
        )

    async def _call(self, fn: Callable[[], T]) -> T:
        if self.status != "ready":
            await self.init()
        return await asyncio.to_thread(fn)

    def _writable(self, operation: str, path: str) -> None:
        if self.read_only:
            raise WorkspaceReadOnly(operation, path)

    # --- reading -----------------------------------------------------------------------------------------------

    async def read_file(self, path: str, *, encoding: str | None = None) -> bytes | str:
        """The object's bytes, or with `encoding` (utf-8, utf8, base64, hex, binary, latin1) a string."""
        data, _ = await self._call(partial(self._objects.get, path))
        return file_content.decode(data, encoding)

    async def exists(self, path: str) -> bool:
        """Whether a file or directory is there; `PermissionDenied` for a path outside the workspace."""
        try:
            await self._call(partial(self._objects.kind, path))
        except FileNotFound:
            return False
        return True

    async def stat(self, path: str) -> FileStat:
        return await self._call(partial(self._objects.stat, path))

    async def readdir(
        self, path: str = ".", *, recursive: bool = False, extension: str | None = None
    ) -> list[FileEntry]:
        """The directory's entries by name; `recursive` names nested ones ``dir/name`` (one listing request per
        1,000 keys); `extension` (``.ts`` or ``ts``) filters files."""
        return await self._call(partial(self._objects.readdir, path, recursive=recursive, extension=extension))

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
        return await self._call(partial(format_tree, self._objects, path, options))

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
        """Exactly Mastra's grep tool text (before any token limit); each file searched is one GET."""
        search = partial(
            grep,
            self._objects,
            pattern,
            path=path,
            context_lines=context_lines,
            max_count=max_count,
            case_sensitive=case_sensitive,
            include_hidden=include_hidden,
        )
        return await self._call(search)

    # --- writing -----------------------------------------------------------------------------------------------

    async def write_file(
        self,
        path: str,
        content: str | bytes,
        *,
        overwrite: bool = True,
        recursive: bool = True,
        expected_mtime: datetime | None = None,
    ) -> None:
        """Write the object. Without `recursive`, the parent directory must exist; `expected_mtime` (compared in
        milliseconds) refuses with `StaleFile` a file changed since, up to the write itself (``If-Match``)."""
        self._writable("writeFile", path)
        data = content.encode() if isinstance(content, str) else content
        write = partial(
            s3_writes.write,
            self._objects,
            path,
            data,
            overwrite=overwrite,
            recursive=recursive,
            expected=expected_mtime,
        )
        await self._call(write)

    async def append_file(self, path: str, content: str | bytes) -> None:
        """S3 has no append: read, then write the whole on the condition that nothing changed in between."""
        self._writable("appendFile", path)
        data = content.encode() if isinstance(content, str) else content
        await self._call(partial(s3_writes.append, self._objects, path, data))

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
        edit = partial(
            s3_writes.edit,
            self._objects,
            path,
            old_string,
            new_string,
            replace_all=replace_all,
            expected=expected_mtime,
        )
        return await self._call(edit)

    async def delete_file(self, path: str, *, force: bool = False) -> None:
        self._writable("deleteFile", path)
        await self._call(partial(s3_writes.delete_file, self._objects, path, force=force))

    async def rmdir(self, path: str, *, recursive: bool = False, force: bool = False) -> None:
        """Remove a directory (its marker and, with `recursive`, every object under it)."""
        self._writable("rmdir", path)
        await self._call(partial(s3_writes.rmdir, self._objects, path, recursive=recursive, force=force))

    async def delete(self, path: str, *, recursive: bool = False) -> None:
        """What Mastra's delete tool does: a directory with `rmdir` (forced when `recursive`), else `delete_file`."""
        self._writable("delete", path)
        if await self._call(partial(self._objects.kind, path)) == "directory":
            await self.rmdir(path, recursive=recursive, force=recursive)
        else:
            await self.delete_file(path)

    async def mkdir(self, path: str, *, recursive: bool = True) -> None:
        """Create a directory (its marker); an existing directory is fine."""
        self._writable("mkdir", path)
        await self._call(partial(s3_writes.mkdir, self._objects, path, recursive=recursive))

    async def copy_file(self, src: str, dest: str, *, overwrite: bool = True, recursive: bool = False) -> None:
        """Copy a file server-side (a directory with `recursive`; then existing files are kept unless
        `overwrite`)."""
        self._writable("copyFile", src)
        await self._call(partial(s3_writes.copy, self._objects, src, dest, overwrite=overwrite, recursive=recursive))

    async def move_file(self, src: str, dest: str, *, overwrite: bool = True) -> None:
        """Copy then delete `src` (a directory too), creating `dest`'s parents."""
        self._writable("moveFile", src)
        await self._call(
            partial(s3_writes.copy, self._objects, src, dest, overwrite=overwrite, recursive=True, move=True)
        )
