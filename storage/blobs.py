"""The blobs domain: values too large to travel inline in Temporal's history (activity results, run inputs and
results over 256 KiB), stored by content address and fetched back by key.

Each blob records its *owners*, the workflows (namespace and id) whose histories may hold a reference to it, so a sweep
(`keel.client.blob_sweep`) can delete the blobs no execution can reference any more. A blob without an owner
(written outside a workflow, or before owners were recorded) is never swept. A put of a blob that exists already
adds its owner and renews its `last_put`: a sweep deletes only blobs last put before its cutoff, checked again
at the moment of deletion, so a blob put again while a sweep runs is kept.
"""

from __future__ import annotations

import abc
import asyncio
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from keel.protocol.blob_sweep import BlobSweep
from keel.storage.errors import StorageError, StorageUnavailable


class BlobNotFound(StorageError):
    """A key that the blob store does not hold (a payload store other than the one that wrote it)."""


def blob_key(data: bytes) -> str:
    """The content address of `data`: its SHA-256, hex."""
    return hashlib.sha256(data).hexdigest()


UNKNOWN_OWNER = "*unknown*"
"""Recorded for a put without an owner: some history we cannot name may reference the blob, so it is never swept
(a put of the same bytes by a known workflow does not make it sweepable again)."""


def workflow_owner(namespace: str, workflow_id: str) -> str:
    """The owner a blob records for a workflow: `@<namespace>/<workflow id>`, so a sweep judges it in the namespace
    that wrote it (several namespaces may share one payload store)."""
    return f"@{namespace}/{workflow_id}"


def owner_workflow(owner: str) -> tuple[str | None, str]:
    """An owner's namespace and workflow id. An owner recorded before owners named their namespace is the bare
    workflow id (namespace None: judged in the namespace that sweeps)."""
    if owner.startswith("@") and "/" in owner:
        namespace, workflow_id = owner[1:].split("/", 1)
        return namespace, workflow_id
    return None, owner


@dataclass(frozen=True)
class StoredBlob:
    key: str
    size: int
    last_put: datetime
    owners: tuple[str, ...]
    """The workflows whose histories may reference the blob (`workflow_owner`); none, or `UNKNOWN_OWNER` among
    them: never swept."""


class BlobStore(abc.ABC):
    """Bytes by content address. `put_blobs` is idempotent (the same key always holds the same bytes)."""

    @abc.abstractmethod
    async def put_blobs(self, blobs: Mapping[str, bytes], *, owner: str | None = None) -> None:
        """Store each blob under its key, `owner` (`workflow_owner`; None: `UNKNOWN_OWNER`) among its owners;
        durable when this returns."""

    @abc.abstractmethod
    async def list_blobs(self, *, after: str = "", limit: int = 500) -> list[StoredBlob]:
        """Up to `limit` blobs with keys after `after`, in key order (page on with the last key)."""

    @abc.abstractmethod
    async def delete_blobs(self, keys: Sequence[str], *, put_before: datetime) -> list[str]:
        """Delete those of `keys` last put before `put_before` (checked at deletion); the keys deleted."""

    @abc.abstractmethod
    async def get_blobs(self, keys: Sequence[str]) -> list[bytes]:
        """The blobs, in the order of `keys`. Raises `BlobNotFound` for a key it does not hold."""

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """Where the blobs are, for messages."""

    async def recover(self) -> None:
        """Finish what a sweep stopped mid-delete left (a sweep calls it first); nothing to do for a store whose
        deletes are atomic."""
        return None


