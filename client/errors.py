"""Errors the client raises, each with a message a user can act on: one root for everything in `keel.client`.

Error tree::

    KeelClientError
     ├── CliError                (keel.client.cli: a command's input or situation)
     ├── DevServerError          (keel.client.devserver: the local server could not start, be found or stop)
     ├── RunNotFound
     ├── RunClosed
     ├── RunFailed               (`status`: failed, terminated, canceled or timed_out)
     ├── InvalidRunInput
     ├── InvalidId               (an id no visibility query can hold: a NUL character)
     ├── RunIdInUse
     ├── NoWorker
     ├── TemporalUnavailable     (keel.client.outages: the server, or the way to it, away)
     ├── QueueInUse
     ├── ResetRefused            (keel.client.reset: no such step, a step in flight, a thread that went on)
     ├── InvalidResumeData       (resume data that fails the suspended step's resume schema)
     ├── ToolCallRejected
     └── ToolFailed              (a tool run by `execute_tool` answered with an error)
"""

from __future__ import annotations


class KeelClientError(Exception):
    """Base of every client error."""


class RunNotFound(KeelClientError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"Run {run_id!r} not found")
        self.run_id = run_id


class RunClosed(KeelClientError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"Run {run_id!r} has already finished")
        self.run_id = run_id


class RunFailed(KeelClientError):
    """The run ended without a result: it failed, or was terminated, canceled or timed out (`status`)."""

    def __init__(self, run_id: str, message: str, *, status: str = "failed") -> None:
        verb = {"failed": "failed", "terminated": "was terminated", "canceled": "was canceled"}.get(status, status)
        super().__init__(f"Run {run_id!r} {verb}: {message}")
        self.run_id = run_id
        self.status = status


class InvalidRunInput(KeelClientError):
    def __init__(self, details: str) -> None:
        super().__init__(f"Invalid run input: {details}")
        self.details = details


class InvalidId(KeelClientError):
    """An id that Temporal's visibility queries cannot hold (a NUL character): nothing can be listed by it."""


class CallIdInUse(KeelClientError):
    """A tool call id already naming another call (other arguments, or another agent or tool): a call id names
    one call, so the second is refused rather than approved as, or answered with, the first."""

    def __init__(self, call_id: str, workflow_id: str, what: str) -> None:
        super().__init__(
            f"Call id {call_id!r} already names another call ({what}; its execution is {workflow_id}): "
            "give this call an id of its own"
        )
        self.call_id = call_id
        self.workflow_id = workflow_id


class RunIdInUse(KeelClientError):
    """A run id already used: run ids are never reused (each names one run's events, messages and history)."""

    def __init__(self, run_id: str, *, hint: str | None = "pass thread_id to continue that run's conversation") -> None:
        said = f" ({hint})" if hint else ""
        super().__init__(f"Run id {run_id!r} is already used by another run: start with a new id{said}")
        self.run_id = run_id


class InvalidResumeData(KeelClientError):
    """Resume data (a resume's, a time travel's) that does not match the suspended step's resume schema: the
    caller's input (HTTP 422, as a session's); the run stays as it was."""


class NoWorker(KeelClientError):
    """No worker polls the task queue (or none answered in time): queries and updates cannot be answered."""

    def __init__(
        self, task_queue: str, *, signal_hint: str | None = None, answered_within: float | None = None
    ) -> None:
        if answered_within is None:
            message = f"No worker is polling task queue {task_queue!r}"
        else:
            message = f"No worker on task queue {task_queue!r} answered within {answered_within:g} s"
        message += f"; start one with `keel worker --app <module:attr> --task-queue {task_queue}` (or `keel dev`)"
        if signal_hint is not None:
            message += (
                f", or send the decision as a signal, applied when a worker runs: keel approve {signal_hint} --signal"
            )
        super().__init__(message)
        self.task_queue = task_queue


class RunNotInStorage(KeelClientError):
    """Temporal has the run, but the storage read has none of its events: the run's worker wrote another."""

    def __init__(self, run_id: str, storage_url: str) -> None:
        super().__init__(
            f"Run {run_id!r} is in Temporal, but not in the Keel storage at {storage_url}: its worker keeps it in "
            "another (set KEEL_STORAGE_URL or KEEL_DATA_DIR to the worker's)"
        )
        self.run_id = run_id


class QueueInUse(KeelClientError):
    """Other workers poll the task queue: a second app there would take half of the first's runs."""

    def __init__(self, task_queue: str, identities: list[str]) -> None:
        super().__init__(
            f"Task queue {task_queue!r} is already polled by {', '.join(identities)}: pick another with "
            "--task-queue (and the same for clients: KEEL_TASK_QUEUE), or pass --join to add a worker for the "
            "same app"
        )
        self.task_queue = task_queue


class ToolCallRejected(KeelClientError):
    """The run has no pending tool call with this id, or it was already decided."""

    def __init__(self, run_id: str, tool_call_id: str, reason: str) -> None:
        super().__init__(f"Cannot decide tool call {tool_call_id!r} of run {run_id!r}: {reason}")
        self.run_id = run_id
        self.tool_call_id = tool_call_id


class MessageRefused(KeelClientError):
    """A message delivered into a run that the run did not take (its unread messages are at their bound)."""

    def __init__(self, run_id: str, message_id: str, reason: str) -> None:
        super().__init__(f"Run {run_id!r} did not take message {message_id!r}: {reason}")
        self.run_id = run_id
        self.message_id = message_id


class ToolFailed(KeelClientError):
    """A tool run outside a run (`KeelClient.execute_tool`) answered with an error, or could not run."""

    def __init__(self, tool_name: str, message: str) -> None:
        super().__init__(f"Tool {tool_name!r}: {message}")
        self.tool_name = tool_name
