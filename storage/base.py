"""The storage interface: every domain's store, plus the one write that spans domains.

Two backends implement it (`SQLiteStorage`, `PostgresStorage`) and one contract test suite
(`tests/test_storage_contract.py`) runs against both. Each domain has its own module (`threads.py`, `events.py`,
`steps.py` for what each step of a run did, `blobs.py` for values too large for Temporal's history,
`definitions.py` for stored workflow definitions, `search_index.py` for workspaces' search indexes, `spans.py` for
trace spans, `logs.py` for log records), each
backend one module per domain, and `rules.py` the rules both backends follow. The schema is created and upgraded
by numbered migrations per dialect (`schema/<dialect>/NNNN_name.sql`, `migrations.py`), applied by `init()`.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from keel.protocol import EventRecord
from keel.storage import migrations
from keel.storage.blobs import BlobStore
from keel.storage.definitions import DefinitionStore
from keel.storage.errors import SchemaError
from keel.storage.events import EventStore
from keel.storage.logs import LogStore
from keel.storage.search_index import SearchIndexes
from keel.storage.spans import SpanStore
from keel.storage.steps import StepAnswer, StepStore
from keel.storage.threads import StoredMessage, ThreadStore


class Storage(ThreadStore, EventStore, StepStore, DefinitionStore, SearchIndexes, SpanStore, LogStore, abc.ABC):
    """Threads, messages, run events, what each step of a run did, stored workflow definitions, workspaces'
    search indexes, trace spans and log records."""

    dialect: ClassVar[migrations.Dialect]

    @abc.abstractmethod
    async def init(self) -> None:
        """Create or upgrade the schema (pending migrations, under a lock). Idempotent; safe to call from several
        processes at once. Raises `SchemaError` for a database whose schema is newer than this Keel."""

    @abc.abstractmethod
    async def schema_version(self) -> int:
        """The highest migration applied to the database (0 for a database Keel never initialised)."""

    async def check_schema(self) -> None:
        """For a reader, which must not migrate (a read-only role cannot): raise `DatabaseNotFound` or
        `SchemaError` unless the database has exactly the schema this Keel writes."""
        version, known = await self.schema_version(), migrations.latest(self.dialect)
        if version == 0:
            raise SchemaError("The database has no Keel schema yet: start a worker, or run `keel migrate`")
        if version < known:
            raise SchemaError(
                f"The database schema is at version {version} and this Keel needs {known}: run `keel migrate` "
                "(or start an upgraded worker)"
            )
        migrations.pending(self.dialect, version)  # raises for a schema newer than this Keel

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    def payloads(self) -> BlobStore:
        """Where this storage keeps values too large for Temporal's history (SQLite: a `payloads` folder beside
        the database file; PostgreSQL: its `payloads` table)."""

    @abc.abstractmethod
    async def begin_run(
        self, run_id: str, execution_id: str, thread_id: str, resource_id: str, *, announce: str | None = None
    ) -> str:
        """A run's first write, in one transaction: claim `run_id` for `execution_id` (as `claim_run`) and, when
        the claim is this execution's, create the thread (as `create_thread`) and append a `run-start` event
        `{runId}` to the log `announce` (a thread's run log, which subscribers watch). Returns the run id's
        owner."""

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
        answer: StepAnswer | None = None,
        also: tuple[str, list[EventRecord]] | None = None,
        once: bool = False,
    ) -> int:
        """Save messages (as `save_messages`) and append events (as `append_events`) in one transaction;
        with `answer`, store a model step's answer too (`begin_step` finds it); with `also`, append events to a
        second log (a session's, for its turn's steps) under the same source and attempt. With `once`, the events
        are appended only if `source` wrote none to this log yet (a retried write of the same batch adds nothing).

        What an activity attempt writes, written at once: one round trip, and never the message without its
        events. With `renumber`, the events get `attempt`, or the next one after what `source` already wrote
        (`rules.next_attempt`): a step executed again (a local activity re-run after a lost workflow task starts
        again at attempt 1) then reads as a retry. Returns the attempt the events were written with.
        """
