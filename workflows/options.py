"""Activity options for the agent loop, in one place.

Changing a field here changes how runs *already in flight* schedule their next activities; that is replay-safe
(options are not checked on replay) but say so in the commit when a field's meaning changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from temporalio.common import RetryPolicy

NON_RETRYABLE_TYPES = ["UnknownAgent", "ModelRequestError", "InvalidInput", "StorageConfigError"]


@dataclass(frozen=True)
class AgentActivityOptions:
    """Timeouts and retry policies of the agent loop's activities."""

    model_as_local_activity: bool = True
    """Run a model step of its own (the first step, and any step after tools that ran apart) as a local activity:
    its result is recorded (a marker) in the same workflow task that schedules what follows, saving a server
    round trip while the step stays durable."""

    fuse_tools_with_next_model_step: bool = True
    """Run a step's approved tool calls and the next model step as one regular activity when every tool is
    idempotent: the model reads the results in the same activity, so a step costs one server round trip. The
    activity stores each tool result before the model call, and a retry reuses the stored results."""

    model_start_to_close: timedelta = timedelta(minutes=5)
    """Upper bound of one model call attempt, streaming included."""

    model_retry: RetryPolicy = field(
        default_factory=lambda: RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=60),
            maximum_attempts=8,
            non_retryable_error_types=NON_RETRYABLE_TYPES,
        )
    )
    """Rate limits and 5xx are retried with backoff (a provider's retry-after overrides the interval)."""

    tool_start_to_close: timedelta = timedelta(minutes=10)
    """Upper bound of one tool attempt."""

    tool_heartbeat: timedelta = timedelta(seconds=10)
    """A tool attempt whose worker stops heartbeating for this long is considered lost (worker crash)."""

    idempotent_tool_retry: RetryPolicy = field(
        default_factory=lambda: RetryPolicy(
            initial_interval=timedelta(milliseconds=200),
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=5,
            non_retryable_error_types=NON_RETRYABLE_TYPES,
        )
    )
    """A lost attempt of an idempotent tool is re-run."""

    once_tool_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(maximum_attempts=1))
    """A non-idempotent tool is never re-run: a lost attempt becomes a tool error the model sees."""

    storage_start_to_close: timedelta = timedelta(seconds=30)
    """Upper bound of the small storage-only activity that persists a run's last messages."""


DEFAULT_OPTIONS = AgentActivityOptions()
