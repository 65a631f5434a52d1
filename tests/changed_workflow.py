"""A deliberately changed AgentRun for the negative replay test (its own module: the sandbox re-imports it)."""

from __future__ import annotations

from temporalio import workflow

from keel.workflows import AgentRun, AgentRunInput, AgentRunResult


@workflow.defn(name="AgentRun")
class ReorderedAgentRun(AgentRun):
    """A careless edit: a timer before the first model step changes the command sequence."""

    @workflow.run
    async def run(self, input: AgentRunInput) -> AgentRunResult:
        await workflow.sleep(1)
        return await super().run(input)
