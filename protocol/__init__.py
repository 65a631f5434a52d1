"""The data every layer shares, at the bottom of the package: messages and parts, usage, Mastra's stream
chunks, and the names of workflows, activities, signals, updates, queries and search attributes.

Imports only the standard library and pydantic (`tracing` imports OpenTelemetry too, on first use, when tracing is
on); imports no other part of Keel and nothing of Temporal. The names below (but `names`, which is only constants)
are imported on first use, so a module that needs the messages does not build every chunk model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from keel.protocol import names

_EXPORTS: dict[str, str] = {
    "APPROVAL_RESUME_SCHEMA": "keel.protocol.chunks",
    "AgentChunk": "keel.protocol.chunks",
    "ApprovalDecision": "keel.protocol.chunks",
    "Chunk": "keel.protocol.chunks",
    "EventRecord": "keel.protocol.chunks",
    "FinishChunk": "keel.protocol.chunks",
    "FinishPayload": "keel.protocol.chunks",
    "StartChunk": "keel.protocol.chunks",
    "StartPayload": "keel.protocol.chunks",
    "StepFinishChunk": "keel.protocol.chunks",
    "StepFinishPayload": "keel.protocol.chunks",
    "StepOutput": "keel.protocol.chunks",
    "StepResult": "keel.protocol.chunks",
    "StepStartChunk": "keel.protocol.chunks",
    "StepStartPayload": "keel.protocol.chunks",
    "TextDeltaChunk": "keel.protocol.chunks",
    "TextDeltaPayload": "keel.protocol.chunks",
    "TextEndChunk": "keel.protocol.chunks",
    "TextEndPayload": "keel.protocol.chunks",
    "TextStartChunk": "keel.protocol.chunks",
    "TextStartPayload": "keel.protocol.chunks",
    "ToolCallApprovalChunk": "keel.protocol.chunks",
    "ToolCallApprovalPayload": "keel.protocol.chunks",
    "ToolCallChunk": "keel.protocol.chunks",
    "ToolCallPayload": "keel.protocol.chunks",
    "ToolErrorChunk": "keel.protocol.chunks",
    "ToolErrorPayload": "keel.protocol.chunks",
    "ToolOutputDeniedChunk": "keel.protocol.chunks",
    "ToolOutputDeniedPayload": "keel.protocol.chunks",
    "ToolResultChunk": "keel.protocol.chunks",
    "ToolResultPayload": "keel.protocol.chunks",
    "parse_chunk": "keel.protocol.chunks",
    "Content": "keel.protocol.messages",
    "FinishReason": "keel.protocol.messages",
    "InputMessage": "keel.protocol.messages",
    "MessageRecord": "keel.protocol.messages",
    "Part": "keel.protocol.messages",
    "Role": "keel.protocol.messages",
    "TextPart": "keel.protocol.messages",
    "ToolCallPart": "keel.protocol.messages",
    "ToolResultPart": "keel.protocol.messages",
    "Usage": "keel.protocol.messages",
    "args_digest": "keel.protocol.messages",
    "describe_validation_error": "keel.protocol.validation",
    "WireModel": "keel.protocol.wire",
}

__all__ = [
    "APPROVAL_RESUME_SCHEMA",
    "AgentChunk",
    "ApprovalDecision",
    "Chunk",
    "Content",
    "EventRecord",
    "FinishChunk",
    "FinishPayload",
    "FinishReason",
    "InputMessage",
    "MessageRecord",
    "Part",
    "Role",
    "StartChunk",
    "StartPayload",
    "StepFinishChunk",
    "StepFinishPayload",
    "StepOutput",
    "StepResult",
    "StepStartChunk",
    "StepStartPayload",
    "TextDeltaChunk",
    "TextDeltaPayload",
    "TextEndChunk",
    "TextEndPayload",
    "TextPart",
    "TextStartChunk",
    "TextStartPayload",
    "ToolCallApprovalChunk",
    "ToolCallApprovalPayload",
    "ToolCallChunk",
    "ToolCallPart",
    "ToolCallPayload",
    "ToolErrorChunk",
    "ToolErrorPayload",
    "ToolOutputDeniedChunk",
    "ToolOutputDeniedPayload",
    "ToolResultChunk",
    "ToolResultPart",
    "ToolResultPayload",
    "Usage",
    "WireModel",
    "args_digest",
    "describe_validation_error",
    "names",
    "parse_chunk",
]

if TYPE_CHECKING:
    from keel.protocol.chunks import (
        APPROVAL_RESUME_SCHEMA,
        AgentChunk,
        ApprovalDecision,
        Chunk,
        EventRecord,
        FinishChunk,
        FinishPayload,
        StartChunk,
        StartPayload,
        StepFinishChunk,
        StepFinishPayload,
        StepOutput,
        StepResult,
        StepStartChunk,
        StepStartPayload,
        TextDeltaChunk,
        TextDeltaPayload,
        TextEndChunk,
        TextEndPayload,
        TextStartChunk,
        TextStartPayload,
        ToolCallApprovalChunk,
        ToolCallApprovalPayload,
        ToolCallChunk,
        ToolCallPayload,
        ToolErrorChunk,
        ToolErrorPayload,
        ToolOutputDeniedChunk,
        ToolOutputDeniedPayload,
        ToolResultChunk,
        ToolResultPayload,
        parse_chunk,
    )
    from keel.protocol.messages import (
        Content,
        FinishReason,
        InputMessage,
        MessageRecord,
        Part,
        Role,
        TextPart,
        ToolCallPart,
        ToolResultPart,
        Usage,
        args_digest,
    )
    from keel.protocol.validation import describe_validation_error
    from keel.protocol.wire import WireModel


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keel.protocol' has no attribute {name!r}")
    # `__import__`, not `importlib.import_module`: this package is passed through to Temporal's workflow sandbox
    # (keel.plugin.SANDBOX_PASSTHROUGH), and inside the sandbox `__import__` is the sandbox's importer, which
    # passes the module through too instead of loading a second copy of it (cached here, outside).
    value = getattr(__import__(module, fromlist=[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
