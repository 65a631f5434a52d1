"""`keel workflows list|show|save FILE|delete|run ID --input JSON|resume RUN --step S --data JSON|reset RUN --to-step S|
runs ID|counts`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keel.client.errors import KeelClientError

if TYPE_CHECKING:  # imported when an action runs: `keel` builds these actions' parsers for every command
    from keel.client.workflows import RunStatus, Workflows
    from keel.storage import Storage


class WorkflowCommandError(KeelClientError):
    """A workflows command's bad input (a file that is not JSON, --input that is not an object)."""


def arguments(p: argparse.ArgumentParser, add_options: Callable[[argparse.ArgumentParser, Any], None]) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="what to do")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help, description=help)
        add_options(parser, ("temporal", "queue", "app"))
        parser.add_argument("--json", action="store_true", help="print JSON")
        return parser

    action("list", "the app's code workflows and the stored ones (latest versions)").add_argument(
        "--status", choices=["active", "archived"], help="only stored workflows with this status"
    )
    show = action("show", "a stored workflow's definition")
    show.add_argument("workflow_id", help="the stored workflow's id")
    show.add_argument("--version", type=int, help="a version (default: the latest)")
    save = action("save", "check a definition (every error with its JSON path) and store it as a new version")
    save.add_argument("file", help="a JSON file with one definition")
    save.add_argument("--author", help="recorded as its author")
    save.add_argument("--archived", action="store_true", help="store it archived (its schedules off)")
    action("delete", "hide a stored workflow and delete its schedules (runs in flight finish)").add_argument(
        "workflow_id", help="the stored workflow's id"
    )
    run = action("run", "start a stored workflow, wait until it ends or suspends")
    run.add_argument("workflow_id", help="the workflow's id (stored or code)")
    run.add_argument("--input", default="{}", help="its inputData, a JSON object (default {})")
    run.add_argument("--run-id", help="the run's id (default wf-<workflow>-<uuid>)")
    run.add_argument("--resource-id", help="who the run is for (listed with: runs --resource-id)")
    run.add_argument(
        "--request-context", help="the request context, a JSON object (mapping and template steps read it)"
    )
    resume = action("resume", "resume a suspended step, wait until the run ends or suspends again")
    resume.add_argument("run_id", help="the suspended run")
    resume.add_argument("--step", required=True, help="the suspended step's id")
    resume.add_argument("--data", default="{}", help="its resumeData, JSON (default {})")
    reset = action(
        "reset", "time travel: run a run again from a step (Temporal's reset), wait until it ends or suspends"
    )
    reset.add_argument("run_id", help="the run (of a stored workflow)")
    reset.add_argument(
        "--to-step", required=True, metavar="STEP", help="the step's id: it and every later step run again"
    )
    reset.add_argument("--input", help="the step's new input, JSON (default: the input it had)")
    reset.add_argument("--resume-data", help="resume data for the step's tool, JSON (a step that suspends)")
    reset.add_argument("--request-context", help="merged into the run's request context from the step on, JSON")
    reset.add_argument("--reason", help="why: shown with the reset in the Temporal UI")
    runs = action("runs", "a workflow's runs, newest first, from Temporal")
    runs.add_argument("workflow_id", help="the workflow's id (stored or code)")
    runs.add_argument(
        "--status", choices=["running", "suspended", "success", "failed", "canceled"], help="only runs in this state"
    )
    runs.add_argument("--resource-id", help="only runs for this resource")
    runs.add_argument("--from", dest="from_date", type=datetime.fromisoformat, help="started at or after (ISO 8601)")
    runs.add_argument("--to", dest="to_date", type=datetime.fromisoformat, help="started at or before (ISO 8601)")
    runs.add_argument("--offset", type=int, default=0, help="skip this many (default 0)")
    runs.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    action("counts", "running and suspended runs of each stored workflow")


async def run(args: argparse.Namespace, connect: Callable[..., Any], settings_storage: Callable[[], Storage]) -> int:
    from keel.app import load_app
    from keel.client.workflows import Workflows

    app = load_app(args.app)
    storage = settings_storage()
    await storage.init()  # saving writes; a reader's listing works on a migrated database too
    try:
        keel = None if args.action in ("list", "show") else await connect(args, app)  # those read storage only
        return await _ACTIONS[args.action](Workflows(storage, app, keel), args)
    finally:
        await storage.close()


async def _list(w: Workflows, args: argparse.Namespace) -> int:
    found = [f for f in await w.listing() if args.status is None or f.get("status", "active") == args.status]
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for f in found:
        if f["origin"] == "code":
            print(f"{f['id']}  code")
        else:
            print(f"{f['id']}  v{f['version']} ({f['hash']})  {f['status']}  updated {f['updatedAt'][:19]}")
    return 0


