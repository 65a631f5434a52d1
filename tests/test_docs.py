"""Every shell, Python and JavaScript block of the README and of `docs/`, run as written, in order, page by page,
so a page can never drift from the code.

Each page runs in a project folder of its own against the stack a reader has up (`keel dev` for the page's app,
on the tests' Temporal server, with an OpenAI-compatible model server where the page's app needs one):

- a `python` block whose first line is `# path/file.py` is that file, written into the folder;
- any other `python` block runs as `python -m asyncio` runs it (top-level `await`), one namespace per page, and
  each `print(...)  # text` line must print that text;
- each command of an `sh` block runs in bash in the folder (a variable one assigns is there for the next), and
  must exit 0 and print the lines of the `#   ...` comment under it, in order (`...` matches anything; a line
  ending `(exit N)` expects that exit code instead);
- a `js` block runs with node and the real `@mastra/client-js` (tests/http_api/js).

The addresses a page names (Temporal's 127.0.0.1:7233, the API's http://127.0.0.1:4111) and the task queue
(`--task-queue keel`) are replaced by the stack's. A few commands cannot run inside a test (`make test` is this
suite; an interactive `keel chat` needs a terminal): `COVERED` names the test that runs each, and that test must
contain the command.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from keel.client.devserver import DevServer
from tests.conftest import free_port, npm_installed
from tests.fake_openai import FakeOpenAI, delta, finish, sse
from tests.test_cli_day_to_day import KEEL

ROOT = Path(__file__).resolve().parents[1]
JS = ROOT / "tests" / "http_api" / "js"

COVERED = {
    "make test": ".ci/run",
    "keel chat assistant-controller --resource alice": "tests/test_demo_controller.py",
}
"""Commands no test here can run, and the test (or CI script) that runs each."""


@dataclass
class Block:
    lang: str
    code: str
    line: int


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M):
        found.append(Block(match.group(1), match.group(2), text[: match.start()].count("\n") + 1))
    return found


@dataclass
class Command:
    text: str
    expected: list[str] = field(default_factory=list)


def commands(code: str) -> list[Command]:
    """An `sh` block's commands (continuation lines joined), each with the `#   ` output lines under it."""
    found: list[Command] = []
    lines = iter(code.splitlines())
    for line in lines:
        if line.startswith("#   "):
            found[-1].expected.append(line[4:])
            continue
        if not line.strip() or line.startswith("#"):
            continue
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines).strip()
        if heredoc := re.search(r"<<'(\w+)'$", line):  # the lines up to its end marker belong to it
            body = []
            while (more := next(lines)) != heredoc.group(1):
                body.append(more)
            line = "\n".join([line, *body, heredoc.group(1)])
        found.append(Command(line))
    return found


Reply = tuple[int, dict[str, str], bytes]


def weather(request: dict[str, Any]) -> Reply:
    """The model of docs/your-app.md: asks for the weather in the city named, then says it."""
    city = "Paris" if "Paris" in json.dumps(request["messages"]) else "Rome"
    if request["messages"][-1]["role"] == "tool":
        return sse(delta(content=f"It is 21 degrees in {city}."), finish("stop"))
    call = {"index": 0, "id": "call_w", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}  # fmt: skip
    return sse(delta(tool_calls=[call]), finish("tool_calls"))


@dataclass
class Page:
    path: str
    app: str = "keel.app.demo:app"
    """What the page's `keel dev` serves (the demo app unless the page writes its own)."""
    model: Callable[[dict[str, Any]], Reply] | None = None


PAGES = [
    Page("README.md"),
    Page("docs/cli.md"),
    Page("docs/python-client.md"),
    Page("docs/temporal.md"),
    Page("docs/your-app.md", app="myproject.app:app", model=weather),
    Page("docs/workspaces.md"),
    Page("docs/workflows.md"),
    Page("docs/http-api.md"),
    Page("docs/configuration.md"),
    Page("docs/operations.md"),
    Page("docs/development.md"),
    Page("docs/scaling.md"),
]
RUN_ELSEWHERE = {"docs/controller.md": "tests/controller/test_docs_controller.py"}


def test_every_page_is_run() -> None:
    pages = {"README.md", *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))}
    assert pages == {p.path for p in PAGES} | set(RUN_ELSEWHERE)
    for command, test in COVERED.items():
        assert command in (ROOT / test).read_text(), f"{test} does not run `{command}`"
    for test in RUN_ELSEWHERE.values():
        assert (ROOT / test).exists()
    for page in PAGES:
        for block in blocks(ROOT / page.path):
            assert block.lang in ("python", "sh", "js"), f"{page.path}:{block.line}: a block no test runs"


def test_every_fence_of_a_page_opens_a_named_block_or_closes_one() -> None:
    """A stray fence turns the rest of a page into one code block on GitHub, and `blocks` (which pairs fences)
    would not see it: each fence line must open a block with a language, or close the open one."""
    for page in [*(ROOT / p.path for p in PAGES), *(ROOT / p for p in RUN_ELSEWHERE)]:
        open_at = 0
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if not line.startswith("```"):
                continue
            if open_at:
                assert line == "```", f"{page.name}:{number}: a fence with a language inside the block of {open_at}"
                open_at = 0
            else:
                assert line[3:].strip(), f"{page.name}:{number}: a fence that opens a block with no language"
                open_at = number
        assert not open_at, f"{page.name}:{open_at}: a block never closed"


def expect(output: str, expected: list[str], where: str) -> None:
    lines = output.splitlines()
    at = 0
    for want in expected:
        # `...` stands for anything; a run of spaces for any (a table's columns widen with what else is listed)
        parts = (r"\s+".join(re.escape(word) for word in re.split(r"\s+", part)) for part in want.split("..."))
        pattern = re.compile(".*".join(parts))
        while at < len(lines) and not pattern.search(lines[at]):
            at += 1
        assert at < len(lines), f"{where}: no line matches {want!r} (in order) in:\n{output}"
        at += 1


