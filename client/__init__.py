"""Everything that talks to Temporal: the Python client, the CLI and the local dev server set-up."""

from keel.client.errors import (
    InvalidRunInput,
    KeelClientError,
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

__all__ = [
    "InvalidRunInput",
    "KeelClient",
    "KeelClientError",
    "NoWorker",
    "Poller",
    "QueueInUse",
    "RunClosed",
    "RunFailed",
    "RunIdInUse",
    "RunInfo",
    "RunNotFound",
    "RunStatus",
    "ToolCallRejected",
    "ToolFailed",
    "indexing_progress",
    "indexing_result",
    "start_indexing",
]
