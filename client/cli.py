"""The client side of the `keel` command line: runs, approvals, listings, counts, events, settings and the
background dev server. The commands that run a worker (`worker`, `dev`, `demo`) are added by `keel.cli`, above
this package.

Exit codes (every command): 0 done (a run that waits for approval included); 1 the run ended without a result
(failed, terminated, canceled, timed out); 2 the command could not do its job (bad input, an unknown agent, run
or tool call, Temporal, a worker or storage not there); 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from keel.client.errors import KeelClientError, RunFailed

if TYPE_CHECKING:
    from keel.app import Agent, App, Tool
    from keel.client.keel_client import KeelClient
    from keel.client.run_events import Shown
    from keel.protocol.settings import Settings
    from keel.storage import Storage

# Each command imports what it needs when it runs: `keel --version` loads nothing of Keel but the command line,
# `keel runs` no app, workspace, model, HTTP or worker code (tests/test_cli_imports.py). Only the parser is built
# from what the top level imports.

EXIT_CODES = """exit codes:
  0    done (also: the run waits for approval)
  1    the run ended without a result: failed, terminated, canceled or timed out
  2    the command could not do its job: bad input, unknown agent, run or tool call, no Temporal, no worker,
       storage down or missing
  130  interrupted"""


class CliError(KeelClientError):
    """A failure to report as one line on stderr with exit code 2."""


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings in effect for this command: the environment, then the command's flags."""
    from keel.protocol.settings import load_settings

    return load_settings(
        temporal_address=getattr(args, "address", None),
        namespace=getattr(args, "namespace", None),
        task_queue=getattr(args, "task_queue", None),
        app=getattr(args, "app", None),
        api_host=getattr(args, "host", None),
        api_port=getattr(args, "port", None),
    )


async def connect_client(args: argparse.Namespace, app: App | None = None) -> KeelClient:
    """A client for the command's settings; `CliError` when Temporal cannot be reached."""
    from keel.client.keel_client import KeelClient

    settings = settings_of(args)
    try:
        return await KeelClient.connect(
            settings.temporal_address, namespace=settings.namespace, task_queue=settings.task_queue, app=app
        )
    except RuntimeError as err:
        raise CliError(
            f"Cannot reach Temporal at {settings.temporal_address} ({err}); start it with `make dev` or `keel dev`"
        ) from None


async def open_store() -> Storage:
    """The storage of the settings, for reading: checked, never migrated (a reader may lack the rights, and
    migrating is the worker's or `keel migrate`'s job)."""
    from keel.storage import open_storage

    store = open_storage()
    try:
        await store.check_schema()
    except BaseException:
        await store.close()
        raise
    return store


# --- event printing ------------------------------------------------------------------------------------

DIM, RESET = ("\033[2m", "\033[0m") if sys.stdout.isatty() else ("", "")


def _print_event(shown: Shown, run_id: str) -> None:
    from keel.protocol.chunks import (
        TextDeltaChunk,
        TextEndChunk,
        ToolCallApprovalChunk,
        ToolCallChunk,
        ToolErrorChunk,
        ToolOutputDeniedChunk,
        ToolResultChunk,
    )

    event = shown.event
    if shown.retry:
        print(f"\n{DIM}  .. retrying (attempt {event.attempt}){RESET}", flush=True)
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


async def _follow_run(keel: KeelClient, storage: Storage, run_id: str, offset: int, *, retries: bool = True) -> int:
    """Print a run's events until it finishes or waits for approval. Returns the exit code. `retries=False`: no
    step's new attempt is announced as a retry (a reset runs steps again on purpose)."""
    from keel.client.run_events import Shown, follow

    queue = await keel.run_task_queue(run_id)
    quiet = 0

    async def stop_following() -> bool:
        nonlocal quiet
        info = await keel.describe(run_id)
        if info.status != "running":
            return True
        quiet += 1  # about a second without an event
        if quiet % 5 == 0 and not await keel.workers(queue):
            raise CliError(
                f"No worker is polling task queue {queue!r}: run {run_id} waits until one does "
                f"(start one with `keel worker --app <module:attr> --task-queue {queue}` or `keel dev`)"
            )
        return False

    suspended = False
    async for shown in follow(
        storage, run_id, offset=offset, until=frozenset({"finish", "tool-call-approval"}), idle_check=stop_following
    ):
        _print_event(shown if retries else Shown(shown.event), run_id)
        suspended = shown.event.type == "tool-call-approval"
    if suspended or (await keel.describe(run_id)).status == "suspended":
        calls = [c.tool_call_id for c in await keel.pending_tool_calls(run_id)]
        print(f"run {run_id} is suspended; pending: {calls}")
        return 0
    result = await keel.result(run_id)  # raises RunFailed (exit 1); the finish event precedes the completion
    print(f"run {run_id} completed: finishReason={result.finish_reason} steps={result.steps}")
    return 0


