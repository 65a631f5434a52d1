"""The threads-and-messages domain: a thread is a conversation of one resource; messages are its turns."""

from __future__ import annotations

import abc
from datetime import datetime
from typing import Any

from keel.protocol import Content, Role, WireModel

FORKED_SUBAGENT = "forkedSubagent"
"""Metadata of a thread copied for a forked subagent: a session's thread list leaves it out."""


class Thread(WireModel):
    id: str
    resource_id: str
    title: str | None = None
    metadata: dict[str, Any] | None = None
    created_at: datetime
    updated_at: datetime

    def controller_json(self) -> dict[str, Any]:
        """Mastra's `AgentControllerThread`, as a session's events and thread routes give it."""
        return {
            "id": self.id,
            "resourceId": self.resource_id,
            "title": self.title or "",
            "createdAt": self.created_at.isoformat(),
            "updatedAt": self.updated_at.isoformat(),
        }


class StoredMessage(WireModel):
    """A message in a thread. Ordered by `created_at`, then insertion order."""

    id: str
    thread_id: str
    resource_id: str
    role: Role
    content: Content
    run_id: str | None = None
    created_at: datetime


class ThreadStore(abc.ABC):
    """Threads and their messages. Writes are idempotent where the docstring says so: activities retry them."""

    @abc.abstractmethod
    async def create_thread(
        self,
        thread_id: str,
        resource_id: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        new: bool = False,
    ) -> Thread:
        """Create a thread; if one with this id exists, return it unchanged (idempotent), or with `new` raise
        `ThreadExists` (of callers racing to make one id, exactly one makes it)."""

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
    async def merge_thread_metadata(self, thread_id: str, updates: dict[str, Any]) -> dict[str, Any]:
        """Set the given metadata keys (a None value removes the key) in one transaction, others untouched; the
        metadata after. Raises `ThreadNotFound`. (A session's thread settings: mode, per-mode models, tasks.)"""

    @abc.abstractmethod
    async def delete_thread(self, thread_id: str) -> bool:
        """Delete a thread and its messages; False if it did not exist."""

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
    async def run_messages(self, thread_id: str, run_id: str) -> list[StoredMessage]:
        """The messages one run wrote to a thread, oldest first."""

    @abc.abstractmethod
    async def get_messages(self, ids: list[str]) -> list[StoredMessage]:
        """Messages by id, in the order of `ids`; unknown ids are skipped."""

    @abc.abstractmethod
    async def delete_messages(self, ids: list[str]) -> int:
        """Delete messages by id; returns how many existed."""
