"""The workspace tools an agent gets: `workspace_tools(workspace, request_context)` lists them under the
workspace's tool configuration, each a `WorkspaceTool` carrying Mastra's name, description and input schema,
and an `execute` that resolves the providers, applies read-before-write, the per-file write lock and the hooks.

Read-before-write state is not kept here: the caller passes the call's `ReadRecord` in (Keel keeps them in the
run's workflow state, so they survive a worker crash) and gets the new one back in `CallEffects`.
"""

from __future__ import annotations

import asyncio
import inspect
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from keel.workspace_providers import skill_tools
from keel.workspace_providers import tool_impls as impl
from keel.workspace_providers.errors import (
    FileNotFound,
    FileReadRequired,
    SandboxError,
    WorkspaceError,
    WorkspaceReadOnly,
)
from keel.workspace_providers.lsp import LSP_INSPECT_SPEC, LspInspectInput
from keel.workspace_providers.tool_config import (
    WORKSPACE_TOOLS,
    ResolvedToolConfig,
    ToolConfigContext,
    ToolHookContext,
    decide_per_call,
    resolve_tool_config,
)
from keel.workspace_providers.tool_specs import TOOL_SPECS, search_spec
from keel.workspace_providers.workspace import Workspace

FS = WORKSPACE_TOOLS.FILESYSTEM
SB = WORKSPACE_TOOLS.SANDBOX
SE = WORKSPACE_TOOLS.SEARCH
LSP = WORKSPACE_TOOLS.LSP
TrackerMode = Literal["read", "write"] | None


@dataclass(frozen=True)
class ReadRecord:
    """The agent read `path` of the filesystem `scope` when its mtime was `modified_at_ms`."""

    path: str
    scope: str
    modified_at_ms: int


@dataclass
class CallEffects:
    """What a call changed that the caller keeps: a read to record, a path whose record is cleared, a
    background process started."""

    read: ReadRecord | None = None
    cleared: str | None = None
    process_started: str | None = None


@dataclass
class WorkspaceCall:
    """One call's context: the request context, the read record the caller holds for the call's path."""

    request_context: Mapping[str, Any] = field(default_factory=dict)
    read_record: ReadRecord | None = None
    tool_call_id: str | None = None
    attempt: int = 1
    """More than 1: a retry of a call whose earlier attempt may have done its work (Keel's crash recovery)."""
    effects: CallEffects = field(default_factory=CallEffects)


@dataclass(frozen=True)
class _Kind:
    input_model: type[BaseModel]
    needs: Literal["filesystem", "sandbox", "search", "lsp", "skills"]
    tracker: TrackerMode = None
    writes: bool = False
    write_lock: bool = False
    idempotent: bool = True
    """Re-running after a crash is harmless (most file tools; a write that already landed counts as done);
    edits and commands run at most once."""
    pinned_to_host: bool = False
    """Follow-ups of a background process: they must run where the process lives."""


_KINDS: dict[str, _Kind] = {
    FS.READ_FILE: _Kind(impl.ReadFileInput, "filesystem", tracker="read"),
    FS.WRITE_FILE: _Kind(impl.WriteFileInput, "filesystem", tracker="write", writes=True, write_lock=True),
    # An edit applied twice is not the edit asked for (`x` → `x y` becomes `x y y`): it runs at most once.
    FS.EDIT_FILE: _Kind(
        impl.EditFileInput, "filesystem", tracker="write", writes=True, write_lock=True, idempotent=False
    ),
    FS.LIST_FILES: _Kind(impl.ListFilesInput, "filesystem"),
    FS.DELETE: _Kind(impl.DeleteInput, "filesystem", writes=True, write_lock=True),
    FS.FILE_STAT: _Kind(impl.FileStatInput, "filesystem"),
    FS.MKDIR: _Kind(impl.MkdirInput, "filesystem", writes=True),
    FS.GREP: _Kind(impl.GrepInput, "filesystem"),
    SE.SEARCH: _Kind(impl.SearchInput, "search"),
    SE.INDEX: _Kind(impl.IndexInput, "search", writes=True),
    LSP.LSP_INSPECT: _Kind(LspInspectInput, "lsp"),
    # Mastra adds these at the agent level, outside the workspace tools config (no renaming, no approval).
    **{name: _Kind(model, "skills") for name, model in skill_tools.SKILL_TOOL_INPUTS.items()},
    SB.EXECUTE_COMMAND: _Kind(impl.ExecuteCommandInput, "sandbox", idempotent=False),
    SB.GET_PROCESS_OUTPUT: _Kind(impl.GetProcessOutputInput, "sandbox", idempotent=False, pinned_to_host=True),
    SB.KILL_PROCESS: _Kind(impl.KillProcessInput, "sandbox", idempotent=False, pinned_to_host=True),
}


