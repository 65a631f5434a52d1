"""Stored spans (`keel.storage.StoredSpan`) in the shapes their readers expect: Mastra's span records (what
`@mastra/client-js` 1.47 reads from `/api/observability/traces...`: `SpanRecord`, the trace span with its
`status`, the light record), the rows of Mastra 0.x's telemetry routes (`/api/telemetry`), and the tree
`keel trace` prints.

From OpenTelemetry to Mastra: the span type and entity come from the store (worked out by the exporter: a model
call is a `model_generation` of its agent, a tool call a `tool_call` of its tool, Temporal's spans an
`agent_run`, `workflow_run`, `workflow_step` or `workflow_wait_event`); a model call's attributes carry Mastra's
`model`, `provider`, `usage` and `finishReason` beside the GenAI ones; the content captured on a span
(`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`) is its `input` and `output`; an error status is its
`error`. Times are ISO 8601 in UTC with milliseconds, as `JSON.stringify` writes a `Date`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from keel.storage.spans import AGENT_ENTITY, StoredSpan

CONTENT_ATTRIBUTES = (
    "gen_ai.system_instructions",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)
"""Captured content: a span's `input` and `output` rather than its attributes."""

_KINDS = {"internal": 0, "server": 1, "client": 2, "producer": 3, "consumer": 4}
_STATUS_CODES = {"unset": 0, "ok": 1, "error": 2}
PREVIEW_CHARS = 100


def iso(value: datetime | None) -> str | None:
    """`2025-01-31T12:00:00.123Z`, the way `Date.toJSON()` writes it."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parsed(value: Any) -> Any:
    """A JSON attribute (captured content) parsed; the text itself when it is not JSON (a value cut to its bound)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _message(message: Any) -> Any:
    """A GenAI message (`{role, parts}`) with Mastra's `content`: its text, or its parts when it has others."""
    if not isinstance(message, dict) or not isinstance(message.get("parts"), list):
        return message
    parts = message["parts"]
    texts = [p.get("content") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    content: Any = " ".join(str(t) for t in texts) if len(texts) == len(parts) else parts
    return {**message, "content": content}


def _instructions(value: Any) -> str | None:
    if isinstance(value, list):
        return " ".join(str(p.get("content", "")) for p in value if isinstance(p, dict)) or None
    return value if isinstance(value, str) else None


def span_input(span: StoredSpan) -> Any:
    attributes = span.attributes
    if span.span_type == "model_generation" and "gen_ai.input.messages" in attributes:
        messages = parsed(attributes["gen_ai.input.messages"])
        shown = [_message(m) for m in messages] if isinstance(messages, list) else messages
        found: dict[str, Any] = {"messages": shown}
        if (instructions := _instructions(parsed(attributes.get("gen_ai.system_instructions")))) is not None:
            found["instructions"] = instructions
        return found
    if "gen_ai.tool.call.arguments" in attributes:
        return parsed(attributes["gen_ai.tool.call.arguments"])
    return None


def span_output(span: StoredSpan) -> Any:
    attributes = span.attributes
    if "gen_ai.output.messages" in attributes:
        messages = parsed(attributes["gen_ai.output.messages"])
        if not isinstance(messages, list):
            return messages
        parts = [p for m in messages if isinstance(m, dict) for p in m.get("parts", []) if isinstance(p, dict)]
        return {
            "text": "".join(str(p.get("content", "")) for p in parts if p.get("type") == "text"),
            "toolCalls": [
                {"toolCallId": p.get("id"), "toolName": p.get("name"), "args": p.get("arguments")}
                for p in parts
                if p.get("type") == "tool_call"
            ],
        }
    if "gen_ai.tool.call.result" in attributes:
        return parsed(attributes["gen_ai.tool.call.result"])
    return None


def span_error(span: StoredSpan) -> dict[str, Any] | None:
    """Mastra's `SpanErrorInfo` for a span with an error status."""
    if span.status != "error":
        return None
    found: dict[str, Any] = {"message": span.status_message or "error"}
    if isinstance(kind := span.attributes.get("error.type"), str):
        found["id"] = kind
    return found


def tokens(span: StoredSpan) -> tuple[int, int] | None:
    """A model call's input and output tokens."""
    given = span.attributes.get("gen_ai.usage.input_tokens"), span.attributes.get("gen_ai.usage.output_tokens")
    if all(isinstance(n, int) for n in given):
        return int(given[0] or 0), int(given[1] or 0)
    return None


def mastra_attributes(span: StoredSpan) -> dict[str, Any]:
    """Mastra's attributes of the span's type, beside the OpenTelemetry ones (content left out: see `input`)."""
    attributes = span.attributes
    found: dict[str, Any] = {}
    if span.span_type == "model_generation":
        model = attributes.get("gen_ai.response.model") or attributes.get("gen_ai.request.model")
        found |= {"model": model, "provider": attributes.get("gen_ai.provider.name")}
        if (counted := tokens(span)) is not None:
            found["usage"] = {"inputTokens": counted[0], "outputTokens": counted[1], "totalTokens": sum(counted)}
        reasons = attributes.get("gen_ai.response.finish_reasons")
        if isinstance(reasons, list) and reasons:
            found["finishReason"] = reasons[0]
    elif span.span_type == "tool_call":
        found |= {"toolType": attributes.get("gen_ai.tool.type"), "success": span.status != "error"}
    return found | {k: v for k, v in attributes.items() if k not in CONTENT_ATTRIBUTES}


def _parent_entity(span: StoredSpan) -> tuple[str | None, str | None]:
    """The agent a tool call was made for."""
    agent = span.attributes.get("gen_ai.agent.id")
    if span.entity_type == "tool" and isinstance(agent, str):
        return AGENT_ENTITY, agent
    return None, None


def span_record(span: StoredSpan) -> dict[str, Any]:
    """Mastra's `SpanRecord` (client-js's `SpanRecord`, the `span` of `getSpan`, the `spans` of `getTrace`)."""
    parent_type, parent_id = _parent_entity(span)
    agent = (AGENT_ENTITY, span.entity_id) if span.entity_type == AGENT_ENTITY else (parent_type, parent_id)
    return {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "parentSpanId": span.parent_span_id,
        "name": span.name,
        "spanType": span.span_type,
        "isEvent": False,
        "startedAt": iso(span.started_at),
        "endedAt": iso(span.ended_at),
        "entityType": span.entity_type,
        "entityId": span.entity_id,
        "entityName": span.entity_name,
        "parentEntityType": parent_type,
        "parentEntityId": parent_id,
        "parentEntityName": parent_id,
        "rootEntityType": agent[0],
        "rootEntityId": agent[1],
        "rootEntityName": agent[1],
        "userId": None,
        "organizationId": None,
        "resourceId": None,
        "runId": span.run_id,
        "sessionId": None,
        "threadId": span.thread_id,
        "requestId": None,
        "environment": None,
        "serviceName": span.service_name,
        "scope": {"name": span.scope} if span.scope else None,
        "entityVersionId": None,
        "parentEntityVersionId": None,
        "rootEntityVersionId": None,
        "experimentId": None,
        "source": None,
        "metadata": {"spanKind": span.kind},
        "tags": None,
        "attributes": mastra_attributes(span),
        "links": span.links or None,
        "input": span_input(span),
        "output": span_output(span),
        "error": span_error(span),
        "requestContext": None,
        "createdAt": iso(span.created_at or span.ended_at),
        "updatedAt": None,
    }


def trace_status(span: StoredSpan) -> str:
    """Mastra's `computeTraceStatus`: a span is stored once it ended, so `success` unless it has an error."""
    return "error" if span.status == "error" else "success"


def trace_record(span: StoredSpan) -> dict[str, Any]:
    """A span heading its trace, as `listTraces` lists it: the span record and its trace's `status`."""
    return span_record(span) | {"status": trace_status(span)}


def input_preview(value: Any) -> str | None:
    """Mastra's `buildInputPreview`: the user messages' text (or the input as JSON), cut to 100 characters."""
    if value is None:
        return None
    messages = value.get("messages") if isinstance(value, dict) else value if isinstance(value, list) else None
    if isinstance(messages, list):
        text = " | ".join(
            str(m["content"]) for m in messages if isinstance(m, dict) and m.get("role") == "user" and m.get("content")
        )
    else:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())
    if not text:
        return None
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def light_record(span: StoredSpan, *, preview: bool = True) -> dict[str, Any]:
    """Mastra's light span record: the timeline fields, without attributes, input, output, tags or links."""
    found: dict[str, Any] = {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "parentSpanId": span.parent_span_id,
        "name": span.name,
        "spanType": span.span_type,
        "isEvent": False,
        "startedAt": iso(span.started_at),
        "endedAt": iso(span.ended_at),
        "error": span_error(span),
        "entityType": span.entity_type,
        "entityId": span.entity_id,
        "entityName": span.entity_name,
        "createdAt": iso(span.created_at or span.ended_at),
        "updatedAt": None,
    }
    if preview:  # the listing's rows; a trace's light spans (`getTraceLight`) have neither
        found |= {
            "status": trace_status(span),
            "metadata": {"spanKind": span.kind},
            "inputPreview": input_preview(span_input(span)),
        }
    return found


