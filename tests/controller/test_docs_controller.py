"""docs/controller.md, followed as written: its app in a project folder under `keel dev`, `python quickstart.py`,
then every `python -m asyncio` block in order in one namespace (top-level await), then its `temporal` command; the
model an OpenAI-compatible server that answers as a model would from what it is sent."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import re
import shlex
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from keel.client.controller import Session
from keel.client.devserver import DevServer
from tests.conftest import free_port
from tests.fake_openai import FakeOpenAI, delta, finish, sse
from tests.test_cli_day_to_day import KEEL, Keel
from tests.test_temporal_cli import TEMPORAL

DOC = Path(__file__).resolve().parents[2] / "docs" / "controller.md"
PLAN = ("1. Parse the arguments. ", "2. Write the commands. ", "3. Add tests.")


def blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block, in order."""
    return re.findall(r"```(\w+)\n(.*?)```", DOC.read_text(), re.S)


def text(*parts: str) -> tuple[int, dict[str, str], bytes]:
    return sse(*(delta(content=p) for p in parts), finish("stop"))


def call(name: str, args: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    tool_call = {"index": 0, "id": f"call_{uuid.uuid4().hex[:6]}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip
    return sse(delta(tool_calls=[tool_call]), finish("tool_calls"))


def assistant(body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """What the doc's model says: from its system prompt, the last message and the tools it is offered."""
    messages = body["messages"]
    system = " ".join(str(m["content"]) for m in messages if m["role"] == "system")
    last = messages[-1]
    asked = str(next(m for m in reversed(messages) if m["role"] == "user")["content"])
    offered = {t["function"]["name"] for t in body.get("tools", [])}
    if "report actionable findings" in system:
        return text("The change looks right: nothing to fix.")
    if last["role"] == "tool":
        return (
            text("We'll use SQLite.")
            if "SQLite" in str(last["content"])
            else text("The reviewer found nothing to fix.")
        )
    if "Ask me" in asked and "ask_user" in offered:
        options = [{"label": "SQLite"}, {"label": "PostgreSQL"}]
        return call("ask_user", {"question": "Which database?", "options": options})
    if "code reviewer" in asked and "subagent" in offered:
        return call("subagent", {"agentType": "code-reviewer", "task": "Review the change."})
    return text(*PLAN)


async def run_block(code: str, namespace: dict[str, Any]) -> str:
    """A block as `python -m asyncio` runs it (top-level await), printing into the returned text."""
    compiled = compile(code, "<docs/controller.md>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = eval(compiled, namespace)
        if asyncio.iscoroutine(result):
            await result
    return out.getvalue()


def printed_comments(code: str) -> list[str]:
    """What the block says its prints show: the `# ...` after each `print(...)` line."""
    return [m.group(1) for m in re.finditer(r"^print\(.*\)  # (.*)$", code, re.M)]


async def test_the_controller_page_runs_as_written(
    dev_server: DevServer, tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.responder = assistant
    project = tmp_path / "project"
    (project / "myproject").mkdir(parents=True)
    code_blocks = blocks()
    python = [code for lang, code in code_blocks if lang == "python"]
    shell = [code.strip() for lang, code in code_blocks if lang == "sh"]
    app_file, quickstart, *repl = python
    assert app_file.startswith("# myproject/assistant.py") and quickstart.startswith("# quickstart.py")
    (project / "myproject" / "assistant.py").write_text(app_file)
    (project / "quickstart.py").write_text(quickstart)
    env = {
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_TASK_QUEUE": f"docs-{uuid.uuid4()}",
        "KEEL_DATA_DIR": str(tmp_path / "data"),
        "OPENAI_BASE_URL": fake_openai.base_url,
        "OPENAI_API_KEY": "sk-test",
        "KEEL_API_PORT": str(free_port()),
        "PYTHONPATH": str(project),
    }
    keel = Keel(env, cwd=project)
    for var in ("KEEL_APP", "KEEL_STORAGE_URL"):
        keel.env.pop(var, None)
    assert shell[0] == "keel dev --app myproject.assistant:app" and shell[1] == "python quickstart.py"
    dev = subprocess.Popen(  # noqa: ASYNC220 (read from a thread below)
        [KEEL, *shlex.split(shell[0])[1:]], env=keel.env, cwd=project,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert dev.stdout is not None
        async with asyncio.timeout(60):
            while "Ctrl-C stops everything" not in (await asyncio.to_thread(dev.stdout.readline)):
                pass
        quick = await asyncio.create_subprocess_exec(
            sys.executable, "quickstart.py", env=keel.env, cwd=project,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(quick.communicate(), 60)
        assert quick.returncode == 0, err.decode()
        assert out.decode().strip() == "".join(PLAN)  # streamed by the listener, delta by delta

        # A listener may hear of an event late (a busy machine, a slow network): the page must not depend on it.
        subscribe = Session.subscribe

        def slow_subscribe(self: Session, listener: Any, offset: int | None = None) -> Any:
            async def late(event: dict[str, Any]) -> None:
                await asyncio.sleep(0.2)
                outcome = listener(event)
                if asyncio.iscoroutine(outcome):
                    await outcome

            return subscribe(self, late, offset)

        monkeypatch.setattr(Session, "subscribe", slow_subscribe)
        for key, value in keel.env.items():  # the REPL: the same settings, the same folder
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(project)
        monkeypatch.syspath_prepend(str(project))
        namespace: dict[str, Any] = {"__name__": "__main__"}
        for code in repl:
            printed = await asyncio.wait_for(run_block(code, namespace), 60)
            expected = printed_comments(code)
            assert printed.splitlines() == expected, code

        listed = subprocess.run(  # noqa: ASYNC221 (a short CLI call)
            [TEMPORAL, *shlex.split(shell[2])[1:], "--address", dev_server.cfg.address, "-o", "json"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        sessions = {s["execution"]["workflowId"] for s in json.loads(listed.stdout)}
        assert "keel-session:assistant-controller:user-123:" in sessions
    finally:
        dev.send_signal(signal.SIGINT)
        dev.communicate(timeout=30)
        for name in [m for m in sys.modules if m == "myproject" or m.startswith("myproject.")]:
            del sys.modules[name]
