"""Contract models: every workflow and activity input and output, as pydantic models.

Field names are snake_case in Python and camelCase on the wire (the JSON that the `temporal` CLI, the Temporal
UI and HTTP clients see). Rule for changes: new fields are optional with defaults, so histories in flight decode.
Messages, usage and stream chunks are the shared data of `keel.protocol`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from keel.protocol import (
    Content,
    EventRecord,
    FinishReason,
    InputMessage,
    MessageRecord,
    ToolCallChunk,
    ToolResultChunk,
    Usage,
    WireModel,
)


class Contract(WireModel):
    """Base of every contract model."""


class CompactResult(Contract):
    """A step's result, recorded in the history at every step: fields that are None are left out of its JSON
    (each such field defaults to None, so the value read back is the same)."""

    @model_serializer(mode="wrap")
    def _without_nones(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if value is not None}


class PendingWrites(Contract):
    """Messages and events decided in the workflow, persisted by the next activity that touches storage."""

    messages: list[MessageRecord] = Field(default_factory=list)
    events: list[EventRecord] = Field(default_factory=list)


# --- AgentRun: the workflow's public contract -----------------------------------------------------------


LEGACY_LOCAL_STEPS_PER_TASK = 4
LOCAL_STEPS_PER_TASK = 16
"""Local steps per workflow task of the shapes pinned now: a turn of up to 16 steps that all fuse is one workflow
task (a step adds one marker to the history), and a longer one still crosses workflow tasks, where Temporal's
continue-as-new suggestion is seen."""
LOCAL_STEP_BYTES_PER_TASK = 1024 * 1024
"""What the local steps of one workflow task may return in all (their results travel in its completion, each
up to the 256 KiB that payloads take inline): past it, the next step is a regular activity."""


class RunShape(Contract):
    """The settings that decide which commands a run issues. The worker that starts a run picks them (its
    `AgentActivityOptions`); they are recorded in the run's history as a marker and carried across
    continue-as-new, so a worker with other settings continues the run exactly as it began."""

    model_config = ConfigDict(frozen=True)

    model_as_local_activity: bool = True
    fuse_tools_with_next_model_step: bool = True
    fused_step_as_local_activity: bool = False
    """Runs pinned before this field existed ran a fused step as a regular activity: the default keeps them so."""
    local_steps_per_task: int = LEGACY_LOCAL_STEPS_PER_TASK
    """Local steps a run chains in one workflow task before a regular one; beyond the legacy 4, also at most
    `LOCAL_STEP_BYTES_PER_TASK` of their results. Runs pinned before this field existed chained 4."""
    generation: int = 1
    """Which of the run's rules its shape decides. Generation 1 (runs pinned before this field existed) asked a
    `workflow.patched` for each later rule when it first needed it, which can be in reaction to a local step's
    result, where a replay may meet it a workflow task early and fail; from generation 2 the shape holds the
    rules of `workflows/agent_run.py`'s `RULES_IN_SHAPE` (a later rule takes generation 3, and so on: see
    `RUN_GENERATION`). Not the same counter as `SessionCarry.generation`, a session's."""

    def marker(self) -> str:
        """The id of the `workflow.patched` marker that records this shape (visible in the UI's history)."""
        model = "local-activity" if self.model_as_local_activity else "activity"
        steps = "fused" if self.fuse_tools_with_next_model_step else "apart"
        if self.fused_step_as_local_activity:
            steps += "-local-activity"
        budget = (
            "" if self.local_steps_per_task == LEGACY_LOCAL_STEPS_PER_TASK else f",{self.local_steps_per_task}-local"
        )
        generation = "" if self.generation == 1 else f",gen-{self.generation}"
        return f"keel-run-shape:model-{model},steps-{steps}{budget}{generation}"

    @property
    def any_local(self) -> bool:
        return self.model_as_local_activity or self.fused_step_as_local_activity


RUN_GENERATION = 3
"""The `RunShape.generation` of runs started now. Generation 3 starts a step's tool calls that run as activities
of their own only as their arguments fit in a workflow task (`keel.workflows.task_budget`): at generation 2 all
at once, and a step whose calls' arguments passed 4 MiB ended the run terminated. Generation-2 runs keep doing
so (their branch may go once none is open: runs waiting on a person may be open for days, so a release or two)."""

