"""`KeelPlugin`: Keel added to your own Temporal client and worker in one line.

    client = await Client.connect("127.0.0.1:7233", plugins=[KeelPlugin(app)])
    worker = Worker(client, task_queue="keel", workflows=[MyWorkflow])  # + AgentRun and the app's activities

On a client it sets Keel's data converter. On a worker (and on a `Replayer`) it adds Keel's workflows, the
app's activities (bound to its storage, opened and migrated while the worker runs) and the workflow runners:
Keel's own workflows opt out of the sandbox (`@workflow.defn(sandboxed=False)`), every other workflow, yours,
runs in it, with Keel's data modules passed through. The options it is given are registered for the worker's
task queue (`keel.workflows.options`).

With tracing on (`OTEL_TRACES_EXPORTER`: `keel.protocol.tracing`), it adds Temporal's `TracingInterceptor` to
the client, or to a worker (and a replayer) whose client has none; with tracing off it adds nothing. While a worker
runs, its log records are kept in its storage when `KEEL_LOGS` names a level (`keel.client.log_handler`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from temporalio.client import ClientConfig
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import ReplayerConfig, UnsandboxedWorkflowRunner, Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from keel.activities import AgentActivities
from keel.activities.blob_sweep import BlobActivities
from keel.app import App
from keel.client import log_handler, stuck_tasks, tracing
from keel.client.converter import KeelPayloadConverter, data_converter, external_storage
from keel.protocol import tracing as spans
from keel.storage import BlobStore, Storage, open_payload_store, open_storage
from keel.workflows import WORKFLOWS
from keel.workflows import options as run_options
from keel.workflows.options import DEFAULT_OPTIONS, AgentActivityOptions

SANDBOX_PASSTHROUGH: dict[str, str] = {
    "pydantic": "the contract models' library: no per-run state, and re-importing it per run is slow",
    "pydantic_core": "pydantic's compiled core",
    "annotated_types": "pydantic's constraint types",
    "keel.protocol": "models, names and an error formatter: no state, no I/O",
    "keel.workflows.contracts": "models only; re-importing them cost ~45 ms of schema building per new run",
    "keel.workflows.session_contracts": "models only (AgentController sessions), as the run contracts",
    "keel.workflows.options": "the options each worker registered for its task queue: a fresh import has none",
    "keel.workflows.search_attributes": "constant search attribute keys",
    "keel.protocol.workflow_definition": "the definition models: no state",
    "jsonschema": "JSON Schema checks of workflow data: pure functions; importing it per run is slow",
    "re2": "the JSON Schema checks' regular expressions (`schema_patterns`): pure, and a compiled extension",
}
"""Modules shared with the sandbox instead of re-imported for each workflow run, each with why that is safe."""

TASK_DURATION_WARN_ENV = "TEMPORAL_WORKFLOW_TASK_DURATION_WARN_SECONDS"
TASK_DURATION_WARN_SECONDS = 10
"""The SDK's worker warns (`[TMPRL1104]`) of a workflow task that took longer than the seconds its environment
variable `TEMPORAL_WORKFLOW_TASK_DURATION_WARN_SECONDS` says (5 unless set). A Keel run's local step holds its
workflow task open for as long as the model call or the tools take, and the task heartbeats 8 s in (80 % of
Temporal's default task timeout of 10 s): every model answer longer than 5 s warned, which says nothing is wrong.
A Keel worker sets it to the task timeout unless the process did: a task that runs past it is one Temporal timed
out. The SDK reads it once per process, when the first task ends."""

SANDBOX_ENV = "KEEL_WORKFLOW_SANDBOX"
"""`1` runs Keel's own workflows in the sandbox too (the test suite sets it): the sandbox then checks them for
non-deterministic calls, at the measured cost in `AgentRun`'s comment."""


def sandboxed_runner(runner: WorkflowRunner | None = None) -> SandboxedWorkflowRunner:
    """`runner` (a sandbox the worker was given, else the default one) with Keel's passthrough modules."""
    base = runner if isinstance(runner, SandboxedWorkflowRunner) else SandboxedWorkflowRunner()
    restrictions: SandboxRestrictions = base.restrictions.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
    return dataclasses.replace(base, restrictions=restrictions)


def _sandbox_keel_workflows(value: bool | None) -> bool:
    if value is not None:
        return value
    return os.environ.get(SANDBOX_ENV, "").lower() in ("1", "true", "yes")


def keel_workflows_runner(sandboxed: bool | None = None) -> WorkflowRunner:
    """The runner Keel's own workflows get: none (they run unsandboxed), or the sandbox when `sandboxed`
    (default `$KEEL_WORKFLOW_SANDBOX`)."""
    return sandboxed_runner() if _sandbox_keel_workflows(sandboxed) else UnsandboxedWorkflowRunner()


def host_queue_name() -> str:
    """A task queue name no other worker process shares: `keel-host-{hostname}-{pid}-{random}`."""
    return f"keel-host-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class KeelPlugin(SimplePlugin):
    """Keel's workflows, an app's activities and Keel's data converter for a Temporal client and worker.

    Args:
        app: the agents and tools whose activities a worker runs; None registers only the workflows (a
            replayer, or a worker for workflows alone).
        storage: where the activities read and write threads and events; default `open_storage()` (from
            `KEEL_STORAGE_URL`), initialised (migrated) when a worker starts and closed when it stops. A storage
            passed in is the caller's to initialise and close.
        options: run shape, timeouts and retry policies of the agent loop, registered for the task queue of
            each worker the plugin configures.
        sandbox_keel_workflows: run Keel's own workflows in the sandbox too; default `$KEEL_WORKFLOW_SANDBOX`.
    """

    def __init__(
        self,
        app: App | None = None,
        *,
        storage: Storage | None = None,
        payloads: BlobStore | None = None,
        options: AgentActivityOptions = DEFAULT_OPTIONS,
        sandbox_keel_workflows: bool | None = None,
    ) -> None:
        # Before any worker of the process completes a task: the SDK reads it then, once.
        os.environ.setdefault(TASK_DURATION_WARN_ENV, str(TASK_DURATION_WARN_SECONDS))
        self.app = app
        self.options = options
        self.sandbox_keel_workflows = _sandbox_keel_workflows(sandbox_keel_workflows)
        self._owns_storage = storage is None and app is not None
        self.storage = storage if storage is not None or app is None else open_storage()
        self.payloads = payloads or (self.storage.payloads() if self.storage is not None else open_payload_store())
        self._initialised = False
        self._init_lock = asyncio.Lock()
        self._workers_running = 0
        self.host_queue = host_queue_name()
        """The task queue that reaches this process alone: background processes' follow-ups are sent there."""
        self._activities = (
            AgentActivities(app, self.storage, host_queue=self.host_queue) if app is not None and self.storage else None
        )
        super().__init__(
            "keel.KeelPlugin",
            data_converter=self._with_keel_payloads,
            workflows=[*WORKFLOWS, *(app.workflows if app is not None else ())],
            activities=[*self._activities.all(), *BlobActivities().all()] if self._activities else None,
            workflow_runner=sandboxed_runner,
            run_context=contextlib.asynccontextmanager(self._worker_resources),
        )

    def configure_client(self, config: ClientConfig) -> ClientConfig:
        config = super().configure_client(config)
        config["interceptors"] = tracing.with_interceptor(config.get("interceptors", ()))
        return config

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        config = super().configure_worker(config)
        # A client's interceptors apply to its workers too: one only when the client has none.
        if tracing.find_interceptor(config["client"].config(active_config=True)["interceptors"]) is None:
            config["interceptors"] = tracing.with_interceptor(config.get("interceptors", ()))
        if self.sandbox_keel_workflows:
            config["unsandboxed_workflow_runner"] = sandboxed_runner(config.get("workflow_runner"))
        run_options.register(config["task_queue"], self.options)
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        config = super().configure_replayer(config)
        config["interceptors"] = tracing.with_interceptor(config.get("interceptors", ()))
        config["unsandboxed_workflow_runner"] = (
            sandboxed_runner(config.get("workflow_runner"))
            if self.sandbox_keel_workflows
            else UnsandboxedWorkflowRunner()
        )
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        async def keeping_logs(worker: Worker) -> None:  # inside the resources: the storage is migrated by then
            async with log_handler.keeping_logs(self.storage, worker.task_queue) if self.storage else _nothing():
                async with _healing(worker):
                    await next(worker)

        try:
            async with self._host_worker(worker):
                await super().run_worker(worker, keeping_logs)
        finally:
            run_options.unregister(worker.task_queue, self.options)
            if spans.enabled():  # the spans of the worker's last tasks, exported before the process may exit
                await asyncio.to_thread(spans.flush)

    @contextlib.asynccontextmanager
    async def _host_worker(self, worker: Worker) -> AsyncIterator[None]:
        """Beside a worker whose app has sandboxes: a worker on this process's own task queue, for the calls
        that must reach a background process it started."""
        app = self.app
        needed = app is not None and any(ws.has_sandbox_config() for ws in app.workspaces.values())
        if not needed or self._activities is None or worker.task_queue == self.host_queue:
            yield
            return
        # A plugin on the client configures this worker too (and adds every activity itself).
        on_client = any(p is self for p in worker.client.config().get("plugins", []))
        activities: list[Callable[..., Any]] = (
            [] if on_client else [self._activities.tool_call, self._activities.kill_processes]
        )
        traced = tracing.find_interceptor(worker.client.config(active_config=True)["interceptors"]) is not None
        interceptors = [] if traced else tracing.with_interceptor(())
        host = Worker(worker.client, task_queue=self.host_queue, activities=activities, interceptors=interceptors)
        async with host:
            yield

    async def _worker_resources(self) -> AsyncIterator[None]:
        """Before a worker polls: the plugin's own storage initialised (its migrations applied) once, and the
        app's workspaces initialised, their search indexes kept in the storage; when the last worker stops, the
        workspaces are stopped (their commands killed, `paused`: a worker started again in this process resumes
        them). Destroying them is the app owner's call (`Workspace.destroy()`)."""
        async with self._init_lock:
            if self._owns_storage and self.storage is not None and not self._initialised:
                await self.storage.init()
                self._initialised = True
            if self._workers_running == 0 and self.app is not None:
                for ws in self.app.workspaces.values():
                    ws.share_search_index(self.storage)  # every worker answers searches from the same index
                    if ws.status != "ready":
                        await ws.init()
            self._workers_running += 1
        try:
            yield
        finally:
            async with self._init_lock:
                self._workers_running -= 1
                if self._workers_running == 0 and self.app is not None:
                    for ws in self.app.workspaces.values():
                        await ws.stop()

    def _with_keel_payloads(self, existing: DataConverter | None) -> DataConverter:
        """The caller's converter with Keel's payload converter (pydantic, strict input errors) and, unless it
        has its own, Keel's payload store; keeps its codec and failure converter."""
        if existing is None:
            return data_converter(self.payloads)
        return dataclasses.replace(
            existing,
            payload_converter_class=KeelPayloadConverter,
            external_storage=existing.external_storage or external_storage(self.payloads),
        )

    async def aclose(self) -> None:
        """Close the storage the plugin opened itself (a passed-in storage is the caller's to close)."""
        if self._owns_storage and self.storage is not None:
            await self.storage.close()


@contextlib.asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


@contextlib.asynccontextmanager
async def _healing(worker: Worker) -> AsyncIterator[None]:
    """While the worker runs: its queue's runs stuck on a task no worker can complete, reset (`stuck_tasks`)."""
    if not stuck_tasks.enabled():
        yield
        return
    healing = asyncio.create_task(stuck_tasks.keep_healing(worker.client, worker.task_queue))
    try:
        yield
    finally:
        healing.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):  # `keep_healing` logged what it met
            await healing


__all__ = ["SANDBOX_ENV", "SANDBOX_PASSTHROUGH", "KeelPlugin", "keel_workflows_runner", "sandboxed_runner"]