# --- commands ------------------------------------------------------------------------------------------


async def cmd_run(args: argparse.Namespace) -> int:
    from keel.app import UnknownAgent, load_app

    settings = settings_of(args)
    app = load_app(settings.app)
    if args.agent not in app.agents:  # before Temporal: a reader of your-app.md who left out --app lands here
        given = {"flag": "--app", "environment": "KEEL_APP"}.get(settings.sources()["app"])
        where = f"given by {given}" if given else "the default: pass --app module:attr or set KEEL_APP for yours"
        raise CliError(f"{UnknownAgent(args.agent, app.agents)} in the app {settings.app} ({where})")
    keel = await connect_client(args, app)
    messages: Any = args.message
    if args.message.lstrip().startswith("["):
        try:
            messages = json.loads(args.message)
        except json.JSONDecodeError as err:
            raise CliError(f"MESSAGE looks like a JSON list of messages but is not valid JSON: {err}") from None
    if not args.no_follow:
        await keel.require_worker()  # before starting: a run nobody runs would be followed forever
    run_id = await keel.start_run(
        args.agent,
        messages,
        thread_id=args.thread_id,
        resource_id=args.resource_id,
        max_steps=args.max_steps,
        run_id=args.run_id,
    )
    if args.no_follow:  # the id alone on stdout, for `RUN=$(keel run ... --no-follow)`
        print(f"run {run_id} started (agent {args.agent})", file=sys.stderr, flush=True)
        print(run_id, flush=True)
        return 0
    print(f"run {run_id} started (agent {args.agent})", flush=True)
    storage = await open_store()
    try:
        return await _follow_run(keel, storage, run_id, 0)
    finally:
        await storage.close()


async def cmd_approve(args: argparse.Namespace) -> int:
    keel = await connect_client(args)
    verb = "declined" if args.decline else "approved"
    decision = {"approved": not args.decline, "reason": args.reason, "step": args.step}
    if args.signal:
        await keel.signal_approval(args.run_id, args.tool_call_id, **decision)
        print(f"sent: {args.tool_call_id} {verb} in run {args.run_id}, as a signal (keel pending shows the effect)")
        return 0
    await keel.require_worker(await keel.run_task_queue(args.run_id), signal_hint=f"{args.run_id} {args.tool_call_id}")
    storage = await open_store()
    try:
        offset = len(await storage.read_events(args.run_id))
        accepted = await keel.approve(args.run_id, args.tool_call_id, **decision)
        print(f"{verb} {accepted.tool_call_id} in run {args.run_id}", flush=True)
        if args.no_follow:
            return 0
        return await _follow_run(keel, storage, args.run_id, offset)
    finally:
        await storage.close()


async def cmd_pending(args: argparse.Namespace) -> int:
    keel = await connect_client(args)
    await keel.require_worker(await keel.run_task_queue(args.run_id))
    if args.wait:  # until the run waits on a person (or has ended: nothing pending)
        pending = (await keel.settle(args.run_id)).pending
    else:
        pending = await keel.pending_tool_calls(args.run_id)
    print(_json([p.model_dump(by_alias=True) for p in pending]))
    return 0


async def cmd_result(args: argparse.Namespace) -> int:
    keel = await connect_client(args)
    info = await keel.describe(args.run_id)
    if info.status == "suspended":
        raise CliError(f"Run {args.run_id} waits for approval and has no result yet: see `keel pending {args.run_id}`")
    if info.status == "running":
        await keel.require_worker(info.task_queue)
    result = await keel.result(args.run_id)
    print(_json(result.model_dump(by_alias=True)))
    return 0


async def cmd_cancel(args: argparse.Namespace) -> int:
    keel = await connect_client(args)
    await keel.cancel(args.run_id)
    print(f"cancel requested for run {args.run_id}: it ends as canceled at its next workflow task")
    return 0


async def cmd_terminate(args: argparse.Namespace) -> int:
    keel = await connect_client(args)
    await keel.terminate(args.run_id, args.reason)
    print(f"run {args.run_id} terminated")
    return 0


async def cmd_runs(args: argparse.Namespace) -> int:
    keel = await connect_client(args)
    runs = await keel.list_runs(status=args.status, agent_id=args.agent, limit=args.limit)
    if args.json:
        print(_json([r.to_json() for r in runs]))
        return 0
    if not runs:
        print("no runs")
    rows = []
    for r in runs:
        started = r.started_at.strftime("%Y-%m-%d %H:%M:%S") if r.started_at else "-"
        rows.append([r.run_id, r.status, f"agent={r.agent_id}", f"thread={r.thread_id}", f"started={started}"])
    for line in aligned(rows):
        print(line)
    return 0


