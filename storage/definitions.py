"""The stored-workflow domain: workflow definitions as JSON, versioned. Saving a definition whose content
changed adds a version (the same content again is a no-op); a run pins the version it started with and reads it
by number, so versions are never changed or removed; deleting a workflow hides it (and its schedules) from
listings and new runs only.
"""

from __future__ import annotations

import abc
import hashlib
import json
from datetime import datetime
from typing import Any, Literal

from keel.protocol import WireModel

Status = Literal["active", "archived"]

CREATED_RUN_DAYS = 7
"""How long a run named by `create-run` (and not started since, or started: the row is not needed then) keeps
its resource id: what a client takes between creating a run and starting it, with a wide margin."""


def definition_hash(definition: dict[str, Any]) -> str:
    """SHA-256 of the definition's canonical JSON (sorted keys, no spaces), 16 hex digits: a version's name."""
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class StoredDefinition(WireModel):
    """One version of a stored workflow, with the workflow's current row (status, author, dates)."""

    workflow_id: str
    version: int
    hash: str
    definition: dict[str, Any]
    status: Status = "active"
    author_id: str | None = None
    deleted: bool = False
    created_at: datetime
    updated_at: datetime


class DefinitionStore(abc.ABC):
    @abc.abstractmethod
    async def save_definition(
        self, workflow_id: str, definition: dict[str, Any], *, author_id: str | None = None, status: Status = "active"
    ) -> StoredDefinition:
        """Save (create, or add a version when the content changed; a deleted workflow comes back). Returns the
        latest version. Safe under concurrent savers: versions stay dense and unique."""

    @abc.abstractmethod
    async def get_definition(
        self, workflow_id: str, version: int | None = None, *, include_deleted: bool = False
    ) -> StoredDefinition | None:
        """The latest version, or `version` (any version, deleted or not, when a number is given: runs pin them)."""

    @abc.abstractmethod
    async def list_definitions(
        self, *, status: Status | None = None, author_id: str | None = None
    ) -> list[StoredDefinition]:
        """The latest version of every workflow not deleted, by id."""

    @abc.abstractmethod
    async def delete_definition(self, workflow_id: str) -> bool:
        """Hide the workflow from listings and new runs (its versions stay for runs in flight); False if unknown."""

    @abc.abstractmethod
    async def remember_created_run(self, run_id: str, workflow_id: str, resource_id: str) -> None:
        """A run named by `create-run` for a resource (the later one, when named again); forgets the rows older
        than `CREATED_RUN_DAYS`."""

    @abc.abstractmethod
    async def created_run_resource(self, run_id: str, workflow_id: str) -> str | None:
        """The resource `create-run` named for this run of this workflow, if any (and not forgotten)."""

    @abc.abstractmethod
    async def forget_created_runs(self, *, before: datetime) -> int:
        """Forget the runs created before `before`; how many."""
