"""The names users and their tools rely on: workflow types, activities, signals, updates, queries, search
attributes and defaults. Fixed contract: never renamed (a rename strands every run in flight)."""

from __future__ import annotations

from typing import Final

DEFAULT_NAMESPACE: Final = "default"
DEFAULT_TASK_QUEUE: Final = "keel"

# Workflows
AGENT_RUN: Final = "AgentRun"
ATTRIBUTES_AT_START_MEMO: Final = "keelSearchAttributesAtStart"
"""Memo of a run started with its search attributes (Keel's client does): the run does not upsert them again."""

# Activities of the agent loop
MODEL_STEP: Final = "keel.model_step"
TOOL_CALL: Final = "keel.tool_call"
TOOLS_THEN_MODEL: Final = "keel.tools_then_model"
FINISH_RUN: Final = "keel.finish_run"
PERSIST_WRITES: Final = "keel.persist_writes"
KILL_PROCESSES: Final = "keel.kill_processes"
EXECUTE_TOOL: Final = "keel.execute_tool"
"""One tool of an agent run outside any run, as a standalone activity (`keel tool`, `tools/:id/execute`)."""

# Workflow definition runs
LOAD_DEFINITION: Final = "keel.load_workflow_definition"
WORKFLOW_TOOL_STEP: Final = "keel.workflow_tool_step"
WORKFLOW_CLASSIFIER_STEP: Final = "keel.workflow_classifier_step"
RESUME_SIGNAL: Final = "resume"
RESUME_STEP_UPDATE: Final = "resume_step"
SETTLED_UPDATE: Final = "settled"
"""Waits until a workflow run suspends or ends and answers its state (Mastra's startAsync / resumeAsync)."""
STATE_QUERY: Final = "state"
EVENTS_QUERY: Final = "events"
TIME_TRAVEL_SIGNAL: Final = "time_travel"
"""What a run reset by Keel's time travel does at its step (`keel.workflows.time_travel`)."""
TIME_TRAVEL_POINT_QUERY: Final = "time_travel_point"
"""Where a step of a definition run first started: the workflow task a time travel resets the run to."""
TIME_TRAVEL_WAITING_QUERY: Final = "time_travel_waiting"
"""The execution whose reset's `time_travel` signal a definition run waits for (None when it does not)."""
RESET_ORIGIN: Final = "keel.reset_origin"
"""Local activity of a run just reset: was it Keel's time travel (then its `time_travel` signal is coming)?"""
TIME_TRAVEL_REASON: Final = "keel time travel"
"""How the reason of a reset made by Keel's time travel begins (the Temporal UI shows it with the reset)."""
STOPPED_FOR_CANCEL: Final = "KeelStoppedForCancel"
"""The failure type of a step that stopped because its run was asked to cancel (`keel.workflows.cancellation`)."""

# One tool called from outside any run
TOOL_CALL_WORKFLOW: Final = "ToolCall"
"""One tool of an agent called from outside any run (an MCP client's `tools/call`): its approval wait (the
`tool_approval` signal, as an `AgentRun`'s) and the tool as a `keel.execute_tool` activity."""

# Workspace search indexing
INDEX_WORKSPACE: Final = "IndexWorkspace"
"""Index a workspace's files for search (`keel index`): one long activity that heartbeats its progress."""
INDEX_WORKSPACE_ACTIVITY: Final = "keel.index_workspace"
BLOB_SWEEP: Final = "BlobSweep"
SWEEP_BLOBS_ACTIVITY: Final = "keel.sweep_blobs"
BLOB_SWEEP_SCHEDULE: Final = "keel-blob-sweep"

# Handlers of `AgentRun`
TOOL_APPROVAL_SIGNAL: Final = "tool_approval"
AGENT_THREAD: Final = "AgentThread"
SEND_MESSAGE_UPDATE: Final = "send"
APPEND_THREAD_MESSAGE: Final = "keel.append_thread_message"
WAIT_RUN_CLOSED: Final = "keel.wait_run_closed"
USER_MESSAGE_SIGNAL: Final = "user_message"
"""A user message delivered into a running `AgentRun` (its next model step reads it)."""
APPROVE_TOOL_CALL_UPDATE: Final = "approve_tool_call"
PENDING_TOOL_CALLS_QUERY: Final = "pending_tool_calls"
RUN_SETTLED_UPDATE: Final = "settled"
"""Answered once the run waits on a person (calls to decide or to resume) or has ended."""
REJECTED_SIGNALS_QUERY: Final = "rejected_signals"
MESSAGE_REFUSAL_QUERY: Final = "message_refusal"
"""Why the run refused the `user_message` of this id, or null when it took it (or never heard of it)."""