def aligned(rows: list[list[str]]) -> list[str]:
    """`rows` as lines whose columns line up: each but the last padded to its widest, two spaces between."""
    widths = [max(len(cell) for cell in column) for column in zip(*rows, strict=True)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)) + "  " + row[-1]
            for row in rows]  # fmt: skip


async def cmd_counts(args: argparse.Namespace) -> int:
    from keel.client.app_outline import agent_ids

    settings = settings_of(args)  # the app's reference: --app, else KEEL_APP, else the demo
    ids = agent_ids(settings.app, settings.data_dir, reload=args.reload)
    keel = await connect_client(args)
    counts = await keel.counts(agent_ids=ids)
    if args.json:
        print(_json(counts))
        return 0
    for kind in ("agents", "workflows"):
        for name, c in counts[kind].items():
            print(f"{kind[:-1]} {name}: running={c['running']} suspended={c['suspended']}")
    return 0


def _approval(t: Tool) -> bool | str:
    policy = t.workspace_tool.config.require_approval if t.workspace_tool is not None else t.require_approval
    return policy if isinstance(policy, bool) else "by arguments"


def _tool_json(t: Tool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": t.id,
        "description": t.description,
        "requireApproval": _approval(t),
        "idempotent": t.idempotent,
    }
    if t.workspace_tool is not None:
        entry["workspaceTool"] = t.workspace_tool.workspace_tool_name
        entry["workspaceId"] = t.workspace_tool.workspace.id
    return entry


async def _agent_json(app: App, agent: Agent) -> dict[str, Any]:
    from keel.app.agent_tools import agent_tools

    workspace = app.workspace_of(agent)
    return {
        "id": agent.id,
        "name": agent.display_name,
        "description": agent.description,
        "model": agent.model.model_id,
        "maxSteps": agent.max_steps,
        "workspaceId": workspace.id if workspace is not None else None,
        "tools": [_tool_json(t) for t in await agent_tools(app, agent)],
    }


async def cmd_agents(args: argparse.Namespace) -> int:
    from keel.app import load_app
    from keel.app.agent_tools import agent_tools

    app = load_app(args.app)
    if args.json:
        print(_json([await _agent_json(app, a) for a in app.agents.values()]))
        return 0
    for agent in app.agents.values():
        workspace = app.workspace_of(agent)
        where = f", workspace {workspace.id}" if workspace is not None else ""
        print(f"{agent.id}  ({agent.model.model_id}, maxSteps {agent.max_steps}{where})  {agent.description}".rstrip())
        for t in await agent_tools(app, agent):
            approval = _approval(t)
            flags = [f"approval: {approval}"] if approval else []
            flags += [] if t.idempotent else ["not idempotent"]
            summary = t.description.splitlines()[0] if t.description else ""
            print(f"  - {t.id}" + (f" [{', '.join(flags)}]" if flags else "") + f": {summary}")
    return 0


async def cmd_workspaces(args: argparse.Namespace) -> int:
    from keel.app import load_app

    app = load_app(args.app)
    infos = [
        await ws.get_info(include_file_count=args.file_count, resolve_dynamic_providers=False)
        for ws in app.workspaces.values()
    ]
    if args.json:
        print(_json(infos))
        return 0
    for info in infos:
        print(f"{info['id']}  {info['name']}")
        fs, sandbox = info.get("filesystem"), info.get("sandbox")
        if fs:
            meta = fs.get("metadata") or {}
            where = meta.get("basePath", "")
            files = f", {fs['totalFiles']} files" if fs.get("totalFiles") is not None else ""
            print(f"  filesystem: {fs['provider']} {where}{' (read-only)' if fs.get('readOnly') else ''}{files}")
        if sandbox:
            print(f"  sandbox: {sandbox['provider']}")
    return 0


