"""The OpenAI Agents SDK on Temporal: `temporalio-openai-agents` 1.1.0 (`temporalio.openai_agents`, with
`openai-agents` 0.22.3), as its docs show it.

The worker's client has `OpenAIAgentsPlugin(model_params=ModelActivityParameters(start_to_close_timeout=60 s[,
use_local_activity=True]), model_provider=OpenAIProvider(openai_client=AsyncOpenAI(base_url=<fake server>,
api_key="x", max_retries=0), use_responses=False))`, the driver's `OpenAIAgentsPlugin()` (as in the docs). Each
model call is the plugin's `invoke_model_activity` (a regular activity, or a local one with `--local-model`),
through the Agents SDK's chat-completions model. The workflow runs `Runner.run(Agent(name="bench",
tools=[activity_as_tool(write_read, start_to_close_timeout=60 s)]), prompt, max_turns=N+1)`; the tool is the shared
`write_read_file` as a Temporal activity. The Agents SDK's tracing is off (`OPENAI_AGENTS_DISABLE_TRACING=1`, set
by the bench): its exporter would post to OpenAI.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from agents import Agent, OpenAIProvider, Runner
from openai import AsyncOpenAI
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.openai_agents.workflow import activity_as_tool
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.peers.shared import INSTRUCTIONS, final_text, prompt, serve_driver, write_read_file

MODEL_NAME = "openai-agents-bench"


@activity.defn
async def write_read(path: str, content: str) -> dict[str, int]:
    """Write a small file, read it back and return its length.

    Args:
        path: File name (written under the bench directory)
        content: What to write
    """
    return {"length": write_read_file(path, content)}


@dataclass
class BenchInput:
    prompt: str
    max_turns: int


@workflow.defn
class OpenAIAgentsBenchRun:
    @workflow.run
    async def run(self, params: BenchInput) -> str:
        agent = Agent(
            name="bench",
            instructions=INSTRUCTIONS,
            model=MODEL_NAME,
            tools=[activity_as_tool(write_read, start_to_close_timeout=timedelta(seconds=60))],
        )
        result = await Runner.run(agent, params.prompt, max_turns=params.max_turns)
        return str(result.final_output)


def plugin(local_model: bool) -> OpenAIAgentsPlugin:
    client = AsyncOpenAI(base_url=os.environ["PEERS_MODEL_URL"], api_key="x", max_retries=0)
    return OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(
            start_to_close_timeout=timedelta(seconds=60), use_local_activity=local_model
        ),
        model_provider=OpenAIProvider(openai_client=client, use_responses=False),
    )


async def worker(args: argparse.Namespace) -> None:
    client = await Client.connect(args.address, plugins=[plugin(args.local_model)])
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    # The SDK's default workflow runner (the sandbox), unless the bench runs every workflow unsandboxed.
    unsandboxed = bool(os.environ.get("PEERS_UNSANDBOXED"))
    options: dict[str, Any] = {"workflow_runner": UnsandboxedWorkflowRunner()} if unsandboxed else {}
    async with Worker(
        client, task_queue=args.task_queue, workflows=[OpenAIAgentsBenchRun], activities=[write_read], **options
    ):
        print(f"peer worker ready (sandboxed: {not unsandboxed}): openai_agents on {args.task_queue}", flush=True)
        await stop.wait()


async def driver(args: argparse.Namespace) -> None:
    client = await Client.connect(args.address, plugins=[OpenAIAgentsPlugin()])  # as the docs' starter

    async def run(n: int) -> str:
        wf_id = f"openai-agents-{uuid.uuid4()}"
        handle = await client.start_workflow(
            OpenAIAgentsBenchRun.run, BenchInput(prompt(n), n + 1), id=wf_id, task_queue=args.task_queue
        )
        text = await handle.result()
        if text != final_text(n):
            raise RuntimeError(f"openai-agents run {wf_id}: {text!r}")
        return wf_id

    await serve_driver(run)