ALL_SHAPES = tuple(
    RunShape(
        model_as_local_activity=local,
        fuse_tools_with_next_model_step=fused,
        fused_step_as_local_activity=la,
        local_steps_per_task=budget,
        generation=RUN_GENERATION,
    )
    for local in (True, False)
    for fused, la in ((True, True), (True, False), (False, False))
    for budget in (LOCAL_STEPS_PER_TASK, LEGACY_LOCAL_STEPS_PER_TASK)
    if budget == LEGACY_LOCAL_STEPS_PER_TASK or local or la
)
"""The shapes a worker may start a run in (a fused step runs locally only where steps are fused)."""


class FileReadRecord(Contract):
    """The agent read `path` (a read-tracker key) of the filesystem `scope` at mtime `modified_at_ms`."""

    path: str
    scope: str
    modified_at_ms: int


MAX_FILE_READS = 1000
"""Read records a run keeps (the oldest forgotten first): a write to a file read longer ago needs a new read."""
MAX_PROCESSES = 200
"""Background processes a run remembers the host of (the oldest forgotten first)."""


class RunCarry(Contract):
    """State carried across continue-as-new. Internal: callers never set it."""

    shape: RunShape | None = None
    """None only in runs carried by code from before shapes were pinned."""
    step: int
    message_seq: int
    last_message_id: str | None = None
    """The latest assistant message: the next model step refuses a thread that lacks it."""
    usage: Usage = Field(default_factory=Usage)
    max_steps: int | None = None
    pending: PendingWrites = Field(default_factory=PendingWrites)
    pending_bytes: int = 0
    """Bytes of tool results in `pending` (bounded by `MAX_PENDING_RESULT_BYTES`)."""
    unheard: bool = False
    """Delivered user messages went with a step that answered from storage (an earlier execution's answer, given
    before they came): a later model step must hear them before the run ends."""
    file_reads: dict[str, FileReadRecord] = Field(default_factory=dict)
    """Read-before-write state of workspace tools, by path (at most `MAX_FILE_READS`)."""
    processes: dict[str, str] = Field(default_factory=dict)
    """Background process id → the task queue of the worker host it runs on (at most `MAX_PROCESSES`)."""
    refused: dict[str, str] = Field(default_factory=dict)
    """The last user messages the run refused (their id: why), so a sender asking after a continue-as-new
    (`message_refusal`) is still told (at most `MAX_REJECTED_SIGNALS`)."""


Policy = Literal["allow", "ask", "deny"]


class PermissionRules(Contract):
    """Policies by category and by tool (a tool's beats its category's), and what the session granted."""

    categories: dict[str, Policy] = Field(default_factory=dict)
    tools: dict[str, Policy] = Field(default_factory=dict)
    granted_categories: list[str] = Field(default_factory=list)
    granted_tools: list[str] = Field(default_factory=list)
    yolo: bool = False

    def resolve(self, tool_name: str, category: str | None) -> Policy:
        """Mastra's order: a tool `deny`, then yolo, then a tool rule, a tool grant, a category grant or rule;
        `ask` when nothing says otherwise."""
        rule = self.tools.get(tool_name)
        if rule == "deny":
            return "deny"
        if self.yolo:
            return "allow"
        if rule is not None:
            return rule
        if tool_name in self.granted_tools:
            return "allow"
        if category is not None:
            if category in self.granted_categories:
                return "allow"
            if category in self.categories:
                return self.categories[category]
        return "ask"


class SubagentTurn(Contract):
    """A turn that is a subagent of a session's turn: its events go to the session as `subagent_*`."""

    parent_tool_call_id: str
    agent_type: str
    task: str
    forked: bool = False
    model_id: str | None = None


