"""`WorkspaceLSP` against the real `pylsp` and the real `typescript-language-server` (installed by npm on first use
into tests/workspace/lsp_js): Mastra's `mastra_workspace_lsp_inspect` results, its errors, and the servers'
lifecycle checked from outside (/proc)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import sysconfig
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from keel.workspace_providers.errors import FileNotFound, PermissionDenied, WorkspaceError
from keel.workspace_providers.lsp import (
    LSP_INSPECT_SPEC,
    LspInspectInput,
    LSPServerUnavailable,
    LSPTimeout,
    WorkspaceLSP,
    normalize_lsp_config,
)
from tests.conftest import npm_installed

LSP_JS = Path(__file__).parent / "lsp_js"

PY_FILES = {
    "pyproject.toml": "[project]\nname = 'demo'\n",
    "util.py": 'def add(a: int, b: int) -> int:\n    """Add two numbers."""\n    return a + b\n',
    "main.py": "from util import add\n\nprint(add(1, 2))\n",
}
TS_FILES = {
    "web/tsconfig.json": '{"compilerOptions": {"strict": true, "target": "es2020", "module": "commonjs"}}\n',
    "web/src/shape.ts": (
        "export interface Shape {\n"
        "  area(): number;\n"
        "}\n"
        "\n"
        "export class Circle implements Shape {\n"
        "  constructor(private r: number) {}\n"
        "  area(): number {\n"
        "    return 3.14 * this.r * this.r;\n"
        "  }\n"
        "}\n"
        "\n"
        "export abstract class Animal {\n"
        "  abstract speak(): string;\n"
        "}\n"
        "\n"
        "export class Dog extends Animal {\n"
        "  speak(): string {\n"
        '    return "woof";\n'
        "  }\n"
        "}\n"
    ),
    "web/src/main.ts": (
        'import { Animal, Circle, Dog, Shape } from "./shape";\n'
        "\n"
        "const s: Shape = new Circle(2);\n"
        "console.log(s.area());\n"
        "const a: Animal = new Dog();\n"
        "console.log(a.speak());\n"
        'const bad: number = "x";\n'
        'const emoji = "\U0001f600"; s.area();\n'
    ),
}


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def group_members(pgids: list[int]) -> list[int]:
    """Live (not zombie) processes in any of the process groups `pgids`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in pgids:
            found.append(int(entry))
    return found


def running(text: str) -> list[int]:
    """Processes whose command line contains `text`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if text in Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry))
            except OSError:
                continue
    return found


async def wait_until_gone(pids: list[int], timeout: float = 5) -> list[int]:
    """The pids still alive after `timeout` seconds (orphaned children are reaped by init, not us)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (left := group_members(pids)) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return left


@pytest.fixture(scope="session")
def lsp_js() -> Path:
    """tests/workspace/lsp_js with its node_modules (`npm ci` the first time)."""
    why = "LSP inspection is tested with the real typescript-language-server"
    return npm_installed(LSP_JS, ".bin/typescript-language-server", why)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lsp-project")
    write(root, PY_FILES | TS_FILES)
    return root


def make_lsp(project: Path, lsp_js: Path, **config: Any) -> WorkspaceLSP:
    return WorkspaceLSP(project, {"searchPaths": [str(lsp_js)], **config}, cwd=str(project))


@pytest.fixture(scope="module")
async def lsp(project: Path, lsp_js: Path) -> AsyncIterator[WorkspaceLSP]:
    """One manager (so one server per language) shared by the read-only tests. Its requests wait up to 30 s, not
    Mastra's 5 (which would be no answer): a loaded 2-core machine's first TypeScript hover, tsserver loading its
    libraries, took longer (CI, stop 49)."""
    manager = make_lsp(project, lsp_js, requestTimeout=30_000)
    yield manager
    await manager.destroy()


# --- the tool's contract -------------------------------------------------------------------------------------