def tracker_path(path: str) -> str:
    """The key a read record is kept under: the path normalised (`./a//b` and `a/b` are one file)."""
    return posixpath.normpath(path.replace("\\", "/")) if path else path


def _ms(moment: datetime) -> int:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return int(aware.timestamp() * 1000)


@dataclass(frozen=True)
class WorkspaceTool:
    """One enabled workspace tool, bound to its workspace and resolved config."""

    name: str
    workspace_tool_name: str
    workspace: Workspace
    config: ResolvedToolConfig
    kind: _Kind

    @property
    def spec(self) -> dict[str, Any]:
        if self.workspace_tool_name == SE.SEARCH:
            ws = self.workspace
            return search_spec([m for m, ok in zip(("bm25", "vector", "hybrid"), ws.can_modes(), strict=True) if ok])
        if self.workspace_tool_name == LSP.LSP_INSPECT:
            return LSP_INSPECT_SPEC
        if self.kind.needs == "skills":
            return skill_tools.SKILL_TOOL_SPECS[self.workspace_tool_name]
        return TOOL_SPECS[self.workspace_tool_name]

    @property
    def description(self) -> str:
        return str(self.spec["description"])

    @property
    def parameters(self) -> dict[str, Any]:
        return dict(self.spec["inputSchema"])

    @property
    def input_model(self) -> type[BaseModel]:
        return self.kind.input_model

    @property
    def idempotent(self) -> bool:
        return self.kind.idempotent

    @property
    def pinned_to_host(self) -> bool:
        return self.kind.pinned_to_host

    @property
    def tracker(self) -> TrackerMode:
        return self.kind.tracker

    def file_path(self, args: Mapping[str, Any]) -> str | None:
        """The read-tracker key of the call's file (read and write tools), else None."""
        path = args.get("path")
        return tracker_path(path) if self.kind.tracker and isinstance(path, str) else None

    async def needs_approval(self, args: Mapping[str, Any], request_context: Mapping[str, Any]) -> bool:
        context = ToolConfigContext(dict(request_context), self.workspace, dict(args))
        return await decide_per_call(self.config.require_approval, context)

    async def execute(self, args: Mapping[str, Any], call: WorkspaceCall) -> Any:
        """Run the call: write lock (outermost), hooks, read-before-write, then the tool."""
        self.workspace.touch()
        if self.kind.write_lock:
            path = args.get("path")
            if not path:
                raise WorkspaceError("wrapWithWriteLock: input.path is required")
            async with self.workspace.write_lock.hold(tracker_path(str(path)), str(path)):
                return await self._with_hooks(args, call)
        return await self._with_hooks(args, call)

    async def _with_hooks(self, args: Mapping[str, Any], call: WorkspaceCall) -> Any:
        hooks = self.config.hooks
        context = ToolHookContext(
            tool_name=self.name,
            workspace_tool_name=self.workspace_tool_name,
            input=dict(args),
            context={"request_context": dict(call.request_context), "tool_call_id": call.tool_call_id},
        )
        if hooks.before_tool_call is not None:
            before = await _maybe_await(hooks.before_tool_call(context))
            if isinstance(before, Mapping) and before.get("proceed") is False:
                return before.get("output")
        try:
            output = await self._run(args, call)
        except BaseException as err:
            if hooks.after_tool_call is not None:
                await _maybe_await(hooks.after_tool_call(_replace(context, error=err)))
            raise
        if hooks.after_tool_call is not None:
            await _maybe_await(hooks.after_tool_call(_replace(context, output=output)))
        return output

    async def _run(self, raw: Mapping[str, Any], call: WorkspaceCall) -> Any:
        args = self.kind.input_model.model_validate(dict(raw))
        if self.kind.needs == "search":
            return await self._search_call(args)
        if self.kind.needs in ("lsp", "skills"):
            return await self._extension_call(args, call)
        if self.kind.needs == "filesystem":
            fs = await self.workspace.resolve_filesystem(call.request_context)
            if fs is None:
                raise WorkspaceError("No filesystem is configured for this workspace")
            if self.kind.writes and getattr(fs, "read_only", False):
                raise WorkspaceReadOnly(self.workspace_tool_name.removeprefix("mastra_workspace_"))
            timeout_ms = self.workspace.operation_timeout
            if timeout_ms is None:
                return await self._filesystem_call(fs, args, call)
            try:
                return await asyncio.wait_for(self._filesystem_call(fs, args, call), timeout_ms / 1000)
            except TimeoutError:
                raise WorkspaceError(f"{self.name} timed out after {timeout_ms}ms (operation_timeout)") from None
        sandbox = await self.workspace.resolve_sandbox(call.request_context)
        if sandbox is None:
            raise SandboxError("No sandbox is configured for this workspace")
        return await self._sandbox_call(sandbox, args, call)

    async def _extension_call(self, args: Any, call: WorkspaceCall) -> Any:
        if self.kind.needs == "lsp":
            return await self.workspace.lsp.inspect(args.path, args.line, args.match)
        run = getattr(skill_tools, self.workspace_tool_name)
        return await run(self.workspace.skills, args, call.request_context)

    async def _search_call(self, args: Any) -> str:
        if self.workspace_tool_name == SE.SEARCH:
            return await impl.search(self.workspace, args)
        if getattr(self.workspace.filesystem, "read_only", False):
            raise WorkspaceReadOnly("index")
        return await impl.index(self.workspace, args)

    async def _filesystem_call(self, fs: Any, args: Any, call: WorkspaceCall) -> Any:
        name = self.workspace_tool_name
        if name == FS.READ_FILE:
            output = await impl.read_file(fs, args, self.config)
            try:
                stat = await fs.stat(args.path)
                call.effects.read = ReadRecord(tracker_path(args.path), fs.scope, _ms(stat.modified_at))
            except WorkspaceError:
                pass  # nothing to record for a file that vanished after the read
            return output
        if self.kind.tracker == "write":
            expected = await self._check_read_before_write(fs, args, call)
            if name == FS.WRITE_FILE:
                output = await impl.write_file(fs, args, expected, retry=call.attempt > 1)
            else:
                output = await impl.edit_file(fs, args, expected)
            call.effects.cleared = tracker_path(args.path)
            return output
        if name == FS.LIST_FILES:
            return await impl.list_files(fs, args, self.config)
        if name == FS.DELETE:
            return await impl.delete(fs, args)
        if name == FS.FILE_STAT:
            return await impl.file_stat(fs, args)
        if name == FS.MKDIR:
            return await impl.mkdir(fs, args)
        return await impl.grep(fs, args, self.config)

    async def _check_read_before_write(self, fs: Any, args: Any, call: WorkspaceCall) -> datetime | None:
        """The mtime the write must still find (from the agent's last read of this file, if any), after the
        `require_read_before_write` policy: an existing file never read (or read in another filesystem)
        raises `FileReadRequired`. A change since the read fails the write itself, as `StaleFile`."""
        path = tracker_path(args.path)
        record = call.read_record if call.read_record and call.read_record.path == path else None
        same_scope = record is not None and record.scope == fs.scope
        expected = None
        if record is not None and same_scope:
            expected = datetime.fromtimestamp(record.modified_at_ms / 1000, UTC)
        policy = self.config.require_read_before_write
        if policy is None:
            return expected
        try:
            await fs.stat(args.path)
        except FileNotFound:
            return expected  # a new file needs no read (a deleted one fails the write as stale)
        context = ToolConfigContext(dict(call.request_context), self.workspace, args.model_dump(by_alias=True))
        if not await decide_per_call(policy, context):
            return expected
        if record is None:
            raise FileReadRequired(
                f'File "{args.path}" has not been read. You must read a file before writing to it.', args.path
            )
        if not same_scope:
            raise FileReadRequired(
                f'File "{args.path}" was read in a different filesystem. You must read a file before writing to it.',
                args.path,
            )
        return expected

    async def _sandbox_call(self, sandbox: Any, args: Any, call: WorkspaceCall) -> Any:
        name = self.workspace_tool_name
        hint = self._cache_key_hint()
        if name == SB.EXECUTE_COMMAND:
            timeout_ms = int(args.timeout * 1000) if args.timeout is not None else None
            if args.background:
                handle = await sandbox.processes.spawn(args.command, cwd=args.cwd, timeout=timeout_ms)
                call.effects.process_started = handle.pid
                return f"Started background process (PID: {handle.pid})"
            command, piped_tail = impl.split_tail_pipe(args.command)
            try:
                result = await sandbox.execute_command(command, cwd=args.cwd, timeout=timeout_ms)
            except SandboxError as err:  # could not start (a missing cwd): Mastra answers, it does not throw
                return f"Error: {err}"
            return impl.command_output(result, piped_tail if piped_tail is not None else args.tail, self.config)
        if name == SB.GET_PROCESS_OUTPUT:
            handle = sandbox.processes.get(args.pid)
            if handle is None:
                return f"No background process found with PID {args.pid}.{hint}"
            if args.wait and handle.exit_code is None:
                await handle.wait()
            return impl.process_output(handle, args.tail, self.config)
        handle = sandbox.processes.get(args.pid)
        if not await sandbox.processes.kill(args.pid):
            return f"Process {args.pid} was not found or had already exited.{hint}"
        return impl.killed_output(args.pid, handle, self.config)

    def _cache_key_hint(self) -> str:
        ws = self.workspace
        if ws.sandbox is not None or not ws.has_sandbox_config() or ws._sandbox_cache_key is not None:
            return ""
        return (
            " If this process was started from a dynamic sandbox resolver, configure sandboxCacheKey or have the "
            "resolver return the same sandbox for follow-up calls."
        )


