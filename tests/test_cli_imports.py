"""What each `keel` command imports (issue D3): what it needs and no more. `keel --version` and `keel --help` load
nothing of Keel but the command line itself; the commands that talk to Temporal (`runs`, `result`, `pending`, ...)
no HTTP, app, workspace, model provider or worker code; `counts` loads the app (it counts the app's agents) but
none of the libraries its workspace and models use only when they run; `runs` (visibility only) not even the
workflows, their contract models or a storage backend. How long a command takes is measured in
bench/cli_startup.py, side by side with bare temporalio: here only what gets imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from keel.client.devserver import DevServer
from keel.storage import SQLiteStorage, Storage, open_payload_store

CHILD = """
import json, os, sys

out = sys.argv[1]

def dump():
    # pydantic's `_plugins` stays None until it looks for plugins (unless PYDANTIC_DISABLE_PLUGINS says not to)
    looked_up = getattr(sys.modules.get("pydantic.plugin._loader"), "_plugins", None) is not None
    with open(out, "w") as f:
        json.dump({"modules": sorted(sys.modules), "pydantic_plugins_looked_up": looked_up}, f)

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

NOT_FOR_COUNTING = {
    "keel.workflows.agent_run", "keel.workflows.agent_thread", "keel.workflows.contracts",
    "keel.workflows.definition_run", "keel.protocol.workflow_definition", "jsonschema", "keel.storage.sqlite",
    "keel.storage.postgres", "sqlite3",
}  # fmt: skip
"""What a visibility query (`keel runs`, `keel counts`) needs none of: the workflows and their contract models, the
workflow definition schema and jsonschema, a storage backend (the payload store beside SQLite's file is a folder)."""

NOT_FOR_LISTING = NOT_FOR_COUNTING | {
    "keel.app", "keel.protocol.chunks", "keel.storage.base", "pydantic", "pydantic_core", "pydantic_settings",
}  # fmt: skip
"""`keel runs` lists runs without the app, the stream chunk models or the storage models, and so without pydantic
(~40 ms of import): the settings are plain, and the data converter loads pydantic on its first payload."""


def run_keel(args: list[str], env: dict[str, str], tmp_path: Path, exit_code: int = 0) -> dict[str, Any]:
    """What `keel ARGS` had done when it ended (it must end with `exit_code`): the modules it loaded, and whether
    pydantic looked for plugins."""
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), *args], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == exit_code, proc.stderr
    found: dict[str, Any] = json.loads(out.read_text())
    return found


def imported(args: list[str], env: dict[str, str], tmp_path: Path, exit_code: int = 0) -> set[str]:
    """The modules loaded when `keel ARGS` ends (it must end with `exit_code`)."""
    return set(run_keel(args, env, tmp_path, exit_code)["modules"])


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


@pytest.mark.parametrize("args", [["runs"], ["runs", "--status", "suspended", "--json"]], ids=" ".join)
def test_keel_runs_imports_no_workflow_contract_app_or_storage_backend(
    args: list[str], dev_server: DevServer, storage: Storage, tmp_path: Path
) -> None:
    assert hasattr(storage, "path")
    env = plain_env(KEEL_TEMPORAL_ADDRESS=dev_server.cfg.address, KEEL_STORAGE_URL=f"sqlite:///{storage.path}")
    found = run_keel(args, env, tmp_path)
    assert loaded(set(found["modules"]), NOT_FOR_LISTING) == []
    assert not found["pydantic_plugins_looked_up"]  # PYDANTIC_DISABLE_PLUGINS, set by the command line


def test_keel_counts_imports_no_workflow_contract_or_storage_backend(
    dev_server: DevServer, storage: Storage, tmp_path: Path
) -> None:
    assert hasattr(storage, "path")
    env = plain_env(KEEL_TEMPORAL_ADDRESS=dev_server.cfg.address, KEEL_STORAGE_URL=f"sqlite:///{storage.path}")
    found = run_keel(["counts", "--json"], env, tmp_path)
    assert loaded(set(found["modules"]), NOT_FOR_COUNTING) == []
    assert not found["pydantic_plugins_looked_up"]