def _json_object(flag: str, raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as err:
        raise CliError(f"{flag} is not JSON: {err}") from None
    if not isinstance(value, dict):
        raise CliError(f"{flag} must be a JSON object, got {type(value).__name__}")
    return value


async def cmd_tool(args: argparse.Namespace) -> int:
    from keel.app import load_app
    from keel.app.agent_tools import agent_tool
    from keel.client.errors import ToolFailed

    app = load_app(args.app)
    agent = app.agent(args.agent_id)
    tool_args = _json_object("--args", args.args) or {}
    request_context = _json_object("--request-context", args.request_context)
    await agent_tool(app, agent, args.tool_name, request_context)  # UnknownTool before anything is sent
    keel = await connect_client(args, app)
    outcome = await keel.execute_tool(agent.id, args.tool_name, tool_args, request_context=request_context)
    if outcome.is_error:
        error = outcome.result.get("error") if isinstance(outcome.result, dict) else outcome.result
        raise ToolFailed(args.tool_name, str(error))
    if args.json:
        print(_json(outcome.result))
    elif isinstance(outcome.result, str):
        print(outcome.result)
    else:
        print(_json(outcome.result))
    return 0


async def cmd_index(args: argparse.Namespace) -> int:
    import asyncio

    from keel.app import load_app
    from keel.client.indexing import indexing_progress, indexing_result, start_indexing

    app = load_app(args.app)
    workspace = app.get_workspace(args.workspace_id)  # AppError (the known ids) before anything is sent
    if workspace.search_engine is None:
        raise CliError(f"Workspace {workspace.id!r} has no search configured (bm25, or a vector_store and embedder)")
    keel = await connect_client(args, app)
    if not args.no_follow:
        await keel.require_worker()
    handle = await start_indexing(keel, workspace.id, args.path or None, workflow_id=args.run_id)
    print(f"indexing workspace {workspace.id}: workflow {handle.id}", flush=True)
    if args.no_follow:
        return 0
    shown: tuple[int, int] | None = None
    while True:
        running, progress = await indexing_progress(keel, handle.id)
        if progress is not None and (progress.done, progress.attempt) != shown and not args.json:
            shown = (progress.done, progress.attempt)
            retry = f", attempt {progress.attempt}" if progress.attempt > 1 else ""
            print(f"  {progress.done}/{progress.total} files (last: {progress.last}{retry})", flush=True)
        if not running:
            break
        await asyncio.sleep(1)
    result = await indexing_result(keel, handle.id)
    if args.json:
        print(_json(result.model_dump(by_alias=True)))
        return 0
    resumed = f", resumed after {result.resumed_from} files (attempt {result.attempts})" if result.resumed_from else ""
    unchanged = f", {result.unchanged} unchanged" if result.unchanged else ""
    removed = f", {result.removed} removed" if result.removed else ""
    print(
        f"indexed {result.indexed} of {result.files} files: {result.chunks} chunks, {result.skipped} skipped"
        f"{unchanged}{removed}{resumed}"
    )
    return 0


async def _in_temporal_only(args: argparse.Namespace) -> None:
    """`RunNotInStorage` when Temporal has the run that the command's storage has no event of (it reads another
    storage than the run's worker wrote); nothing when Temporal cannot say."""
    from urllib.parse import urlsplit

    from keel.client.errors import KeelClientError, RunNotInStorage

    try:
        await (await connect_client(args)).describe(args.run_id)
    except (KeelClientError, CliError):
        return
    shown = settings_of(args).storage_url or ""
    url = urlsplit(shown)
    if url.password:  # never print a password
        shown = url._replace(netloc=url.netloc.replace(f":{url.password}@", ":***@")).geturl()
    raise RunNotInStorage(args.run_id, shown)


async def cmd_events(args: argparse.Namespace) -> int:
    from keel.client.errors import RunNotFound
    from keel.client.run_events import follow, read

    storage = await open_store()
    try:
        keel = await connect_client(args) if args.follow else None
        if not args.follow:
            shown = await read(storage, args.run_id, offset=args.offset)
            if not shown and args.offset == 0:  # a run that ran has at least its start event
                await _in_temporal_only(args)
                raise RunNotFound(args.run_id)
            for s in shown:
                print(json.dumps(s.event.model_dump(mode="json", by_alias=True)), flush=True)
            return 0
        assert keel is not None
        await keel.describe(args.run_id)  # RunNotFound for an unknown run

        async def closed() -> bool:
            return (await keel.describe(args.run_id)).status not in ("running", "suspended")

        async for s in follow(storage, args.run_id, offset=args.offset, idle_check=closed):
            print(json.dumps(s.event.model_dump(mode="json", by_alias=True)), flush=True)
        return 0
    finally:
        await storage.close()


async def cmd_chat(args: argparse.Namespace) -> int:
    from keel.app import load_app
    from keel.client.chat import run_chat

    app = load_app(args.app)
    definition = app.controller(args.controller)  # AppError (the known ids) before connecting
    keel = await connect_client(args, app)
    storage = await open_store()
    try:
        return await run_chat(
            keel,
            storage,
            definition,
            resource_id=args.resource or _default_resource(),
            scope=args.scope,
            thread_id=args.thread,
            data_dir=settings_of(args).data_dir,
            app_ref=args.app,
        )
    finally:
        await storage.close()


def _default_resource() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "default"


async def cmd_sessions(args: argparse.Namespace) -> int:
    from keel.client.chat import list_sessions

    keel = await connect_client(args)
    sessions = await list_sessions(keel, args.controller, args.resource, limit=args.limit)
    if args.json:
        print(_json(sessions))
        return 0
    if not sessions:
        print("no open sessions")
    rows = [
        [s["sessionId"], s["status"] or "-", f"controller={s['controllerId']}", f"resource={s['resourceId']}",
         f"thread={s['threadId']}"]
        for s in sessions
    ]  # fmt: skip
    for line in aligned(rows):
        print(line)
    return 0


async def until_interrupted(banner: str) -> None:
    """Print `banner` (what runs, and that Ctrl-C stops it), then wait for Ctrl-C, SIGTERM or SIGHUP (the terminal
    closed). The signals are caught before the banner: a Ctrl-C as soon as it shows is a stop like any other."""
    import asyncio
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    print(banner, flush=True)
    await stop.wait()


def api_banner(url: str) -> str:
    return f"HTTP API on {url}/api (OpenAPI {url}/api/openapi.json, docs {url}/api/docs)"


async def cmd_workflows(args: argparse.Namespace) -> int:
    from keel.client import workflow_commands
    from keel.storage import open_storage

    return await workflow_commands.run(args, connect_client, open_storage)


async def cmd_serve(args: argparse.Namespace) -> int:
    from keel.app import load_app
    from keel.client.api import api_for_settings
    from keel.client.api.server import serving

    app = load_app(args.app)
    settings = settings_of(args)
    storage = await open_store()
    try:
        keel = await connect_client(args, app)
        async with serving(api_for_settings(app, keel, storage, settings), settings.api_host, settings.api_port) as url:
            await until_interrupted(f"{api_banner(url)}; Temporal at {settings.temporal_address}; Ctrl-C stops it")
    finally:
        await storage.close()
    return 0


async def cmd_migrate(args: argparse.Namespace) -> int:
    from keel.storage import DatabaseNotFound, open_storage

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


async def cmd_config(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    values = settings.as_json()
    sources = settings.sources()
    if args.json:
        print(_json({name: {"value": values[name], "from": sources[name]} for name in values}))
        return 0
    width = max(len(name) for name in values) + len("KEEL_")
    for name, value in values.items():
        print(f"{'KEEL_' + name.upper():<{width}}  {value!s:<48}  ({sources[name]})")
    return 0


async def cmd_server(args: argparse.Namespace) -> int:
    from keel.client.devserver import (
        DevServer,
        DevServerConfig,
        dev_owner,
        is_listening,
        stop_detached,
        wait_for_ui,
    )

    cfg = DevServerConfig()
    if args.action == "start":
        server = await DevServer(cfg).start(detach=True)
        await wait_for_ui(cfg)
        state = "started" if server.owned else "already running"
        print(f"Temporal dev server {state} at {cfg.address}; UI {cfg.ui_url}")
    elif args.action == "stop":
        if stop_detached(cfg):
            print("stopped")
        elif (owner := dev_owner(cfg)) is not None:
            print(f"the dev server belongs to a running keel dev (pid {owner}): stop that one (Ctrl-C)")
        else:
            print("no dev server started by `keel server start` (or left by a killed keel dev) is recorded")
    else:
        print(f"{cfg.address}: {'listening' if is_listening(cfg.host, cfg.port) else 'not running'}")
    return 0


# --- parser --------------------------------------------------------------------------------------------

Option = Literal["temporal", "queue", "app", "join", "api"]


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


class Command(NamedTuple):
    """A `keel` subcommand: its help, what it runs, its own arguments, and which shared options it takes.
    (A named tuple, not a dataclass: `dataclasses` imports `inspect`, which `keel --version` otherwise never loads.)"""

    help: str
    run: Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    options: tuple[Option, ...] = ()


def _add_options(p: argparse.ArgumentParser, options: tuple[Option, ...]) -> None:
    if "temporal" in options:
        p.add_argument("--address", help="Temporal's HOST:PORT (default $KEEL_TEMPORAL_ADDRESS, 127.0.0.1:7233)")
        p.add_argument("--namespace", help="Temporal namespace (default $KEEL_NAMESPACE, default)")
    if "queue" in options:
        p.add_argument("--task-queue", help="task queue (default $KEEL_TASK_QUEUE, keel)")
    if "app" in options:
        p.add_argument("--app", help="the app, module:attr (default $KEEL_APP, the bundled demo app)")
    if "api" in options:
        p.add_argument("--host", help="the HTTP API's address (default $KEEL_API_HOST, 127.0.0.1)")
        p.add_argument("--port", type=int, help="the HTTP API's port (default $KEEL_API_PORT, 4111)")
    if "join" in options:
        p.add_argument(
            "--join", action="store_true", help="run beside the workers already polling the task queue (same app)"
        )


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["start", "stop", "status"], help="start in the background, stop, or check")


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent", help="the agent's id (see `keel agents`)")
    p.add_argument("message", help="a user message, or a JSON list of {role, content}")
    p.add_argument("--thread-id", help="the conversation to continue (default: a thread of the run's own)")
    p.add_argument("--resource-id", help="who the thread belongs to (default: the agent's id)")
    p.add_argument("--run-id", help="the run's id (default: a new run-<uuid>); run ids are never reused")
    p.add_argument("--max-steps", type=int, help="model calls at most (default: the agent's maxSteps)")
    p.add_argument("--no-follow", action="store_true", help="print the run id (alone on stdout) and return at once")


def _approve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", help="the run")
    p.add_argument("tool_call_id", help="the pending call (see `keel pending RUN`)")
    p.add_argument("--decline", action="store_true", help="decline instead: the tool does not run")
    p.add_argument("--reason", help="why (shown to the model when declining)")
    p.add_argument("--step", type=int, help="decide the call only if it is still this step's (models reuse ids)")
    p.add_argument(
        "--signal", action="store_true", help="send the tool_approval signal: no worker needed now, no answer"
    )
    p.add_argument("--no-follow", action="store_true", help="return after the decision is accepted")


def _pending_args(p: argparse.ArgumentParser) -> None:
    _run_id_arg(p)
    p.add_argument(
        "--wait", action="store_true", help="first wait until the run waits on a person or has ended (no polling)"
    )


def _run_id_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", help="the run")


def _terminate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", help="the run")
    p.add_argument("--reason", help="recorded in the run's history")


def _runs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--status",
        choices=["running", "suspended", "completed", "failed", "canceled", "terminated", "timed_out"],
        help="only runs in this state",
    )
    p.add_argument("--agent", help="only this agent's runs")
    p.add_argument("--limit", type=positive, default=50, help="at most this many (default 50)")
    _json_arg(p)


