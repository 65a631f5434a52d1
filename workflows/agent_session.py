"""`AgentSession`: one AgentController session (Mastra's `Session`) as an entity workflow.

One per (controller, resource id, scope), id `keel.protocol.names.session_workflow_id(...)`, made or found by the
`open` update (update-with-start): any process that asks for the same session gets this one. It owns, as workflow
state: the current thread, mode and model, the permission rules and the grants of `always_allow_category`, the
session's state (checked against the controller's schema), the goal, the messages waiting for a turn, and the
calls its turns wait on. Each turn is a child `AgentRun` with the mode's instructions and tools and the session's
permissions (`TurnConfig`); the run tells the session what it waits on (`turn_waiting`), and the session forwards
decisions and resume data to it, so a turn keeps every property of an agent run (durable steps, approvals by
signal or update on the run itself).

Every mutation is an update with a validator (an unknown mode, a state that fails the schema, an unknown or
decided tool call id: refused, the session unchanged) and writes its events to the session's log (`keel.session_events`,
each batch once), the log subscribers read from any offset. The session continues as new when Temporal suggests
it, between turns, after storing a display-state snapshot so readers need not fold the log from its start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, ChildWorkflowError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

from keel.protocol import InputMessage, names
from keel.protocol.controller_events import MAX_STATE_BYTES
from keel.protocol.identifiers import attribute_problem, title_problem
from keel.protocol.payloads import json_bytes
from keel.protocol.workflow_definition import schema_problems
from keel.workflows.contracts import AgentRunInput, AgentRunResult, ToolApproval, ToolResume, TurnConfig
from keel.workflows.search_attributes import (
    KEEL_AGENT_ID,
    KEEL_CONTROLLER_ID,
    KEEL_KIND,
    KEEL_RESOURCE_ID,
    KEEL_STATUS,
    KEEL_THREAD_ID,
)
from keel.workflows.session_contracts import (
    Accepted,
    Goal,
    JudgeInput,
    JudgeResult,
    PendingItem,
    QueuedMessage,
    SendMessage,
    SentMessage,
    SessionCarry,
    SessionConfig,
    SessionConfigInput,
    SessionEventsInput,
    SessionInput,
    SessionOpen,
    SessionSnapshot,
    SessionSnapshotInput,
    SessionThreadInput,
    SessionThreadResult,
    SetGoal,
    SetPermission,
    SetState,
    SetSubagentModel,
    Settle,
    SettledNow,
    SwitchMode,
    SwitchModel,
    ThreadChange,
    ToolApprovalResponse,
    ToolSuspensionResponse,
    TurnDecided,
    TurnWaiting,
    UnheardInput,
    UnheardResult,
)

MAX_QUEUED = 100
MAX_PENDING = 100
MAX_DECIDED = 200
MAX_SENT = 200
SEND_ONCE_PATCH = "keel-session-send-once"
"""Marks a session that answered a send made again under its id with the first send's answer (before it, the
message was queued again). Asked only when a known id comes again, by sessions of generation 1; the old branch
may go once no session that started before it is open."""
GENERATION_2 = "keel-session-generation-2"
"""Asked when an execution of a session of generation 1 begins (`__init__`, before any handler runs): from then
the session's rules (the send-once rule so far) are its own (`SessionCarry.generation`, carried across
continue-as-new), and no patch is asked mid-session, where a patch asked in reaction to a local activity's
result can be met a workflow task early on replay and fail it. An execution that began before it asks as it did
(generation 1); a session of those becomes generation 2 at its next continue-as-new."""
GENERATION_3 = "keel-session-generation-3"
"""Asked as `GENERATION_2` is, by sessions below generation 3. From 3 a session remembers the messages it
delivered into the running turn (`SessionCarry.delivered`) and, when the turn ends, gives each its thread does
not hold a turn of its own; before it, a message delivered as the turn completed (or to a turn that had just
ended) was lost. The old branch may go once no session begun before it is open."""
GENERATION_4 = "keel-session-generation-4"
"""Asked as `GENERATION_2` is, by sessions below generation 4. From 4 a session takes a turn's waiting calls
(`turn_waiting`) only from the running turn and its subagents: the signal can arrive after the turn's end was
handled, and before it such a call stayed pending for good (the session `suspended`, nothing to answer it). The
old branch may go once no session begun before it is open."""
GENERATION_5 = "keel-session-generation-5"
"""Asked as `GENERATION_2` is, by sessions below generation 5. From 5 a session continues as new when Temporal
suggests it also between two queued turns (it carries the queue), instead of only once the queue is empty: a goal
queues its next turn as each turn ends, and so may a busy client, and the history grew until the queue emptied.
`settled` calls waiting for a turn then end with `SessionContinuing` (the client asks the new execution). The old
branch may go once no session begun before it is open."""
GENERATION_6 = "keel-session-generation-6"
"""Asked as `GENERATION_2` is, by sessions below generation 6. From 6 an abort that comes while a turn runs or
while its end is handled (its goal judged included) stops the goal's loop: the judge's verdict is told (status
`aborted` where it said continue) and no turn is queued for it; an abort during the end answers at once. Before
it, the abort waited for the judge, found no turn to stop, and the goal's next turn ran. The old branch may go
once no session begun before it is open."""
GENERATION_7 = "keel-session-generation-7"
"""Asked as `GENERATION_2` is, by sessions below generation 7. From 7 a turn's calls waiting for approval past
`MAX_PENDING` are declined at once (the reason told to the model, an `info` event to the session); before it they
were dropped, and the turn waited for decisions the session could not take. The old branch may go once no
session begun before it is open."""
GENERATION_8 = "keel-session-generation-8"
"""Asked as `GENERATION_2` is, by sessions below generation 8. From 8 a send that asks to wait
(`SendMessage.wait`) waits for its turn in its own update, `settled` then being one update fewer. Before it such a
send answered at once (the client then asks `settled`): an older worker ignores the field, and an execution
that one answered so must replay so. The old branch may go once no session begun before it is open."""
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
"""The most a message sent to a session may hold (its content as UTF-8 JSON): a run's input takes as much."""
MAX_WAITING_BYTES = 64 * 1024 * 1024
"""The most the messages a session carries until their turn reads them (queued, or delivered into the running
turn) may hold together."""
MAX_MODEL_ID_CHARS = 256
MAX_OBJECTIVE_BYTES = 32 * 1024
"""The most a goal's objective may hold (as UTF-8 JSON): the judge reads it after each turn."""
ROOMY_HISTORY_BYTES = 1024 * 1024
"""A history under this is far from Temporal's limit (50 MB by default): changes during a turn are taken however
early Temporal suggests continuing as new (it does by event count too, 4,096 by default, which the 2,000 updates
an execution takes cannot bring near its limit of 51,200 events)."""
UPDATE_LIMIT = "UpdateLimit"
"""The error type of a change refused during a turn once Temporal suggests continuing as new (`_check_room`): the
kind the client also gives Temporal's own refusal past its most updates per execution."""
CONTINUING = "SessionContinuing"
"""The error type of a `settled` that was waiting when its execution continued as new: ask again."""
MAX_DELIVERED = 100
"""Messages delivered into one turn; past it, a message waits for the next turn (so the list the session carries
until the turn ends stays bounded)."""
TURN_MAX_STEPS = 1000
"""Mastra's controller runs a turn with `maxSteps: 1000`."""
STORAGE = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=30))
DEFAULT_REASON = "Tool call was not approved by the user"
INTERRUPTED = "The pending tool approval was declined because the user sent a new message."
ABORTED = "Aborted by the user"