async def _show(w: Workflows, args: argparse.Namespace) -> int:
    stored = await w.get(args.workflow_id, args.version)
    print(json.dumps(stored.model_dump(mode="json", by_alias=True) if args.json else stored.definition, indent=2))
    return 0


async def _save(w: Workflows, args: argparse.Namespace) -> int:
    from keel.app.workflow_checks import InvalidDefinition

    try:
        raw = json.loads(Path(args.file).read_text())
    except OSError as err:
        raise WorkflowCommandError(f"Cannot read {args.file}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise WorkflowCommandError(f"{args.file} is not JSON: {err}") from None
    try:
        stored = await w.save(raw, author_id=args.author, status="archived" if args.archived else "active")
    except InvalidDefinition as err:
        print(f"error: {str(err).splitlines()[0]}", flush=True)
        for error in err.errors:
            print(f"  {error}", flush=True)
        return 2
    print(f"saved {stored.workflow_id} v{stored.version} ({stored.hash})")
    return 0


async def _delete(w: Workflows, args: argparse.Namespace) -> int:
    await w.delete(args.workflow_id)
    print(f"deleted {args.workflow_id}")
    return 0


def _object(flag: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as err:
        raise WorkflowCommandError(f"{flag} is not JSON: {err}") from None


def _report(status: RunStatus, as_json: bool) -> int:
    state = status.state
    if as_json:
        print(json.dumps({"runId": status.run_id, **state.model_dump(mode="json", by_alias=True)}, indent=2))
    elif state.status == "suspended":
        waiting = {k: s.suspend_payload for k, s in state.steps.items() if s.status == "suspended"}
        print(f"run {status.run_id} is suspended: {json.dumps(waiting)}")
        for step in waiting:
            print(f"  resume with: keel workflows resume {status.run_id} --step {step} --data '<json>'")
    elif state.status == "success":
        print(f"run {status.run_id} succeeded: {json.dumps(state.result)}")
    else:
        print(f"run {status.run_id} {state.status}: {state.error or ''}".rstrip())
    return 1 if state.status == "failed" else 0


async def _run(w: Workflows, args: argparse.Namespace) -> int:
    input_data = _object("--input", args.input)
    if not isinstance(input_data, dict):
        raise WorkflowCommandError("--input must be a JSON object (the workflow's inputData)")
    context = _object("--request-context", args.request_context) if args.request_context else None
    if context is not None and not isinstance(context, dict):
        raise WorkflowCommandError("--request-context must be a JSON object")
    status = await w.start_and_settle(
        args.workflow_id, input_data, run_id=args.run_id, resource_id=args.resource_id, request_context=context
    )
    return _report(status, args.json)


async def _resume(w: Workflows, args: argparse.Namespace) -> int:
    await w.resume(args.run_id, args.step, _object("--data", args.data))
    return _report(await w.settle(args.run_id), args.json)


async def _reset(w: Workflows, args: argparse.Namespace) -> int:
    from keel.client.workflow_time_travel import time_travel

    context = _object("--request-context", args.request_context) if args.request_context else None
    if context is not None and not isinstance(context, dict):
        raise WorkflowCommandError("--request-context must be a JSON object")
    travel = await time_travel(
        w.keel,
        w.storage,
        args.run_id,
        args.to_step,
        input_data=_object("--input", args.input) if args.input else None,
        resume_data=_object("--resume-data", args.resume_data) if args.resume_data else None,
        request_context=context,
        tools=w.app.workflow_tools(),
        reason=args.reason,
    )
    if args.json:
        print(json.dumps(travel.to_json(), indent=2))
        return 0
    reused = f"; {', '.join(travel.reused)} return what they returned before" if travel.reused else ""
    print(
        f"run {travel.run_id} reset to step {travel.step}: new execution {travel.execution} runs it and the later "
        f"steps again (execution {travel.base_execution} stays in the run's history){reused}",
        flush=True,
    )
    return _report(await w.settle(args.run_id), False)


async def _runs(w: Workflows, args: argparse.Namespace) -> int:
    found = await w.runs(
        args.workflow_id,
        status=args.status,
        resource_id=args.resource_id,
        from_date=args.from_date,
        to_date=args.to_date,
        offset=args.offset,
        limit=args.limit,
    )
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for r in found:
        print(f"{r['runId']}  {r['status']}  started {r['createdAt']}")
    return 0


async def _counts(w: Workflows, args: argparse.Namespace) -> int:
    counts = await w.counts()
    if args.json:
        print(json.dumps(counts, indent=2))
        return 0
    for workflow_id, c in counts.items():
        print(f"{workflow_id}: running={c['running']} suspended={c['suspended']}")
    return 0


_ACTIONS = {
    "list": _list,
    "show": _show,
    "save": _save,
    "delete": _delete,
    "run": _run,
    "resume": _resume,
    "reset": _reset,
    "runs": _runs,
    "counts": _counts,
}
__all__ = ["arguments", "run"]
