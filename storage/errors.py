"""Storage errors.

Error tree::

    StorageError
     ├── ThreadNotFound
     ├── StorageConfigError
     └── SchemaError            (the database's schema is newer than this Keel, or not Keel's)
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of every storage error."""


class ThreadNotFound(StorageError):
    def __init__(self, thread_id: str) -> None:
        super().__init__(f"Thread {thread_id!r} not found")
        self.thread_id = thread_id


class StorageConfigError(StorageError):
    """A storage URL or option that cannot work."""


class SchemaError(StorageError):
    """The database's schema cannot be used by this version of Keel."""