class TurnConfig(Contract):
    """What a session gives each turn (`AgentRunInput.turn`): the controller and mode whose instructions and tools
    the turn has, the model, the permission policy, and where its events go (the session's log)."""

    session_id: str
    controller_id: str
    mode_id: str
    model_id: str | None = None
    permissions: PermissionRules = Field(default_factory=PermissionRules)
    subagent: SubagentTurn | None = None
    subagent_id: str | None = None
    """The subagent definition a subagent turn runs as (its instructions and allowed tools)."""
    subagent_models: dict[str, str] = Field(default_factory=dict)
    """The session's subagent model choices: by agent type, and `""` for every type."""


class AgentRunInput(Contract):
    """Input of the `AgentRun` workflow (fixed contract)."""

    agent_id: str = Field(min_length=1)
    messages: str | list[InputMessage]
    thread_id: str | None = None
    resource_id: str | None = None
    max_steps: int | None = Field(default=None, ge=1, le=1000)
    request_context: dict[str, Any] | None = None
    carry: RunCarry | None = None
    turn: TurnConfig | None = None
    """Set when the run is a turn of an AgentController session (`AgentSession` starts it)."""


class AgentRunResult(Contract):
    """Result of the `AgentRun` workflow: Mastra's generate result."""

    run_id: str
    text: str
    finish_reason: FinishReason
    tool_calls: list[ToolCallChunk] = Field(default_factory=list)
    tool_results: list[ToolResultChunk] = Field(default_factory=list)
    usage: Usage | None = None
    steps: int = 0


class DeliveredMessage(Contract):
    """Input of AgentRun's `user_message` signal: a user message delivered into the running turn (Mastra's
    send-message to an active thread). The run stores it in the thread and its next model step reads it."""

    id: str = Field(min_length=1)
    content: Content


IfActive = Literal["deliver", "persist", "discard", "queue"]
IfIdle = Literal["wake", "persist", "discard"]


class ThreadMessage(Contract):
    """Input of AgentThread's `send` update: a user message for the thread, and what to do with it while a run
    of the thread is active (`deliver` into it, `queue` it for the run that follows, `persist` it in the thread
    only, `discard` it) or while the thread is idle (`wake` a run, `persist`, `discard`)."""

    message_id: str = Field(min_length=1)
    content: Content
    if_active: IfActive = "deliver"
    if_idle: IfIdle = "wake"
    active_run_id: str | None = None
    """A run of the thread the caller found running (a run the thread did not start itself)."""
    max_steps: int | None = Field(default=None, ge=1, le=1000)
    request_context: dict[str, Any] | None = None


class ThreadSendResult(Contract):
    accepted: bool
    run_id: str | None = None
    outcome: Literal["delivered", "queued", "woke", "persisted", "discarded"]


class AgentThreadInput(Contract):
    """Input of `AgentThread`, the entity that owns one agent's deliveries to one thread."""

    agent_id: str = Field(min_length=1)
    thread_id: str = Field(min_length=1)
    resource_id: str = Field(min_length=1)
    queued: list[ThreadMessage] = Field(default_factory=list)
    """Messages waiting for the active run to end (carried across continue-as-new)."""
    waiting_on: str | None = None
    """The run the queued messages wait for."""


class ThreadAppendInput(Contract):
    thread_id: str
    resource_id: str
    message_id: str
    content: Content


class RunClosedInput(Contract):
    run_id: str


class PendingToolCall(Contract):
    """One entry of the `pending_tool_calls` query."""

    tool_call_id: str
    tool_name: str
    args: dict[str, Any] = Field(default_factory=dict)
    step: int | None = None
    """The model step that asked for the call: models reuse tool call ids across steps."""
    args_digest: str | None = None
    """`keel.protocol.args_digest(args)`."""


class ToolApproval(Contract):
    """Input of the `tool_approval` signal and the `approve_tool_call` update.

    `step` and `argsDigest` are optional: an approval that carries them (from `pending_tool_calls`) decides the
    call only if it is still that step's call with those arguments, so a late or repeated approval for an earlier
    step's `call_1` never approves a later step's `call_1`."""

    tool_call_id: str = Field(min_length=1)
    approved: bool
    reason: str | None = None
    step: int | None = None
    args_digest: str | None = None


