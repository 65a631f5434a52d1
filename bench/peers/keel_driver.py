"""Keel's driver for the peers bench, a process of its own: `KeelClient.start_run` + `result` per run, commands
from the parent on stdin (`bench.peers.shared.serve_driver`).

    .venv/bin/python -m bench.peers.keel_driver --address HOST:PORT --task-queue Q
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from bench.peers.shared import final_text, prompt, serve_driver
from keel.client import KeelClient
from keel.client.connection import connect


async def drive(address: str, task_queue: str) -> None:
    keel = KeelClient(await connect(address), task_queue=task_queue)

    async def run(n: int) -> str:
        run_id = await keel.start_run("bench", prompt(n), max_steps=n + 1)
        result = await keel.result(run_id)
        if result.text != final_text(n) or len(result.tool_results) != n:
            raise RuntimeError(f"keel run {run_id}: {result.text!r}, {len(result.tool_results)} tool results")
        return run_id

    await serve_driver(run)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.keel_driver")
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    args = parser.parse_args(argv)
    asyncio.run(drive(args.address, args.task_queue))
    sys.stdout.flush()
    os._exit(0)  # sdk-python#300: a Temporal client process can crash at interpreter exit


if __name__ == "__main__":
    main()
