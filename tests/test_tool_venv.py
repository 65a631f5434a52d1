"""Tools in virtualenvs of their own (`keel.client.tool_venv`: Arize Phoenix for `keel dev --phoenix`, the tests'
schemathesis), with a real package from the registry: installed once, and brought to the pinned release when the
pin moves. Found by a review: a bumped `PHOENIX_VERSION` kept running the release installed before it, since only
the command's presence was checked."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pytest import MonkeyPatch

from keel.client.tool_venv import STAMP, install_command, installed_command


def version(target: Path) -> str:
    python = target / "bin" / "python"
    code = "import importlib.metadata as m; print(m.version('cowsay'))"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_a_tool_is_installed_once_and_again_when_its_pin_moves(tmp_path: Path) -> None:
    target = tmp_path / "cowsay"
    command = install_command(target, "cowsay==6.0", "cowsay", timeout=300)
    assert command == target / "bin" / "cowsay" and version(target) == "6.0"
    stamped = (target / STAMP).stat().st_mtime_ns
    assert install_command(target, "cowsay==6.0", "cowsay", timeout=300) == command
    assert (target / STAMP).stat().st_mtime_ns == stamped  # there already: nothing installed again

    assert installed_command(target, "cowsay==6.1", "cowsay") is None  # the pin moved: not this one
    assert install_command(target, "cowsay==6.1", "cowsay", timeout=300) == command
    assert version(target) == "6.1"

    (target / STAMP).unlink()  # a virtualenv made before the stamps (or an install cut short): installed again
    assert installed_command(target, "cowsay==6.1", "cowsay") is None


def test_a_phoenix_of_another_release_is_not_the_one_keel_dev_runs(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    from keel.client import phoenix_server

    monkeypatch.delenv("KEEL_PHOENIX", raising=False)
    monkeypatch.setattr(phoenix_server, "tools_dir", lambda: tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "phoenix").touch()
    (tmp_path / STAMP).write_text("arize-phoenix==1.0.0")
    assert phoenix_server.phoenix_command() is None  # `install_phoenix` brings it to PHOENIX_VERSION
    (tmp_path / STAMP).write_text(f"arize-phoenix=={phoenix_server.PHOENIX_VERSION}")
    assert phoenix_server.phoenix_command() == tmp_path / "bin" / "phoenix"
