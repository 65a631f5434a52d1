"""What each `keel` command imports (issue D3): what it needs and no more. `keel --version` and `keel --help` load
nothing of Keel but the command line itself; the commands that talk to Temporal (`runs`, `result`, `pending`, ...)
no HTTP, app, workspace, model provider or worker code; `counts` loads the app (it counts the app's agents) but
none of the libraries its workspace and models use only when they run. How long a command takes is measured in
bench/cli_startup.py, side by side with bare temporalio: here only what gets imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keel.client.devserver import DevServer
from keel.storage import Storage

CHILD = """
import json, os, sys

out = sys.argv[1]

def dump():
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)

exit_now = os._exit
os._exit = lambda code: (dump(), exit_now(code))  # how `keel` ends a command (sdk-python#300)
sys.argv = ["keel", *sys.argv[2:]]
from keel.cli import main  # what the `keel` script runs
try:
    main()
except SystemExit:  # how argparse ends --version and --help
    dump()
    raise
"""

COMMAND_LINE = {"keel", "keel.cli", "keel.dev_stack", "keel.client", "keel.client.cli", "keel.client.errors"}
"""Keel's modules every command imports: the command line and the client's error classes."""

LIBRARIES_RUN_ONLY = {
    "numpy", "httpx", "fastapi", "starlette", "uvicorn", "yaml", "tiktoken", "regex", "sentence_transformers",
    "torch", "asyncpg",
}  # fmt: skip
"""Libraries a workspace, a model or the HTTP API use when they run: no command that only talks to Temporal and
storage imports them, nor does loading an app."""

KEEL_NOT_FOR_CLIENT_COMMANDS = {
    "keel.worker", "keel.plugin", "keel.activities", "keel.client.api", "keel.client.devserver", "keel.app.demo",
    "keel.workspace_providers", "keel.model_providers",
}  # fmt: skip


def imported(args: list[str], env: dict[str, str], tmp_path: Path, exit_code: int = 0) -> set[str]:
    """The modules loaded when `keel ARGS` ends (it must end with `exit_code`)."""
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), *args], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == exit_code, proc.stderr
    return set(json.loads(out.read_text()))


def plain_env(**extra: str) -> dict[str, str]:
    """The environment without the caller's Keel settings (no KEEL_APP: the default app, the demo)."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}, **extra}


def loaded(modules: set[str], names: set[str]) -> list[str]:
    """The `names` (packages with their submodules) among `modules`."""
    return sorted(m for m in modules if any(m == n or m.startswith(f"{n}.") for n in names))


def test_keel_version_imports_nothing_but_the_command_line(tmp_path: Path) -> None:
    modules = imported(["--version"], plain_env(), tmp_path)
    assert {m for m in modules if m.split(".")[0] == "keel"} <= COMMAND_LINE
    assert loaded(modules, {"temporalio", "pydantic", "asyncio", *LIBRARIES_RUN_ONLY}) == []


def test_keel_help_builds_every_parser_without_importing_what_the_commands_run(tmp_path: Path) -> None:
    modules = imported(["--help"], plain_env(), tmp_path)
    assert {m for m in modules if m.split(".")[0] == "keel"} <= COMMAND_LINE | {"keel.client.workflow_commands"}
    assert loaded(modules, {"temporalio", "pydantic", "asyncio", *LIBRARIES_RUN_ONLY}) == []


@pytest.mark.parametrize(
    ("args", "exit_code"),
    [
        pytest.param(args, code, id=" ".join(args))
        for args, code in [
            (["runs"], 0),
            (["runs", "--status", "suspended", "--json"], 0),
            (["result", "run-none"], 2),
            (["pending", "run-none"], 2),
            (["approve", "run-none", "call_1"], 2),
            (["events", "run-none"], 2),
            (["config"], 0),
        ]
    ],
)
def test_the_commands_that_talk_to_temporal_import_no_app_workspace_http_or_worker_code(
    args: list[str], exit_code: int, dev_server: DevServer, storage: Storage, tmp_path: Path
) -> None:
    assert hasattr(storage, "path")
    env = plain_env(KEEL_TEMPORAL_ADDRESS=dev_server.cfg.address, KEEL_STORAGE_URL=f"sqlite:///{storage.path}")
    modules = imported(args, env, tmp_path, exit_code)
    assert loaded(modules, LIBRARIES_RUN_ONLY | KEEL_NOT_FOR_CLIENT_COMMANDS) == []


def test_keel_counts_loads_the_app_but_none_of_the_libraries_its_tools_and_models_run_on(
    dev_server: DevServer, storage: Storage, tmp_path: Path
) -> None:
    assert hasattr(storage, "path")
    env = plain_env(KEEL_TEMPORAL_ADDRESS=dev_server.cfg.address, KEEL_STORAGE_URL=f"sqlite:///{storage.path}")
    modules = imported(["counts", "--json"], env, tmp_path)
    assert "keel.app.demo" in modules  # the app counted: the demo's agents, unchanged
    assert loaded(modules, LIBRARIES_RUN_ONLY | {"keel.worker", "keel.activities", "keel.client.api"}) == []
