"""Fixtures: one real Temporal dev server per session (from the pip binary), SQLite storage per test, a fresh
task queue per test, an in-process Keel worker, and (when a test asks) one PostgreSQL and one SeaweedFS S3
server per session."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from temporalio.client import Client

from keel.app import App
from keel.client import KeelClient
from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig
from keel.client.local_service import free_port as free_port  # the tests import it from here
from keel.plugin import SANDBOX_ENV
from keel.storage import DirectoryBlobStore, SQLiteStorage, Storage
from keel.worker import build_worker
from tests.fake_openai import FakeOpenAI, serving_fake_openai
from tests.pg import postgres_server
from tests.s3 import S3Server, seaweedfs_server

# Every workflow the tests run (in-process and in worker subprocesses) runs in Temporal's sandbox, Keel's own
# too, which fails a workflow task on non-deterministic calls; production workers run Keel's unsandboxed.
os.environ.setdefault(SANDBOX_ENV, "1")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The test apps make `keel-tests-<what>-<pid>` folders in the temp folder at import, in this process and in
    the worker processes the tests start: those of processes that have ended (this one's too) go. A folder of a
    process still running (another test session's) stays."""
    for folder in Path(tempfile.gettempdir()).glob("keel-tests-*-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and (int(pid) == os.getpid() or not _running(int(pid))):
            shutil.rmtree(folder, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


@pytest.fixture(scope="session")
async def dev_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DevServer]:
    cfg = DevServerConfig(
        host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp_path_factory.mktemp("temporal")
    )
    server = await DevServer(cfg).start(reuse=False)
    yield server
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def payload_store(tmp_path_factory: pytest.TempPathFactory) -> DirectoryBlobStore:
    """One payload store for the session: its clients, in-process workers and the processes the tests start
    (through `KEEL_PAYLOAD_STORE`) all read and write large payloads there."""
    root = tmp_path_factory.mktemp("payloads")
    os.environ["KEEL_PAYLOAD_STORE"] = str(root)
    return DirectoryBlobStore(root)


@pytest.fixture(scope="session", autouse=True)
def session_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data dir of a test that names none (`data_dir` gives a test its own): the session's, not `.keel` in
    the checkout, which the two test processes of `make test` (pytest-xdist) would otherwise share."""
    root = tmp_path_factory.mktemp("keel-data")
    os.environ.setdefault("KEEL_DATA_DIR", str(root))
    return Path(os.environ["KEEL_DATA_DIR"])


@pytest.fixture(scope="session")
async def client(dev_server: DevServer) -> Client:
    return await connect(dev_server.cfg.address)


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KEEL_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[Storage]:
    store = SQLiteStorage(tmp_path / "keel.db")
    await store.init()
    yield store
    await store.close()


@pytest.fixture
def task_queue() -> str:
    return f"test-{uuid.uuid4()}"


@asynccontextmanager
async def running_worker(
    client: Client, app: App, storage: Storage, task_queue: str, **kwargs: Any
) -> AsyncIterator[KeelClient]:
    """A worker for `app` on `task_queue` for the duration of the block; yields a KeelClient bound to it."""
    async with build_worker(client, app, storage, task_queue=task_queue, **kwargs):
        yield KeelClient(client, task_queue=task_queue, app=app)


def npm_installed(folder: Path, installed: str, why: str) -> Path:
    """`folder` with its node_modules (`npm ci` the first time). Processes that ask at once (a test beside the
    chaos driver it started, or parallel test processes) take turns on a lock, and a folder counts as installed
    only once an `npm ci` finished (its stamp): `npm ci` first deletes node_modules, so `<installed>` alone can be
    there in a tree that is half gone."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail(f"node and npm are needed: {why}")
    stamp = folder / "node_modules" / ".keel-npm-ci-done"
    if stamp.exists() and (folder / "node_modules" / installed).exists():
        return folder
    with open(folder / ".npm-ci.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and (folder / "node_modules" / installed).exists()):
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=folder, check=True, timeout=600)
            stamp.touch()
    return folder


def env_for_subprocess(dev_server: DevServer, **extra: str) -> dict[str, str]:
    return {**os.environ, "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address, **extra}


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A SeaweedFS S3 server for the session (tests/s3.py); a test makes its own bucket (`make_bucket()`)."""
    with seaweedfs_server() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A storage URL naming an empty store."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'keel.db'}"
    dsn: str = request.getfixturevalue("pg_dsn")
    name = f"t_{uuid.uuid4().hex[:16]}"
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return urlsplit(dsn)._replace(path=f"/{name}").geturl()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with serving_fake_openai() as server:
        yield server


ROOT = Path(__file__).resolve().parent.parent


WORKER_READY_SECONDS = 90.0


@contextmanager
def worker_subprocess(
    dev_server: DevServer,
    task_queue: str,
    tmp_path: Path,
    data_dir: Path,
    *,
    app: str = "tests.apps:app",
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """`python worker.py --app APP` on `task_queue` (joining any worker there), storage in `tmp_path`, log in
    `tmp_path/worker.log`; killed with SIGKILL on leaving (no clean shutdown: what a crash leaves)."""
    full_env = {
        **os.environ,
        "KEEL_TEMPORAL_ADDRESS": dev_server.cfg.address,
        "KEEL_STORAGE_URL": f"sqlite:///{tmp_path / 'keel.db'}",
        "KEEL_DATA_DIR": str(data_dir),
        **(env or {}),
    }
    log_path = tmp_path / "worker.log"
    seen = log_path.stat().st_size if log_path.exists() else 0  # a worker started again appends to the log
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "worker.py", "--app", app, "--task-queue", task_queue, "--join"],
            cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        # Until it polls (its "keel worker: task queue" line): on a busy machine that takes more than the few
        # seconds a client allows a worker just started.
        deadline = time.monotonic() + WORKER_READY_SECONDS
        while b"keel worker: task queue" not in log_path.read_bytes()[seen:]:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"worker did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
