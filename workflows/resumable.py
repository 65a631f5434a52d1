"""`Resumable`: the suspend points of a Keel workflow, a stored definition's run or one of your own.

    @workflow.defn
    class Release(Resumable):
        @workflow.run
        async def run(self, input: dict) -> dict:
            answer = await self.suspend("approve", {"question": "Ship?"}, {"type": "object", ...})
            return {"shipped": answer["ok"]}

`suspend` marks the step suspended (`KeelStatus=suspended`, the `state` query shows its payload) and waits for
the `resume` signal or the `resume_step` update (`{"step", "resumeData"}`), whose data must match the step's
resume schema: a bad update is refused, a bad signal recorded (`rejected_signals`) and ignored. The `settled`
update waits until the run suspends or ends and answers its state, so a client starts (update-with-start) or
resumes a run and has its outcome without polling. A run waits for its unfinished handlers before it ends
(`finish_handlers`).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import SearchAttributePair
from temporalio.exceptions import ApplicationError

from keel.protocol import names
from keel.protocol.validation import describe_validation_error
from keel.protocol.workflow_definition import resume_data_problem
from keel.workflows.contracts import ResumeStep, StepState, WorkflowRunState
from keel.workflows.search_attributes import KEEL_KIND, KEEL_STATUS, KEEL_WORKFLOW_ID

SETTLED = frozenset({"suspended", "success", "failed"})
MAX_REJECTED_SIGNALS = 20
"""The latest rejected resume signals the `rejected_signals` query keeps."""
MAX_EVENTS = 10_000
"""Events a run keeps (the `events` query): past it, later steps are not reported (the run goes on)."""
MAX_EVENT_VALUE_BYTES = 64 * 1024
"""A step's input or output larger than this (as JSON) is reported as `{"truncated": true, "bytes": N}`."""


def start_attributes(workflow_type: str) -> list[SearchAttributePair[str]]:
    """What marks a run of `workflow_type` as a running Keel workflow run; give them at start."""
    return [
        SearchAttributePair(KEEL_KIND, "workflow"),
        SearchAttributePair(KEEL_WORKFLOW_ID, workflow_type),
        SearchAttributePair(KEEL_STATUS, "running"),
    ]


def bounded_value(value: Any) -> Any:
    """`value`, or `{"truncated": true, "bytes": N}` when its JSON is over `MAX_EVENT_VALUE_BYTES`."""
    size = len(json.dumps(value, default=str))
    return {"truncated": True, "bytes": size} if size > MAX_EVENT_VALUE_BYTES else value


