"""A session turn's stream chunks as the AgentController events its session's subscribers see.

A step of a turn writes its chunks to the run's own log (as any run), and in the same transaction their
AgentController translation to the session's log (`StepWriter`'s mirror): `message_start` / `message_update` /
`message_end` for the step's assistant message, `tool_start` / `tool_end`, `usage_update`; a subagent's turn as
`subagent_*` events keyed by the parent's tool call. The session writes the rest itself (`agent_start`,
approvals, mode changes...).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from keel.protocol import EventRecord
from keel.workflows.contracts import TurnConfig


class TurnEvents:
    """Translates the chunks of one activity execution of a turn (stateful: the assistant message's parts)."""

    def __init__(self, turn: TurnConfig, run_id: str, thread_id: str) -> None:
        self.turn = turn
        self.run_id = run_id
        self.thread_id = thread_id
        self._message_id: str | None = None
        self._started = False
        self._parts = 0

    def translate(self, records: list[EventRecord]) -> list[EventRecord]:
        found: list[dict[str, Any]] = []
        for record in records:
            found.extend(self._subagent(record) if self.turn.subagent is not None else self._turn(record))
        return [EventRecord(type=e["type"], payload=e) for e in found]

    # --- a turn of the session ---------------------------------------------------------------------------------

    def _turn(self, record: EventRecord) -> list[dict[str, Any]]:
        kind, p = record.type, record.payload
        if kind == "step-start":
            self._message_id, self._started, self._parts = p.get("messageId"), False, 0
            return []
        if kind == "text-start":
            return self._start({"type": "text", "text": ""})
        if kind == "text-delta":
            out = self._start({"type": "text", "text": ""})
            return [*out, self._update({"type": "text-delta", "delta": p.get("text", "")})]
        if kind == "tool-call":
            part = _invocation("call", p)
            if not self._started:
                out = self._start(part)
            else:
                out = [self._update({"type": "part", "index": self._parts, "part": part})]
                self._parts += 1
            tool_start = {"type": "tool_start", "toolCallId": p.get("toolCallId"), "toolName": p.get("toolName")}
            return [*out, tool_start | {"args": p.get("args", {}), "threadId": self.thread_id}]
        if kind in ("tool-result", "tool-error"):
            error = kind == "tool-error"
            result = p.get("error") if error else p.get("result")
            end = {"type": "tool_end", "toolCallId": p.get("toolCallId"), "result": result, "isError": error}
            return [end | {"threadId": self.thread_id}]
        if kind == "tool-output-denied":
            reason = (p.get("approval") or {}).get("reason") or "Tool call was not approved by the user"
            end = {"type": "tool_end", "toolCallId": p.get("toolCallId"), "result": reason, "isError": False}
            return [end | {"denied": True, "threadId": self.thread_id}]
        if kind == "step-finish":
            usage = (p.get("output") or {}).get("usage") or {}
            out = [{"type": "usage_update", "usage": _usage(usage)}]
            if self._started:
                out.append({"type": "message_end", "id": self._message_id})
                self._started = False
            return out
        return []

    def _start(self, part: dict[str, Any]) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started, self._parts = True, 1
        message = {
            "id": self._message_id,
            "role": "assistant",
            "content": {"format": 2, "parts": [part]},
            "createdAt": datetime.now(UTC).isoformat(),
            "threadId": self.thread_id,
        }
        return [{"type": "message_start", "message": message}]

    def _update(self, event: dict[str, Any]) -> dict[str, Any]:
        return {"type": "message_update", "id": self._message_id, "event": event}

    # --- a subagent's turn -------------------------------------------------------------------------------------

    def _subagent(self, record: EventRecord) -> list[dict[str, Any]]:
        sub = self.turn.subagent
        assert sub is not None
        kind, p = record.type, record.payload
        base = {"toolCallId": sub.parent_tool_call_id, "agentType": sub.agent_type}
        if kind == "start":
            extra = {"task": sub.task, "modelId": self.turn.model_id, "forked": sub.forked}
            return [{"type": "subagent_start", **base, **extra, "startedAt": time.time() * 1000}]
        if kind == "text-delta":
            return [{"type": "subagent_text_delta", **base, "textDelta": p.get("text", "")}]
        if kind == "tool-call":
            args = p.get("args", {})
            return [{"type": "subagent_tool_start", **base, "subToolName": p.get("toolName"), "subToolArgs": args}]
        if kind in ("tool-result", "tool-error"):
            error = kind == "tool-error"
            result = p.get("error") if error else p.get("result")
            end = {"subToolName": p.get("toolName"), "subToolResult": result, "isError": error}
            return [{"type": "subagent_tool_end", **base, **end}]
        if kind == "finish" and p.get("stepResult", {}).get("reason") != "tool-calls":
            text = (p.get("output") or {}).get("text", "")
            return [{"type": "subagent_end", **base, "result": text, "isError": False}]
        return []


def _invocation(state: str, p: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool-invocation",
        "toolInvocation": {
            "state": state,
            "toolCallId": p.get("toolCallId"),
            "toolName": p.get("toolName"),
            "args": p.get("args", {}),
        },
    }


def _usage(usage: dict[str, Any]) -> dict[str, int]:
    return {
        "promptTokens": int(usage.get("inputTokens") or 0),
        "completionTokens": int(usage.get("outputTokens") or 0),
        "totalTokens": int(usage.get("totalTokens") or 0),
    }