class StepSuspension(Contract):
    """A tool call (or a workflow's tool step) waiting for resume data: what it asked, and the JSON Schema the
    data must match."""

    payload: Any = None
    resume_schema: dict[str, Any] | None = None


class SuspendedToolCall(Contract):
    """One entry of `AgentRun`'s `suspended_tool_calls` query: a tool that called `ctx.suspend(...)`."""

    tool_call_id: str
    tool_name: str
    args: dict[str, Any] = Field(default_factory=dict)
    step: int | None = None
    suspend_payload: Any = None
    resume_schema: dict[str, Any] | None = None


class ToolResume(Contract):
    """Input of `AgentRun`'s `resume_tool` signal and `resume_tool_call` update: resume data for a suspended
    call, checked against its resume schema."""

    tool_call_id: str = Field(min_length=1)
    resume_data: Any = None


class ApprovalAccepted(Contract):
    accepted: Literal[True] = True
    tool_call_id: str


class RunSettled(Contract):
    """`AgentRun`'s `settled` update: what the run waits for now, or that it has ended (then both are empty)."""

    pending: list[PendingToolCall] = Field(default_factory=list)
    suspended: list[SuspendedToolCall] = Field(default_factory=list)
    ended: bool = False
    continued: bool = False
    """The execution is continuing as new: ask the next one (`KeelClient.settle` does)."""


# --- Activities -----------------------------------------------------------------------------------------


class PlannedToolCall(CompactResult):
    """A tool call the model asked for, with the policy the activity resolved for it."""

    tool_call_id: str
    tool_name: str
    args: dict[str, Any] = Field(default_factory=dict)
    requires_approval: bool = False
    idempotent: bool = True
    error: str | None = None
    file_path: str | None = None
    """A workspace read or write tool's file (read-tracker key): the run passes it its read record."""
    process_id: str | None = None
    """A follow-up of a background process: it runs on the host that started the process."""
    category: str | None = None
    """In a session's turn: the tool's permission category (what `always_allow_category` grants)."""
    subagent: SubagentPlan | None = None
    """A call of a session's `subagent` tool: the child run the turn starts for it."""


class SubagentPlan(Contract):
    """What the `subagent` tool's call resolved to: the kind of subagent and how its child run is made."""

    agent_type: str
    task: str
    forked: bool = False
    model_id: str | None = None
    max_steps: int = 50
    tools: list[str] = Field(default_factory=list)
    """The tools the child run is offered (shown in its details in the UI; the child resolves its own)."""


class ModelStepInput(Contract):
    run_id: str
    agent_id: str
    thread_id: str
    resource_id: str
    step: int
    message_id: str
    writes: PendingWrites = Field(default_factory=PendingWrites)
    request_context: dict[str, Any] | None = None
    usage_before: Usage | None = None
    max_steps: int | None = None
    """The run's `maxSteps`, once known (step 1 goes by the agent's)."""
    execution_id: str | None = None
    """Temporal's first execution run id: the first step claims the run id for it (`RunIdReused` if taken)."""
    requires: list[str] = Field(default_factory=list)
    """Messages earlier activities of the run wrote: a thread without them fails the step (`MissingMessages`)
    instead of answering from a shorter conversation."""
    turn: TurnConfig | None = None
    """In a session's turn: its mode's instructions and tools, its model and permissions, its event log."""


class RunLists(CompactResult):
    """A run's tool calls and results in order, rebuilt from storage by its last activity."""

    run_tool_calls: list[ToolCallChunk] | None = None
    run_tool_results: list[ToolResultChunk] | None = None


class ModelStepResult(RunLists):
    """A model step's answer; the lists are set when it ends the run (no tool calls). The first step of a run
    also returns the read records its thread's earlier runs left (`file_reads`)."""

    message_id: str
    text: str = ""
    tool_calls: list[PlannedToolCall] = Field(default_factory=list)
    finish_reason: FinishReason = "stop"
    usage: Usage | None = None
    max_steps: int = 5
    file_reads: dict[str, FileReadRecord] | None = None
    reused: bool = False
    """The answer an earlier execution of the step stored, returned again (the model was not asked)."""
    unheard: bool = False
    """With `reused`: what came with the step (a message delivered since) was not in the thread when that answer
    was given."""
    heard_all: bool | None = None
    """With `reused`: that answer heard every user message in the thread before it, and none came after it (a run
    that had a message unheard by a reused step may end here). None from answers stored before it was told."""


