"""`keel dev` and `keel demo`: the local stack in one process (a dev server, started or reused, and a worker for
the app), above both `keel.client` and the worker, so the client package never imports worker code."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from keel.client.cli import Command, api_banner, connect_client, settings_of, until_interrupted

if TYPE_CHECKING:  # imported when a command runs: `keel --version` builds this module's commands too
    from keel.app import App
    from keel.client.devserver import DevServer
    from keel.client.keel_client import KeelClient
    from keel.storage import Storage

StackBody = Callable[["KeelClient", "App", "DevServer", "Storage"], Awaitable[int]]


async def with_stack(args: argparse.Namespace, body: StackBody, *, codec_endpoint: str | None = None) -> int:
    """Run `body` with a dev server (started or reused) and an in-process worker; stop what was started. A server
    started here gets `codec_endpoint` as its UI's codec."""
    from keel.app import load_app
    from keel.client import metrics
    from keel.client.devserver import DevServer, DevServerConfig
    from keel.storage import open_storage
    from keel.worker import build_worker, check_queue_free, quiet_activity_failures

    quiet_activity_failures()
    if endpoint := metrics.configure():  # before the first client connects (`keel.client.metrics`)
        print(f"metrics at {endpoint}", flush=True)
    app = load_app(getattr(args, "app", None))
    # The server runs out of the terminal's reach (its Ctrl-C and hang-up come here alone: `stopped_by_signals`),
    # so the `finally` below stops it, after the worker.
    server = DevServer(DevServerConfig(codec_endpoint=codec_endpoint))
    await server.start(own_session=True)
    try:
        storage = open_storage()  # the stack's own storage: created and migrated here
        await storage.init()
        try:
            keel = await connect_client(args, app)
            if not getattr(args, "join", False):
                await check_queue_free(keel.temporal, keel.task_queue)
            async with build_worker(keel.temporal, app, storage, task_queue=keel.task_queue):
                return await body(keel, app, server, storage)
        finally:
            await storage.close()
    finally:
        server.stop()  # not in a thread: it must run even when the loop is being cancelled


def stopped_by_signals() -> None:
    """From now on SIGTERM and SIGHUP (the terminal closed) stop the command as Ctrl-C does: its task is cancelled,
    so the `finally` blocks stop what it started (the servers run in sessions of their own, out of the terminal's
    reach), and it exits 130. Directly, not by raising SIGINT, which a shell may have set to be ignored (`keel dev
    &`). `until_interrupted` takes them over once the stack is up."""
    import asyncio
    import signal

    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, task.cancel)


async def cmd_dev(args: argparse.Namespace) -> int:
    from functools import partial

    stopped_by_signals()  # before Phoenix and S3 start too
    run: Callable[[argparse.Namespace], Awaitable[int]] = _cmd_dev
    if getattr(args, "s3", False):
        run = partial(with_local_s3, run=run)
    if getattr(args, "phoenix", False):
        run = partial(with_local_phoenix, run=run)
    return await run(args)


async def with_local_phoenix(args: argparse.Namespace, run: Callable[[argparse.Namespace], Awaitable[int]]) -> int:
    """`run(args)` with a local Arize Phoenix (`keel.client.phoenix_server`) started first (installed into its own
    virtualenv on first use) and stopped after, the stack's traces exported to it over OTLP/HTTP."""
    import asyncio
    import os
    import shlex

    from keel.client.phoenix_server import PHOENIX_VERSION, LocalPhoenix, install_phoenix, phoenix_command, tools_dir

    if phoenix_command() is None:
        print(f"installing arize-phoenix=={PHOENIX_VERSION} into {tools_dir()} (first use, or a new pin)", flush=True)
        await asyncio.to_thread(install_phoenix)
    server = LocalPhoenix(settings_of(args).data_dir / "phoenix", args.phoenix_port)
    try:
        phoenix = await asyncio.to_thread(server.start)
        ambient = dict(os.environ)
        os.environ.update(phoenix.env())
        print(
            f"Phoenix (traces) at {phoenix.url}, project {phoenix.project!r}; data in {phoenix.directory}", flush=True
        )
        # What a command in another terminal needs for its spans (a run's root among them) to land in the same
        # project: Phoenix files a whole trace under the project of its first span.
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in phoenix.env(ambient).items())
        print(f"  in other terminals: export {exports}", flush=True)
        return await run(args)
    finally:
        from keel.protocol import tracing

        tracing.flush()  # the stack's last spans, before their receiver goes
        server.stop()  # not in a thread: it must run even when the loop is being cancelled


