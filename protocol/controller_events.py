"""An AgentController session's events (Mastra's `AgentControllerEvent`s, as JSON objects with a `type`) and its
display state: the fold of those events that a UI renders (`DisplayState`).

Events are written to the session's event log (one log per session, offsets spanning its turns and its
continue-as-new), so a subscriber that reconnects from an offset gets each event once. `display_state_changed`
is never stored: a reader folds the events it reads and sends the state after each one, as Mastra's server does.
"""

from __future__ import annotations

import copy
from typing import Any

from keel.protocol.payloads import json_bytes

MAX_STATE_BYTES = 256 * 1024
"""The most a session's state may hold, as UTF-8 JSON with its permission rules (what `state_changed` events and
every answer carry): a change past it is refused, unless it leaves the state smaller than it was. (A controller's
own `initial_state` is not checked: it is the controller's, not grown by its sessions.)"""
MAX_SHOWN_ARGS_BYTES = 64 * 1024
"""The most of a waiting call's arguments a session shows (in its `tool_approval_required` and `tool_suspended`
events, its display state and answers), as UTF-8 JSON. Past it, each string longer than `SHOWN_STRING_CHARS` is
cut there, with a note of its length; the call's run holds them whole, and the tool gets them whole."""
SHOWN_STRING_CHARS = 4096


def shown_args(args: dict[str, Any]) -> dict[str, Any]:
    """`args` as a session shows a waiting call's: whole up to `MAX_SHOWN_ARGS_BYTES`, else their long strings
    cut (and, if that is still too much, a note of their size). Each such call reaches the session's history
    with them (the turn's signal), so whole arguments of a few hundred KB each would bring a long turn with many
    of them to Temporal's history limit, which ends the session."""
    size = json_bytes(args)
    if size <= MAX_SHOWN_ARGS_BYTES:
        return args
    try:
        shown = _cut_strings(args)
    except RecursionError:
        shown = None
    if isinstance(shown, dict) and json_bytes(shown) <= MAX_SHOWN_ARGS_BYTES:
        return shown
    return {"argsTruncated": f"{size} bytes of arguments, too many to show: the call's run has them all"}


