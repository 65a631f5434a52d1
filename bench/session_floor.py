"""The engine's floor for a session turn: what Temporal itself charges for a turn that is a child run of a
long-lived session workflow, against the same run started on its own, with no Keel code in either.

    .venv/bin/python -m bench.session_floor            # ~1 min
    .venv/bin/python -m bench.session_floor --quick

One tuned dev server, one process holding the client and the worker (the shape of `keel dev`). Each turn is
`FloorGenerate` of `bench/floor.py` (floor (b): the commands of Keel's one-tool generate with no work in them):

- `bare`: the run started on its own, eager start, then its result (how Keel starts a bare `AgentRun`);
- `child`: an update on one open `FloorSession` workflow, which starts the run as its child and answers when the
  child has ended (how a Keel session runs a turn: the `send` update that waits, `SendMessage.wait`);
- `child, result by client`: the update answers once the child has started, and the client waits for the child's
  result itself (the session's last workflow task, the child's end, off the turn's path).

Runs alternate, one at a time (a session runs one turn at a time). Reported: the median ms per turn and the
dev server's CPU ms per turn, and each child shape over `bare`: issue 21's target (a session turn at most 1.1 times a
bare run) measured on the engine alone.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from bench.floor import FLOOR_QUEUE, FloorGenerate, keel_attributes, noop, server_cpu_seconds
from bench.harness import fresh_stack
from keel.client.devserver import DevServer
from keel.plugin import keel_workflows_runner


@workflow.defn(name="FloorSession", sandboxed=False)
class FloorSession:
    """A session that only runs turns: each `turn` update starts one child `FloorGenerate`."""

    def __init__(self) -> None:
        self._turns = 0

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)  # open until the bench terminates it

    def _child_id(self) -> str:
        self._turns += 1
        return f"{workflow.info().workflow_id}-turn-{self._turns}"

    @workflow.update
    async def turn(self, n: int) -> int:
        """Answers once the turn's child has ended."""
        return await workflow.execute_child_workflow(
            FloorGenerate.run, n, id=self._child_id(), task_queue=FLOOR_QUEUE, execution_timeout=timedelta(minutes=1)
        )

    @workflow.update
    async def start_turn(self, n: int) -> str:
        """Answers once the turn's child has started, with its id."""
        child = await workflow.start_child_workflow(
            FloorGenerate.run, n, id=self._child_id(), task_queue=FLOOR_QUEUE, execution_timeout=timedelta(minutes=1)
        )
        return child.id


async def bare(client: Client) -> None:
    handle = await client.start_workflow(
        FloorGenerate.run,
        1,
        id=f"floor-{uuid.uuid4()}",
        task_queue=FLOOR_QUEUE,
        search_attributes=keel_attributes(),
        request_eager_start=True,
    )
    await handle.result()


async def child(session: WorkflowHandle[FloorSession, None]) -> None:
    await session.execute_update(FloorSession.turn, 1)


async def child_result_by_client(client: Client, session: WorkflowHandle[FloorSession, None]) -> None:
    child_id = await session.execute_update(FloorSession.start_turn, 1)
    await client.get_workflow_handle(child_id).result()


async def measure(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    times: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    async with fresh_stack("keel-bench-session-floor-") as stack:
        client, server = stack.client, stack.server
        assert isinstance(server, DevServer)
        worker = Worker(
            client,
            task_queue=FLOOR_QUEUE,
            workflows=[FloorGenerate, FloorSession],
            activities=[noop],
            workflow_runner=keel_workflows_runner(),
        )
        async with worker:
            session = await client.start_workflow(
                FloorSession.run, id=f"floor-session-{uuid.uuid4()}", task_queue=FLOOR_QUEUE
            )
            shapes: dict[str, Callable[[], Awaitable[None]]] = {
                "bare": lambda: bare(client),
                "child": lambda: child(session),
                "child, result by client": lambda: child_result_by_client(client, session),
            }
            for run in shapes.values():  # warm-up
                for _ in range(5):
                    await run()
            for rep in range(args.turns):
                names = list(shapes)
                for name in names[rep % 3 :] + names[: rep % 3]:
                    c0, t0 = server_cpu_seconds(server), time.perf_counter()
                    await shapes[name]()
                    times.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
                    cpu[name] = cpu.get(name, 0.0) + (server_cpu_seconds(server) - c0) * 1000
            await session.terminate()
    return {name: (statistics.median(ms), cpu[name] / len(ms)) for name, ms in times.items()}


def render(results: dict[str, tuple[float, float]]) -> str:
    base_ms, base_cpu = results["bare"]
    lines = [
        "| turn | ms per turn (median) | server CPU ms per turn | ms / bare | server CPU / bare |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (ms, cpu) in results.items():
        lines.append(f"| {name} | {ms:.1f} | {cpu:.1f} | {ms / base_ms:.2f} | {cpu / base_cpu:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    args.turns = 60 if args.quick else 300
    print(render(asyncio.run(measure(args))))
    print("(server CPU from /proc, in ticks of 10 ms: a per-turn mean over many turns)", file=sys.stderr)


if __name__ == "__main__":
    main()