class ToolCallInput(Contract):
    run_id: str
    agent_id: str
    thread_id: str
    resource_id: str
    step: int
    tool_call_id: str
    tool_name: str
    args: dict[str, Any] = Field(default_factory=dict)
    result_message_id: str
    request_context: dict[str, Any] | None = None
    read_record: FileReadRecord | None = None
    resume_data: Any = None
    """The data a suspended call was resumed with (the tool runs again with it in `ctx.resume_data`)."""
    turn: TurnConfig | None = None
    """In a session's turn: whose tools the call is of, and where its events go."""


class ToolCallResult(CompactResult):
    tool_call_id: str
    tool_name: str
    result: Any = None
    is_error: bool = False
    result_bytes: int = 0
    """The result's size as JSON."""
    file_read: FileReadRecord | None = None
    file_cleared: str | None = None
    process_started: str | None = None
    host_queue: str | None = None
    """The task queue of the worker host that ran the call (where its background process lives)."""
    result_ref: str | None = None
    """Set (to the call's tool message id) when `result` is left out: a step that stored the result returns it
    by reference above a size (`keel.activities.agent_loop.INLINE_TOOL_RESULT_BYTES`), since the workflow never
    reads a stored result, so the history does not grow with it."""
    suspended: StepSuspension | None = None
    """The tool called `ctx.suspend(...)`: no result yet; the run waits for resume data, then calls it again."""

    def by_reference(self, message_id: str) -> ToolCallResult:
        """This outcome with its result left out: it is in storage, as the tool message `message_id`."""
        return self.model_copy(update={"result": None, "result_ref": message_id})

    def effects(self) -> dict[str, Any]:
        """What a workspace tool reported to its run (camelCase), kept with its tool message as
        `providerMetadata.keel`: a retried step and the thread's later runs read it back from there."""
        return self.model_dump(include=_EFFECTS, exclude_none=True)


_EFFECTS = {"file_read", "file_cleared", "process_started", "host_queue"}


def thread_file_reads(messages: list[MessageRecord], limit: int = MAX_FILE_READS) -> dict[str, FileReadRecord]:
    """The read records a thread's tool messages leave, oldest first (at most `limit`): a later run on the
    thread starts with them, as Mastra's thread-scoped read tracker does."""
    reads: dict[str, FileReadRecord] = {}
    for message in messages:
        for part in message.content if isinstance(message.content, list) else []:
            kept = (getattr(part, "provider_metadata", None) or {}).get("keel")
            if not kept:
                continue
            if kept.get("fileCleared"):
                reads.pop(kept["fileCleared"], None)
            if kept.get("fileRead"):
                record = FileReadRecord.model_validate(kept["fileRead"])
                reads.pop(record.path, None)
                reads[record.path] = record
                while len(reads) > limit:
                    del reads[next(iter(reads))]
    return reads


class ExecuteToolInput(Contract):
    """Input of the standalone `keel.execute_tool` activity: one tool of an agent, outside any run; with no
    agent, one of the app's tools (`App.tool`), with `workspace_id` one of the HTTP API's tools over that
    workspace (`keel.app.workspace_api_tools`), or with `vector_store` one over that vector store
    (`keel.app.vector_api_tools`)."""

    agent_id: str = ""
    tool_name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    request_context: dict[str, Any] | None = None
    workspace_id: str = ""
    vector_store: str = ""


class ExecuteToolResult(Contract):
    result: Any = None
    is_error: bool = False
    host_queue: str | None = None
    """Where a background process it started lives."""


# --- ToolCall: one tool called from outside any run (an MCP client) ------------------------------------------


