"""A worker-local cache of threads' messages, so a model step reads only what is new since the last step.

Without it each step reads and decodes the whole thread: O(N) per step, O(N^2) per run. The cache is checked
against storage on every read (the last cached message must still be at its position), so a thread edited by
another process is reloaded in full; a different worker simply starts with an empty cache.
"""

from __future__ import annotations

from collections import OrderedDict

from keel.protocol import MessageRecord
from keel.storage import Storage, StoredMessage

DEFAULT_MAX_THREADS = 256


class ThreadCache:
    def __init__(self, storage: Storage, max_threads: int = DEFAULT_MAX_THREADS) -> None:
        self._storage = storage
        self._max = max_threads
        self._threads: OrderedDict[str, list[MessageRecord]] = OrderedDict()

    async def messages(self, thread_id: str, *, before: str | None = None) -> list[MessageRecord]:
        """The thread's messages, oldest first (a fresh list the caller may keep).

        Args:
            before: a message id; if the thread holds it, only the messages before it are returned (and kept).
                A retried model step passes its own message id: what an earlier attempt wrote is not context,
                and the retry will replace it.
        """
        cached = self._threads.pop(thread_id, [])
        if cached:
            # Re-read from the last cached message: it must still be there, or the thread changed under us.
            tail, total = await self._storage.list_messages(thread_id, offset=len(cached) - 1)
            if tail and tail[0].id == cached[-1].id and total == len(cached) + len(tail) - 1:
                cached.extend(_record(m) for m in tail[1:])
            else:
                cached = []
        if not cached:
            everything, _ = await self._storage.list_messages(thread_id)
            cached = [_record(m) for m in everything]
        if before is not None:
            cut = next((i for i, m in enumerate(cached) if m.id == before), None)
            if cut is not None:
                del cached[cut:]
        self._threads[thread_id] = cached
        while len(self._threads) > self._max:
            self._threads.popitem(last=False)
        return list(cached)


def _record(m: StoredMessage) -> MessageRecord:
    return MessageRecord(id=m.id, role=m.role, content=m.content)
