"""What a step of a session's turn works with: the mode's tools less what the session's permissions deny, its
instructions, its model, and each tool's category and policy (resolved in the activity, from the app's
controller definition and the turn's `TurnConfig`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from keel.app import App, Tool
from keel.app.controller_tools import SubagentInput, category_of, turn_instructions, turn_tools
from keel.workflows.contracts import Policy, SubagentPlan, TurnConfig

if TYPE_CHECKING:
    from keel.model_providers import ChatModel


class TurnTools:
    def __init__(self, app: App, turn: TurnConfig, request_context: Mapping[str, Any] | None) -> None:
        self.app = app
        self.turn = turn
        self.controller = app.controller(turn.controller_id)
        self.request_context = request_context
        self.all: list[Tool] = []
        self.offered: list[Tool] = []
        self.instructions = ""

    async def load(self) -> TurnTools:
        t = self.turn
        self.all = await turn_tools(
            self.app, self.controller, t.mode_id, self.request_context, subagent_id=t.subagent_id
        )
        self.offered = [tool for tool in self.all if self.policy(tool) != "deny"]
        self.instructions = await turn_instructions(
            self.app, self.controller, t.mode_id, self.request_context, subagent_id=t.subagent_id
        )
        return self

    @property
    def model(self) -> ChatModel:
        models = self.controller.models
        if self.turn.model_id is not None and self.turn.model_id in models:
            return models[self.turn.model_id]
        if self.turn.subagent_id is not None:
            sub = next(s for s in self.controller.subagents if s.id == self.turn.subagent_id)
            if sub.default_model_id is not None and sub.default_model_id in models:
                return models[sub.default_model_id]
        return self.controller.agent.model

    def category(self, tool: Tool) -> str | None:
        return category_of(self.controller, tool)

    def policy(self, tool: Tool) -> Policy:
        """The session's permissions decide, for a subagent's calls too (they wait in the parent session)."""
        return self.turn.permissions.resolve(tool.id, self.category(tool))

    def denied(self, name: str) -> bool:
        tool = next((t for t in self.all if t.id == name), None)
        return tool is not None and self.policy(tool) == "deny"

    async def subagent_plan(self, args: BaseModel) -> tuple[SubagentPlan | None, str | None]:
        """The child run a `subagent` call starts, or the error the model sees."""
        assert isinstance(args, SubagentInput)
        subs = {s.id: s for s in self.controller.subagents}
        sub = subs.get(args.agent_type)
        if sub is None:
            return None, f"Unknown agent type: {args.agent_type}. Valid types: {', '.join(subs)}"
        forked = sub.forked if args.forked is None else args.forked
        chosen = self.turn.subagent_models
        model_id = None if forked else (args.model_id or chosen.get(sub.id) or chosen.get("") or sub.default_model_id)
        child = (
            self.all
            if forked
            else await turn_tools(
                self.app, self.controller, self.turn.mode_id, self.request_context, subagent_id=sub.id
            )
        )
        plan = SubagentPlan(
            agent_type=sub.id,
            task=args.task,
            forked=forked,
            model_id=model_id,
            max_steps=sub.max_steps,
            tools=[t.id for t in child if self.policy(t) != "deny"],
        )
        return plan, None

    def tool(self, name: str) -> Tool | None:
        """A tool the turn may run (offered, not denied)."""
        return next((t for t in self.offered if t.id == name), None)
