"""pydantic-ai's Temporal integration (pydantic-ai-slim 2.68.0), as its docs show it.

`Agent(OpenAIChatModel(...), name="bench", tools=[write_read], capabilities=[TemporalDurability()])` (defaults:
60 s start-to-close, model requests and tool calls as regular activities), run by `agent.run(prompt)` in a
workflow listing it in `__pydantic_ai_agents__` (`PydanticAIWorkflow`), `PydanticAIPlugin()` on the client (so
on its workers). The model is pydantic-ai's `OpenAIChatModel` with `OpenAIProvider(base_url=<fake server>,
api_key="x")`; the tool is the shared `write_read_file`, an activity by `TemporalDurability`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import uuid
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin, PydanticAIWorkflow, TemporalDurability
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.peers.shared import INSTRUCTIONS, final_text, prompt, serve_driver, write_read_file

MODEL_NAME = "pydantic-ai-bench"


async def write_read(path: str, content: str) -> dict[str, int]:
    """Write a small file, read it back and return its length.

    Args:
        path: File name (written under the bench directory)
        content: What to write
    """
    return {"length": write_read_file(path, content)}


model = OpenAIChatModel(
    MODEL_NAME,
    provider=OpenAIProvider(base_url=os.environ.get("PEERS_MODEL_URL", "http://127.0.0.1:9/v1"), api_key="x"),
)
agent = Agent(
    model,
    name="bench",
    instructions=INSTRUCTIONS,
    tools=[write_read],
    capabilities=[TemporalDurability()],
)


@workflow.defn
class PydanticAIBenchRun(PydanticAIWorkflow):
    __pydantic_ai_agents__ = [agent]

    @workflow.run
    async def run(self, user_prompt: str) -> str:
        result = await agent.run(user_prompt)
        return result.output


async def worker(args: argparse.Namespace) -> None:
    client = await Client.connect(args.address, plugins=[PydanticAIPlugin()])
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    # The SDK's default workflow runner (the sandbox), unless the bench runs every workflow unsandboxed.
    unsandboxed = bool(os.environ.get("PEERS_UNSANDBOXED"))
    options: dict[str, Any] = {"workflow_runner": UnsandboxedWorkflowRunner()} if unsandboxed else {}
    async with Worker(client, task_queue=args.task_queue, workflows=[PydanticAIBenchRun], **options):
        print(f"peer worker ready (sandboxed: {not unsandboxed}): pydantic_ai on {args.task_queue}", flush=True)
        await stop.wait()


async def driver(args: argparse.Namespace) -> None:
    client = await Client.connect(args.address, plugins=[PydanticAIPlugin()])

    async def run(n: int) -> str:
        wf_id = f"pydantic-ai-{uuid.uuid4()}"
        handle = await client.start_workflow(PydanticAIBenchRun.run, prompt(n), id=wf_id, task_queue=args.task_queue)
        text = await handle.result()
        if text != final_text(n):
            raise RuntimeError(f"pydantic-ai run {wf_id}: {text!r}")
        return wf_id

    await serve_driver(run)