def _json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON (camelCase keys, ISO 8601 times)")


def _counts_args(p: argparse.ArgumentParser) -> None:
    _json_arg(p)
    p.add_argument(
        "--reload",
        action="store_true",
        help="import the app to know its agents, even when the ones kept from its last import still hold",
    )


def _workspaces_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--file-count", action="store_true", help="count each workspace's files (slow on big trees)")
    _json_arg(p)


def _tool_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent_id", help="the agent whose tool it is")
    p.add_argument("tool_name", help="the tool's name as the model sees it (see `keel agents`)")
    p.add_argument("--args", help='the tool\'s arguments as a JSON object, e.g. \'{"path": "notes.txt"}\'')
    p.add_argument("--request-context", help="the request context as a JSON object (for tools that depend on it)")
    p.add_argument("--json", action="store_true", help="print the output as JSON")


def _index_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("workspace_id", help="the workspace (see `keel workspaces`)")
    p.add_argument(
        "--path", action="append", help="a file, directory or glob to index (repeatable; default auto_index_paths)"
    )
    p.add_argument("--run-id", help="the workflow id (default keel-index-<workspace>: a running one is followed)")
    p.add_argument("--no-follow", action="store_true", help="print the workflow id and return at once")
    _json_arg(p)


def _workflows_args(p: argparse.ArgumentParser) -> None:
    from keel.client import workflow_commands

    workflow_commands.arguments(p, _add_options)


