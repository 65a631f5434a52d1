"""Everything that talks to Temporal: the Python client, the CLI and the local dev server set-up."""

from keel.client.errors import (
    InvalidRunInput,
    KeelClientError,
    RunClosed,
    RunFailed,
    RunIdInUse,
    RunNotFound,
    ToolCallRejected,
)
from keel.client.keel_client import KeelClient, RunInfo, RunStatus

__all__ = [
    "InvalidRunInput",
    "KeelClient",
    "KeelClientError",
    "RunClosed",
    "RunFailed",
    "RunIdInUse",
    "RunInfo",
    "RunNotFound",
    "RunStatus",
    "ToolCallRejected",
]
