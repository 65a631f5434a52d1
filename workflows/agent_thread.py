"""`AgentThread`: the one place that decides what happens to a user message sent to an agent's thread, so two
clients writing to the same thread never race (Mastra's send-message and queue-message).

One entity per agent and thread, id `keel-thread-<agentId>-<threadId>`, started on demand by update-with-start
of `send`; messages are handled one at a time in arrival order:

- a run of the thread is active (one this entity started, or `activeRunId` the caller found): `deliver` signals
  `user_message` into it (its next model step reads the message), `queue` keeps it for a run started when the
  active one ends (every queued message in it), `persist` stores it in the thread, `discard` drops it;
- the thread is idle: `wake` starts an `AgentRun` with it (a child that outlives the entity), `persist`, `discard`.

The entity ends after `IDLE` without work, and continues as new every `MAX_MESSAGES` messages.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError, ChildWorkflowError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

from keel.protocol import InputMessage, names
from keel.workflows.contracts import (
    AgentRunInput,
    AgentRunResult,
    AgentThreadInput,
    DeliveredMessage,
    RunClosedInput,
    ThreadAppendInput,
    ThreadMessage,
    ThreadSendResult,
)

IDLE = timedelta(minutes=10)
MAX_MESSAGES = 500
MAX_QUEUED = 100
STORAGE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


thread_workflow_id = names.thread_workflow_id


@workflow.defn(name=names.AGENT_THREAD, sandboxed=False)
class AgentThread:
    def __init__(self) -> None:
        self._input: AgentThreadInput | None = None
        self._lock = asyncio.Lock()
        self._child: ChildWorkflowHandle[None, AgentRunResult] | None = None
        self._active: str | None = None
        self._queued: list[ThreadMessage] = []
        self._waiting_on: str | None = None
        self._handled = 0

    @workflow.update(name=names.SEND_MESSAGE_UPDATE)
    async def send(self, message: ThreadMessage) -> ThreadSendResult:
        async with self._lock:  # one message at a time, in the order they arrived
            await workflow.wait_condition(lambda: self._input is not None)
            self._handled += 1
            return await self._handle(message)

    @send.validator
    def _validate(self, message: ThreadMessage) -> None:
        if message.if_active == "queue" and len(self._queued) >= MAX_QUEUED:
            raise ApplicationError(f"{MAX_QUEUED} messages are already queued on this thread", non_retryable=True)

    @workflow.query(name="queued")
    def queued(self) -> list[str]:
        return [m.message_id for m in self._queued]

    @workflow.run
    async def run(self, input: AgentThreadInput) -> None:
        self._input = input
        self._queued = list(input.queued)
        self._waiting_on = input.waiting_on
        while True:
            if self._child is not None:
                try:
                    await self._child
                except ChildWorkflowError:
                    pass  # a failed run ends its turn; the thread goes on
                self._child, self._active = None, None
                await self._start_queued()
                continue
            if self._waiting_on is not None:  # queued behind a run this entity did not start
                await workflow.execute_activity(
                    names.WAIT_RUN_CLOSED,
                    RunClosedInput(run_id=self._waiting_on),
                    start_to_close_timeout=timedelta(days=7),
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=STORAGE_RETRY,
                )
                self._waiting_on = None
                await self._start_queued()
                continue
            if self._handled >= MAX_MESSAGES or workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if self._child is None and self._waiting_on is None:
                    workflow.continue_as_new(input.model_copy(update={"queued": self._queued, "waiting_on": None}))
            try:
                await workflow.wait_condition(
                    lambda: self._child is not None or self._waiting_on is not None, timeout=IDLE
                )
            except TimeoutError:
                await workflow.wait_condition(workflow.all_handlers_finished)
                if self._child is None and self._waiting_on is None and not self._queued:
                    return

    async def _handle(self, m: ThreadMessage) -> ThreadSendResult:
        active = self._active or m.active_run_id
        if active is not None:
            if m.if_active == "discard":
                return ThreadSendResult(accepted=False, run_id=active, outcome="discarded")
            if m.if_active == "persist":
                await self._persist(m)
                return ThreadSendResult(accepted=True, run_id=active, outcome="persisted")
            if m.if_active == "queue":
                self._queued.append(m)
                if self._active is None:
                    self._waiting_on = active
                return ThreadSendResult(accepted=True, run_id=active, outcome="queued")
            try:
                await workflow.get_external_workflow_handle(active).signal(
                    names.USER_MESSAGE_SIGNAL, DeliveredMessage(id=m.message_id, content=m.content)
                )
                return ThreadSendResult(accepted=True, run_id=active, outcome="delivered")
            except ApplicationError:
                pass  # it ended meanwhile: the thread is idle
        if m.if_idle == "discard":
            return ThreadSendResult(accepted=False, outcome="discarded")
        if m.if_idle == "persist":
            await self._persist(m)
            return ThreadSendResult(accepted=True, outcome="persisted")
        return ThreadSendResult(accepted=True, run_id=await self._wake([m]), outcome="woke")

    async def _start_queued(self) -> None:
        if self._queued:
            queued, self._queued = self._queued, []
            await self._wake(queued)

    async def _wake(self, messages: list[ThreadMessage]) -> str:
        assert self._input is not None
        run_id = f"run-{workflow.uuid4()}"
        last = messages[-1]
        self._child = await workflow.start_child_workflow(
            names.AGENT_RUN,
            AgentRunInput(
                agent_id=self._input.agent_id,
                messages=[InputMessage(role="user", content=m.content) for m in messages],
                thread_id=self._input.thread_id,
                resource_id=self._input.resource_id,
                max_steps=last.max_steps,
                request_context=last.request_context,
            ),
            id=run_id,
            result_type=AgentRunResult,
            parent_close_policy=ParentClosePolicy.ABANDON,
            static_summary=f"{self._input.agent_id} on thread {self._input.thread_id}",
        )
        self._active = run_id
        return run_id

    async def _persist(self, m: ThreadMessage) -> None:
        assert self._input is not None
        await workflow.execute_activity(
            names.APPEND_THREAD_MESSAGE,
            ThreadAppendInput(
                thread_id=self._input.thread_id,
                resource_id=self._input.resource_id,
                message_id=m.message_id,
                content=m.content,
            ),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=STORAGE_RETRY,
        )
