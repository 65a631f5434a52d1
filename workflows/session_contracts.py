"""Contract models of `AgentSession` (an AgentController session) and of the turns it runs as `AgentRun`s.

Same rule as `keel.workflows.contracts`: new fields are optional with defaults, so histories in flight decode.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PrivateAttr

from keel.protocol import Content
from keel.workflows.contracts import Contract, PermissionRules, Policy

Category = Literal["read", "edit", "execute", "mcp", "other"]
Decision = Literal["approve", "decline", "always_allow_category"]


class ModeInfo(Contract):
    id: str
    name: str | None = None
    default_model_id: str | None = None
    transitions_to: str | None = None


class SessionConfig(Contract):
    """The controller's configuration as a session sees it, loaded once (and again at continue-as-new): what
    its updates are checked against."""

    controller_id: str
    agent_id: str
    modes: list[ModeInfo]
    default_mode_id: str
    models: list[str] = Field(default_factory=list)
    """Models a session may switch to; empty: any id (recorded only)."""
    state_schema: dict[str, Any] | None = None
    initial_state: dict[str, Any] = Field(default_factory=dict)
    tool_categories: dict[str, str] = Field(default_factory=dict)
    subagents: list[str] = Field(default_factory=list)
    has_goal_judge: bool = True


class PendingItem(Contract):
    """A call a turn waits on: a decision (`approval`) or resume data (`suspension`)."""

    kind: Literal["approval", "suspension"]
    run_id: str
    tool_call_id: str
    tool_name: str
    args: dict[str, Any] = Field(default_factory=dict)
    category: str | None = None
    suspend_payload: Any = None
    resume_schema: dict[str, Any] | None = None
    subagent: str | None = None
    """The parent tool call id when a subagent's turn waits."""


class Goal(Contract):
    objective: str
    status: Literal["active", "paused", "done"] = "active"
    judge_model_id: str | None = None
    max_runs: int = Field(default=10, ge=1, le=1000)
    runs: int = 0
    last_evaluation: dict[str, Any] | None = None


class SessionCarry(Contract):
    """A session's state, carried across continue-as-new."""

    config: SessionConfig | None = None
    thread_id: str | None = None
    mode_id: str | None = None
    model_id: str | None = None
    model_scope_global: bool = False
    permissions: PermissionRules = Field(default_factory=PermissionRules)
    state: dict[str, Any] = Field(default_factory=dict)
    queued: list[QueuedMessage] = Field(default_factory=list)
    pending: list[PendingItem] = Field(default_factory=list)
    decided: list[str] = Field(default_factory=list)
    """Recently decided tool call ids (bounded), so a second decision is refused with a clear reason."""
    sent: list[SentMessage] = Field(default_factory=list)
    """Recently sent message ids and their answers (bounded): a send made again under its id, after a
    continue-as-new too (where Temporal no longer knows the update's id), gets the first send's answer."""
    goal: Goal | None = None
    turns: int = 0
    """Turns started (each a child `AgentRun` named `<session>-turn-<n>`)."""
    next_turn: int = 0
    """Turns started or queued: the next message's turn number."""
    seq: int = 0
    """Writes of events so far (each written once, as source `session:<n>`)."""
    thread_settings: dict[str, Any] = Field(default_factory=dict)
    """The current thread's settings (its metadata): the mode, the model chosen per mode, subagent models."""
    snapshot_offset: int | None = None
    """Offset of the last display-state snapshot in the session's log: readers fold from there."""
    generation: int = 1
    """Which rules the session took in its first workflow task (`workflows/agent_session.py`, `GENERATION_2`,
    `GENERATION_3`): sessions begun before 2 ask each later rule's patch when they first need it, mid-session."""
    delivered: list[QueuedMessage] = Field(default_factory=list)
    """Messages delivered into the running turn (generation 3, bounded by `MAX_DELIVERED`): when it ends, each
    its thread does not hold (the turn ended before reading it) goes to a turn of its own."""


class QueuedMessage(Contract):
    id: str
    content: Content
    run_id: str
    """The turn that will read it."""
    _bytes: int | None = PrivateAttr(default=None)
    """Its content's size, measured once (not carried)."""


class Accepted(Contract):
    accepted: Literal[True] = True
    run_id: str | None = None
    """The turn that reads the message (a new one, or the running one it was delivered into)."""
    queued: bool = False
    delivered: bool = False
    settled: bool | None = None
    """Answering a send that waits (`SendMessage.wait`): True once the turn has ended or waits on a person, False
    when the session continued as new first (ask `settled` of the new execution); None for a send that did not
    wait (or a worker older than the field)."""


class SentMessage(Contract):
    id: str
    accepted: Accepted


SessionCarry.model_rebuild()


class SessionInput(Contract):
    """Input of the `AgentSession` workflow: one per (controller, resource id, scope)."""

    controller_id: str = Field(min_length=1)
    resource_id: str = Field(min_length=1)
    scope: str | None = None
    thread_id: str | None = None
    tags: dict[str, Any] = Field(default_factory=dict)
    carry: SessionCarry | None = None


