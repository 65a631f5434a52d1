"""The reading half of `S3Filesystem` and its requests: workspace paths as object keys, the `minio` calls, and
every read as a synchronous method raising the workspace's errors (run in worker threads: minio blocks). It is
the `TreeSource` and `GrepSource` that `list_files` and `grep` walk, so their text is the local filesystem's.
The writes are in `s3_writes`.

Keys: a path is checked as a local one is (`paths.check_form`; `..` above the root and absolute paths refused),
normalised, and appended to the prefix, which always ends in ``/``: prefix ``ws/`` never reaches ``ws2/``.

Directories are key prefixes. `mkdir` writes a marker (an empty object ``dir/``), because an agent that creates a
directory expects to see it listed before it writes into it; and removing the last entry of a directory writes
its marker, so the directory stays as it would on a disk (S3 would make it vanish). A directory exists when any
key starts with ``dir/``. Both markers and plain prefixes are what other S3 tools (the console, s3fs, rclone)
read as directories. A file's mtime is its ``x-amz-meta-mtime`` (set by every write here, in milliseconds, as
rclone and s3fs set it), else its LastModified (whole seconds): the ``expected_mtime`` check compares it in
milliseconds, as for a local file.
"""

from __future__ import annotations

import posixpath
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypeVar

from keel.workspace_providers.errors import (
    DirectoryNotFound,
    FileNotFound,
    FilesystemError,
    IsDirectory,
    NotDirectory,
    PermissionDenied,
    WorkspaceError,
)
from keel.workspace_providers.file_tree import Listing
from keel.workspace_providers.local_filesystem import MAX_READ_BYTES as _MAX_READ_BYTES
from keel.workspace_providers.local_filesystem import mime_type
from keel.workspace_providers.paths import check_form, expand_tilde
from keel.workspace_providers.s3_client import S3Location, s3_code, translate
from keel.workspace_providers.types import FileEntry, FileStat

if TYPE_CHECKING:
    from minio import Minio
    from minio.datatypes import Object

T = TypeVar("T")
Parts = tuple[str, ...]

MAX_READ_BYTES = _MAX_READ_BYTES
"""Reading (and grepping, editing) a larger object is refused, as for a local file."""
MTIME = "x-amz-meta-mtime"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_OUTSIDE = 'access (path is outside the workspace; use a path relative to the workspace root, without a leading "/")'


@dataclass(frozen=True)
class Head:
    """An object's size, ETag (unquoted) and times."""

    size: int
    etag: str
    modified: datetime
    created: datetime


def mtime_ms(moment: datetime) -> int:
    """Milliseconds since the epoch (naive = UTC): the precision mtimes are compared at."""
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
    return (aware - _EPOCH) // timedelta(milliseconds=1)


def mtime_stamp() -> str:
    """Now, as the ``x-amz-meta-mtime`` of a write."""
    ms = time.time_ns() // 1_000_000
    return f"{ms // 1000}.{ms % 1000:03d}"


def _mtime(value: str | None, fallback: datetime) -> datetime:
    """``x-amz-meta-mtime`` (Unix seconds, fractional as rclone writes them) to the millisecond, else `fallback`."""
    try:
        return _EPOCH + timedelta(milliseconds=int(Decimal(value or "") * 1000))
    except (InvalidOperation, ValueError, OverflowError):
        return fallback


def parent_of(path: str) -> str:
    """The directory a caller path is in, as the local filesystem's errors name it."""
    return posixpath.dirname(path.rstrip("/")) or "."


SEEN_KEYS = 4096
"""Keys an `S3Objects` remembers as there (`S3Objects.saw`)."""