def _events_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", help="the run")
    p.add_argument("--offset", type=int, default=0, help="the first event to print (default 0)")
    p.add_argument("--follow", action="store_true", help="keep printing new events until the run closes")


def _chat_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("controller", help="the app's AgentController id")
    p.add_argument("--resource", help="whose session: the resource id (default: your user name)")
    p.add_argument("--scope", help="one of several sessions of the resource (default: none)")
    p.add_argument("--thread", help="switch the session to this thread (made if missing)")


def _sessions_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--controller", help="only this controller's sessions")
    p.add_argument("--resource", help="only this resource's sessions")
    p.add_argument("--limit", type=positive, default=100, help="at most this many (default 100)")
    _json_arg(p)


async def _blobs(args: argparse.Namespace) -> int:
    from keel.client.blobs import cmd_blobs

    return await cmd_blobs(args)


def _blobs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["stats", "sweep", "schedule"], help="report, sweep now, or schedule sweeps")
    p.add_argument("--dry-run", action="store_true", help="sweep: say what would be deleted, delete nothing")
    p.add_argument("--grace", type=int, help="keep blobs put fewer than this many seconds ago (default 3600)")
    p.add_argument("--every", type=float, default=24.0, help="schedule: hours between sweeps (default 24)")
    p.add_argument("--delete", action="store_true", help="schedule: delete the schedule")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


async def _reset(args: argparse.Namespace) -> int:
    from keel.client.reset import cmd_reset

    return await cmd_reset(args)


def _reset_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", help="the run")
    p.add_argument(
        "--to-step", type=int, required=True, metavar="N", help="run step N (1 is the first) and every later one again"
    )
    p.add_argument("--reason", help="why: shown with the reset in the Temporal UI")
    p.add_argument("--no-follow", action="store_true", help="print the new execution and return at once")
    p.add_argument("--json", action="store_true", help="print what the reset did as JSON and return at once")


