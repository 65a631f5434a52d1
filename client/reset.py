"""Time travel: run an agent run again from one of its steps (`keel reset RUN --to-step N`, and the HTTP route
`POST /api/agents/:agentId/time-travel?runId=RUN`, Mastra's workflow time-travel for an agent run).

Temporal's own reset does it: a new execution of the run (same workflow id, new execution id) replays the old
one's history up to the workflow task that scheduled step N, then runs from there; the old execution stays in
history (completed, or terminated by the reset if it was open), and the UI shows the reset on both.

Storage is rewound first, for two reasons. The thread must hold what it held before step N, or step N would read
a conversation that already contains its own future. And a step executed again returns the answer it stored
(`ModelSteps`: a re-executed local activity must not ask the model twice), and reuses the tool results it
stored: so a step that is to run again for real must find neither. `forget_steps` deletes both, for steps N and
later: their assistant and tool messages, what the run wrote to the thread after them, and their `run_steps`
rows. The workflow task Temporal runs again may also re-execute steps before N (all of a turn's local steps
can share one workflow task): those find their stored answers and tool results, and run nothing twice.

Signals and updates the old execution took after the reset point are applied to the new one again (Temporal's
default): an approval given then decides the same call again if the step asks for it again, a message delivered
then is delivered again. A step before continue-as-new is reset in the execution that ran it (the chain is
followed back), and the run's event log, append-only, gets the steps run again as later attempts of the same
sources (readers show each step's latest).

Runs in a state where a reset would race with what they are doing are refused (`ResetRefused`): an open run
whose step is in flight (reset it once it waits for approval or has ended, or cancel it first), and a run whose
thread later turns continued (the conversation after step N is no longer only this run's).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from keel.client.errors import KeelClientError, RunNotFound
from keel.client.temporal_reset import ResetRefused, describe_run, reset_to_task, task_completed_before
from keel.protocol import names
from keel.workflows.search_attributes import KEEL_AGENT_ID, KEEL_STATUS, KEEL_THREAD_ID

if TYPE_CHECKING:
    from keel.client.keel_client import KeelClient
    from keel.storage import Storage, StoredMessage

_STEP_SUMMARY = re.compile(r"(?:^|, then )model step (\d+)$")
"""The summary the loop gives the activity (or local activity marker) that begins step N: `model step N`, or
`<tools of step N-1>, then model step N` for a fused step (`AgentRun`)."""

_STEP_EVENTS = (EventType.EVENT_TYPE_MARKER_RECORDED, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)


@dataclass(frozen=True)
class RunReset:
    """What a reset did."""

    run_id: str
    step: int
    """The step the run goes on from (it and every later step run again)."""
    steps: int
    """The steps the run had taken."""
    base_execution: str
    """The execution reset: it stays in the run's history."""
    execution: str
    """The new execution, running from step `step`."""
    reset_event_id: int
    """The old execution's `WorkflowTaskCompleted` event the new one replays up to (that task runs again)."""
    forgotten: int
    """Messages of steps `step` and later deleted from the thread."""
    events_offset: int
    """Where the run's event log ended at the reset: the new execution's events follow it."""

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "step": self.step,
            "steps": self.steps,
            "baseExecutionId": self.base_execution,
            "executionId": self.execution,
            "resetEventId": self.reset_event_id,
            "forgottenMessages": self.forgotten,
            "eventsOffset": self.events_offset,
        }


@dataclass(frozen=True)
class _Found:
    execution: str
    reset_event_id: int
    steps: int


async def reset_run(
    keel: KeelClient,
    storage: Storage,
    run_id: str,
    step: int,
    *,
    agent_id: str | None = None,
    reason: str | None = None,
) -> RunReset:
    """Reset the run to just before step `step` (1-based): a new execution runs it and every later step again.

    Args:
        agent_id: when given, the run must be this agent's (`RunNotFound` otherwise).
        reason: shown in the Temporal UI with the reset.

    Raises:
        RunNotFound: no run (of `agent_id`) has this id.
        ResetRefused: no such step; a step of the run is in flight; the thread went on after the run.
    """
    if step < 1:
        raise ResetRefused(f"Cannot reset run {run_id!r} to step {step}: steps are numbered from 1")
    desc = await describe_run(keel, run_id)
    attributes = desc.typed_search_attributes
    if desc.workflow_type != names.AGENT_RUN:
        raise ResetRefused(f"{run_id!r} is a {desc.workflow_type} execution, not an agent run")
    if agent_id is not None and attributes.get(KEEL_AGENT_ID) != agent_id:
        raise RunNotFound(run_id)
    if desc.status == WorkflowExecutionStatus.RUNNING and attributes.get(KEEL_STATUS) != "suspended":
        raise ResetRefused(
            f"Run {run_id!r} is running a step: reset it once it has finished or waits for approval, or cancel it "
            f"first (keel cancel {run_id})"
        )
    found = await _find_step(keel, run_id, desc.run_id, step)
    thread_id = attributes.get(KEEL_THREAD_ID) or run_id
    offset = await storage.log_end(run_id)
    forget = await _forgotten(storage, run_id, thread_id, step)
    forgotten = await storage.forget_steps(run_id, forget)
    try:
        execution = await reset_to_task(
            keel.temporal,
            run_id,
            found.execution,
            found.reset_event_id,
            reason or f"keel reset {run_id} --to-step {step}",
        )
    except RPCError as err:
        raise KeelClientError(
            f"Temporal refused to reset run {run_id!r} ({err.message}); the thread was already rewound to before "
            f"step {step}: run the reset again"
        ) from None
    return RunReset(
        run_id=run_id,
        step=step,
        steps=found.steps,
        base_execution=found.execution,
        execution=execution,
        reset_event_id=found.reset_event_id,
        forgotten=forgotten,
        events_offset=offset,
    )


