"""Activity options of the agent loop, in one place, and the options each worker registers for its task queue.

Two kinds of field (each docstring says which):

* **Pinned per run**: decides which commands a run issues. Read once, when a run starts, recorded in its
  history (`RunShape`) and carried across continue-as-new; a worker with other values continues old runs as
  they began. Changing one on a worker affects only the runs it starts from then on.
* **Live**: timeouts and retry policies, read each time an activity is scheduled. Replay never checks them,
  so a change applies to runs in flight from their next activity on.

Which failures a policy retries is not listed here: every activity raises through the table of
`keel.activities.failures`, which marks each failure retryable or not; the policies bound how often and how long.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from temporalio.common import RetryPolicy

from keel.workflows.contracts import LOCAL_STEPS_PER_TASK, RUN_GENERATION, RunShape


@dataclass(frozen=True)
class AgentActivityOptions:
    """Run shape, timeouts and retry policies of the agent loop's activities."""

    model_as_local_activity: bool = True
    """Pinned per run. Run a model step of its own (the first step, and any step after tools that ran apart)
    as a local activity: its result is recorded (a marker) in the same workflow task that schedules what
    follows, saving a server round trip while the step stays durable. False makes it a regular activity, the
    choice for model calls that may outlive a workflow task timeout."""

    fuse_tools_with_next_model_step: bool = True
    """Pinned per run. Run a step's approved tool calls and the next model step as one regular activity when
    every tool is idempotent: the model reads the results in the same activity, so a step costs one server
    round trip. The activity stores each tool result before the model call, and a retry reuses them."""

    fused_step_as_local_activity: bool = True
    """Pinned per run. Run a fused step (its idempotent tools, then the next model call) as a local activity:
    recorded in the workflow task that ran it, so a run whose steps all fuse finishes in one workflow task per
    turn, with no activity task and no second workflow task per step. It is tried once locally; a retryable
    failure retries it as a regular activity, whose attempts the UI shows under Pending Activities. False runs it
    as a regular activity from the start. Ignored where steps are not fused."""

    local_steps_per_task: int = LOCAL_STEPS_PER_TASK
    """Pinned per run. Local steps chained in one workflow task (and at most 1 MiB of their results) before a
    step runs as a regular activity, which crosses to the next workflow task (where Temporal's continue-as-new
    suggestion is seen). 4 is what runs chained before this setting existed; ignored where nothing is local."""

    model_start_to_close: timedelta = timedelta(minutes=5)
    """Live. Upper bound of one model call attempt, streaming included."""

    model_heartbeat: timedelta = timedelta(seconds=10)
    """Live. A model step run as a regular activity heartbeats while it waits on the model: one whose worker stops
    heartbeating for this long is lost (a worker crash) and retried, not waited for until `model_start_to_close`."""

    model_retry: RetryPolicy = field(
        default_factory=lambda: RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=60),
            maximum_attempts=16,
        )
    )
    """Live. A model step, alone or after its tools: rate limits, 5xx, a model server down and storage outages
    are retried with backoff (a provider's retry-after overrides the interval) for about 10 minutes of waiting
    (1 + 2 + ... + 32 s, then 60 s apart). With 10 attempts (4 minutes) the chaos run's model server, down a minute
    and then failing two calls in five, failed 2 of 761 runs (`tests/test_model_outage.py`)."""

    tool_start_to_close: timedelta = timedelta(minutes=10)
    """Live. Upper bound of one tool attempt."""

    tool_heartbeat: timedelta = timedelta(seconds=10)
    """Live. A tool attempt whose worker stops heartbeating for this long is considered lost (worker crash)."""

    host_schedule_to_start: timedelta = timedelta(seconds=30)
    """Live. A follow-up of a background process waits this long for the worker host that runs the process;
    past it, the process is reported gone (that worker has stopped)."""

    idempotent_tool_retry: RetryPolicy = field(
        default_factory=lambda: RetryPolicy(
            initial_interval=timedelta(milliseconds=200),
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=5,
        )
    )
    """Live. A lost attempt of an idempotent tool run as an activity of its own is re-run (it writes no storage:
    the next model step persists its result)."""

    once_tool_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(maximum_attempts=1))
    """Live. A non-idempotent tool is never re-run: a lost attempt becomes a tool error the model sees."""

    storage_start_to_close: timedelta = timedelta(seconds=30)
    """Live. Upper bound of one attempt of the storage-only activity that persists a run's last messages."""

    storage_retry: RetryPolicy = field(
        default_factory=lambda: RetryPolicy(
            initial_interval=timedelta(milliseconds=500),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=12,
        )
    )
    """Live. The final persist rides out a storage outage of about 3.5 minutes of waiting."""

    def shape(self) -> RunShape:
        """The pinned-per-run fields: what a run started with these options records."""
        shape = RunShape(
            model_as_local_activity=self.model_as_local_activity,
            fuse_tools_with_next_model_step=self.fuse_tools_with_next_model_step,
            fused_step_as_local_activity=self.fuse_tools_with_next_model_step and self.fused_step_as_local_activity,
            generation=RUN_GENERATION,
        )
        if shape.any_local:
            shape = shape.model_copy(update={"local_steps_per_task": self.local_steps_per_task})
        return shape


DEFAULT_OPTIONS = AgentActivityOptions()

_BY_TASK_QUEUE: dict[str, AgentActivityOptions] = {}


def register(task_queue: str, options: AgentActivityOptions) -> None:
    """Use `options` for the runs this process's worker on `task_queue` executes (`KeelPlugin` calls it).

    A process-wide table, not per workflow instance, because a workflow can read nothing of its worker but its
    `workflow.info()`; this module passes through the sandbox, so sandboxed runs see the same table.
    """
    _BY_TASK_QUEUE[task_queue] = options


def unregister(task_queue: str, options: AgentActivityOptions) -> None:
    if _BY_TASK_QUEUE.get(task_queue) is options:
        del _BY_TASK_QUEUE[task_queue]


def options_for(task_queue: str) -> AgentActivityOptions:
    """The options registered for `task_queue`, else the defaults (a replayer, a worker built without Keel's
    plugin)."""
    return _BY_TASK_QUEUE.get(task_queue, DEFAULT_OPTIONS)
