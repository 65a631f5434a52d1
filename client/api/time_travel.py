"""Time travel of an agent run: `POST /api/agents/:agentId/time-travel?runId=RUN` with `{"step": N}`.

Mastra time-travels workflow runs (`POST /api/workflows/:workflowId/time-travel?runId=...`, body `{step, ...}`,
answered `{message}` once the run is under way again); it has no such route for agents. This is that route for
Keel's `AgentRun`, the same query and body, with the step a number (`3`, `"3"` or `["3"]`: Mastra's `step` is a
step id or a path of them). It does what `keel reset RUN --to-step N` does (`keel.client.reset`): Temporal's
reset to the workflow task before step N, with the thread rewound to before that step; the answer says which
new execution runs it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from keel.client.api.bodies import Lenient
from keel.client.api.context import Ctx
from keel.client.api.errors import bad_request, not_found
from keel.client.reset import reset_run

router = APIRouter(tags=["agents"])


class TimeTravelBody(Lenient):
    step: int | str | list[int | str]
    """The step to run again from (1 is the first): it and every later step run again."""


def _step(value: int | str | list[int | str]) -> int:
    one = value[0] if isinstance(value, list) and len(value) == 1 else value
    if isinstance(one, int) and not isinstance(one, bool):
        return one
    if isinstance(one, str) and one.strip().isdecimal() and len(one.strip()) <= 9:
        return int(one.strip())
    raise bad_request('step must be a step number of the run (1 is its first step), e.g. 3 or "3"')


@router.post("/agents/{agent_id}/time-travel")
async def time_travel(
    ctx: Ctx,
    agent_id: str,
    body: TimeTravelBody,
    run_id: Annotated[str, Query(alias="runId", min_length=1)],
) -> dict[str, Any]:
    if agent_id not in ctx.app.agents:
        raise not_found(f"Agent with id {agent_id} not found")
    reset = await reset_run(ctx.keel, ctx.storage, run_id, _step(body.step), agent_id=agent_id)
    return {"message": "Agent run time travel started", **reset.to_json()}