async def _find_step(keel: KeelClient, run_id: str, execution: str, step: int) -> _Found:
    """The execution whose history begins step `step` and the last workflow task completion before the event that
    begins it; back through continue-as-new when the step is older than the latest execution."""
    steps: int | None = None  # the run's last step: the highest of its latest execution
    while True:
        history = await keel.temporal.get_workflow_handle(run_id, run_id=execution).fetch_history()
        starts = await _step_starts(keel, history.events)
        if steps is None:
            steps = max(starts, default=0)
            if step > steps:
                raise ResetRefused(
                    f"Cannot reset run {run_id!r} to step {step}: it has taken {steps} step{'s' * (steps != 1)}"
                )
        if step in starts:
            return _Found(execution, task_completed_before(history.events, starts[step]), steps)
        started = history.events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            raise ResetRefused(f"Cannot reset run {run_id!r} to step {step}: its history does not show that step")
        execution = started.continued_execution_run_id


async def _step_starts(keel: KeelClient, events: Sequence[HistoryEvent]) -> dict[int, int]:
    """Step number -> the id of the first event of that step (its model step's marker or scheduled activity)."""
    starts: dict[int, int] = {}
    converter = keel.temporal.data_converter
    for event in events:
        if event.event_type not in _STEP_EVENTS or not event.user_metadata.HasField("summary"):
            continue
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            kind = event.activity_task_scheduled_event_attributes.activity_type.name
            if kind not in (names.MODEL_STEP, names.TOOLS_THEN_MODEL):
                continue
        [summary] = await converter.decode([event.user_metadata.summary])
        match = _STEP_SUMMARY.search(summary) if isinstance(summary, str) else None
        if match is not None:
            starts.setdefault(int(match.group(1)), event.event_id)
    return starts


async def _forgotten(storage: Storage, run_id: str, thread_id: str, step: int) -> list[str]:
    """The ids of what steps `step` and later wrote: their assistant messages (the keys of their stored answers),
    their tool messages (and tool start counts), and every message of the run after the first of them."""
    ids: list[str] = []
    for event in await storage.read_events(run_id):
        source = event.source or ""
        later = source.startswith("model:") and source[6:].isdigit() and int(source[6:]) >= step
        if later and event.type == "step-start" and isinstance(event.payload.get("messageId"), str):
            ids.append(event.payload["messageId"])
        elif later and event.type == "tool-call" and isinstance(event.payload.get("toolCallId"), str):
            ids.append(f"{run_id}-s{source[6:]}-{event.payload['toolCallId']}")
    keys = set(ids)
    messages, _ = await storage.list_messages(thread_id)
    cut = next((i for i, m in enumerate(messages) if m.id in keys), None)
    if cut is None:
        return list(dict.fromkeys(ids))
    after: list[StoredMessage] = messages[cut:]
    others = [m for m in after if m.run_id != run_id]
    if others:
        by = sorted({m.run_id or "no run" for m in others})
        raise ResetRefused(
            f"Cannot reset run {run_id!r} to step {step}: thread {thread_id!r} went on after it "
            f"({len(others)} later message{'s' * (len(others) != 1)}, of {', '.join(by)}); reset the thread's "
            "latest run instead"
        )
    return list(dict.fromkeys([*ids, *(m.id for m in after)]))


async def cmd_reset(args: argparse.Namespace) -> int:
    """`keel reset RUN --to-step N`: reset, print what happened, then follow the new execution (as `keel approve`
    does) unless `--no-follow` or `--json`."""
    from keel.client.cli import _follow_run, connect_client, open_store

    keel = await connect_client(args)
    storage = await open_store()
    try:
        reset = await reset_run(keel, storage, args.run_id, args.to_step, reason=args.reason)
        if args.json:
            print(json.dumps(reset.to_json(), indent=2))
            return 0
        later = f"steps {reset.step}-{reset.steps}" if reset.step < reset.steps else f"step {reset.step}"
        print(
            f"run {reset.run_id} reset to step {reset.step} of {reset.steps}: new execution {reset.execution} runs "
            f"{later} again (execution {reset.base_execution} stays in the run's history); "
            f"{reset.forgotten} message{'s' * (reset.forgotten != 1)} of those steps removed from the thread",
            flush=True,
        )
        if args.no_follow:
            print(f"follow it: keel events {reset.run_id} --offset {reset.events_offset} --follow")
            return 0
        return await _follow_run(keel, storage, reset.run_id, reset.events_offset, retries=False)
    finally:
        await storage.close()


__all__ = ["ResetRefused", "RunReset", "cmd_reset", "reset_run"]