async def with_local_s3(args: argparse.Namespace, run: Callable[[argparse.Namespace], Awaitable[int]]) -> int:
    """`run(args)` with a local S3 server (`keel.client.s3_server`) started first and stopped after, the stack's
    payload store and AWS variables pointing at it."""
    import asyncio
    import os

    from keel.client.s3_server import LocalS3Server

    server = LocalS3Server(settings_of(args).data_dir, args.s3_port)
    try:
        s3 = await asyncio.to_thread(server.start)
        os.environ.update(s3.env())
        print(f"S3 (SeaweedFS) at {s3.endpoint}, bucket {s3.bucket!r}, data in {s3.directory}", flush=True)
        print(f"  AWS_ACCESS_KEY_ID={s3.access_key} AWS_SECRET_ACCESS_KEY={s3.secret_key}", flush=True)
        print(f"  KEEL_PAYLOAD_STORE={s3.payload_store}", flush=True)
        return await run(args)
    finally:
        server.stop()  # not in a thread: it must run even when the loop is being cancelled


def _dev_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--s3",
        action="store_true",
        help="also run a local S3 server (SeaweedFS, data in $KEEL_DATA_DIR/seaweedfs) and keep the stack's large "
        "payloads there (KEEL_PAYLOAD_STORE and AWS_* are set for the stack)",
    )
    parser.add_argument("--s3-port", type=int, default=8333, help="the local S3 server's port (default 8333)")
    parser.add_argument(
        "--phoenix",
        action="store_true",
        help="also run Arize Phoenix (the trace UI; installed into .venv/tools/phoenix on first use, data in "
        "$KEEL_DATA_DIR/phoenix) and export the stack's traces to it over OTLP/HTTP",
    )
    parser.add_argument("--phoenix-port", type=int, default=6006, help="Phoenix's UI and OTLP/HTTP port (default 6006)")


def other_agents_warning(foreign: dict[str, int], task_queue: str) -> str:
    """What `keel dev` says when open runs on its queue are of agents its app lacks (another app served this data
    dir and queue before): this worker fails them when they next run a step."""
    runs = sum(foreign.values())
    agents = ", ".join(sorted(foreign))
    return (
        f"warning: {runs} open run{'s' if runs > 1 else ''} on task queue {task_queue!r} {'are' if runs > 1 else 'is'} "
        f"of agents this app lacks ({agents}): this worker fails them when they next run a step; serve them with "
        "their app (--app), or give this app another KEEL_DATA_DIR or --task-queue"
    )


async def _cmd_dev(args: argparse.Namespace) -> int:
    from keel.client.api import api_for_settings
    from keel.client.api.server import serving
    from keel.client.devserver import wait_for_ui

    settings = settings_of(args)

    async def serve(keel: KeelClient, app: App, server: DevServer, storage: Storage) -> int:
        await wait_for_ui(server.cfg)
        async with serving(api_for_settings(app, keel, storage, settings), settings.api_host, settings.api_port) as url:
            origin = "started" if server.owned else "reused"
            if server.taken_over:
                origin = "taken over (a killed keel dev left it running)"
            print(f"Temporal {origin} at {server.cfg.address}; UI {server.cfg.ui_url}", flush=True)
            print(f"worker on task queue {keel.task_queue!r}; agents: {', '.join(app.agents)}", flush=True)
            with contextlib.suppress(Exception):  # a warning: visibility's answer never holds the stack up
                if foreign := await keel.runs_of_other_agents():
                    print(other_agents_warning(foreign, keel.task_queue), flush=True)
            print(api_banner(url), flush=True)
            await until_interrupted("Ctrl-C stops everything")
        return 0

    return await with_stack(args, serve, codec_endpoint=f"http://{settings.api_host}:{settings.api_port}/codec")


async def cmd_demo(args: argparse.Namespace) -> int:
    from keel.client.demo import run_demo

    async def demo(keel: KeelClient, app: App, server: DevServer, storage: Storage) -> int:
        return await run_demo(keel, app, server)

    stopped_by_signals()
    return await with_stack(args, demo)


COMMANDS = {
    "dev": Command(
        "run the dev server, a worker and the HTTP API (:4111) in the foreground (Ctrl-C stops all)",
        cmd_dev,
        _dev_args,
        options=("queue", "app", "join", "api"),
    ),
    "demo": Command(
        "run the demo end to end (approve one run, decline another) and exit", cmd_demo, options=("queue",)
    ),
}
