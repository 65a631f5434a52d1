"""`LocalSandbox`: runs the workspace's shell commands on this machine, as Mastra's `LocalSandbox`, optionally
inside bubblewrap.

Commands see only `PATH` (the worker's), `HOME` (the working directory), the sandbox's `env` and the call's `env`;
nothing else of the worker's environment. A workspace's `mounts` appear under the working directory (and at their
own paths under bubblewrap): `sandbox_mounts`. Lifecycle as Mastra's: ``pending -> starting -> running``, then
``stopping -> stopped`` (it can start again) or ``destroying -> destroyed``; a failed start leaves ``error``.
"""

from __future__ import annotations

import asyncio
import os
import platform
import re
import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from keel.workspace_providers.bwrap import bwrap_argv, find_bwrap, reserved_paths
from keel.workspace_providers.errors import SandboxError, iso_ms
from keel.workspace_providers.processes import Launch, ProcessManager
from keel.workspace_providers.sandbox_mounts import SandboxMounts
from keel.workspace_providers.types import CommandResult

Instructions = str | Callable[[Mapping[str, Any] | None], str]

_SAFE_ARG = re.compile(r"[a-zA-Z0-9._\-/=:@]+")


def shell_quote(arg: str) -> str:
    """An argument as Mastra's `shellQuote` writes it: bare if made of safe characters, else single-quoted."""
    if _SAFE_ARG.fullmatch(arg):
        return arg
    return "'" + arg.replace("'", "'\\''") + "'"


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, d = divmod(n, 36)
        out = digits[d] + out
    return out or "0"