class DirectoryBlobStore(BlobStore):
    """Blobs as files under one directory (`<key[:2]>/<key>`), written atomically and fsynced.

    Args:
        root: The directory; created on the first write.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def location(self) -> str:
        return str(self.root)

    def _path(self, key: str) -> Path:
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            raise BlobNotFound(f"Not a blob key: {key!r}")
        return self.root / key[:2] / key

    async def put_blobs(self, blobs: Mapping[str, bytes], *, owner: str | None = None) -> None:
        await asyncio.to_thread(self._put, dict(blobs), owner)

    @contextmanager
    def _locked(self, path: Path) -> Iterator[Path]:
        """`path`'s owners file, locked against a sweep deleting the blob meanwhile (and against other puts)."""
        owners = path.with_name(path.name + ".owners")
        while True:
            fd = os.open(owners, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink:  # not unlinked by a sweep while this waited for the lock
                break
            os.close(fd)
        try:
            yield owners
        finally:
            os.close(fd)

    def _put(self, blobs: dict[str, bytes], owner: str | None) -> None:
        try:
            for key, data in blobs.items():
                path = self._path(key)
                path.parent.mkdir(parents=True, exist_ok=True)
                with self._locked(path) as owners:
                    if (owner or UNKNOWN_OWNER) not in _read_owners(owners):
                        _append_synced(owners, owner or UNKNOWN_OWNER)
                    if path.exists():
                        os.utime(path)  # content-addressed: there means the same bytes; put again now
                        continue
                    self._write(path, data)
        except OSError as err:
            raise StorageUnavailable(f"Payload store {self.root}: {err}") from err

    def _write(self, path: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)  # a reader never sees a half-written blob
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)  # the rename itself survives a crash

    async def get_blobs(self, keys: Sequence[str]) -> list[bytes]:
        return await asyncio.to_thread(self._get, list(keys))

    def _get(self, keys: list[str]) -> list[bytes]:
        found = []
        for key in keys:
            path = self._path(key)
            try:
                found.append(path.read_bytes())
            except FileNotFoundError:
                raise BlobNotFound(f"Payload {key} is not in the payload store {self.root}") from None
            except OSError as err:
                raise StorageUnavailable(f"Payload store {self.root}: {err}") from err
        return found

    async def list_blobs(self, *, after: str = "", limit: int = 500) -> list[StoredBlob]:
        return await asyncio.to_thread(self._list, after, limit)

    def _list(self, after: str, limit: int) -> list[StoredBlob]:
        if not self.root.is_dir():
            return []
        found: list[StoredBlob] = []
        try:
            for shard in sorted(p for p in self.root.iterdir() if len(p.name) == 2 and p.name >= after[:2]):
                for path in sorted(p for p in shard.iterdir() if len(p.name) == 64 and p.name > after):
                    try:
                        stat = path.stat()
                    except FileNotFoundError:  # swept meanwhile
                        continue
                    owners = tuple(_read_owners(path.with_name(path.name + ".owners")))
                    found.append(
                        StoredBlob(path.name, stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC), owners)
                    )
                    if len(found) >= limit:
                        return found
        except OSError as err:
            raise StorageUnavailable(f"Payload store {self.root}: {err}") from err
        return found

    async def delete_blobs(self, keys: Sequence[str], *, put_before: datetime) -> list[str]:
        return await asyncio.to_thread(self._delete, list(keys), put_before.timestamp())

    def _delete(self, keys: list[str], cutoff: float) -> list[str]:
        deleted = []
        try:
            for key in keys:
                path = self._path(key)
                if not path.exists():
                    continue
                with self._locked(path) as owners:
                    try:
                        if path.stat().st_mtime >= cutoff:  # put again since the sweep looked
                            continue
                        path.unlink()
                    except FileNotFoundError:
                        continue
                    owners.unlink(missing_ok=True)
                    deleted.append(key)
        except OSError as err:
            raise StorageUnavailable(f"Payload store {self.root}: {err}") from err
        return deleted


def _read_owners(path: Path) -> list[str]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return list(dict.fromkeys(line for line in text.splitlines() if line))


def _append_synced(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def sweep_blobs(
    store: BlobStore,
    exists: Callable[[str], Awaitable[bool]],
    *,
    put_before: datetime,
    dry_run: bool = False,
    page: int = 500,
    progress: Callable[[BlobSweep], None] | None = None,
) -> BlobSweep:
    """Delete every blob last put before `put_before` whose owners' executions are all gone (`exists(owner)` is
    False for each: past its namespace's retention, or deleted). Pages through the store by key."""
    found = BlobSweep(dry_run=dry_run)
    known: dict[str, bool] = {}
    await store.recover()

    async def alive(owner: str) -> bool:
        if owner not in known:
            known[owner] = await exists(owner)
        return known[owner]

    after = ""
    while listed := await store.list_blobs(after=after, limit=page):
        after = listed[-1].key
        doomed: dict[str, int] = {}
        for blob in listed:
            found.blobs += 1
            found.bytes += blob.size
            if not blob.owners or UNKNOWN_OWNER in blob.owners:
                found.unowned += 1
            elif blob.last_put >= put_before:
                found.recent += 1
            elif any([await alive(owner) for owner in blob.owners]):
                found.referenced += 1
            else:
                doomed[blob.key] = blob.size
        gone = list(doomed) if dry_run else await store.delete_blobs(list(doomed), put_before=put_before)
        found.deleted += len(gone)
        found.deleted_bytes += sum(doomed[key] for key in gone)
        found.recent += len(doomed) - len(gone)  # put again while this looked
        if progress is not None:
            progress(found)
    return found
