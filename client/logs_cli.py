"""`keel logs RUN`: a run's log records, kept in storage by its workers (`KEEL_LOGS=info` on the worker), one line
each in the order they were logged.

    keel logs run-6b11...              # time, level, step and tool, logger, message, trace id
    keel logs run-6b11... --level warn # warnings and errors only
    keel logs run-6b11... --json       # Mastra's records, as `/api/logs/:runId?transportId=keel` serves them
"""

from __future__ import annotations

import argparse
import json

from keel.client.log_records import legacy_record, line
from keel.storage.logs import LEVELS, LogQuery

MAX_RECORDS = 100_000


async def cmd_logs(args: argparse.Namespace) -> int:
    from keel.client.cli import CliError, open_store

    levels = LEVELS[LEVELS.index(args.level) :] if args.level else None
    query = LogQuery(run_id=args.run_id, levels=levels)
    store = await open_store()
    try:
        logs, _ = await store.list_logs(query, limit=args.limit or MAX_RECORDS)
    finally:
        await store.close()
    if not logs:
        raise CliError(
            f"No log records of {args.run_id} in storage: run the worker with KEEL_LOGS=info (or debug, warn, "
            "error); records are kept KEEL_LOG_RETENTION_HOURS (72)"
        )
    if args.json:
        print(json.dumps([legacy_record(log) for log in logs], indent=2))
    else:
        print("\n".join(line(log) for log in logs))
    return 0


__all__ = ["cmd_logs"]
