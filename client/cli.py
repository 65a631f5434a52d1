"""The client side of the `keel` command line: runs, approvals, listings, counts, events and the background dev
server. The commands that run a worker (`worker`, `dev`, `demo`) are added by `keel.cli`, above this package."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from keel.app import App, AppError, load_app
from keel.client.devserver import (
    DevServer,
    DevServerConfig,
    is_listening,
    stop_detached,
    wait_for_ui,
)
from keel.client.errors import KeelClientError
from keel.client.keel_client import KeelClient
from keel.client.run_events import follow
from keel.protocol import (
    TextDeltaChunk,
    TextEndChunk,
    ToolCallApprovalChunk,
    ToolCallChunk,
    ToolErrorChunk,
    ToolOutputDeniedChunk,
    ToolResultChunk,
)
from keel.storage import DatabaseNotFound, RunEvent, Storage, StorageError, open_storage


class CliError(KeelClientError):
    """A failure to report as one line on stderr with exit code 2."""


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


async def connect_client(args: argparse.Namespace, app: App | None = None) -> KeelClient:
    """A client for the command's --address, --namespace and --task-queue; `CliError` when Temporal is down."""
    try:
        return await KeelClient.connect(args.address, namespace=args.namespace, task_queue=args.task_queue, app=app)
    except RuntimeError as err:
        address = args.address or os.environ.get("KEEL_TEMPORAL_ADDRESS", "127.0.0.1:7233")
        raise CliError(f"Cannot reach Temporal at {address} ({err}); start it with `make dev` or `keel dev`") from None


async def open_store() -> Storage:
    """The storage of `$KEEL_STORAGE_URL`, for reading: checked, never migrated (a reader may lack the rights, and
    migrating is the worker's or `keel migrate`'s job)."""
    store = open_storage()
    try:
        await store.check_schema()
    except BaseException:
        await store.close()
        raise
    return store


# --- event printing ------------------------------------------------------------------------------------


def _print_event(event: RunEvent, run_id: str) -> None:
    chunk = event.chunk()
    if isinstance(chunk, TextDeltaChunk):
        print(chunk.payload.text, end="", flush=True)
    elif isinstance(chunk, TextEndChunk):
        print(flush=True)
    elif isinstance(chunk, ToolCallChunk):
        p = chunk.payload
        print(f"  -> {p.tool_name}({json.dumps(p.args)})  [{p.tool_call_id}]", flush=True)
    elif isinstance(chunk, ToolCallApprovalChunk):
        print(f"  || waiting for approval: keel approve {run_id} {chunk.payload.tool_call_id} [--decline]", flush=True)
    elif isinstance(chunk, ToolResultChunk):
        print(f"  <- {chunk.payload.tool_name}: {json.dumps(chunk.payload.result)}", flush=True)
    elif isinstance(chunk, ToolErrorChunk):
        print(f"  <- {chunk.payload.tool_name} failed: {json.dumps(chunk.payload.error)}", flush=True)
    elif isinstance(chunk, ToolOutputDeniedChunk):
        print(f"  xx {chunk.payload.tool_name} declined: {chunk.payload.approval.reason or ''}", flush=True)


async def _follow_run(keel: KeelClient, storage: Storage, run_id: str, offset: int) -> int:
    """Print a run's events until it finishes or waits for approval. Returns the exit code."""

    async def closed_or_suspended() -> bool:
        info = await keel.describe(run_id)
        return info.status not in ("running",)

    suspended = False
    async for event in follow(
        storage,
        run_id,
        offset=offset,
        until=frozenset({"finish", "tool-call-approval"}),
        idle_check=closed_or_suspended,
    ):
        _print_event(event, run_id)
        suspended = event.type == "tool-call-approval"
    if suspended or (await keel.describe(run_id)).status == "suspended":
        print(f"run {run_id} is suspended; pending: {[c.tool_call_id for c in await keel.pending_tool_calls(run_id)]}")
        return 0
    try:
        result = await keel.result(run_id)  # the finish event is written just before the run completes
    except KeelClientError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    info = await keel.describe(run_id)
    print(f"run {run_id} {info.status}: finishReason={result.finish_reason} steps={result.steps}")
    return 0


