"""An app for the shared search index tests: workspace `shared`, BM25 over `$KEEL_DATA_DIR/shared`. Two worker
processes load it and share nothing but Temporal and their storage (`KEEL_STORAGE_URL`)."""

from __future__ import annotations

import os
from pathlib import Path

from keel.app import App
from keel.workspace_providers import LocalFilesystem, Workspace

shared = Workspace(
    id="shared", filesystem=LocalFilesystem(Path(os.environ.get("KEEL_DATA_DIR", ".keel")) / "shared"), bm25=True
)
app = App(workspaces={"shared": shared})
