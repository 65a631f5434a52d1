"""An app's agent ids without importing the app, for `keel counts`: kept in the data dir after the first load.

Importing an app loads pydantic, the workspace providers and every tool's module: ~100 ms, more than the counts
themselves cost (bench/cli_startup.py). The ids are written to `<data dir>/apps/<key>.json` by the command that
imported the app, with what they were derived from: the app reference, the interpreter, the working directory
and import path, the `KEEL_*` settings (as a digest: they may hold keys), and every source file loaded while
importing the app (its path, size and modification time). A later command uses them only while all of that is
unchanged: an edit of any of those files, another interpreter, folder or setting imports the app again (as
Python's bytecode cache does). What the cache cannot see is an app whose agents depend on other environment
variables or on data files it reads; `keel counts --reload` imports it in any case.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

VERSION = 2


def agent_ids(ref: str, data_dir: Path, *, reload: bool = False) -> list[str]:
    """The ids of the app's agents (`App.agents`, controllers' agents included), from the cache when it holds."""
    path = data_dir / "apps" / f"{_key(ref)}.json"
    if not reload:
        cached = _read(path, ref)
        if cached is not None:
            return cached
    from keel.app import load_app

    before = set(sys.modules)
    app = load_app(ref)
    ids = list(app.agents)
    files = _sources(set(sys.modules) - before)
    if files:  # else the app was imported before this call: what it was made of is not known here
        _write(path, {"version": VERSION, "ref": ref, "settings": _settings(), "files": files, "agents": ids})
    return ids


def _key(ref: str) -> str:
    where = "\0".join([sys.executable, ref, os.getcwd(), *sys.path])
    return hashlib.sha256(where.encode()).hexdigest()[:32]


def _settings() -> str:
    """A digest of the `KEEL_*` variables (their values may be keys: not written to disk)."""
    pairs = sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("KEEL_"))
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()


def _stamp(file: str) -> list[int] | None:
    try:
        st = os.stat(file)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _sources(modules: set[str]) -> dict[str, list[int] | None]:
    """The files the modules were loaded from (source, extension or bytecode-only), with their stamps."""
    files: dict[str, list[int] | None] = {}
    for name in modules:
        file = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(file, str):
            files[file] = _stamp(file)
    return files


def _read(path: Path, ref: str) -> list[str] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if (data.get("version"), data.get("ref"), data.get("settings")) != (VERSION, ref, _settings()):
        return None
    files = data.get("files")
    if not isinstance(files, dict) or any(_stamp(file) != stamp for file, stamp in files.items()):
        return None
    agents = data.get("agents")
    return agents if isinstance(agents, list) and all(isinstance(a, str) for a in agents) else None


def _write(path: Path, data: dict[str, Any]) -> None:
    """Replace the file at once (a reader sees the old or the new); a data dir that cannot be written is no
    error: the next command imports the app again."""
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part.write_text(json.dumps(data))
        os.replace(part, path)
    except OSError:
        with contextlib.suppress(OSError):
            part.unlink(missing_ok=True)
