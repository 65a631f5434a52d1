"""What a sweep of the payload store found and deleted: `keel blobs`, the `BlobSweep` workflow and the storage
share it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BlobSweep:
    """What a sweep found (and, unless `dry_run`, deleted)."""

    dry_run: bool
    blobs: int = 0
    bytes: int = 0
    unowned: int = 0
    """Kept: an owner unknown (put outside a workflow, or before owners were recorded): never swept."""
    recent: int = 0
    """Kept: put within the grace period (its execution may not be visible yet)."""
    referenced: int = 0
    """Kept: an owner's execution is open or still retained."""
    deleted: int = 0
    deleted_bytes: int = 0


DEFAULT_GRACE_SECONDS = 3600
"""A blob put this recently is kept: the execution that will reference it may not be visible yet."""


@dataclass
class SweepRequest:
    dry_run: bool = False
    grace_seconds: int = DEFAULT_GRACE_SECONDS
    retention_seconds: int | None = None
    """An execution closed longer ago than this counts as gone; default the namespace's retention (after which
    Temporal deletes it). Shorter: its history stays a while with its large values unreadable."""
