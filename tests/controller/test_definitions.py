"""A controller that cannot work is refused when it is defined, with what is wrong, not in a session's turn."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from keel import Agent, AgentController, Mode, ScriptedModel, Subagent, ToolContext, tool
from keel.app.controller import ControllerError
from keel.model_providers import ModelResponse


class Noop(BaseModel):
    pass


@tool("noop")
async def noop(args: Noop, ctx: ToolContext) -> dict[str, str]:
    """Nothing."""
    return {}


AGENT = Agent(id="a", instructions="", model=ScriptedModel(lambda request: ModelResponse(text="ok")), tools=(noop,))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"modes": []}, "needs at least one mode"),
        ({"modes": [Mode("plan"), Mode("plan")]}, "Duplicate mode id 'plan'"),
        ({"modes": [Mode("plan", tools=(noop,), additional_tools=(noop,))]}, "cannot set both tools and additional"),
        ({"modes": [Mode("plan", transitions_to="plan")]}, "transitions_to cannot reference itself"),
        ({"modes": [Mode("plan", transitions_to="ship")]}, "references unknown mode 'ship'"),
        ({"modes": [Mode("plan")], "default_mode_id": "build"}, "Default mode not found: build"),
        (
            {"modes": [Mode("plan")], "subagents": [Subagent("x", "X", "d"), Subagent("x", "Y", "d")]},
            "two subagents with the same id",
        ),
        (
            {"modes": [Mode("plan")], "tool_category_resolver": lambda name: "exec"},
            "gave 'exec' for tool 'noop': a category is one of read, edit, execute, mcp, other, or None",
        ),
    ],
)
def test_a_controller_that_cannot_work_is_refused_with_the_reason(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ControllerError, match=message):
        AgentController("c", AGENT, **options)


def test_a_resolver_may_answer_plain_strings_and_none() -> None:
    controller = AgentController(
        "c", AGENT, modes=[Mode("plan")], tool_category_resolver=lambda name: "execute" if name == "noop" else None
    )
    assert controller.definition.category("noop") == "execute"
    assert controller.definition.category("mastra_workspace_read_file") == "read"  # the workspace table