class Stack:
    """A page's project folder, its `keel dev`, its shell variables."""

    def __init__(self, page: Page, dev_server: DevServer, tmp_path: Path, fake_openai: FakeOpenAI) -> None:
        self.page = page
        self.project = tmp_path / "project"
        self.project.mkdir()
        self.api_port = free_port()
        self.address = dev_server.cfg.address
        self.env = {
            **os.environ,
            "KEEL_TEMPORAL_ADDRESS": self.address,
            "KEEL_TASK_QUEUE": f"docs-{uuid.uuid4()}",
            "KEEL_DATA_DIR": str(tmp_path / "data"),
            "OPENAI_BASE_URL": fake_openai.base_url,
            "OPENAI_API_KEY": "sk-test",
            "KEEL_API_PORT": str(self.api_port),
            "PYTHONPATH": str(self.project),
            "TEMPORAL_ADDRESS": self.address,  # the `temporal` CLI's
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        }
        for var in ("KEEL_APP", "KEEL_STORAGE_URL"):
            self.env.pop(var, None)
        self.state = tmp_path / "shell-state"
        self.state.write_text("")
        self.dev: subprocess.Popen[str] | None = None
        self.namespace: dict[str, Any] = {"__name__": "__main__"}

    def substitute(self, code: str) -> str:
        code = code.replace("http://127.0.0.1:4111", f"http://127.0.0.1:{self.api_port}")
        code = code.replace("--task-queue keel ", f"--task-queue {self.env['KEEL_TASK_QUEUE']} ")
        return code.replace("127.0.0.1:7233", self.address)

    async def up(self) -> None:
        if self.dev is not None:
            return
        self.dev = subprocess.Popen(  # noqa: ASYNC220 (read from a thread below)
            [KEEL, "dev", "--app", self.page.app], env=self.env, cwd=self.project,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert self.dev.stdout is not None
        seen: list[str] = []
        async with asyncio.timeout(90):
            while "Ctrl-C stops everything" not in (line := await asyncio.to_thread(self.dev.stdout.readline)):
                assert line, "keel dev exited:\n" + "".join(seen)
                seen.append(line)

    def down(self) -> None:
        if self.dev is not None:
            self.dev.send_signal(signal.SIGINT)
            try:
                self.dev.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.dev.kill()
                self.dev.communicate()

    async def sh(self, command: Command, where: str, cwd: Path | None = None) -> None:
        code = 0
        expected = list(command.expected)
        if expected and (m := re.search(r"\s*\(exit (\d+)\)$", expected[-1])):
            code, expected[-1] = int(m.group(1)), expected[-1][: m.start()]
        script = f"set -a\nsource {shlex.quote(str(self.state))}\n{self.substitute(command.text)}\nstatus=$?\n"
        script += f"export -p > {shlex.quote(str(self.state))}\nexit $status\n"
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", script, env=self.env, cwd=cwd or self.project,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
        output = out.decode()
        assert proc.returncode == code, f"{where}: `{command.text}` exited {proc.returncode}:\n{output}"
        expect(output, expected, f"{where}: `{command.text}`")

    async def python(self, code: str, where: str) -> None:
        compiled = compile(self.substitute(code), where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            result = eval(compiled, self.namespace)
            if asyncio.iscoroutine(result):
                await asyncio.wait_for(result, 120)
        printed = [m.group(1) for m in re.finditer(r"^\s*print\(.*\)  # (.*)$", code, re.M)]
        assert out.getvalue().splitlines() == printed, f"{where}: printed\n{out.getvalue()}"

    async def js(self, code: str, where: str) -> None:
        npm_installed(JS, "@mastra/client-js", "the docs' JavaScript runs on the real @mastra/client-js")
        proc = await asyncio.create_subprocess_exec(
            "node", "--input-type=module", "-e", self.substitute(code), cwd=JS,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        printed = [m.group(1) for m in re.finditer(r"^console\.log\(.*\);  // (.*)$", code, re.M)]
        assert proc.returncode == 0, f"{where}: node exited {proc.returncode}:\n{out.decode()}"
        assert out.decode().splitlines() == printed, f"{where}: printed\n{out.decode()}"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", PAGES, ids=[p.path for p in PAGES])
async def test_the_page_runs_as_written(
    page: Page, dev_server: DevServer, tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    if page.model is not None:
        fake_openai.responder = page.model
    stack = Stack(page, dev_server, tmp_path, fake_openai)
    for key, value in stack.env.items():  # the page's Python: the same settings and folder as its shell
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(stack.project)
    monkeypatch.syspath_prepend(str(stack.project))
    try:
        for block in blocks(ROOT / page.path):
            where = f"{page.path}:{block.line}"
            first = block.code.split("\n", 1)[0]
            if block.lang == "python" and re.fullmatch(r"# [\w/.-]+\.py", first):
                target = stack.project / first[2:]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.code)
                continue
            if block.lang == "sh":
                for command in commands(block.code):
                    if command.text.split("  #")[0].strip() in COVERED:
                        continue
                    if command.text.startswith("make "):  # from the checkout, as the README says
                        await stack.sh(command, where, cwd=ROOT)
                        continue
                    await stack.up()
                    await stack.sh(command, where)
            elif block.lang == "python":
                await stack.up()
                await stack.python(block.code, where)
            elif block.lang == "js":
                await stack.up()
                await stack.js(block.code, where)
    finally:
        stack.down()
        for name in [m for m in sys.modules if m == "myproject" or m.startswith("myproject.")]:
            del sys.modules[name]
