"""The run-steps domain: what each step of a run has already done.

A step of the agent loop may be executed again from scratch: a local activity lost with its workflow task (a
killed worker) runs again at attempt 1, as if for the first time. It must not ask the model again (a real model
answers differently, and the tools of the first answer may have run), must not re-run a tool whose result it
stored, and must tell a tool that may have run before that this is a later attempt. So a step reads, before it
starts: the model answer it stored (written in the same transaction as its assistant message), the tool
messages it stored, and how often each other tool was started (counted here, before the tool runs).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from keel.storage.threads import StoredMessage


@dataclass(frozen=True)
class StepAnswer:
    """A model step's answer (its result, as JSON), stored with its assistant message `message_id`."""

    message_id: str
    answer: dict[str, Any]


@dataclass(frozen=True)
class StepRecord:
    """What earlier executions of a step left, as `begin_step` found it."""

    answer: dict[str, Any] | None = None
    """The model answer stored under the step's message id, if an earlier execution got that far."""
    results: dict[str, StoredMessage] = field(default_factory=dict)
    """Tool messages already stored, by id: their tools are not run again."""
    attempts: dict[str, int] = field(default_factory=dict)
    """For every other tool message id: the attempt that starts now (1 the first time; more after a lost one)."""


class StepStore(abc.ABC):
    @abc.abstractmethod
    async def begin_step(
        self, run_id: str, *, answer_id: str | None = None, tool_ids: Sequence[str] = ()
    ) -> StepRecord:
        """In one transaction: the answer stored under `answer_id`, the tool messages stored under `tool_ids`,
        and, for each of `tool_ids` not stored, one more start counted (its attempt number). Reads only when
        `tool_ids` is empty."""

    @abc.abstractmethod
    async def forget_steps(self, run_id: str, message_ids: Sequence[str]) -> int:
        """In one transaction: delete the messages `message_ids` and what `begin_step` keeps of the run under
        them (a stored answer, a tool's start count). A run reset to an earlier step (`keel reset`) then runs
        those steps again for real, instead of returning the answers and tool results they stored. Returns how
        many of the messages existed. Idempotent."""
