"""`python -m bench.chaos [--minutes M] [--seed N] [--in-flight K] [--json PATH] [--plant retried-charge]`: a chaos
run (bench/chaos/driver.py); prints the summary table, exits 1 if anything was lost, duplicated, wrong or stuck."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from bench.chaos.driver import Config, chaos, summary


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the mix runs (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="the seed of the mix and of the faults (default 1)")
    parser.add_argument("--in-flight", type=int, default=20, help="runs kept in flight (default 20)")
    parser.add_argument("--fault-every", type=float, default=6.0, help="mean seconds between faults (default 6)")
    parser.add_argument("--crash-one-in", type=int, default=6, help="shop runs crashing after charging: 1 in N")
    parser.add_argument("--plant", default="", choices=["", "retried-charge"], help="a planted defect to catch")
    parser.add_argument("--json", type=Path, help="write the report here as JSON")
    args = parser.parse_args()
    cfg = Config(
        minutes=args.minutes,
        seed=args.seed,
        in_flight=args.in_flight,
        fault_every=args.fault_every,
        plant=args.plant,
        crash_one_in=args.crash_one_in,
        out=args.json,
    )
    report = asyncio.run(_with_task_dump(chaos(cfg)))
    print(summary(report), flush=True)
    return 0 if report.ok else 1


async def _with_task_dump(main: Any) -> Any:
    """`kill -USR1 <pid>` prints where every task of the run waits (a run that hangs says why)."""
    loop = asyncio.get_running_loop()

    def dump() -> None:
        for task in asyncio.all_tasks(loop):
            task.print_stack(limit=6, file=sys.stderr)

    loop.add_signal_handler(signal.SIGUSR1, dump)
    return await main


if __name__ == "__main__":
    sys.exit(main())