class LocalSandbox:
    """Shell commands in `working_directory` on this machine; with ``isolation="bwrap"`` inside bubblewrap (no
    network, no host PIDs, writes only to the working directory and `writable_paths`).

    Args:
        working_directory: where commands run (made absolute; created by `init`).
        env: variables added to every command's environment.
        timeout: default foreground timeout in ms; `execute_command(timeout=...)` overrides it, 0 means none.
        isolation: ``"none"`` or ``"bwrap"``; bwrap missing fails `init`, never a silent fallback.
        writable_paths: more host directories writable inside bubblewrap.
        max_output_bytes: bytes kept per output stream (the last ones).
        id: the sandbox id; default ``local-sandbox-<time>-<random>`` as Mastra's.
        instructions: replaces the default instructions; a callable gets the request context.
    """

    provider = "local"
    name = "LocalSandbox"

    def __init__(
        self,
        working_directory: str | os.PathLike[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: int = 30_000,
        isolation: Literal["none", "bwrap"] = "none",
        writable_paths: Sequence[str] = (),
        max_output_bytes: int = 1024 * 1024,
        id: str | None = None,
        instructions: Instructions | None = None,
    ) -> None:
        if isolation not in ("none", "bwrap"):
            raise ValueError(f"Unknown isolation backend: {isolation!r}")
        self.id = (
            id if id is not None else f"local-sandbox-{_base36(time.time_ns() // 1_000_000)}-{secrets.token_hex(3)}"
        )
        self.working_directory = os.path.abspath(os.path.expanduser(os.fspath(working_directory)))
        self.isolation: str = isolation
        self.status = "pending"
        self.timeout = timeout
        self.processes = ProcessManager(self._launch, max_output_bytes=max_output_bytes)
        self._env = dict(env or {})
        self._writable_paths = [os.path.abspath(p) for p in writable_paths]
        self._instructions = instructions
        self._created_at = datetime.now(UTC)
        self._bwrap: str | None = None
        self.mounts = SandboxMounts(self.working_directory)
        """The workspace's mounts as commands see them (given by the `Workspace`; shown when the sandbox starts)."""

    async def init(self) -> None:
        """Start: kill the commands of sandboxes whose worker died without cleaning up (`leftovers`), check the
        isolation backend, create the working directory and show the workspace's mounts in it.

        Raises:
            IsolationUnavailable: ``isolation="bwrap"`` and bubblewrap is not installed.
            SandboxError: the sandbox was destroyed.
        """
        if self.status == "running":
            return
        if self.status == "destroyed":
            raise SandboxError("Cannot start a destroyed sandbox")
        self.status = "starting"
        try:
            await asyncio.to_thread(self.processes.leftovers.reap)  # what a killed worker left running
            if self.isolation == "bwrap":
                self._bwrap = find_bwrap()
            await asyncio.to_thread(os.makedirs, self.working_directory, exist_ok=True)
            await self.mounts.process_pending()
        except BaseException:
            self.status = "error"
            raise
        self.status = "running"

    async def stop(self) -> None:
        """Kill every process the sandbox started; files stay and `init` works again."""
        if self.status == "stopped":
            return
        self.status = "stopping"
        await self.processes.kill_all()
        self.status = "stopped"

    async def destroy(self) -> None:
        """Kill every process the sandbox started and remove its mount links; it cannot start again. (`stop`
        keeps the links: another worker process on this host may be running commands in the same directory.)"""
        if self.status == "destroyed":
            return
        self.status = "destroying"
        await self.processes.kill_all()
        await asyncio.to_thread(self.mounts.unmount_all)
        self.status = "destroyed"

    def get_info(self) -> dict[str, Any]:
        """What Mastra's `getInfo()` reports, with `pythonVersion` for `nodeVersion`."""
        metadata: dict[str, Any] = {
            "workingDirectory": self.working_directory,
            "platform": sys.platform,
            "pythonVersion": platform.python_version(),
            "isolation": self.isolation,
        }
        if self.isolation != "none":
            metadata["isolationConfig"] = {
                "allowNetwork": False,
                "readOnlyPaths": [],
                "readWritePaths": list(self._writable_paths),
            }
        return {
            "id": self.id,
            "name": self.name,
            "provider": self.provider,
            "status": self.status,
            "createdAt": iso_ms(self._created_at),
            "resources": {
                "memoryMB": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024 / 1024),
                "cpuCores": os.cpu_count() or 1,
            },
            "metadata": metadata,
        }

    def get_instructions(self, request_context: Mapping[str, Any] | None = None) -> str:
        """The `instructions` given (a callable is called with `request_context`), else Mastra's default."""
        if isinstance(self._instructions, str):
            return self._instructions
        if self._instructions is not None:
            return self._instructions(request_context)
        text = f'Local command execution. Working directory: "{self.working_directory}".'
        mounts = self.mounts.instructions(isolated=self.isolation == "bwrap", reserved=self._reserved())
        return f"{text}\n{mounts}" if mounts else text

    def _reserved(self) -> list[str]:
        return reserved_paths(self.working_directory, self._writable_paths)

    async def execute_command(
        self,
        command: str,
        args: Sequence[str] | None = None,
        *,
        cwd: str | None = None,
        timeout: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run `command` (with `args` shell-quoted after it) through `sh -c` and wait for it.

        Args:
            cwd: where it runs; relative to the working directory unless absolute.
            timeout: in ms; default the sandbox's `timeout`.
            env: variables added for this command.
        """
        full = " ".join([command, *(shell_quote(a) for a in args)]) if args else command
        handle = await self.processes.run(full, cwd=cwd, env=env, timeout=self.timeout if timeout is None else timeout)
        return handle.result()

    async def _launch(self, command: str, cwd: str | None, env: Mapping[str, str] | None) -> Launch:
        if self.status in ("stopping", "destroying", "destroyed"):
            raise SandboxError(f"Sandbox is not ready: {self.id}")
        await self.init()
        directory = os.path.normpath(os.path.join(self.working_directory, cwd)) if cwd else self.working_directory
        # A cwd under a mount path (`/src/lib`) is its link in the working directory on the host side.
        host_directory = self.mounts.host_dir(directory) or directory
        full_env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": self.working_directory}
        full_env |= self._env
        full_env |= env or {}
        # Named mounts commands cannot see (S3) get a line on stderr first: the command still runs as written.
        script = "".join(f"printf '%s\\n' {shell_quote(n)} >&2\n" for n in self.mounts.notes(command)) + command
        if self._bwrap is None:
            argv = ["sh", "-c", script]
        else:
            argv = bwrap_argv(
                self._bwrap,
                script,
                working_directory=self.working_directory,
                cwd=host_directory,
                writable_paths=self._writable_paths,
                mounts=self.mounts.binds(self._reserved()),
            )
        return Launch(argv, host_directory, full_env)