async def _trace(args: argparse.Namespace) -> int:
    from keel.client.trace_cli import cmd_trace

    return await cmd_trace(args)


async def _logs(args: argparse.Namespace) -> int:
    from keel.client.logs_cli import cmd_logs

    return await cmd_logs(args)


def _logs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN", help="the run")
    p.add_argument("--level", choices=["debug", "info", "warn", "error"], help="this level and above (default: all)")
    p.add_argument("--limit", type=positive, help="the first N records")
    p.add_argument("--json", action="store_true", help="print Mastra's log records (as /api/logs/:runId) as JSON")


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN", help="the run (or a trace id: 32 hex digits)")
    p.add_argument("--json", action="store_true", help="print Mastra's span records, trace by trace, as JSON")


COMMANDS: dict[str, Command] = {
    "run": Command(
        "start an agent run and follow it until it finishes or waits for approval",
        cmd_run,
        _run_args,
        ("temporal", "queue", "app"),
    ),
    "approve": Command(
        "approve (or --decline) a pending tool call, then follow the run", cmd_approve, _approve_args, ("temporal",)
    ),
    "pending": Command("list a run's pending tool calls", cmd_pending, _pending_args, ("temporal",)),
    "result": Command("print a run's result JSON (waits while it runs)", cmd_result, _run_id_arg, ("temporal",)),
    "cancel": Command("ask a run to stop (it ends as canceled)", cmd_cancel, _run_id_arg, ("temporal",)),
    "terminate": Command("end a run at once", cmd_terminate, _terminate_args, ("temporal",)),
    "runs": Command("list agent runs", cmd_runs, _runs_args, ("temporal",)),
    "counts": Command("running and suspended runs per agent", cmd_counts, _counts_args, ("temporal", "app")),
    "events": Command("print a run's event log from an offset", cmd_events, _events_args, ("temporal",)),
    "chat": Command(
        "chat with a session of an AgentController in the terminal (re-attaches: shows what you missed)",
        cmd_chat,
        _chat_args,
        ("temporal", "queue", "app"),
    ),
    "sessions": Command("list open AgentController sessions", cmd_sessions, _sessions_args, ("temporal",)),
    "agents": Command("list the app's agents and their tools", cmd_agents, _json_arg, ("app",)),
    "workspaces": Command("list the app's workspaces", cmd_workspaces, _workspaces_args, ("app",)),
    "tool": Command(
        "run one tool of an agent on a worker, as a run would, and print its output",
        cmd_tool,
        _tool_args,
        ("temporal", "queue", "app"),
    ),
    "index": Command(
        "index a workspace's files for search on a worker, printing progress (resumes after a worker crash)",
        cmd_index,
        _index_args,
        ("temporal", "queue", "app"),
    ),
    "config": Command(
        "print the settings in effect and where each comes from", cmd_config, _json_arg, ("temporal", "queue", "app")
    ),
    "workflows": Command(
        "stored workflow definitions: list, show, save FILE, delete, run, resume, runs, counts",
        cmd_workflows,
        _workflows_args,
    ),
    "serve": Command(
        "serve the HTTP API (Mastra's routes) for an app until Ctrl-C; needs Temporal and a worker",
        cmd_serve,
        options=("temporal", "queue", "app", "api"),
    ),
    "migrate": Command("create or upgrade the storage schema ($KEEL_STORAGE_URL)", cmd_migrate),
    "server": Command("start, stop or check a background dev server", cmd_server, _server_args),
    "blobs": Command(
        "the payload store: stats, sweep blobs no execution references, schedule sweeps",
        _blobs,
        _blobs_args,
        ("temporal", "queue"),
    ),
    "trace": Command(
        "print a run's span tree: durations, model tokens, tool results (spans kept by OTEL_TRACES_EXPORTER=keel)",
        _trace,
        _trace_args,
    ),
    "logs": Command("print a run's log records (kept by workers with KEEL_LOGS=info)", _logs, _logs_args),
    "reset": Command(
        "time travel: run a run again from step N, in a new execution (Temporal's reset; the old one stays)",
        _reset,
        _reset_args,
        ("temporal",),
    ),
}
"""The commands that only talk to Temporal and storage; `keel.cli` adds the ones that run a worker."""


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("keel")
    except metadata.PackageNotFoundError:
        return "unknown"


