"""Starting and following `IndexWorkspace` (a workspace's files indexed for search, `keel index`)."""

from __future__ import annotations

from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import FailureError

from keel.client.errors import RunFailed
from keel.client.keel_client import KeelClient
from keel.protocol import names
from keel.workflows import IndexProgress, IndexWorkspace, IndexWorkspaceInput, IndexWorkspaceResult, index_workflow_id


async def start_indexing(
    keel: KeelClient,
    workspace_id: str,
    paths: list[str] | None = None,
    *,
    workflow_id: str | None = None,
    heartbeat_timeout_seconds: float = 30.0,
) -> WorkflowHandle[IndexWorkspace, IndexWorkspaceResult]:
    """Start indexing the workspace's `paths` (default its `auto_index_paths`); an indexing of the same id
    (default `keel-index-<workspace>`) still running is followed instead of started again."""
    return await keel.temporal.start_workflow(
        IndexWorkspace.run,
        IndexWorkspaceInput(
            workspace_id=workspace_id, paths=paths, heartbeat_timeout_seconds=heartbeat_timeout_seconds
        ),
        id=workflow_id or index_workflow_id(workspace_id),
        task_queue=keel.task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"index workspace {workspace_id}",
    )


async def indexing_progress(keel: KeelClient, workflow_id: str) -> tuple[bool, IndexProgress | None]:
    """Whether the indexing still runs, and its activity's last heartbeat (None before the first)."""
    description = await keel.temporal.get_workflow_handle(workflow_id).describe()
    running = description.status == WorkflowExecutionStatus.RUNNING
    for pending in description.raw_description.pending_activities:
        if pending.activity_type.name == names.INDEX_WORKSPACE_ACTIVITY and pending.heartbeat_details.payloads:
            decoded = await keel.temporal.data_converter.decode(pending.heartbeat_details.payloads, [IndexProgress])
            return running, decoded[0]
    return running, None


async def indexing_result(keel: KeelClient, workflow_id: str) -> IndexWorkspaceResult:
    """Wait for the indexing's result; `RunFailed` with its error when it failed (a bad workspace, say)."""
    try:
        handle = keel.temporal.get_workflow_handle(workflow_id, result_type=IndexWorkspaceResult)
        result: IndexWorkspaceResult = await handle.result()
        return result
    except WorkflowFailureError as err:
        cause: BaseException = err
        while isinstance(cause, FailureError | WorkflowFailureError) and cause.cause is not None:
            cause = cause.cause
        raise RunFailed(workflow_id, str(getattr(cause, "message", None) or cause or err)) from None


__all__ = ["indexing_progress", "indexing_result", "start_indexing"]