def refused(kind: str, message: str) -> ApplicationError:
    """A refused update: the caller gets the message, the session is unchanged."""
    return ApplicationError(message, type=kind, non_retryable=True)


@workflow.defn(name=names.AGENT_SESSION, sandboxed=False)
class AgentSession:
    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        # The carried session is in place before any handler runs: an update can arrive in a new execution's first
        # task, and its validator reads the mode, state and pending calls.
        self._input: SessionInput | None = input
        self._c = input.carry or SessionCarry()
        if self._c.generation < 2 and workflow.patched(GENERATION_2):
            self._c.generation = 2
        if self._c.generation < 3 and workflow.patched(GENERATION_3):
            self._c.generation = 3
        if self._c.generation < 4 and workflow.patched(GENERATION_4):
            self._c.generation = 4
        if self._c.generation < 5 and workflow.patched(GENERATION_5):
            self._c.generation = 5
        if self._c.generation < 6 and workflow.patched(GENERATION_6):
            self._c.generation = 6
        if self._c.generation < 7 and workflow.patched(GENERATION_7):
            self._c.generation = 7
        if self._c.generation < 8 and workflow.patched(GENERATION_8):
            self._c.generation = 8
        self._leaving = False  # continuing as new: `settled` calls still waiting end (`CONTINUING`)
        self._turns_here = 0  # turns this execution started (one at least before it continues as new with a queue)
        self._ready = input.carry is not None and input.carry.config is not None
        self._lock = asyncio.Lock()
        self._turn: ChildWorkflowHandle[Any, AgentRunResult] | None = None
        self._turn_id: str | None = None
        self._aborting = False
        self._closing = False  # a turn's end is being handled (its events, its unread messages, its goal's judge)
        self._goal_stopped = False  # (generation 6) an abort came while a turn ran or its end was handled
        # Turns that ended in this execution, and (generation 3) an ended turn -> the turn its unread messages went
        # to: an entry per turn, bounded as the execution's history is (it continues as new when Temporal says so).
        self._ended: set[str] = set()
        self._forwarded: dict[str, str] = {}
        self._ending: str | None = None  # a turn whose run has ended, its unread messages not yet given turns

    # --- the session's life ------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: SessionInput) -> None:
        if input.carry is None:
            workflow.upsert_search_attributes(
                [
                    KEEL_KIND.value_set("session"),
                    KEEL_STATUS.value_set("idle"),
                    KEEL_CONTROLLER_ID.value_set(input.controller_id),
                    KEEL_RESOURCE_ID.value_set(input.resource_id),
                ]
            )
        if self._c.config is None:
            self._c.config = await workflow.execute_local_activity(
                names.SESSION_CONFIG,
                SessionConfigInput(controller_id=input.controller_id),
                result_type=SessionConfig,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=STORAGE,
            )
            workflow.upsert_search_attributes([KEEL_AGENT_ID.value_set(self._c.config.agent_id)])
        if input.carry is None:
            await self._begin(input)
        self._ready = True
        while True:
            await workflow.wait_condition(
                lambda: bool(self._c.queued) or workflow.info().is_continue_as_new_suggested()
            )
            if self._c.generation >= 5 and self._may_leave_with_queue():
                await self._snapshot()
                self._leaving = True  # the `settled` calls waiting end, the others finish: then nothing runs
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(input.model_copy(update={"carry": self._c}))
            if self._c.queued:
                message = self._c.queued.pop(0)
                self._turn_id = message.run_id  # the current turn from now on (its child starts below)
                await self._run_turn(message)
                continue
            await self._snapshot()
            # Nothing may be running when the run continues as new: a change that came in meanwhile finishes
            # first (its events fold from the snapshot on, like any later one), and a message starts its turn.
            # (A message that came in goes first: its sender may be waiting, in `settled`, for its turn to end.)
            await workflow.wait_condition(lambda: workflow.all_handlers_finished() or bool(self._c.queued))
            if self._c.queued or self._turn is not None:
                continue
            workflow.continue_as_new(input.model_copy(update={"carry": self._c}))

    def _may_leave_with_queue(self) -> bool:
        """Generation 5: continue as new with turns queued when Temporal suggests it, but not while one of them
        is a turn an ended turn's unread messages went to (`_forwarded`, this execution's only): a `settled` on
        the ended turn asked again of the new execution would find neither and answer at once. Nor before the
        execution has run a turn: a server suggesting it after fewer events than a session's start makes would
        otherwise have each execution hand the queue on untouched."""
        forwarded = set(self._forwarded.values())
        return (
            bool(self._c.queued)
            and self._turns_here > 0  # each execution makes progress, however early Temporal suggests it
            and workflow.info().is_continue_as_new_suggested()
            and not any(q.run_id in forwarded for q in self._c.queued)
        )

    async def _begin(self, input: SessionInput) -> None:
        """A new session: the controller's default mode and initial state, and a thread: the one asked for
        (made if missing), else the resource's latest that matches the session's tags, else a new one."""
        config = self._config
        self._c.mode_id = config.default_mode_id
        self._c.model_id = self._mode(config.default_mode_id).default_model_id
        self._c.state = self._take_rules(dict(config.initial_state))
        if input.thread_id:
            try:
                await self._thread_change(ThreadChange(op="switch", thread_id=input.thread_id, create_missing=True))
                return
            except ApplicationError:
                pass  # another resource's thread: the session starts as if none was asked; `open` refuses it
        await self._thread_change(ThreadChange(op="latest", thread_id=str(workflow.uuid4())))

    @property
    def _config(self) -> SessionConfig:
        assert self._c.config is not None
        return self._c.config

    @property
    def _id(self) -> str:
        return workflow.info().workflow_id

    # --- turns ------------------------------------------------------------------------------------------------

    async def _run_turn(self, message: QueuedMessage) -> None:
        async with self._lock:
            if self._c.thread_id is None:
                await self._thread_change(ThreadChange(op="create", thread_id=str(workflow.uuid4())))
            run_id = message.run_id
            self._c.turns += 1
            self._turns_here += 1
            data = {"id": message.id, "type": "user", "tagName": "user", "contents": message.content}
            user = {
                "id": message.id,
                "role": "signal",
                "content": {"format": 2, "parts": [{"type": "data-user-message", "data": data}]},
                "threadId": self._c.thread_id,
            }
            await self._emit(
                [
                    {"type": "agent_start", "runId": run_id},
                    {"type": "message_start", "message": user},
                    {"type": "message_end", "id": message.id},
                ]
            )
            self._turn = await workflow.start_child_workflow(
                names.AGENT_RUN,
                AgentRunInput(
                    agent_id=self._config.agent_id,
                    messages=[InputMessage(role="user", content=message.content)],
                    thread_id=self._c.thread_id,
                    resource_id=self._resource_id,
                    max_steps=TURN_MAX_STEPS,
                    turn=self._turn_config(),
                ),
                id=run_id,
                result_type=AgentRunResult,
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                static_summary=f"turn {self._c.turns} of session {self._id}",
            )
            self._status()
        reason, error = "complete", None
        try:
            await self._turn
        except ChildWorkflowError as err:
            cancelled = isinstance(err.cause, CancelledError) or self._aborting
            reason = "aborted" if cancelled else "error"
            if not cancelled:
                error = str(getattr(err.cause, "message", None) or err.cause or err)
        async with self._lock:
            self._closing = True
            try:
                await self._close_turn(run_id, reason, error)
            finally:
                self._closing, self._goal_stopped = False, False

    async def _close_turn(self, run_id: str, reason: str, error: str | None) -> None:
        """A turn's end (holding the lock): its events, its unread messages' turns, its goal's verdict."""
        aborted = reason == "aborted" or self._aborting  # also a turn that completed as it was stopped
        self._turn, self._turn_id, self._aborting = None, None, False
        if self._c.generation < 3:
            self._ended.add(run_id)
        else:
            self._ending = run_id
        left = [p for p in self._c.pending if p.run_id == run_id or p.run_id.startswith(f"{run_id}-")]
        self._c.pending = [p for p in self._c.pending if p not in left]
        events: list[dict[str, Any]] = []
        for item in left:
            if item.kind == "suspension":
                events.append(self._cancelled(item, ABORTED if reason == "aborted" else error or reason))
            else:
                events.append({"type": "tool_end", "toolCallId": item.tool_call_id, "result": ABORTED})
                events[-1] |= {"isError": False, "denied": True}
        if error is not None:
            events.append({"type": "error", "error": {"name": "Error", "message": error}, "runId": run_id})
        events.append({"type": "agent_end", "reason": reason, "runId": run_id})
        await self._emit(events)
        if self._c.generation >= 3:  # ended once its unread messages have turns (`settled` follows them)
            await self._requeue_unheard(run_id, aborted=aborted)
            self._ended.add(run_id)
            self._ending = None
        if reason == "complete":
            await self._judge(run_id, stopped=aborted and self._c.generation >= 6)
        self._status()

    async def _requeue_unheard(self, run_id: str, *, aborted: bool) -> None:
        """Messages delivered into the ended turn that its thread does not hold get turns of their own, in the
        order sent and before what waits in the queue (they were sent for the turn that ended, before any
        follow-up queued behind it); not after an abort: the user stopped that turn, and what they sent into it."""
        delivered, self._c.delivered = [d for d in self._c.delivered if d.run_id == run_id], []
        if not delivered or aborted:
            return
        unheard: UnheardResult = await workflow.execute_local_activity(
            names.SESSION_UNHEARD,
            UnheardInput(run_id=run_id, message_ids=[d.id for d in delivered]),
            result_type=UnheardResult,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=STORAGE,
        )
        waiting = len(self._c.queued)
        for message in delivered:
            if message.id in unheard.message_ids:
                self._forwarded[run_id] = self._enqueue(message.id, message.content).run_id
        self._c.queued = [*self._c.queued[waiting:], *self._c.queued[:waiting]]

    def _turn_config(self) -> TurnConfig:
        settings = self._c.thread_settings
        subagent_models = {
            key.removeprefix("subagentModelId").removeprefix("_"): str(value)
            for key, value in settings.items()
            if key.startswith("subagentModelId") and isinstance(value, str)
        }
        assert self._c.mode_id is not None
        return TurnConfig(
            session_id=self._id,
            controller_id=self._config.controller_id,
            mode_id=self._c.mode_id,
            model_id=self._c.model_id,
            permissions=self._c.permissions,
            subagent_models=subagent_models,
        )

    async def _tell_turn(self) -> None:
        """The running turn's later steps use the session's current mode and permissions."""
        if self._turn_id is not None:
            await self._signal(self._turn_id, names.TURN_CONFIG_SIGNAL, self._turn_config())

    async def _judge(self, run_id: str, *, stopped: bool) -> None:
        """Judge the goal after a turn that completed, and queue its next turn unless the goal is met, its runs
        are used up, or (`stopped`, or an abort since the turn began) the user stopped the loop."""
        goal = self._c.goal
        if goal is None or goal.status != "active":
            return
        goal.runs += 1
        await self._emit([{"type": "goal_evaluation", "payload": {"status": "pending", "runId": run_id}}])
        try:
            verdict = await self._verdict(goal)
        except ActivityError as err:  # the judge failed for good: the goal pauses, the session goes on
            goal.status = "paused"
            reason = str(getattr(err.cause, "message", None) or err.cause or err)
            payload = {"status": "error", "done": False, "reason": reason, "runs": goal.runs}
            await self._emit([{"type": "goal_evaluation", "payload": payload | {"maxRuns": goal.max_runs}}])
            return
        goal.last_evaluation = {"done": verdict.done, "reason": verdict.reason, "run": goal.runs}
        if verdict.done:
            goal.status = "done"
        status = "done" if verdict.done else "continue" if goal.runs < goal.max_runs else "max_runs"
        if status == "continue" and (stopped or self._goal_stopped):
            status = "aborted"
        payload = {"status": status, "done": verdict.done, "reason": verdict.reason, "runs": goal.runs}
        await self._emit([{"type": "goal_evaluation", "payload": payload | {"maxRuns": goal.max_runs}}])
        if status == "continue":
            text = f"Continue working toward the goal: {goal.objective}\n\nThe judge said: {verdict.reason}"
            self._enqueue(f"{self._id}-goal-{goal.runs}", text)

    async def _verdict(self, goal: Goal) -> JudgeResult:
        verdict: JudgeResult = await workflow.execute_activity(
            names.SESSION_JUDGE,
            JudgeInput(
                session_id=self._id,
                controller_id=self._config.controller_id,
                thread_id=self._c.thread_id,
                objective=goal.objective,
                judge_model_id=goal.judge_model_id,
                run=goal.runs,
            ),
            result_type=JudgeResult,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=STORAGE,
            summary=f"judge the goal after turn {goal.runs}",
        )
        return verdict

    def _enqueue(self, message_id: str, content: Any) -> QueuedMessage:
        run_id = f"{self._id}-turn-{self._c.next_turn + 1}"
        self._c.next_turn += 1
        queued = QueuedMessage(id=message_id, content=content, run_id=run_id)
        self._c.queued.append(queued)
        return queued

    # --- updates ----------------------------------------------------------------------------------------------

    @workflow.update(name=names.SESSION_OPEN_UPDATE)
    async def open(self, request: SessionOpen) -> SessionSnapshot:
        await workflow.wait_condition(lambda: self._ready)
        if request.thread_id and request.thread_id != self._c.thread_id:
            async with self._lock:
                await self._thread_change(ThreadChange(op="switch", thread_id=request.thread_id, create_missing=True))
        return self.snapshot()

    @open.validator
    def _check_open(self, request: SessionOpen) -> None:
        """A session is not moved to another thread under a running turn (as `change_thread` refuses it)."""
        _check_thread_id(request.thread_id)
        if self._ready and request.thread_id and request.thread_id != self._c.thread_id and self._turn_id:
            raise ApplicationError(
                f"A turn is running on thread {self._c.thread_id}: abort it, or open the session without a "
                "threadId, or once the turn has ended",
                type="SessionBusy",
                non_retryable=True,
            )
        self._check_room()  # its answer carries the state: the client then opens the session without asking

    @workflow.update(name=names.SESSION_SEND_UPDATE)
    async def send_message(self, message: SendMessage) -> Accepted:
        await workflow.wait_condition(lambda: self._ready)
        await workflow.wait_condition(self._not_starting)
        message_id = message.id or str(workflow.uuid4())
        async with self._lock:
            known = next((sent.accepted for sent in self._c.sent if sent.id == message_id), None)
            if known is not None and (self._c.generation >= 2 or workflow.patched(SEND_ONCE_PATCH)):
                accepted = known
            else:
                accepted = await self._send(message, message_id)
                self._c.sent = [*self._c.sent[-(MAX_SENT - 1) :], SentMessage(id=message_id, accepted=accepted)]
        if not message.wait or accepted.run_id is None or self._c.generation < 8:
            return accepted
        # As `settled` waits (outside the lock: the turn's end takes it).
        target = accepted.run_id
        await workflow.wait_condition(lambda: self._is_settled(target) or self._leaving)
        return accepted.model_copy(update={"settled": self._is_settled(target)})

    async def _send(self, message: SendMessage, message_id: str) -> Accepted:
        """The send itself (under the lock): into the running turn, or queued for one."""
        tracked = self._c.generation >= 3
        if (
            self._turn_id is not None
            and message.mode == "send"
            and not (tracked and len(self._c.delivered) >= MAX_DELIVERED)
        ):
            # Into the running turn, as Mastra delivers a message while a run is active; a call waiting for a
            # decision is declined (the user moved on).
            for item in [p for p in self._c.pending if p.kind == "approval" and p.run_id == self._turn_id]:
                await self._decide(item, approved=False, reason=INTERRUPTED)
            payload = {"id": message_id, "content": message.content}
            signalled = await self._signal(self._turn_id, names.USER_MESSAGE_SIGNAL, payload)
            if not tracked:
                return Accepted(run_id=self._turn_id, delivered=True)
            if signalled:
                delivered = QueuedMessage(id=message_id, content=message.content, run_id=self._turn_id)
                self._c.delivered.append(delivered)
                return Accepted(run_id=self._turn_id, delivered=True)
            # The turn had ended (its end not yet handled here): the message gets a turn of its own.
        if self._turn_id is not None and message.mode == "steer":
            await self._abort()
        queued = self._enqueue(message_id, message.content)
        if self._turn_id is not None and message.mode == "follow_up":
            await self._emit([{"type": "follow_up_queued", "count": len(self._c.queued)}])
            return Accepted(run_id=queued.run_id, queued=True)
        return Accepted(run_id=queued.run_id)

    @send_message.validator
    def _check_send(self, message: SendMessage) -> None:
        if isinstance(message.content, str) and not message.content.strip():
            raise ApplicationError("A message needs content", type="InvalidInput", non_retryable=True)
        sent_before = self._c.generation >= 2 and any(sent.id == message.id for sent in self._c.sent)
        if sent_before:  # a send made again gets its first answer
            return
        self._check_room()
        if len(self._c.queued) >= MAX_QUEUED:
            raise ApplicationError(f"{MAX_QUEUED} messages already wait for a turn", non_retryable=True)
        size = json_bytes(message.content)
        if size > MAX_MESSAGE_BYTES:
            raise ApplicationError(
                f"A message holds at most {MAX_MESSAGE_BYTES} bytes of JSON: this one is {size}",
                type="InvalidInput",
                non_retryable=True,
            )
        waiting = sum(self._message_bytes(m) for m in [*self._c.queued, *self._c.delivered])
        if waiting + size > MAX_WAITING_BYTES:
            raise ApplicationError(
                f"Messages of {waiting} bytes wait for a turn already, and a session carries at most "
                f"{MAX_WAITING_BYTES} bytes of them: send this one once a turn has read them",
                non_retryable=True,
            )

    @staticmethod
    def _message_bytes(message: QueuedMessage) -> int:
        """The size of a message the session carries, measured once per execution."""
        if message._bytes is None:
            message._bytes = json_bytes(message.content)
        return message._bytes

    @workflow.update(name=names.SESSION_SETTLED_UPDATE)
    async def settled(self, request: Settle) -> SessionSnapshot:
        """Once the turn (default: the latest queued or running) has ended, or waits on a person."""
        target = self._settle_target(request)

        def settled() -> bool:
            return self._is_settled(target)

        await workflow.wait_condition(lambda: settled() or self._leaving)
        if not settled():
            raise ApplicationError(
                "The session is continuing as new: ask the new execution", type=CONTINUING, non_retryable=True
            )
        return self.snapshot()

    @settled.validator
    def _check_settled(self, request: Settle) -> None:
        self._check_room()  # its answer carries the state: the client then asks `settled_now` instead

    @workflow.query(name=names.SESSION_SETTLED_QUERY)
    def settled_now(self, request: Settle) -> SettledNow:
        """What the `settled` update waits for, asked without waiting (a query adds nothing to the history): the
        turn it targets (ask again with it), and whether that turn has ended or waits on a person."""
        target = self._settle_target(request)
        return SettledNow(run_id=target, settled=self._is_settled(target))

    def _settle_target(self, request: Settle) -> str | None:
        return request.run_id or (self._c.queued[-1].run_id if self._c.queued else self._turn_id or self._ending)

    def _is_settled(self, target: str | None) -> bool:
        turn = target
        while turn in self._forwarded:  # its unread messages went to a later turn: that one's end
            turn = self._forwarded[turn]
        if turn is None or turn in self._ended:
            return True
        if turn == self._ending:
            return False
        if self._turn_id == turn:  # running: settled once it waits on a person
            return any(p.run_id == turn or p.run_id.startswith(f"{turn}-") for p in self._c.pending)
        return turn not in {q.run_id for q in self._c.queued}  # not this execution's: long done

    async def _until_ready(self, check: Callable[[], None]) -> None:
        """A change that came in before a new session had its config and thread waits for them, then is checked
        as its validator would have (which let it through, knowing nothing yet)."""
        if not self._ready:
            await workflow.wait_condition(lambda: self._ready)
            check()

    def _not_starting(self) -> bool:
        """No turn is between leaving the queue and having its child run (a message then waits for the run)."""
        return self._turn_id is None or self._turn is not None

    @workflow.update(name=names.SESSION_ABORT_UPDATE)
    async def abort(self) -> Accepted:
        if self._c.generation >= 6 and (self._turn_id is not None or self._closing):
            self._goal_stopped = True  # the turn's goal is judged no further, however the turn ends
            if self._closing:  # the turn is over: its end is handled, stopping the goal's loop; nothing to wait for
                return Accepted(run_id=None)
        await workflow.wait_condition(self._not_starting)
        async with self._lock:
            run_id = self._turn_id
            await self._abort()
        if run_id is not None:
            await workflow.wait_condition(lambda: run_id in self._ended)
        return Accepted(run_id=run_id)

    async def _abort(self) -> None:
        if self._turn is None:
            return
        self._aborting = True
        for item in [p for p in self._c.pending if p.kind == "suspension"]:
            if item in self._c.pending:  # else decided on the run while an earlier one's event was written
                self._c.pending.remove(item)
                await self._emit([self._cancelled(item, ABORTED)])
        self._turn.cancel()

    @workflow.update(name=names.SESSION_MODE_UPDATE)
    async def switch_mode(self, request: SwitchMode) -> SessionSnapshot:
        await self._until_ready(lambda: self._check_mode(request))
        async with self._lock:
            await self._switch_mode(request.mode_id)
            await self._tell_turn()
        return self.snapshot()

    @switch_mode.validator
    def _check_mode(self, request: SwitchMode) -> None:
        if not self._ready:
            return
        self._check_room()
        self._mode(request.mode_id)

    async def _switch_mode(self, mode_id: str) -> None:
        previous, model = self._c.mode_id, self._c.model_id
        settings: dict[str, Any] = {"currentModeId": mode_id}
        if previous is not None and model:
            settings[f"modeModelId_{previous}"] = model
        self._c.mode_id = mode_id
        incoming = self._c.thread_settings.get(f"modeModelId_{mode_id}") or self._mode(mode_id).default_model_id
        events: list[dict[str, Any]] = [{"type": "mode_changed", "modeId": mode_id, "previousModeId": previous}]
        if incoming:
            self._c.model_id = str(incoming)
            events.append({"type": "model_changed", "modelId": self._c.model_id})
        await self._settings(settings, events)

    @workflow.update(name=names.SESSION_MODEL_UPDATE)
    async def switch_model(self, request: SwitchModel) -> SessionSnapshot:
        await self._until_ready(lambda: self._model_rules(request))
        async with self._lock:
            target = request.mode_id or self._c.mode_id
            if target == self._c.mode_id:
                self._c.model_id = request.model_id
            settings = {f"modeModelId_{target}": request.model_id} if request.scope == "thread" else {}
            event = {"type": "model_changed", "modelId": request.model_id, "scope": request.scope, "modeId": target}
            await self._settings(settings, [event])
            await self._tell_turn()
        return self.snapshot()

    @switch_model.validator
    def _check_model(self, request: SwitchModel) -> None:
        _check_model_id(request.model_id)
        self._model_rules(request)

    def _model_rules(self, request: SwitchModel) -> None:
        """As `_state_rules`, for a model switch."""
        if not self._ready:
            return
        self._check_room()
        if request.mode_id is not None:
            self._mode(request.mode_id)
        known = self._config.models
        if known and request.model_id not in known:
            raise ApplicationError(
                f"Unknown model {request.model_id!r} (known models: {', '.join(known)})",
                type="UnknownModel",
                non_retryable=True,
            )

    @workflow.update(name=names.SESSION_STATE_UPDATE)
    async def set_state(self, request: SetState) -> SessionSnapshot:
        await self._until_ready(lambda: self._state_rules(request))
        async with self._lock:
            updates = self._take_rules(dict(request.updates))
            self._c.state = {**self._c.state, **updates}
            event = {"type": "state_changed", "state": self._state(), "changedKeys": list(request.updates)}
            await self._emit([event])
            if any(request.updates.get(k) is not None for k in ("permissionRules", "yolo")):
                await self._tell_turn()
        return self.snapshot()

    def _check_state_bytes(self, after: dict[str, Any]) -> None:
        """A change that leaves the state (rules included) past `MAX_STATE_BYTES`, and larger than it was, is
        refused: the state is copied into every `state_changed` event and every answer."""
        size = json_bytes(after)
        if size > MAX_STATE_BYTES and size > json_bytes(self._state()):
            raise ApplicationError(
                f"A session's state holds at most {MAX_STATE_BYTES // 1024} KiB of JSON (its permission rules "
                f"included): this change makes it {size} bytes",
                type="InvalidState",
                non_retryable=True,
            )

    def _check_room(self) -> None:
        """A change during a turn, once Temporal suggests continuing as new and the history holds 1 MiB or more,
        waits for the turn's end: a session continues as new only between turns, and each change adds to its
        history, which Temporal ends the session at past its limit (50 MB by default), turn and pending calls with
        it. The calls the turn waits on are still decided and resumed (those updates are not checked here), and the
        turn may be aborted; `open` and `settled`, whose answers carry the state, are refused too (the client
        then does without them). Only a validator refuses: where `_until_ready` runs a check for a new session,
        its history is far under 1 MiB."""
        info = workflow.info()
        if (
            self._turn_id is None
            or not info.is_continue_as_new_suggested()
            or info.get_current_history_size() < ROOMY_HISTORY_BYTES
        ):
            return
        raise ApplicationError(
            f"Session {self._id} takes no more changes until its turn ends: its history holds "
            f"{info.get_current_history_length()} events ({info.get_current_history_size()} bytes), where "
            "Temporal suggests continuing as new, and a session continues as new between turns. The turn's calls "
            "can still be decided and resumed, and the turn aborted.",
            type=UPDATE_LIMIT,
            non_retryable=True,
        )

    def _take_rules(self, values: dict[str, Any]) -> dict[str, Any]:
        """`values` without the keys Mastra keeps the permissions in (`permissionRules`, `yolo`), which become the
        session's rules: from `set_state`, and from the controller's `initial_state` for a new session."""
        rules, yolo = values.pop("permissionRules", None), values.pop("yolo", None)
        if isinstance(rules, dict):
            self._c.permissions.categories = dict(rules.get("categories") or {})
            self._c.permissions.tools = dict(rules.get("tools") or {})
        if isinstance(yolo, bool):
            self._c.permissions.yolo = yolo
        return values

    @set_state.validator
    def _check_state(self, request: SetState) -> None:
        if isinstance(request.updates, dict) and (problem := _rules_problem(request.updates)):
            raise ApplicationError(problem, type="InvalidState", non_retryable=True)
        self._state_rules(request)
        if self._ready:
            self._check_room()
            self._check_state_bytes({**self._state(), **request.updates})

    def _state_rules(self, request: SetState) -> None:
        """The checks a state update that came before the session was ready passes once it is (`_until_ready`):
        those of the sessions that recorded such an update, so they replay as they ran. The size bound is the
        validator's only (`_check_room`, run by other changes' checks there too, never refuses before the session
        is ready: no turn runs then)."""
        if not self._ready:
            return
        if not isinstance(request.updates, dict):
            raise ApplicationError("state updates must be a JSON object", type="InvalidState", non_retryable=True)
        schema = self._config.state_schema
        merged = {**self._c.state, **request.updates}
        merged.pop("permissionRules", None)
        merged.pop("yolo", None)
        problems = schema_problems(schema, merged, on_re2=False) if schema else []  # the controller's (code)
        if problems:
            raise ApplicationError(
                f"Invalid state update: {'; '.join(problems)}", type="InvalidState", non_retryable=True
            )

    @workflow.update(name=names.SESSION_PERMISSION_UPDATE)
    async def set_permission(self, request: SetPermission) -> SessionSnapshot:
        await self._until_ready(lambda: self._permission_rules(request))
        async with self._lock:
            rules = self._c.permissions
            if request.tool_name is not None:
                rules.tools[request.tool_name] = request.policy
            elif request.category is not None:
                rules.categories[request.category] = request.policy
            event = {"type": "state_changed", "state": self._state(), "changedKeys": ["permissionRules"]}
            await self._emit([event])
            await self._tell_turn()
        return self.snapshot()

    @set_permission.validator
    def _check_permission(self, request: SetPermission) -> None:
        self._permission_rules(request)
        if self._ready:
            self._check_room()
        if self._ready and request.tool_name is not None:
            after = self._state()
            after["permissionRules"]["tools"][request.tool_name] = request.policy
            self._check_state_bytes(after)

    def _permission_rules(self, request: SetPermission) -> None:
        """As `_state_rules`, for a permission change."""
        if not self._ready:
            return
        if (request.tool_name is None) == (request.category is None):
            raise ApplicationError(
                "Set a policy for a category or for a tool (one of them)", type="InvalidInput", non_retryable=True
            )

    @workflow.update(name=names.SESSION_APPROVAL_UPDATE)
    async def respond_to_tool_approval(self, response: ToolApprovalResponse) -> Accepted:
        await self._until_ready(lambda: self._check_approval(response))
        async with self._lock:
            item = self._pending_of(response.tool_call_id, "approval")
            if response.decision == "always_allow_category" and item.category is not None:
                if item.category not in self._c.permissions.granted_categories:
                    self._c.permissions.granted_categories.append(item.category)
                await self._tell_turn()
                others = [p for p in self._c.pending if p.kind == "approval" and p.category == item.category]
                for other in others:
                    if other is not item:
                        await self._decide(other, approved=True)
            await self._decide(item, approved=response.decision != "decline", reason=response.reason)
        return Accepted(run_id=item.run_id)

    @respond_to_tool_approval.validator
    def _check_approval(self, response: ToolApprovalResponse) -> None:
        if not self._ready:
            return
        self._pending_of(response.tool_call_id, "approval")

    @workflow.update(name=names.SESSION_SUSPENSION_UPDATE)
    async def respond_to_tool_suspension(self, response: ToolSuspensionResponse) -> Accepted:
        await self._until_ready(lambda: self._check_suspension(response))
        async with self._lock:
            item = self._pending_of(response.tool_call_id, "suspension")
            data = response.resume_data
            if item.tool_name == "submit_plan" and isinstance(data, dict) and data.get("action") == "approved":
                mode = self._mode(self._c.mode_id or self._config.default_mode_id)
                target = mode.transitions_to or self._config.default_mode_id
                if target != self._c.mode_id:
                    await self._switch_mode(target)
                    await self._tell_turn()
            if item.tool_name == "request_access" and isinstance(data, dict) and data.get("granted"):
                asked = item.suspend_payload if isinstance(item.suspend_payload, dict) else {}
                if asked.get("category") and asked["category"] not in self._c.permissions.granted_categories:
                    self._c.permissions.granted_categories.append(asked["category"])
                if asked.get("toolName") and asked["toolName"] not in self._c.permissions.granted_tools:
                    self._c.permissions.granted_tools.append(asked["toolName"])
                await self._tell_turn()
            if item in self._c.pending:  # else resumed on the run meanwhile (`turn_decided`, lock-free)
                self._c.pending.remove(item)
            self._decided(item.tool_call_id)
            await self._signal(
                item.run_id, names.RESUME_TOOL_SIGNAL, ToolResume(tool_call_id=item.tool_call_id, resume_data=data)
            )
            self._status()
        return Accepted(run_id=item.run_id)

    @respond_to_tool_suspension.validator
    def _check_suspension(self, response: ToolSuspensionResponse) -> None:
        if not self._ready:
            return
        item = self._pending_of(response.tool_call_id, "suspension")
        resume_schema = item.resume_schema  # the tool's (code)
        problems = schema_problems(resume_schema, response.resume_data, on_re2=False) if resume_schema else []
        if problems:
            raise ApplicationError(
                f"Resume data for {response.tool_call_id!r} does not match its schema: {'; '.join(problems)}",
                type="InvalidResumeData",
                non_retryable=True,
            )

    @workflow.update(name=names.SESSION_THREAD_UPDATE)
    async def change_thread(self, change: ThreadChange) -> SessionThreadResult:
        await self._until_ready(lambda: self._thread_rules(change))
        async with self._lock:
            if change.op in ("create", "clone") and change.thread_id is None:
                change = change.model_copy(update={"thread_id": str(workflow.uuid4())})
            return await self._thread_change(change)

    @change_thread.validator
    def _check_thread(self, change: ThreadChange) -> None:
        if change.op in ("create", "switch", "clone"):  # the ids the session may move to
            _check_thread_id(change.thread_id)
        if problem := title_problem(change.title):
            raise ApplicationError(problem, type="InvalidInput", non_retryable=True)
        self._thread_rules(change)

    def _thread_rules(self, change: ThreadChange) -> None:
        if not self._ready:
            return
        self._check_room()
        if change.op in ("latest", "settings"):
            raise ApplicationError(f"Unknown thread operation {change.op!r}", type="InvalidInput", non_retryable=True)
        if change.op in ("switch", "delete") and not change.thread_id:
            raise ApplicationError(f"{change.op} needs a threadId", type="InvalidInput", non_retryable=True)
        if change.op in ("switch", "delete", "clone") and self._turn_id is not None:
            raise ApplicationError(
                f"A turn is running on thread {self._c.thread_id}: abort it first",
                type="SessionBusy",
                non_retryable=True,
            )

    @workflow.update(name=names.SESSION_SUBAGENT_MODEL_UPDATE)
    async def set_subagent_model(self, request: SetSubagentModel) -> SessionSnapshot:
        await self._until_ready(lambda: self._subagent_model_rules(request))
        async with self._lock:
            key = f"subagentModelId_{request.agent_type}" if request.agent_type else "subagentModelId"
            event = {"type": "subagent_model_changed", "modelId": request.model_id, "scope": "thread"}
            if request.agent_type:
                event["agentType"] = request.agent_type
            await self._settings({key: request.model_id}, [event])
            await self._tell_turn()
        return self.snapshot()

    @set_subagent_model.validator
    def _check_subagent_model(self, request: SetSubagentModel) -> None:
        _check_model_id(request.model_id)
        self._subagent_model_rules(request)

    def _subagent_model_rules(self, request: SetSubagentModel) -> None:
        """As `_state_rules`, for a subagent's model."""
        if not self._ready:
            return
        self._check_room()
        if request.agent_type is not None and request.agent_type not in self._config.subagents:
            known = ", ".join(self._config.subagents) or "none"
            raise ApplicationError(
                f"Unknown agent type {request.agent_type!r} (known: {known})",
                type="UnknownAgentType",
                non_retryable=True,
            )

    @workflow.update(name=names.SESSION_GOAL_UPDATE)
    async def set_goal(self, request: SetGoal) -> SessionSnapshot:
        await self._until_ready(lambda: self._goal_rules(request))
        async with self._lock:
            if request.clear:
                self._c.goal = None
            elif request.objective is not None:
                self._c.goal = Goal(
                    objective=request.objective,
                    judge_model_id=request.judge_model_id,
                    max_runs=request.max_runs or 10,
                )
            else:
                goal = self._c.goal
                assert goal is not None
                for key in ("judge_model_id", "max_runs", "status"):
                    value = getattr(request, key)
                    if value is not None:
                        setattr(goal, key, value)
            goal_json = self._c.goal.model_dump(mode="json", by_alias=True) if self._c.goal else None
            await self._emit([{"type": "goal_evaluation", "payload": {"status": "set", "goal": goal_json}}])
        return self.snapshot()

    @set_goal.validator
    def _check_goal(self, request: SetGoal) -> None:
        if request.objective is not None and json_bytes(request.objective) > MAX_OBJECTIVE_BYTES:
            raise ApplicationError(
                f"A goal's objective holds at most {MAX_OBJECTIVE_BYTES // 1024} KiB: this one is "
                f"{json_bytes(request.objective)} bytes",
                type="InvalidInput",
                non_retryable=True,
            )
        if self._ready:
            self._check_room()
        self._goal_rules(request)

    def _goal_rules(self, request: SetGoal) -> None:
        """As `_state_rules`, for a goal change."""
        if not self._ready:
            return
        if not request.clear and request.objective is None and self._c.goal is None:
            raise ApplicationError("The session has no goal to update: set one first", non_retryable=True)

    # --- from turns --------------------------------------------------------------------------------------------

    @workflow.signal(name=names.TURN_WAITING_SIGNAL)
    async def turn_waiting(self, waiting: TurnWaiting) -> None:
        async with self._lock:
            known = {p.tool_call_id for p in self._c.pending}
            items = [i for i in waiting.items if self._c.generation < 4 or self._of_running_turn(i.run_id)]
            new = [i for i in items if i.tool_call_id not in known]
            over = self._past_pending(new) if self._c.generation >= 7 else []
            if self._c.generation >= 7:
                declined_ids = {i.tool_call_id for i in over}
                new = [i for i in new if i.tool_call_id not in declined_ids]
            else:  # dropped (see `GENERATION_7`)
                new = new[: MAX_PENDING - len(self._c.pending)]
            self._c.pending.extend(new)
            events: list[dict[str, Any]] = []
            reason = f"Declined: {MAX_PENDING} tool calls already wait for a decision in this session"
            if over:
                tools = ", ".join(dict.fromkeys(i.tool_name for i in over[:20]))
                events.append({"type": "info", "message": f"{reason} ({len(over)} calls of {tools})"})
            granted = []
            for item in new:
                if item.kind == "suspension":
                    events.append(
                        {
                            "type": "tool_suspended",
                            "toolCallId": item.tool_call_id,
                            "toolName": item.tool_name,
                            "args": item.args,
                            "suspendPayload": item.suspend_payload,
                            "resumeSchema": item.resume_schema,
                            "runId": item.run_id,
                        }
                    )
                elif self._c.permissions.resolve(item.tool_name, item.category) == "allow":
                    granted.append(item)  # allowed since the turn asked (a grant, a rule)
                else:
                    event: dict[str, Any] = {"type": "tool_approval_required", "toolCallId": item.tool_call_id}
                    event |= {"toolName": item.tool_name, "args": item.args, "runId": item.run_id}
                    if item.subagent:
                        event["subagent"] = item.subagent
                    events.append(event)
            await self._emit(events)
            for item in granted:
                await self._decide(item, approved=True)
            # Together (one workflow task), and not in `decided`: no one was asked, and the ids a person decided
            # stay there.
            await asyncio.gather(*(self._decline_at_once(item, reason) for item in over))
            self._status()

    async def _decline_at_once(self, item: PendingItem, reason: str) -> None:
        approval = ToolApproval(tool_call_id=item.tool_call_id, approved=False, reason=reason)
        await self._signal(item.run_id, names.TOOL_APPROVAL_SIGNAL, approval)

    def _past_pending(self, new: list[PendingItem]) -> list[PendingItem]:
        """The approvals of `new` to ask about past the room `MAX_PENDING` leaves (generation 7): declined, not
        kept. Suspensions are always kept (one cannot be declined; a step suspends a few calls at most), and calls
        allowed now are approved at once (they hold no place)."""
        suspensions = sum(i.kind == "suspension" for i in new)
        asks = [
            i for i in new if i.kind == "approval" and self._c.permissions.resolve(i.tool_name, i.category) != "allow"
        ]
        return asks[max(MAX_PENDING - len(self._c.pending) - suspensions, 0) :]

    def _of_running_turn(self, run_id: str) -> bool:
        """Whether `run_id` is the running turn's or one of its subagents' (`<turn>-...`)."""
        turn = self._turn_id
        return turn is not None and (run_id == turn or run_id.startswith(f"{turn}-"))

    @workflow.signal(name=names.TURN_DECIDED_SIGNAL)
    def turn_decided(self, decided: TurnDecided) -> None:
        """Calls decided or resumed on the run itself (the `temporal` CLI, say): no longer pending here."""
        gone = dict.fromkeys(decided.tool_call_ids)  # in the order given: a set's order is the process's hash seed's
        self._c.pending = [p for p in self._c.pending if not (p.run_id == decided.run_id and p.tool_call_id in gone)]
        for call_id in gone:
            self._decided(call_id)
        self._status()

    # --- queries ----------------------------------------------------------------------------------------------

    @workflow.query(name=names.SESSION_SNAPSHOT_QUERY)
    def snapshot(self) -> SessionSnapshot:
        assert self._input is not None
        settings = self._c.thread_settings
        subagent_models = {k: str(v) for k, v in settings.items() if k.startswith("subagentModelId")}
        return SessionSnapshot(
            session_id=self._id,
            controller_id=self._input.controller_id,
            resource_id=self._resource_id,
            scope=self._input.scope,
            thread_id=self._c.thread_id,
            mode_id=self._c.mode_id or (self._c.config.default_mode_id if self._c.config else ""),
            model_id=self._c.model_id,
            permissions=self._c.permissions,
            state=self._state(),
            running=self._turn_id is not None,
            run_id=self._turn_id,
            pending=list(self._c.pending),
            queued=len(self._c.queued),
            goal=self._c.goal,
            snapshot_offset=self._c.snapshot_offset,
            subagent_models=subagent_models,
        )

    # --- helpers ----------------------------------------------------------------------------------------------

    @property
    def _resource_id(self) -> str:
        assert self._input is not None
        return self._input.resource_id

    def _state(self) -> dict[str, Any]:
        rules = self._c.permissions
        return {
            **self._c.state,
            "permissionRules": {"categories": dict(rules.categories), "tools": dict(rules.tools)},
            "yolo": rules.yolo,
        }

    def _mode(self, mode_id: str) -> Any:
        for mode in self._config.modes:
            if mode.id == mode_id:
                return mode
        raise ApplicationError(f"Mode not found: {mode_id}", type="UnknownMode", non_retryable=True)

    def _pending_of(self, tool_call_id: str, kind: str) -> PendingItem:
        for item in self._c.pending:
            if item.tool_call_id == tool_call_id and item.kind == kind:
                return item
        if tool_call_id in self._c.decided:
            raise ApplicationError(
                f"Tool call {tool_call_id!r} was already decided", type="AlreadyDecided", non_retryable=True
            )
        waiting = ", ".join(p.tool_call_id for p in self._c.pending if p.kind == kind) or "none"
        noun = "waiting for approval" if kind == "approval" else "suspended"
        raise ApplicationError(
            f"No tool call {tool_call_id!r} is {noun} (pending: {waiting})", type="UnknownToolCall", non_retryable=True
        )

    def _decided(self, tool_call_id: str) -> None:
        self._c.decided = [*self._c.decided[-(MAX_DECIDED - 1) :], tool_call_id]

    async def _decide(self, item: PendingItem, *, approved: bool, reason: str | None = None) -> None:
        if item in self._c.pending:
            self._c.pending.remove(item)
        self._decided(item.tool_call_id)
        approval = ToolApproval(
            tool_call_id=item.tool_call_id, approved=approved, reason=reason or (None if approved else DEFAULT_REASON)
        )
        await self._signal(item.run_id, names.TOOL_APPROVAL_SIGNAL, approval)
        self._status()

    async def _signal(self, run_id: str, name: str, payload: Any) -> bool:
        """Whether the signal reached the run (it fails when the run has ended meanwhile)."""
        try:
            await workflow.get_external_workflow_handle(run_id).signal(name, payload)
        except Exception as err:  # the run ended meanwhile: nothing to deliver to
            workflow.logger.warning("Could not signal %s to %s: %s", name, run_id, err)
            return False
        return True

    def _cancelled(self, item: PendingItem, reason: str) -> dict[str, Any]:
        return {
            "type": "tool_suspension_cancelled",
            "toolCallId": item.tool_call_id,
            "toolName": item.tool_name,
            "reason": reason,
        }

    def _status(self) -> None:
        status = "suspended" if self._c.pending else "running" if self._turn_id is not None else "idle"
        workflow.upsert_search_attributes([KEEL_STATUS.value_set(status)])
        waiting = [f"`{p.tool_name}` ({p.tool_call_id}): {p.kind}" for p in self._c.pending]
        workflow.set_current_details("**Waiting for**\n\n- " + "\n- ".join(waiting) if waiting else "")

    def _source(self) -> str:
        self._c.seq += 1
        return f"session:{self._c.seq}"

    async def _emit(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        await workflow.execute_local_activity(
            names.SESSION_EVENTS,
            SessionEventsInput(session_id=self._id, events=events, source=self._source()),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=STORAGE,
        )

    async def _settings(self, settings: dict[str, Any], events: list[dict[str, Any]]) -> None:
        """Write settings on the current thread and emit the events that say so (one activity)."""
        self._c.thread_settings.update(settings)
        if not settings or self._c.thread_id is None:
            await self._emit(events)
            return
        await self._thread_change(ThreadChange(op="settings"), settings=settings)
        await self._emit(events)

    async def _thread_change(
        self, change: ThreadChange, *, settings: dict[str, Any] | None = None
    ) -> SessionThreadResult:
        assert self._input is not None
        new_settings = {"currentModeId": self._c.mode_id}
        if self._c.model_id:
            new_settings[f"modeModelId_{self._c.mode_id}"] = self._c.model_id
        try:
            result: SessionThreadResult = await workflow.execute_activity(
                names.SESSION_THREAD,
                SessionThreadInput(
                    session_id=self._id,
                    controller_id=self._config.controller_id,
                    resource_id=self._resource_id,
                    change=change,
                    source=self._source(),
                    current_thread_id=self._c.thread_id,
                    settings=settings or {},
                    tags=self._thread_tags(),
                    new_thread_settings=new_settings,
                ),
                result_type=SessionThreadResult,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=STORAGE,
                summary=f"thread: {change.op} {change.thread_id or ''}".strip(),
            )
        except ActivityError as err:
            cause = err.cause if isinstance(err.cause, ApplicationError) else None
            if cause is not None:
                raise ApplicationError(cause.message, type=cause.type, non_retryable=True) from None
            raise
        if change.op != "settings" and result.thread_id != self._c.thread_id:
            self._c.thread_id = result.thread_id
            self._c.thread_settings = dict(result.settings)
            workflow.upsert_search_attributes([KEEL_THREAD_ID.value_set(result.thread_id or "")])
            await self._restore()
        return result

    def _thread_tags(self) -> dict[str, Any]:
        """What the session's threads are marked with, and a new session binds the latest of: its tags and its
        scope (Mastra binds a new scope to the resource's latest thread, whatever scope wrote it; Keel keeps a
        scope's conversations apart)."""
        assert self._input is not None
        scope = {"sessionScope": self._input.scope} if self._input.scope else {}
        return {**self._input.tags, **scope}

    async def _restore(self) -> None:
        """The thread's stored mode and the model chosen for it (Mastra's `loadMetadata`)."""
        settings = self._c.thread_settings
        mode_id = settings.get("currentModeId")
        events: list[dict[str, Any]] = []
        if isinstance(mode_id, str) and mode_id != self._c.mode_id and any(m.id == mode_id for m in self._config.modes):
            events.append({"type": "mode_changed", "modeId": mode_id, "previousModeId": self._c.mode_id})
            self._c.mode_id = mode_id
        model = settings.get(f"modeModelId_{self._c.mode_id}")
        if isinstance(model, str) and model != self._c.model_id:
            self._c.model_id = model
            events.append({"type": "model_changed", "modelId": model})
        await self._emit(events)

    async def _snapshot(self) -> None:
        self._c.snapshot_offset = await workflow.execute_activity(
            names.SESSION_SNAPSHOT,
            SessionSnapshotInput(session_id=self._id, from_offset=self._c.snapshot_offset, source=self._source()),
            result_type=int,
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=STORAGE,
            summary="display state snapshot before continuing as new",
        )


POLICIES = ("allow", "ask", "deny")


def _rules_problem(updates: dict[str, Any]) -> str | None:
    """What is wrong with the permissions a state update sets (Mastra keeps them in the state: `permissionRules`
    `{categories?, tools?}` of policies, `yolo` a boolean), or None. Checked by the validator only: an update a
    session took before this check replays as it ran."""
    rules, yolo = updates.get("permissionRules"), updates.get("yolo")
    if yolo is not None and not isinstance(yolo, bool):
        return f"yolo is true or false, not {yolo!r}"
    if rules is None:
        return None
    if not isinstance(rules, dict) or set(rules) - {"categories", "tools"}:
        return "permissionRules is an object {categories?, tools?}, each mapping a name to allow, ask or deny"
    for kind in ("categories", "tools"):
        given = rules.get(kind) or {}
        if not isinstance(given, dict):
            return f"permissionRules.{kind} maps a name to allow, ask or deny"
        for name, policy in given.items():
            if policy not in POLICIES:
                return f"permissionRules.{kind}.{name} is allow, ask or deny, not {policy!r}"
    return None


def _check_thread_id(thread_id: str | None) -> None:
    """A thread id the session may move to: its turns are indexed by it (`KeelThreadId`), within Temporal's bound."""
    problem = None if thread_id is None else attribute_problem("A thread id", thread_id)
    if problem is not None:
        raise ApplicationError(problem, type="InvalidInput", non_retryable=True)


def _check_model_id(model_id: str) -> None:
    """A model id is kept in thread settings and sent with every turn: at most `MAX_MODEL_ID_CHARS` characters."""
    if len(model_id) > MAX_MODEL_ID_CHARS:
        raise ApplicationError(
            f"A model id holds at most {MAX_MODEL_ID_CHARS} characters: this one has {len(model_id)}",
            type="InvalidInput",
            non_retryable=True,
        )
