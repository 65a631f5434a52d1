"""The run-events domain: each run's append-only log of stream chunks, readable from any offset, and which
execution a run id belongs to."""

from __future__ import annotations

import abc
from datetime import datetime

from keel.protocol import AgentChunk, EventRecord, parse_chunk


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


class EventStore(abc.ABC):
    """Per-run event logs."""

    @abc.abstractmethod
    async def append_events(
        self, run_id: str, events: list[EventRecord], *, source: str | None = None, attempt: int = 1
    ) -> list[int]:
        """Append events atomically at the end of the run's log; returns their offsets.

        Safe under concurrent appenders for the same run (offsets stay dense and unique).
        """

    @abc.abstractmethod
    async def claim_run(self, run_id: str, execution_id: str) -> str:
        """Record that `run_id` belongs to `execution_id` (Temporal's first execution run id, the same across
        continue-as-new) unless it already belongs to one; returns the owner. Idempotent."""

    @abc.abstractmethod
    async def read_events(self, run_id: str, *, offset: int = 0, limit: int | None = None) -> list[RunEvent]:
        """Events with `offset >= offset`, in order. Another process may read while one appends."""