class S3Objects:
    """The operations on caller paths under `location`; every method raises workspace errors only."""

    def __init__(self, location: S3Location) -> None:
        self.loc = location
        self._client: Minio | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, None] = OrderedDict()

    def saw(self, key: str, there: bool = True) -> None:
        """Remember that the object at `key` is there (read, written) or not (deleted): a hint only
        (`write` creates a file it has not seen in the round trip of its checks), never a reason to skip one;
        the last `SEEN_KEYS` keys."""
        with self._lock:
            if not there:
                self._seen.pop(key, None)
                return
            self._seen[key] = None
            self._seen.move_to_end(key)
            if len(self._seen) > SEEN_KEYS:
                self._seen.popitem(last=False)

    def seen(self, key: str) -> bool:
        with self._lock:
            return key in self._seen

    @property
    def client(self) -> Minio:
        with self._lock:
            if self._client is None:
                self._client = self.loc.client()
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._client, self._pool = None, None

    def concurrently(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        """Independent requests at once (a write's checks): one round trip instead of one per call. The first
        is made in this thread (no hand-off for it), the others in the pool; every one has ended on return."""
        if len(calls) < 2:
            return [call() for call in calls]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(8, thread_name_prefix="keel-s3")
            pool = self._pool
        others = [pool.submit(call) for call in calls[1:]]
        try:
            first = calls[0]()
        finally:
            wait(others)
        return [first, *(f.result() for f in others)]

    @contextmanager
    def failing(self, path: str) -> Iterator[None]:
        """Any other exception of the block as the workspace error `translate` gives it."""
        try:
            yield
        except WorkspaceError:
            raise
        except Exception as err:
            raise translate(err, path, self.loc) from err

    # --- paths ---------------------------------------------------------------------------------------------

    def parts(self, path: str) -> Parts:
        """`path`'s components under the prefix; `PermissionDenied` for one leaving it, as a local path would."""
        check_form(path)
        expanded = expand_tilde(path)
        if expanded.startswith("/"):
            raise PermissionDenied(path, self._absolute_hint(path))
        normal = posixpath.normpath(expanded)
        if normal == ".." or normal.startswith("../"):
            raise PermissionDenied(path, "access")
        return tuple(p for p in normal.split("/") if p not in ("", "."))

    def _absolute_hint(self, path: str) -> str:
        """Mastra's text for an absolute path: name the relative one when its first component exists here."""
        stripped = path.lstrip("/")
        if not path.startswith("/") or not stripped:
            return "access"
        first = stripped.split("/", 1)[0]
        try:
            exists = first not in (".", "..") and (self.head(self.key((first,))) or self.first_under((first,)))
        except Exception:
            exists = False
        return f'access (path is outside the workspace; use a relative path like "{stripped}")' if exists else _OUTSIDE

    def key(self, parts: Parts) -> str:
        return self.loc.prefix + "/".join(parts)

    def dir_key(self, parts: Parts) -> str:
        return f"{self.key(parts)}/" if parts else self.loc.prefix

    # --- single requests ---------------------------------------------------------------------------------

    def head(self, key: str) -> Head | None:
        try:
            obj = self.client.stat_object(self.loc.bucket, key)
        except Exception as err:
            if s3_code(err) == "NoSuchKey":
                return None
            raise
        self.saw(key)
        created = obj.last_modified or _EPOCH
        mtime = obj.metadata.get(MTIME) if obj.metadata is not None else None
        return Head(obj.size or 0, (obj.etag or "").strip('"'), _mtime(mtime, created), created)

    def first_under(self, parts: Parts) -> Object | None:
        """The first object whose key starts with the directory's prefix (its marker, when it has one)."""
        found = self.client._list_objects(self.loc.bucket, prefix=self.dir_key(parts), max_keys=1, encoding_type="url")
        return next(iter(found), None)

    def is_dir(self, parts: Parts) -> bool:
        return not parts or self.first_under(parts) is not None

    def list_all(self, parts: Parts) -> list[Object]:
        return list(self.client.list_objects(self.loc.bucket, prefix=self.dir_key(parts), recursive=True))

    def put(self, key: str, data: bytes, condition: dict[str, str] | None = None) -> None:
        """One PUT. minio's `put_object` turns every header it does not know into user metadata, so the
        conditional ones (``If-Match``, ``If-None-Match``) go through the single-part PUT it makes itself."""
        content_type = "application/x-directory" if key.endswith("/") else mime_type(key)
        headers: dict[str, Any] = {"Content-Type": content_type, MTIME: mtime_stamp(), **(condition or {})}
        self.client._put_object(self.loc.bucket, key, data, headers=headers)
        self.saw(key)

    def delete(self, key: str) -> None:
        self.saw(key, there=False)
        self.client.remove_object(self.loc.bucket, key)

    def put_if(self, key: str, data: bytes, condition: dict[str, str]) -> bool:
        """A conditional PUT; False when its precondition failed (another writer got there first)."""
        try:
            self.put(key, data, condition)
        except Exception as err:
            if s3_code(err) != "PreconditionFailed":
                raise
            return False
        return True

    def remove(self, keys: Sequence[str], path: str) -> None:
        """Delete `keys` in batches of 1,000 (in order: a folder after what it held)."""
        from minio.deleteobjects import DeleteObject

        for key in keys:
            self.saw(key, there=False)
        for start in range(0, len(keys), 1000):
            batch = [DeleteObject(k) for k in keys[start : start + 1000]]
            failed = list(self.client.remove_objects(self.loc.bucket, batch))
            if failed:
                raise FilesystemError(f"Failed to delete {len(failed)} object(s) in {path}: {failed[0].message}", path)

    # --- TreeSource / GrepSource -------------------------------------------------------------------------

    def kind(self, path: str) -> str:
        parts = self.parts(path)
        with self.failing(path):
            if not parts:
                return "directory"
            if self.head(self.key(parts)) is not None:
                return "file"
            if self.is_dir(parts):
                return "directory"
            raise FileNotFound(path)

    def scan(self, path: str) -> Listing:
        parts = self.parts(path)
        prefix = self.dir_key(parts)
        with self.failing(path):
            entries: list[FileEntry] = []
            seen = False
            for obj in self.client.list_objects(self.loc.bucket, prefix=prefix):
                seen, name = True, (obj.object_name or "")[len(prefix) :]
                if obj.is_dir and name.rstrip("/"):
                    entries.append(FileEntry(name.rstrip("/"), "directory"))
                elif name and not obj.is_dir:
                    entries.append(FileEntry(name, "file", obj.size or 0))
            if not seen and parts:
                raise NotDirectory(path) if self.head(self.key(parts)) else DirectoryNotFound(path)
        return [(e, None) for e in sorted(entries, key=lambda e: e.name)]

    def get(self, path: str) -> tuple[bytes, Head]:
        parts = self.parts(path)
        with self.failing(path):
            if not parts:
                raise IsDirectory(path)
            try:
                response = self.client.get_object(self.loc.bucket, self.key(parts))
            except Exception as err:
                if s3_code(err) != "NoSuchKey":
                    raise
                raise (IsDirectory(path) if self.is_dir(parts) else FileNotFound(path)) from None
            try:
                headers = response.headers
                size = int(headers.get("Content-Length") or 0)
                if size > MAX_READ_BYTES:
                    message = f"File too large to read ({size} bytes, at most {MAX_READ_BYTES}): {path}"
                    raise FilesystemError(message, path)
                data = response.read()
            finally:
                response.close()
                response.release_conn()
            self.saw(self.key(parts))
        stamp = headers.get("Last-Modified")
        created = parsedate_to_datetime(stamp) if stamp else _EPOCH
        etag = (headers.get("ETag") or "").strip('"')
        return data, Head(len(data), etag, _mtime(headers.get(MTIME), created), created)

    def read_text(self, path: str) -> str:
        return self.get(path)[0].decode("utf-8", "replace")

    def gitignore(self) -> str | None:
        try:
            return self.read_text(".gitignore")
        except FileNotFound:
            return None

    # --- reading -----------------------------------------------------------------------------------------

    def stat(self, path: str) -> FileStat:
        parts = self.parts(path)
        relative = "/".join(parts) or "."
        name = parts[-1] if parts else (self.loc.prefix.rstrip("/").rsplit("/", 1)[-1] or self.loc.bucket)
        with self.failing(path):
            head = self.head(self.key(parts)) if parts else None
            if head is not None:
                return FileStat(name, relative, "file", head.size, head.created, head.modified, mime_type(name))
            first = self.first_under(parts)
            if first is None and parts:
                raise FileNotFound(path)
            moment = (first.last_modified if first else None) or _EPOCH
            return FileStat(name, relative, "directory", 0, moment, moment, None)

    def readdir(self, path: str, *, recursive: bool, extension: str | None) -> list[FileEntry]:
        def wanted(entry: FileEntry) -> bool:
            ext = posixpath.splitext(posixpath.basename(entry.name))[1]
            return not extension or entry.type == "directory" or extension in (ext, ext[1:])

        if not recursive:
            return [e for e, _ in self.scan(path) if wanted(e)]
        parts = self.parts(path)
        prefix = self.dir_key(parts)
        with self.failing(path):
            objects = self.list_all(parts)
            if not objects and parts:
                raise NotDirectory(path) if self.head(self.key(parts)) else DirectoryNotFound(path)
        found: dict[str, FileEntry] = {}
        for obj in objects:
            relative = (obj.object_name or "")[len(prefix) :]
            names = relative.split("/")
            for depth in range(1, len(names)):
                folder = "/".join(names[:depth])
                found.setdefault(folder + "/", FileEntry(folder, "directory"))
            if names[-1]:
                found[relative] = FileEntry(relative, "file", obj.size or 0)
        entries = sorted(found.values(), key=lambda e: e.name.split("/"))
        return [e for e in entries if wanted(e)]
