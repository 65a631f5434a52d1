"""The layers import downwards only: shared data at the bottom, no provider or storage module importing the
workflows, activities learning names from `keel.protocol`, and the client never importing worker code."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

KEEL = Path(__file__).resolve().parents[1] / "keel"

MAY_IMPORT: dict[str, set[str]] = {
    "protocol": set(),
    "model_providers": {"protocol"},
    "storage": {"protocol"},
    "workspace_providers": {"protocol"},
    "app": {"protocol", "model_providers", "workspace_providers"},
    "workflows": {"protocol"},
    "activities": {
        "protocol",
        "workflows.contracts",
        "workflows.session_contracts",
        "app",
        "storage",
        "model_providers",
        "workspace_providers",
    },
    "client": {"protocol", "workflows", "storage", "app", "model_providers"},
    "plugin": {"protocol", "workflows", "activities", "app", "storage", "client"},
    "worker": {"protocol", "workflows", "activities", "app", "storage", "client", "plugin"},
    "controller": {"protocol", "workflows", "app", "storage", "client", "model_providers", "workspace_providers"},
}
"""Each part of `keel` and the other parts it may import (a dotted entry allows that module only)."""

WITHOUT_TEMPORAL = {"protocol", "model_providers", "storage", "workspace_providers", "app"}


def part_of(path: Path) -> str:
    return path.relative_to(KEEL).parts[0].removesuffix(".py")


def keel_imports(path: Path) -> set[str]:
    """Every `keel.*` module a file imports, at the top or inside a function (relative imports resolved)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {name for name in found if name.startswith("keel.")}


def allowed(part: str, module: str) -> bool:
    target = module.removeprefix("keel.")
    if target.split(".")[0] == part:
        return True
    return any(target == rule or target.startswith(rule + ".") for rule in MAY_IMPORT[part])


def python_files() -> list[Path]:
    """Every module of the package (its folders are links to the top-level folders: followed)."""
    return sorted(Path(d, f) for d, _, files in os.walk(KEEL, followlinks=True) for f in files if f.endswith(".py"))


def modules() -> list[Path]:
    return [p for p in python_files() if part_of(p) in MAY_IMPORT]


def is_module(name: str) -> bool:
    """`keel.app` and `keel.workflows.contracts` are modules; `keel.app.Agent` (a `from` import) is not."""
    relative = Path(*name.removeprefix("keel.").split("."))
    return (KEEL / relative).is_dir() or (KEEL / relative).with_suffix(".py").exists()


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(KEEL)))
def test_a_module_imports_only_the_layers_below_it(path: Path) -> None:
    part = part_of(path)
    bad = sorted(m for m in keel_imports(path) if is_module(m) and not allowed(part, m))
    assert bad == [], f"keel.{part} may import {sorted(MAY_IMPORT[part])}, not {bad}"
    if part in WITHOUT_TEMPORAL:
        assert "temporalio" not in path.read_text(), f"keel.{part} must not import Temporal"


def test_every_part_of_keel_has_a_rule() -> None:
    parts = {part_of(p) for p in python_files()} - {"__init__", "cli", "dev_stack"}
    assert parts == set(MAY_IMPORT)
