"""Build and run a Keel worker for an app: `keel worker --app myproject.app:app` (or, from a checkout,
`python worker.py --app myproject.app:app`)."""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from temporalio.client import Client
from temporalio.worker import Interceptor, Worker

from keel.app import App, load_app
from keel.client import KeelClient, QueueInUse, metrics
from keel.client.connection import connect, task_queue, temporal_address
from keel.plugin import KeelPlugin
from keel.protocol import names, tracing
from keel.storage import Storage, StorageUnavailable, open_storage
from keel.workflows.options import DEFAULT_OPTIONS, AgentActivityOptions


def build_worker(
    client: Client,
    app: App,
    storage: Storage,
    *,
    task_queue: str = names.DEFAULT_TASK_QUEUE,
    options: AgentActivityOptions = DEFAULT_OPTIONS,
    workflows: Sequence[type] = (),
    max_cached_workflows: int = 1000,
    interceptors: Sequence[Interceptor] = (),
    activity_executor: concurrent.futures.Executor | None = None,
    sandboxed: bool | None = None,
) -> Worker:
    """A worker on `task_queue` running Keel's workflows, the app's activities on `storage` (initialised by the
    caller) and `workflows` of your own, through `KeelPlugin`.

    Keel's workflows run unsandboxed unless `sandboxed` (default `$KEEL_WORKFLOW_SANDBOX`); yours always run in
    Temporal's sandbox. A client that already carries a `KeelPlugin` is not given a second one.
    """
    plugins = (
        []
        if any(isinstance(p, KeelPlugin) for p in client.config()["plugins"])
        else [KeelPlugin(app, storage=storage, options=options, sandbox_keel_workflows=sandboxed)]
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(workflows),
        plugins=plugins,
        max_cached_workflows=max_cached_workflows,
        interceptors=interceptors,
        activity_executor=activity_executor,
    )


T = TypeVar("T")


class _OneLineActivityFailures(logging.Filter):
    """The SDK logs every failed activity attempt at WARNING with its traceback (28 lines for a rate-limited
    model call that will be retried). Keep one line at WARNING, and the traceback at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "__temporal_error_identifier", None) != "ActivityFailure" or not record.exc_info:
            return True
        err = record.exc_info[1]
        if _TRACEBACKS.isEnabledFor(logging.DEBUG):
            _TRACEBACKS.debug("%s", record.getMessage(), exc_info=record.exc_info)
        record.msg = f"{record.getMessage()}: {' '.join(str(err).split())}"
        record.args = ()
        record.exc_info = None
        return True


_TRACEBACKS = logging.getLogger("keel.worker.tracebacks")


def quiet_activity_failures() -> None:
    """Install the one-line failure log on temporalio's activity logger (once per process)."""
    logger = logging.getLogger("temporalio.activity")
    if not any(isinstance(f, _OneLineActivityFailures) for f in logger.filters):
        logger.addFilter(_OneLineActivityFailures())


async def waiting_for(what: str, attempt: Callable[[], Awaitable[T]], errors: tuple[type[Exception], ...]) -> T:
    """`attempt()`, retried with backoff (0.5 s doubling to 30 s) while it raises one of `errors`, saying on
    stderr what the worker waits for: a worker started before its server or database waits instead of exiting."""
    delay = 0.5
    while True:
        try:
            return await attempt()
        except errors as err:
            detail = str(err).splitlines()[0] if str(err) else type(err).__name__
            print(f"keel worker: waiting for {what} ({detail}); retrying in {delay:g} s", file=sys.stderr, flush=True)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)


async def check_queue_free(client: Client, task_queue: str) -> None:
    """Raise `QueueInUse` when other workers poll `task_queue` (a second app there would take half the runs)."""
    pollers = await KeelClient(client, task_queue=task_queue).workers()
    if pollers:
        raise QueueInUse(task_queue, [f"{p.identity} (polled {p.seconds_since_poll:.0f} s ago)" for p in pollers])


async def serve(app: App, client: Client, *, task_queue: str) -> None:
    """Run a worker for `app` on `task_queue`, with the storage of `$KEEL_STORAGE_URL`, until SIGINT or SIGTERM.
    The storage's migrations are applied first (waiting while the database cannot be reached)."""
    quiet_activity_failures()
    storage = open_storage()
    await waiting_for(f"storage ({type(storage).__name__})", storage.init, (StorageUnavailable,))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with build_worker(client, app, storage, task_queue=task_queue) as worker:
            print(f"keel worker: task queue {worker.task_queue!r}, agents: {', '.join(app.agents)}", flush=True)
            await stop.wait()
    finally:
        await storage.close()


async def run_worker(
    app_ref: str | None, address: str | None, namespace: str | None, queue: str | None, *, join: bool = False
) -> None:
    """Load the app, connect to Temporal (waiting until it answers), check no other worker polls the task queue
    (unless `join`: scaling out the same app), and `serve`."""
    app = load_app(app_ref)
    if endpoint := metrics.configure():  # before the first client connects: it keeps the runtime it connected with
        print(f"keel worker: metrics at {endpoint}", flush=True)
    where = address or temporal_address()
    client = await waiting_for(f"Temporal at {where}", lambda: connect(where, namespace), (RuntimeError,))
    task_queue_ = queue or task_queue()
    if not join:
        await check_queue_free(client, task_queue_)
    await serve(app, client, task_queue=task_queue_)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="worker.py", description=__doc__)
    parser.add_argument("--app", help="app reference module:attr (default: $KEEL_APP or the demo app)")
    parser.add_argument("--address", help="Temporal address (default: $KEEL_TEMPORAL_ADDRESS or 127.0.0.1:7233)")
    parser.add_argument("--namespace", help="Temporal namespace (default: $KEEL_NAMESPACE or default)")
    parser.add_argument("--task-queue", help="task queue (default: $KEEL_TASK_QUEUE or keel)")
    parser.add_argument("--join", action="store_true", help="run beside workers already polling the task queue")
    args = parser.parse_args(argv)
    # The current directory is importable, so `--app myproject.app:app` works from the project (like uvicorn).
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        asyncio.run(run_worker(args.app, args.address, args.namespace, args.task_queue, join=args.join))
    except QueueInUse as err:
        print(f"error: {err}", file=sys.stderr)
        os._exit(2)
    finally:
        tracing.shutdown()  # the spans still buffered: os._exit runs no exit handler
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300: a Temporal client process can crash at interpreter exit


if __name__ == "__main__":
    main()
