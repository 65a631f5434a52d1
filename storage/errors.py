"""Storage errors.

Error tree::

    StorageError
     ├── ThreadNotFound         (deterministic: the thread does not exist)
 ├── ThreadExists           (deterministic: a thread to be made new has an id one has already)
     ├── StorageConfigError     (deterministic: a URL or option that cannot work)
     ├── SchemaError            (deterministic: no Keel schema, or one older or newer than this Keel)
     ├── DatabaseNotFound       (deterministic: a reader found no database where the URL points)
     └── StorageUnavailable     (transient: cannot connect, connection lost, database busy)
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of every storage error."""


class ThreadNotFound(StorageError):
    def __init__(self, thread_id: str) -> None:
        super().__init__(f"Thread {thread_id!r} not found")
        self.thread_id = thread_id


class ThreadExists(StorageError):
    def __init__(self, thread_id: str) -> None:
        super().__init__(f"Thread {thread_id} already exists")
        self.thread_id = thread_id


class StorageConfigError(StorageError):
    """A storage URL or option that cannot work."""


class SchemaError(StorageError):
    """The database's schema cannot be used by this version of Keel."""


class DatabaseNotFound(StorageError):
    """A reader's URL points where no Keel database is; only `init()` (a worker, `keel migrate`) creates one."""


class StorageUnavailable(StorageError):
    """The database cannot be reached or is busy right now; the same call may succeed later."""
