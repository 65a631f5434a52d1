"""Build and run a Keel worker for an app: `python worker.py --app myproject.app:app`."""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import signal
import sys
from collections.abc import Sequence

from temporalio.client import Client
from temporalio.worker import Interceptor, UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from keel.activities import AgentActivities
from keel.app import App, load_app
from keel.client.connection import DEFAULT_TASK_QUEUE, connect, task_queue
from keel.storage import Storage, open_storage
from keel.workflows import WORKFLOWS

SANDBOX_PASSTHROUGH = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "keel.protocol",
    "keel.workflows.contracts",
    "keel.workflows.converter",
    "keel.workflows.options",
    "keel.workflows.search_attributes",
)
"""Modules shared with the workflow sandbox instead of re-imported for each workflow run: they only define
models, constants and a converter (no state, no I/O), and re-importing the contract models cost ~45 ms of
schema building per new run (bench/README.md)."""


SANDBOX_ENV = "KEEL_WORKFLOW_SANDBOX"


def workflow_runner(sandboxed: bool | None = None) -> WorkflowRunner:
    """The runner for Keel's workflows: Temporal's sandbox when `sandboxed` (default: $KEEL_WORKFLOW_SANDBOX=1).

    Keel's workflows are Keel's own code, never an app's: agents and tools run in activities, and dynamic
    workflows are data. The sandbox is how that code is checked for non-determinism: the test suite runs every
    workflow under it and replays recorded histories with it. Production workers run the same code without it,
    because the sandbox re-enters its module context for every payload of every workflow task (in temporalio
    1.35), which costs 3-6 ms of worker CPU per agent step, a quarter of its wall time (bench/README.md).
    """
    if sandboxed is None:
        sandboxed = os.environ.get(SANDBOX_ENV, "").lower() in ("1", "true", "yes")
    if not sandboxed:
        return UnsandboxedWorkflowRunner()
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
    )


def build_worker(
    client: Client,
    app: App,
    storage: Storage,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    max_cached_workflows: int = 1000,
    interceptors: Sequence[Interceptor] = (),
    activity_executor: concurrent.futures.Executor | None = None,
    sandboxed: bool | None = None,
) -> Worker:
    """A worker running Keel's workflows and the app's activities on `task_queue` (`sandboxed`: see
    `workflow_runner`)."""
    activities = AgentActivities(app, storage)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=activities.all(),
        workflow_runner=workflow_runner(sandboxed),
        max_cached_workflows=max_cached_workflows,
        interceptors=interceptors,
        activity_executor=activity_executor,
    )


async def run_worker(app_ref: str | None, address: str | None, namespace: str | None, queue: str | None) -> None:
    app = load_app(app_ref)
    client = await connect(address, namespace)
    storage = open_storage()
    await storage.init()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        worker = build_worker(client, app, storage, task_queue=queue or task_queue())
        async with worker:
            print(f"keel worker: task queue {worker.task_queue!r}, agents: {', '.join(app.agents)}", flush=True)
            await stop.wait()
    finally:
        await storage.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="worker.py", description=__doc__)
    parser.add_argument("--app", help="app reference module:attr (default: $KEEL_APP or the demo app)")
    parser.add_argument("--address", help="Temporal address (default: $KEEL_TEMPORAL_ADDRESS or 127.0.0.1:7233)")
    parser.add_argument("--namespace", help="Temporal namespace (default: $KEEL_NAMESPACE or default)")
    parser.add_argument("--task-queue", help="task queue (default: $KEEL_TASK_QUEUE or keel)")
    args = parser.parse_args(argv)
    asyncio.run(run_worker(args.app, args.address, args.namespace, args.task_queue))
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300: a Temporal client process can crash at interpreter exit


if __name__ == "__main__":
    main()
