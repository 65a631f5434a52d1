"""What a user defines for an AgentController (Mastra's `AgentController` config): modes, subagents, the tools and
policies of its sessions. The sessions themselves are `AgentSession` workflows (`keel.workflows.agent_session`);
`keel.AgentController` adds the client side (`init()`, `create_session()`).

A session's turn offers the model, in order: the agent's own tools, its workspace's tools, the controller's
built-in tools (`ask_user`, `submit_plan`, the task list, `request_access`, and `subagent` when subagents are
configured), the controller's `tools`, and the mode's `tools`/`additional_tools`; then a mode's `available_tools`
allow-list keeps only the names it lists, and a permission `deny` (for the tool, or its category) removes a tool
whatever the allow-list says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from pydantic import BaseModel

from keel.app.definitions import Agent, AppError, Tool

if TYPE_CHECKING:
    from keel.model_providers import ChatModel
    from keel.workspace_providers import Workspace

Category = Literal["read", "edit", "execute", "mcp", "other"]
Policy = Literal["allow", "ask", "deny"]
CATEGORIES: tuple[Category, ...] = ("read", "edit", "execute", "mcp", "other")
POLICIES: tuple[Policy, ...] = ("allow", "ask", "deny")

WORKSPACE_TOOL_CATEGORIES: Mapping[str, Category] = {
    # Mastra Code's categories for the workspace tools (Mastra's core categorises nothing by itself).
    "mastra_workspace_read_file": "read",
    "mastra_workspace_list_files": "read",
    "mastra_workspace_file_stat": "read",
    "mastra_workspace_grep": "read",
    "mastra_workspace_search": "read",
    "mastra_workspace_lsp_inspect": "read",
    "mastra_workspace_get_process_output": "read",
    "mastra_workspace_write_file": "edit",
    "mastra_workspace_edit_file": "edit",
    "mastra_workspace_delete": "edit",
    "mastra_workspace_mkdir": "edit",
    "mastra_workspace_index": "edit",
    "mastra_workspace_execute_command": "execute",
    "mastra_workspace_kill_process": "execute",
}
"""The category of each workspace tool by its Mastra name (a workspace that renames a tool keeps its category)."""

ToolCategoryResolver = Callable[[str], "str | None"]
"""A tool name → its category (one of `Category`), or None for the default; any other answer is a
`ControllerError` naming the tool."""


class ControllerError(AppError):
    """A controller definition that cannot work (duplicate modes, a mode with both `tools` and
    `additional_tools`, a transition to an unknown mode, ...)."""


@dataclass(frozen=True)
class Mode:
    """A way of working: instructions and tools on top of the controller's agent (Mastra's `Mode`).

    Attributes:
        id: unique among the controller's modes.
        instructions: added after the agent's (and the controller's) instructions.
        default: the mode a new session starts in (else the controller's `default_mode_id`, else the first).
        tools / additional_tools: tools this mode adds (one or the other, as Mastra: replace or augment; both add).
        available_tools: if set, the only tool names the model is offered in this mode (`[]`: none).
        transitions_to: the mode a session switches to when a plan it submitted (`submit_plan`) is approved.
        default_model_id: the model a session selects when it enters this mode and has no choice stored for it.
    """

    id: str
    name: str | None = None
    instructions: str = ""
    default: bool = False
    tools: tuple[Tool, ...] | None = None
    additional_tools: tuple[Tool, ...] | None = None
    available_tools: tuple[str, ...] | None = None
    transitions_to: str | None = None
    default_model_id: str | None = None
    metadata: Mapping[str, Any] | None = None

    @property
    def own_tools(self) -> tuple[Tool, ...]:
        return self.tools or self.additional_tools or ()

    @property
    def is_default(self) -> bool:
        return self.default or bool((self.metadata or {}).get("default"))


@dataclass(frozen=True)
class Subagent:
    """A kind of subagent the built-in `subagent` tool can start (Mastra's `Subagent`): a child run of the
    controller's agent with these instructions and only these tools, on a thread of its own; `forked` runs it
    on a copy of the parent's thread with the parent's instructions and tools instead."""

    id: str
    name: str
    description: str
    instructions: str = ""
    allowed_controller_tools: tuple[str, ...] = ()
    allowed_workspace_tools: tuple[str, ...] | None = None
    """None: every workspace tool; a tuple: only those names."""
    default_model_id: str | None = None
    forked: bool = False
    max_steps: int = 50


@dataclass(frozen=True)
class ChannelMessage:
    """A message from a chat platform, as a channel adapter hands it over."""

    platform: str
    thread_id: str
    text: str
    user_id: str | None = None
    is_dm: bool = False
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Channels:
    """Chat platforms that reach the controller through `POST /api/agent-controllers/:id/channels/:platform/webhook`.

    Attributes:
        adapters: platform name -> adapter; `"generic"` (JSON `{threadId, text, userId?}`) is always there.
        resolve_resource_id: `(message, default) -> resource id` for a new chat thread (default
            `channel:<platform>:<thread>`).
        on_session_start: awaited once per new session, before its first message (errors are logged, not raised).
        can_approve: platforms whose adapter shows approval controls; elsewhere `ask` is answered by the policy.
    """

    adapters: Mapping[str, Any] = field(default_factory=dict)
    resolve_resource_id: Callable[[ChannelMessage, str], str] | None = None
    on_session_start: Callable[..., Any] | None = None
    can_approve: tuple[str, ...] = ()


@dataclass(frozen=True)
class ControllerDefinition:
    """An AgentController's configuration; validated when made (`ControllerError`)."""

    id: str
    agent: Agent
    modes: tuple[Mode, ...]
    workspace: Workspace | None = None
    tools: tuple[Tool, ...] = ()
    subagents: tuple[Subagent, ...] = ()
    state_schema: type[BaseModel] | Mapping[str, Any] | None = None
    initial_state: Mapping[str, Any] = field(default_factory=dict)
    tool_category_resolver: ToolCategoryResolver | None = None
    channels: Channels | None = None
    instructions: str = ""
    default_mode_id: str | None = None
    models: Mapping[str, ChatModel] = field(default_factory=dict)
    """Models a session may switch to, by id; a turn runs on the selected one (the agent's own otherwise).
    Empty: any id is accepted and only recorded (Mastra's behaviour: the id is advisory)."""
    judge_model: ChatModel | None = None
    """The model that judges a session's goal after each turn (default: the agent's)."""
    disable_builtin_tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.modes:
            raise ControllerError(f"Controller {self.id!r} needs at least one mode")
        seen: set[str] = set()
        for mode in self.modes:
            if mode.id in seen:
                raise ControllerError(f"Duplicate mode id {mode.id!r} in controller {self.id!r}")
            seen.add(mode.id)
            if mode.tools is not None and mode.additional_tools is not None:
                raise ControllerError(
                    f"Mode {mode.id!r} cannot set both tools and additional_tools: choose replace or augment"
                )
        for mode in self.modes:
            if mode.transitions_to == mode.id:
                raise ControllerError(f"Mode {mode.id!r} transitions_to cannot reference itself")
            if mode.transitions_to is not None and mode.transitions_to not in seen:
                raise ControllerError(
                    f"Mode {mode.id!r} transitions_to references unknown mode {mode.transitions_to!r}"
                )
        if self.default_mode_id is not None and self.default_mode_id not in seen:
            raise ControllerError(f"Default mode not found: {self.default_mode_id}")
        ids = [s.id for s in self.subagents]
        if len(ids) != len(set(ids)):
            raise ControllerError(f"Controller {self.id!r} has two subagents with the same id")
        named = [
            *self.tools,
            *self.agent.tools,
            *(t for m in self.modes for t in (m.tools or m.additional_tools or ())),
        ]
        for tool_name in {t.id for t in named}:
            self.category(tool_name)  # a resolver that answers no category fails here, not in a turn

    @property
    def default_mode(self) -> Mode:
        if self.default_mode_id is not None:
            return self.mode(self.default_mode_id)
        return next((m for m in self.modes if m.is_default), self.modes[0])

    def mode(self, mode_id: str) -> Mode:
        for mode in self.modes:
            if mode.id == mode_id:
                return mode
        raise ControllerError(f"Mode not found: {mode_id}")

    def category(self, tool_name: str, *, workspace_name: str | None = None) -> Category | None:
        """The tool's permission category: the resolver's answer, else the workspace tool table."""
        if self.tool_category_resolver is not None:
            found = self.tool_category_resolver(tool_name)
            if found is not None:
                if found not in get_args(Category):
                    raise ControllerError(
                        f"tool_category_resolver gave {found!r} for tool {tool_name!r}: "
                        f"a category is one of {', '.join(get_args(Category))}, or None"
                    )
                return cast(Category, found)
        return WORKSPACE_TOOL_CATEGORIES.get(workspace_name or tool_name)

    def state_json_schema(self) -> dict[str, Any] | None:
        if self.state_schema is None:
            return None
        if isinstance(self.state_schema, type):
            return self.state_schema.model_json_schema()
        return dict(self.state_schema)

    def initial_state_values(self) -> dict[str, Any]:
        """The schema's defaults, then `initial_state` over them."""
        values: dict[str, Any] = {}
        if isinstance(self.state_schema, type):
            for name, model_field in self.state_schema.model_fields.items():
                if not model_field.is_required():
                    default = model_field.get_default(call_default_factory=True)
                    values[model_field.alias or name] = default
        values.update(self.initial_state)
        return values


def controller_definition(
    id: str,
    agent: Agent,
    *,
    modes: Iterable[Mode],
    workspace: Workspace | None = None,
    tools: Iterable[Tool] = (),
    subagents: Sequence[Subagent] = (),
    **options: Any,
) -> ControllerDefinition:
    return ControllerDefinition(
        id=id,
        agent=agent,
        modes=tuple(modes),
        workspace=workspace,
        tools=tuple(tools),
        subagents=tuple(subagents),
        **options,
    )
