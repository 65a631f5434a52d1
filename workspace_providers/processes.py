"""Processes of the local sandbox, after Mastra's `LocalProcessManager`: each runs in its own session (so in its own
process group, which is what gets signalled), its stdin closed, its output read as it arrives and only the last
`max_output_bytes` per stream kept.

Exit codes as Mastra reports them: 124 on timeout (with ``"\\nProcess timed out after {ms}ms"`` appended to stderr),
128 when a signal ended the process, the process's own code otherwise.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from keel.workspace_providers.errors import SandboxError
from keel.workspace_providers.leftovers import Leftovers
from keel.workspace_providers.types import CommandResult

KILL_GRACE = 0.5
"""Seconds between SIGTERM and SIGKILL."""
MAX_BACKGROUND = 100
"""Background processes a sandbox keeps (each holds up to 2 x `max_output_bytes` of output)."""
PIPE_GRACE = 1.0
"""Seconds to wait, once the group is dead, for pipes still held by a process that left it (`setsid`)."""


@dataclass(frozen=True)
class Launch:
    """How to start one command: the full argv, the directory it starts in and its whole environment."""

    argv: Sequence[str]
    cwd: str
    env: Mapping[str, str]


Launcher = Callable[[str, str | None, Mapping[str, str] | None], Awaitable[Launch]]
"""Turns `(command, cwd, env)` into a `Launch`: the sandbox's part (lifecycle, isolation, environment)."""


class _Tail:
    """The last `limit` bytes of a stream, starting on a UTF-8 character boundary, and how many came before."""

    def __init__(self, limit: int) -> None:
        self._data = bytearray()
        self._limit = limit
        self.dropped = 0

    def append(self, chunk: bytes | bytearray) -> None:
        self._data += chunk
        excess = len(self._data) - self._limit
        if excess <= 0:
            return
        for _ in range(3):  # a UTF-8 character has at most 3 continuation bytes
            if excess < len(self._data) and self._data[excess] & 0xC0 == 0x80:
                excess += 1
        del self._data[:excess]  # cheap: bytearray moves its start instead of copying
        self.dropped += excess

    def text(self) -> str:
        return self._data.decode("utf-8", errors="replace")


class _Pipes(asyncio.SubprocessProtocol):
    """Feeds both output pipes into their tails; `exited` and `closed` (exited and every pipe shut) resolve."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.stdout, self.stderr = _Tail(limit), _Tail(limit)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        (self.stdout if fd == 1 else self.stderr).append(data)

    def process_exited(self) -> None:
        self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set_result(None)


async def _settles(future: asyncio.Future[None], timeout: float | None) -> bool:
    """Whether `future` is done within `timeout` seconds; never cancels it."""
    done, _ = await asyncio.wait({future}, timeout=timeout)
    return bool(done)


class ProcessHandle:
    """One started process: its retained output, its exit code once it has exited and its pipes have closed."""

    def __init__(
        self,
        command: str,
        transport: asyncio.SubprocessTransport,
        pipes: _Pipes,
        timeout: int | None,
        on_end: Callable[[int], None] = lambda pgid: None,
    ) -> None:
        self.pid = str(transport.get_pid())
        self.command = command
        self.timed_out = False
        self._pgid = transport.get_pid()
        self._transport, self._pipes = transport, pipes
        self._signalled = False
        self._exit_code: int | None = None
        self._started = time.monotonic()
        self._elapsed_ms = 0
        self._on_end = on_end
        self._task = asyncio.get_running_loop().create_task(self._supervise(timeout))

    @property
    def running(self) -> bool:
        return self._exit_code is None

    @property
    def exit_code(self) -> int | None:
        return self._exit_code

    @property
    def killed(self) -> bool:
        """Whether the sandbox signalled it (timeout, kill, stop) or a signal ended it."""
        code = self._transport.get_returncode()
        return self._signalled or (code is not None and code < 0)

    def stdout(self) -> str:
        return self._pipes.stdout.text()

    def stderr(self) -> str:
        return self._pipes.stderr.text()

    async def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, or None if still running after `timeout` seconds. Cancelling the wait leaves it running."""
        await asyncio.wait({self._task}, timeout=timeout)
        return self._exit_code

    def result(self) -> CommandResult:
        """The outcome as a `CommandResult`.

        Raises:
            SandboxError: the process is still running.
        """
        if self._exit_code is None:
            raise SandboxError(f"Process {self.pid} is still running")
        out, err = self._pipes.stdout, self._pipes.stderr
        return CommandResult(
            success=self._exit_code == 0,
            exit_code=self._exit_code,
            stdout=out.text(),
            stderr=err.text(),
            execution_time_ms=self._elapsed_ms,
            command=self.command,
            killed=self.killed,
            timed_out=self.timed_out,
            stdout_truncated=out.dropped > 0,
            stderr_truncated=err.dropped > 0,
            stdout_dropped_bytes=out.dropped,
            stderr_dropped_bytes=err.dropped,
        )

    async def terminate(self, grace: float = KILL_GRACE) -> None:
        """End the whole process group: SIGTERM, SIGKILL after `grace` seconds; returns once the process is dead."""
        if self._pipes.closed.done():
            return
        self._signalled = True
        self._signal(signal.SIGTERM)
        if grace > 0:
            await _settles(self._pipes.closed, grace)
        self._signal(signal.SIGKILL)  # also whatever of the group ignored SIGTERM or outlived the leader
        await _settles(self._pipes.exited, None)
        if not await _settles(self._pipes.closed, PIPE_GRACE):
            self._transport.close()

    def _signal(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self._pgid, sig)
        except ProcessLookupError:
            pass

    async def _supervise(self, timeout: int | None) -> None:
        closed = self._pipes.closed
        if timeout and not await _settles(closed, timeout / 1000):
            self.timed_out = True
            await self.terminate()
        await _settles(closed, None)
        self._transport.close()
        if self.timed_out:
            self._pipes.stderr.append(f"\nProcess timed out after {timeout}ms".encode())
        code = self._transport.get_returncode()
        assert code is not None  # closed resolves only after the exit
        self._elapsed_ms = round((time.monotonic() - self._started) * 1000)
        self._exit_code = 124 if self.timed_out else 128 if code < 0 else code
        self._on_end(self._pgid)


