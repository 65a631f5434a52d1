"""Keel: durable agents and workspaces on Temporal.

    from keel import Agent, App, KeelClient, KeelPlugin, ScriptedModel, tool

The names below are Keel's public API; each is imported on first use, so `import keel` (which Temporal's
workflow sandbox does for every workflow of a `keel.*` module) loads nothing else. The packages behind them:
`keel.app` (what you define), `keel.model_providers`, `keel.client`, `keel.protocol` (shared data),
`keel.workflows`, `keel.activities`, `keel.storage`, `keel.worker` and `keel.plugin`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    # what an app defines
    "Agent": "keel.app",
    "App": "keel.app",
    "AppError": "keel.app",
    "Tool": "keel.app",
    "ToolContext": "keel.app",
    "UnknownAgent": "keel.app",
    "UnknownTool": "keel.app",
    "load_app": "keel.app",
    "tool": "keel.app",
    # chat models
    "ChatModel": "keel.model_providers",
    "ModelError": "keel.model_providers",
    "ModelRequest": "keel.model_providers",
    "ModelRequestError": "keel.model_providers",
    "ModelResponse": "keel.model_providers",
    "ModelRetryableError": "keel.model_providers",
    "ModelToolCall": "keel.model_providers",
    "OpenAIChatModel": "keel.model_providers",
    "ScriptedModel": "keel.model_providers",
    "ToolSpec": "keel.model_providers",
    "last_user_text": "keel.model_providers",
    "tool_results_since_last_user": "keel.model_providers",
    # messages
    "MessageRecord": "keel.protocol",
    "TextPart": "keel.protocol",
    "ToolCallPart": "keel.protocol",
    "ToolResultPart": "keel.protocol",
    "Usage": "keel.protocol",
    # the client
    "InvalidRunInput": "keel.client",
    "KeelClient": "keel.client",
    "KeelClientError": "keel.client",
    "MessageRefused": "keel.client",
    "NoWorker": "keel.client",
    "RunClosed": "keel.client",
    "RunFailed": "keel.client",
    "RunInfo": "keel.client",
    "RunIdInUse": "keel.client",
    "RunNotFound": "keel.client",
    "SessionError": "keel.client",
    "SessionNotFound": "keel.client",
    "TemporalUnavailable": "keel.client",
    "ToolCallRejected": "keel.client",
    # the workflow contract
    "AgentRunInput": "keel.workflows",
    "AgentRunResult": "keel.workflows",
    "PendingToolCall": "keel.workflows",
    "ToolApproval": "keel.workflows",
    "AgentActivityOptions": "keel.workflows",
    # workspaces
    "Workspace": "keel.workspace_providers",
    "LocalFilesystem": "keel.workspace_providers",
    "LocalSandbox": "keel.workspace_providers",
    "S3Filesystem": "keel.workspace_providers",
    "WORKSPACE_TOOLS": "keel.workspace_providers",
    "WorkspaceError": "keel.workspace_providers",
    "ToolFailed": "keel.client",
    # AgentController
    "AgentController": "keel.controller",
    "Mode": "keel.controller",
    "Subagent": "keel.controller",
    "Channels": "keel.controller",
    # workers
    "KeelPlugin": "keel.plugin",
    "build_worker": "keel.worker",
    "open_storage": "keel.storage",
}

__all__ = [
    "WORKSPACE_TOOLS",
    "Agent",
    "AgentActivityOptions",
    "AgentController",
    "AgentRunInput",
    "AgentRunResult",
    "App",
    "AppError",
    "Channels",
    "ChatModel",
    "InvalidRunInput",
    "KeelClient",
    "KeelClientError",
    "KeelPlugin",
    "LocalFilesystem",
    "LocalSandbox",
    "MessageRecord",
    "MessageRefused",
    "Mode",
    "ModelError",
    "ModelRequest",
    "ModelRequestError",
    "ModelResponse",
    "ModelRetryableError",
    "ModelToolCall",
    "NoWorker",
    "OpenAIChatModel",
    "PendingToolCall",
    "RunClosed",
    "RunFailed",
    "RunIdInUse",
    "RunInfo",
    "RunNotFound",
    "S3Filesystem",
    "ScriptedModel",
    "SessionError",
    "SessionNotFound",
    "Subagent",
    "TemporalUnavailable",
    "TextPart",
    "Tool",
    "ToolApproval",
    "ToolCallPart",
    "ToolCallRejected",
    "ToolContext",
    "ToolFailed",
    "ToolResultPart",
    "ToolSpec",
    "UnknownAgent",
    "UnknownTool",
    "Usage",
    "Workspace",
    "WorkspaceError",
    "build_worker",
    "last_user_text",
    "load_app",
    "open_storage",
    "tool",
    "tool_results_since_last_user",
]

if TYPE_CHECKING:
    from keel.app import Agent, App, AppError, Tool, ToolContext, UnknownAgent, UnknownTool, load_app, tool
    from keel.client import (
        InvalidRunInput,
        KeelClient,
        KeelClientError,
        MessageRefused,
        NoWorker,
        RunClosed,
        RunFailed,
        RunIdInUse,
        RunInfo,
        RunNotFound,
        SessionError,
        SessionNotFound,
        TemporalUnavailable,
        ToolCallRejected,
        ToolFailed,
    )
    from keel.controller import AgentController, Channels, Mode, Subagent
    from keel.model_providers import (
        ChatModel,
        ModelError,
        ModelRequest,
        ModelRequestError,
        ModelResponse,
        ModelRetryableError,
        ModelToolCall,
        OpenAIChatModel,
        ScriptedModel,
        ToolSpec,
        last_user_text,
        tool_results_since_last_user,
    )
    from keel.plugin import KeelPlugin
    from keel.protocol import MessageRecord, TextPart, ToolCallPart, ToolResultPart, Usage
    from keel.storage import open_storage
    from keel.worker import build_worker
    from keel.workflows import AgentActivityOptions, AgentRunInput, AgentRunResult, PendingToolCall, ToolApproval
    from keel.workspace_providers import (
        WORKSPACE_TOOLS,
        LocalFilesystem,
        LocalSandbox,
        S3Filesystem,
        Workspace,
        WorkspaceError,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keel' has no attribute {name!r}")
    # `__import__`, not `importlib.import_module`: inside Temporal's workflow sandbox it goes through the sandbox's
    # importer, which shares the passed-through modules instead of loading second copies of them.
    value = getattr(__import__(module, fromlist=[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