# --- commands ------------------------------------------------------------------------------------------


async def cmd_run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    keel = await connect_client(args, app)
    messages: Any = args.message
    if args.message.lstrip().startswith("["):
        try:
            messages = json.loads(args.message)
        except json.JSONDecodeError as err:
            raise CliError(f"MESSAGE looks like a JSON list of messages but is not valid JSON: {err}") from None
    run_id = await keel.start_run(
        args.agent,
        messages,
        thread_id=args.thread_id,
        resource_id=args.resource_id,
        max_steps=args.max_steps,
        run_id=args.run_id,
    )
    print(f"run {run_id} started (agent {args.agent})", flush=True)
    if args.no_follow:
        return 0
    storage = await open_store()
    try:
        return await _follow_run(keel, storage, run_id, 0)
    finally:
        await storage.close()


async def cmd_approve(args: argparse.Namespace) -> int:
    keel = await connect_client(args)
    storage = await open_store()
    try:
        offset = len(await storage.read_events(args.run_id))
        accepted = await keel.approve(
            args.run_id, args.tool_call_id, approved=not args.decline, reason=args.reason, step=args.step
        )
        verb = "declined" if args.decline else "approved"
        print(f"{verb} {accepted.tool_call_id} in run {args.run_id}", flush=True)
        if args.no_follow:
            return 0
        return await _follow_run(keel, storage, args.run_id, offset)
    finally:
        await storage.close()


async def cmd_pending(args: argparse.Namespace) -> int:
    keel = await connect_client(args)
    pending = await keel.pending_tool_calls(args.run_id)
    print(_json([p.model_dump(by_alias=True) for p in pending]))
    return 0


async def cmd_result(args: argparse.Namespace) -> int:
    keel = await connect_client(args)
    result = await keel.result(args.run_id)
    print(_json(result.model_dump(by_alias=True)))
    return 0


async def cmd_runs(args: argparse.Namespace) -> int:
    keel = await connect_client(args)
    runs = await keel.list_runs(status=args.status, agent_id=args.agent, limit=args.limit)
    if args.json:
        print(_json([r.__dict__ for r in runs]))
        return 0
    if not runs:
        print("no runs")
    for r in runs:
        started = r.started_at.strftime("%Y-%m-%d %H:%M:%S") if r.started_at else "-"
        print(f"{r.run_id}  {r.status:<10} agent={r.agent_id}  thread={r.thread_id}  started={started}")
    return 0


async def cmd_counts(args: argparse.Namespace) -> int:
    keel = await connect_client(args, load_app(args.app))
    counts = await keel.counts()
    if args.json:
        print(_json(counts))
        return 0
    for kind in ("agents", "workflows"):
        for name, c in counts[kind].items():
            print(f"{kind[:-1]} {name}: running={c['running']} suspended={c['suspended']}")
    return 0


async def cmd_events(args: argparse.Namespace) -> int:
    storage = await open_store()
    try:
        if not args.follow:
            for event in await storage.read_events(args.run_id, offset=args.offset):
                print(json.dumps(event.model_dump(mode="json", by_alias=True)))
            return 0
        keel = await connect_client(args)

        async def closed() -> bool:
            return (await keel.describe(args.run_id)).status not in ("running", "suspended")

        async for event in follow(storage, args.run_id, offset=args.offset, idle_check=closed):
            print(json.dumps(event.model_dump(mode="json", by_alias=True)), flush=True)
        return 0
    finally:
        await storage.close()


