"""Time travel of an agent run over HTTP: `POST /api/agents/:agentId/time-travel?runId=RUN` with Mastra's
time-travel body (`{step}`), which `@mastra/client-js` sends only for workflow runs (`run.timeTravel`), so plain
HTTP drives it here. It is `keel reset` (tests/test_reset.py): a new execution runs the step and the later ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.http_api.conftest import Api


async def test_time_travel_runs_an_agent_run_again_from_a_step_and_answers_mastras_errors(
    api: Api, data_dir: Path
) -> None:
    run_id = await api.keel.start_run("tally", "count to five")
    await api.keel.result(run_id)
    old = (await api.keel.temporal.get_workflow_handle(run_id).describe()).run_id

    async with httpx.AsyncClient(base_url=f"{api.url}/api", timeout=30) as http:

        async def travel(body: Any, agent: str = "tally", run: str | None = run_id) -> tuple[int, Any]:
            query = {"runId": run} if run is not None else {}
            response = await http.post(f"/agents/{agent}/time-travel", params=query, json=body)
            return response.status_code, response.json()

        assert await travel({"step": 9}) == (
            400,
            {"error": f"Cannot reset run '{run_id}' to step 9: it has taken 5 steps"},
        )
        assert (await travel({"step": "second"}))[0] == 400
        assert (await travel({"step": ["4", "5"]}))[0] == 400
        assert (await travel({"step": 4}, run=None))[0] == 400
        assert await travel({"step": 4}, agent="nope") == (404, {"error": "Agent with id nope not found"})
        assert await travel({"step": 4}, agent="demo") == (404, {"error": f"Run '{run_id}' not found"})
        assert await travel({"step": 4}, run="run-none") == (404, {"error": "Run 'run-none' not found"})

        status, answer = await travel({"step": ["4"], "inputData": {}, "perStep": False})
    assert status == 200
    assert answer["message"] == "Agent run time travel started"
    assert (answer["runId"], answer["step"], answer["steps"], answer["baseExecutionId"]) == (run_id, 4, 5, old)
    assert answer["executionId"] != old and answer["forgottenMessages"] == 4
    assert (await api.keel.result(run_id)).steps == 5
    assert (await api.keel.temporal.get_workflow_handle(run_id).describe()).run_id == answer["executionId"]
    assert (data_dir / "tally.log").read_text().splitlines()[10:] == ["model 4", "tool 4", "model 5", "tool 5"]
