"""Which workspace tools an agent gets, and how each behaves: Mastra's `WorkspaceToolsConfig`, resolved the same
way (built-in defaults, then the top-level `enabled` / `require_approval`, then the per-tool entry keyed by the
`WORKSPACE_TOOLS` name).

    Workspace(..., tools={
        "require_approval": False,                                  # top-level defaults
        WORKSPACE_TOOLS.FILESYSTEM.WRITE_FILE: {"require_approval": True, "require_read_before_write": True},
        WORKSPACE_TOOLS.FILESYSTEM.READ_FILE: {"name": "view"},
        WORKSPACE_TOOLS.SANDBOX.EXECUTE_COMMAND: {"enabled": lambda ctx: ctx.request_context.get("role") == "admin"},
        "hooks": {"before_tool_call": ..., "after_tool_call": ...},
    })

Keys may be snake_case or Mastra's camelCase. `enabled` functions get a `ToolConfigContext` (request context,
workspace) when the tools are listed and fail closed (False) if they raise; `require_approval` and
`require_read_before_write` functions also get the call's `args` and fail closed (True).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from keel.workspace_providers.errors import WorkspaceError


class _Filesystem:
    READ_FILE = "mastra_workspace_read_file"
    WRITE_FILE = "mastra_workspace_write_file"
    EDIT_FILE = "mastra_workspace_edit_file"
    LIST_FILES = "mastra_workspace_list_files"
    DELETE = "mastra_workspace_delete"
    FILE_STAT = "mastra_workspace_file_stat"
    MKDIR = "mastra_workspace_mkdir"
    GREP = "mastra_workspace_grep"


class _Sandbox:
    EXECUTE_COMMAND = "mastra_workspace_execute_command"
    GET_PROCESS_OUTPUT = "mastra_workspace_get_process_output"
    KILL_PROCESS = "mastra_workspace_kill_process"


class _Search:
    SEARCH = "mastra_workspace_search"
    INDEX = "mastra_workspace_index"


class _Lsp:
    LSP_INSPECT = "mastra_workspace_lsp_inspect"


class WORKSPACE_TOOLS:
    FILESYSTEM = _Filesystem
    SANDBOX = _Sandbox
    SEARCH = _Search
    LSP = _Lsp


_TOP_LEVEL = {"enabled", "require_approval", "hooks", "write_lock_timeout_ms"}
_PER_TOOL = {"enabled", "require_approval", "require_read_before_write", "name", "max_output_tokens", "max_media_bytes"}
_HOOKS = {"before_tool_call", "after_tool_call"}


@dataclass(frozen=True)
class ToolConfigContext:
    """What a config function sees. `args` is set for `require_approval` / `require_read_before_write`."""

    request_context: Mapping[str, Any]
    workspace: Any
    args: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ToolHookContext:
    """What a hook sees: the exposed `tool_name` (after remapping) and Mastra's `workspace_tool_name`."""

    tool_name: str
    workspace_tool_name: str
    input: Mapping[str, Any]
    context: Mapping[str, Any]
    output: Any = None
    error: BaseException | None = None


Dynamic = bool | Callable[[ToolConfigContext], bool | Awaitable[bool]]
BeforeHook = Callable[[ToolHookContext], Any]
AfterHook = Callable[[ToolHookContext], Any]


@dataclass(frozen=True)
class Hooks:
    before_tool_call: BeforeHook | None = None
    after_tool_call: AfterHook | None = None


@dataclass(frozen=True)
class ResolvedToolConfig:
    """One tool's effective settings; `enabled` already decided, the others evaluated per call."""

    enabled: bool
    require_approval: Dynamic = False
    require_read_before_write: Dynamic | None = None
    name: str | None = None
    max_output_tokens: int | None = None
    max_media_bytes: int | None = None
    hooks: Hooks = field(default_factory=Hooks)


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), key)


def normalize_tools_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The config with snake_case keys, checked: an unknown option or tool name raises `WorkspaceError`."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise WorkspaceError(f"tools config must be a mapping, got {type(config).__name__}")
    out: dict[str, Any] = {}
    for raw_key, value in config.items():
        if raw_key.startswith("mastra_workspace_"):
            if not isinstance(value, Mapping):
                raise WorkspaceError(f"tools[{raw_key!r}] must be a mapping of options")
            entry = {_snake(k): v for k, v in value.items()}
            unknown = sorted(set(entry) - _PER_TOOL)
            if unknown:
                raise WorkspaceError(f"tools[{raw_key!r}]: unknown option(s) {', '.join(unknown)}")
            if "name" in entry and not (isinstance(entry["name"], str) and entry["name"]):
                raise WorkspaceError(f"tools[{raw_key!r}].name must be a non-empty string")
            out[raw_key] = entry
            continue
        key = _snake(raw_key)
        if key not in _TOP_LEVEL:
            known = ", ".join(sorted(_TOP_LEVEL))
            raise WorkspaceError(f"tools: unknown option {raw_key!r} (options: {known}, or a WORKSPACE_TOOLS name)")
        if key == "hooks":
            hooks = {_snake(k): v for k, v in (value or {}).items()}
            unknown = sorted(set(hooks) - _HOOKS)
            if unknown:
                raise WorkspaceError(f"tools.hooks: unknown hook(s) {', '.join(unknown)}")
            value = Hooks(**hooks)
        out[key] = value
    return out


async def _decide(value: Dynamic, context: ToolConfigContext, *, on_error: bool) -> bool:
    if isinstance(value, bool):
        return value
    try:
        decided = value(context)
        if inspect.isawaitable(decided):
            decided = await decided
        return bool(decided)
    except Exception:
        return on_error  # fail closed, as Mastra does


async def resolve_tool_config(config: Mapping[str, Any], tool: str, context: ToolConfigContext) -> ResolvedToolConfig:
    """`tool`'s settings under a normalised `config`; evaluates `enabled` (False if its function raises)."""
    per_tool: Mapping[str, Any] = config.get(tool, {})
    enabled = per_tool.get("enabled", config.get("enabled", True))
    return ResolvedToolConfig(
        enabled=await _decide(enabled, context, on_error=False),
        require_approval=per_tool.get("require_approval", config.get("require_approval", False)),
        require_read_before_write=per_tool.get("require_read_before_write"),
        name=per_tool.get("name"),
        max_output_tokens=per_tool.get("max_output_tokens"),
        max_media_bytes=per_tool.get("max_media_bytes"),
        hooks=config.get("hooks") or Hooks(),
    )


async def decide_per_call(value: Dynamic | None, context: ToolConfigContext) -> bool:
    """A per-call setting (`require_approval`, `require_read_before_write`): True if its function raises."""
    return False if value is None else await _decide(value, context, on_error=True)
