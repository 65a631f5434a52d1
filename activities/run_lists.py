"""A run's tool calls and results, rebuilt from its messages in storage for its final result (the workflow
carries none of them across steps or continue-as-new)."""

from __future__ import annotations

from typing import Any

from pydantic_core import to_json

from keel.protocol import (
    ToolCallChunk,
    ToolCallPart,
    ToolCallPayload,
    ToolResultChunk,
    ToolResultPart,
    ToolResultPayload,
)
from keel.storage import Storage

MAX_RESULT_LISTS_BYTES = 64 * 1024 * 1024
"""The results a run's final result carries, as JSON; beyond it a result is replaced by a note of its size (the
full result stays in the thread), so a run's result stays bounded however long the run."""


async def run_lists(storage: Storage, thread_id: str, run_id: str) -> tuple[list[ToolCallChunk], list[ToolResultChunk]]:
    """Mastra's `toolCalls` and `toolResults` of the whole run, in call order, step by step."""
    messages = await storage.run_messages(thread_id, run_id)
    calls: list[ToolCallChunk] = []
    results: list[ToolResultChunk] = []
    step: list[ToolCallPart] = []  # the calls of the latest assistant message; its tool messages follow it
    answered: dict[str, ToolResultPart] = {}
    budget = MAX_RESULT_LISTS_BYTES

    def close_step() -> None:
        nonlocal budget
        for call in step:
            part = answered.get(call.tool_call_id)
            if part is None:
                continue
            result: Any = part.result
            size = len(to_json(result))
            if size > budget:
                result = {"omitted": f"{size} bytes; the whole result is in thread {thread_id!r}"}
            else:
                budget -= size
            payload = ToolResultPayload(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                args=call.args,
                result=result,
                is_error=part.is_error or None,
            )
            results.append(ToolResultChunk(run_id=run_id, payload=payload))
        step.clear()
        answered.clear()

    for message in messages:
        parts = message.content if isinstance(message.content, list) else []
        if message.role == "assistant":
            close_step()
            step.extend(p for p in parts if isinstance(p, ToolCallPart))
            calls.extend(
                ToolCallChunk(
                    run_id=run_id,
                    payload=ToolCallPayload(tool_call_id=p.tool_call_id, tool_name=p.tool_name, args=p.args),
                )
                for p in step
            )
        elif message.role == "tool":
            answered.update((p.tool_call_id, p) for p in parts if isinstance(p, ToolResultPart))
    close_step()
    return calls, results