@pytest.mark.parametrize("db", ["keel.db", "data/keel.db", "/srv/keel/keel.db"])
def test_the_payload_store_a_client_opens_beside_sqlite_is_the_sqlite_storages_own(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`open_payload_store` finds SQLite's payload folder without loading the backend (see `keel runs` above)."""
    monkeypatch.delenv("KEEL_PAYLOAD_STORE", raising=False)
    assert open_payload_store(storage_url=f"sqlite:///{db}").location == SQLiteStorage(db).payloads().location


APP_SOURCE = """
from keel import Agent, App
from keel.model_providers.scripted import ScriptedModel

app = App.of({agents})
"""


def _write_app(folder: Path, ids: list[str]) -> None:
    agents = ", ".join(f"Agent(id={i!r}, model=ScriptedModel([]))" for i in ids)
    (folder / "counted_app.py").write_text(APP_SOURCE.format(agents=agents))


def test_keel_counts_knows_the_apps_agents_without_importing_it_until_the_app_changes(
    dev_server: DevServer, tmp_path: Path
) -> None:
    """The first `keel counts` imports the app and keeps its agent ids; the next ones count without importing
    it (no pydantic, no app module), until a source file of the app changes, a KEEL_ setting changes, or
    `--reload` asks."""
    project = tmp_path / "project"
    project.mkdir()
    _write_app(project, ["alpha", "beta"])
    env = plain_env(
        KEEL_TEMPORAL_ADDRESS=dev_server.cfg.address,
        KEEL_DATA_DIR=str(tmp_path / "data"),
        KEEL_APP="counted_app:app",
        KEEL_API_KEYS='{"sk-kept-nowhere-0123456789": ["admin"]}',
        PYTHONPATH=str(project),
    )

    def counts(extra: list[str] | None = None, **more_env: str) -> tuple[list[str], set[str]]:
        out = tmp_path / "modules.json"
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(out), "counts", "--json", *(extra or [])],
            env=env | more_env, cwd=project, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return list(json.loads(proc.stdout)["agents"]), set(json.loads(out.read_text())["modules"])

    agents, modules = counts()
    assert agents == ["alpha", "beta"] and "counted_app" in modules
    agents, modules = counts()
    assert agents == ["alpha", "beta"]
    assert loaded(modules, {"counted_app", "keel.app", "pydantic"}) == []

    _write_app(project, ["alpha", "beta", "gamma"])  # an edit: another size, another mtime
    agents, modules = counts()
    assert agents == ["alpha", "beta", "gamma"] and "counted_app" in modules
    agents, modules = counts()
    assert agents == ["alpha", "beta", "gamma"] and "counted_app" not in modules

    agents, modules = counts(KEEL_TASK_QUEUE="elsewhere")  # another setting: imported again
    assert agents == ["alpha", "beta", "gamma"] and "counted_app" in modules
    agents, modules = counts(["--reload"])
    assert "counted_app" in modules
    kept = [f.read_text() for f in (tmp_path / "data" / "apps").iterdir()]
    assert kept and not any("sk-kept-nowhere" in text for text in kept)  # the settings are kept as a digest


def test_keel_counts_with_a_data_dir_it_cannot_write_still_counts(dev_server: DevServer, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    _write_app(project, ["solo"])
    (tmp_path / "data").write_text("a file where the data dir would be")
    env = plain_env(
        KEEL_TEMPORAL_ADDRESS=dev_server.cfg.address,
        KEEL_DATA_DIR=str(tmp_path / "data"),
        KEEL_APP="counted_app:app",
        PYTHONPATH=str(project),
    )
    for _ in range(2):
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "keel"), "counts", "--json"],
            env=env, cwd=project, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert list(json.loads(proc.stdout)["agents"]) == ["solo"]
