"""The `keel` CLI as a user runs it, against the test dev server and an in-process worker."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from temporalio.client import Client

from keel.client.devserver import DevServer
from keel.protocol import args_digest
from keel.storage import Storage
from tests.apps import app as test_app
from tests.conftest import running_worker


class Keel:
    def __init__(self, dev_server: DevServer, task_queue: str, tmp_path: Path, data_dir: Path) -> None:
        self.env = {
            "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
            "KEEL_TASK_QUEUE": task_queue,
            "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
            "KEEL_DATA_DIR": str(data_dir),
            "KEEL_APP": "tests.apps:app",
        }

    async def __call__(self, *args: str) -> tuple[int, str, str]:
        import os

        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "keel.cli", *args,
            env={**os.environ, **self.env}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


async def test_run_approve_runs_and_counts_from_the_command_line(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    keel = Keel(dev_server, task_queue, tmp_path, data_dir)
    async with running_worker(client, test_app, storage, task_queue):
        _, out, _ = await keel("counts", "--json")
        before = json.loads(out)["agents"]["demo"]
        code, out, err = await keel("run", "demo", "from the cli")
        assert code == 0, err
        run_id = out.split()[1]
        assert "I'll save that as a note." in out
        assert f"keel approve {run_id} call_1" in out and "suspended" in out

        code, out, _ = await keel("runs", "--status", "suspended", "--agent", "demo")
        assert code == 0 and run_id in out and "suspended" in out

        code, out, _ = await keel("counts", "--json")
        after = json.loads(out)["agents"]["demo"]
        assert after == {"running": before["running"], "suspended": before["suspended"] + 1}

        code, out, _ = await keel("pending", run_id)
        assert json.loads(out) == [
            {
                "toolCallId": "call_1",
                "toolName": "save_note",
                "args": {"title": "demo", "text": "from the cli"},
                "step": 1,
                "argsDigest": args_digest({"title": "demo", "text": "from the cli"}),
            }
        ]

        code, out, err = await keel("approve", run_id, "call_1")
        assert code == 0, err
        assert "<- save_note" in out and "Saved your note" in out and "completed" in out

        code, out, _ = await keel("events", run_id, "--offset", "2")
        events = [json.loads(line) for line in out.splitlines()]
        assert events[0]["offset"] == 2 and events[-1]["type"] == "finish"
        code, out, _ = await keel("events", run_id, "--follow")
        assert code == 0 and json.loads(out.splitlines()[-1])["type"] == "finish"


async def test_cli_errors_are_one_clear_line_with_exit_code_2(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    keel = Keel(dev_server, task_queue, tmp_path, data_dir)
    async with running_worker(client, test_app, storage, task_queue):
        code, _, err = await keel("run", "nope", "hi")
        assert code == 2 and "Unknown agent 'nope'" in err and "demo" in err and "payer" in err
        assert "in the app tests.apps:app (given by KEEL_APP)" in err
        code, _, err = await keel("run", "nope", "hi", "--app", "keel.app.demo:app")
        assert code == 2 and "(known agents: assistant, coder, demo)" in err and "(given by --app)" in err
        keel.env.pop("KEEL_APP")  # your-app.md's `KEEL_TASK_QUEUE=offline keel run weather ...`, --app left out
        code, _, err = await keel("run", "weather", "hi")
        assert code == 2 and err.count("\n") == 1, err
        assert "Unknown agent 'weather'" in err and "pass --app module:attr or set KEEL_APP" in err
        keel.env["KEEL_APP"] = "tests.apps:app"

        code, out, _ = await keel("run", "demo", "hi", "--no-follow")
        run_id = out.strip()
        code, _, err = await keel("approve", run_id, "call_404")
        assert code == 2 and "no pending tool call 'call_404'" in err
        code, _, err = await keel("approve", "run-does-not-exist", "call_1")
        assert code == 2 and "Run 'run-does-not-exist' not found" in err
        code, _, err = await keel("run", "demo", "[not json")
        assert code == 2 and "not valid JSON" in err
        await client.get_workflow_handle(run_id).terminate("test cleanup")

    keel.env["KEEL_TEMPORAL_ADDRESS"] = "127.0.0.1:1"
    code, _, err = await keel("runs")
    assert code == 2 and "Cannot reach Temporal at 127.0.0.1:1" in err
    # A count of 0 or less was taken (`keel logs RUN --limit 0` printed every record); an empty id too.
    for command in (("logs", "run-1", "--limit", "0"), ("runs", "--limit", "-1"), ("sessions", "--limit", "x")):
        code, _, err = await keel(*command)
        assert code == 2 and "argument --limit" in err, (command, err)
    code, _, err = await keel("trace", "")
    assert code == 2 and err.strip() == "error: Give a run id or a trace id (32 hex digits)"
