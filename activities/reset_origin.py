"""What reset a run: read from its own history, for a run that has just met a reset (`keel.workflows.time_travel`)."""

from __future__ import annotations

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client

from keel.protocol import names
from keel.workflows.contracts import ResetOrigin, ResetOriginInput


async def reset_origin(client: Client, input: ResetOriginInput) -> ResetOrigin:
    """The latest reset in the execution's history (newest events first, a page at a time): the execution it
    was made from, and whether Keel's time travel made it (its reason begins with `TIME_TRAVEL_REASON`)."""
    token = b""
    while True:
        page = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=input.workflow_id, run_id=input.run_id),
                next_page_token=token,
            )
        )
        for event in page.history.events:
            failed = event.workflow_task_failed_event_attributes
            if (
                event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
                and failed.cause == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW
            ):
                return ResetOrigin(
                    base_execution_id=failed.base_run_id or None,
                    time_travel=failed.failure.message.startswith(names.TIME_TRAVEL_REASON),
                )
        token = page.next_page_token
        if not token:
            return ResetOrigin()
