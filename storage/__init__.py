"""Storage for threads, messages and run events, and `open_storage` to pick a backend from a URL."""

from __future__ import annotations

from urllib.parse import urlsplit

from keel.protocol import EventRecord
from keel.protocol.settings import load_settings
from keel.storage.base import Storage
from keel.storage.blobs import BlobNotFound, BlobStore, DirectoryBlobStore, blob_key
from keel.storage.errors import (
    DatabaseNotFound,
    SchemaError,
    StorageConfigError,
    StorageError,
    StorageUnavailable,
    ThreadNotFound,
)
from keel.storage.events import EventStore, RunEvent
from keel.storage.postgres import PostgresStorage
from keel.storage.sqlite import SQLiteStorage
from keel.storage.steps import StepAnswer, StepRecord, StepStore
from keel.storage.threads import StoredMessage, Thread, ThreadStore

__all__ = [
    "BlobNotFound",
    "BlobStore",
    "DatabaseNotFound",
    "DirectoryBlobStore",
    "EventRecord",
    "EventStore",
    "PostgresStorage",
    "RunEvent",
    "SQLiteStorage",
    "SchemaError",
    "StepAnswer",
    "StepRecord",
    "StepStore",
    "Storage",
    "StorageConfigError",
    "StorageError",
    "StorageUnavailable",
    "StoredMessage",
    "Thread",
    "ThreadNotFound",
    "ThreadStore",
    "blob_key",
    "open_payload_store",
    "open_storage",
]

_SQLITE_PREFIX = "sqlite:///"


def open_storage(url: str | None = None) -> Storage:
    """Build the storage backend a URL names. Does not connect or create the schema: call `init()`.

    Args:
        url: `sqlite:///relative/path.db` (relative to the working directory), `sqlite:////abs/path.db`,
            or `postgresql://...` / `postgres://...`. None: the settings' (`KEEL_STORAGE_URL`, by default
            `keel.db` in `KEEL_DATA_DIR`).

    Returns:
        An unopened `Storage`.

    Raises:
        StorageConfigError: The URL names no supported backend.
    """
    if url is None:
        url = load_settings().storage_url
        assert url is not None  # derived from the data directory when not set
    scheme = urlsplit(url).scheme.lower()
    if scheme == "sqlite":
        # Not urlsplit's path: "sqlite:///rel" and "sqlite:////abs" differ only in the slash count, the
        # SQLAlchemy convention users know.
        path = url[len(_SQLITE_PREFIX) :] if url.lower().startswith(_SQLITE_PREFIX) else ""
        if not path:
            raise StorageConfigError(
                f"Bad SQLite storage URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
            )
        return SQLiteStorage(path)
    if scheme in ("postgresql", "postgres"):
        return PostgresStorage(url)
    raise StorageConfigError(
        f"Unsupported storage URL {url!r}: expected sqlite:///path.db, postgresql://... or postgres://..."
    )


def open_payload_store(url: str | None = None, *, storage_url: str | None = None) -> BlobStore:
    """Where values too large for Temporal's history go. Every client and worker of one Keel must use the same.

    Args:
        url: a directory (`/path/dir` or `file:///path/dir`) or a `postgresql://` URL (its `payloads` table);
            None reads `KEEL_PAYLOAD_STORE`, else follows the storage (`storage_url`, else `KEEL_STORAGE_URL`):
            SQLite's `payloads` folder beside the database file, or PostgreSQL's table.
    """
    url = url or load_settings().payload_store
    if not url:
        return open_storage(storage_url).payloads()
    if urlsplit(url).scheme.lower() in ("postgresql", "postgres"):
        return PostgresStorage(url)
    return DirectoryBlobStore(url.removeprefix("file://"))
