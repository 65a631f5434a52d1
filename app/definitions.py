"""What a user defines: tools, agents and the app that holds them (like `new Mastra({...})`).

Error tree::

    AppError
     ├── UnknownAgent
     ├── UnknownTool
     └── AppLoadError
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:  # types only (`ToolSpec` is imported where a spec is built): a client imports `keel.app` for `App`
    from keel.app.controller import ControllerDefinition
    from keel.model_providers import ChatModel, ToolSpec
    from keel.workspace_providers import VectorStore, Workspace
    from keel.workspace_providers.tools import ReadRecord, WorkspaceTool


class AppError(Exception):
    """Base of every app definition error."""


class UnknownAgent(AppError):
    def __init__(self, agent_id: str, known: Iterable[str]) -> None:
        names = ", ".join(sorted(known)) or "none"
        super().__init__(f"Unknown agent {agent_id!r} (known agents: {names})")
        self.agent_id = agent_id


class UnknownTool(AppError):
    def __init__(self, tool_name: str, agent_id: str | None) -> None:
        owner = f"Agent {agent_id!r}" if agent_id else "The app"
        super().__init__(f"{owner} has no tool {tool_name!r}")
        self.tool_name = tool_name


class AppLoadError(AppError):
    """An app reference (`module:attr`) that does not resolve to an `App`."""


class ToolSuspended(Exception):
    """Raised by `ToolContext.suspend`: the workflow step waits for `resumeData` matching `resume_schema`, then
    runs the tool again with it in `ctx.resume_data`."""

    def __init__(self, payload: Any, resume_schema: Mapping[str, Any] | None) -> None:
        super().__init__("suspended")
        self.payload = payload
        self.resume_schema = dict(resume_schema) if resume_schema is not None else None


class SessionAccess(typing.Protocol):
    """What a tool of an AgentController session's turn can reach of its session (`ToolContext.session`):
    settings of the session's thread (kept in storage with the thread) and the session's event log."""

    async def get_thread_setting(self, key: str) -> Any: ...

    async def set_thread_setting(self, key: str, value: Any) -> None: ...

    async def emit(self, event: Mapping[str, Any]) -> None: ...


class HoldsControllerDefinition(typing.Protocol):
    """A `keel.AgentController`: what `App.of(controllers=...)` takes besides a bare definition."""

    @property
    def definition(self) -> ControllerDefinition: ...


@dataclass(frozen=True)
class ToolContext:
    """What a running tool knows about its call. `attempt` > 1 means a retry after a crash or timeout."""

    run_id: str
    tool_call_id: str
    agent_id: str
    thread_id: str
    resource_id: str
    attempt: int = 1
    request_context: Mapping[str, Any] = field(default_factory=dict)
    read_record: ReadRecord | None = None
    """The run's record of the agent's last read of the file this call writes (workspace write tools)."""
    effects: dict[str, Any] = field(default_factory=dict)
    """What a workspace tool reports back to the run: `read` (a `ReadRecord`), `cleared`, `process_started`."""
    resume_data: Any = None
    """After `suspend`: the data the call was resumed with (validated against the schema)."""
    session: SessionAccess | None = None
    """In a turn of an AgentController session: its thread's settings and its event log."""

    def suspend(self, payload: Any = None, resume_schema: Mapping[str, Any] | None = None) -> typing.NoReturn:
        """Stop here and wait (`KeelStatus=suspended`) for resume data matching `resume_schema` (a JSON Schema);
        the tool then runs again with it in `resume_data`. In a workflow's tool step, or an agent run's tool call
        (resumed with the run's `resume_tool` signal or `resume_tool_call` update)."""
        raise ToolSuspended(payload, resume_schema)

    @property
    def idempotency_key(self) -> str:
        """Stable across retries of this call: use it to make side effects happen once."""
        return f"{self.run_id}/{self.tool_call_id}"


