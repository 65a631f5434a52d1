"""A command-line tool pinned to one release, in a virtualenv of its own (a tool whose own pins clash with Keel's:
Arize Phoenix for `keel dev --phoenix`, the tests' schemathesis). Made when missing, and brought to the pinned
release when the one there was installed for another pin: a stamp file in the virtualenv names the requirement it
holds. Standard library only, so `make test` can install the tests' tools before Keel's own dependencies are in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

STAMP = "keel-requirement"
"""The file in the virtualenv naming the requirement installed there (written once the install succeeded)."""


def installed_command(target: Path, requirement: str, command: str) -> Path | None:
    """`command` of the virtualenv `target` if `requirement` is what was installed there, else None."""
    path = target / "bin" / command
    try:
        held = (target / STAMP).read_text()
    except OSError:
        return None
    return path if held == requirement and path.exists() else None


def install_command(target: Path, requirement: str, command: str, *, timeout: float, quiet: bool = True) -> Path:
    """`command` from `requirement` installed in the virtualenv `target` (made when missing); at once when it is
    there already. Raises `subprocess.CalledProcessError`, `subprocess.TimeoutExpired`, or `FileNotFoundError`
    when the requirement brings no such command."""
    found = installed_command(target, requirement, command)
    if found is not None:
        return found
    (target / STAMP).unlink(missing_ok=True)  # an install cut short is no install of anything
    python = target / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=120)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *(["--quiet"] if quiet else [])]
    subprocess.run([*pip, requirement], check=True, timeout=timeout)
    path = target / "bin" / command
    if not path.exists():
        raise FileNotFoundError(f"{requirement} installed into {target} without a `{command}` command")
    (target / STAMP).write_text(requirement)
    return path