class _VersionAction(argparse._VersionAction):
    """argparse's `version` action, reading the version from the package metadata only when it is asked for."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        self.version = f"keel {_version()}"
        super().__call__(parser, namespace, values, option_string)


def build_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keel",
        description="Durable agents on Temporal.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in commands.items():
        p = sub.add_parser(
            name, help=command.help, description=command.help, epilog=EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )  # fmt: skip
        command.arguments(p)
        _add_options(p, command.options)
        # `--app` is accepted by every command, as $KEEL_APP is, so one set of flags works everywhere. (A command
        # with actions, `keel workflows`, takes it on each action: argparse lets an action's default overwrite it.)
        if "app" not in command.options and not p._subparsers:
            p.add_argument("--app", help="the app, module:attr: accepted by every command; this one does not use it")
    return parser


EXPORT_SECONDS = 3.0
"""How long a command waits, as it exits, for its spans to be exported (an OTLP endpoint that does not answer held
every command for its exporter's 10 s of retries)."""


def positive(text: str) -> int:
    """An argument that counts something: a whole number of 1 or more (`--limit 0` printed everything)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {value}")
    return value


def exit_code(err: BaseException) -> int:
    """1 for a run that ended without a result, 2 for everything else a command reports."""
    return 1 if isinstance(err, RunFailed) else 2


def one_line(message: str) -> str:
    """An error message on one line (a provider's message may hold newlines)."""
    return " ".join(message.split())


_REPORTED: tuple[tuple[str, str], ...] = (
    ("keel.app.definitions", "AppError"),
    ("keel.storage.errors", "StorageError"),
    ("keel.protocol.settings", "SettingsError"),
)
"""Besides `KeelClientError`, the errors a command reports as one line (module, class)."""


def _data_dir_hint(err: BaseException, args: argparse.Namespace) -> str:
    """Why a reader found no Keel database, or not the run, where it looked: the storage follows the data dir,
    which defaults to .keel of the current folder (a stack started in another folder keeps its own there)."""
    if type(err).__name__ not in ("DatabaseNotFound", "RunNotInStorage"):
        return ""
    try:
        sources = settings_of(args).sources()
    except Exception:
        return ""
    if sources.get("data_dir") != "default" or sources.get("storage_url") not in ("default", "derived"):
        return ""
    return (
        f" (KEEL_DATA_DIR defaults to .keel in the current folder ({os.getcwd()}): run keel in the folder the "
        "worker runs in, or set KEEL_DATA_DIR to its data dir)"
    )


def _reported_errors() -> tuple[type[BaseException], ...]:
    """The error classes `main` reports as one line. A command imports only what it needs, and an error can only
    come from a module it imported: the classes of the modules not loaded are left out instead of imported."""
    loaded = [sys.modules.get(module) for module, _ in _REPORTED]
    return (KeelClientError, *(getattr(m, name) for m, (_, name) in zip(loaded, _REPORTED, strict=True) if m))


def main(argv: Sequence[str] | None = None, commands: dict[str, Command] | None = None) -> None:
    """Parse `argv` and run the command; errors are one line on stderr with the exit codes above."""
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["--version"]:
        # What the parser would print and how it would exit, without first building the parser of every command.
        print(f"keel {_version()}")
        sys.exit(0)
    commands = commands or COMMANDS
    # A command named first needs only its own parser (the others cost ~10 ms to build); anything else (`--help`,
    # a typo, no command) gets them all. Usage, help and errors read the same: the commands show as COMMAND.
    if given and given[0] in commands:
        commands = {given[0]: commands[given[0]]}
    args = build_parser(commands).parse_args(given)
    if args.command in COMMANDS and args.command != "serve":
        # pydantic looks for plugins (the `pydantic` entry points of every installed distribution) when it builds
        # its first model: ~6 ms of a command that only talks to Temporal or storage, and none of these uses one.
        # The commands that run an app for long (`serve`, and `keel.cli`'s `worker`, `dev`, `demo`) keep them; so
        # does an environment that sets the variable itself (empty: every plugin). Set before pydantic is imported:
        # this module and the parser import none of it (tests/test_cli_imports.py).
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # The current directory is importable, so `--app myproject.app:app` works from the project (like uvicorn).
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    import asyncio

    try:
        code = asyncio.run(commands[args.command].run(args))
    except _reported_errors() as err:
        print(f"error: {one_line(str(err))}{_data_dir_hint(err, args)}", file=sys.stderr)
        code = exit_code(err)
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, or SIGTERM / SIGHUP (`stopped_by_signals`)
        code = 130
    except BrokenPipeError:  # `keel runs --json | head`: the reader has what it wanted
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    # The command's spans, still buffered (os._exit runs no exit handler), for a few seconds at most.
    if (tracing := sys.modules.get("keel.protocol.tracing")) is not None and not tracing.shutdown(EXPORT_SECONDS):
        print(f"keel: the command's spans were not exported in {EXPORT_SECONDS:g} s (is the OTLP endpoint up?)",
              file=sys.stderr)  # fmt: skip
    os._exit(code)  # sdk-python#300: a Temporal client process can crash at interpreter exit