class ToolCallRequest(Contract):
    """Input of a `ToolCall` workflow: one tool of an agent called from outside any run (an MCP client's
    `tools/call`). The caller resolved the tool's approval policy and idempotency (it has the app)."""

    agent_id: str = Field(min_length=1)
    tool_name: str = Field(min_length=1)
    tool_call_id: str = Field(min_length=1)
    """The call's id: what `tool_approval` names (the tool sees the execution's id, unique per agent and tool)."""
    args: dict[str, Any] = Field(default_factory=dict)
    request_context: dict[str, Any] | None = None
    requires_approval: bool = False
    idempotent: bool = True
    """False: a lost attempt is not run again (the call answers an error instead)."""
    caller: str | None = None
    """Who called (`mcp`, `http`), for the execution's summary."""


class ToolCallOutcome(Contract):
    """The result of a `ToolCall` workflow: the tool's result, or why there is none (`declined`, an error)."""

    tool_call_id: str
    tool_name: str
    result: Any = None
    is_error: bool = False
    declined: bool = False
    reason: str | None = None
    """Why it was declined, or why it failed."""


class KillProcessesInput(Contract):
    """Background processes of a canceled run, killed by the worker host that runs them."""

    agent_id: str
    pids: list[str]
    request_context: dict[str, Any] | None = None


class ToolsThenModelInput(Contract):
    """One activity for a step's decided tool calls and the model step that reads their results."""

    tools: list[ToolCallInput]
    tool_timeout_seconds: float
    model: ModelStepInput


class ToolsThenModelResult(CompactResult):
    tool_results: list[ToolCallResult]
    model: ModelStepResult | None = None
    """None when a tool suspended: the model step waits until it is resumed."""


class ForkThreadInput(Contract):
    """A copy of a thread and its messages (a forked subagent's), made once: message ids derive from the copy's."""

    source_thread_id: str
    thread_id: str
    resource_id: str


class PersistWritesInput(Contract):
    """Messages and chunks the workflow decided, persisted before the run continues as new (so the new run
    carries none of them)."""

    run_id: str
    thread_id: str
    resource_id: str
    step: int
    writes: PendingWrites


class FinishRunResult(RunLists):
    """What the final persist returns (runs recorded before it did get None)."""


class FinishRunInput(Contract):
    run_id: str
    thread_id: str
    resource_id: str
    writes: PendingWrites = Field(default_factory=PendingWrites)
    finish_reason: FinishReason = "stop"
    usage: Usage | None = None


# --- Workflow definition runs (`DefinitionRun`) -------------------------------------------------------------


class LoadDefinitionInput(Contract):
    workflow_id: str
    input_data: Any = None


class LoadDefinitionResult(Contract):
    """The stored definition a run pins (its version and hash, recorded in the run's history), after checking
    the run's input against the definition's input schema."""

    workflow_id: str
    version: int
    hash: str
    definition: dict[str, Any]
    idempotent_tools: dict[str, bool] = Field(default_factory=dict)
    """Each tool the definition names: may a lost attempt of it run again (else it runs at most once)."""
    memo_version: bool = True
    """Whether the run writes version and hash into its memo even when its start gave the same (Keel's client
    gives them): runs that loaded a definition before this field existed did, and their histories replay so;
    runs that load one now write them only when missing or different, saving a visibility update."""
    local_tool_steps: bool = False
    """Whether a step of an idempotent tool is first tried as a local activity (recorded in the workflow task
    that ran it: no activity task, no second workflow task), then retried as an activity if that attempt
    fails. Runs that loaded a definition before this field existed ran every tool step as an activity."""
    temporal_retry_rule: bool = False
    """Whether a tool step's failed local attempt is retried as an activity by Temporal's rule (the activity's
    error retryable). Decided here, at load, not by a `workflow.patched` asked after the failure: a patch asked in
    reaction to a local activity's result can be recorded a workflow task after that result's marker (when the
    task was completed while the attempt ended), and the replay, which gets the result in the earlier task, then
    fails with a nondeterminism error. Runs that loaded a definition before this field ask the patch."""
    foreach_lanes: bool = False
    """Whether a foreach runs its items in lanes (each lane starts its next item in the coroutine that ended the
    last), so its events come in one order live and replayed. Runs that loaded a definition before this field
    woke each item through a semaphore."""
    start_budget: bool = False
    """Whether a step's activity or child run starts only when the workflow task has room for its input
    (`TASK_INPUT_BYTES`) and fewer than `MAX_IN_FLIGHT` run (else it waits for a later task). Runs that loaded a
    definition before this field started every step at once: a wide foreach of large items was terminated (its
    task's completion over Temporal's 4 MiB), one of over 2,000 items had its workflow task fail for ever. Their
    branch (`DefinitionRun._starting` with the flag off) may go once none of them is open: definition runs stay
    open only while a step is suspended, so check `KeelKind='workflow' AND ExecutionStatus='Running'` for runs
    started before the release that carries this field."""
    reset_origin_goes_on: bool = False
    """Whether a run whose `keel.reset_origin` failed every attempt goes on as a plain reset (or with a time
    travel signalled to it) rather than failing. Runs that loaded a definition before this field ask the patch
    `keel-reset-origin-failed-goes-on` after the failure (see `temporal_retry_rule` for why a load field)."""
    re2_patterns: bool = False
    """Whether the run checks its output against the definition's schema with patterns on RE2 (in linear time,
    ECMA-262's `\\d` and `$`; `protocol/schema_patterns.py`). Runs that loaded a definition before this field
    check it on Python's `re`, as they did: the engines differ on some texts, and the check decides the run."""