ApprovalPolicy = bool | Callable[[Any], bool | Awaitable[bool]]
ToolFn = Callable[[Any, ToolContext], Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    """A function tool: an async function taking a pydantic input model and a `ToolContext`.

    Attributes:
        id: the name the model calls it by.
        description: shown to the model.
        input_schema: pydantic model the arguments are validated against.
        execute: the async function.
        require_approval: a bool, or a function of the validated input returning one (may be async).
        idempotent: True if re-running the tool after a crash is harmless; False makes Keel run it at most once
            (a lost attempt then fails the call instead of silently re-running it).
        parameters: the JSON schema the model sees, when it is not the input model's own (workspace tools
            advertise Mastra's schemas exactly).
        workspace_tool: set on the tools a workspace gives an agent.
    """

    id: str
    description: str
    input_schema: type[BaseModel]
    execute: ToolFn
    require_approval: ApprovalPolicy = False
    idempotent: bool = True
    parameters: Mapping[str, Any] | None = None
    workspace_tool: WorkspaceTool | None = None

    @functools.cached_property
    def spec(self) -> ToolSpec:
        """The tool as the model sees it (computed once: building a JSON schema costs ~1 ms)."""
        from keel.model_providers import ToolSpec

        schema = dict(self.parameters) if self.parameters is not None else self.input_schema.model_json_schema()
        return ToolSpec(name=self.id, description=self.description, parameters=schema)

    def parse_args(self, args: Mapping[str, Any]) -> BaseModel:
        """Validate arguments; raises `pydantic.ValidationError`."""
        return self.input_schema.model_validate(dict(args))

    async def needs_approval(self, args: Mapping[str, Any]) -> bool:
        if isinstance(self.require_approval, bool):
            return self.require_approval
        try:
            parsed = self.parse_args(args)
        except ValidationError:
            return False  # the call will fail validation anyway; nothing to approve
        decision = self.require_approval(parsed)
        if inspect.isawaitable(decision):
            decision = await decision
        return bool(decision)


def tool(
    id: str | None = None,
    *,
    description: str | None = None,
    require_approval: ApprovalPolicy = False,
    idempotent: bool = True,
) -> Callable[[ToolFn], Tool]:
    """Decorator turning `async def f(args: Model, ctx: ToolContext)` into a `Tool`.

    The input schema is the annotation of the first parameter; the description defaults to the docstring.
    """

    def wrap(fn: ToolFn) -> Tool:
        hints = typing.get_type_hints(fn)
        params = list(inspect.signature(fn).parameters)
        schema = hints.get(params[0]) if params else None
        if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise AppError(f"Tool {fn.__name__}: the first parameter must be annotated with a pydantic model")
        return Tool(
            id=id or fn.__name__,
            description=description or inspect.getdoc(fn) or "",
            input_schema=schema,
            execute=fn,
            require_approval=require_approval,
            idempotent=idempotent,
        )

    return wrap


@dataclass(frozen=True)
class Agent:
    """An agent: instructions, a model and tools. `max_steps` bounds model calls per run (Mastra's default 5).
    `workspace` gives it the workspace's tools and instructions (else it inherits the app's workspace)."""

    id: str
    model: ChatModel
    instructions: str = ""
    name: str | None = None
    description: str = ""
    tools: tuple[Tool, ...] = ()
    max_steps: int = 5
    workspace: Workspace | None = None

    def __post_init__(self) -> None:
        ids = [t.id for t in self.tools]
        if len(ids) != len(set(ids)):
            raise AppError(f"Agent {self.id!r} has two tools with the same id")

    @property
    def display_name(self) -> str:
        return self.name or self.id

    def tool(self, name: str) -> Tool:
        for t in self.tools:
            if t.id == name:
                return t
        raise UnknownTool(name, self.id)


ClassifyFn = Callable[[Any, ToolContext], Awaitable[Mapping[str, Any]]]


@dataclass(frozen=True)
class Classifier:
    """A classifier for workflow `classifier` steps: `classify(state, ctx)` answers each of its questions about
    the step's state (a value, or `{"value": ..., "reason"?: ...}`). The step's output is Mastra's
    `{values: {question: value}, answers: {question: {value, ...}}, usage}`."""

    id: str
    classify: ClassifyFn
    description: str = ""


@dataclass
class App:
    """Everything a worker, the CLI and the HTTP API load from one reference (`module:attr`).

    `workspace` is the global workspace, inherited by every agent that has none of its own; `workspaces` are
    further ones, listed and fetched by id (agents' own workspaces are registered too). `vectors` are the named
    vector stores the HTTP API serves (`new Mastra({vectors})`); each workspace's own vector store is registered
    too, under the workspace's id, unless registered by name already."""

    agents: dict[str, Agent] = field(default_factory=dict)
    workspace: Workspace | None = None
    workspaces: dict[str, Workspace] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)
    """Tools of the app itself, for workflow steps (every agent's tools and the built-in `ask-human` are there
    too: `workflow_tools()`)."""
    workflows: tuple[type, ...] = ()
    classifiers: dict[str, Classifier] = field(default_factory=dict)
    controllers: dict[str, ControllerDefinition] = field(default_factory=dict)
    """AgentControllers by id: their sessions run on the app's workers (`keel.AgentController`)."""
    """Code workflows: `@workflow.defn` classes (subclass `keel.workflows.Resumable` for suspend points). The
    worker runs them (in Temporal's sandbox); they are listed, started and resumed like stored definitions."""
    vectors: dict[str, VectorStore] = field(default_factory=dict)
    """Vector stores by name (`/api/vectors`); operations on them run on the app's workers."""

    def __post_init__(self) -> None:
        found = [
            self.workspace,
            *self.workspaces.values(),
            *(a.workspace for a in self.agents.values()),
            *(c.workspace for c in self.controllers.values()),
        ]
        registry: dict[str, Workspace] = {}
        for ws in found:
            if ws is None:
                continue
            if registry.get(ws.id, ws) is not ws:
                raise AppError(f"Two workspaces have the id {ws.id!r}")
            registry[ws.id] = ws
        self.workspaces = registry
        self.vectors = _with_workspace_vectors(self.vectors, registry.values())

    @classmethod
    def of(
        cls,
        *agents: Agent,
        workspace: Workspace | None = None,
        tools: Iterable[Tool] = (),
        workflows: Iterable[type] = (),
        classifiers: Iterable[Classifier] = (),
        controllers: Iterable[ControllerDefinition | HoldsControllerDefinition] = (),
        vectors: Mapping[str, VectorStore] | None = None,
    ) -> App:
        found: list[ControllerDefinition] = [
            c if not hasattr(c, "definition") else c.definition  # a `keel.AgentController` holds its definition
            for c in controllers
        ]
        all_agents = {a.id: a for a in agents}
        for controller in found:  # a controller's agent is one of the app's (its runs are AgentRuns)
            if all_agents.setdefault(controller.agent.id, controller.agent) is not controller.agent:
                raise AppError(
                    f"Controller {controller.id!r}: another agent of the app has the id {controller.agent.id!r}"
                )
        return cls(
            agents=all_agents,
            workspace=workspace,
            tools={t.id: t for t in tools},
            workflows=tuple(workflows),
            classifiers={c.id: c for c in classifiers},
            controllers={c.id: c for c in found},
            vectors=dict(vectors or {}),
        )

    def code_workflows(self) -> dict[str, type]:
        """The code workflows by workflow type name (what `@workflow.defn` recorded on the class)."""
        found: dict[str, type] = {}
        for w in self.workflows:
            definition = getattr(w, "__temporal_workflow_definition", None)
            if definition is None:
                raise AppError(f"{w.__name__} is not a Temporal workflow: decorate it with @workflow.defn")
            found[definition.name or w.__name__] = w
        return found

    def workflow_tools(self) -> dict[str, Tool]:
        """The tools a workflow's tool steps may name: the built-ins, every agent's, then the app's own."""
        from keel.app.builtin_tools import BUILTIN_TOOLS

        found = {t.id: t for t in BUILTIN_TOOLS}
        for agent in self.agents.values():
            found.update((t.id, t) for t in agent.tools)
        found.update(self.tools)
        return found

    def tool(self, tool_id: str) -> Tool:
        """A tool of the app by id (`workflow_tools`: the built-ins, every agent's own, the app's)."""
        found = self.workflow_tools().get(tool_id)
        if found is None:
            raise UnknownTool(tool_id, None)
        return found

    def controller(self, controller_id: str) -> ControllerDefinition:
        try:
            return self.controllers[controller_id]
        except KeyError:
            known = ", ".join(sorted(self.controllers)) or "none"
            raise AppError(f"Unknown agent controller {controller_id!r} (known: {known})") from None

    def agent(self, agent_id: str) -> Agent:
        try:
            return self.agents[agent_id]
        except KeyError:
            raise UnknownAgent(agent_id, self.agents) from None

    def workspace_of(self, agent: Agent) -> Workspace | None:
        """The agent's own workspace, else its controller's (an agent without one gets the controller's, as in
        Mastra), else the app's."""
        if agent.workspace is not None:
            return agent.workspace
        for controller in self.controllers.values():
            if controller.agent.id == agent.id and controller.workspace is not None:
                return controller.workspace
        return self.workspace

    def get_workspace(self, workspace_id: str) -> Workspace:
        try:
            return self.workspaces[workspace_id]
        except KeyError:
            known = ", ".join(sorted(self.workspaces)) or "none"
            raise AppError(f"Unknown workspace {workspace_id!r} (known workspaces: {known})") from None

    def get_vector(self, name: str) -> VectorStore:
        try:
            return self.vectors[name]
        except KeyError:
            known = ", ".join(sorted(self.vectors)) or "none"
            raise AppError(f"Unknown vector store {name!r} (known vector stores: {known})") from None


def _with_workspace_vectors(
    named: Mapping[str, VectorStore], workspaces: Iterable[Workspace]
) -> dict[str, VectorStore]:
    """`named`, and each workspace's vector store under the workspace's id (a store registered already, by name
    or by another workspace, is listed once)."""
    found = dict(named)
    listed = {id(store) for store in found.values()}
    for ws in workspaces:
        engine = getattr(ws, "search_engine", None)  # a stand-in workspace (a test's) may have none
        store = engine.vector.store if engine is not None and engine.vector is not None else None
        if store is None or id(store) in listed:
            continue
        if ws.id in found:
            raise AppError(
                f"The vector store of workspace {ws.id!r} is listed under the workspace's id, which names another "
                "vector store: register the workspace's store under a name of its own in `vectors`"
            )
        found[ws.id] = store
        listed.add(id(store))
    return found
