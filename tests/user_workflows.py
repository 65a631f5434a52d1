"""A workflow of a user's own, registered next to Keel's (its own module: the sandbox re-imports it)."""

from __future__ import annotations

from temporalio import workflow


@workflow.defn(name="WhereAmI")
class WhereAmI:
    """Says whether it runs inside Temporal's workflow sandbox."""

    @workflow.run
    async def run(self) -> bool:
        return workflow.unsafe.in_sandbox()