def _replace(context: ToolHookContext, **changes: Any) -> ToolHookContext:
    from dataclasses import replace

    return replace(context, **changes)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def workspace_tools(
    workspace: Workspace, request_context: Mapping[str, Any] | None = None, *, taken: Callable[[str], bool] = bool
) -> list[WorkspaceTool]:
    """The tools `workspace` gives an agent now, in Mastra's order: enabled by the config (functions evaluated
    with this request context), write tools dropped on a read-only filesystem, renamed by `name`. A name used
    twice (or one `taken` says another tool of the agent has) raises `WorkspaceError`."""
    context = ToolConfigContext(dict(request_context or {}), workspace)
    config = workspace.get_tools_config() or {}
    read_only = bool(getattr(workspace.filesystem, "read_only", False))
    wanted: list[str] = []
    if workspace.has_filesystem_config():
        wanted += [FS.READ_FILE, FS.WRITE_FILE, FS.EDIT_FILE, FS.LIST_FILES, FS.DELETE, FS.FILE_STAT, FS.MKDIR, FS.GREP]
    if workspace.can_bm25 or workspace.can_vector:
        wanted += [SE.SEARCH, SE.INDEX]
    if workspace.has_sandbox_config():
        wanted += [SB.EXECUTE_COMMAND, SB.GET_PROCESS_OUTPUT, SB.KILL_PROCESS]
    if workspace.lsp is not None:
        wanted.append(LSP.LSP_INSPECT)
    tools: list[WorkspaceTool] = []
    names: set[str] = set()
    for tool_name in wanted:
        resolved = await resolve_tool_config(config, tool_name, context)
        kind = _KINDS[tool_name]
        if not resolved.enabled or (kind.writes and read_only):
            continue
        exposed = resolved.name or tool_name
        if exposed in names or (taken is not bool and taken(exposed)):
            raise WorkspaceError(
                f'Duplicate workspace tool name "{exposed}": tool "{tool_name}" conflicts with an already-registered '
                'tool. Check your tools config for duplicate "name" values.'
            )
        names.add(exposed)
        tools.append(WorkspaceTool(exposed, tool_name, workspace, resolved, kind))
    if workspace.skills is not None:
        for tool_name in skill_tools.SKILL_TOOLS:
            if tool_name in names or (taken is not bool and taken(tool_name)):
                raise WorkspaceError(
                    f'Duplicate tool name "{tool_name}": the workspace\'s skills add a tool of that name.'
                )
            names.add(tool_name)
            tools.append(
                WorkspaceTool(tool_name, tool_name, workspace, ResolvedToolConfig(enabled=True), _KINDS[tool_name])
            )
    return tools
