"""Temporal's update-with-start, as Keel's clients make it: `execute_update_with_start_workflow`, and when the call
fails, the error its start operation was given is retrieved. The SDK hands the start's error to the operation's
handle future as well as raising it; a caller that never awaits that future had Python log "Future exception was
never retrieved" with a traceback, in the user's process, for an error the caller had already handled."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation


async def execute_update_with_start(
    temporal: Client, update: str, *args: Any, start: WithStartWorkflowOperation[Any, Any], result_type: type
) -> Any:
    """The update's result; whatever the call raised, raised (the start's copy of it retrieved)."""
    try:
        return await temporal.execute_update_with_start_workflow(
            update, *args, start_workflow_operation=start, result_type=result_type
        )
    except BaseException:
        handle = getattr(start, "_workflow_handle", None)  # the SDK's future of the started workflow's handle
        if handle is not None and handle.done() and not handle.cancelled():
            handle.exception()
        raise


__all__ = ["execute_update_with_start"]