class WorkflowToolInput(Contract):
    run_id: str
    workflow_id: str
    step_id: str
    tool_id: str
    input_data: Any = None
    resume_data: Any = None
    request_context: dict[str, Any] | None = None
    call_key: str | None = None
    """This call of the step (the run's first execution id and the call's number in the run): the activity
    counts its starts in storage under it, so a local attempt executed again after its workflow task was lost
    tells the tool its attempt is > 1. Absent in runs recorded before it existed."""
    tries: int | None = None
    """How many times the tool may fail on this call and run again, plus one (Mastra's step `retries` + 1): an
    error the tool raises is retryable before its last try, then fails the step. Absent (runs recorded before
    it existed): a tool's error fails the step at once."""


class WorkflowToolResult(Contract):
    output: Any = None
    suspended: StepSuspension | None = None


class ResumeStep(Contract):
    """Input of the `resume` signal and the `resume_step` update: Mastra's `{step, resumeData}`."""

    step: str | list[str]
    resume_data: Any = None


class StepState(Contract):
    status: Literal["running", "success", "failed", "suspended"]
    output: Any = None
    suspend_payload: Any = None
    resume_schema: dict[str, Any] | None = None
    error: str | None = None


class WorkflowRunState(Contract):
    """The `state` query: Mastra's snapshot of a run (status, each step's status and output, the result)."""

    workflow_id: str
    version: int | None = None
    hash: str | None = None
    status: Literal["running", "success", "failed", "suspended", "canceled"] = "running"
    """`canceled`: a run canceled by request (or as a client answers one canceled before its state said it)."""
    steps: dict[str, StepState] = Field(default_factory=dict)
    result: Any = None
    error: str | None = None


class ClassifierStepInput(Contract):
    run_id: str
    workflow_id: str
    step_id: str
    classifier_id: str
    state: Any = None
    request_context: dict[str, Any] | None = None


class TimeTravel(Contract):
    """The `time_travel` signal, sent by Keel to the execution its time travel's reset made: Mastra's time-travel
    options for the step the run goes on from (`keel.workflows.time_travel`)."""

    base_execution_id: str
    """The execution that was reset: the signal is for the reset made from it (others are ignored)."""
    step: str | None = None
    """The step run again from; None: no instruction (the run goes on as a plain reset)."""
    input_data: Any = None
    has_input_data: bool = False
    """Whether `input_data` replaces the step's input (Mastra's `inputData`; None is a value too)."""
    resume_data: Any = None
    """Given to the step's tool as its resume data on its first call (Mastra's `resumeData`)."""
    request_context: dict[str, Any] | None = None
    """Merged into the run's request context from the step on (these keys win)."""
    recorded: dict[str, list[Any]] = Field(default_factory=dict)
    """Step key -> the outputs its calls had, in order: steps before the target that the reset's workflow task
    would otherwise run again (local steps it had chained, the target's parallel siblings) return them."""


