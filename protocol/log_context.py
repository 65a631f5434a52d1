"""The run a log record belongs to: the fields Keel's code binds while it works for a run (the run, its agent, the
step, the tool call), read back by the log handler that keeps the worker's logs (`keel.client.log_handler`).

    with log_context.bound(run_id=input.run_id, agent_id=input.agent_id, step=input.step):
        log.info("model answered")   # this record, and every record logged below, in any module, carries them

A context variable: an asyncio task (an activity, a workflow's run) and the tasks it starts see what it bound, no
other task does, and nothing here does I/O, so workflow code may bind too (`bind`, for the rest of its task). Reading
it costs a dictionary lookup; with no log handler that asks, nobody reads it.

Nothing here imports Temporal or OpenTelemetry: what the worker adds from Temporal's activity and workflow info and
from the current span is the log handler's part.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

FIELDS = ("run_id", "agent_id", "step", "thread_id", "tool_name", "tool_call_id")
"""What a run's records carry, when known (`tool_*` inside a tool call)."""

_EMPTY: Mapping[str, Any] = {}
_current: ContextVar[Mapping[str, Any]] = ContextVar("keel_log_context", default=_EMPTY)


def current() -> Mapping[str, Any]:
    """The fields bound where the caller runs (empty outside any run)."""
    return _current.get()


@contextlib.contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Inside the block, the fields given (None ones left out) are bound, over what was bound before."""
    token = _current.set(_merged(fields))
    try:
        yield
    finally:
        _current.reset(token)


def bind(**fields: Any) -> None:
    """Bind the fields for the rest of the current task (a workflow's run, which ends with its task)."""
    _current.set(_merged(fields))


def _merged(fields: Mapping[str, Any]) -> Mapping[str, Any]:
    given = {key: value for key, value in fields.items() if value is not None and value != ""}
    return {**_current.get(), **given}


__all__ = ["FIELDS", "bind", "bound", "current"]
