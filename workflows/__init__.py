"""Deterministic orchestration: the agent run loop, the interpreter of stored workflow definitions, and the
contract models of their inputs and outputs.

Imports only the standard library, temporalio, pydantic, `keel.protocol` and the contract models.
"""

from keel.workflows.agent_run import AgentRun
from keel.workflows.agent_thread import AgentThread, thread_workflow_id
from keel.workflows.contracts import (
    AgentRunInput,
    AgentRunResult,
    ApprovalAccepted,
    IndexProgress,
    IndexWorkspaceInput,
    IndexWorkspaceResult,
    PendingToolCall,
    ToolApproval,
)
from keel.workflows.definition_run import DefinitionRun
from keel.workflows.index_workspace import IndexWorkspace, index_workflow_id
from keel.workflows.options import DEFAULT_OPTIONS, AgentActivityOptions
from keel.workflows.resumable import Resumable
from keel.workflows.search_attributes import ALL_KEYS as SEARCH_ATTRIBUTES

WORKFLOWS: list[type] = [AgentRun, AgentThread, DefinitionRun, IndexWorkspace]

__all__ = [
    "DEFAULT_OPTIONS",
    "SEARCH_ATTRIBUTES",
    "WORKFLOWS",
    "AgentActivityOptions",
    "AgentRun",
    "AgentRunInput",
    "AgentRunResult",
    "AgentThread",
    "ApprovalAccepted",
    "DefinitionRun",
    "IndexProgress",
    "IndexWorkspace",
    "IndexWorkspaceInput",
    "IndexWorkspaceResult",
    "PendingToolCall",
    "Resumable",
    "ToolApproval",
    "index_workflow_id",
    "thread_workflow_id",
]
