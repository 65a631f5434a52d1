"""`keel blobs`: what the payload store holds and the sweep that deletes the blobs no execution can reference.

    keel blobs stats                 # a dry run of the sweep: blobs, bytes, and why each is kept
    keel blobs sweep [--dry-run]     # runs the `BlobSweep` workflow (in the Temporal UI) and prints its report
    keel blobs schedule --every 24   # a Temporal Schedule (`keel-blob-sweep`) that sweeps every 24 hours
    keel blobs schedule --delete

A blob is deleted when every workflow it belongs to is gone from Temporal (past the namespace's retention, or
deleted) and it was last put more than `--grace` seconds ago; a blob of an open or retained execution (a run
suspended for days included) is kept.
"""

from __future__ import annotations

import argparse
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

from keel.protocol import names
from keel.protocol.blob_sweep import DEFAULT_GRACE_SECONDS, BlobSweep, SweepRequest

if TYPE_CHECKING:
    from keel.client.keel_client import KeelClient


async def run_sweep(keel: KeelClient, request: SweepRequest) -> BlobSweep:
    """The `BlobSweep` workflow on a worker of the client's task queue, to its end."""
    await keel.wait_for_worker()
    kind = "dry-run" if request.dry_run else "sweep"
    result: BlobSweep = await keel.temporal.execute_workflow(
        names.BLOB_SWEEP,
        request,
        id=f"{names.BLOB_SWEEP_SCHEDULE}-{kind}-{uuid.uuid4().hex[:12]}",
        task_queue=keel.task_queue,
        result_type=BlobSweep,
    )
    return result


async def schedule_sweep(keel: KeelClient, every: timedelta, grace_seconds: int = DEFAULT_GRACE_SECONDS) -> str:
    """Create (or replace) the Schedule `keel-blob-sweep` that runs a sweep every `every`; its id."""
    from temporalio.client import (
        Schedule,
        ScheduleActionStartWorkflow,
        ScheduleAlreadyRunningError,
        ScheduleIntervalSpec,
        ScheduleOverlapPolicy,
        SchedulePolicy,
        ScheduleSpec,
        ScheduleUpdate,
        ScheduleUpdateInput,
    )

    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            names.BLOB_SWEEP,
            SweepRequest(grace_seconds=grace_seconds),
            id=f"{names.BLOB_SWEEP_SCHEDULE}-run",
            task_queue=keel.task_queue,
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    try:
        await keel.temporal.create_schedule(names.BLOB_SWEEP_SCHEDULE, schedule)
    except ScheduleAlreadyRunningError:

        def replace(_: ScheduleUpdateInput) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=schedule)

        await keel.temporal.get_schedule_handle(names.BLOB_SWEEP_SCHEDULE).update(replace)
    return names.BLOB_SWEEP_SCHEDULE


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def report(found: BlobSweep) -> str:
    verb = "would delete" if found.dry_run else "deleted"
    return "\n".join(
        [
            f"blobs: {found.blobs} ({_mib(found.bytes)})",
            f"kept, an execution may reference them: {found.referenced}",
            f"kept, put within the grace period: {found.recent}",
            f"kept, no owner recorded: {found.unowned}",
            f"{verb}: {found.deleted} ({_mib(found.deleted_bytes)})",
        ]
    )


async def cmd_blobs(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from keel.client.cli import connect_client

    keel = await connect_client(args)
    grace = DEFAULT_GRACE_SECONDS if args.grace is None else args.grace
    if args.action == "schedule":
        if args.delete:
            await keel.temporal.get_schedule_handle(names.BLOB_SWEEP_SCHEDULE).delete()
            print(f"deleted the schedule {names.BLOB_SWEEP_SCHEDULE}")
            return 0
        schedule_id = await schedule_sweep(keel, timedelta(hours=args.every), grace)
        print(f"schedule {schedule_id}: a sweep every {args.every:g} h (`temporal schedule describe -s {schedule_id}`)")
        return 0
    found = await run_sweep(keel, SweepRequest(dry_run=args.dry_run or args.action == "stats", grace_seconds=grace))
    print(json.dumps(dataclasses.asdict(found)) if args.json else report(found))
    return 0
