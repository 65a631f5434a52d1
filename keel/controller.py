"""`AgentController`: Mastra's shared runtime host for interactive agent sessions, on Temporal.

    controller = AgentController(id="assistant", agent=agent, modes=[Mode("plan", default=True), Mode("build")])
    app = App.of(agent, controllers=[controller])       # a worker for the app runs its sessions
    await controller.init()                             # connects to Temporal and the storage
    session = await controller.create_session("user-123")
    unsubscribe = session.subscribe(print)
    await session.send_message("Plan a small TypeScript CLI.")

Each session is an `AgentSession` workflow (see `keel.workflows.agent_session`): its mode, model, permissions,
grants, state, pending approvals and events outlive any process, and a subscriber that reconnects from an offset
gets every event it missed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from keel.app.controller import Channels, ControllerDefinition, Mode, Subagent, ToolCategoryResolver
from keel.app.definitions import Agent, Tool

if TYPE_CHECKING:
    from keel.client.controller import ControllerClient, Session
    from keel.client.keel_client import KeelClient
    from keel.model_providers import ChatModel
    from keel.storage import Storage
    from keel.workspace_providers import Workspace


class AgentController:
    """The controller: its definition (validated now: `ControllerError`), and once `init()` has run, its
    sessions. Register it on the app (`App.of(agent, controllers=[controller])`) so workers run its sessions."""

    def __init__(
        self,
        id: str,
        agent: Agent,
        *,
        modes: Iterable[Mode],
        storage: Storage | str | None = None,
        workspace: Workspace | None = None,
        tools: Iterable[Tool] = (),
        subagents: Sequence[Subagent] = (),
        state_schema: type[BaseModel] | Mapping[str, Any] | None = None,
        initial_state: Mapping[str, Any] | None = None,
        tool_category_resolver: ToolCategoryResolver | None = None,
        channels: Channels | None = None,
        instructions: str = "",
        default_mode_id: str | None = None,
        models: Mapping[str, ChatModel] | None = None,
        judge_model: ChatModel | None = None,
        disable_builtin_tools: Iterable[str] = (),
    ) -> None:
        self.definition = ControllerDefinition(
            id=id,
            agent=agent,
            modes=tuple(modes),
            workspace=workspace,
            tools=tuple(tools),
            subagents=tuple(subagents),
            state_schema=state_schema,
            initial_state=dict(initial_state or {}),
            tool_category_resolver=tool_category_resolver,
            channels=channels,
            instructions=instructions,
            default_mode_id=default_mode_id,
            models=dict(models or {}),
            judge_model=judge_model,
            disable_builtin_tools=tuple(disable_builtin_tools),
        )
        self._storage_option = storage
        self._client: ControllerClient | None = None

    @classmethod
    def from_definition(
        cls, definition: ControllerDefinition, *, storage: Storage | str | None = None
    ) -> AgentController:
        """The controller an app defines (`app.controllers[id]`), to open its sessions from Python."""
        controller = cls.__new__(cls)
        controller.definition = definition
        controller._storage_option = storage
        controller._client = None
        return controller

    @property
    def id(self) -> str:
        return self.definition.id

    @property
    def modes(self) -> tuple[Mode, ...]:
        return self.definition.modes

    async def init(self, client: KeelClient | None = None, storage: Storage | None = None) -> AgentController:
        """Connect to Temporal (the settings' address, or `client`) and open the storage the workers write (the
        settings' `KEEL_STORAGE_URL`, the `storage` given here or to the constructor). Idempotent."""
        if self._client is not None:
            return self
        from keel.client.controller import ControllerClient
        from keel.client.keel_client import KeelClient
        from keel.storage import open_storage

        keel = client or await KeelClient.connect()
        chosen = storage or self._storage_option
        store = chosen if chosen is not None and not isinstance(chosen, str) else open_storage(chosen)
        await store.init()
        self._client = ControllerClient(keel, store, self.id, self.definition)
        return self

    @property
    def client(self) -> ControllerClient:
        if self._client is None:
            raise RuntimeError(f"AgentController {self.id!r}: call `await controller.init()` first")
        return self._client

    async def create_session(
        self,
        resource_id: str,
        scope: str | None = None,
        *,
        thread_id: str | None = None,
        tags: dict[str, Any] | None = None,
    ) -> Session:
        """The session of (`resource_id`, `scope`), made if there is none: the same one for every process."""
        return await self.client.create_session(resource_id, scope, thread_id=thread_id, tags=tags)

    async def sessions(self, resource_id: str | None = None) -> list[dict[str, Any]]:
        """Open sessions of this controller (of one resource), from visibility."""
        return await self.client.sessions(resource_id)

    def list_modes(self) -> list[dict[str, Any]]:
        return [
            {"id": m.id, "name": m.name or m.id, "default": m.is_default, "defaultModelId": m.default_model_id}
            for m in self.definition.modes
        ]


__all__ = ["AgentController", "Channels", "Mode", "Subagent"]
