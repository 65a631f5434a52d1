"""Deterministic orchestration: the agent run loop and the contract models.

Imports only the standard library, temporalio, pydantic and the contract models.
"""

from keel.workflows.agent_run import FINISH_RUN, MODEL_STEP, TOOL_CALL, AgentRun
from keel.workflows.contracts import (
    AgentRunInput,
    AgentRunResult,
    ApprovalAccepted,
    PendingToolCall,
    ToolApproval,
)
from keel.workflows.converter import DATA_CONVERTER
from keel.workflows.options import DEFAULT_OPTIONS, AgentActivityOptions
from keel.workflows.search_attributes import ALL_KEYS as SEARCH_ATTRIBUTES

WORKFLOWS: list[type] = [AgentRun]

__all__ = [
    "DATA_CONVERTER",
    "DEFAULT_OPTIONS",
    "FINISH_RUN",
    "MODEL_STEP",
    "SEARCH_ATTRIBUTES",
    "TOOL_CALL",
    "WORKFLOWS",
    "AgentActivityOptions",
    "AgentRun",
    "AgentRunInput",
    "AgentRunResult",
    "ApprovalAccepted",
    "PendingToolCall",
    "ToolApproval",
]
