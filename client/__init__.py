"""Everything that talks to Temporal: the Python client, the CLI and the local dev server set-up.

The names below are imported on first use, so `import keel.client.<module>` (a `keel` command importing only
what it needs, `keel.client.errors` say) does not load the whole client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "InvalidRunInput": "keel.client.errors",
    "KeelClientError": "keel.client.errors",
    "MessageRefused": "keel.client.errors",
    "NoWorker": "keel.client.errors",
    "QueueInUse": "keel.client.errors",
    "RunClosed": "keel.client.errors",
    "RunFailed": "keel.client.errors",
    "RunIdInUse": "keel.client.errors",
    "RunNotFound": "keel.client.errors",
    "SessionError": "keel.client.controller",
    "SessionNotFound": "keel.client.controller",
    "TemporalUnavailable": "keel.client.outages",
    "ToolCallRejected": "keel.client.errors",
    "ToolFailed": "keel.client.errors",
    "indexing_progress": "keel.client.indexing",
    "indexing_result": "keel.client.indexing",
    "start_indexing": "keel.client.indexing",
    "KeelClient": "keel.client.keel_client",
    "Poller": "keel.client.keel_client",
    "RunInfo": "keel.client.keel_client",
    "RunStatus": "keel.client.keel_client",
    "ResetRefused": "keel.client.reset",
    "RunReset": "keel.client.reset",
    "reset_run": "keel.client.reset",
}

__all__ = [
    "InvalidRunInput",
    "KeelClient",
    "KeelClientError",
    "MessageRefused",
    "NoWorker",
    "Poller",
    "QueueInUse",
    "ResetRefused",
    "RunClosed",
    "RunFailed",
    "RunIdInUse",
    "RunInfo",
    "RunNotFound",
    "RunReset",
    "RunStatus",
    "SessionError",
    "SessionNotFound",
    "TemporalUnavailable",
    "ToolCallRejected",
    "ToolFailed",
    "indexing_progress",
    "indexing_result",
    "reset_run",
    "start_indexing",
]

if TYPE_CHECKING:
    from keel.client.controller import SessionError, SessionNotFound
    from keel.client.errors import (
        InvalidRunInput,
        KeelClientError,
        MessageRefused,
        NoWorker,
        QueueInUse,
        RunClosed,
        RunFailed,
        RunIdInUse,
        RunNotFound,
        ToolCallRejected,
        ToolFailed,
    )
    from keel.client.indexing import indexing_progress, indexing_result, start_indexing
    from keel.client.keel_client import KeelClient, Poller, RunInfo, RunStatus
    from keel.client.outages import TemporalUnavailable
    from keel.client.reset import ResetRefused, RunReset, reset_run


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keel.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
