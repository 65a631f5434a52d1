"""The rules both backends follow, in one place: paging, attempt numbering, and rows to records.

Timestamps may arrive as datetimes (asyncpg) or ISO strings (SQLite); pydantic parses both. JSON columns
arrive as text in both backends.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import TypeAdapter

from keel.protocol import Content, EventRecord
from keel.storage.events import RunEvent
from keel.storage.threads import StoredMessage, Thread

CONTENT: TypeAdapter[Content] = TypeAdapter(Content)
"""A message's content: a string or a list of parts, stored as JSON."""

THREAD_COLUMNS = "id, resource_id, title, metadata, created_at, updated_at"
MESSAGE_COLUMNS = "id, thread_id, resource_id, role, content, run_id, created_at"
EVENT_COLUMNS = 'run_id, "offset", type, payload, source, attempt, created_at'

REPLACE_MESSAGE = "DO UPDATE SET role = excluded.role, content = excluded.content, run_id = excluded.run_id"
"""The conflict clause of a replacing message insert: new role and content, same place in the thread."""


class Row(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


def check_page(offset: int, limit: int | None) -> None:
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")


def run_start(run_id: str) -> EventRecord:
    """The event a run's first write appends to its thread's run log (`begin_run`'s `announce`)."""
    return EventRecord(type="run-start", payload={"runId": run_id})


def next_attempt(written: int, attempt: int) -> int:
    """The attempt number a renumbered write uses: its own, unless `source` already wrote that one or a later
    one, then the next after the highest written."""
    return attempt if written < attempt else written + 1


def content_json(content: Content) -> str:
    return CONTENT.dump_json(content).decode()


def thread(row: Row) -> Thread:
    return Thread(
        id=row["id"],
        resource_id=row["resource_id"],
        title=row["title"],
        metadata=None if row["metadata"] is None else json.loads(row["metadata"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def message(row: Row) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        role=row["role"],
        content=CONTENT.validate_json(row["content"]),
        run_id=row["run_id"],
        created_at=row["created_at"],
    )


def event(row: Row) -> RunEvent:
    return RunEvent(
        run_id=row["run_id"],
        offset=row["offset"],
        type=row["type"],
        payload=json.loads(row["payload"]),
        source=row["source"],
        attempt=row["attempt"],
        created_at=row["created_at"],
    )