class ProcessManager:
    """The processes a sandbox started. Background ones (`spawn`) stay queryable after they exit, until killed,
    released or the sandbox stops; foreground ones (`run`) are tracked only while they run."""

    def __init__(
        self, launcher: Launcher, *, max_output_bytes: int = 1024 * 1024, leftovers: Leftovers | None = None
    ) -> None:
        if max_output_bytes < 0:
            raise ValueError("max_output_bytes must be a non-negative integer")
        self._launcher = launcher
        self.leftovers = leftovers or Leftovers()
        self._max_output_bytes = max_output_bytes
        self._background: dict[str, ProcessHandle] = {}
        self._foreground: set[ProcessHandle] = set()

    async def spawn(
        self, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None, timeout: int | None = None
    ) -> ProcessHandle:
        """Start `command` in the background and return at once. `timeout` in ms (None or 0: none). At most
        `MAX_BACKGROUND` are kept: the oldest finished one is forgotten to make room; if all still run, refused."""
        if len(self._background) >= MAX_BACKGROUND:
            finished = next((pid for pid, h in self._background.items() if not h.running), None)
            if finished is None:
                raise SandboxError(
                    f"Too many background processes ({MAX_BACKGROUND} running): kill some with kill_process first"
                )
            del self._background[finished]
        handle = await self._start(command, cwd, env, timeout)
        self._background[handle.pid] = handle
        return handle

    async def run(
        self, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None, timeout: int | None = None
    ) -> ProcessHandle:
        """Run `command` to its end. Cancelled, it kills the process group before re-raising."""
        handle = await self._start(command, cwd, env, timeout)
        self._foreground.add(handle)
        try:
            await handle.wait()
        except asyncio.CancelledError:
            await handle.terminate(grace=0)
            raise
        finally:
            self._foreground.discard(handle)
        return handle

    def get(self, pid: str) -> ProcessHandle | None:
        return self._background.get(pid)

    def list(self) -> list[ProcessHandle]:
        return list(self._background.values())

    def release(self, pid: str) -> None:
        """Forget a background process and its output (Mastra's `release`); it keeps running if it was."""
        self._background.pop(pid, None)

    async def kill(self, pid: str) -> bool:
        """Kill a background process's group and forget it. False if unknown or already exited."""
        handle = self._background.pop(pid, None)
        if handle is None or not handle.running:
            return False
        await handle.terminate()
        await handle.wait()
        return True

    async def kill_all(self) -> None:
        """Kill every process still running, background and foreground, and forget the background ones."""
        handles = [*self._background.values(), *self._foreground]
        self._background.clear()
        await asyncio.gather(*(h.terminate() for h in handles if h.running))
        await asyncio.gather(*(h.wait() for h in handles))

    async def _start(
        self, command: str, cwd: str | None, env: Mapping[str, str] | None, timeout: int | None
    ) -> ProcessHandle:
        launch = await self._launcher(command, cwd, env)
        loop = asyncio.get_running_loop()
        pipes = _Pipes(loop, self._max_output_bytes)
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: pipes,
                *launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=launch.cwd,
                env=dict(launch.env),
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxError(f"Failed to spawn process: {exc}") from exc
        self.leftovers.add(transport.get_pid())
        return ProcessHandle(command, transport, pipes, timeout, on_end=self.leftovers.remove)