def test_the_spec_and_input_model_are_mastras() -> None:
    schema = LSP_INSPECT_SPEC["inputSchema"]
    assert schema["required"] == ["path", "line", "match"]
    assert schema["properties"]["line"] == {
        "description": "Line number (1-indexed)",
        "type": "integer",
        "exclusiveMinimum": 0,
        "maximum": 9007199254740991,
    }
    assert LSP_INSPECT_SPEC["description"].startswith("Inspect code at a specific symbol position using the Language")
    assert LspInspectInput(path="a.py", line=1, match="<<<x").line == 1
    with pytest.raises(ValidationError):
        LspInspectInput(path="a.py", line=0, match="<<<x")
    with pytest.raises(ValidationError):
        LspInspectInput.model_validate({"path": "a.py", "line": 1, "match": "<<<x", "column": 2})


def test_config_takes_mastras_camel_case_keys_and_refuses_unknown_ones() -> None:
    config = normalize_lsp_config({"initTimeout": 100, "disableServers": ["go"], "binary_overrides": {"go": "x"}})
    assert (config.init_timeout, config.disable_servers, config.binary_overrides) == (100, ("go",), {"go": "x"})
    assert normalize_lsp_config(True).request_timeout == 5000
    with pytest.raises(WorkspaceError, match="Unknown lsp option: diagnosticsTimeout"):
        normalize_lsp_config({"diagnosticsTimeout": 1})


def test_the_config_root_is_only_the_default_project_root_and_must_lie_in_the_workspace(
    project: Path, tmp_path: Path
) -> None:
    outside = os.path.join(sysconfig.get_paths()["stdlib"], "os.py")
    for root in ("/", str(tmp_path), str(project / "..")):
        with pytest.raises(WorkspaceError, match=r"lsp root .* must be inside the workspace directory"):
            WorkspaceLSP(project, {"root": root})
    manager = WorkspaceLSP(project, {"root": str(project / "web")})
    assert manager.resolve("main.py") == str(project / "main.py")  # tool paths stay the workspace's
    with pytest.raises(PermissionDenied):
        manager.resolve(outside)
    assert manager.project_root(str(project / "web" / "src" / "main.ts"), ["nothing-here"]) == str(project / "web")
    relative = WorkspaceLSP(project, {"root": "web"})  # relative to the workspace directory
    assert relative.project_root(str(project / "main.py"), ["nothing-here"]) == str(project / "web")
    assert WorkspaceLSP(project).project_root(str(project / "main.py"), ["nothing-here"]) == str(project)


def test_a_broken_typescript_package_json_is_no_server_not_a_crash(tmp_path: Path) -> None:
    manifest = tmp_path / "node_modules" / "typescript" / "package.json"
    manifest.parent.mkdir(parents=True)
    manager = WorkspaceLSP(tmp_path)
    for text in ("{not json", '{"version": "next"}', '["a list"]', '{"version": "7.0.0", "bin": 3}'):
        manifest.write_text(text)
        assert manager.server_for("a.ts").command(str(tmp_path)) is None


async def test_a_missing_or_repeated_cursor_marker_is_mastras_error(project: Path) -> None:
    manager = WorkspaceLSP(project)
    assert await manager.inspect("main.py", 3, "print(add(1, 2))") == {"error": "No <<< cursor marker found in match"}
    assert await manager.inspect("main.py", 3, "<<<print(<<<add(1, 2))") == {
        "error": "Multiple <<< markers found (found 2, expected 1)"
    }
    assert manager.server_pids() == []


async def test_paths_outside_the_workspace_or_missing_files_are_refused(project: Path, tmp_path: Path) -> None:
    manager = WorkspaceLSP(project)
    (tmp_path / "outside.py").write_text("x = 1\n")
    (project / "link.py").symlink_to(tmp_path / "outside.py")
    try:
        for path in ("../outside.py", str(tmp_path / "outside.py"), "link.py"):
            with pytest.raises(PermissionDenied):
                await manager.inspect(path, 1, "<<<x = 1")
        with pytest.raises(FileNotFound, match=r"File not found: nope\.py"):
            await manager.inspect("nope.py", 1, "<<<x")
    finally:
        (project / "link.py").unlink()
    assert manager.server_pids() == []


