"""Tools heartbeat at half their heartbeat timeout, and not at all without one."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.testing import ActivityEnvironment

from keel.activities import AgentActivities
from keel.app import Agent, App, ToolContext, tool
from keel.model_providers import ModelResponse, ScriptedModel
from keel.storage import Storage
from keel.workflows.contracts import ToolCallInput


class Nap(BaseModel):
    seconds: float


@tool("nap")
async def nap(args: Nap, ctx: ToolContext) -> str:
    """Sleep."""
    await asyncio.sleep(args.seconds)
    return "rested"


APP = App.of(Agent(id="napper", model=ScriptedModel(lambda r: ModelResponse(text="")), tools=(nap,)))


async def beats_during_a_nap(storage: Storage, heartbeat_timeout: timedelta | None, seconds: float) -> list[float]:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=heartbeat_timeout)
    loop = asyncio.get_running_loop()
    start = loop.time()
    beats: list[float] = []

    def on_heartbeat(*details: Any) -> None:
        beats.append(loop.time() - start)

    env.on_heartbeat = on_heartbeat
    call = ToolCallInput(
        run_id="r1", agent_id="napper", thread_id="t1", resource_id="u1", step=1,
        tool_call_id="c1", tool_name="nap", args={"seconds": seconds}, result_message_id="r1-s1-c1",
    )  # fmt: skip
    await storage.create_thread("t1", "u1")
    result = await env.run(AgentActivities(APP, storage).tool_call, call)
    assert result.result == "rested"
    return beats


async def test_a_tool_heartbeats_every_half_heartbeat_timeout(storage: Storage) -> None:
    beats = await beats_during_a_nap(storage, timedelta(seconds=0.2), seconds=0.55)
    assert len(beats) >= 3
    assert beats[0] == pytest.approx(0.1, abs=0.05)
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert all(gap >= 0.08 for gap in gaps)


async def test_a_tool_without_a_heartbeat_timeout_never_heartbeats(storage: Storage) -> None:
    assert await beats_during_a_nap(storage, None, seconds=0.3) == []