def legacy_row(span: StoredSpan) -> dict[str, Any]:
    """A row of Mastra 0.x's telemetry (`GET /api/telemetry`: its `mastra_traces` table): OpenTelemetry's span,
    times in microseconds since the epoch, the kind and status code as numbers."""
    status: dict[str, Any] = {"code": _STATUS_CODES.get(span.status, 0)}
    if span.status_message:
        status["message"] = span.status_message
    return {
        "id": span.span_id,
        "parentSpanId": span.parent_span_id,
        "name": span.name,
        "traceId": span.trace_id,
        "scope": span.scope,
        "kind": _KINDS.get(span.kind, 0),
        "attributes": span.attributes,
        "status": status,
        "events": span.events,
        "links": span.links,
        "other": {"resource": span.resource},
        "startTime": _micros(span.started_at),
        "endTime": _micros(span.ended_at),
        "createdAt": iso(span.created_at or span.ended_at),
    }


def _micros(value: datetime) -> int:
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


# --- the tree ----------------------------------------------------------------------------------------------------


@dataclass
class SpanNode:
    span: StoredSpan
    children: list[SpanNode] = field(default_factory=list)


def tree(spans: Sequence[StoredSpan]) -> list[SpanNode]:
    """The spans as trees, each span under its parent (a span whose parent is not among them heads a tree),
    siblings in the order they started."""
    nodes = {s.span_id: SpanNode(s) for s in spans}
    roots: list[SpanNode] = []
    for node in nodes.values():
        parent = nodes.get(node.span.parent_span_id or "")
        (parent.children if parent is not None and parent is not node else roots).append(node)

    def started(node: SpanNode) -> tuple[datetime, str]:
        return node.span.started_at, node.span.span_id

    for node in nodes.values():
        node.children.sort(key=started)
    return sorted(roots, key=started)


__all__ = [
    "SpanNode",
    "iso",
    "legacy_row",
    "light_record",
    "parsed",
    "span_record",
    "tokens",
    "trace_record",
    "tree",
]
