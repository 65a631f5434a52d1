"""Stored workflow definitions from the client side: save (checked against the app, schedules made Temporal
Schedules), list, show, delete, run, resume, a run's state, runs and counts from Temporal's visibility."""

from __future__ import annotations

import asyncio
import inspect
import typing
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, TypeAdapter
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleSpec,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError

from keel.app import App
from keel.app.workflow_checks import Known, check_definition
from keel.client import keel_client
from keel.client.errors import InvalidResumeData, InvalidRunInput, KeelClientError, RunIdInUse
from keel.client.keel_client import KeelClient
from keel.client.visibility import quoted
from keel.client.with_start import execute_update_with_start
from keel.protocol import names
from keel.protocol.identifiers import DEFINITION_CHILD_ROOM, attribute_problem, nul_problem, workflow_id_problem
from keel.storage import Storage
from keel.storage.definitions import Status, StoredDefinition
from keel.workflows.contracts import ResumeStep, WorkflowRunState
from keel.workflows.resumable import SETTLED, start_attributes
from keel.workflows.search_attributes import KEEL_RESOURCE_ID

SETTLE_SECONDS = 60.0
"""How long `settle` waits, by default, for a run to suspend or end."""
STATE_SECONDS = 10.0
"""How long `settled_or_running` waits for a run's `state` query to be answered."""


class WorkflowNotFound(KeelClientError):
    def __init__(self, workflow_id: str) -> None:
        super().__init__(f"No stored workflow {workflow_id!r} (see `keel workflows list`)")


class ResumeRefused(KeelClientError):
    """A resume the run refused: the step is not suspended (data that does not match its resume schema is
    `InvalidResumeData`, from a worker of this version on)."""


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    state: WorkflowRunState


def schedule_id(workflow_id: str, schedule: str | None, index: int) -> str:
    return f"keel-{workflow_id}-{schedule or index}"


