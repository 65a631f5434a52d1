"""The tests' tools that live in virtualenvs of their own inside .venv (`.venv/tools/<name>`): Arize Phoenix
(`keel.client.phoenix_server`: it pins many packages of its own) and schemathesis (it needs a newer `rich` than
LiteLLM's proxy pins). `make test` installs both beside the main install, while that one runs
(`python -m tests.tool_envs`: standard library only, so it runs as soon as .venv's interpreter exists); a test
that finds one missing installs it then. Off the tests' clock, their ~2 minutes of installing overlap the
main install's instead of holding up a test worker."""

from __future__ import annotations

import sys
from pathlib import Path

from keel.client.phoenix_server import install_phoenix
from keel.client.tool_venv import install_command

SCHEMATHESIS_VERSION = "4.32.5"
SCHEMATHESIS_ENV = Path(sys.prefix) / "tools" / "schemathesis"


def install_schemathesis() -> Path:
    """The `schemathesis` command, installed from PyPI into its own virtualenv when missing (or of another release)."""
    return install_command(SCHEMATHESIS_ENV, f"schemathesis=={SCHEMATHESIS_VERSION}", "schemathesis", timeout=600)


def main() -> None:
    for install in (install_phoenix, install_schemathesis):  # one after the other: the main install has a core
        print(f"installed {install()}", flush=True)


if __name__ == "__main__":
    main()
