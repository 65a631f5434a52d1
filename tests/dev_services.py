"""`keel dev --<service>` run as a user runs it, for the tests of the services it starts beside the stack
(tests/test_dev_s3.py, tests/test_phoenix.py): against the session's dev server, its data and API where the test
says, read until its banner, stopped with Ctrl-C; and the processes left behind, looked for in /proc."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

from keel.client.devserver import DevServer
from tests.test_cli_day_to_day import KEEL, ROOT


@asynccontextmanager
async def keel_dev(
    service: str, port: int, *, dev_server: DevServer, data: Path, api_port: int, env: Mapping[str, str], timeout: float
) -> AsyncIterator[str]:
    """`keel dev --{service} --{service}-port {port}` with `env` (less any app or storage of its own) and the
    session's dev server, `data` as its `KEEL_DATA_DIR` and its API on `api_port`; yields what it printed up to
    "Ctrl-C stops everything" (within `timeout` seconds). After the block, Ctrl-C: it must exit 0."""
    full_env = {
        **env,
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_UI_PORT": str(dev_server.cfg.ui_port),  # else `keel dev` waits 20 s for a UI on 8233
        "KEEL_TASK_QUEUE": f"dev-{service}-{uuid.uuid4()}",
        "KEEL_DATA_DIR": str(data),
        "KEEL_API_PORT": str(api_port),
    }
    for var in ("KEEL_APP", "KEEL_STORAGE_URL"):
        full_env.pop(var, None)
    dev = subprocess.Popen(  # noqa: ASYNC220 (read from a thread below)
        [KEEL, "dev", f"--{service}", f"--{service}-port", str(port)], env=full_env, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    printed: list[str] = []
    try:
        assert dev.stdout is not None
        async with asyncio.timeout(timeout):
            while not printed or "Ctrl-C stops everything" not in printed[-1]:
                line = await asyncio.to_thread(dev.stdout.readline)
                assert line, f"keel dev exited: {dev.wait()} {dev.stderr.read() if dev.stderr else ''}"
                printed.append(line)
        yield "".join(printed)
    finally:
        dev.send_signal(signal.SIGINT)
        _, stderr = dev.communicate(timeout=60)
    assert dev.returncode == 0, stderr


def processes_naming(text: str, where: Literal["cmdline", "environ"] = "cmdline") -> list[int]:
    """The pids whose command line (or environment) contains `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text in (proc / where).read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


__all__ = ["keel_dev", "processes_naming"]
