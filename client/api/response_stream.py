"""A run's chunks as the Responses stream's events, the ones Mastra's route sends and the `openai` SDK's stream
helper accumulates: `response.created`, `response.in_progress`, then per output item `response.output_item.added`,
its deltas (`response.output_text.delta`, `response.function_call_arguments.delta`), its `.done` events and
`response.output_item.done`, and last `response.completed` (or `response.failed`).

Each SSE frame is `event: <type>\\ndata: <event JSON>\\n\\n`; `sequence_number` counts from 1, as Mastra's. Each
step's text is one message item with the step's message id (the id the response's output and the conversation's
items give it); a tool call is a `function_call` item, its result a `function_call_output` item."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from keel.client.api.response_shapes import (
    function_call_item,
    function_call_output_item,
    message_item,
    output_text,
)


def sse_frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


@dataclass
class _Text:
    item_id: str
    index: int
    text: str = ""


class ResponseEvents:
    """The events of one response's stream, from its run's chunks in order."""

    def __init__(self) -> None:
        self._sequence = 0
        self._next_index = 0
        self._message_id: str | None = None  # the current step's answer
        self._open: dict[str, _Text] = {}  # by the chunks' text id
        self._seen: set[str] = set()  # items added: a retried step's repeated chunks add none again

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self._sequence += 1
        return {"type": kind, **fields, "sequence_number": self._sequence}

    def of_chunk(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        kind, payload = chunk.get("type"), chunk.get("payload") or {}
        if kind == "step-start":
            self._message_id = payload.get("messageId")
            return []
        if kind in ("text-start", "text-delta"):
            out = self._start_text(str(payload.get("id", "")))
            text = self._open.get(str(payload.get("id", "")))
            if kind == "text-delta" and text is not None and payload.get("text"):
                text.text += payload["text"]
                out.append(
                    self.event(
                        "response.output_text.delta",
                        item_id=text.item_id,
                        output_index=text.index,
                        content_index=0,
                        delta=payload["text"],
                        logprobs=[],
                    )
                )
            return out
        if kind == "text-end":
            text = self._open.pop(str(payload.get("id", "")), None)
            return [] if text is None else self._end_text(text, "completed")
        if kind == "tool-call":
            return self._call(payload)
        if kind in ("tool-result", "tool-error"):
            result = payload.get("result") if kind == "tool-result" else {"error": payload.get("error")}
            return self._output(str(payload.get("toolCallId", "")), result)
        return []

    def close(self, status: str) -> list[dict[str, Any]]:
        """Done events for the text items still open (a run that stopped mid-step)."""
        out = [e for text in self._open.values() for e in self._end_text(text, status)]
        self._open.clear()
        return out

    def _start_text(self, text_id: str) -> list[dict[str, Any]]:
        if text_id in self._open:
            return []
        item_id = self._message_id or text_id.removesuffix("-text")
        if item_id in self._seen:
            return []
        self._seen.add(item_id)
        text = self._open[text_id] = _Text(item_id, self._index())
        item = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        return [
            self.event("response.output_item.added", output_index=text.index, item=item),
            self.event(
                "response.content_part.added",
                item_id=item_id,
                output_index=text.index,
                content_index=0,
                part=output_text(""),
            ),
        ]

    def _end_text(self, text: _Text, status: str) -> list[dict[str, Any]]:
        where = {"item_id": text.item_id, "output_index": text.index, "content_index": 0}
        return [
            self.event("response.output_text.done", **where, text=text.text, logprobs=[]),
            self.event("response.content_part.done", **where, part=output_text(text.text)),
            self.event(
                "response.output_item.done",
                output_index=text.index,
                item=message_item(text.item_id, text.text, status),
            ),
        ]

    def _call(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        call_id, name = str(payload.get("toolCallId", "")), str(payload.get("toolName", ""))
        if call_id in self._seen:
            return []
        self._seen.add(call_id)
        index = self._index()
        done = function_call_item(call_id, name, payload.get("args"))
        started = done | {"arguments": "", "status": "in_progress"}
        return [
            self.event("response.output_item.added", output_index=index, item=started),
            self.event(
                "response.function_call_arguments.delta", item_id=call_id, output_index=index, delta=done["arguments"]
            ),
            self.event(
                "response.function_call_arguments.done",
                item_id=call_id,
                output_index=index,
                name=name,
                arguments=done["arguments"],
            ),
            self.event("response.output_item.done", output_index=index, item=done),
        ]

    def _output(self, call_id: str, result: Any) -> list[dict[str, Any]]:
        item = function_call_output_item(call_id, result)
        if item["id"] in self._seen:
            return []
        self._seen.add(item["id"])
        index = self._index()
        return [
            self.event("response.output_item.added", output_index=index, item=item),
            self.event("response.output_item.done", output_index=index, item=item),
        ]

    def _index(self) -> int:
        self._next_index += 1
        return self._next_index - 1
