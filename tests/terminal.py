"""A `keel` command on a pseudo-terminal that is its controlling terminal, as a user runs it: a Ctrl-C typed into
it is a SIGINT to the terminal's foreground process group, as in a terminal (tests/controller/test_chat.py,
tests/test_cli_day_to_day.py). The test types into the master side and reads what the command prints, colours
stripped."""

from __future__ import annotations

import codecs
import os
import re
import select
import subprocess
import sys
import time

from tests.conftest import ROOT

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# The command's own process makes the pty its controlling terminal, then runs the `keel` command line.
SPAWN = """
import fcntl, os, sys, termios
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
os.execv(sys.executable, [sys.executable, "-m", "keel.cli", *sys.argv[1:]])
"""


class Term:
    """A `keel` command on a pseudo-terminal."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = os.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SPAWN, *args], stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT,
            start_new_session=True,
        )  # fmt: skip
        os.close(slave)
        self.master = master
        self.text = ""
        self.seen = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def expect(self, pattern: str, timeout: float = 15) -> re.Match[str]:
        """Wait for `pattern` (a regex) in what the command printed after the last match."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            found = regex.search(self.text, self.seen)
            if found is not None:
                self.seen = found.end()
                return found
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"{pattern!r} not printed; after the last match:\n{self.text[self.seen :]}")

    def printed_until(self, pattern: str, timeout: float = 15) -> str:
        """What was printed from the last match to the end of `pattern`'s match."""
        start = self.seen
        self.expect(pattern, timeout)
        return self.text[start : self.seen]

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the command ended and closed the terminal
            return False
        if not data:
            return False
        self.text += ANSI.sub("", self._decoder.decode(data)).replace("\r\n", "\n").replace("\r", "")
        return True

    def send(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def key(self, char: str) -> None:
        """A control key: `key("c")` is Ctrl-C, `key("d")` Ctrl-D."""
        os.write(self.master, bytes([ord(char) & 0x1F]))

    def wait(self, timeout: float = 15) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.1)
        return self.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        os.close(self.master)


__all__ = ["Term"]
