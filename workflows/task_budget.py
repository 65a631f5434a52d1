"""What one workflow task may send the server, the rule `AgentRun` and `DefinitionRun` share.

Temporal refuses a workflow task's completion over 4 MiB (the SDK then fails the task with `GrpcMessageTooLarge`
and the server terminates the run), and every activity or child run the task starts carries its input in it, up
to the 256 KiB from which the payload store keeps a payload and a reference travels instead. So a step that
starts many at once (a wide `foreach`, a model step's parallel tool calls) starts those whose inputs fit in
`TASK_INPUT_BYTES`; the others wait for a later workflow task, which the ones started bring when they end (the
first start of a task always fits, so there is always one).
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel
from temporalio import workflow

from keel.protocol.payloads import PAYLOAD_SIZE_THRESHOLD, json_bytes

TASK_INPUT_BYTES = 2 * 1024 * 1024
"""What the inputs one workflow task starts may add up to, as JSON. The rest of the 4 MiB is for the local steps'
markers and the task's other commands. An agent run bounds its markers to 1 MiB a task; a definition run chains 4
local steps before an activity, but restarts that count when an activity ends, so a task that several activities'
ends woke can record more, each a reference when its result is 2 KiB or more (`LOCAL_STEP_RESULT_THRESHOLD`)."""
REFERENCE_BYTES = 1024
"""What a reference to a stored payload counts for."""


def input_bytes(value: Any) -> int:
    """What `value`, an activity's or child run's input (a contract model, or a JSON value), adds to its workflow
    task's completion: its UTF-8 JSON, as the data converter writes it."""
    if isinstance(value, BaseModel):
        size = len(value.model_dump_json().encode())  # as pydantic's `to_json` (the converter's) writes it
    else:
        size = json_bytes(value)
    return REFERENCE_BYTES if size >= PAYLOAD_SIZE_THRESHOLD else size


def _history_past(length: int) -> bool:
    """Whether the workflow task now running is a later one than the one that saw `length` events."""
    return workflow.info().get_current_history_length() != length


class TaskBudget:
    """The inputs started in the current workflow task (told apart by the history's length, which only a new
    task changes, live and in replay alike)."""

    def __init__(self) -> None:
        self._task_at = -1
        self._spent = 0

    def _now(self) -> int:
        if (at := workflow.info().get_current_history_length()) != self._task_at:
            self._task_at, self._spent = at, 0
        return at

    def fits(self, size: int) -> bool:
        """Whether an input of `size` bytes fits in the current task (the first always does)."""
        self._now()
        return self._spent == 0 or self._spent + size <= TASK_INPUT_BYTES

    def spend(self, size: int) -> None:
        self._now()
        self._spent += size

    async def next_task(self) -> None:
        """Wait for a later workflow task than the current one."""
        await workflow.wait_condition(functools.partial(_history_past, self._now()))

    async def room_for(self, size: int) -> None:
        """Wait until an input of `size` bytes fits, and count it."""
        while not self.fits(size):
            await self.next_task()
        self.spend(size)
