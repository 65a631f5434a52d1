"""Mastra's agent stream chunks: the run's event log, the CLI's live view and the HTTP streams speak them.

Every chunk is `{type, runId, from, payload}` on the wire; one model per chunk type, each with a typed payload.
The event log stores a chunk as an `EventRecord` (its type and payload: the run is the log's), and readers turn a
record back into its chunk with `parse_chunk`. Types, in the order a run emits them::

    start                 {id: agentId, runId, messageId}
    step-start            {messageId, step}
    text-start            {id}
    text-delta            {id, text}
    text-end              {id}
    tool-call             {toolCallId, toolName, args}
    tool-call-approval    {toolCallId, toolName, args, resumeSchema: "<JSON schema as a string>"}
    tool-result           {toolCallId, toolName, args, result}
    tool-error            {toolCallId, toolName, args, error}
    tool-output-denied    {toolCallId, toolName, args, approval: {id, approved: false, reason}}
    step-finish           {messageId, stepResult: {reason, isContinued}, output: {text, usage}}
    finish                {messageId?, stepResult, output?, usage}
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from keel.protocol.messages import FinishReason, Usage
from keel.protocol.wire import WireModel


def _omit_none(value: object) -> bool:
    return value is None


class EventRecord(WireModel):
    """A chunk as the event log stores it, and as a workflow hands it to the activity that persists it."""

    type: str
    payload: dict[str, Any] = Field(default_factory=dict)


# --- payloads -------------------------------------------------------------------------------------------


class StartPayload(WireModel):
    id: str
    """The agent id."""
    run_id: str
    message_id: str


class StepStartPayload(WireModel):
    message_id: str
    step: int


class TextStartPayload(WireModel):
    id: str


class TextDeltaPayload(WireModel):
    id: str
    text: str


class TextEndPayload(WireModel):
    id: str


class ToolCallPayload(WireModel):
    tool_call_id: str
    tool_name: str
    args: dict[str, Any] = Field(default_factory=dict)


class ToolCallApprovalPayload(ToolCallPayload):
    resume_schema: str
    """The JSON schema of the decision a client sends back, as a string (Mastra's shape)."""


class ToolResultPayload(ToolCallPayload):
    result: Any = None
    is_error: bool | None = Field(default=None, exclude_if=_omit_none)
    """Set (True) only in a run result's `toolResults`, where errors are tool results too."""


class ToolErrorPayload(ToolCallPayload):
    error: Any = None


class ApprovalDecision(WireModel):
    id: str
    approved: bool
    reason: str | None = None


class ToolOutputDeniedPayload(ToolCallPayload):
    approval: ApprovalDecision


class StepResult(WireModel):
    reason: FinishReason
    is_continued: bool


class StepOutput(WireModel):
    text: str = ""
    usage: Usage | None = None


class StepFinishPayload(WireModel):
    message_id: str
    step_result: StepResult
    output: StepOutput


class FinishPayload(WireModel):
    message_id: str | None = Field(default=None, exclude_if=_omit_none)
    step_result: StepResult
    output: StepOutput | None = Field(default=None, exclude_if=_omit_none)
    usage: Usage | None = None


# --- chunks ---------------------------------------------------------------------------------------------


class Chunk(WireModel):
    """The envelope every chunk shares."""

    run_id: str
    from_: Literal["AGENT"] = Field(default="AGENT", alias="from")

    def record(self) -> EventRecord:
        """The chunk as the event log stores it."""
        dumped = self.model_dump(mode="json", by_alias=True, include={"type", "payload"})
        return EventRecord(type=dumped["type"], payload=dumped["payload"])


class StartChunk(Chunk):
    type: Literal["start"] = "start"
    payload: StartPayload


class StepStartChunk(Chunk):
    type: Literal["step-start"] = "step-start"
    payload: StepStartPayload


class TextStartChunk(Chunk):
    type: Literal["text-start"] = "text-start"
    payload: TextStartPayload


class TextDeltaChunk(Chunk):
    type: Literal["text-delta"] = "text-delta"
    payload: TextDeltaPayload


class TextEndChunk(Chunk):
    type: Literal["text-end"] = "text-end"
    payload: TextEndPayload


class ToolCallChunk(Chunk):
    """Also Mastra's `toolCalls[i]` in a generate result."""

    type: Literal["tool-call"] = "tool-call"
    payload: ToolCallPayload


class ToolCallApprovalChunk(Chunk):
    type: Literal["tool-call-approval"] = "tool-call-approval"
    payload: ToolCallApprovalPayload


class ToolResultChunk(Chunk):
    """Also Mastra's `toolResults[i]` in a generate result."""

    type: Literal["tool-result"] = "tool-result"
    payload: ToolResultPayload


class ToolErrorChunk(Chunk):
    type: Literal["tool-error"] = "tool-error"
    payload: ToolErrorPayload


class ToolOutputDeniedChunk(Chunk):
    type: Literal["tool-output-denied"] = "tool-output-denied"
    payload: ToolOutputDeniedPayload


class StepFinishChunk(Chunk):
    type: Literal["step-finish"] = "step-finish"
    payload: StepFinishPayload


class FinishChunk(Chunk):
    type: Literal["finish"] = "finish"
    payload: FinishPayload


AgentChunk = Annotated[
    StartChunk
    | StepStartChunk
    | TextStartChunk
    | TextDeltaChunk
    | TextEndChunk
    | ToolCallChunk
    | ToolCallApprovalChunk
    | ToolResultChunk
    | ToolErrorChunk
    | ToolOutputDeniedChunk
    | StepFinishChunk
    | FinishChunk,
    Field(discriminator="type"),
]

_CHUNK: TypeAdapter[AgentChunk] = TypeAdapter(AgentChunk)
CHUNK_TYPES = frozenset(
    c.model_fields["type"].default
    for c in (
        StartChunk,
        StepStartChunk,
        TextStartChunk,
        TextDeltaChunk,
        TextEndChunk,
        ToolCallChunk,
        ToolCallApprovalChunk,
        ToolResultChunk,
        ToolErrorChunk,
        ToolOutputDeniedChunk,
        StepFinishChunk,
        FinishChunk,
    )
)


def parse_chunk(run_id: str, record: EventRecord) -> AgentChunk | None:
    """The typed chunk a stored record holds; None for a type this version does not know or a payload that does
    not fit its type (a reader shows what it understands and skips the rest)."""
    if record.type not in CHUNK_TYPES:
        return None
    try:
        return _CHUNK.validate_python({"type": record.type, "runId": run_id, "payload": record.payload})
    except ValidationError:
        return None


APPROVAL_RESUME_SCHEMA = (
    '{"type":"object","properties":{"approved":{"type":"boolean"},"reason":{"type":"string"}},"required":["approved"]}'
)
"""The `resumeSchema` of a `tool-call-approval` chunk: what a client sends to decide the call."""
