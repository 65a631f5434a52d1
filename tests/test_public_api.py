"""`keel` is the one import name: its `__all__` is the public API, every name resolves, and importing it is
cheap (Temporal's sandbox imports it for every workflow of a `keel.*` module)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import keel

INIT = Path(keel.__file__)
REQUIRED = {
    "Agent", "App", "tool", "ToolContext", "KeelClient", "ScriptedModel", "OpenAIChatModel", "ModelRequest",
    "ModelResponse", "ModelToolCall", "KeelPlugin",
}  # fmt: skip


def type_checking_imports() -> dict[str, str]:
    """Name -> module of the `if TYPE_CHECKING:` imports, which give type checkers the lazy names."""
    tree = ast.parse(INIT.read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return {a.name: s.module for s in block.body if isinstance(s, ast.ImportFrom) for a in s.names if s.module}


def test_all_is_the_public_api_and_every_name_resolves_from_where_it_is_declared() -> None:
    assert set(keel.__all__) >= REQUIRED
    assert len(keel.__all__) == len(set(keel.__all__))
    assert set(keel.__all__) == set(keel._EXPORTS) == set(type_checking_imports())
    assert type_checking_imports() == keel._EXPORTS
    for name in keel.__all__:
        assert getattr(keel, name) is not None, name


def test_every_error_the_python_pages_name_is_importable_from_keel() -> None:
    """A reader who meets `SessionError` or `RunIdInUse` on the pages of the Python API writes
    `from keel import ...` (or `keel.client`, where the client's errors live)."""
    docs = INIT.resolve().parents[1] / "docs"
    pattern = r"`(?:keel\.)?([A-Z]\w*(?:Error|Refused|InUse|NotFound|Closed|Failed|Rejected|Unavailable|NoWorker))`"
    named = {
        m for page in ("python-client.md", "controller.md") for m in re.findall(pattern, (docs / page).read_text())
    }
    assert {"SessionError", "RunIdInUse", "MessageRefused", "KeelClientError"} <= named
    for name in named:
        assert name in keel.__all__, f"the docs name {name}, which `from keel import {name}` does not give"
        if keel._EXPORTS[name] == "keel.client":
            assert hasattr(__import__("keel.client", fromlist=[name]), name), name


def test_importing_keel_loads_none_of_its_packages() -> None:
    code = "import sys, keel; print(sorted(m for m in sys.modules if m.startswith('keel.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