def _cut_strings(value: Any) -> Any:
    if isinstance(value, str) and len(value) > SHOWN_STRING_CHARS:
        return f"{value[:SHOWN_STRING_CHARS]}… [cut: {len(value)} characters in all]"
    if isinstance(value, dict):
        return {key: _cut_strings(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_cut_strings(item) for item in value]
    return value


EVENT_TYPES = frozenset(
    {
        "agent_start",
        "agent_end",
        "message_start",
        "message_update",
        "message_end",
        "tool_start",
        "tool_update",
        "tool_end",
        "tool_approval_required",
        "tool_suspended",
        "tool_suspension_cancelled",
        "shell_output",
        "mode_changed",
        "model_changed",
        "subagent_model_changed",
        "state_changed",
        "thread_created",
        "thread_changed",
        "thread_deleted",
        "thread_title_updated",
        "usage_update",
        "follow_up_queued",
        "task_updated",
        "subagent_start",
        "subagent_text_delta",
        "subagent_tool_start",
        "subagent_tool_end",
        "subagent_end",
        "goal_evaluation",
        "permissions_changed",
        "info",
        "error",
        "display_state",
    }
)
"""What a session writes to its log. `display_state` is a snapshot the session stores now and then (at
continue-as-new) so a reader need not fold the log from its start; readers do not pass it on."""

SNAPSHOT = "display_state"

_ZERO_USAGE = {
    "promptTokens": 0,
    "completionTokens": 0,
    "totalTokens": 0,
    "cachedInputTokens": 0,
    "cacheCreationInputTokens": 0,
}


def initial_display_state() -> dict[str, Any]:
    """Mastra's initial display state (its maps as JSON objects, as its server sends them)."""
    return {
        "isRunning": False,
        "currentMessage": None,
        "queuedFollowUps": 0,
        "tokenUsage": dict(_ZERO_USAGE),
        "activeTools": {},
        "toolInputBuffers": {},
        "pendingApproval": None,
        "pendingApprovals": {},
        "pendingSuspensions": {},
        "activeSubagents": {},
        "omProgress": {"status": "idle"},
        "bufferingMessages": False,
        "bufferingObservations": False,
        "modifiedFiles": {},
        "tasks": [],
        "previousTasks": [],
    }


class DisplayState:
    """The fold of a session's events. `pendingApprovals` (every call waiting for a decision, by tool call id) is
    Keel's addition: a session may wait on several (a subagent's among them); `pendingApproval` is the first."""

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        self.state = copy.deepcopy(state) if state is not None else initial_display_state()

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.state)

    def apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        s = self.state
        if kind == SNAPSHOT:
            self.state = copy.deepcopy(event.get("displayState") or initial_display_state())
        elif kind == "agent_start":
            s["isRunning"] = True
            s["activeTools"] = {}
            s["toolInputBuffers"] = {}
            s["currentMessage"] = None
        elif kind == "agent_end":
            s["isRunning"] = False
            if event.get("reason") != "suspended":
                s["pendingSuspensions"] = {}
                s["pendingApprovals"] = {}
            for tool in s["activeTools"].values():
                if tool.get("status") in ("running", "streaming_input"):
                    tool["status"] = "error"
            s["activeSubagents"] = {}
            self._first_approval()
        elif kind == "message_start":
            s["currentMessage"] = copy.deepcopy(event.get("message"))
        elif kind == "message_update":
            self._update_message(event)
        elif kind == "tool_start":
            s["activeTools"][event["toolCallId"]] = {
                "name": event.get("toolName"),
                "args": event.get("args"),
                "status": "running",
            }
        elif kind == "tool_update":
            tool = s["activeTools"].setdefault(event["toolCallId"], {"status": "running"})
            tool["partialResult"] = event.get("partialResult")
        elif kind == "shell_output":
            tool = s["activeTools"].setdefault(event["toolCallId"], {"status": "running"})
            tool["shellOutput"] = (tool.get("shellOutput") or "") + str(event.get("output", ""))
        elif kind == "tool_end":
            call_id = event["toolCallId"]
            tool = s["activeTools"].setdefault(call_id, {})
            tool.update(
                status="error" if event.get("isError") else "completed",
                result=event.get("result"),
                isError=bool(event.get("isError")),
            )
            s["pendingApprovals"].pop(call_id, None)
            s["pendingSuspensions"].pop(call_id, None)
            self._first_approval()
        elif kind == "tool_approval_required":
            s["pendingApprovals"][event["toolCallId"]] = {
                k: event.get(k) for k in ("toolCallId", "toolName", "args", "runId", "subagent")
            }
            self._first_approval()
        elif kind == "tool_suspended":
            s["pendingSuspensions"][event["toolCallId"]] = {
                k: event.get(k) for k in ("toolCallId", "toolName", "args", "suspendPayload", "resumeSchema", "runId")
            }
        elif kind == "tool_suspension_cancelled":
            s["pendingSuspensions"].pop(event["toolCallId"], None)
        elif kind == "usage_update":
            usage = event.get("usage") or {}
            total = s["tokenUsage"]
            for key in ("promptTokens", "completionTokens", "totalTokens"):
                total[key] = total.get(key, 0) + int(usage.get(key) or 0)
        elif kind == "task_updated":
            s["previousTasks"] = s["tasks"]
            s["tasks"] = copy.deepcopy(event.get("tasks") or [])
        elif kind == "follow_up_queued":
            s["queuedFollowUps"] = int(event.get("count") or 0)
        elif kind == "subagent_start":
            s["activeSubagents"][event["toolCallId"]] = {
                "agentType": event.get("agentType"),
                "task": event.get("task"),
                "modelId": event.get("modelId"),
                "forked": event.get("forked", False),
                "toolCalls": [],
                "textDelta": "",
                "status": "running",
            }
        elif kind == "subagent_text_delta":
            sub = s["activeSubagents"].get(event["toolCallId"])
            if sub is not None:
                sub["textDelta"] += str(event.get("textDelta", ""))
        elif kind == "subagent_tool_start":
            sub = s["activeSubagents"].get(event["toolCallId"])
            if sub is not None:
                sub["toolCalls"].append({"name": event.get("subToolName"), "isError": False})
        elif kind == "subagent_tool_end":
            sub = s["activeSubagents"].get(event["toolCallId"])
            if sub is not None:
                for call in reversed(sub["toolCalls"]):
                    if call["name"] == event.get("subToolName"):
                        call["isError"] = bool(event.get("isError"))
                        break
        elif kind == "subagent_end":
            sub = s["activeSubagents"].get(event["toolCallId"])
            if sub is not None:
                sub.update(
                    status="error" if event.get("isError") else "completed",
                    result=event.get("result"),
                    durationMs=event.get("durationMs"),
                )
        elif kind in ("thread_changed", "thread_created") or (kind == "thread_deleted" and event.get("unbound")):
            usage = s["tokenUsage"] if kind == "thread_changed" else dict(_ZERO_USAGE)
            self.state = initial_display_state()
            self.state["tokenUsage"] = event.get("tokenUsage") or usage

    def _first_approval(self) -> None:
        pending = self.state["pendingApprovals"]
        first = next(iter(pending.values()), None)
        self.state["pendingApproval"] = (
            {k: first[k] for k in ("toolCallId", "toolName", "args")} if first is not None else None
        )

    def _update_message(self, event: dict[str, Any]) -> None:
        message = self.state["currentMessage"]
        if message is None or message.get("id") != event.get("id"):
            return
        content = message.setdefault("content", {})
        parts: list[dict[str, Any]] = content.setdefault("parts", [])
        update = event.get("event") or {}
        if update.get("type") == "text-delta":
            if parts and parts[-1].get("type") == "text":
                parts[-1]["text"] = parts[-1].get("text", "") + str(update.get("delta", ""))
            else:
                parts.append({"type": "text", "text": str(update.get("delta", ""))})
        elif update.get("type") == "part":
            index = int(update.get("index", len(parts)))
            while len(parts) <= index:
                parts.append({})
            part = update.get("part")
            parts[index] = copy.deepcopy(part) if isinstance(part, dict) else {}


def with_display_states(events: list[dict[str, Any]], state: DisplayState) -> list[dict[str, Any]]:
    """Each event, then `display_state_changed` with the state after it (what a subscriber receives)."""
    out: list[dict[str, Any]] = []
    for event in events:
        state.apply(event)
        if event.get("type") == SNAPSHOT:
            continue
        out.append(event)
        out.append({"type": "display_state_changed", "displayState": state.snapshot()})
    return out
