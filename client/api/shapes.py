"""The JSON shapes `@mastra/client-js` expects, built from Keel's own objects (no state of their own).

Schemas go out as Mastra sends them: a string holding superjson, `{"json": <JSON Schema>}`, which the client's
`parseSuperJsonString` unwraps."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from keel.app import Agent, App, Tool
from keel.app.agent_tools import agent_instructions, agent_tools
from keel.protocol import ToolCallApprovalChunk, ToolCallPayload
from keel.workflows.contracts import AgentRunResult, PendingToolCall, StepState, WorkflowRunState


def superjson(schema: Mapping[str, Any] | None) -> str | None:
    return None if schema is None else json.dumps({"json": schema})


def tool_details(tool: Tool) -> dict[str, Any]:
    """Mastra's tool object: a function policy for approval shows as `requireApproval: true` (it may ask)."""
    return {
        "id": tool.id,
        "description": tool.description,
        "inputSchema": superjson(tool.spec.parameters),
        "requireApproval": tool.require_approval is not False,
    }


async def _skills(workspace: Any, request_context: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The agent's skills as Mastra lists them: `{name, description, license, path}` (none when discovery fails)."""
    if workspace is None or workspace.skills is None:
        return []
    try:
        found = await (await workspace.skills.scoped(request_context)).list()
    except Exception:
        return []  # Mastra shows an agent whose skills cannot be read, without them
    shown = ({"name": s.name, "description": s.description, "license": s.license, "path": s.path} for s in found)
    return [{k: v for k, v in s.items() if v is not None} for s in shown]


async def agent_details(
    app: App, agent: Agent, request_context: Mapping[str, Any] | None = None, *, partial: bool = False
) -> dict[str, Any]:
    tools = await agent_tools(app, agent, request_context)
    workspace = app.workspace_of(agent)
    provider, _, model = agent.model.model_id.rpartition("/")
    shown = {}
    for t in tools:
        details = tool_details(t)
        if partial:
            details.pop("inputSchema")
        shown[t.id] = details
    return {
        "id": agent.id,
        "name": agent.display_name,
        "description": agent.description,
        "instructions": await agent_instructions(app, agent, request_context),
        "agents": {},
        "tools": shown,
        "workflows": {},
        "skills": await _skills(workspace, request_context),
        "workspaceTools": [
            t.id for t in tools if t.workspace_tool is not None and t.workspace_tool.kind.needs != "skills"
        ],
        "browserTools": [],
        "hasBrowser": False,
        "inputProcessors": [],
        "outputProcessors": [],
        "provider": provider or "keel",
        "modelId": model,
        "modelVersion": "v2",
        "supportsMemory": True,
        "defaultOptions": {"maxSteps": agent.max_steps},
        "defaultGenerateOptionsLegacy": {},
        "defaultStreamOptionsLegacy": {},
        "source": "code",
        "hasDraft": False,
        "workspaceId": workspace.id if workspace is not None else None,
    }


def _usage(result: AgentRunResult | None) -> dict[str, int]:
    usage = result.usage if result is not None else None
    if usage is None:
        return {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
    dumped: dict[str, int] = usage.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def full_output(run_id: str, model_id: str, result: AgentRunResult) -> dict[str, Any]:
    """Mastra's generate answer (FullOutput) for a finished run."""
    dumped = result.model_dump(mode="json", by_alias=True)
    usage = _usage(result)
    return {
        "text": result.text,
        "usage": usage,
        "totalUsage": usage,
        "steps": [],
        "finishReason": result.finish_reason,
        "warnings": [],
        "request": {},
        "reasoning": [],
        "toolCalls": dumped["toolCalls"],
        "toolResults": dumped["toolResults"],
        "sources": [],
        "files": [],
        "response": _response(run_id, model_id),
        "usedFallbackValue": False,
        "runId": run_id,
    }


def suspended_output(
    run_id: str,
    model_id: str,
    text: str,
    pending: Sequence[ToolCallPayload | PendingToolCall],
    approvals: Sequence[ToolCallApprovalChunk],
) -> dict[str, Any]:
    """The generate answer of a run waiting for a tool approval: `finishReason: "suspended"` and the call."""
    calls = [
        {
            "type": "tool-call",
            "runId": run_id,
            "from": "AGENT",
            "payload": {"toolCallId": p.tool_call_id, "toolName": p.tool_name, "args": p.args},
        }
        for p in pending
    ]
    schemas = {a.payload.tool_call_id: a.payload.resume_schema for a in approvals}
    first = pending[0] if pending else None
    out = {
        "text": text,
        "usage": _usage(None),
        "totalUsage": _usage(None),
        "steps": [],
        "finishReason": "suspended",
        "warnings": [],
        "request": {},
        "reasoning": [],
        "toolCalls": calls,
        "toolResults": [],
        "sources": [],
        "files": [],
        "response": _response(run_id, model_id),
        "usedFallbackValue": False,
        "runId": run_id,
    }
    if first is not None:
        out["suspendPayload"] = {
            "toolCallId": first.tool_call_id,
            "toolName": first.tool_name,
            "args": first.args,
            "resumeSchema": schemas.get(first.tool_call_id, APPROVAL_RESUME_SCHEMA),
        }
    return out


APPROVAL_RESUME_SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["approved"],
    }
)


def _response(run_id: str, model_id: str) -> dict[str, Any]:
    return {
        "id": run_id,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
        "modelId": model_id,
        "messages": [],
        "uiMessages": [],
    }


# --- workflows -------------------------------------------------------------------------------------------


def _step(step_id: str, state: StepState) -> dict[str, Any]:
    shown: dict[str, Any] = {"status": state.status}
    if state.status == "success":
        shown["output"] = state.output
    if state.status == "suspended":
        shown["suspendPayload"] = state.suspend_payload
    return shown


def workflow_result(run_id: str, state: WorkflowRunState, input_data: Any = None) -> dict[str, Any]:
    """Mastra's WorkflowResult (start-async, resume-async) from a run's `state`."""
    steps = {k: _step(k, s) for k, s in state.steps.items()}
    out: dict[str, Any] = {
        "status": state.status,
        "steps": steps,
        "input": input_data,
        "stepExecutionPath": list(state.steps),
        "runId": run_id,
    }
    suspended = [k for k, s in state.steps.items() if s.status == "suspended"]
    if suspended:
        out["suspended"] = [[k] for k in suspended]
        out["suspendPayload"] = {k: state.steps[k].suspend_payload for k in suspended}
    if state.status == "success":
        out["result"] = state.result
    if state.status == "failed":
        out["error"] = {"message": state.error or "failed", "name": "Error"}
    return out