async def cmd_migrate(args: argparse.Namespace) -> int:
    store = open_storage()
    try:
        try:
            before = await store.schema_version()
        except DatabaseNotFound:
            before = 0  # init() creates it
        await store.init()
        after = await store.schema_version()
    finally:
        await store.close()
    print(f"storage schema at version {after}" + (f" (was {before})" if before != after else " (up to date)"))
    return 0


async def cmd_server(args: argparse.Namespace) -> int:
    cfg = DevServerConfig()
    if args.action == "start":
        server = await DevServer(cfg).start(detach=True)
        await wait_for_ui(cfg)
        state = "started" if server.owned else "already running"
        print(f"Temporal dev server {state} at {cfg.address}; UI {cfg.ui_url}")
    elif args.action == "stop":
        print("stopped" if stop_detached(cfg) else "no dev server started by `keel server start` is recorded")
    else:
        print(f"{cfg.address}: {'listening' if is_listening(cfg.host, cfg.port) else 'not running'}")
    return 0


# --- parser --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """A `keel` subcommand: its help, its arguments (besides the common ones) and what it runs."""

    help: str
    run: Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
    arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["start", "stop", "status"])


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent")
    p.add_argument("message", help="a user message, or a JSON list of {role, content}")
    p.add_argument("--thread-id")
    p.add_argument("--resource-id")
    p.add_argument("--run-id")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--no-follow", action="store_true", help="print the run id and return at once")


def _approve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id")
    p.add_argument("tool_call_id")
    p.add_argument("--decline", action="store_true")
    p.add_argument("--reason")
    p.add_argument("--step", type=int, help="decide the call only if it is still this step's (models reuse ids)")
    p.add_argument("--no-follow", action="store_true")


def _run_id_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id")


def _runs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--status", choices=["running", "suspended", "completed", "failed", "canceled", "terminated"])
    p.add_argument("--agent")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")


def _json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")


def _events_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--follow", action="store_true", help="keep following until the run finishes")


COMMANDS: dict[str, Command] = {
    "server": Command("start/stop a background dev server", cmd_server, _server_args),
    "run": Command("start an agent run and follow it until it finishes or waits for approval", cmd_run, _run_args),
    "approve": Command("approve (or --decline) a pending tool call", cmd_approve, _approve_args),
    "pending": Command("list a run's pending tool calls", cmd_pending, _run_id_arg),
    "result": Command("wait for a run and print its result JSON", cmd_result, _run_id_arg),
    "runs": Command("list agent runs", cmd_runs, _runs_args),
    "counts": Command("running and suspended runs per agent", cmd_counts, _json_arg),
    "events": Command("print a run's event log from an offset", cmd_events, _events_args),
    "migrate": Command("create or upgrade the storage schema of $KEEL_STORAGE_URL", cmd_migrate),
}
"""The commands that only talk to Temporal and storage; `keel.cli` adds the ones that run a worker."""


def build_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--address", help="Temporal address (default $KEEL_TEMPORAL_ADDRESS or 127.0.0.1:7233)")
    common.add_argument("--namespace", help="Temporal namespace (default $KEEL_NAMESPACE or default)")
    common.add_argument("--task-queue", help="task queue (default $KEEL_TASK_QUEUE or keel)")
    common.add_argument("--app", help="app reference module:attr (default $KEEL_APP or the bundled demo app)")
    parser = argparse.ArgumentParser(prog="keel", description="Durable agents on Temporal.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in commands.items():
        command.arguments(sub.add_parser(name, parents=[common], help=command.help))
    return parser


def main(argv: Sequence[str] | None = None, commands: dict[str, Command] | None = None) -> None:
    """Parse `argv` and run the command; errors are one line on stderr with exit code 2."""
    commands = commands or COMMANDS
    args = build_parser(commands).parse_args(argv)
    # The current directory is importable, so `--app myproject.app:app` works from the project (like uvicorn).
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        code = asyncio.run(commands[args.command].run(args))
    except (KeelClientError, AppError, StorageError) as err:
        print(f"error: {err}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)  # sdk-python#300: a Temporal client process can crash at interpreter exit
