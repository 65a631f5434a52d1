"""Errors the client raises, each with a message a user can act on: one root for everything in `keel.client`.

Error tree::

    KeelClientError
     ├── CliError                (keel.client.cli: a command's input or situation)
     ├── DevServerError          (keel.client.devserver: the local server could not start, be found or stop)
     ├── RunNotFound
     ├── RunClosed
     ├── RunFailed
     ├── InvalidRunInput
     ├── RunIdInUse
     └── ToolCallRejected
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
    def __init__(self, run_id: str, message: str) -> None:
        super().__init__(f"Run {run_id!r} failed: {message}")
        self.run_id = run_id


class InvalidRunInput(KeelClientError):
    def __init__(self, details: str) -> None:
        super().__init__(f"Invalid run input: {details}")
        self.details = details


class RunIdInUse(KeelClientError):
    """A run id already used: run ids are never reused (each names one run's events, messages and history)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"Run id {run_id!r} is already used by another run: start with a new id (pass thread_id to continue "
            "that run's conversation)"
        )
        self.run_id = run_id


class ToolCallRejected(KeelClientError):
    """The run has no pending tool call with this id, or it was already decided."""

    def __init__(self, run_id: str, tool_call_id: str, reason: str) -> None:
        super().__init__(f"Cannot decide tool call {tool_call_id!r} of run {run_id!r}: {reason}")
        self.run_id = run_id
        self.tool_call_id = tool_call_id
