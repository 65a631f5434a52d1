"""Deterministic orchestration: the agent run loop, the interpreter of stored workflow definitions, and the
contract models of their inputs and outputs.

Imports only the standard library, temporalio, pydantic, `keel.protocol` and the contract models. The names
below are imported on first use, so importing one module (`keel.workflows.agent_run`, the client's) does not
load the others (`DefinitionRun`, and with it the workflow definition schema and jsonschema).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, tuple[str, str]] = {
    "AgentRun": ("keel.workflows.agent_run", "AgentRun"),
    "AgentThread": ("keel.workflows.agent_thread", "AgentThread"),
    "AgentSession": ("keel.workflows.agent_session", "AgentSession"),
    "thread_workflow_id": ("keel.workflows.agent_thread", "thread_workflow_id"),
    "AgentRunInput": ("keel.workflows.contracts", "AgentRunInput"),
    "AgentRunResult": ("keel.workflows.contracts", "AgentRunResult"),
    "ApprovalAccepted": ("keel.workflows.contracts", "ApprovalAccepted"),
    "IndexProgress": ("keel.workflows.contracts", "IndexProgress"),
    "IndexWorkspaceInput": ("keel.workflows.contracts", "IndexWorkspaceInput"),
    "IndexWorkspaceResult": ("keel.workflows.contracts", "IndexWorkspaceResult"),
    "PendingToolCall": ("keel.workflows.contracts", "PendingToolCall"),
    "ToolApproval": ("keel.workflows.contracts", "ToolApproval"),
    "DefinitionRun": ("keel.workflows.definition_run", "DefinitionRun"),
    "IndexWorkspace": ("keel.workflows.index_workspace", "IndexWorkspace"),
    "ToolCall": ("keel.workflows.tool_call", "ToolCall"),
    "ToolCallOutcome": ("keel.workflows.contracts", "ToolCallOutcome"),
    "ToolCallRequest": ("keel.workflows.contracts", "ToolCallRequest"),
    "tool_call_workflow_id": ("keel.workflows.tool_call", "tool_call_workflow_id"),
    "BlobSweepWorkflow": ("keel.workflows.blob_sweep", "BlobSweepWorkflow"),
    "index_workflow_id": ("keel.workflows.index_workspace", "index_workflow_id"),
    "DEFAULT_OPTIONS": ("keel.workflows.options", "DEFAULT_OPTIONS"),
    "AgentActivityOptions": ("keel.workflows.options", "AgentActivityOptions"),
    "Resumable": ("keel.workflows.resumable", "Resumable"),
    "SEARCH_ATTRIBUTES": ("keel.workflows.search_attributes", "ALL_KEYS"),
}
"""Each name and the (module, attribute) it is; `WORKFLOWS` is made from seven of them."""

__all__ = [
    "DEFAULT_OPTIONS",
    "SEARCH_ATTRIBUTES",
    "WORKFLOWS",
    "AgentActivityOptions",
    "AgentRun",
    "AgentRunInput",
    "AgentRunResult",
    "AgentSession",
    "AgentThread",
    "ApprovalAccepted",
    "BlobSweepWorkflow",
    "DefinitionRun",
    "IndexProgress",
    "IndexWorkspace",
    "IndexWorkspaceInput",
    "IndexWorkspaceResult",
    "PendingToolCall",
    "Resumable",
    "ToolApproval",
    "ToolCall",
    "ToolCallOutcome",
    "ToolCallRequest",
    "index_workflow_id",
    "thread_workflow_id",
    "tool_call_workflow_id",
]

if TYPE_CHECKING:
    from keel.workflows.agent_run import AgentRun
    from keel.workflows.agent_session import AgentSession
    from keel.workflows.agent_thread import AgentThread, thread_workflow_id
    from keel.workflows.blob_sweep import BlobSweepWorkflow
    from keel.workflows.contracts import (
        AgentRunInput,
        AgentRunResult,
        ApprovalAccepted,
        IndexProgress,
        IndexWorkspaceInput,
        IndexWorkspaceResult,
        PendingToolCall,
        ToolApproval,
        ToolCallOutcome,
        ToolCallRequest,
    )
    from keel.workflows.definition_run import DefinitionRun
    from keel.workflows.index_workspace import IndexWorkspace, index_workflow_id
    from keel.workflows.options import DEFAULT_OPTIONS, AgentActivityOptions
    from keel.workflows.resumable import Resumable
    from keel.workflows.search_attributes import ALL_KEYS as SEARCH_ATTRIBUTES
    from keel.workflows.tool_call import ToolCall, tool_call_workflow_id

    WORKFLOWS: list[type]
    """Keel's own workflows, as a worker registers them."""


def __getattr__(name: str) -> Any:
    if name == "WORKFLOWS":
        kinds = (
            "AgentRun",
            "AgentThread",
            "AgentSession",
            "DefinitionRun",
            "IndexWorkspace",
            "BlobSweepWorkflow",
            "ToolCall",
        )
        value: Any = [__getattr__(n) for n in kinds]
    else:
        try:
            module, attribute = _EXPORTS[name]
        except KeyError:
            raise AttributeError(f"module 'keel.workflows' has no attribute {name!r}") from None
        # `__import__`, not `importlib.import_module`: inside Temporal's workflow sandbox it is the sandbox's
        # importer, which passes `keel.workflows.contracts` (and the other passthrough modules) through instead
        # of loading a second copy of them (keel.plugin.SANDBOX_PASSTHROUGH).
        value = getattr(__import__(module, fromlist=[attribute]), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
