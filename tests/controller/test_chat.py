"""`keel chat` through a real pseudo-terminal, against a worker subprocess for tests/controller/apps.py's app; and
`keel sessions`.

Each chat is `python -m keel.cli chat ...` on the slave side of a pty that is its controlling terminal (so Ctrl-C
typed into it is a SIGINT, as in a terminal); the test types lines into the master side and reads what the chat
prints, colours stripped.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.client import Client

from keel.client import KeelClient
from keel.client.controller import ControllerClient
from keel.client.devserver import DevServer
from keel.storage import SQLiteStorage
from tests.conftest import ROOT, worker_subprocess
from tests.terminal import Term

CONTROLLER = "assistant-controller"
APP = "tests.controller.apps:app"


@dataclass
class Stack:
    env: dict[str, str]
    """The environment of a `keel` command for the worker's Temporal, task queue and storage."""
    controllers: ControllerClient
    """The test's own client of the controller's sessions (same Temporal, task queue and storage)."""
    tmp: Path


@pytest.fixture(scope="module")
async def stack(
    dev_server: DevServer, client: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """One worker subprocess for the module's tests (each test has its own resource, hence its own session)."""
    tmp = tmp_path_factory.mktemp("chat")
    task_queue = f"test-chat-{uuid.uuid4()}"
    with worker_subprocess(dev_server, task_queue, tmp, tmp / "worker-data", app=APP):
        keel = KeelClient(client, task_queue=task_queue)
        await keel.wait_for_worker(30)
        storage = SQLiteStorage(tmp / "keel.db")
        await storage.init()
        env = {
            **os.environ,
            "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
            "KEEL_TASK_QUEUE": task_queue,
            "KEEL_STORAGE_URL": f"sqlite:///{tmp / 'keel.db'}",
            "KEEL_APP": APP,
        }
        try:
            yield Stack(env, ControllerClient(keel, storage, CONTROLLER), tmp)
        finally:
            await storage.close()


@pytest.fixture
def terms() -> Iterator[list[Term]]:
    opened: list[Term] = []
    yield opened
    for t in opened:
        t.close()


def resource() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


def chat(stack: Stack, terms: list[Term], resource_id: str, data_dir: Path, *extra: str) -> Term:
    """`keel chat` for `resource_id` on a new terminal, remembering what it showed in `data_dir`."""
    term = Term(["chat", CONTROLLER, "--resource", resource_id, *extra], {**stack.env, "KEEL_DATA_DIR": str(data_dir)})
    terms.append(term)
    return term


PROMPT = r"\n> $"
"""The message prompt, with nothing printed after it."""
APPROVAL = r"\? approve save_note\(\{\"text\": \"milk\"\}\)\? \[y\]es/\[n\]o/\[a\]lways for this category \(edit\) $"


async def test_a_message_streams_its_answer_and_a_new_terminal_shows_the_last_messages(
    stack: Stack, terms: list[Term], tmp_path: Path
) -> None:
    who = resource()
    term = chat(stack, terms, who, tmp_path / "first")
    term.expect(rf"keel chat: {CONTROLLER} for {who}, session keel-session:{CONTROLLER}:{who}:\n")
    term.expect(r"thread \S+, mode plan, model scripted/controller \(the agent's\); /help for commands")
    term.expect(PROMPT)
    term.send("text hello")
    assert term.printed_until(PROMPT) == "text hello\necho: text hello\n> "  # the echo of the line, the answer
    term.send("/quit")
    assert term.wait() == 0

    again = chat(stack, terms, who, tmp_path / "first")  # the same terminal: it has seen everything
    shown = again.printed_until(PROMPT)
    assert "echo: text hello" not in shown and "what happened" not in shown
    again.key("d")
    assert again.wait() == 0

    other = chat(stack, terms, who, tmp_path / "second")  # a terminal that never saw the session
    shown = other.printed_until(PROMPT)
    assert "-- the last messages of thread" in shown and "> text hello\necho: text hello\n" in shown


async def test_a_tool_call_is_approved_inline(stack: Stack, terms: list[Term], tmp_path: Path) -> None:
    term = chat(stack, terms, resource(), tmp_path)
    term.expect(PROMPT)
    term.send('tool save_note {"text": "milk"}')
    term.expect(r'  -> save_note\(\{"text": "milk"\}\)\n')
    term.expect(APPROVAL)
    term.send("y")
    term.expect(r'  <- save_note: \{"saved": "milk"\}\n')
    term.expect(r'got: \{"saved": "milk"\}\n> $')


async def test_ask_user_is_answered_by_choosing_an_option(stack: Stack, terms: list[Term], tmp_path: Path) -> None:
    term = chat(stack, terms, resource(), tmp_path)
    term.expect(PROMPT)
    term.send("ask")
    term.expect(r"\? approve ask_user\(.*\)\? \[y\]es/\[n\]o/\[a\]lways for this category $")  # asks first
    term.send("y")
    term.expect(r"\? Which database\?\n  1\. SQLite\n  2\. PostgreSQL\nanswer with a number or your own words: $")
    term.send("2")
    term.expect(r"  <- ask_user: User answered: PostgreSQL\n")
    term.expect(r"got: .*User answered: PostgreSQL.*\n> $")


async def test_modes_switch_and_an_unknown_mode_is_the_sessions_error(
    stack: Stack, terms: list[Term], tmp_path: Path
) -> None:
    who = resource()
    term = chat(stack, terms, who, tmp_path)
    term.expect(PROMPT)
    term.send("/mode")
    term.expect(r"  mode plan; modes: plan \(Plan\), build \(Build\), review \(Review\)\n> $")
    term.send("/mode build")
    term.expect(r"  \* mode plan -> build\n> $")
    term.send("/mode nope")
    term.expect(r"\nerror: Mode not found: nope\n> $")
    term.send("/mode")
    term.expect(r"  mode build; ")
    assert (await stack.controllers.session(who).snapshot()).mode_id == "build"
    term.send("/model mock/fast")
    term.expect(r"  \* model mock/fast\n> $")  # the change, then the prompt


async def test_a_restarted_chat_shows_what_it_missed_and_the_pending_approval(
    stack: Stack, terms: list[Term], tmp_path: Path
) -> None:
    who = resource()
    first = chat(stack, terms, who, tmp_path)
    first.expect(PROMPT)
    first.send('tool save_note {"text": "milk"}')
    first.expect(APPROVAL)
    first.kill()  # SIGKILL, the approval unanswered
    await stack.controllers.session(who).mode.switch("build")  # while no chat is attached

    second = chat(stack, terms, who, tmp_path)
    missed = second.printed_until(APPROVAL)
    assert "-- what happened since this terminal was last here --\n  * mode plan -> build\n" in missed
    assert "save_note({" not in missed.split("* mode plan -> build")[0]  # printed by the first chat: not again
    second.send("y")
    second.expect(r'  <- save_note: \{"saved": "milk"\}\n')
    second.expect(r'got: \{"saved": "milk"\}\n> $')


async def test_a_line_typed_before_a_restarted_chat_shows_the_pending_approval_answers_it(
    stack: Stack, terms: list[Term], tmp_path: Path
) -> None:
    """A line typed while the chat re-attaches (its worker restarting, say) was sent as a new message, which
    declined the approval the chat then showed: now the chat reads what is typed once it has shown what the
    session waits on, so the line answers it."""
    who = resource()
    first = chat(stack, terms, who, tmp_path)
    first.expect(PROMPT)
    first.send('tool save_note {"text": "milk"}')
    first.expect(APPROVAL)
    first.kill()

    second = chat(stack, terms, who, tmp_path)
    second.send("y")  # typed at once: before the chat has attached
    second.expect(APPROVAL)
    second.expect(r'  <- save_note: \{"saved": "milk"\}\n')
    said = [m["content"] for m in await stack.controllers.session(who).thread.list_messages() if m["role"] == "user"]
    assert said == ['tool save_note {"text": "milk"}']


async def test_ctrl_c_aborts_a_turn_and_at_the_prompt_leaves(stack: Stack, terms: list[Term], tmp_path: Path) -> None:
    term = chat(stack, terms, resource(), tmp_path)
    term.expect(PROMPT)
    term.send('tool save_note {"text": "milk"}')
    term.expect(APPROVAL)
    term.key("c")
    term.expect(r"aborting the turn")
    term.expect(r"  \(turn aborted\)\n> $")
    term.key("c")
    assert term.wait() == 130


def test_piped_lines_are_sent_and_the_last_turn_is_seen_through(stack: Stack, tmp_path: Path) -> None:
    """What it says on leaving is the command that comes back: with the app it was given (found from outside:
    without `--app`, it loaded the bundled demo app, whose controller has the same id)."""
    who = resource()
    args = [sys.executable, "-m", "keel.cli", "chat", CONTROLLER, "--resource", who, "--app", APP]
    env = {k: v for k, v in stack.env.items() if k != "KEEL_APP"} | {"KEEL_DATA_DIR": str(tmp_path)}
    proc = subprocess.run(args, input="text piped\n", env=env, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout  # no colours off a terminal
    left = f"left the session (it stays; `keel chat {CONTROLLER} --resource {who} --app {APP}` comes back to it)"
    assert proc.stdout.splitlines()[2:] == ["> text piped", "echo: text piped", "> ", left]  # a transcript


def test_piped_lines_answer_what_the_session_asks_in_turn(stack: Stack, tmp_path: Path) -> None:
    """Found from outside: every piped line was read at once and sent as a message, so a script could not answer
    an approval (`y` went to the model as a new message, queued behind the turn that waited for it). Piped
    input is read a line at a time, when the chat asks: the message prompt or the question."""
    who = resource()
    args = [sys.executable, "-m", "keel.cli", "chat", CONTROLLER, "--resource", who, "--app", APP]
    env = {k: v for k, v in stack.env.items() if k != "KEEL_APP"} | {"KEEL_DATA_DIR": str(tmp_path)}
    piped = 'tool save_note {"text": "milk"}\ny\ntext after\n'
    proc = subprocess.run(args, input=piped, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2:-1] == [
        '> tool save_note {"text": "milk"}',
        '  -> save_note({"text": "milk"})',
        '? approve save_note({"text": "milk"})? [y]es/[n]o/[a]lways for this category (edit) y',
        '  <- save_note: {"saved": "milk"}',
        'got: {"saved": "milk"}',
        "> text after",
        "echo: text after",
        "> ",
    ]


async def test_keel_sessions_lists_the_open_session(stack: Stack) -> None:
    who = resource()
    session = await stack.controllers.create_session(who)
    thread = (await session.snapshot()).thread_id
    deadline = time.monotonic() + 15
    while True:  # visibility follows the session's start shortly
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "keel.cli", "sessions", "--json", "--controller", CONTROLLER, "--resource", who,
            env=stack.env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        listed = json.loads(out)
        if (listed and listed[0]["threadId"] == thread) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    assert [(s["sessionId"], s["controllerId"], s["resourceId"]) for s in listed] == [(session.id, CONTROLLER, who)]
    assert listed[0]["threadId"] == thread and listed[0]["status"] == "idle"


async def test_keel_sessions_prints_a_table_whose_columns_line_up(stack: Stack) -> None:
    """Found from outside: each field followed the one before it by two spaces, so sessions of resources with
    ids of different lengths printed their status, controller and thread at different columns."""
    short_id, long_id = resource(), resource() + "-with-a-longer-name"
    for who in (short_id, long_id):
        await stack.controllers.create_session(who)
    deadline = time.monotonic() + 15
    while True:  # visibility follows the sessions' start shortly
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "keel.cli", "sessions", "--controller", CONTROLLER, env=stack.env, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        lines = [line for line in out.decode().splitlines() if short_id in line or long_id in line]
        if len(lines) == 2 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    assert len(lines) == 2, out.decode()
    for column in ("idle", "controller=", "thread="):
        assert lines[0].index(column) == lines[1].index(column), lines
