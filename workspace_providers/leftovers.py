"""Process groups a sandbox started and has not yet seen end, one file each in a per-user directory of this
host, with the process that owns them. A worker killed with `kill -9` runs no cleanup: the next sandbox to
start on the host kills the groups whose owner is dead (bubblewrap's `--die-with-parent` covers isolated
commands already; this covers the rest).

An entry is `{pgid} {leader start time} {owner pid} {owner start time}` (start times from `/proc/PID/stat`,
so a reused PID is never mistaken for the one recorded).
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from pathlib import Path

DEFAULT_DIRECTORY = Path(tempfile.gettempdir()) / f"keel-processes-{os.getuid()}"


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22; the name before ")" may hold spaces


class Leftovers:
    def __init__(self, directory: Path = DEFAULT_DIRECTORY) -> None:
        self.directory = directory
        self._owner = f"{os.getpid()} {start_time(os.getpid())}"

    def add(self, pgid: int) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            (self.directory / str(pgid)).write_text(f"{pgid} {start_time(pgid)} {self._owner}\n")
        except OSError:
            pass  # best effort: a full or read-only /tmp must not stop a command

    def remove(self, pgid: int) -> None:
        with contextlib.suppress(OSError):
            (self.directory / str(pgid)).unlink()

    def reap(self) -> list[int]:
        """Kill the recorded groups of owners that are gone; returns the groups signalled."""
        killed: list[int] = []
        try:
            entries = list(self.directory.iterdir())
        except OSError:
            return killed
        for entry in entries:
            try:
                pgid_text, leader_start, owner, owner_start = entry.read_text().split()
                pgid = int(pgid_text)
            except (OSError, ValueError):
                continue
            if start_time(int(owner)) == owner_start:
                continue  # its owner runs: the group is that sandbox's to end
            current = start_time(pgid)
            # The leader alive with another start time is a reused PID: not ours. The leader gone, the group id
            # cannot have been reused while any member of the group lives.
            if current is None or current == leader_start:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                    killed.append(pgid)
            with contextlib.suppress(OSError):
                entry.unlink()
        return killed
