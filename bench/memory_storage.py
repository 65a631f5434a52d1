"""A bound for `bench.floor --bounds`, not a storage: the calls of a Keel generate's steps answered from memory.

`RunCallsInMemory(storage)` is `storage` except for the ten calls one `floor` generate makes (`begin_run`,
`begin_step`, `write`, `list_messages`, `run_messages`), which keep the thread's messages in a dict and store
nothing else: no claim, no event log, no step answer, nothing a crash could find again. A Keel generate run on it
costs what Keel's generate would cost if its durable record were free, so `Keel (storage in memory)/(b)` bounds
from above what any cheaper storage could give: taking it off the run's critical path, batching, another
database. Only for the bench's one agent, and only as long as nothing fails: a retried write (`replace`, `once`)
appends its messages again. Every other call goes to `storage`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from keel.storage import Storage
from keel.storage.steps import StepRecord
from keel.storage.threads import StoredMessage


class RunCallsInMemory:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._messages: dict[str, list[StoredMessage]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    async def begin_run(
        self, run_id: str, execution_id: str, thread_id: str, resource_id: str, *, announce: str | None = None
    ) -> str:
        return execution_id

    async def begin_step(
        self, run_id: str, *, answer_id: str | None = None, tool_ids: Sequence[str] = ()
    ) -> StepRecord:
        return StepRecord(attempts=dict.fromkeys(tool_ids, 1))

    async def write(
        self, run_id: str, *, messages: list[StoredMessage] | None = None, attempt: int = 1, **_: Any
    ) -> int:
        for message in messages or ():
            self._messages.setdefault(message.thread_id, []).append(message)
        return attempt

    async def list_messages(
        self, thread_id: str, *, offset: int = 0, limit: int | None = None
    ) -> tuple[list[StoredMessage], int]:
        messages = self._messages.get(thread_id, [])
        end = None if limit is None else offset + limit
        return messages[offset:end], len(messages)

    async def run_messages(self, thread_id: str, run_id: str) -> list[StoredMessage]:
        return [m for m in self._messages.get(thread_id, []) if m.run_id == run_id]
