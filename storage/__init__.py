"""Storage for threads, messages and run events, and `open_storage` to pick a backend from a URL.

The payload stores' base (`keel.storage.blobs`) and the errors are imported with the package; the other names,
the backends among them, on first use: a client that only needs the payload store (`keel runs`, through
`keel.client.connection`) does not load the storage models, nor SQLite's or PostgreSQL's code.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from keel.protocol.settings import load_settings
from keel.storage.blobs import BlobNotFound, BlobStore, DirectoryBlobStore, StoredBlob, blob_key, sweep_blobs
from keel.storage.errors import (
    DatabaseNotFound,
    SchemaError,
    StorageConfigError,
    StorageError,
    StorageUnavailable,
    ThreadExists,
    ThreadNotFound,
)

_EXPORTS: dict[str, str] = {
    "EventRecord": "keel.protocol",
    "Storage": "keel.storage.base",
    "EventStore": "keel.storage.events",
    "RunEvent": "keel.storage.events",
    "LogQuery": "keel.storage.logs",
    "LogRetention": "keel.storage.logs",
    "LogStore": "keel.storage.logs",
    "StoredLog": "keel.storage.logs",
    "PostgresStorage": "keel.storage.postgres",
    "SQLiteStorage": "keel.storage.sqlite",
    "SpanQuery": "keel.storage.spans",
    "SpanRetention": "keel.storage.spans",
    "SpanStore": "keel.storage.spans",
    "StoredSpan": "keel.storage.spans",
    "TimeRange": "keel.storage.spans",
    "StepAnswer": "keel.storage.steps",
    "StepRecord": "keel.storage.steps",
    "StepStore": "keel.storage.steps",
    "StoredMessage": "keel.storage.threads",
    "Thread": "keel.storage.threads",
    "ThreadStore": "keel.storage.threads",
}

__all__ = [
    "BlobNotFound",
    "BlobStore",
    "DatabaseNotFound",
    "DirectoryBlobStore",
    "EventRecord",
    "EventStore",
    "LogQuery",
    "LogRetention",
    "LogStore",
    "PostgresStorage",
    "RunEvent",
    "SQLiteStorage",
    "SchemaError",
    "SpanQuery",
    "SpanRetention",
    "SpanStore",
    "StepAnswer",
    "StepRecord",
    "StepStore",
    "Storage",
    "StorageConfigError",
    "StorageError",
    "StorageUnavailable",
    "StoredBlob",
    "StoredLog",
    "StoredMessage",
    "StoredSpan",
    "Thread",
    "ThreadExists",
    "ThreadNotFound",
    "ThreadStore",
    "TimeRange",
    "blob_key",
    "open_payload_store",
    "open_storage",
    "sweep_blobs",
]

if TYPE_CHECKING:
    from keel.protocol import EventRecord
    from keel.storage.base import Storage
    from keel.storage.events import EventStore, RunEvent
    from keel.storage.logs import LogQuery, LogRetention, LogStore, StoredLog
    from keel.storage.postgres import PostgresStorage
    from keel.storage.spans import SpanQuery, SpanRetention, SpanStore, StoredSpan, TimeRange
    from keel.storage.sqlite import SQLiteStorage
    from keel.storage.steps import StepAnswer, StepRecord, StepStore
    from keel.storage.threads import StoredMessage, Thread, ThreadStore


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keel.storage' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


_SQLITE_PREFIX = "sqlite:///"


def _sqlite_path(url: str) -> str | None:
    """The database file of a `sqlite:` URL; None for another scheme. Raises `StorageConfigError` for a `sqlite:`
    URL without a path."""
    if urlsplit(url).scheme.lower() != "sqlite":
        return None
    # Not urlsplit's path: "sqlite:///rel" and "sqlite:////abs" differ only in the slash count, the SQLAlchemy
    # convention users know.
    path = url[len(_SQLITE_PREFIX) :] if url.lower().startswith(_SQLITE_PREFIX) else ""
    if not path:
        raise StorageConfigError(
            f"Bad SQLite storage URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
        )
    return path


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
    path = _sqlite_path(url)
    if path is not None:
        from keel.storage.sqlite import SQLiteStorage

        return SQLiteStorage(path)
    if urlsplit(url).scheme.lower() in ("postgresql", "postgres"):
        from keel.storage.postgres import PostgresStorage

        return PostgresStorage(url)
    raise StorageConfigError(
        f"Unsupported storage URL {url!r}: expected sqlite:///path.db, postgresql://... or postgres://..."
    )


def open_payload_store(url: str | None = None, *, storage_url: str | None = None) -> BlobStore:
    """Where values too large for Temporal's history go. Every client and worker of one Keel must use the same.

    Args:
        url: a directory (`/path/dir` or `file:///path/dir`), a `postgresql://` URL (its `payloads` table) or
            `s3://bucket/prefix[?endpoint=http://host:port&region=...]` (credentials: the AWS variables);
            None reads `KEEL_PAYLOAD_STORE`, else follows the storage (`storage_url`, else `KEEL_STORAGE_URL`):
            SQLite's `payloads` folder beside the database file, or PostgreSQL's table.
    """
    url = url or load_settings().payload_store
    if not url:
        if storage_url is None:
            storage_url = load_settings().storage_url
            assert storage_url is not None  # derived from the data directory when not set
        path = _sqlite_path(storage_url)
        if path is not None:
            # `SQLiteStorage(path).payloads()`, without loading the SQLite backend: a client (`keel runs`) needs
            # only this folder (tests/test_cli_imports.py checks that both are the same).
            return DirectoryBlobStore(Path(path).parent / "payloads")
        return open_storage(storage_url).payloads()
    if urlsplit(url).scheme.lower() in ("postgresql", "postgres"):
        from keel.storage.postgres import PostgresStorage

        return PostgresStorage(url)
    if urlsplit(url).scheme.lower() == "s3":
        from keel.storage.s3_blobs import s3_payload_store

        return s3_payload_store(url)
    return DirectoryBlobStore(url.removeprefix("file://"))
