"""The README's "Your own app", followed as written: the app file from the README in a project folder, `keel dev`
and `keel run` from that folder with the installed `keel` command, the model an OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import uuid
from pathlib import Path

import httpx

from keel.client.devserver import DevServer
from tests.conftest import free_port
from tests.fake_openai import FakeOpenAI, delta, finish, sse
from tests.test_cli_day_to_day import KEEL, Keel

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_app() -> str:
    section = README.read_text().split("## Your own app", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None and code.group(1).startswith("# myproject/app.py")
    return code.group(1)


def readme_run_command() -> list[str]:
    section = README.read_text().split("## Your own app", 1)[1]
    line = re.search(r"```sh\n(keel run .*?)\n```", section, re.S)
    assert line is not None
    return re.findall(r'"[^"]*"|\S+', line.group(1))


async def test_the_readmes_own_app_runs_with_keel_dev_and_keel_run_from_its_folder(
    dev_server: DevServer, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    project = tmp_path / "project"
    (project / "myproject").mkdir(parents=True)
    (project / "myproject" / "app.py").write_text(readme_app())
    call = {"index": 0, "id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    fake_openai.replies = [
        sse(delta(tool_calls=[call]), delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city":"Rome"}'}}]),
            finish("tool_calls")),
        sse(delta(content="It is 21 degrees in Rome."), finish("stop")),
    ]  # fmt: skip
    env = {
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_TASK_QUEUE": f"readme-{uuid.uuid4()}",
        "KEEL_DATA_DIR": str(tmp_path / "data"),
        "OPENAI_BASE_URL": fake_openai.base_url,
        "OPENAI_API_KEY": "sk-test",
        "KEEL_API_PORT": str(api_port := free_port()),
    }
    keel = Keel(env, cwd=project)
    for var in ("KEEL_APP", "KEEL_STORAGE_URL", "PYTHONPATH"):
        keel.env.pop(var, None)
    dev = subprocess.Popen(  # noqa: ASYNC220 (read from a thread below)
        [KEEL, "dev", "--app", "myproject.app:app"], env=keel.env, cwd=project,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert dev.stdout is not None
        async with asyncio.timeout(60):
            while "Ctrl-C stops everything" not in (await asyncio.to_thread(dev.stdout.readline)):
                pass
        args = [a.strip('"') for a in readme_run_command()[1:]]
        code, out, err = await keel(*args)
        async with httpx.AsyncClient() as http:  # `keel dev` serves the HTTP API for the same app
            agents = (await http.get(f"http://127.0.0.1:{api_port}/api/agents")).json()
    finally:
        dev.send_signal(signal.SIGINT)
        dev.communicate(timeout=30)
    assert code == 0, err
    assert '-> get_weather({"city": "Rome"})' in out and '<- get_weather: {"city": "Rome", "tempC": 21}' in out
    assert "It is 21 degrees in Rome." in out and "completed" in out
    assert fake_openai.requests[-1][1]["messages"][-1]["role"] == "tool"
    assert [t["id"] for t in agents["weather"]["tools"].values()] == ["get_weather"]
