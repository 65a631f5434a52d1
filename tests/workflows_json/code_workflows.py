"""A code workflow for the tests: a Python Temporal workflow with a Keel suspend point."""

from __future__ import annotations

from pydantic import BaseModel
from temporalio import workflow

from keel.workflows import Resumable


class ReleaseInput(BaseModel):
    n: int


class ReleaseOutput(BaseModel):
    n: int
    approved: bool


@workflow.defn(name="release")
class Release(Resumable):
    """Doubles n, then waits for an approval."""

    @workflow.run
    async def run(self, input: ReleaseInput) -> ReleaseOutput:
        self.mark_keel_run()
        doubled = input.n * 2
        answer = await self.suspend(
            "approve",
            {"question": f"Release {doubled}?"},
            {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
        )
        return ReleaseOutput(n=doubled, approved=bool(answer["ok"]))
