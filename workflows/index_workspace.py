"""`IndexWorkspace`: index a workspace's files for search (`keel index WORKSPACE`), as one long activity.

The activity (`keel.index_workspace`) heartbeats an `IndexProgress` after each batch of files, which is what the
Temporal UI and `keel index` show of the pending activity. A worker lost mid-way (a crash, `kill -9`) stops
heartbeating; after `heartbeat_timeout_seconds` the activity is retried, on any worker, and goes on after the
last file its last heartbeat recorded.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from keel.protocol import names
from keel.workflows.contracts import IndexFilesInput, IndexWorkspaceInput, IndexWorkspaceResult

INDEX_START_TO_CLOSE = timedelta(hours=24)
"""Upper bound of one attempt: a large tree with a slow embedder takes hours; a lost worker is noticed by the
heartbeat timeout, long before this."""

INDEX_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=20,
)
"""A lost worker or a vector store outage is retried with backoff (each retry resumes where the last heartbeat
says); a bad request (unknown workspace, no search configured, no paths) is non-retryable and fails at once."""


def index_workflow_id(workspace_id: str) -> str:
    """The default workflow id of a workspace's indexing: one at a time per workspace (`keel index` follows the
    one already running)."""
    return f"keel-index-{workspace_id}"


@workflow.defn(name=names.INDEX_WORKSPACE, sandboxed=False)
class IndexWorkspace:
    @workflow.run
    async def run(self, input: IndexWorkspaceInput) -> IndexWorkspaceResult:
        what = ", ".join(input.paths) if input.paths is not None else "auto_index_paths"
        result: IndexWorkspaceResult = await workflow.execute_activity(
            names.INDEX_WORKSPACE_ACTIVITY,
            IndexFilesInput(workspace_id=input.workspace_id, paths=input.paths),
            result_type=IndexWorkspaceResult,
            start_to_close_timeout=INDEX_START_TO_CLOSE,
            heartbeat_timeout=timedelta(seconds=input.heartbeat_timeout_seconds),
            retry_policy=INDEX_RETRY,
            summary=f"index {input.workspace_id}: {what}"[:200],
        )
        return result
