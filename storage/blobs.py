"""The blobs domain: values too large to travel inline in Temporal's history (activity results, run inputs and
results over 256 KiB), stored by content address and fetched back by key."""

from __future__ import annotations

import abc
import asyncio
import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from keel.storage.errors import StorageError, StorageUnavailable


class BlobNotFound(StorageError):
    """A key that the blob store does not hold (a payload store other than the one that wrote it)."""


def blob_key(data: bytes) -> str:
    """The content address of `data`: its SHA-256, hex."""
    return hashlib.sha256(data).hexdigest()


class BlobStore(abc.ABC):
    """Bytes by content address. `put_blobs` is idempotent (the same key always holds the same bytes)."""

    @abc.abstractmethod
    async def put_blobs(self, blobs: Mapping[str, bytes]) -> None:
        """Store each blob under its key; durable when this returns."""

    @abc.abstractmethod
    async def get_blobs(self, keys: Sequence[str]) -> list[bytes]:
        """The blobs, in the order of `keys`. Raises `BlobNotFound` for a key it does not hold."""

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """Where the blobs are, for messages."""


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

    async def put_blobs(self, blobs: Mapping[str, bytes]) -> None:
        await asyncio.to_thread(self._put, dict(blobs))

    def _put(self, blobs: dict[str, bytes]) -> None:
        try:
            for key, data in blobs.items():
                path = self._path(key)
                if path.exists():
                    continue  # content-addressed: already there means the same bytes
                path.parent.mkdir(parents=True, exist_ok=True)
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
                dir_fd = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)  # the rename itself survives a crash
                finally:
                    os.close(dir_fd)
        except OSError as err:
            raise StorageUnavailable(f"Payload store {self.root}: {err}") from err

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
