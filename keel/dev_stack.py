"""`keel dev` and `keel demo`: the local stack in one process (a dev server, started or reused, and a worker for
the app), above both `keel.client` and the worker, so the client package never imports worker code."""

from __future__ import annotations

import argparse
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
    from keel.client.devserver import DevServer, DevServerConfig
    from keel.storage import open_storage
    from keel.worker import build_worker, check_queue_free, quiet_activity_failures

    quiet_activity_failures()
    app = load_app(getattr(args, "app", None))
    server = DevServer(DevServerConfig(codec_endpoint=codec_endpoint))
    await server.start()
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
        server.stop()


async def cmd_dev(args: argparse.Namespace) -> int:
    from keel.client.api import api_for_settings
    from keel.client.api.server import serving
    from keel.client.devserver import wait_for_ui

    settings = settings_of(args)

    async def serve(keel: KeelClient, app: App, server: DevServer, storage: Storage) -> int:
        await wait_for_ui(server.cfg)
        async with serving(api_for_settings(app, keel, storage, settings), settings.api_host, settings.api_port) as url:
            origin = "started" if server.owned else "reused"
            print(f"Temporal {origin} at {server.cfg.address}; UI {server.cfg.ui_url}", flush=True)
            print(f"worker on task queue {keel.task_queue!r}; agents: {', '.join(app.agents)}", flush=True)
            print(api_banner(url), flush=True)
            print("Ctrl-C stops everything", flush=True)
            await until_interrupted()
        return 0

    return await with_stack(args, serve, codec_endpoint=f"http://{settings.api_host}:{settings.api_port}/codec")


async def cmd_demo(args: argparse.Namespace) -> int:
    from keel.client.demo import run_demo

    async def demo(keel: KeelClient, app: App, server: DevServer, storage: Storage) -> int:
        return await run_demo(keel, app, server)

    return await with_stack(args, demo)


COMMANDS = {
    "dev": Command(
        "run the dev server, a worker and the HTTP API (:4111) in the foreground (Ctrl-C stops all)",
        cmd_dev,
        options=("queue", "app", "join", "api"),
    ),
    "demo": Command("run the demo end to end (approve one run, decline another) and exit", cmd_demo),
}
