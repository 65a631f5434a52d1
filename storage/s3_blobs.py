"""Payload blobs in an S3 bucket (`KEEL_PAYLOAD_STORE=s3://bucket/prefix`), so workers on any host read each
other's large values.

Objects: `<prefix>blobs/<key>` holds the bytes, `<prefix>owners/<key>/<workflow id, URL-quoted>` (empty) records
an owner; its LastModified is that owner's last put. An object store has no lock, so the two sides are ordered:

- a put writes its owner marker (new content each time, so its ETag changes), then the blob (always: the same
  bytes, and its LastModified renewed);
- a sweep lists the markers, reads the blob, copies it to `<prefix>trash/<key>`, deletes it, lists the markers
  again, and puts the bytes back if a marker appeared or was renewed meanwhile (that put may have written the
  blob before the delete); then it deletes the copy and the markers.

A sweep killed between its delete and that check leaves the copy: readers read it where the blob is missing,
and the next sweep first puts every such copy back (`recover`) and judges the blob anew.

Credentials and endpoint: the URL's query (`?endpoint=http://host:8333&region=...`), else the standard AWS
variables (`keel.protocol.s3`). Denied or a missing bucket: `StorageConfigError` (fails at once); the endpoint
down or a 5xx: `StorageUnavailable` (retried).
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from keel.protocol.s3 import S3Location
from keel.storage.blobs import UNKNOWN_OWNER, BlobNotFound, BlobStore, StoredBlob
from keel.storage.errors import StorageConfigError, StorageError, StorageUnavailable

if TYPE_CHECKING:
    from minio import Minio

_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}


def s3_payload_store(url: str) -> S3BlobStore:
    """`s3://bucket/prefix?endpoint=...&region=...` as a store."""
    parts = urlsplit(url)
    if not parts.netloc:
        raise StorageConfigError(f"KEEL_PAYLOAD_STORE {url!r} names no bucket: s3://bucket/prefix")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    try:
        location = S3Location.resolve(
            parts.netloc, parts.path, query.get("endpoint"), query.get("region"), None, None, None
        )
    except ValueError as err:
        raise StorageConfigError(f"KEEL_PAYLOAD_STORE {url!r}: {err}") from None
    return S3BlobStore(location)


class S3BlobStore(BlobStore):
    def __init__(self, location: S3Location) -> None:
        self._at = location
        self._client: Minio | None = None

    @property
    def location(self) -> str:
        return f"s3://{self._at.bucket}/{self._at.prefix} at {self._at.endpoint}"

    def _s3(self) -> Minio:
        if self._client is None:
            self._client = self._at.client()
        return self._client

    def _blob(self, key: str) -> str:
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            raise BlobNotFound(f"Not a blob key: {key!r}")
        return f"{self._at.prefix}blobs/{key}"

    def _trash(self, key: str) -> str:
        return f"{self._at.prefix}trash/{key}"

    def _owners(self, key: str) -> str:
        return f"{self._at.prefix}owners/{key}/"

    def _error(self, err: BaseException) -> StorageError:
        from minio.error import S3Error

        if isinstance(err, S3Error):
            status = err.response.status if err.response is not None else 0
            if err.code in _DENIED or status in (401, 403):
                return StorageConfigError(f"Payload store {self.location}: access denied ({err.code})")
            if err.code == "NoSuchBucket":
                return StorageConfigError(f"Payload store {self.location}: the bucket does not exist")
            if status >= 500 or err.code in ("SlowDown", "InternalError", "ServiceUnavailable"):
                return StorageUnavailable(f"Payload store {self.location}: {err.code}")
            return StorageError(f"Payload store {self.location}: {err.code}: {err.message}")
        return StorageUnavailable(f"Payload store {self.location} unreachable: {type(err).__name__}: {err}")

    async def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except StorageError:
            raise
        except Exception as err:
            raise self._error(err) from err

    async def put_blobs(self, blobs: Mapping[str, bytes], *, owner: str | None = None) -> None:
        await self._call(self._put, dict(blobs), owner or UNKNOWN_OWNER)

    def _put(self, blobs: dict[str, bytes], owner: str) -> None:
        s3, bucket = self._s3(), self._at.bucket
        for key, data in blobs.items():
            name = self._blob(key)
            mark = os.urandom(16)  # a renewed marker differs from the one a sweep listed, even within its second
            s3.put_object(bucket, self._owners(key) + quote(owner, safe=""), io.BytesIO(mark), len(mark))
            s3.put_object(bucket, name, io.BytesIO(data), len(data))

    async def get_blobs(self, keys: Sequence[str]) -> list[bytes]:
        result: list[bytes] = await self._call(self._get, list(keys))
        return result

    def _get(self, keys: list[str]) -> list[bytes]:
        return [self._read(key) for key in keys]

    def _read(self, key: str) -> bytes:
        """The blob, or the copy a sweep that stopped mid-delete left of it."""
        for name in (self._blob(key), self._trash(key)):
            data = self._object(name)
            if data is not None:
                return data
        raise BlobNotFound(f"Payload {key} is not in the payload store {self.location}")

    def _exists(self, name: str) -> bool:
        from minio.error import S3Error

        try:
            self._s3().stat_object(self._at.bucket, name)
        except S3Error as err:
            if err.code == "NoSuchKey":
                return False
            raise
        return True

    def _object(self, name: str) -> bytes | None:
        from minio.error import S3Error

        try:
            response = self._s3().get_object(self._at.bucket, name)
        except S3Error as err:
            if err.code == "NoSuchKey":
                return None
            raise
        try:
            return bytes(response.read())
        finally:
            response.close()
            response.release_conn()

    def _markers(self, key: str) -> dict[str, tuple[datetime | None, str | None]]:
        listed = self._s3().list_objects(self._at.bucket, prefix=self._owners(key), recursive=True)
        return {o.object_name or "": (o.last_modified, o.etag) for o in listed}

    async def list_blobs(self, *, after: str = "", limit: int = 500) -> list[StoredBlob]:
        result: list[StoredBlob] = await self._call(self._list, after, limit)
        return result

    def _list(self, after: str, limit: int) -> list[StoredBlob]:
        base = f"{self._at.prefix}blobs/"
        found = []
        listed = self._s3().list_objects(self._at.bucket, prefix=base, start_after=base + after, recursive=True)
        for obj in listed:
            key = (obj.object_name or "").removeprefix(base)
            markers = self._markers(key)
            times = [t for t, _ in markers.values() if t is not None]
            last = max([t for t in (obj.last_modified, *times) if t is not None])
            owners = tuple(sorted(unquote(name.rsplit("/", 1)[-1]) for name in markers))
            found.append(StoredBlob(key, obj.size or 0, last, owners))
            if len(found) >= limit:
                break
        return found

    async def delete_blobs(self, keys: Sequence[str], *, put_before: datetime) -> list[str]:
        result: list[str] = await self._call(self._delete, list(keys), put_before)
        return result

    def _delete(self, keys: list[str], put_before: datetime) -> list[str]:
        s3, bucket = self._s3(), self._at.bucket
        deleted = []
        for key in keys:
            before = self._markers(key)
            if any(t is None or t >= put_before for t, _ in before.values()):
                continue  # put again since the sweep looked
            try:
                data = self._read(key)
            except BlobNotFound:
                continue
            s3.put_object(bucket, self._trash(key), io.BytesIO(data), len(data))  # until the delete is settled
            s3.remove_object(bucket, self._blob(key))
            if self._markers(key) != before:  # a put raced the delete: its blob may have gone with it
                s3.put_object(bucket, self._blob(key), io.BytesIO(data), len(data))
                s3.remove_object(bucket, self._trash(key))
                continue
            s3.remove_object(bucket, self._trash(key))
            for name in before:
                s3.remove_object(bucket, name)
            deleted.append(key)
        return deleted

    async def recover(self) -> None:
        await self._call(self._recover)

    def _recover(self) -> None:
        """Each copy a sweep left (it stopped between its delete and settling it) goes back as the blob, unless
        the blob is there again: the sweep that follows judges it anew."""
        s3, bucket, base = self._s3(), self._at.bucket, f"{self._at.prefix}trash/"
        for obj in list(s3.list_objects(bucket, prefix=base, recursive=True)):
            key = (obj.object_name or "").removeprefix(base)
            if not self._exists(self._blob(key)) and (data := self._object(self._trash(key))) is not None:
                s3.put_object(bucket, self._blob(key), io.BytesIO(data), len(data))
            s3.remove_object(bucket, self._trash(key))