class Workflows:
    """Stored workflows of one app, over its storage and (for runs and schedules) a Keel client."""

    def __init__(self, storage: Storage, app: App, keel: KeelClient | None = None) -> None:
        self.storage, self.app, self._keel = storage, app, keel

    @property
    def keel(self) -> KeelClient:
        if self._keel is None:
            raise KeelClientError("This needs Temporal: give Workflows a KeelClient")
        return self._keel

    async def known(self) -> Known:
        stored = await self.storage.list_definitions()
        return Known(
            tools=frozenset(self.app.workflow_tools()),
            agents=frozenset(self.app.agents),
            classifiers=frozenset(self.app.classifiers),
            workflows={**dict.fromkeys(self.app.code_workflows()), **{d.workflow_id: _definition(d) for d in stored}},
        )

    async def listing(self) -> list[dict[str, Any]]:
        """Every workflow: the app's code workflows (`origin: code`, schemas from their type hints), then the
        stored definitions (`origin: storage`, latest versions)."""
        found = [code_workflow_info(name, cls) for name, cls in self.app.code_workflows().items()]
        for d in await self.storage.list_definitions():
            found.append(
                {
                    "id": d.workflow_id,
                    "origin": "storage",
                    "version": d.version,
                    "hash": d.hash,
                    "status": d.status,
                    "description": d.definition.get("description"),
                    "inputSchema": d.definition.get("inputSchema"),
                    "outputSchema": d.definition.get("outputSchema"),
                    "updatedAt": d.updated_at.isoformat(),
                }
            )
        return found

    async def save(self, raw: Any, *, author_id: str | None = None, status: Status = "active") -> StoredDefinition:
        """Check `raw` (every problem at its JSON path: `InvalidDefinition`), store it (a new version if it
        changed) and make its schedules Temporal Schedules (replacing the workflow's earlier ones)."""
        definition = check_definition(raw, await self.known())
        stored = await self.storage.save_definition(definition.id, raw, author_id=author_id, status=status)
        await self._sync_schedules(stored, active=status == "active")
        return stored

    async def delete(self, workflow_id: str) -> None:
        """Hide the workflow and delete its schedules; runs in flight finish on their pinned version."""
        stored = await self.storage.get_definition(workflow_id)
        if stored is None or not await self.storage.delete_definition(workflow_id):
            raise WorkflowNotFound(workflow_id)
        await self._sync_schedules(stored, active=False)

    async def ensure_exists(self, workflow_id: str) -> None:
        if workflow_id not in self.app.code_workflows():
            await self.get(workflow_id)

    async def get(self, workflow_id: str, version: int | None = None) -> StoredDefinition:
        stored = await self.storage.get_definition(workflow_id, version)
        if stored is None:
            raise WorkflowNotFound(workflow_id)
        return stored

    async def start(
        self,
        workflow_id: str,
        input_data: dict[str, Any],
        *,
        run_id: str | None = None,
        resource_id: str | None = None,
        request_context: dict[str, Any] | None = None,
    ) -> str:
        """Start a run; its input is the inputData alone (as `temporal workflow start --input` gives it), the
        request context rides in its memo, the resource id in `KeelResourceId` (for listings). Its id."""
        options = await self._start_options(workflow_id, run_id, resource_id, request_context)
        try:
            await self.keel.temporal.start_workflow(
                workflow_id, input_data, request_eager_start=self.keel.eager_start, **options
            )
        except WorkflowAlreadyStartedError:  # a run id names one run, open or closed
            raise RunIdInUse(str(options["id"]), hint=None) from None
        return str(options["id"])

    async def start_and_settle(
        self,
        workflow_id: str,
        input_data: dict[str, Any],
        *,
        run_id: str | None = None,
        resource_id: str | None = None,
        request_context: dict[str, Any] | None = None,
    ) -> RunStatus:
        """`start`, then wait until the run suspends or ends, in one call (update-with-start of `settled`). A run
        still going after `SETTLE_SECONDS` answers its state then (`running`), as `settled_or_running` does."""
        options = await self._start_options(workflow_id, run_id, resource_id, request_context)
        run_id = str(options["id"])
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            workflow_id, input_data, id_conflict_policy=WorkflowIDConflictPolicy.FAIL, **options
        )
        try:
            async with asyncio.timeout(SETTLE_SECONDS) as waited:
                state = await execute_update_with_start(
                    self.keel.temporal, names.SETTLED_UPDATE, start=start, result_type=WorkflowRunState
                )
        except WorkflowAlreadyStartedError:  # a run id names one run: a start again under it is refused
            raise RunIdInUse(run_id, hint=None) from None  # a workflow run has no conversation to continue
        except WorkflowUpdateFailedError:  # it ended before answering: its outcome from Temporal
            return await self.settle(run_id)
        except RPCError as err:  # it started, and ended at once (bad input): its outcome from Temporal
            if "aborted by closing workflow" not in err.message:
                raise
            return await self.settle(run_id)
        except (WorkflowUpdateRPCTimeoutOrCancelledError, TimeoutError):
            if not waited.expired():
                raise
            return await self.settled_or_running(run_id, timeout=0)  # started: a run that waited that long
        return RunStatus(run_id, state)

    async def _start_options(
        self,
        workflow_id: str,
        run_id: str | None,
        resource_id: str | None,
        request_context: dict[str, Any] | None,
    ) -> dict[str, Any]:
        if run_id is not None and (
            problem := nul_problem("the run id", run_id)
            or workflow_id_problem("the run id", run_id, room=DEFINITION_CHILD_ROOM)
        ):
            raise InvalidRunInput(problem)  # left to Temporal: an RPC error (or a step's child start failing for good)
        memo: dict[str, Any] = {"requestContext": request_context} if request_context else {}
        if workflow_id not in self.app.code_workflows():  # the version it will load, so it need not write it
            stored = await self.get(workflow_id)
            memo |= {"definitionVersion": stored.version, "definitionHash": stored.hash}
        if resource_id is None and run_id is not None:  # named by `create-run`, perhaps for a resource
            resource_id = await self.storage.created_run_resource(run_id, workflow_id)
        if resource_id is not None and (problem := attribute_problem("a resource id", resource_id)):
            raise InvalidRunInput(problem)
        await self.keel.wait_for_worker()
        pairs = start_attributes(workflow_id)  # visible as a Keel run from its start: no upsert of its own
        if resource_id:
            pairs.append(SearchAttributePair(KEEL_RESOURCE_ID, resource_id))
        attributes = TypedSearchAttributes(pairs)
        return {
            "id": run_id or f"wf-{workflow_id}-{uuid.uuid4()}",
            "task_queue": self.keel.task_queue,
            "memo": memo or None,
            "search_attributes": attributes,
            # A run id names one run: a start under the id of one that has ended is refused too (by default
            # Temporal would start a second execution, which would then answer for the run).
            "id_reuse_policy": WorkflowIDReusePolicy.REJECT_DUPLICATE,
        }

    async def state(self, run_id: str) -> WorkflowRunState:
        """The run's `state` query; for a closed run that cannot answer it (it failed before it began, say),
        what Temporal knows: its status and error."""
        handle = self._handle(run_id)
        try:
            state: WorkflowRunState = await handle.query(
                "state", result_type=WorkflowRunState, rpc_timeout=timedelta(seconds=keel_client.WORKER_ANSWER_SECONDS)
            )
            return state
        except RPCError as err:  # no worker answered: say so (it read "The Temporal server did not answer")
            if not keel_client.no_worker_answered(err):
                raise  # the server away, say: the caller's outage handling
            raise await self.keel.no_answer(run_id) from None
        except WorkflowQueryFailedError:
            described = await handle.describe()
            if described.status == WorkflowExecutionStatus.RUNNING:
                raise
        try:
            result = await handle.result()
        except WorkflowFailureError as err:
            cause = err.cause
            message = str(getattr(cause, "message", None) or cause or err)
            return WorkflowRunState(workflow_id=described.workflow_type, status="failed", error=message)
        return WorkflowRunState(workflow_id=described.workflow_type, status="success", result=result)

    async def settle(self, run_id: str, *, timeout: float | None = None) -> RunStatus:
        """Wait until the run suspends or ends (the `settled` update); its state then. `TimeoutError` after
        `timeout` seconds (default `SETTLE_SECONDS`)."""
        handle = self._handle(run_id)
        try:
            async with asyncio.timeout(SETTLE_SECONDS if timeout is None else timeout) as waited:
                asked = None
                while True:
                    try:
                        state = await handle.execute_update(names.SETTLED_UPDATE, result_type=WorkflowRunState)
                        return RunStatus(run_id, state)
                    except (WorkflowUpdateFailedError, RPCError):  # the run has ended (or ends without answering)
                        pass
                    described = await handle.describe()
                    if described.status != WorkflowExecutionStatus.RUNNING or described.run_id == asked:
                        break
                    asked = described.run_id  # reset while the update waited: ask the execution now current
                while (status := (await handle.describe()).status) == WorkflowExecutionStatus.RUNNING:
                    await asyncio.sleep(0.1)  # a code workflow that ended without `finish_handlers`: closing
        except WorkflowUpdateRPCTimeoutOrCancelledError:  # the update, cancelled by the timeout, says so
            if waited.expired():
                raise TimeoutError(f"Run {run_id!r} neither suspended nor ended in time") from None
            raise
        state = await self.state(run_id)
        if state.status not in SETTLED:  # a code workflow, or a canceled run, keeps no outcome in its state
            ended = status == WorkflowExecutionStatus.COMPLETED
            result = await handle.result() if ended else None
            outcome = _mastra_status(status.name if status else None, None)
            state = state.model_copy(update={"status": outcome, "result": result})
        return RunStatus(run_id, state)

    async def settled_or_running(self, run_id: str, *, timeout: float | None = None) -> RunStatus:
        """`settle`, except that a run still running after `timeout` seconds answers its state then (status
        `running`, Mastra's for a run under way) instead of raising: an HTTP answer that a client does not take
        for a failure, and so does not send again (`@mastra/client-js` retries a 5xx, and the request that led
        here, a resume or a time travel, must not be made twice)."""
        if timeout != 0:  # 0: the caller has waited already
            try:
                return await self.settle(run_id, timeout=timeout)
            except TimeoutError:
                pass
        try:
            async with asyncio.timeout(STATE_SECONDS):
                return RunStatus(run_id, await self.state(run_id))
        # No worker answers in time (none polls, or the run's workflow task is busy with a long local step):
        # Temporal says what it is.
        except (TimeoutError, WorkflowQueryFailedError, RPCError):
            described = await self._handle(run_id).describe()
        if described.status != WorkflowExecutionStatus.RUNNING:  # it has just ended
            return await self.settle(run_id)
        return RunStatus(run_id, WorkflowRunState(workflow_id=described.workflow_type, status="running"))

    async def resume(self, run_id: str, step: str, resume_data: Any) -> None:
        """Resume a suspended step (the `resume_step` update): `ResumeRefused` says why a resume is refused,
        `NoWorker` that no worker took it within `WORKER_ANSWER_SECONDS` (none serves the run's task queue), or at
        once when none polls it: Temporal keeps an update no worker took, and applies it when one comes, after
        its caller was told it failed."""
        await self.keel.require_worker(await self.keel.run_task_queue(run_id))
        try:
            # Bounded as a whole (an `rpc_timeout` bounds each of the SDK's requests: about twice as long).
            async with asyncio.timeout(keel_client.WORKER_ANSWER_SECONDS) as waited:
                await self._handle(run_id).execute_update("resume_step", ResumeStep(step=step, resume_data=resume_data))
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == "InvalidResumeData":
                raise InvalidResumeData(str(cause)) from None
            raise ResumeRefused(str(cause or err)) from None
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):  # the update, cancelled by the timeout
            if not waited.expired():
                raise
            raise await self.keel.no_answer(run_id) from None
        except RPCError as err:
            raise ResumeRefused(f"Run {run_id!r}: {err.message}") from None

    async def runs(
        self,
        workflow_id: str,
        *,
        status: str | None = None,
        resource_id: str | None = None,
        from_date: datetime | None = None,
        to_date: datetime | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """The workflow's runs, newest first, from Temporal's visibility: `status` is Mastra's (`running`,
        `suspended`, `success`, `failed`, `canceled`), the dates bound the start time."""
        query = self._runs_query(workflow_id, status, resource_id, from_date, to_date)
        found: list[dict[str, Any]] = []
        async for ex in self.keel.temporal.list_workflows(query, limit=offset + limit):
            attributes = {p.key.name: p.value for p in ex.typed_search_attributes}
            keel_status = attributes.get("KeelStatus")
            found.append(
                {
                    "runId": ex.id,
                    "workflowName": workflow_id,
                    "resourceId": attributes.get("KeelResourceId"),
                    "status": _mastra_status(ex.status.name if ex.status else None, keel_status),
                    "createdAt": ex.start_time.isoformat() if ex.start_time else None,
                    "updatedAt": (ex.close_time or ex.start_time).isoformat() if ex.start_time else None,
                }
            )
        return found[offset:]

    async def count_runs(
        self,
        workflow_id: str,
        *,
        status: str | None = None,
        resource_id: str | None = None,
        from_date: datetime | None = None,
        to_date: datetime | None = None,
    ) -> int:
        """How many runs `runs` would list without its page."""
        query = self._runs_query(workflow_id, status, resource_id, from_date, to_date)
        return (await self.keel.temporal.count_workflows(query)).count

    def _runs_query(
        self,
        workflow_id: str,
        status: str | None,
        resource_id: str | None,
        from_date: datetime | None,
        to_date: datetime | None,
    ) -> str:
        clauses = [self._scope(), f"KeelWorkflowId='{quoted(workflow_id)}'"]
        if status is not None:
            if status not in _STATUS_QUERIES:
                raise KeelClientError(f"Unknown status {status!r} (one of: {', '.join(_STATUS_QUERIES)})")
            clauses.append(_STATUS_QUERIES[status])
        if resource_id is not None:
            clauses.append(f"KeelResourceId='{quoted(resource_id)}'")
        for bound, at in ((">=", from_date), ("<=", to_date)):
            if at is not None:  # one without an offset is UTC, as the HTTP API takes it
                aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
                clauses.append(f"StartTime {bound} '{aware.isoformat()}'")
        return " AND ".join(clauses)

    async def counts(self) -> dict[str, dict[str, int]]:
        """`{workflowKey: {running, suspended}}` for the code and stored workflows, from visibility counts only."""
        ids = [*self.app.code_workflows(), *(d.workflow_id for d in await self.storage.list_definitions())]
        keys = [(i, s) for i in ids for s in ("running", "suspended")]
        queries = [f"{self._scope()} AND KeelWorkflowId='{quoted(i)}' AND {_STATUS_QUERIES[s]}" for i, s in keys]
        found = await asyncio.gather(*(self.keel.temporal.count_workflows(q) for q in queries))
        counts: dict[str, dict[str, int]] = {i: {"running": 0, "suspended": 0} for i in ids}
        for (i, s), c in zip(keys, found, strict=True):
            counts[i][s] = c.count
        return counts

    def _scope(self) -> str:
        """Keel workflow runs of this app: those on its task queue."""
        return f"KeelKind='workflow' AND TaskQueue='{quoted(self.keel.task_queue)}'"

    def _handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        return self.keel.temporal.get_workflow_handle(run_id)

    async def _sync_schedules(self, stored: StoredDefinition, *, active: bool) -> None:
        client = self.keel.temporal
        prefix = f"keel-{stored.workflow_id}-"
        async for listed in await client.list_schedules():
            if listed.id.startswith(prefix):
                await client.get_schedule_handle(listed.id).delete()
        if not active:
            return
        definition = _definition(stored)
        for index, schedule in enumerate(definition.schedules()):
            sid = schedule_id(stored.workflow_id, schedule.id, index)
            spec = ScheduleSpec(cron_expressions=[schedule.cron], time_zone_name=schedule.timezone)
            action = ScheduleActionStartWorkflow(
                stored.workflow_id,
                schedule.input_data or {},
                id=f"{sid}-run",
                task_queue=self.keel.task_queue,
                typed_search_attributes=TypedSearchAttributes(start_attributes(stored.workflow_id)),
            )
            try:
                await client.create_schedule(sid, Schedule(action=action, spec=spec))
            except ScheduleAlreadyRunningError:
                pass  # a concurrent save made it


def code_workflow_info(name: str, cls: type) -> dict[str, Any]:
    """A code workflow as listed: its input and output JSON Schemas from the run method's type hints (pydantic
    models give theirs; anything else: any value)."""
    from temporalio.workflow import _Definition

    run = _Definition.must_from_class(cls).run_fn
    hints = typing.get_type_hints(run)
    params = [p for p in inspect.signature(run).parameters if p != "self"]
    return {
        "id": name,
        "origin": "code",
        "description": inspect.getdoc(cls),
        "inputSchema": _schema(hints.get(params[0])) if params else {},
        "outputSchema": _schema(hints.get("return")),
    }


def _schema(hint: Any) -> dict[str, Any]:
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return hint.model_json_schema(by_alias=True)
    try:
        return TypeAdapter(hint).json_schema() if hint is not None else {}
    except Exception:
        return {}


def _definition(stored: StoredDefinition) -> Any:
    from keel.protocol.workflow_definition import WorkflowDefinition

    return WorkflowDefinition.model_validate(stored.definition)


_STATUS_QUERIES = {
    "running": "ExecutionStatus='Running' AND KeelStatus='running'",
    "suspended": "ExecutionStatus='Running' AND KeelStatus='suspended'",
    "success": "ExecutionStatus='Completed'",
    "failed": "ExecutionStatus IN ('Failed', 'TimedOut', 'Terminated')",
    "canceled": "ExecutionStatus='Canceled'",
}


def _mastra_status(execution: str | None, keel_status: str | None) -> str:
    """Temporal's execution status as Mastra names a run's: running, suspended, success, failed, canceled."""
    if execution in (None, "RUNNING"):
        return "suspended" if keel_status == "suspended" else "running"
    return {"COMPLETED": "success", "CANCELED": "canceled"}.get(execution, "failed")
