"""`keel workflows ...` as a user runs it: save (refusing a bad file with every JSON path), list, show, run to a
suspension, resume, runs, counts, schedules as Temporal Schedules, delete."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import Client

from keel.client.devserver import DevServer
from keel.storage import Storage
from tests.conftest import running_worker
from tests.test_cli import Keel
from tests.test_temporal_cli import temporal
from tests.workflows_json.apps import ASK, app


async def test_save_run_resume_list_count_and_delete_from_the_command_line(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    keel = Keel(dev_server, task_queue, tmp_path, data_dir)
    keel.env["KEEL_APP"] = "tests.workflows_json.apps:app"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**ASK, "graph": [{"type": "tool", "id": "x", "toolID": "echo"}, {"type": "nap"}]}))
    good = tmp_path / "ask.json"
    good.write_text(json.dumps({**ASK, "schedule": {"id": "nightly", "cron": "0 3 * * *"}}))
    async with running_worker(client, app, storage, task_queue):
        code, out, _ = await keel("workflows", "save", str(bad))
        assert code == 2
        assert out.splitlines() == [
            "error: Workflow definition 'ask' has 3 errors:",
            "  graph[0].toolId: required field missing (got null)",
            '  graph[0].toolID: unknown field (got "echo")',
            "  graph[1]: unknown step type 'nap' (one of: agent, tool, classifier, mapping, workflow, parallel, "
            'foreach, sleep, sleepUntil, conditional, loop) (got {"type": "nap"})',
        ]
        code, out, err = await keel("workflows", "save", str(good), "--author", "ann")
        assert code == 0, err
        assert out.startswith("saved ask v1 (")
        code, out, _ = await keel("workflows", "list")
        assert code == 0 and out.startswith("ask  v1 (")
        code, out, _ = await keel("workflows", "show", "ask")
        assert json.loads(out)["graph"] == ASK["graph"]
        schedules = await temporal(dev_server, "schedule", "list")
        assert "keel-ask-nightly" in schedules

        code, out, _ = await keel("workflows", "run", "ask", "--input", '{"what": "it"}', "--run-id", "cli-ask-1")
        assert code == 0
        assert out.splitlines()[0] == 'run cli-ask-1 is suspended: {"human": {"question": "Ship it?"}}'
        assert "keel workflows resume cli-ask-1 --step human --data '<json>'" in out
        code, out, _ = await keel("workflows", "counts", "--json")
        assert json.loads(out)["ask"] == {"running": 0, "suspended": 1}
        code, _, err = await keel("workflows", "resume", "cli-ask-1", "--step", "human", "--data", '{"answer": 1}')
        assert code == 2 and "Invalid resumeData for step 'human': $.answer: 1 is not of type 'string'" in err
        code, out, _ = await keel("workflows", "resume", "cli-ask-1", "--step", "human", "--data", '{"answer": "y"}')
        assert (code, out) == (0, 'run cli-ask-1 succeeded: {"answer": "y", "version": 1}\n')
        code, out, _ = await keel("workflows", "runs", "ask", "--json")
        assert [r["runId"] for r in json.loads(out)] == ["cli-ask-1"]

        code, out, _ = await keel("workflows", "delete", "ask")
        assert (code, out) == (0, "deleted ask\n")
        assert "keel-ask-nightly" not in await temporal(dev_server, "schedule", "list")
        code, _, err = await keel("workflows", "run", "ask")
        assert code == 2 and "No stored workflow 'ask'" in err
