"""The `keel` command: the client commands (`keel.client.cli`), the local stack (`dev`, `demo`) and `worker`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from keel import dev_stack
from keel.client import cli as client_cli


async def cmd_worker(args: argparse.Namespace) -> int:
    from keel.worker import run_worker

    await run_worker(args.app, args.address, args.namespace, args.task_queue, join=args.join)
    return 0


async def cmd_serve(args: argparse.Namespace) -> int:
    """`keel serve`, and with `--worker` a worker for the app in the same process, on the same Temporal client:
    a run the API starts is then handed to that worker in the start's answer (eager start)."""
    if not args.worker:
        return await client_cli.cmd_serve(args)
    from keel.app import load_app
    from keel.client.api import api_for_settings
    from keel.client.api.server import serving
    from keel.storage import StorageUnavailable, open_storage
    from keel.worker import build_worker, check_queue_free, quiet_activity_failures, waiting_for

    quiet_activity_failures()
    app = load_app(args.app)
    settings = client_cli.settings_of(args)
    storage = open_storage()
    await waiting_for(f"storage ({type(storage).__name__})", storage.init, (StorageUnavailable,))
    try:
        keel = await client_cli.connect_client(args, app)
        if not args.join:
            await check_queue_free(keel.temporal, keel.task_queue)
        async with build_worker(keel.temporal, app, storage, task_queue=keel.task_queue):
            api = api_for_settings(app, keel, storage, settings)
            async with serving(api, settings.api_host, settings.api_port) as url:
                await client_cli.until_interrupted(
                    f"{client_cli.api_banner(url)}; worker on task queue {keel.task_queue!r}; Temporal at "
                    f"{settings.temporal_address}; Ctrl-C stops both"
                )
    finally:
        await storage.close()
    return 0


def _serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--worker", action="store_true", help="also run a worker for the app in this process (runs start eagerly)"
    )


COMMANDS = {
    **dev_stack.COMMANDS,
    "worker": client_cli.Command(
        "run a worker for an app (--app module:attr) until Ctrl-C; waits for Temporal and the database",
        cmd_worker,
        options=("temporal", "queue", "app", "join"),
    ),
    **client_cli.COMMANDS,
    "serve": client_cli.Command(
        "serve the HTTP API (Mastra's routes) for an app until Ctrl-C; needs Temporal and a worker (--worker: "
        "run one in this process)",
        cmd_serve,
        _serve_args,
        options=("temporal", "queue", "app", "api", "join"),
    ),
}


def main(argv: Sequence[str] | None = None) -> None:
    client_cli.main(argv, COMMANDS)


if __name__ == "__main__":
    main()
