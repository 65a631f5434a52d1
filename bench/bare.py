"""The baseline: a bare temporalio workflow doing the same work as the bench agent, with nothing else.

Per step it runs one "model" activity (returns the next scripted decision; no storage, no message history) and
one "tool" activity (the same small file write + read as `write_read`), both regular activities. Like the bench
agent it makes N+1 model calls and N tool calls for N steps. With `model_local=True` the model call is a local
activity instead (the shape of Keel's first step). With `fused=True` each step is one regular activity that runs
the tool and then the next model call, the shape of Keel's later steps (`keel.tools_then_model`): a third
baseline, to separate Keel's own cost from its choice of activity kinds.

Inputs are dataclasses on the pydantic data converter (`temporalio.contrib.pydantic`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from bench.apps import write_read_file
    from keel.plugin import keel_workflows_runner

BARE_MODEL = "bare.model"
BARE_TOOL = "bare.tool"
BARE_TOOL_THEN_MODEL = "bare.tool_then_model"


@dataclass
class BareInput:
    steps: int
    model_local: bool = False
    fused: bool = False


@dataclass
class ModelIn:
    steps: int
    done: int


@dataclass
class Decision:
    text: str | None = None
    call_id: str | None = None
    path: str | None = None
    content: str | None = None


@dataclass
class ToolIn:
    call_id: str
    path: str
    content: str


@dataclass
class ToolOut:
    call_id: str
    length: int


@dataclass
class ToolThenModelIn:
    tool: ToolIn
    model: ModelIn


@dataclass
class BareResult:
    text: str
    steps: int


@activity.defn(name=BARE_MODEL)
async def bare_model(input: ModelIn) -> Decision:
    if input.done >= input.steps:
        return Decision(text=f"done: {input.done} steps")
    k = input.done + 1
    return Decision(call_id=f"call_{k}", path=f"bare-step-{k}.txt", content=f"step {k} of {input.steps}")


@activity.defn(name=BARE_TOOL)
async def bare_tool(input: ToolIn) -> ToolOut:
    return ToolOut(call_id=input.call_id, length=write_read_file(input.path, input.content))


@activity.defn(name=BARE_TOOL_THEN_MODEL)
async def bare_tool_then_model(input: ToolThenModelIn) -> Decision:
    await bare_tool(input.tool)
    return await bare_model(input.model)


@workflow.defn(name="BareRun")
class BareRun:
    @workflow.run
    async def run(self, input: BareInput) -> BareResult:
        done = 0
        decision = await self._model(input, done)
        while decision.text is None:
            assert decision.call_id and decision.path and decision.content is not None
            tool_in = ToolIn(call_id=decision.call_id, path=decision.path, content=decision.content)
            done += 1
            if input.fused:
                decision = await workflow.execute_activity(
                    bare_tool_then_model,
                    ToolThenModelIn(tool=tool_in, model=ModelIn(steps=input.steps, done=done)),
                    start_to_close_timeout=timedelta(seconds=60),
                )
            else:
                await workflow.execute_activity(bare_tool, tool_in, start_to_close_timeout=timedelta(seconds=60))
                decision = await self._model(input, done)
        return BareResult(text=decision.text, steps=done)

    async def _model(self, input: BareInput, done: int) -> Decision:
        model_in = ModelIn(steps=input.steps, done=done)
        if input.model_local:
            return await workflow.execute_local_activity(
                bare_model, model_in, start_to_close_timeout=timedelta(seconds=60)
            )
        return await workflow.execute_activity(bare_model, model_in, start_to_close_timeout=timedelta(seconds=60))


def build_bare_worker(client: Client, task_queue: str) -> Worker:
    """The baseline's worker, with the runner Keel's workflows get and SDK defaults otherwise."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[BareRun],
        activities=[bare_model, bare_tool, bare_tool_then_model],
        workflow_runner=keel_workflows_runner(),
    )
