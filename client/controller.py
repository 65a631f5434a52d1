"""The client side of AgentController sessions: `Session`, a handle on one `AgentSession` workflow, and
`ControllerClient`, which makes or finds sessions (update-with-start) and lists them from visibility.

A handle keeps nothing of its own: every read is a query to the session or a read of storage, every change an
update the session validates, so any number of processes may hold handles on one session, and a handle made
after a restart continues where the session is.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from temporalio.client import WithStartWorkflowOperation, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from keel.client.errors import KeelClientError, RunClosed, ToolCallRejected
from keel.client.run_events import follow, read
from keel.client.visibility import quoted
from keel.client.with_start import execute_update_with_start
from keel.protocol import names
from keel.protocol.controller_events import DisplayState
from keel.protocol.identifiers import SESSION_ID_ROOM, attribute_problem, workflow_id_problem

if TYPE_CHECKING:
    from keel.app.controller import ControllerDefinition
    from keel.client.keel_client import KeelClient
    from keel.storage import Storage
    from keel.workflows.session_contracts import Accepted, PendingItem, SessionSnapshot, SessionThreadResult

Listener = Callable[[dict[str, Any]], Any]
WAIT_SECONDS = 30.0
ASK_RUN_SECONDS = 5.0
"""How long `settled()` gives a run to say which calls it waits on before taking the session's word."""
CATCH_UP_SECONDS = 5.0
"""How long `settled()` waits for the session to hear of calls decided on their run itself."""
HEARD_SECONDS = 30.0
"""How long `send_message` and `settled` wait for this process's listeners to handle what the turn wrote."""


class SessionError(KeelClientError):
    """A change the session refused (an unknown mode or tool call, a state that fails the schema, ...): the
    session is unchanged."""

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind


class SessionNotFound(KeelClientError):
    """No session is open for this (controller, resource id, scope): `ControllerClient.create_session` makes it."""


class ControllerClient:
    """Sessions of one controller, through Temporal (and the storage, for their event logs and threads)."""

    def __init__(
        self, keel: KeelClient, storage: Storage, controller_id: str, definition: ControllerDefinition | None = None
    ) -> None:
        self.keel = keel
        self.storage = storage
        self.controller_id = controller_id
        self.definition = definition
        """The controller as defined in this process (else the client's app's), when there is one: what
        `mode.resolve()` reads."""
        if definition is None and keel.app is not None and controller_id in keel.app.controllers:
            self.definition = keel.app.controllers[controller_id]

    async def create_session(
        self,
        resource_id: str,
        scope: str | None = None,
        *,
        thread_id: str | None = None,
        tags: dict[str, Any] | None = None,
    ) -> Session:
        """The session of (this controller, `resource_id`, `scope`), made if there is none (Mastra's get-or-
        create): two processes asking for the same get the same. With `thread_id` it is switched to that thread
        (made if missing)."""
        from keel.workflows.agent_session import AgentSession
        from keel.workflows.session_contracts import SessionInput, SessionOpen, SessionSnapshot

        session_id = names.session_workflow_id(self.controller_id, resource_id, scope)
        problem = (
            attribute_problem("A resource id", resource_id)
            or workflow_id_problem("The resource id and scope", session_id, room=SESSION_ID_ROOM)
            or (None if thread_id is None else attribute_problem("A thread id", thread_id))
        )
        if problem is not None:  # left to Temporal: an RPC error, and a session made with a thread it cannot use
            raise SessionError(problem, "InvalidInput")
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            AgentSession.run,
            SessionInput(
                controller_id=self.controller_id,
                resource_id=resource_id,
                scope=scope,
                thread_id=thread_id,
                tags=dict(tags or {}),
            ),
            id=session_id,
            task_queue=self.keel.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"session of {resource_id}" + (f" ({scope})" if scope else "") + f" on {self.controller_id}",
        )
        await self.keel.wait_for_worker()
        try:
            await execute_update_with_start(
                self.keel.temporal,
                names.SESSION_OPEN_UPDATE,
                SessionOpen(thread_id=thread_id),
                start=start,
                result_type=SessionSnapshot,
            )
        except WorkflowUpdateFailedError as err:
            refused = _refused(err)
            if refused.kind != UPDATE_LIMIT:  # else the session is there, taking no changes until its turn ends
                raise refused from None
        except RPCError as err:  # Temporal's own refusal: the session never saw the thread asked for
            unanswered = _unanswered(session_id, err)
            if not (isinstance(unanswered, SessionError) and unanswered.kind == UPDATE_LIMIT):
                raise unanswered from None
            session = Session(self, session_id, resource_id, scope)
            if thread_id is not None and (await session.snapshot()).thread_id != thread_id:
                raise unanswered from None
            return session
        return Session(self, session_id, resource_id, scope)

    def session(self, resource_id: str, scope: str | None = None) -> Session:
        """A handle on the session of (`resource_id`, `scope`) without making it (its calls fail if none)."""
        return Session(self, names.session_workflow_id(self.controller_id, resource_id, scope), resource_id, scope)

    async def sessions(self, resource_id: str | None = None, *, limit: int = 100) -> list[dict[str, Any]]:
        """Open sessions of this controller (of one resource), from visibility: id, resource, status."""
        query = f"KeelKind='session' AND KeelControllerId='{quoted(self.controller_id)}' AND CloseTime IS NULL"
        if resource_id is not None:
            query += f" AND KeelResourceId='{quoted(resource_id)}'"
        found = []
        async for ex in self.keel.temporal.list_workflows(query, limit=limit):
            attrs = ex.typed_search_attributes
            from keel.workflows.search_attributes import KEEL_RESOURCE_ID, KEEL_STATUS, KEEL_THREAD_ID

            found.append(
                {
                    "sessionId": ex.id,
                    "resourceId": attrs.get(KEEL_RESOURCE_ID),
                    "status": attrs.get(KEEL_STATUS),
                    "threadId": attrs.get(KEEL_THREAD_ID),
                    "startedAt": ex.start_time.isoformat() if ex.start_time else None,
                }
            )
        return found