class Resumable:
    def __init__(self) -> None:
        self._state = WorkflowRunState(workflow_id=workflow.info().workflow_type)
        self._suspended: dict[str, dict[str, Any] | None] = {}
        """Suspended step key (a step id, `id[i]` in a foreach) → its resume schema."""
        self._resume_schemas: dict[str, dict[str, Any]] = {}
        """Step id → the resume schema it last suspended with, kept after its resume (a time travel's resumeData
        is checked against it); by step id, so at most one per step of the definition."""
        self._resumes: dict[str, Any] = {}
        self._rejected: list[str] = []
        self._events: list[dict[str, Any]] = []
        self._started_at: dict[str, int] = {}

    # --- Mastra's workflow stream chunks, kept in the run's state (no write per step) --------------------

    def emit(self, type: str, payload: dict[str, Any]) -> None:
        if len(self._events) < MAX_EVENTS:
            run_id = workflow.info().workflow_id
            self._events.append({"type": type, "runId": run_id, "from": "WORKFLOW", "payload": payload})

    def _now_ms(self) -> int:
        return int(workflow.now().timestamp() * 1000)

    def step_started(self, key: str, value: Any, *, resume_data: Any = None, resumed: bool = False) -> None:
        if not resumed or key not in self._started_at:
            self._started_at[key] = self._now_ms()
        payload = {"stepName": key.split("[")[0], "id": key, "stepCallId": key, "payload": bounded_value(value)}
        payload |= {"startedAt": self._started_at[key], "status": "running"}
        if resumed:
            payload |= {"resumePayload": bounded_value(resume_data), "resumedAt": self._now_ms()}
        self.emit("workflow-step-start", payload)

    def step_finished(self, key: str, value: Any, output: Any) -> None:
        payload = {"stepName": key.split("[")[0], "id": key, "stepCallId": key, "payload": bounded_value(value)}
        payload |= {"startedAt": self._started_at.get(key, self._now_ms()), "status": "success"}
        payload |= {"output": bounded_value(output), "endedAt": self._now_ms()}
        self.emit("workflow-step-result", payload)

    def workflow_finished(self, status: str, result: Any = None) -> None:
        payload: dict[str, Any] = {"workflowStatus": status, "metadata": {}}
        payload["output"] = {"usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}}
        if status == "success":
            payload["finalWorkflowResult"] = bounded_value(result)
        self.emit("workflow-finish", payload)

    def mark_keel_run(self) -> None:
        """Make the run visible as a Keel workflow run (`KeelKind=workflow`, running); its stream starts. A run
        started with these attributes (`start_attributes`, as Keel's clients start runs) has nothing to upsert."""
        info = workflow.info()
        self.emit("workflow-start", {"workflowId": info.workflow_type})
        marks = start_attributes(info.workflow_type)
        given = info.typed_search_attributes
        if any(given.get(pair.key) != pair.value for pair in marks):
            workflow.upsert_search_attributes([pair.key.value_set(pair.value) for pair in marks])

    async def suspend(self, step: str, payload: Any = None, resume_schema: dict[str, Any] | None = None) -> Any:
        """Wait at `step` for its resume data (checked against `resume_schema`, a JSON Schema); returns it."""
        self._suspended[step] = resume_schema
        if resume_schema:
            self._resume_schemas[step.split("[")[0]] = resume_schema
        self._state.steps[step] = StepState(
            status="suspended", suspend_payload=bounded_value(payload), resume_schema=resume_schema
        )
        self.emit(
            "workflow-step-suspended",
            {
                "stepName": step.split("[")[0],
                "id": step,
                "stepCallId": step,
                "startedAt": self._started_at.get(step, self._now_ms()),
                "status": "suspended",
                "suspendPayload": bounded_value(payload),
                "suspendedAt": self._now_ms(),
            },
        )
        self._set_status("suspended")
        self.workflow_finished("suspended")
        await workflow.wait_condition(lambda: step in self._resumes)
        data = self._resumes.pop(step)
        self._state.steps[step] = StepState(status="running")
        self.step_started(step, None, resume_data=data, resumed=True)
        if not self._suspended:
            self._set_status("running")
        return data

    def _set_status(self, status: str) -> None:
        self._state.status = "suspended" if status == "suspended" else "running"
        workflow.upsert_search_attributes([KEEL_STATUS.value_set(status)])

    # --- handlers ---------------------------------------------------------------------------------------

    @workflow.query(name=names.STATE_QUERY)
    def state(self) -> WorkflowRunState:
        return self._state

    @workflow.query(name=names.EVENTS_QUERY)
    def events(self, offset: int = 0) -> list[dict[str, Any]]:
        """The run's stream chunks from `offset` on (Mastra's `workflow-*` types, `{type, runId, from, payload}`)."""
        return self._events[max(0, offset) :]

    @workflow.update(name=names.SETTLED_UPDATE, unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON)
    async def settled(self) -> WorkflowRunState:
        """Wait until the run suspends or ends; its state then. A code workflow that returns without
        `finish_handlers` leaves it unanswered: the caller reads the outcome from Temporal (`Workflows.settle`)."""
        await workflow.wait_condition(lambda: self._state.status in SETTLED)
        return self._state

    async def finish_handlers(self) -> None:
        """Let `settled` (and any other handler still running) answer before the run ends. Adds no command."""
        await workflow.wait_condition(workflow.all_handlers_finished)

    @workflow.query(name="rejected_signals")
    def rejected_signals(self) -> list[str]:
        return list(self._rejected)

    @workflow.signal(name=names.RESUME_SIGNAL)
    def resume(self, *args: Any) -> None:
        # Taken as they come (any number, plain JSON) and checked here: a signal that is not one `{step,
        # resumeData}` (a `temporal workflow signal` with no --input, two, or anything else) is recorded with the
        # others instead of dropped by the SDK or, with no input at all, failing every workflow task.
        if len(args) != 1:
            self._reject(f"malformed resume signal: {len(args)} inputs, expected one JSON object {{step, resumeData}}")
            return
        try:
            resume = ResumeStep.model_validate(args[0])
        except ValidationError as err:
            problem = describe_validation_error(err)
            self._reject(f"malformed resume payload: {problem} (expected a JSON object {{step, resumeData}})")
            return
        found = self._resume_problem(resume)
        if found is not None:
            self._reject(found[1])
            return
        self._deliver(resume)

    def _reject(self, problem: str) -> None:
        self._rejected = [*self._rejected[-(MAX_REJECTED_SIGNALS - 1) :], problem]
        workflow.logger.warning("resume signal ignored: %s", problem)

    @workflow.update(name=names.RESUME_STEP_UPDATE)
    def resume_step(self, resume: ResumeStep) -> dict[str, Any]:
        self._deliver(resume)
        return {"accepted": True, "step": resume.step}

    @resume_step.validator
    def _validate_resume(self, resume: ResumeStep) -> None:
        found = self._resume_problem(resume)
        if found is not None:
            kind, problem = found
            raise ApplicationError(problem, type=kind, non_retryable=True)

    def _key(self, resume: ResumeStep) -> str | None:
        step = resume.step if isinstance(resume.step, str) else ".".join(resume.step)
        return next((k for k in self._suspended if k == step or k.startswith(f"{step}[")), None)

    def _resume_problem(self, resume: ResumeStep) -> tuple[str, str] | None:
        """Why `resume` is refused, with its kind: `InvalidResume` (no such step suspended: the run's state) or
        `InvalidResumeData` (the data does not match the step's resume schema: the caller's input)."""
        key = self._key(resume)
        if key is None:
            waiting = ", ".join(self._suspended) or "none"
            return "InvalidResume", f"Step {resume.step!r} is not suspended (suspended steps: {waiting})"
        problem = resume_data_problem(key, self._suspended[key], resume.resume_data)
        return ("InvalidResumeData", problem) if problem else None

    def _deliver(self, resume: ResumeStep) -> None:
        key = self._key(resume)
        assert key is not None
        self._resumes[key] = resume.resume_data
        del self._suspended[key]
        if not self._suspended:  # at once, so a `settled` in the same activation waits for what comes next
            self._state.status = "running"