# AgentController sessions
AGENT_SESSION: Final = "AgentSession"
"""One AgentController session: its mode, model, permissions, state and turns (`keel.workflows.agent_session`)."""
SESSION_OPEN_UPDATE: Final = "open"
SESSION_SEND_UPDATE: Final = "send_message"
SESSION_ABORT_UPDATE: Final = "abort"
SESSION_MODE_UPDATE: Final = "switch_mode"
SESSION_MODEL_UPDATE: Final = "switch_model"
SESSION_STATE_UPDATE: Final = "set_state"
SESSION_PERMISSION_UPDATE: Final = "set_permission"
SESSION_APPROVAL_UPDATE: Final = "respond_to_tool_approval"
SESSION_SUSPENSION_UPDATE: Final = "respond_to_tool_suspension"
SESSION_THREAD_UPDATE: Final = "change_thread"
SESSION_SUBAGENT_MODEL_UPDATE: Final = "set_subagent_model"
SESSION_GOAL_UPDATE: Final = "set_goal"
SESSION_SETTLED_UPDATE: Final = "settled"
SESSION_SNAPSHOT_QUERY: Final = "snapshot"
SESSION_SETTLED_QUERY: Final = "settled_now"
TURN_WAITING_SIGNAL: Final = "turn_waiting"
"""From a session's turn (an `AgentRun`) to its session: calls waiting for a decision or resume data."""
TURN_DECIDED_SIGNAL: Final = "turn_decided"
TURN_CONFIG_SIGNAL: Final = "turn_config"
"""From a session to its running turn: the mode or permissions changed; later steps use the new ones."""
RESUME_TOOL_SIGNAL: Final = "resume_tool"
"""Resume data for a suspended tool call of an `AgentRun` (`{toolCallId, resumeData}`)."""
RESUME_TOOL_UPDATE: Final = "resume_tool_call"
SUSPENDED_TOOL_CALLS_QUERY: Final = "suspended_tool_calls"
SESSION_CONFIG: Final = "keel.session_config"
SESSION_EVENTS: Final = "keel.session_events"
SESSION_THREAD: Final = "keel.session_thread"
SESSION_SNAPSHOT: Final = "keel.session_snapshot"
SESSION_JUDGE: Final = "keel.session_judge"
SESSION_UNHEARD: Final = "keel.session_unheard"
FORK_THREAD: Final = "keel.fork_thread"


def session_workflow_id(controller_id: str, resource_id: str, scope: str | None) -> str:
    """The id of the session of (controller, resource, scope): any process derives the same one. Each part is
    percent-encoded, so `:` separates them unambiguously."""
    from urllib.parse import quote

    parts = [quote(controller_id, safe=""), quote(resource_id, safe=""), quote(scope or "", safe="")]
    return "keel-session:" + ":".join(parts)


# Search attributes (all Keyword)
KEEL_KIND: Final = "KeelKind"
"""`agent`, `workflow`, `session` or `tool` (a `ToolCall`)."""
KEEL_STATUS: Final = "KeelStatus"
"""`running` or `suspended` while open; `completed` or `failed` once the run ends on its own."""
KEEL_AGENT_ID: Final = "KeelAgentId"
KEEL_WORKFLOW_ID: Final = "KeelWorkflowId"
KEEL_RESOURCE_ID: Final = "KeelResourceId"
KEEL_THREAD_ID: Final = "KeelThreadId"
KEEL_CONTROLLER_ID: Final = "KeelControllerId"
"""A session's AgentController."""
SEARCH_ATTRIBUTES: Final = (
    KEEL_KIND,
    KEEL_STATUS,
    KEEL_AGENT_ID,
    KEEL_WORKFLOW_ID,
    KEEL_RESOURCE_ID,
    KEEL_THREAD_ID,
    KEEL_CONTROLLER_ID,
)


def thread_workflow_id(agent_id: str, thread_id: str) -> str:
    """The id of the `AgentThread` entity of an agent's thread."""
    return f"keel-thread-{agent_id}-{thread_id}"


def thread_run_log(agent_id: str, thread_id: str) -> str:
    """The event log where each run of the agent on the thread announces its start (`run-start` {runId}), so
    thread subscribers learn of it at once. Named as the thread's entity: no run can have that id."""
    return thread_workflow_id(agent_id, thread_id)


def delivered_message_id(run_id: str, delivery_id: str) -> str:
    """The id of a user message delivered into a running run (`user_message`), from its delivery's id: the same
    whichever step it goes with, so a step executed again keeps its own answer's id."""
    return f"{run_id}-d-{delivery_id}"


def run_message_id(run_id: str, seq: int) -> str:
    """The id of a run's `seq`-th message (1-based: its input messages, then each answer and tool result).
    Fixed contract: a run's first answer is `run_message_id(run_id, len(input messages) + 1)`, the message id
    of its `start` chunk."""
    return f"{run_id}-m{seq}"
