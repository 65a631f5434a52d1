"""What an agent run tells the worker's logs and metrics from workflow code: that it started and how it ended, the
tool calls it waits on and the decisions, each once, never while the workflow replays its history.

The run and its agent are bound to the run's log context (`keel.protocol.log_context`) for the rest of its task, so
every record its workflow code logs carries them. The records go through Temporal's workflow logger adapter on the
`keel.workflows` logger: it adds the workflow's details and drops what is logged during replay. The counts are
`keel.protocol.metrics`'s (nothing when metrics are off); the approvals waiting are counted while the run waits in
this worker's cache (an eviction ends the wait here: it is counted again where the run next waits).

With tracing on, each decided approval is a span of the run's trace (`approval {tool}`, from the wait's start to
the decision's arrival, with the decision and whether a signal or an update brought it), handed to the worker's
tracing interceptor when the decision arrives (workflow code makes no span itself: `keel.protocol.tracing.
WorkflowSpan`); never while the workflow replays, so each wait is one span, and no command changes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal, NamedTuple, Protocol

from temporalio import workflow

from keel.protocol import log_context, metrics, tracing
from keel.protocol.metrics import RunOutcome

log = workflow.LoggerAdapter(logging.getLogger("keel.workflows"), None)


class _Call(Protocol):
    @property
    def tool_call_id(self) -> str: ...
    @property
    def tool_name(self) -> str: ...


class _Decision(Protocol):
    @property
    def approved(self) -> bool: ...
    @property
    def reason(self) -> str | None: ...


Channel = Literal["signal", "update"]


class Arrival(NamedTuple):
    """How and when (workflow time) a decision reached the run."""

    channel: Channel
    at_ns: int


def _agent() -> str:
    return str(log_context.current().get("agent_id", ""))


def started(run_id: str, agent_id: str, thread_id: str, *, continued: bool) -> None:
    """The run's first workflow task (or the first after a continue-as-new, which counts nothing again)."""
    log_context.bind(run_id=run_id, agent_id=agent_id, thread_id=thread_id)
    if continued or workflow.unsafe.is_replaying_history_events():
        return
    metrics.run_started(agent_id)
    log.info("Run started: agent %s, thread %s", agent_id, thread_id)


def ended(outcome: RunOutcome, error: BaseException | None = None) -> None:
    """The run ends (not for a continue-as-new, nor an eviction, which Temporal marks as replaying)."""
    if workflow.unsafe.is_replaying_history_events():
        return
    agent = _agent()
    metrics.run_ended(agent, outcome)
    if outcome == "completed":
        log.info("Run completed")
    elif outcome == "canceled":
        log.info("Run canceled")
    else:
        log.error("Run failed: %s", error)


def _span_key(call: _Call) -> str:
    info = workflow.info()
    return f"{info.workflow_id}/{info.run_id}/approval/{call.tool_call_id}"


@contextlib.contextmanager
def waiting(calls: Sequence[_Call], what: str = "approval") -> Iterator[None]:
    """Around the wait for decisions (or resume data) on `calls`."""
    names = ", ".join(f"{c.tool_name} ({c.tool_call_id})" for c in calls)
    log.info("Waiting for %s of %s", what, names)
    start = workflow.extern_functions().get(tracing.WORKFLOW_SPAN_START_EXTERN) if what == "approval" else None
    if start is not None and not workflow.unsafe.is_replaying():
        for call in calls:
            start(_span_key(call))
    with metrics.approvals_waiting(_agent(), len(calls)) if what == "approval" else contextlib.nullcontext():
        yield


def decided(
    calls: Sequence[_Call],
    decisions: Mapping[str, _Decision],
    *,
    step: int,
    waited_from_ns: int,
    arrivals: Mapping[str, Arrival],
) -> None:
    """The decisions on `calls` arrived (`arrivals`: how and when each did) after a wait from `waited_from_ns`."""
    for call in calls:
        decision = decisions.get(call.tool_call_id)
        if decision is not None:
            verdict = "approved" if decision.approved else "declined"
            log.info("Tool call %s (%s) %s", call.tool_name, call.tool_call_id, verdict)
    if workflow.unsafe.is_replaying():
        return
    emit = workflow.extern_functions().get(tracing.WORKFLOW_SPAN_EXTERN)
    if emit is None:  # tracing is off
        return
    info = workflow.info()
    for call in calls:
        decision = decisions.get(call.tool_call_id)
        if decision is None:
            continue
        arrival = arrivals.get(call.tool_call_id)
        attributes: dict[str, str | int | bool] = {
            "keel.approval.decision": "approved" if decision.approved else "declined",
            "keel.approval.channel": arrival.channel if arrival is not None else "unknown",
            "keel.tool.name": call.tool_name,
            "keel.tool.call.id": call.tool_call_id,
            "keel.run.id": info.workflow_id,
            "keel.step": step,
            "temporalWorkflowID": info.workflow_id,
            "temporalRunID": info.run_id,
        }
        if agent := _agent():
            attributes["keel.agent.id"] = agent
        ended = max(arrival.at_ns if arrival is not None else workflow.time_ns(), waited_from_ns)
        content = {"keel.approval.reason": decision.reason} if decision.reason else {}
        name = f"approval {call.tool_name}"
        emit(tracing.WorkflowSpan(_span_key(call), name, waited_from_ns, ended, info.headers, attributes, content))


__all__ = ["Arrival", "Channel", "decided", "ended", "started", "waiting"]
