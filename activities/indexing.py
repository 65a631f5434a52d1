"""Indexing a workspace's files for search: one long activity that heartbeats its progress and, retried after
a lost worker, resumes after the last file its last heartbeat recorded instead of starting over.

The files are listed sorted by path, so every attempt sees them in the same order and "after `last`" means the
same. Each heartbeat's details are an `IndexProgress`, sent after each batch of 64 files has been indexed (its
vectors upserted) and repeated every half heartbeat timeout in between.

What resumes is what outlives a process. A worker keeps each file's BM25 documents and content hash in Keel's
storage (`Workspace.share_search_index`), and a persistent vector store (`PgVectorStore`) keeps the vectors:
the files done before the crash are neither indexed nor embedded again; only the batch in flight when the
worker died is (its documents and hashes are written after its vectors, and upserts replace by id, so no chunk
is stored twice). Every worker sharing the storage answers queries over the whole tree. With
an in-memory vector store the vectors of the files done died with the process: a retry in another process
embeds them again (their BM25 documents are stored already). A workspace alone (no storage: an
`ActivityEnvironment` test) keeps its BM25 documents in memory, and a retry in another process re-adds those of
the files done (read again, not embedded when the vector store is persistent).

Indexing the same files again skips those whose content hash is unchanged (`unchanged` in the result), and the
files indexed before under the same paths that are gone are removed from the index (`removed`).
"""

from __future__ import annotations

import bisect
import os
import secrets
import socket
from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from keel.activities.failures import translated
from keel.activities.heartbeat import heartbeating
from keel.app import App
from keel.protocol import names, tracing
from keel.workflows.contracts import IndexFilesInput, IndexProgress, IndexWorkspaceResult
from keel.workspace_providers import Workspace
from keel.workspace_providers.search import SearchEngine
from keel.workspace_providers.search_indexing import files_to_index, forget_missing, index_batches

PROCESS = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
"""This worker process, in the heartbeat details: a retry in the same process still has the in-memory vectors
(and, without storage, the BM25 documents) of the files done; one in another process has not."""


def _invalid(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


def _progress_of(details: Any) -> IndexProgress | None:
    """The last heartbeat's progress, if there is one (the first attempt has none)."""
    if not details:
        return None
    try:
        return IndexProgress.model_validate(details[0])
    except ValueError:
        return None  # not ours (an older format): start over, which is safe


class WorkspaceIndexing:
    """The indexing activity for one app's workspaces."""

    def __init__(self, app: App) -> None:
        self._app = app

    @activity.defn(name=names.INDEX_WORKSPACE_ACTIVITY)
    async def index_workspace(self, input: IndexFilesInput) -> IndexWorkspaceResult:
        """Index the files `input.paths` name (default the workspace's `auto_index_paths`), sorted by path, in
        batches, heartbeating `IndexProgress` after each; a retry goes on after the last heartbeat's `last`.

        Non-retryable: an unknown workspace, one without search or without a static filesystem, no paths.
        """
        with translated():
            workspace = self._app.get_workspace(input.workspace_id)
            engine, fs, patterns = _indexable(workspace, input.paths)
            files = sorted(await files_to_index(fs, patterns))
            info = activity.info()
            previous = _progress_of(info.heartbeat_details)
            start = bisect.bisect_right(files, previous.last) if previous and previous.last is not None else 0
            progress = IndexProgress(
                total=len(files),
                done=start,
                last=files[start - 1] if start else None,
                indexed=previous.indexed if previous and start else 0,
                skipped=previous.skipped if previous and start else 0,
                chunks=previous.chunks if previous and start else 0,
                unchanged=previous.unchanged if previous and start else 0,
                attempt=info.attempt,
                worker=PROCESS,
            )

            def current() -> tuple[IndexProgress]:
                return (progress,)

            with tracing.workspace_operation("index", workspace_id=workspace.id, capability="search") as span:
                span.set("keel.workspace.paths", patterns)
                span.set("keel.workspace.files", len(files))
                span.set("keel.workspace.resumed_from", start)
                async with heartbeating(current):
                    vectors_lost = engine.vector is not None and not engine.vectors_persist
                    if (
                        start
                        and previous is not None
                        and previous.worker != PROCESS
                        and (engine.store is None or vectors_lost)
                    ):
                        # Another process did these: its vectors died with it unless their store is persistent,
                        # its BM25 documents too unless they are in storage. Re-add what is missing (files whose
                        # documents are stored are skipped by their hash; nothing persistent is embedded again).
                        async for _ in index_batches(engine, fs, files[:start], vectors=vectors_lost):
                            pass
                    async for batch in index_batches(engine, fs, files[start:]):
                        progress = progress.model_copy(
                            update={
                                "done": progress.done + len(batch.files),
                                "last": batch.last,
                                "indexed": progress.indexed + len(batch.indexed),
                                "skipped": progress.skipped + len(batch.files) - len(batch.indexed),
                                "chunks": progress.chunks + batch.documents,
                                "unchanged": progress.unchanged + batch.unchanged,
                            }
                        )
                        activity.heartbeat(progress)
                    removed = await forget_missing(engine, files, patterns)
                span.set("keel.workspace.indexed", progress.indexed)
                span.set("keel.workspace.chunks", progress.chunks)
                span.set("keel.workspace.unchanged", progress.unchanged)
                span.set("keel.workspace.removed", len(removed))
            return IndexWorkspaceResult(
                workspace_id=workspace.id,
                files=len(files),
                indexed=progress.indexed,
                skipped=progress.skipped,
                chunks=progress.chunks,
                unchanged=progress.unchanged,
                removed=len(removed),
                resumed_from=start,
                attempts=info.attempt,
            )

    def all(self) -> list[Callable[..., Any]]:
        return [self.index_workspace]


def _indexable(workspace: Workspace, paths: list[str] | None) -> tuple[SearchEngine, Any, list[str]]:
    engine = workspace.search_engine
    if engine is None:
        raise _invalid(
            "SearchNotAvailable",
            f"Workspace {workspace.id!r} has no search configured: give it bm25=True, or a vector_store and an "
            "embedder",
        )
    fs = workspace.filesystem
    if fs is None:
        raise _invalid(
            "NoFilesystem", f"Workspace {workspace.id!r} has no static filesystem to index (a resolver is per request)"
        )
    patterns = list(workspace.auto_index_paths if paths is None else paths)
    if not patterns:
        raise _invalid(
            "NothingToIndex",
            f"Workspace {workspace.id!r} has no auto_index_paths: name the paths to index (keel index --path P)",
        )
    return engine, fs, patterns


__all__ = ["PROCESS", "WorkspaceIndexing"]
