"""What an agent run tells the worker's logs and metrics from workflow code: that it started and how it ended, the
tool calls it waits on and the decisions, each once, never while the workflow replays its history.

The run and its agent are bound to the run's log context (`keel.protocol.log_context`) for the rest of its task, so
every record its workflow code logs carries them. The records go through Temporal's workflow logger adapter on the
`keel.workflows` logger: it adds the workflow's details and drops what is logged during replay. The counts are
`keel.protocol.metrics`'s (nothing when metrics are off); the approvals waiting are counted while the run waits in
this worker's cache (an eviction ends the wait here: it is counted again where the run next waits).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from temporalio import workflow

from keel.protocol import log_context, metrics
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


@contextlib.contextmanager
def waiting(calls: Sequence[_Call], what: str = "approval") -> Iterator[None]:
    """Around the wait for decisions (or resume data) on `calls`."""
    names = ", ".join(f"{c.tool_name} ({c.tool_call_id})" for c in calls)
    log.info("Waiting for %s of %s", what, names)
    with metrics.approvals_waiting(_agent(), len(calls)) if what == "approval" else contextlib.nullcontext():
        yield


def decided(calls: Sequence[_Call], decisions: Mapping[str, _Decision]) -> None:
    for call in calls:
        decision = decisions.get(call.tool_call_id)
        if decision is not None:
            verdict = "approved" if decision.approved else "declined"
            log.info("Tool call %s (%s) %s", call.tool_name, call.tool_call_id, verdict)


__all__ = ["decided", "ended", "started", "waiting"]
