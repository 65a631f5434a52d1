"""The OpenAI Responses shapes Mastra's `/v1/responses` and `/v1/conversations` routes answer, built from Keel's
stored messages and runs: conversation items, a response's output items, usage, the response object.

Items keep the ids of the messages they come from (a response's message items, the conversation's items and the
streamed items are the same ids); a function call is its call id, its output `<callId>:output`, as Mastra's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from keel.client.api.response_records import ResponseRecord
from keel.protocol import Content, TextPart, ToolCallPart, ToolResultPart, Usage
from keel.storage import StoredMessage

ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed"]


def compact_json(value: Any) -> str:
    """`JSON.stringify` of a tool's arguments or result: a string stays itself, nothing is `{}`."""
    if isinstance(value, str):
        return value
    return json.dumps({} if value is None else value, separators=(",", ":"), ensure_ascii=False, default=str)


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    """An assistant message of a response (`status`: in_progress, completed or incomplete)."""
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": [output_text(text)]}


def function_call_item(call_id: str, name: str, args: Any, status: str = "completed") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": compact_json(args),
        "status": status,
    }


def function_call_output_item(call_id: str, output: Any) -> dict[str, Any]:
    return {
        "id": f"{call_id}:output",
        "type": "function_call_output",
        "call_id": call_id,
        "output": compact_json(output),
    }


def _text(content: Content) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


def items(messages: Sequence[StoredMessage], *, status: str = "completed") -> list[dict[str, Any]]:
    """The messages as items, in order: a user or system message's text as `input_text`; an assistant message's
    text (`status` given), then its calls; a tool message's results. Messages without text add no message."""
    out: list[dict[str, Any]] = []
    for message in messages:
        text = _text(message.content)
        if message.role in ("user", "system") and text:
            content = {"type": "input_text", "text": text}
            out.append(
                {"id": message.id, "type": "message", "role": message.role, "status": "completed", "content": [content]}
            )
        elif message.role == "assistant" and text:
            out.append(message_item(message.id, text, status))
        for part in [] if isinstance(message.content, str) else message.content:
            if isinstance(part, ToolCallPart) and message.role == "assistant":
                out.append(function_call_item(part.tool_call_id, part.tool_name, part.args))
            elif isinstance(part, ToolResultPart):
                out.append(function_call_output_item(part.tool_call_id, part.result))
    return _unique_ids(out)


def _unique_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items, a repeated id given the first free suffix (the second `call_1` is `call_1-2`, or `call_1-3`
    where the thread holds a `call_1-2`): a function call's item id is its call id, as in Mastra, and runs at
    once on one thread may each give a call the same id. The `openai` SDK pages by item id (`after`), and a
    repeated one sent it round for good."""
    taken = {item["id"] for item in items}
    seen: set[str] = set()
    for item in items:
        if item["id"] in seen:
            n = 2
            while f"{item['id']}-{n}" in taken:
                n += 1
            item["id"] = f"{item['id']}-{n}"
            taken.add(item["id"])
        seen.add(item["id"])
    return items


def output_items(messages: Sequence[StoredMessage], status: ResponseStatus) -> list[dict[str, Any]]:
    """A response's output: what its run answered (its assistant and tool messages), as Mastra lists it."""
    answered = [m for m in messages if m.role in ("assistant", "tool")]
    return items(
        answered,
        status="completed" if status == "completed" else "in_progress" if status == "in_progress" else "incomplete",
    )


def usage_json(usage: Usage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def response_json(
    record: ResponseRecord,
    *,
    status: ResponseStatus,
    output: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    usage: Usage | None = None,
    completed_at: int | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The response object (Mastra's `responseObjectSchema`, which the `openai` SDK's `Response` reads)."""
    return {
        "id": record.id,
        "object": "response",
        "created_at": record.created_at,
        "completed_at": completed_at,
        "model": record.model,
        "status": status,
        "output": output,
        "usage": usage_json(usage),
        "error": error,
        "incomplete_details": None,
        "instructions": record.instructions,
        "text": record.text,
        "previous_response_id": record.previous_response_id,
        "conversation_id": record.conversation_id,
        "tools": tools,
        "store": record.store,
    }
