"""Installed from its wheel into a fresh virtualenv, Keel adds one import name, `keel`: a user project with its own
`app/` and `client/` packages runs a worker with `keel worker` and a turn with `from keel import KeelClient`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from keel.client.devserver import DevServer

REPO = Path(__file__).resolve().parents[1]

USER_APP = '''
from pydantic import BaseModel

from client.shout import shout  # the project's own `client` package, not Keel's
from keel import (
    Agent, App, ModelRequest, ModelResponse, ModelToolCall, ScriptedModel, ToolContext, last_user_text, tool,
    tool_results_since_last_user,
)


class Say(BaseModel):
    text: str


@tool("shout")
async def shout_tool(args: Say, ctx: ToolContext) -> str:
    """Shout the text."""
    return shout(args.text)


def script(request: ModelRequest) -> ModelResponse:
    results = tool_results_since_last_user(request)
    if not results:
        return ModelResponse(tool_calls=[ModelToolCall(id="c1", name="shout", args={"text": last_user_text(request)})])
    return ModelResponse(text=f"I shouted: {results[-1].result}")


app = App.of(Agent(id="shouter", model=ScriptedModel(script, name="shouter"), tools=(shout_tool,)))
'''

USER_TURN = """
import asyncio, os, sys

from app import app
from keel import KeelClient


async def main() -> None:
    keel = await KeelClient.connect(task_queue=sys.argv[1], app=app)
    result = await asyncio.wait_for(keel.result(await keel.start_run("shouter", "hello")), 60)
    print(result.text, flush=True)


asyncio.run(main())
os._exit(0)
"""


def write_project(root: Path) -> Path:
    (root / "app").mkdir(parents=True)
    (root / "client").mkdir()
    (root / "app" / "__init__.py").write_text(USER_APP)
    (root / "client" / "__init__.py").write_text("")
    (root / "client" / "shout.py").write_text("def shout(text: str) -> str:\n    return text.upper() + '!'\n")
    (root / "turn.py").write_text(USER_TURN)
    return root


def build_and_install(tmp: Path) -> tuple[Path, Path]:
    """The wheel, and a fresh virtualenv with it installed (dependencies from the package index)."""
    run = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(REPO), "-w", str(tmp / "dist")]
    subprocess.run(run, check=True, capture_output=True, timeout=120)
    [wheel] = (tmp / "dist").glob("keel-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True, timeout=180)
    return wheel, venv


async def test_the_wheel_adds_only_keel_and_runs_a_turn_beside_a_project_with_its_own_app_and_client(
    dev_server: DevServer, tmp_path: Path
) -> None:
    wheel, venv = await asyncio.to_thread(build_and_install, tmp_path)
    with zipfile.ZipFile(wheel) as whl:
        tops = {name.split("/")[0] for name in whl.namelist()}
        top_level = next(n for n in whl.namelist() if n.endswith(".dist-info/top_level.txt"))
        assert whl.read(top_level).decode().split() == ["keel"]
    assert tops == {"keel", wheel.name.split("-py3")[0] + ".dist-info"}

    project = write_project(tmp_path / "project")
    queue = f"install-{uuid.uuid4()}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "KEEL_APP")}
    env |= {
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
        "KEEL_DATA_DIR": str(tmp_path / "data"),
    }
    worker = await asyncio.create_subprocess_exec(
        str(venv / "bin" / "keel"), "worker", "--app", "app:app", "--task-queue", queue,
        cwd=project, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert worker.stdout is not None
        started = await asyncio.wait_for(worker.stdout.readline(), 60)
        assert b"keel worker: task queue" in started and b"shouter" in started, started
        turn = await asyncio.create_subprocess_exec(
            str(venv / "bin" / "python"), "turn.py", queue,
            cwd=project, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(turn.communicate(), 90)
        assert turn.returncode == 0, err.decode()
        assert out.decode().strip() == "I shouted: HELLO!"
    finally:
        worker.terminate()
        await worker.wait()


def _series(version: str) -> tuple[str, ...]:
    """A release series whose versions keep one API: the major version, or for a 0.x the major and minor."""
    parts = version.split(".")
    return tuple(parts[:2]) if parts[0] == "0" else (parts[0],)


def _resolution(extra: str, tmp_path: Path) -> dict[str, str]:
    """What pip would install for `.[extra]` in an empty environment: canonical name -> version."""
    from packaging.utils import canonicalize_name

    report = tmp_path / f"{extra}.json"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--report",
         str(report), f"{REPO}[{extra}]"],
        check=True, capture_output=True, timeout=540,
    )  # fmt: skip
    installs = json.loads(report.read_text())["install"]
    return {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}


@pytest.mark.timeout(600)
def test_make_dev_installs_the_release_series_of_each_direct_dependency_the_tests_run(tmp_path: Path) -> None:
    """`make dev` installs the `dev` extra, the tests the `test` one, whose packages can hold a shared dependency
    back (LiteLLM holds mcp below 2): `make dev` took mcp 2.3, whose server lacks the decorators Keel's MCP
    routes use (every route a 500), while the tests ran 1.30. pip's resolutions of `.[dev]` and `.[test]` must
    pick, for each of Keel's own dependencies, the same release series."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    direct = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    direct |= {canonicalize_name(Requirement(r).name) for r in project["optional-dependencies"]["dev"]} - {"keel"}
    dev, test = _resolution("dev", tmp_path), _resolution("test", tmp_path)
    assert direct <= set(dev) | {"keel"}, direct - set(dev)
    drifted = {name: (dev[name], test[name]) for name in direct & set(dev) if _series(dev[name]) != _series(test[name])}
    assert not drifted, f"make dev would install (dev, tested): {drifted}: bound them in pyproject.toml"