async def test_an_unknown_extension_has_no_language_server(project: Path, tmp_path: Path) -> None:
    (project / "notes.txt").write_text("hello\n")
    assert await WorkspaceLSP(project).inspect("notes.txt", 1, "<<<hello") == {
        "error": "No language server available for files of this type: notes.txt"
    }


async def test_a_missing_server_binary_says_what_to_install(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    manager = WorkspaceLSP(project)  # no search paths: no typescript package, no pylsp
    ts = await manager.inspect("web/src/main.ts", 4, "console.log(s.<<<area());")
    assert "install it: npm install typescript-language-server typescript@5" in ts["error"]
    py = await manager.inspect("main.py", 3, "print(<<<add(1, 2))")
    assert py == {
        "error": "No language server available for files of this type: main.py (Python Language Server (pylsp) "
        "not found; install it: pip install python-lsp-server)"
    }
    with pytest.raises(LSPServerUnavailable):
        await manager.client_for(str(project / "main.py"))


async def test_a_configured_command_that_cannot_run_fails_to_initialize(project: Path) -> None:
    manager = WorkspaceLSP(project, {"binaryOverrides": {"python": "/nonexistent/pylsp --verbose"}})
    result = await manager.inspect("main.py", 3, "print(<<<add(1, 2))")
    assert result["error"].startswith(
        "Failed to initialize LSP client: Failed to start Python Language Server (pylsp) (/nonexistent/pylsp "
        "--verbose): [Errno 2] No such file or directory"
    )


# --- Python (pylsp) ------------------------------------------------------------------------------------------


async def test_python_hover_and_the_definition_of_a_function_imported_from_another_module(lsp: WorkspaceLSP) -> None:
    result = await lsp.inspect("main.py", 3, "print(<<<add(1, 2))")
    assert result == {
        "hover": {"value": "```python\nadd(a: int, b: int) -> int\n```\n\n\nAdd two numbers.", "kind": "markdown"},
        "definition": [{"location": "$cwd/util.py:L1:C5", "preview": "def add(a: int, b: int) -> int:"}],
    }  # pylsp has no textDocument/implementation: no "implementation" key, as Mastra when a server gives none


async def test_inspecting_a_definition_leaves_itself_out(lsp: WorkspaceLSP) -> None:
    result = await lsp.inspect("util.py", 1, "def <<<add(a: int, b: int) -> int:")
    assert set(result) == {"hover"}


async def test_a_file_changed_since_the_last_call_is_seen_afresh(lsp: WorkspaceLSP, project: Path) -> None:
    (project / "later.py").write_text("from util import add\n")
    assert "definition" not in await lsp.inspect("later.py", 2, "<<<add(3, 4)")
    (project / "later.py").write_text("from util import add\nadd(3, 4)\n")
    result = await lsp.inspect("later.py", 2, "<<<add(3, 4)")
    assert result["definition"] == [{"location": "$cwd/util.py:L1:C5", "preview": "def add(a: int, b: int) -> int:"}]


async def test_concurrent_calls_share_one_server(lsp: WorkspaceLSP) -> None:
    results = await asyncio.gather(
        lsp.inspect("main.py", 3, "print(<<<add(1, 2))"),
        lsp.inspect("main.py", 1, "from util import <<<add"),
        lsp.inspect("util.py", 3, "    return <<<a + b"),
    )
    assert [r["hover"]["kind"] for r in results] == ["markdown"] * 3
    assert "def add" in results[1]["definition"][0]["preview"]
    assert results[2]["definition"] == [
        {"location": "$cwd/util.py:L1:C9", "preview": "def add(a: int, b: int) -> int:"}
    ]


# --- TypeScript (typescript-language-server) -----------------------------------------------------------------


async def test_typescript_hover_definition_and_implementations_of_an_interface_method(lsp: WorkspaceLSP) -> None:
    result = await lsp.inspect("web/src/main.ts", 4, "console.log(s.<<<area());")
    assert result == {
        "hover": {"value": "\n```typescript\n(method) Shape.area(): number\n```\n", "kind": "markdown"},
        "definition": [{"location": "$cwd/web/src/shape.ts:L2:C3", "preview": "area(): number;"}],
        "implementation": ["$cwd/web/src/shape.ts:L7:C3"],
    }


async def test_typescript_implementation_of_an_abstract_method(lsp: WorkspaceLSP) -> None:
    result = await lsp.inspect("web/src/main.ts", 6, "console.log(a.<<<speak());")
    assert result["definition"] == [
        {"location": "$cwd/web/src/shape.ts:L13:C3", "preview": "abstract speak(): string;"}
    ]
    assert result["implementation"] == ["$cwd/web/src/shape.ts:L17:C3"]
    at_declaration = await lsp.inspect("web/src/shape.ts", 13, "  abstract <<<speak(): string;")
    assert "definition" not in at_declaration  # the cursor's own line is left out
    assert at_declaration["implementation"] == ["$cwd/web/src/shape.ts:L17:C3"]


async def test_typescript_diagnostics_on_the_line_come_with_the_hover(lsp: WorkspaceLSP) -> None:
    result = await lsp.inspect("web/src/main.ts", 7, 'const <<<bad: number = "x";')
    assert result["hover"]["value"] == "\n```typescript\nconst bad: number\n```\n"
    assert {
        "severity": "error",
        "message": "Type 'string' is not assignable to type 'number'.",
        "source": "typescript",
    } in (result["diagnostics"])


async def test_the_cursor_column_counts_utf16_units_as_lsp_does(lsp: WorkspaceLSP) -> None:
    result = await lsp.inspect("web/src/main.ts", 8, 'const emoji = "\U0001f600"; s.<<<area();')
    assert result["definition"] == [{"location": "$cwd/web/src/shape.ts:L2:C3", "preview": "area(): number;"}]


# --- lifecycle -----------------------------------------------------------------------------------------------


async def test_destroy_leaves_no_language_server_process(project: Path, lsp_js: Path) -> None:
    manager = make_lsp(project, lsp_js)
    await asyncio.gather(
        manager.inspect("main.py", 3, "print(<<<add(1, 2))"),
        manager.inspect("web/src/main.ts", 4, "console.log(s.<<<area());"),
    )
    pgids = manager.server_pids()
    assert len(pgids) == 2
    members = group_members(pgids)
    assert len(members) > 2  # typescript-language-server runs tsserver children
    await manager.destroy()
    assert manager.server_pids() == []
    assert await wait_until_gone(members) == []


async def test_a_killed_server_is_restarted_on_the_next_call(lsp: WorkspaceLSP) -> None:
    assert "hover" in await lsp.inspect("main.py", 3, "print(<<<add(1, 2))")
    pids = set(lsp.server_pids())
    (pylsp,) = [p for p in pids if b"pylsp" in Path(f"/proc/{p}/cmdline").read_bytes()]
    os.kill(pylsp, signal.SIGKILL)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while len(lsp.server_pids()) == len(pids) and loop.time() < deadline:  # the client sees its output close
        await asyncio.sleep(0.01)
    assert pylsp not in lsp.server_pids()
    assert await wait_until_gone([pylsp]) == []
    result = await lsp.inspect("main.py", 3, "print(<<<add(1, 2))")
    assert result["definition"] == [{"location": "$cwd/util.py:L1:C5", "preview": "def add(a: int, b: int) -> int:"}]
    assert len(lsp.server_pids()) == len(pids)
    assert pylsp not in lsp.server_pids()


# --- the JSON-RPC client, against a scripted server ----------------------------------------------------------

FAKE_SERVER = """
import json, os, sys, time

inp, out = sys.stdin.buffer, sys.stdout.buffer
mode = sys.argv[1]


def read():
    length = None
    while (line := inp.readline()) not in (b"\\r\\n", b"\\n"):
        if not line:
            sys.exit(0)
        key, _, value = line.decode().partition(":")
        if key.lower() == "content-length":
            length = int(value)
    return json.loads(inp.read(length))


def send(message):
    body = json.dumps(dict(jsonrpc="2.0", **message)).encode()
    out.write(b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
    out.flush()


while True:
    message = read()
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize" and mode != "mute":
        # like real servers, ask the client things first; an unanswered request would hang the handshake
        send(dict(id="c1", method="workspace/configuration", params={"items": [{"section": "fake"}]}))
        send(dict(id="c2", method="window/workDoneProgress/create", params={"token": "t"}))
        send(dict(id="c3", method="fake/unknown", params={}))
        answers = {}
        while len(answers) < 3:
            reply = read()
            answers[reply.get("id")] = reply
        assert answers["c1"]["result"] == [{}] and answers["c2"]["result"] is None, answers
        assert answers["c3"]["error"]["code"] == -32601, answers
        send(dict(id=message["id"], result={"capabilities": {"hoverProvider": True}}))
        if mode == "stuck":  # a wedged server: it never reads its input again
            time.sleep(3600)
    elif method == "textDocument/didChange":
        diagnostic = {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}},
                      "severity": 2, "message": "fake warning", "source": "fake"}
        uri = params["textDocument"]["uri"]
        send(dict(method="textDocument/publishDiagnostics", params={"uri": uri, "diagnostics": [diagnostic]}))
    elif method == "textDocument/hover":
        if mode == "crash":
            os._exit(3)
        send(dict(id=message["id"], result={"contents": [{"language": "fake", "value": "fake hover"}]}))
    elif method == "textDocument/definition":
        target = params["textDocument"]["uri"].rsplit("/", 1)[0] + "/other.fake"
        link = {"line": 2, "character": 4}
        span = {"start": link, "end": link}
        send(dict(id=message["id"], result=[{"targetUri": target, "targetRange": span, "targetSelectionRange": span}]))
    elif method == "shutdown":
        send(dict(id=message["id"], result=None))
    elif method == "exit":
        sys.exit(0)
    # textDocument/implementation is never answered: the client's request timeout ends it
"""


def fake_server(script: Path, server_id: str, mode: str = "ok") -> dict[str, Any]:
    return {
        "id": server_id,
        "name": f"Fake {server_id}",
        "languageIds": [server_id],
        "extensions": [f".{server_id}"],
        "markers": [],
        "command": f"{sys.executable} -I {script} {mode}",
    }


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    """A workspace with the scripted server as fake.py and files x.fake, x.fa, x.fb, other.fake."""
    write(tmp_path, {"fake.py": FAKE_SERVER, "other.fake": "one\ntwo\n    three()\n"})
    for name in ("x.fake", "x.fa", "x.fb", "x.mute", "x.crash", "x.stuck"):
        (tmp_path / name).write_text("call()\n")
    return tmp_path


async def test_server_requests_are_answered_and_a_request_timeout_is_no_answer(fake: Path) -> None:
    manager = WorkspaceLSP(
        fake, {"servers": {"f": fake_server(fake / "fake.py", "fake")}, "requestTimeout": 300}, cwd=str(fake)
    )
    try:
        assert await manager.inspect("x.fake", 1, "<<<call()") == {
            "hover": {"value": "fake hover", "kind": "markdown"},
            "diagnostics": [{"severity": "warning", "message": "fake warning", "source": "fake"}],
            "definition": [{"location": "$cwd/other.fake:L3:C5", "preview": "three()"}],
        }  # implementation timed out after 300 ms: left out, as Mastra leaves out a failed query
        (pid,) = manager.server_pids()
        client = await manager.client_for(str(fake / "x.fake"))
        with pytest.raises(LSPTimeout, match=r"LSP request textDocument/implementation timed out after 300ms"):
            await client.request("textDocument/implementation", {}, 0.3)
    finally:
        await manager.destroy()
    assert await wait_until_gone([pid]) == []


async def test_a_server_dying_mid_call_is_a_query_error_and_restarts_next_time(fake: Path) -> None:
    manager = WorkspaceLSP(fake, {"servers": {"c": fake_server(fake / "fake.py", "crash", "crash")}})
    try:
        result = await manager.inspect("x.crash", 1, "<<<call()")
        assert result["error"].startswith("LSP query failed: Fake crash exited")
        assert manager.server_pids() == []
        assert "error" in await manager.inspect("x.crash", 1, "<<<call()")  # started afresh, and crashed again
    finally:
        await manager.destroy()


async def test_max_open_clients_closes_the_least_recently_used_idle_server(fake: Path) -> None:
    servers = {"a": fake_server(fake / "fake.py", "fa"), "b": fake_server(fake / "fake.py", "fb")}
    manager = WorkspaceLSP(fake, {"servers": servers, "maxOpenClients": 1, "requestTimeout": 300})
    try:
        assert "hover" in await manager.inspect("x.fa", 1, "<<<call()")
        (first,) = manager.server_pids()
        assert "hover" in await manager.inspect("x.fb", 1, "<<<call()")
        (second,) = manager.server_pids()
        assert second != first
        assert await wait_until_gone([first]) == []
    finally:
        await manager.destroy()


async def test_a_server_that_never_answers_initialize_times_out_and_is_killed(fake: Path) -> None:
    server = fake_server(fake / "fake.py", "mute", "mute")
    manager = WorkspaceLSP(fake, {"servers": {"m": server}, "initTimeout": 300})
    result = await manager.inspect("x.mute", 1, "<<<call()")
    assert result == {
        "error": "Failed to initialize LSP client: LSP request initialize timed out after 300ms (Fake mute)"
    }
    assert manager.server_pids() == []
    assert running(f"{fake / 'fake.py'} mute") == []


@pytest.mark.timeout(30)
async def test_a_server_that_stops_reading_its_input_is_killed_within_the_request_timeout(fake: Path) -> None:
    (fake / "big.stuck").write_text("x = 1\n" * 200_000)  # far more than a pipe holds
    server = fake_server(fake / "fake.py", "stuck", "stuck")
    manager = WorkspaceLSP(fake, {"servers": {"s": server}, "requestTimeout": 500, "diagnosticTimeout": 500})
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        result = await asyncio.wait_for(manager.inspect("big.stuck", 1, "<<<x = 1"), 10)
        assert loop.time() - started < 5
        assert result["error"].startswith("LSP query failed: Fake stuck stopped reading its input")
        assert manager.server_pids() == []
    finally:
        await asyncio.wait_for(manager.destroy(), 5)
    assert await wait_until_gone(running(f"{fake / 'fake.py'} stuck"), 2) == []


@pytest.mark.timeout(30)
async def test_a_cancelled_inspection_of_a_stuck_server_ends_at_once_and_destroy_kills_it(fake: Path) -> None:
    (fake / "big.stuck").write_text("x = 1\n" * 200_000)
    server = fake_server(fake / "fake.py", "stuck", "stuck")
    manager = WorkspaceLSP(fake, {"servers": {"s": server}, "requestTimeout": 60_000})
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(manager.inspect("big.stuck", 1, "<<<x = 1"), 1)
    assert loop.time() - started < 3  # the cancellation is not held up by a write in a `finally`
    (pid,) = manager.server_pids()
    started = loop.time()
    await asyncio.wait_for(manager.destroy(), 5)
    assert loop.time() - started < 3  # no `shutdown` through a pipe nobody reads
    assert manager.server_pids() == []
    assert await wait_until_gone([pid], 2) == []