class TimeTravelPoint(Contract):
    """The `time_travel_point` query: where a step of the run first started."""

    step: str
    entry: int
    """The index of the graph entry holding the step."""
    history_length: int
    """The id of the `WorkflowTaskStarted` event of the workflow task it started in (reset to that task)."""
    events_offset: int
    """How many stream chunks the run had emitted before the step's entry began."""
    tool_calls: int
    """Tool calls the run had made before that workflow task (later calls' start counts are forgotten)."""
    tool_calls_total: int
    recorded: dict[str, list[Any]] = Field(default_factory=dict)
    """What `TimeTravel.recorded` must carry for this step."""
    resume_schema: dict[str, Any] | None = None
    """The resume schema the step last suspended with, if it did: a time travel's resumeData is checked against
    it (None from a worker of the version before: not checked)."""


class ResetOriginInput(Contract):
    workflow_id: str
    run_id: str


def time_travel_key(base_execution_id: str) -> str:
    """Where Keel's client stores a time travel's instruction before its reset (a `run_steps` answer of the run,
    keyed by the execution it resets), for the reset execution's `keel.reset_origin` to read."""
    return f"time-travel/{base_execution_id}"


class ResetOrigin(Contract):
    """What reset the run (the last `WorkflowTaskFailed` of cause reset in its history)."""

    base_execution_id: str | None = None
    time_travel: bool = False
    """Whether the reset's reason says Keel's time travel made it."""
    instruction: TimeTravel | None = None
    """The time travel's instruction, as Keel's client stored it before the reset (`time_travel_key`); None
    for a reset by a client that only signals it (the run then waits for its `time_travel` signal)."""


# --- IndexWorkspace ------------------------------------------------------------------------------------


class IndexWorkspaceInput(Contract):
    """Input of the `IndexWorkspace` workflow (`keel index`)."""

    workspace_id: str = Field(min_length=1)
    paths: list[str] | None = None
    """Files, directories or globs; default the workspace's `auto_index_paths`."""
    heartbeat_timeout_seconds: float = Field(default=30.0, gt=0)
    """A worker that stops heartbeating this long is taken for lost and the activity is retried (on any
    worker) from its last heartbeat. Heartbeats are sent at most every 0.8 of it."""


class IndexFilesInput(Contract):
    """Input of the `keel.index_workspace` activity."""

    workspace_id: str = Field(min_length=1)
    paths: list[str] | None = None


class IndexProgress(Contract):
    """The heartbeat details of `keel.index_workspace` (what the Temporal UI shows of a pending activity):
    `done` of `total` files (sorted by path) are indexed, the last of them `last`; a retried attempt goes on
    after `last`. The counts cover every attempt so far."""

    done: int = 0
    total: int = 0
    last: str | None = None
    indexed: int = 0
    """Files indexed (readable as text)."""
    skipped: int = 0
    """Files that are not UTF-8 text."""
    chunks: int = 0
    """Documents indexed: one per file, or its chunks past 4,000 characters."""
    unchanged: int = 0
    """Files of `indexed` whose content the index held already (skipped: not indexed nor embedded again)."""
    attempt: int = 1
    worker: str | None = None
    """The worker process of the attempt (host, pid, a random part): a retry in another process re-adds what
    lived in that process's memory of the files done (in-memory vectors, BM25 documents without storage)."""


class IndexWorkspaceResult(Contract):
    """The result of `IndexWorkspace` and of its activity."""

    workspace_id: str
    files: int
    """Files the paths named."""
    indexed: int
    skipped: int
    chunks: int
    unchanged: int = 0
    """Files of `indexed` whose content the index held already (not indexed nor embedded again)."""
    removed: int = 0
    """Files indexed before under the same paths and gone since: removed from the index."""
    resumed_from: int = 0
    """Files an earlier attempt had indexed (0 when the first attempt did it all)."""
    attempts: int = 1


PlannedToolCall.model_rebuild()