class Session:
    """One session (Mastra's `Session`). Reads are queries to the session or reads of storage; changes are
    validated updates (`SessionError` when refused)."""

    def __init__(self, controller: ControllerClient, session_id: str, resource_id: str, scope: str | None) -> None:
        self.controller = controller
        self.id = session_id
        self.resource_id = resource_id
        self.scope = scope
        self.thread = _Threads(self)
        self.mode = _Mode(self)
        self.model = _Model(self)
        self.state = _State(self)
        self.permissions = _Permissions(self)
        self.subagents = _Subagents(self)
        self.display_state = _DisplayStateReader(self)
        self.goal = _Goal(self)
        self._attaching: set[asyncio.Event] = set()  # subscribers still finding where "now" is
        self._delivered: dict[asyncio.Future[None], int] = {}  # each subscriber: the offset it has handled up to
        self._progressed = asyncio.Event()  # set whenever a subscriber attached, handled an event or stopped

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Session) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def _storage(self) -> Storage:
        return self.controller.storage

    # --- messages and runs --------------------------------------------------------------------------------

    async def send_message(self, content: Any, *, wait: bool = True, message_id: str | None = None) -> Accepted:
        """Send a message: it starts a turn (the session is idle), or goes into the running one. With `wait`
        (Mastra's behaviour) this returns once that turn has ended or waits on a person."""
        return await self._send_and_settle(content, "send", message_id, wait)

    async def steer(self, content: Any, *, wait: bool = False) -> Accepted:
        """Abort the running turn and start one with this message."""
        return await self._send_and_settle(content, "steer", None, wait)

    async def _send_and_settle(
        self, content: Any, mode: Literal["send", "steer"], message_id: str | None, wait: bool
    ) -> Accepted:
        """The send, waiting in the same update when `wait` (one update per turn, not two); `settled` after it
        only when that wait did not settle (the session continued as new first, or its worker predates it)."""
        accepted = await self._send(content, mode, message_id, wait=wait)
        if wait and accepted.run_id is not None:
            if accepted.settled:
                await self._heard()
            else:
                await self.settled(accepted.run_id)
        return accepted

    async def follow_up(self, content: Any) -> Accepted:
        """A message for the turn after the running one (or a turn now, when idle)."""
        return await self._send(content, "follow_up", None)

    async def _send(
        self, content: Any, mode: Literal["send", "steer", "follow_up"], message_id: str | None, *, wait: bool = False
    ) -> Accepted:
        from keel.workflows.session_contracts import Accepted, SendMessage

        message = SendMessage(content=content, mode=mode, id=message_id or f"msg-{uuid.uuid4()}", wait=wait)
        # A caller's id names the update too: Temporal answers a send made again with the first one's answer.
        # So does a waiting send's own id: asked again after its execution ended (a reset), the new one answers it
        # once (the message is new to it, or it gives the first answer).
        update_id = f"send-{message.id}" if message_id or wait else None
        problem = None if update_id is None else workflow_id_problem("The message id", update_id, kind="an update")
        if problem is not None:  # left to Temporal: an RPC error
            raise SessionError(problem, "InvalidInput")
        ended = 0
        while True:
            try:
                result: Accepted = await self._update(
                    names.SESSION_SEND_UPDATE,
                    message,
                    Accepted,
                    update_id=update_id,
                    wait=SETTLED_WAIT if wait else None,
                )
                return result
            except SessionError as err:
                if not (wait and err.kind == ENDED_BEFORE_ANSWERING and ended < 3):
                    raise
                ended += 1

    async def abort(self) -> Accepted:
        from keel.workflows.session_contracts import Accepted

        try:
            result: Accepted = await self._update(names.SESSION_ABORT_UPDATE, None, Accepted)
        except SessionError as err:
            if err.kind != UPDATE_LIMIT:
                raise
            turn = (await self.snapshot()).run_id  # the turn is canceled: the session ends it as aborted
            if turn is not None:
                await self.controller.keel.cancel(turn)
            return Accepted(run_id=turn)
        return result

    async def settled(self, run_id: str | None = None) -> SessionSnapshot:
        """Once the turn `run_id` (default: the latest) has ended, or waits on a person.

        A call decided on its run itself (the `temporal` CLI's `tool_approval` signal, say) reaches the session
        by the run's signal once the run has every decision of that step: until then the session answers that
        the turn waits on it. When a run the session says waits on a person waits on none of the calls the
        session lists for it (asked of the run, a query each), the session is asked again once it has heard, for
        up to `CATCH_UP_SECONDS` each time; a run that still waits on one of them (the step's other call) is a
        turn that waits on a person, answered at once."""
        deadline = time.monotonic() + SETTLED_WAIT.total_seconds()
        while True:
            result = await self._settle_once(run_id)
            stale = await self._runs_decided_elsewhere(result)
            if not stale or not await self._until_heard(stale) or time.monotonic() >= deadline:
                break
        await self._heard()
        return result

    async def _runs_decided_elsewhere(self, snapshot: SessionSnapshot) -> set[str]:
        """The runs `snapshot` says wait on a person that wait on none of the calls it lists for them. A run that
        cannot be asked in `ASK_RUN_SECONDS` (ended, no worker, busy) counts as waiting: the session's answer
        stands."""
        runs = list(dict.fromkeys(p.run_id for p in snapshot.pending))
        waiting = await asyncio.gather(*(self._waiting_on(r) for r in runs))
        return {
            run
            for run, calls in zip(runs, waiting, strict=True)
            if calls is not None and not any(p.tool_call_id in calls for p in snapshot.pending if p.run_id == run)
        }

    async def _waiting_on(self, run_id: str) -> set[str] | None:
        """The calls the run waits on now (approvals and suspensions), or None when it cannot say."""
        from keel.workflows.agent_run import AgentRun
        from keel.workflows.contracts import SuspendedToolCall

        handle = self.controller.keel.temporal.get_workflow_handle_for(AgentRun.run, run_id)
        timeout = timedelta(seconds=ASK_RUN_SECONDS)

        async def ids(answer: Awaitable[list[Any]]) -> set[str] | None:
            try:
                return {c.tool_call_id for c in await answer}
            except (RPCError, WorkflowQueryFailedError):
                return None

        pending, suspended = await asyncio.gather(
            ids(handle.query(AgentRun.pending_tool_calls, rpc_timeout=timeout)),
            ids(
                handle.query(names.SUSPENDED_TOOL_CALLS_QUERY, result_type=list[SuspendedToolCall], rpc_timeout=timeout)
            ),
        )
        return None if pending is None or suspended is None else pending | suspended

    async def _until_heard(self, runs: set[str]) -> bool:
        """Wait (backing off) until the session lists no waiting call of `runs`: True, or False after
        `CATCH_UP_SECONDS` (its signal lost, or the run reset: the session's answer stands)."""
        delay, deadline = 0.02, time.monotonic() + CATCH_UP_SECONDS
        while time.monotonic() < deadline:
            await asyncio.sleep(delay)
            if not any(p.run_id in runs for p in (await self.snapshot()).pending):
                return True
            delay = min(delay * 2, 0.5)
        return False

    async def _settle_once(self, run_id: str | None) -> SessionSnapshot:
        from keel.workflows.session_contracts import SessionSnapshot, Settle

        ended, continuing, deadline = 0, 0, time.monotonic() + SETTLED_WAIT.total_seconds()
        while True:
            try:
                result: SessionSnapshot = await self._update(
                    names.SESSION_SETTLED_UPDATE, Settle(run_id=run_id), SessionSnapshot, wait=SETTLED_WAIT
                )
                break
            except SessionError as err:
                if err.kind == UPDATE_LIMIT:  # the session takes no more updates until its turn ends
                    result = await self._settled_by_query(run_id, err)
                    break
                if err.kind == ENDED_BEFORE_ANSWERING and ended < 3:  # its execution ended (a reset): ask the new one
                    ended += 1
                elif err.kind == CONTINUING and time.monotonic() < deadline:  # it is about to: ask it once it has
                    continuing += 1
                    await asyncio.sleep(min(0.02 * continuing, 0.5))
                else:
                    raise
        return result

    async def _settled_by_query(self, run_id: str | None, refused: SessionError) -> SessionSnapshot:
        """`settled` for a session that takes no updates until its turn ends (`UPDATE_LIMIT`): the session's
        `settled_now` query (which adds nothing to its history) is asked until the turn it targets has ended or
        waits on a person. A session without that query (a worker older than it) re-raises `refused`."""
        from keel.workflows.session_contracts import Settle, SettledNow

        deadline = time.monotonic() + SETTLED_WAIT.total_seconds()
        target = run_id
        while True:
            try:
                now: SettledNow = await self._handle.query(
                    names.SESSION_SETTLED_QUERY,
                    Settle(run_id=target),
                    result_type=SettledNow,
                    rpc_timeout=timedelta(seconds=WAIT_SECONDS),
                )
            except WorkflowQueryFailedError:
                raise refused from None
            except RPCError as err:
                raise _unanswered(self.id, err) from None
            if now.settled:
                return await self.snapshot()
            if time.monotonic() > deadline:
                raise SessionError(f"Turn {now.run_id} has not settled in {SETTLED_WAIT}", "Timeout")
            target = now.run_id
            await asyncio.sleep(0.1)

    async def respond_to_tool_approval(
        self,
        tool_call_id: str,
        decision: Literal["approve", "decline", "always_allow_category"] = "approve",
        *,
        reason: str | None = None,
    ) -> Accepted:
        from keel.workflows.session_contracts import Accepted, ToolApprovalResponse

        response = ToolApprovalResponse(tool_call_id=tool_call_id, decision=decision, reason=reason)
        try:
            result: Accepted = await self._update(names.SESSION_APPROVAL_UPDATE, response, Accepted)
        except SessionError as err:
            if err.kind != UPDATE_LIMIT or decision == "always_allow_category":
                raise
            run_id, _ = await self._waiting_in(tool_call_id)
            keel = self.controller.keel
            asked = next((c for c in await keel.pending_tool_calls(run_id) if c.tool_call_id == tool_call_id), None)
            with _as_session_error():
                await keel.approve(
                    run_id,
                    tool_call_id,
                    approved=decision == "approve",
                    reason=reason,
                    step=asked.step if asked else None,
                    args_digest=asked.args_digest if asked else None,
                )
            return Accepted(run_id=run_id)
        return result

    async def respond_to_tool_suspension(self, tool_call_id: str, resume_data: Any) -> Accepted:
        from keel.workflows.session_contracts import Accepted, ToolSuspensionResponse

        response = ToolSuspensionResponse(tool_call_id=tool_call_id, resume_data=resume_data)
        try:
            result: Accepted = await self._update(names.SESSION_SUSPENSION_UPDATE, response, Accepted)
        except SessionError as err:
            if err.kind != UPDATE_LIMIT:
                raise
            run_id, item = await self._waiting_in(tool_call_id)
            if item is not None and item.tool_name in SESSION_SIDE_TOOLS:  # its answer changes the session
                message = f"{err} `{item.tool_name}` is answered by the session: abort the turn"
                raise SessionError(message, UPDATE_LIMIT) from None
            with _as_session_error():
                await self.controller.keel.resume_tool(run_id, tool_call_id, resume_data)
            return Accepted(run_id=run_id)
        return result

    async def _waiting_in(self, tool_call_id: str) -> tuple[str, PendingItem | None]:
        """The run (the turn, or a subagent's) whose call `tool_call_id` waits, and the session's item for it
        (None when the session has not heard of it yet: the turn's then), for a decision sent to the run itself
        once the session takes no more updates (`UPDATE_LIMIT`): there the run's own validated update decides it,
        and the run tells the session the call is decided."""
        snapshot = await self.snapshot()
        item = next((p for p in snapshot.pending if p.tool_call_id == tool_call_id), None)
        run_id = item.run_id if item is not None else snapshot.run_id
        if run_id is None:
            raise SessionError(f"No tool call {tool_call_id!r} is waiting: no turn is running", "UnknownToolCall")
        return run_id, item

    async def snapshot(self) -> SessionSnapshot:
        """Everything the session holds now: thread, mode, model, permissions, state, pending calls."""
        from keel.workflows.session_contracts import SessionSnapshot

        try:
            result: SessionSnapshot = await self._handle.query(
                names.SESSION_SNAPSHOT_QUERY, result_type=SessionSnapshot, rpc_timeout=timedelta(seconds=WAIT_SECONDS)
            )
        except RPCError as err:
            raise _unanswered(self.id, err) from None
        return result

    # --- events -----------------------------------------------------------------------------------------------

    async def events(
        self,
        offset: int | None = None,
        *,
        display_state: bool = True,
        _attached: asyncio.Event | None = None,
        _handled: Callable[[int], None] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """The session's events from `offset` (default: from now), as they are written, each once; with
        `display_state`, each followed by `display_state_changed` (Mastra's stream). Each event carries its
        `offset`: a reader that reconnects with the last one + 1 misses nothing and sees nothing twice."""
        snapshot = await self.snapshot()
        start = offset if offset is not None else await self._storage.log_end(self.id)
        if _attached is not None:  # a change this process sends from now on is seen by the subscriber
            _attached.set()
            self._attaching.discard(_attached)
        handled = _handled or (lambda _offset: None)
        handled(start)
        state = await self._fold_until(start, snapshot.snapshot_offset)
        async for shown in follow(self._storage, self.id, offset=start, until=frozenset()):
            event = {**shown.event.payload, "type": shown.event.type, "offset": shown.event.offset}
            message = event.get("message")
            if event["type"] == "message_start" and isinstance(message, dict) and "createdAt" not in message:
                # Mastra's messages carry it (client-js makes it a Date): when the log took it, if the session
                # did not say
                event["message"] = {**message, "createdAt": shown.event.created_at.isoformat()}
            state.apply(event)
            if event["type"] != "display_state":
                yield event
                if display_state:
                    yield {"type": "display_state_changed", "displayState": state.snapshot(), "offset": event["offset"]}
            handled(shown.event.offset + 1)

    def subscribe(self, listener: Listener, offset: int | None = None) -> Callable[[], None]:
        """Call `listener` with each event (Mastra's `subscribe`); returns the unsubscribe function. From
        `offset` when given (a listener that reconnects gets what it missed), else from now."""

        attached = asyncio.Event()
        self._attaching.add(attached)

        async def pump() -> None:
            def handled(offset: int) -> None:
                self._delivered[task] = offset
                self._progressed.set()

            try:
                async for event in self.events(offset, _attached=attached, _handled=handled):
                    outcome = listener(event)
                    if asyncio.iscoroutine(outcome):
                        await outcome
            finally:
                attached.set()
                self._attaching.discard(attached)
                self._delivered.pop(task, None)
                self._progressed.set()

        task: asyncio.Future[None] = asyncio.ensure_future(pump())

        def unsubscribe() -> None:
            task.cancel()
            self._delivered.pop(task, None)
            self._progressed.set()

        return unsubscribe

    async def _heard(self) -> None:
        """Wait (a while at most) until every listener of this handle has handled every event written so far, as
        Mastra's in-process listeners have been called before `sendMessage` resolves: a listener that answers a
        question is done before the caller goes on. A listener waiting here for itself is not waited for."""
        if not self._delivered:
            return
        end = await self._storage.log_end(self.id)
        me = asyncio.current_task()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HEARD_SECONDS

        def behind() -> bool:
            late = any(t is not me and not t.done() and at < end for t, at in list(self._delivered.items()))
            return late or any(not a.is_set() for a in self._attaching)

        while True:
            self._progressed.clear()  # before looking: progress made after the look wakes the wait below
            if not behind():
                return
            try:
                await asyncio.wait_for(self._progressed.wait(), deadline - loop.time())
            except TimeoutError:
                return

    async def _fold_until(self, offset: int, snapshot_offset: int | None) -> DisplayState:
        state = DisplayState()
        begin = snapshot_offset if snapshot_offset is not None and snapshot_offset <= offset else 0
        for shown in await read(self._storage, self.id, offset=begin):
            if shown.event.offset >= offset:
                break
            state.apply({**shown.event.payload, "type": shown.event.type})
        return state

    # --- plumbing ---------------------------------------------------------------------------------------------

    @property
    def _handle(self) -> Any:
        return self.controller.keel.temporal.get_workflow_handle(self.id)

    async def _update(
        self, name: str, arg: Any, result_type: type, *, wait: timedelta | None = None, update_id: str | None = None
    ) -> Any:
        for attaching in list(self._attaching):  # `subscribe` then `send_message`: the listener sees it all
            await attaching.wait()
        try:
            args = [] if arg is None else [arg]
            return await self._handle.execute_update(
                name, *args, id=update_id, result_type=result_type, rpc_timeout=wait or timedelta(seconds=WAIT_SECONDS)
            )
        except WorkflowUpdateFailedError as err:
            raise _refused(err) from None
        except RPCError as err:
            raise _unanswered(self.id, err) from None


class _Threads:
    def __init__(self, session: Session) -> None:
        self._s = session

    async def get_id(self) -> str | None:
        return (await self._s.snapshot()).thread_id

    async def create(self, title: str | None = None) -> dict[str, Any]:
        return (await self._change("create", title=title)).thread or {}

    async def switch(self, thread_id: str) -> None:
        await self._change("switch", thread_id=thread_id)

    async def rename(self, title: str, thread_id: str | None = None) -> None:
        await self._change("rename", thread_id=thread_id, title=title)

    async def clone(self, source_thread_id: str | None = None, title: str | None = None) -> dict[str, Any]:
        return (await self._change("clone", source_thread_id=source_thread_id, title=title)).thread or {}

    async def delete(self, thread_id: str) -> None:
        await self._change("delete", thread_id=thread_id)

    async def list(self) -> list[dict[str, Any]]:
        """The resource's threads (newest first), from storage; a forked subagent's left out."""
        from keel.storage.threads import FORKED_SUBAGENT

        threads, _ = await self._s._storage.list_threads(self._s.resource_id)
        return [t.controller_json() for t in threads if not (t.metadata or {}).get(FORKED_SUBAGENT)]

    async def list_messages(
        self, thread_id: str | None = None, limit: int | None = None
    ) -> builtins.list[dict[str, Any]]:
        """A thread's messages (the current one's by default), oldest first; the newest `limit`."""
        target = thread_id or await self.get_id()
        if target is None:
            return []
        thread = await self._s._storage.get_thread(target)
        if thread is None or thread.resource_id != self._s.resource_id:
            raise SessionError(f"Thread not found: {target}", "ThreadNotFound")
        messages, _ = await self._s._storage.list_messages(target)
        if limit is not None:
            messages = messages[-limit:]
        return [m.model_dump(mode="json", by_alias=True) for m in messages]

    async def _change(self, op: str, **fields: Any) -> SessionThreadResult:
        from keel.workflows.session_contracts import SessionThreadResult, ThreadChange

        change = ThreadChange.model_validate({"op": op, **fields})
        result: SessionThreadResult = await self._s._update(names.SESSION_THREAD_UPDATE, change, SessionThreadResult)
        return result


class _Mode:
    def __init__(self, session: Session) -> None:
        self._s = session

    async def get(self) -> str:
        return (await self._s.snapshot()).mode_id

    async def switch(self, mode_id: str) -> None:
        from keel.workflows.session_contracts import SessionSnapshot, SwitchMode

        await self._s._update(names.SESSION_MODE_UPDATE, SwitchMode(mode_id=mode_id), SessionSnapshot)

    async def resolve(self) -> dict[str, Any]:
        """The current mode's definition: id, name, instructions, default, tools, allowlist, transition, default
        model, metadata (only the id when this process does not have the controller's definition)."""
        mode_id = (await self._s.snapshot()).mode_id
        definition = self._s.controller.definition
        mode = next((m for m in definition.modes if m.id == mode_id), None) if definition else None
        if mode is None:
            return {"id": mode_id}
        tools = mode.tools if mode.tools is not None else mode.additional_tools
        return {
            "id": mode.id,
            "name": mode.name or mode.id,
            "instructions": mode.instructions,
            "default": mode.default,
            "tools": [t.id for t in tools] if tools is not None else None,
            "availableTools": list(mode.available_tools) if mode.available_tools is not None else None,
            "transitionsTo": mode.transitions_to,
            "defaultModelId": mode.default_model_id,
            "metadata": dict(mode.metadata or {}),
        }


class _Model:
    def __init__(self, session: Session) -> None:
        self._s = session

    async def get(self) -> str:
        return (await self._s.snapshot()).model_id or ""

    async def switch(
        self, model_id: str, *, scope: Literal["thread", "global"] = "thread", mode_id: str | None = None
    ) -> None:
        from keel.workflows.session_contracts import SessionSnapshot, SwitchModel

        request = SwitchModel(model_id=model_id, scope=scope, mode_id=mode_id)
        await self._s._update(names.SESSION_MODEL_UPDATE, request, SessionSnapshot)


class _State:
    def __init__(self, session: Session) -> None:
        self._s = session

    async def get(self) -> dict[str, Any]:
        return dict((await self._s.snapshot()).state)

    async def set(self, updates: dict[str, Any]) -> dict[str, Any]:
        from keel.workflows.session_contracts import SessionSnapshot, SetState

        snapshot: SessionSnapshot = await self._s._update(
            names.SESSION_STATE_UPDATE, SetState(updates=updates), SessionSnapshot
        )
        return dict(snapshot.state)


class _Permissions:
    def __init__(self, session: Session) -> None:
        self._s = session

    async def get(self) -> dict[str, Any]:
        rules = (await self._s.snapshot()).permissions
        return {"categories": dict(rules.categories), "tools": dict(rules.tools)}

    async def grants(self) -> dict[str, list[str]]:
        rules = (await self._s.snapshot()).permissions
        return {"categories": list(rules.granted_categories), "tools": list(rules.granted_tools)}

    async def set_for_category(self, category: str, policy: str) -> None:
        from keel.workflows.session_contracts import SessionSnapshot, SetPermission

        request = SetPermission.model_validate({"category": category, "policy": policy})
        await self._s._update(names.SESSION_PERMISSION_UPDATE, request, SessionSnapshot)

    async def set_for_tool(self, tool_name: str, policy: str) -> None:
        from keel.workflows.session_contracts import SessionSnapshot, SetPermission

        request = SetPermission.model_validate({"toolName": tool_name, "policy": policy})
        await self._s._update(names.SESSION_PERMISSION_UPDATE, request, SessionSnapshot)


class _Subagents:
    def __init__(self, session: Session) -> None:
        self.model = _SubagentModel(session)


class _SubagentModel:
    def __init__(self, session: Session) -> None:
        self._s = session

    async def get(self, agent_type: str | None = None) -> str | None:
        models = (await self._s.snapshot()).subagent_models
        if agent_type is not None and f"subagentModelId_{agent_type}" in models:
            return models[f"subagentModelId_{agent_type}"]
        return models.get("subagentModelId")

    async def set(self, model_id: str, agent_type: str | None = None) -> None:
        from keel.workflows.session_contracts import SessionSnapshot, SetSubagentModel

        request = SetSubagentModel(model_id=model_id, agent_type=agent_type)
        await self._s._update(names.SESSION_SUBAGENT_MODEL_UPDATE, request, SessionSnapshot)


class _DisplayStateReader:
    def __init__(self, session: Session) -> None:
        self._s = session

    async def get(self) -> dict[str, Any]:
        """The display state now: the session's log folded from its last snapshot (pending approvals and
        suspensions included, after any restart)."""
        snapshot = await self._s.snapshot()
        end = await self._s._storage.log_end(self._s.id)
        state = await self._s._fold_until(end, snapshot.snapshot_offset)
        folded = state.snapshot()
        folded["isRunning"] = snapshot.running
        return folded


class _Goal:
    def __init__(self, session: Session) -> None:
        self._s = session

    async def get(self) -> dict[str, Any] | None:
        goal = (await self._s.snapshot()).goal
        return goal.model_dump(mode="json", by_alias=True) if goal else None

    async def set(self, objective: str, *, judge_model_id: str | None = None, max_runs: int | None = None) -> None:
        from keel.workflows.session_contracts import SessionSnapshot, SetGoal

        request = SetGoal(objective=objective, judge_model_id=judge_model_id, max_runs=max_runs)
        await self._s._update(names.SESSION_GOAL_UPDATE, request, SessionSnapshot)

    async def update(
        self, *, judge_model_id: str | None = None, max_runs: int | None = None, status: str | None = None
    ) -> None:
        from keel.workflows.session_contracts import SessionSnapshot, SetGoal

        request = SetGoal.model_validate({"judgeModelId": judge_model_id, "maxRuns": max_runs, "status": status})
        await self._s._update(names.SESSION_GOAL_UPDATE, request, SessionSnapshot)

    async def clear(self) -> None:
        from keel.workflows.session_contracts import SessionSnapshot, SetGoal

        await self._s._update(names.SESSION_GOAL_UPDATE, SetGoal(clear=True), SessionSnapshot)


def _unanswered(session_id: str, err: RPCError) -> KeelClientError:
    if err.status == RPCStatusCode.NOT_FOUND:
        return SessionNotFound(f"Session {session_id}: {err.message}")
    if "limit on the total number of distinct updates" in err.message:
        return SessionError(
            f"Session {session_id} takes no more changes until its turn ends: it has reached Temporal's limit on "
            "updates per execution (history.maxTotalUpdates), and continues as new between turns. The turn's "
            "calls can still be decided and resumed, and the turn aborted.",
            UPDATE_LIMIT,
        )
    return KeelClientError(f"Session {session_id}: {err.message}")


UPDATE_LIMIT = "UpdateLimit"
"""`SessionError.kind` of a change refused during a turn because the session's execution took Temporal's most
updates, or because its history nears Temporal's limit (the session's own refusal): the session continues as new
after its turn. Until then an approval, a decline or a resume goes to the run's own update when the session
refuses it too, an abort cancels the turn, `settled` asks the session's `settled_now` query, and `create_session`
opens the session without asking it (unless it asked for another thread)."""


SESSION_SIDE_TOOLS = frozenset({"submit_plan", "request_access"})
"""Built-in tools whose answer the session applies (a mode switch, a grant): not resumed on the run alone."""
CONTINUING = "SessionContinuing"
"""The session's failure type for a `settled` that waited as the session continued as new (`keel.workflows.
agent_session.CONTINUING`; not imported from there: this module loads no workflow code)."""
SETTLED_WAIT = timedelta(hours=1)
"""How long `settled` waits, asking again while the session continues as new (it does once the changes in flight
have finished: milliseconds, unless storage is down and they retry)."""
ENDED_BEFORE_ANSWERING = "AcceptedUpdateCompletedWorkflow"
"""Temporal's failure type for an accepted update whose execution ended first (closed, or reset)."""


@contextlib.contextmanager
def _as_session_error() -> Iterator[None]:
    """A run's refusal of a decision sent to it (`ToolCallRejected`) as the session's would be."""
    try:
        yield
    except ToolCallRejected as err:
        message = str(err)
        kind = "AlreadyDecided" if "already" in message else "InvalidResumeData" if "schema" in message else None
        raise SessionError(message, kind or "UnknownToolCall") from None
    except RunClosed as err:
        raise SessionError(f"No tool call waits in run {err.run_id!r}: it has ended", "UnknownToolCall") from None


def _refused(err: WorkflowUpdateFailedError) -> SessionError:
    cause = err.cause
    message = str(getattr(cause, "message", None) or cause or err)
    return SessionError(message, getattr(cause, "type", None))


__all__ = ["ControllerClient", "Session", "SessionError", "SessionNotFound"]
