"""The installed `keel` command as a new user meets it: settings in one place, no hang when no worker runs, one
app per task queue, each step shown once, exit codes and output formats, and the small things."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from keel.app import Agent, App
from keel.client import KeelClient
from keel.client.devserver import DevServer, is_listening
from keel.model_providers import OpenAIChatModel
from keel.storage import Storage
from tests.apps import app as test_app
from tests.conftest import free_port, running_worker
from tests.fake_openai import FakeOpenAI
from tests.terminal import Term
from tests.test_agent_run import wait_for_pending

KEEL = str(Path(sys.executable).parent / "keel")
ROOT = Path(__file__).resolve().parents[1]


class Keel:
    """The installed `keel` script, with its environment (and optionally another working directory)."""

    def __init__(self, env: dict[str, str], cwd: Path = ROOT) -> None:
        self.env = {**os.environ, **env}
        self.cwd = cwd

    async def __call__(self, *args: str, timeout: float = 60) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            KEEL, *args, env=self.env, cwd=self.cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


@pytest.fixture
def keel(dev_server: DevServer, task_queue: str, storage: Storage, data_dir: Path) -> Keel:
    assert hasattr(storage, "path")
    return Keel(
        {
            "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
            "KEEL_TASK_QUEUE": task_queue,
            "KEEL_STORAGE_URL": f"sqlite:///{storage.path}",
            "KEEL_DATA_DIR": str(data_dir),
            "KEEL_APP": "tests.apps:app",
        }
    )


# --- settings -------------------------------------------------------------------------------------------


async def test_the_port_alone_moves_every_address_and_a_contradiction_names_both_values(tmp_path: Path) -> None:
    keel = Keel({"KEEL_TEMPORAL_PORT": "7411", "KEEL_DATA_DIR": str(tmp_path / "d")}, cwd=tmp_path)
    for var in ("KEEL_TEMPORAL_ADDRESS", "KEEL_STORAGE_URL", "KEEL_TASK_QUEUE", "KEEL_APP"):
        keel.env.pop(var, None)
    code, out, err = await keel("config", "--json")
    assert code == 0, err
    settings = json.loads(out)
    assert settings["temporal_address"] == {"value": "127.0.0.1:7411", "from": "derived"}
    assert settings["temporal_port"] == {"value": 7411, "from": "environment"}
    assert settings["storage_url"] == {"value": f"sqlite:///{tmp_path / 'd' / 'keel.db'}", "from": "derived"}

    keel.env["KEEL_TEMPORAL_ADDRESS"] = "127.0.0.1:7233"
    for command in (["config"], ["demo"], ["runs"]):
        code, _, err = await keel(*command)
        assert code == 2, (command, err)
        assert "KEEL_TEMPORAL_ADDRESS is 127.0.0.1:7233 but KEEL_TEMPORAL_PORT is 7411" in err


async def run_then_move(k: KeelClient, keel: Keel, tmp_path: Path) -> tuple[str, Path]:
    """A run to its end, then `keel` moved to a folder of its own (returned, with the run's id)."""
    run_id = await k.start_run("multi", "steps=1")
    await k.result(run_id)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    keel.cwd = elsewhere
    return run_id, elsewhere


async def test_storage_follows_the_data_dir_from_any_working_directory(
    client: Client, keel: Keel, storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as k:
        run_id, elsewhere = await run_then_move(k, keel, tmp_path)
    keel.env.pop("KEEL_STORAGE_URL")
    keel.env["KEEL_DATA_DIR"] = str(Path(str(storage.path)).parent)  # type: ignore[attr-defined]
    code, out, err = await keel("events", run_id)
    assert code == 0 and json.loads(out.splitlines()[0])["type"] == "start", err
    assert not (elsewhere / ".keel").exists()


async def test_the_demo_runs_beside_a_stack_on_the_task_queue_its_error_names(
    client: Client, keel: Keel, storage: Storage, task_queue: str
) -> None:
    """Found from outside: with `make dev` up, `make demo` says the queue is polled and to "pick another with
    --task-queue", which `keel demo` refused as an unknown argument."""
    keel.env.pop("KEEL_APP")
    async with running_worker(client, test_app, storage, task_queue):
        code, _, err = await keel("demo", timeout=120)
        assert code == 2 and "pick another with --task-queue" in err, err
        code, out, err = await keel("demo", "--task-queue", f"{task_queue}-demo", timeout=120)
    assert code == 0, err
    assert "demo passed" in out, out


async def test_a_command_run_from_another_folder_than_the_stack_says_where_it_looked_and_why(
    client: Client, keel: Keel, storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    """Found from outside: with `make dev` up in one folder, `keel events RUN` from another answered "Run not
    found" for a run Temporal has (the data dir defaults to .keel of the current folder), and `keel run` there "No
    Keel database at ...", neither saying why. Both now name the folder and the way out."""
    async with running_worker(client, test_app, storage, task_queue) as k:
        run_id, elsewhere = await run_then_move(k, keel, tmp_path)
        for var in ("KEEL_STORAGE_URL", "KEEL_DATA_DIR"):
            keel.env.pop(var)
        hint = f"KEEL_DATA_DIR defaults to .keel in the current folder ({elsewhere})"
        code, _, err = await keel("events", run_id)
        assert code != 0 and hint in err, err
        (elsewhere / ".keel").mkdir()
        from keel.storage import SQLiteStorage

        other = SQLiteStorage(elsewhere / ".keel" / "keel.db")
        await other.init()
        await other.close()
        code, _, err = await keel("events", run_id)
    assert code != 0, err
    assert f"Run {run_id!r} is in Temporal, but not in the Keel storage at sqlite:///{elsewhere}" in err, err
    assert hint in err, err


# --- no worker, no hang --------------------------------------------------------------------------------


async def test_without_a_worker_every_command_says_so_within_seconds(keel: Keel, client: Client) -> None:
    started = asyncio.get_running_loop().time()
    code, _, err = await keel("run", "demo", "hello")
    assert code == 2 and f"No worker is polling task queue '{keel.env['KEEL_TASK_QUEUE']}'" in err
    code, out, _ = await keel("run", "demo", "hello", "--no-follow")
    assert code == 0
    run_id = out.strip()
    code, _, err = await keel("pending", run_id)
    assert code == 2 and "No worker is polling" in err
    code, _, err = await keel("approve", run_id, "call_1")
    assert code == 2 and "No worker is polling" in err and f"keel approve {run_id} call_1 --signal" in err
    code, out, err = await keel("approve", run_id, "call_1", "--signal")
    assert code == 0 and "as a signal" in out, err
    code, _, err = await keel("result", run_id)
    assert code == 2 and "No worker is polling" in err
    assert asyncio.get_running_loop().time() - started < 30
    code, _, err = await keel("events", "run-nope")
    assert code == 2 and "Run 'run-nope' not found" in err
    await client.get_workflow_handle(run_id).terminate("test cleanup")


# --- one app per task queue ----------------------------------------------------------------------------


async def test_a_second_worker_on_a_polled_task_queue_is_refused_unless_it_joins(
    client: Client, keel: Keel, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue):
        code, _, err = await keel("worker", "--app", "keel.app.demo:app", timeout=30)
        assert code == 2 and f"Task queue '{task_queue}' is already polled by" in err
        assert "--task-queue" in err and "--join" in err
        joined = subprocess.Popen(  # noqa: ASYNC220 (read from a thread below)
            [KEEL, "worker", "--join"], env=keel.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            assert joined.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(joined.stdout.readline), 30)
            assert f"keel worker: task queue '{task_queue}'" in line
        finally:
            joined.send_signal(signal.SIGINT)
            joined.communicate(timeout=30)


# --- output --------------------------------------------------------------------------------------------


async def test_events_show_each_step_once_and_the_live_view_shows_a_retried_step_once(
    client: Client, keel: Keel, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue):
        code, out, err = await keel("run", "flaky", "hi")  # the first model attempt fails, the retry answers
        assert code == 0, err
        run_id = out.split()[1]
        code, events_out, _ = await keel("events", run_id)
    # The retry repeated what the lost attempt had shown (its start): the live view goes on, unmarked.
    assert "retrying" not in out and out.count("answered after a retry") == 1
    events = [json.loads(line) for line in events_out.splitlines()]
    steps = [e for e in events if e["type"] == "step-start"]
    assert len(steps) == 1 and {e["attempt"] for e in events if e["source"] == "model:1"} == {2}
    assert len(events) == len(await storage.read_events(run_id)) - 2  # the failed attempt's start and step-start


async def test_exit_codes_formats_and_the_new_commands(
    client: Client, keel: Keel, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as k:
        run_id = await k.start_run("demo", "terminate me")
        await wait_for_pending(k, run_id)
        code, out, err = await keel("terminate", run_id, "--reason", "testing")
        assert code == 0 and "terminated" in out, err
        code, _, err = await keel("result", run_id)
        assert code == 1 and "was terminated" in err and err.count("\n") == 1

        code, out, _ = await keel("runs", "--json", "--limit", "5")
        [first, *_] = json.loads(out)
        assert set(first) >= {"runId", "agentId", "status", "startedAt"} and "T" in first["startedAt"]
        code, out, _ = await keel("agents", "--json")
        demo = next(a for a in json.loads(out) if a["id"] == "demo")
        assert demo["tools"][0] == {
            "id": "save_note", "description": "Save a note to the notes folder.", "requireApproval": True,
            "idempotent": True,
        }  # fmt: skip
        code, out, _ = await keel("--version")
        assert code == 0 and out.startswith("keel ")
        code, out, _ = await keel("--help")
        assert "exit codes:" in out and "1    the run ended without a result" in out
        code, _, err = await keel("server", "status", "--app", "x:y")  # taken by every command, as $KEEL_APP is
        assert code == 0, err
        code, _, err = await keel("server", "status", "--apps", "x:y")
        assert code == 2 and "unrecognized arguments: --apps" in err

        cancel_id = await k.start_run("demo", "cancel me")
        await wait_for_pending(k, cancel_id)
        code, _, _ = await keel("cancel", cancel_id)
        assert code == 0
        code, _, err = await keel("result", cancel_id)
        assert code == 1 and "was canceled" in err

    pipe = subprocess.run(  # noqa: ASYNC221 (a shell pipeline is the point)
        f"{KEEL} runs --json --limit 50 | head -c 10", shell=True, env=keel.env, capture_output=True, text=True
    )
    assert "Traceback" not in pipe.stderr and "BrokenPipe" not in pipe.stderr


async def test_the_small_things(client: Client, storage: Storage, task_queue: str, data_dir: Path) -> None:
    """text-end carries only its id; the step at maxSteps is not "continued"; deltas are written per flush."""
    async with running_worker(client, test_app, storage, task_queue) as k:
        run_id = await k.start_run("multi", "steps=5", max_steps=2)
        await k.result(run_id)
        events = await storage.read_events(run_id)
    text_ends = [e.payload for e in events if e.type == "text-end"]
    assert text_ends and all(set(p) == {"id"} for p in text_ends)
    finishes = [e.payload["stepResult"] for e in events if e.type == "step-finish"]
    assert finishes == [{"reason": "tool-calls", "isContinued": True}, {"reason": "tool-calls", "isContinued": False}]
    deltas = [e for e in events if e.type == "text-delta"]
    assert len(deltas) == len(text_ends)  # each step's text streamed in one flush: one row


async def test_a_failed_attempt_is_one_line_in_the_worker_log(tmp_path: Path, dev_server: DevServer) -> None:
    queue = f"log-{uuid.uuid4()}"
    env = {
        **os.environ, "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address, "KEEL_DATA_DIR": str(tmp_path),
        "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}", "KEEL_TASK_QUEUE": queue,
        "KEEL_APP": "tests.apps:app",
    }  # fmt: skip
    worker = subprocess.Popen(  # noqa: ASYNC220
        [KEEL, "worker"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert worker.stdout is not None
        await asyncio.wait_for(asyncio.to_thread(worker.stdout.readline), 30)
        code, _, err = await Keel(env)("run", "flaky", "hello log")
        assert code == 0, err
    finally:
        worker.send_signal(signal.SIGINT)
        _, log = worker.communicate(timeout=30)
    [line] = [line for line in log.splitlines() if "Completing activity as failed" in line]
    assert "ModelRetryableError: rate limited, try again" in line
    assert "Traceback" not in log


def test_ctrl_c_on_keel_dev_stops_its_worker_then_its_own_server_and_prints_no_warning(tmp_path: Path) -> None:
    """Found in a new-user walkthrough: Ctrl-C on `keel dev` in a terminal reached the Temporal server it started
    as well (one process group), which stopped under the running worker, and the SDK warned 'shutdown_worker rpc
    errored during worker shutdown'. The server now runs out of the terminal's reach, and `keel dev` stops it
    after the worker."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEEL_", "OTEL_"))} | {
        "KEEL_TEMPORAL_PORT": str(port),
        "KEEL_UI_PORT": str(free_port()),
        "KEEL_API_PORT": str(free_port()),
        "KEEL_DATA_DIR": str(tmp_path),
    }
    term = Term(["dev"], env)
    try:
        term.expect("Ctrl-C stops everything", timeout=120)
        term.key("c")
        assert term.wait(60) == 0
    finally:
        if term.proc.poll() is None:  # failed above: SIGTERM still stops its server (a SIGKILL would leave it)
            term.proc.terminate()
            term.wait(60)
        term.close()
    after = term.text[term.seen :]
    assert "WARN" not in after and "rror" not in after, after
    assert not is_listening("127.0.0.1", port)  # its server stopped with it


def test_every_command_and_option_has_help() -> None:
    from keel.cli import COMMANDS
    from keel.client.cli import build_parser

    def check(parser: argparse.ArgumentParser, prefix: str) -> None:
        [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for name, command_parser in sub.choices.items():
            assert command_parser.description, f"{prefix} {name}"
            for action in command_parser._actions:
                assert action.help, f"{prefix} {name}: {action.dest} has no help"
                if isinstance(action, argparse._SubParsersAction):  # e.g. keel workflows ACTION
                    check(command_parser, f"{prefix} {name}")

    check(build_parser(COMMANDS), "keel")


def test_every_command_takes_app_as_the_docs_say() -> None:
    """cli.md: "`--app module:attr` (or `$KEEL_APP`) loads your own app", and your-app.md puts it on each command
    it shows: `keel runs --app ...` was a usage error."""
    from keel.cli import COMMANDS
    from keel.client.cli import build_parser

    parser = build_parser(COMMANDS)
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command_parser in sub.choices.items():
        [*actions] = [a for a in command_parser._actions if isinstance(a, argparse._SubParsersAction)]
        for each in [command_parser] if not actions else list(actions[0].choices.values()):
            assert "--app" in each._option_string_actions, name
    args = parser.parse_args(["runs", "--app", "myproject.app:app", "--status", "suspended"])
    assert args.app == "myproject.app:app"


async def test_a_providers_multi_line_message_is_one_line_on_stderr(
    client: Client, storage: Storage, task_queue: str, keel: Keel, fake_openai: FakeOpenAI
) -> None:
    body = json.dumps({"error": {"message": "Bad request:\n  field x\n  is wrong"}}).encode()
    fake_openai.replies = [(400, {"content-type": "application/json"}, body)]
    model = OpenAIChatModel("m", base_url=fake_openai.base_url, api_key="k")
    async with running_worker(client, App.of(Agent(id="strict", model=model)), storage, task_queue) as k:
        run_id = await k.start_run("strict", "hi")
        code, _, err = await keel("result", run_id)
    assert code == 1 and err.count("\n") == 1 and "Bad request: field x is wrong" in err
