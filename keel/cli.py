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


COMMANDS = {
    **dev_stack.COMMANDS,
    "worker": client_cli.Command(
        "run a worker for an app (--app module:attr) until Ctrl-C; waits for Temporal and the database",
        cmd_worker,
        options=("temporal", "queue", "app", "join"),
    ),
    **client_cli.COMMANDS,
}


def main(argv: Sequence[str] | None = None) -> None:
    client_cli.main(argv, COMMANDS)


if __name__ == "__main__":
    main()
