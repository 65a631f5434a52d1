"""Indexing a workspace's files for search: one long activity that heartbeats its progress and, retried after
a lost worker, resumes after the last file its last heartbeat recorded instead of starting over.

The files are listed sorted by path, so every attempt sees them in the same order and "after `last`" means the
same. Each heartbeat's details are an `IndexProgress`, sent after each batch of 64 files has been indexed (its
vectors upserted) and repeated every half heartbeat timeout in between.

What resumes is what outlives a process: the vectors of a persistent store (`PgVectorStore`). The files done
before the crash are not embedded again; only the batch in flight when the worker died is, and its upserts
replace by id, so no chunk is stored twice. BM25 documents live in the memory of the process that indexed
them: a retry in another process first re-adds those of the files already done (read again, not embedded),
so the worker that finishes answers keyword queries over the whole tree. Other worker processes of the app
know only what they indexed themselves (their workspace's `auto_index_paths`, at init). With an in-memory
vector store nothing survives a lost process, so a retry in another process embeds the files done again.
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
from keel.workspace_providers import InMemoryVectorStore, Workspace
from keel.workspace_providers.search import SearchEngine
from keel.workspace_providers.search_indexing import files_to_index, index_batches

PROCESS = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
"""This worker process, in the heartbeat details: a retry in the same process still has the BM25 documents
(and in-memory vectors) of the files done; one in another process has not."""


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
                    if start and previous is not None and previous.worker != PROCESS:
                        # Another process did these: its BM25 documents died with it; its vectors did too unless
                        # the store is persistent. Re-add what is missing (BM25 alone: nothing embedded again).
                        vectors = isinstance(engine.vector.store, InMemoryVectorStore) if engine.vector else False
                        async for _ in index_batches(engine, fs, files[:start], vectors=vectors):
                            pass
                    async for batch in index_batches(engine, fs, files[start:]):
                        progress = progress.model_copy(
                            update={
                                "done": progress.done + len(batch.files),
                                "last": batch.last,
                                "indexed": progress.indexed + len(batch.indexed),
                                "skipped": progress.skipped + len(batch.files) - len(batch.indexed),
                                "chunks": progress.chunks + batch.documents,
                            }
                        )
                        activity.heartbeat(progress)
                span.set("keel.workspace.indexed", progress.indexed)
                span.set("keel.workspace.chunks", progress.chunks)
            return IndexWorkspaceResult(
                workspace_id=workspace.id,
                files=len(files),
                indexed=progress.indexed,
                skipped=progress.skipped,
                chunks=progress.chunks,
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