# --- updates -------------------------------------------------------------------------------------------------


class SessionOpen(Contract):
    """Input of the `open` update (update-with-start of `create_session`): bind this thread, if given."""

    thread_id: str | None = None


class SendMessage(Contract):
    content: Content
    id: str | None = None
    mode: Literal["send", "steer", "follow_up"] = "send"
    wait: bool = False
    """Answer once the turn that reads the message has ended or waits on a person (`Accepted.settled`), as the
    `settled` update would: one update per waited turn instead of two. A session below generation 8 (or a worker
    older than the field) answers at once, and the client then asks `settled`."""


class Settle(Contract):
    """Input of the `settled` update: wait until this turn (default: the latest) ended or waits on a person."""

    run_id: str | None = None


class SettledNow(Contract):
    """The `settled_now` query's answer: the turn `settled` targets, and whether it has ended or waits on a person."""

    run_id: str | None = None
    settled: bool


class SwitchMode(Contract):
    mode_id: str


class SwitchModel(Contract):
    model_id: str = Field(min_length=1)
    scope: Literal["thread", "global"] = "thread"
    mode_id: str | None = None


class SetState(Contract):
    updates: dict[str, Any]


class SetPermission(Contract):
    category: Category | None = None
    tool_name: str | None = None
    policy: Policy


class ToolApprovalResponse(Contract):
    tool_call_id: str = Field(min_length=1)
    decision: Decision
    reason: str | None = None


class ToolSuspensionResponse(Contract):
    tool_call_id: str = Field(min_length=1)
    resume_data: Any = None


class ThreadChange(Contract):
    """`create` (a new thread `thread_id`, `title`), `switch` (to `thread_id`; made when missing if
    `create_missing`), `rename`, `clone` (of `source_thread_id`, default the current one, as `thread_id`),
    `delete`; internally also `latest` (the resource's most recent thread matching the session's tags, else a new
    one `thread_id`) and `settings` (only write the current thread's settings)."""

    op: Literal["create", "switch", "rename", "clone", "delete", "latest", "settings"]
    thread_id: str | None = None
    title: str | None = None
    source_thread_id: str | None = None
    create_missing: bool = False


class SetSubagentModel(Contract):
    model_id: str = Field(min_length=1)
    agent_type: str | None = None


class SetGoal(Contract):
    objective: str | None = None
    judge_model_id: str | None = None
    max_runs: int | None = Field(default=None, ge=1, le=1000)
    status: Literal["active", "paused", "done"] | None = None
    clear: bool = False


# --- signals from turns -----------------------------------------------------------------------------------------


class TurnWaiting(Contract):
    """A turn's calls waiting on the session: decisions or resume data."""

    items: list[PendingItem]


class TurnDecided(Contract):
    """Calls a turn no longer waits on (decided or resumed, by the session or directly on the run)."""

    run_id: str
    tool_call_ids: list[str]


# --- queries ------------------------------------------------------------------------------------------------------


class SessionSnapshot(Contract):
    """The `snapshot` query: everything a client reads of a live session."""

    session_id: str
    controller_id: str
    resource_id: str
    scope: str | None = None
    thread_id: str | None = None
    mode_id: str
    model_id: str | None = None
    permissions: PermissionRules
    state: dict[str, Any]
    running: bool
    run_id: str | None = None
    pending: list[PendingItem]
    queued: int = 0
    goal: Goal | None = None
    snapshot_offset: int | None = None
    subagent_models: dict[str, str] = Field(default_factory=dict)


class SessionConfigInput(Contract):
    controller_id: str


class SessionEventsInput(Contract):
    """Input of the `keel.session_events` activity: events for the session's log, written once per `source`."""

    session_id: str
    events: list[dict[str, Any]]
    source: str


class UnheardInput(Contract):
    """Input of the `keel.session_unheard` activity: messages delivered into a turn that has ended."""

    run_id: str
    message_ids: list[str]


class UnheardResult(Contract):
    message_ids: list[str]
    """Those of the input's the thread does not hold, in the input's order."""


class SessionThreadInput(Contract):
    """Input of the `keel.session_thread` activity: a thread operation and the settings it reads or writes."""

    session_id: str
    controller_id: str
    resource_id: str
    change: ThreadChange
    source: str
    current_thread_id: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    """Settings to write on the current thread first (mode, per-mode models)."""
    tags: dict[str, Any] = Field(default_factory=dict)
    new_thread_settings: dict[str, Any] = Field(default_factory=dict)
    """Settings a thread the change makes starts with."""


class SessionSnapshotInput(Contract):
    session_id: str
    from_offset: int | None = None
    source: str


class JudgeInput(Contract):
    session_id: str
    controller_id: str
    thread_id: str | None = None
    objective: str
    judge_model_id: str | None = None
    run: int = 0


class JudgeResult(Contract):
    done: bool
    reason: str = ""


class SessionThreadResult(Contract):
    thread_id: str | None = None
    thread: dict[str, Any] | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    """The settings stored on the thread the session is on after the change."""
    events: list[dict[str, Any]] = Field(default_factory=list)
