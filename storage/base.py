"""The storage interface: threads, messages and per-run event logs.

Two backends implement it (`SQLiteStorage`, `PostgresStorage`) and one contract test suite
(`tests/test_storage_contract.py`) runs against both. All methods are async; all writes are idempotent where
the docstring says so, because activities that call them are retried.

Error tree::

    StorageError
     ├── ThreadNotFound
     └── StorageConfigError
"""

from __future__ import annotations

import abc
from datetime import datetime
from typing import Any

from keel.protocol import AgentChunk, Content, EventRecord, Role, WireModel, parse_chunk


class StorageError(Exception):
    """Base of every storage error."""


class ThreadNotFound(StorageError):
    def __init__(self, thread_id: str) -> None:
        super().__init__(f"Thread {thread_id!r} not found")
        self.thread_id = thread_id


class StorageConfigError(StorageError):
    """A storage URL or option that cannot work."""


class Thread(WireModel):
    id: str
    resource_id: str
    title: str | None = None
    metadata: dict[str, Any] | None = None
    created_at: datetime
    updated_at: datetime


class StoredMessage(WireModel):
    """A message in a thread. Ordered by `created_at`, then insertion order."""

    id: str
    thread_id: str
    resource_id: str
    role: Role
    content: Content
    run_id: str | None = None
    created_at: datetime


class RunEvent(EventRecord):
    """One entry of a run's append-only event log: a stored chunk.

    `offset` is dense from 0 per run. `source` names the activity that wrote it (e.g. `model:2`) and `attempt`
    its attempt number: a consumer that sees a higher attempt for a source ignores that source's lower attempts.
    """

    run_id: str
    offset: int
    source: str | None = None
    attempt: int = 1
    created_at: datetime

    def chunk(self) -> AgentChunk | None:
        """The typed Mastra chunk; None for a type or payload this version does not know."""
        return parse_chunk(self.run_id, self)


class Storage(abc.ABC):
    """Threads, messages and run events."""

    @abc.abstractmethod
    async def init(self) -> None:
        """Create the schema if missing. Idempotent; safe to call from several processes."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    # threads
    @abc.abstractmethod
    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Thread:
        """Create a thread; if one with this id exists, return it unchanged (idempotent)."""

    @abc.abstractmethod
    async def get_thread(self, thread_id: str) -> Thread | None: ...

    @abc.abstractmethod
    async def list_threads(
        self, resource_id: str | None = None, *, offset: int = 0, limit: int | None = None
    ) -> tuple[list[Thread], int]:
        """Threads (newest `created_at` first) and the total count before paging."""

    @abc.abstractmethod
    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        resource_id: str | None = None,
    ) -> Thread:
        """Update the given fields and `updated_at`. Raises `ThreadNotFound`."""

    @abc.abstractmethod
    async def delete_thread(self, thread_id: str) -> bool:
        """Delete a thread and its messages; False if it did not exist."""

    # messages
    @abc.abstractmethod
    async def save_messages(self, messages: list[StoredMessage], *, replace: bool = False) -> None:
        """Insert messages; ids already stored are left alone, or with `replace` get the new role and content
        (keeping their place in the thread). Idempotent either way. Touches the thread's `updated_at`.

        `replace` is for a retried activity re-writing the message it owns: the last attempt's content wins.

        Raises `ThreadNotFound` if a message's thread does not exist.
        """

    @abc.abstractmethod
    async def list_messages(
        self, thread_id: str, *, offset: int = 0, limit: int | None = None
    ) -> tuple[list[StoredMessage], int]:
        """Messages of a thread, oldest first, and the total count before paging."""

    @abc.abstractmethod
    async def get_messages(self, ids: list[str]) -> list[StoredMessage]:
        """Messages by id, in the order of `ids`; unknown ids are skipped."""

    @abc.abstractmethod
    async def delete_messages(self, ids: list[str]) -> int:
        """Delete messages by id; returns how many existed."""

    # run events
    @abc.abstractmethod
    async def append_events(
        self, run_id: str, events: list[EventRecord], *, source: str | None = None, attempt: int = 1
    ) -> list[int]:
        """Append events atomically at the end of the run's log; returns their offsets.

        Safe under concurrent appenders for the same run (offsets stay dense and unique).
        """

    @abc.abstractmethod
    async def write(
        self,
        run_id: str,
        *,
        messages: list[StoredMessage] | None = None,
        replace: bool = False,
        events: list[EventRecord] | None = None,
        source: str | None = None,
        attempt: int = 1,
        renumber: bool = False,
    ) -> int:
        """Save messages (as `save_messages`) and append events (as `append_events`) in one transaction.

        What an activity attempt writes, written at once: one round trip, and never the message without its
        events. With `renumber`, the events get `attempt`, or one more than the highest attempt `source` already
        wrote if that is not lower: a step executed again (a local activity re-run after a lost workflow task
        starts again at attempt 1) then reads as a retry. Returns the attempt the events were written with.
        """

    @abc.abstractmethod
    async def read_events(self, run_id: str, *, offset: int = 0, limit: int | None = None) -> list[RunEvent]:
        """Events with `offset >= offset`, in order. Another process may read while one appends."""
