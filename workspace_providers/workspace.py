"""`Workspace`: a filesystem and a sandbox given to agents, with the tool configuration that decides which
workspace tools they get (Mastra's `Workspace` class, for its filesystem and sandbox parts).

Lifecycle: ``pending → initializing → ready`` (`init()`), ``ready → paused`` (`stop()`: processes killed, files
kept, the next `init()` makes it ready again), ``→ destroying → destroyed`` (`destroy()`), ``error`` when
`init()` or `destroy()` fails. Search (`bm25`, `vector_store` + `embedder`) is a `SearchEngine` the workspace
owns; `init()` indexes `auto_index_paths`. Its documents live in this process, or, shared by every worker, in
Keel's storage (`share_search_index`: a worker does it). Skills (`skills`) and LSP (`lsp`) are extensions:
anything with optional `init()`, `stop()`, `destroy()` and `get_instructions()` (or `get_instructions_async()`),
started and released with the workspace, so this class does not grow with each of them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from keel.protocol.search_index import SearchIndexStore
from keel.workspace_providers import output
from keel.workspace_providers.errors import SearchError, SearchNotAvailable, WorkspaceError, WriteLockTimeout, iso_ms
from keel.workspace_providers.search import BM25Config, SearchDocument, SearchEngine, SearchResult, VectorConfig
from keel.workspace_providers.tool_config import normalize_tools_config
from keel.workspace_providers.vector_stores import check_index_name

logger = logging.getLogger(__name__)
WorkspaceStatus = Literal["pending", "initializing", "ready", "paused", "error", "destroying", "destroyed"]
RequestContext = Mapping[str, Any]
Resolver = Callable[[RequestContext], Any]
DynamicSandboxInstructions = Literal["placeholder", "resolve"] | Callable[[RequestContext], str]

DYNAMIC_SANDBOX_INSTRUCTIONS = (
    "Dynamic sandbox configured. Shell commands execute in a request-scoped sandbox resolved at tool execution time."
)
DEFAULT_WRITE_LOCK_TIMEOUT_MS = 30_000


class Extension(Protocol):
    """A capability attached to a workspace (search, skills, LSP): every method is optional."""


async def _call(obj: Any, method: str) -> None:
    fn = getattr(obj, method, None)
    if fn is not None:
        result = fn()
        if inspect.isawaitable(result):
            await result


class FileWriteLock:
    """One writer at a time per path, waiting at most `timeout_ms` (Mastra's `InMemoryFileWriteLock`)."""

    def __init__(self, timeout_ms: int = DEFAULT_WRITE_LOCK_TIMEOUT_MS) -> None:
        self.timeout_ms = timeout_ms
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @asynccontextmanager
    async def hold(self, key: str, path: str | None = None) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] = self._users.get(key, 0) + 1
        try:
            try:
                await asyncio.wait_for(lock.acquire(), self.timeout_ms / 1000)
            except TimeoutError:
                raise WriteLockTimeout(path or key, self.timeout_ms) from None
            try:
                yield
            finally:
                lock.release()
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self._locks[key]


class Workspace:
    """Files and commands for agents.

    Args:
        id: default generated (`ws-…`). name: default `workspace-{id[:8]}`.
        filesystem: a filesystem provider, or a function of the request context returning one (one per tenant).
        mounts: several filesystems under path prefixes (`CompositeFilesystem`), instead of `filesystem`. A
            static sandbox with mounts support (`LocalSandbox`) shows them to its commands (`sandbox_mounts`).
        on_mount: called before the sandbox shows each mount (Mastra's `onMount`): False skips it, a mapping
            ``{"success": True, "host_path": DIR}`` shows `DIR` there, None leaves the sandbox's default.
        sandbox: a sandbox provider, or a function of the request context returning one.
        sandbox_cache_key: for a resolver sandbox: a function of the request context whose value keys a cache of
            resolved sandboxes, so background processes are found again by later calls.
        instructions: `{"dynamic_sandbox": "placeholder" | "resolve" | fn(request_context)}`.
        tools: the `WorkspaceToolsConfig` (see `tool_config`); `write_lock_timeout_ms` may be given there too.
        operation_timeout: ms; bounds each filesystem tool call.
        write_lock_timeout_ms: how long a write waits for another write to the same file (default 30 s).
        bm25: BM25 keyword search: True, or `{k1, b}` (defaults 1.5 and 0.75).
        vector_store: a `VectorStore` for semantic search (`InMemoryVectorStore`, `PgVectorStore`); needs
            `embedder` (a single-text async function, or a batch one: see `embedders`).
        search_index_name: the vector store's index; default `{id}_search` with other characters as `_`.
        auto_index_paths: paths, directories or globs indexed by `init()`.
        skills: where SKILL.md directories are (paths, globs), or a function of the request context returning
            them; read from the workspace filesystem (or `skill_source`). Adds the `skill`, `skill_search` and
            `skill_read` tools and the `<available_skills>` instructions.
        skill_source: read skills from this filesystem (or a function of the request context) instead.
        lsp: True or Mastra's `LSPConfig` mapping: the `mastra_workspace_lsp_inspect` tool, over language servers
            started on first use for files of the filesystem's directory (their project root found from the
            file, else `lsp["root"]`, which must be inside it) and closed by `stop()` and `destroy()`.
        extensions: further providers with the lifecycle above.
    """

    def __init__(
        self,
        *,
        id: str | None = None,
        name: str | None = None,
        filesystem: Any | Resolver | None = None,
        mounts: Mapping[str, Any] | None = None,
        on_mount: Callable[[Any], Any] | None = None,
        sandbox: Any | Resolver | None = None,
        sandbox_cache_key: Callable[[RequestContext], str | None] | None = None,
        instructions: Mapping[str, Any] | None = None,
        tools: Mapping[str, Any] | None = None,
        operation_timeout: int | None = None,
        write_lock_timeout_ms: int | None = None,
        bm25: bool | Mapping[str, Any] | None = None,
        vector_store: Any = None,
        embedder: Any = None,
        search_index_name: str | None = None,
        auto_index_paths: Sequence[str] | None = None,
        skills: Sequence[str] | Resolver | None = None,
        skill_source: Any = None,
        lsp: bool | Mapping[str, Any] | None = None,
        extensions: Sequence[Extension] = (),
    ) -> None:
        self.id = id or f"ws-{int(time.time() * 1000):x}-{secrets.token_hex(3)}"
        self.name = name or f"workspace-{self.id[:8]}"
        self.created_at = datetime.now(UTC)
        self.last_accessed_at = self.created_at
        self._status: WorkspaceStatus = "pending"
        self._filesystem_resolver: Resolver | None = None
        self._sandbox_resolver: Resolver | None = None
        self._fs: Any = None
        self._sandbox: Any = None
        if _is_resolver(sandbox):
            self._sandbox_resolver = sandbox
        else:
            self._sandbox = sandbox
        if mounts:
            if filesystem is not None:
                raise WorkspaceError('Cannot use both "filesystem" and "mounts"')
            if self._sandbox_resolver is not None:
                raise WorkspaceError(
                    'Cannot use "mounts" with a dynamic sandbox resolver. Mounts are attached to a sandbox instance at '
                    "construction time. Either pass a static sandbox instance, or have your resolver return a sandbox "
                    "with its mounts already configured."
                )
            from keel.workspace_providers.composite_filesystem import CompositeFilesystem

            self._fs = CompositeFilesystem(mounts)
            sandbox_mounts = getattr(self._sandbox, "mounts", None)
            if sandbox_mounts is not None and hasattr(sandbox_mounts, "add"):
                sandbox_mounts.set_context(self._sandbox, self)
                sandbox_mounts.add(self._fs.mounts)
                sandbox_mounts.set_on_mount(on_mount)
        elif inspect.isclass(filesystem):
            raise WorkspaceError(
                "filesystem received a class instead of an instance or resolver function. Pass an instance "
                "(e.g., LocalFilesystem(...)) or a resolver function (lambda request_context: fs)."
            )
        elif _is_resolver(filesystem):
            self._filesystem_resolver = filesystem
        else:
            self._fs = filesystem
        self._sandbox_cache_key = sandbox_cache_key
        self._sandbox_cache: dict[str, asyncio.Future[Any]] = {}
        dynamic = (instructions or {}).get("dynamic_sandbox", (instructions or {}).get("dynamicSandbox"))
        self._dynamic_sandbox_instructions: DynamicSandboxInstructions = dynamic or "placeholder"
        self._tools_config = normalize_tools_config(tools)
        self.operation_timeout = operation_timeout
        lock_ms = write_lock_timeout_ms or self._tools_config.get("write_lock_timeout_ms")
        self.write_lock = FileWriteLock(lock_ms or DEFAULT_WRITE_LOCK_TIMEOUT_MS)
        self.auto_index_paths = list(auto_index_paths or [])
        self._search = self._search_engine(bm25, vector_store, embedder, search_index_name)
        own: list[Any] = []
        if skills is not None and (callable(skills) or len(skills) > 0):
            own.append(self._skills_extension(skills, skill_source, bm25))
        if lsp:
            own.append(self._lsp_extension(lsp))
        self.extensions = (*own, *extensions)
        self._teardown_started = False
        if not (self.has_filesystem_config() or self.has_sandbox_config() or self.extensions):
            raise WorkspaceError("Workspace requires at least a filesystem, sandbox, or skills")

    # --- providers ----------------------------------------------------------------------------------------

    @property
    def status(self) -> WorkspaceStatus:
        return self._status

    @property
    def filesystem(self) -> Any:
        """The static filesystem; None when a resolver is configured (see `has_filesystem_config()`)."""
        return self._fs

    @property
    def sandbox(self) -> Any:
        """The static sandbox; None when a resolver is configured (see `has_sandbox_config()`)."""
        return self._sandbox

    @property
    def skills(self) -> Any:
        """The `WorkspaceSkills`, or None without skills."""
        return next((e for e in self.extensions if getattr(e, "kind", None) == "skills"), None)

    @property
    def lsp(self) -> Any:
        """The `WorkspaceLSP`, or None without `lsp`."""
        return next((e for e in self.extensions if getattr(e, "kind", None) == "lsp"), None)

    def _skills_extension(self, skills: Any, source: Any, bm25: Any) -> Any:
        from keel.workspace_providers.skills import WorkspaceSkills

        if source is None:
            source = self._fs if self._fs is not None else None
            if source is None and self._filesystem_resolver is not None:
                source = self.resolve_filesystem
        on = bm25 is not None and bm25 is not False
        return WorkspaceSkills(skills, source=source, bm25=BM25Config.parse(bm25) if on else False)

    def _lsp_extension(self, config: bool | Mapping[str, Any]) -> Any:
        from keel.workspace_providers.lsp import WorkspaceLSP

        if self._filesystem_resolver is not None or self._sandbox_resolver is not None:
            raise WorkspaceError(
                "lsp cannot be used with a resolver filesystem or sandbox: language servers are started in one "
                "directory at construction time, but a resolver gives a filesystem per request. Pass a static "
                "filesystem (and sandbox) to use lsp."
            )
        root = getattr(self._fs, "base_path", None)
        if root is None:
            raise WorkspaceError("lsp needs a LocalFilesystem: language servers run in its directory")
        return WorkspaceLSP(root, config)

    @property
    def can_bm25(self) -> bool:
        return self._search is not None and self._search.can_bm25

    @property
    def can_vector(self) -> bool:
        return self._search is not None and self._search.can_vector

    @property
    def can_hybrid(self) -> bool:
        return self._search is not None and self._search.can_hybrid

    def can_modes(self) -> tuple[bool, bool, bool]:
        """(bm25, vector, hybrid): which search modes this workspace has."""
        return self.can_bm25, self.can_vector, self.can_hybrid

    @property
    def search_engine(self) -> SearchEngine | None:
        return self._search

    def has_filesystem_config(self) -> bool:
        return self._fs is not None or self._filesystem_resolver is not None

    def has_sandbox_config(self) -> bool:
        return self._sandbox is not None or self._sandbox_resolver is not None

    async def resolve_filesystem(self, request_context: RequestContext | None = None) -> Any:
        if self._filesystem_resolver is None:
            return self._fs
        return await _resolved(self._filesystem_resolver(dict(request_context or {})))

    async def resolve_sandbox(self, request_context: RequestContext | None = None) -> Any:
        """The static sandbox, or the resolver's (cached by `sandbox_cache_key` when it gives a key)."""
        if self._sandbox_resolver is None:
            return self._sandbox
        context = dict(request_context or {})
        key = self._sandbox_cache_key(context) if self._sandbox_cache_key else None
        if key is None:
            return await _resolved(self._sandbox_resolver(context))
        pending = self._sandbox_cache.get(key)
        if pending is None:
            pending = asyncio.ensure_future(_resolved(self._sandbox_resolver(context)))
            self._sandbox_cache[key] = pending
        try:
            return await pending
        except BaseException:
            if self._sandbox_cache.get(key) is pending:
                del self._sandbox_cache[key]
            raise

    def clear_sandbox_cache(self, cache_key: str | None = None) -> None:
        """Forget resolved sandboxes (one key, or all). The workspace does not own them: destroy them yourself."""
        if cache_key is None:
            self._sandbox_cache.clear()
        else:
            self._sandbox_cache.pop(cache_key, None)

    # --- tools --------------------------------------------------------------------------------------------

    def get_tools_config(self) -> dict[str, Any] | None:
        return dict(self._tools_config) or None

    def set_tools_config(self, config: Mapping[str, Any] | None) -> None:
        """Replace (not merge) the tools config; None resets to the defaults. Takes effect at the next step."""
        self._tools_config = normalize_tools_config(config)

    # --- search -------------------------------------------------------------------------------------------

    def _search_engine(
        self, bm25: Any, vector_store: Any, embedder: Any, index_name: str | None
    ) -> SearchEngine | None:
        if vector_store is not None and embedder is None:
            raise SearchError("vectorStore requires an embedder")
        bm25_on = bm25 is not None and bm25 is not False
        if not bm25_on and vector_store is None:
            return None
        vector = None
        if vector_store is not None:
            default_name = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in f"{self.id}_search")
            vector = VectorConfig(vector_store, embedder, check_index_name(index_name or default_name))
        return SearchEngine(bm25=BM25Config.parse(bm25) if bm25_on else None, vector=vector)

    def _searchable(self, *, writing: bool = False) -> SearchEngine:
        if writing and self._teardown_started:
            raise WorkspaceError(f"Workspace is not ready (status: {self._status})")
        if self._search is None:
            raise SearchNotAvailable()
        self.touch()
        return self._search

    async def index(
        self,
        path: str,
        content: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        type: str | None = None,
        mime_type: str | None = None,
        start_line_offset: int | None = None,
    ) -> None:
        """Index `content` for search under the id `path` (replacing what that id had)."""
        engine = self._searchable(writing=True)
        meta = {"type": type, "mimeType": mime_type, **(metadata or {})}
        await engine.index(SearchDocument(path, content, meta, start_line_offset))

    async def search(
        self,
        query: str,
        *,
        top_k: int = 10,
        mode: str | None = None,
        min_score: float | None = None,
        vector_weight: float = 0.5,
        filter: Mapping[str, Any] | None = None,
    ) -> list[SearchResult]:
        """The best `top_k` indexed documents for `query`. `mode` is `bm25`, `vector` or `hybrid` (default: the
        most the workspace can do); a mode it is not configured for raises `SearchError`."""
        return await self._searchable().search(
            query, top_k=top_k, mode=mode, min_score=min_score, vector_weight=vector_weight, filter=filter
        )

    def share_search_index(self, store: SearchIndexStore | None) -> None:
        """Keep the search documents and file hashes in `store` (Keel's storage: a worker shares every
        workspace's index this way, before `init()`), under the workspace id, instead of in this process alone:
        every process sharing the store answers a query the same way after an indexing on any of them, and an
        indexing skips the files the store holds with the same content. None: back to memory (starting empty).
        No-op without search."""
        if self._search is not None:
            self._search.attach(store, self.id)

    async def rebuild_search_index(self, paths: Sequence[str] | None = None) -> list[str]:
        """Index `paths` (default `auto_index_paths`) anew; returns the files indexed (readable as text).
        Nothing to do without search, a static filesystem or paths.

        Alone (no shared store), as in Mastra: every BM25 document is forgotten first, and documents indexed
        before that are not found again lose their vectors too. With a shared store (`share_search_index`) the
        index is brought up to date instead: files whose content is unchanged are skipped, the files it held
        that are no longer found are removed, and documents indexed by `index()` stay (another worker may
        have indexed them).

        As in Mastra, a failing embedder or vector store does not fail the rebuild: it is logged, and keyword
        search covers every file."""
        from keel.workspace_providers.search_indexing import files_to_index, forget_missing, index_batches

        patterns = list(self.auto_index_paths if paths is None else paths)
        if self._search is None or self._fs is None or not patterns:
            return []
        engine = self._searchable(writing=True)
        files = await files_to_index(self._fs, patterns)
        indexed: list[str] = []
        if engine.store is not None:
            async for batch in index_batches(engine, self._fs, files, keep_going=True):
                indexed += batch.indexed
            try:
                await forget_missing(engine, files)
            except Exception as err:  # the vector store or the storage down: the next indexing tries again
                logger.warning("workspace %s: could not remove the files no longer found: %s", self.id, err)
            return indexed
        before = set(engine.ids)
        engine.clear()
        async for batch in index_batches(engine, self._fs, files, keep_going=True):
            indexed += batch.indexed
        gone = before - set(engine.ids)
        if gone:
            try:
                await engine.forget_vectors(sorted(gone))
            except Exception as err:
                logger.warning(
                    "workspace %s: could not delete the vectors of %d documents: %s", self.id, len(gone), err
                )
        return indexed

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def init(self) -> None:
        """Load the token counter, start the filesystem (creates its base directory), the sandbox, then the
        extensions."""
        self._status = "initializing"
        try:
            await asyncio.to_thread(output.warm)  # tool outputs are token-counted: load the encoding once, now
            if self._fs is not None:
                await _call(self._fs, "init")
            if self._sandbox is not None:
                await _call(self._sandbox, "init")
            if self._search is not None and self.auto_index_paths:
                await self.rebuild_search_index()
            for extension in self.extensions:
                await _call(extension, "init")
        except BaseException:
            self._status = "error"
            raise
        self._status = "ready"

    async def stop(self) -> None:
        """Pause: the sandbox's processes are killed and it stops; files stay. `init()` resumes."""
        if self._status in ("destroying", "destroyed"):
            return
        for extension in self.extensions:
            await _call(extension, "stop")
        for sandbox in [self._sandbox, *self._cached_sandboxes()]:
            if sandbox is not None:
                await _call(sandbox, "stop")
        self._status = "paused"

    def _cached_sandboxes(self) -> list[Any]:
        """Resolver sandboxes kept by `sandbox_cache_key`: stopped with the workspace, so the commands they run
        do not outlive the worker (destroying them stays the app's call)."""
        return [
            f.result()
            for f in self._sandbox_cache.values()
            if isinstance(f, asyncio.Future) and f.done() and not f.cancelled() and f.exception() is None
        ]

    async def destroy(self) -> None:
        """Release everything the workspace owns (extensions, sandbox, filesystem); files on disk stay."""
        if self._status == "destroyed":
            return
        self._status = "destroying"
        self._teardown_started = True
        try:
            for extension in self.extensions:
                await _call(extension, "destroy")
            if self._sandbox is not None:
                await _call(self._sandbox, "destroy")
            for sandbox in self._cached_sandboxes():
                await _call(sandbox, "stop")
            if self._fs is not None:
                await _call(self._fs, "destroy")
        except BaseException:
            self._status = "error"
            raise
        finally:
            self._sandbox_cache.clear()
        self._status = "destroyed"

    # --- description --------------------------------------------------------------------------------------

    def get_instructions(self, request_context: RequestContext | None = None) -> str:
        """The static providers' instructions, added to the agent's system message."""
        return self._instructions(self._fs, self._sandbox, request_context)

    async def get_instructions_async(self, request_context: RequestContext | None = None) -> str:
        """Instructions with resolver providers resolved: the filesystem always, the sandbox only when
        `instructions.dynamic_sandbox` is "resolve" (else a placeholder, or the function's text); extensions
        answer for this request (skills found by a resolver, say)."""
        context = dict(request_context or {})
        filesystem = await self.resolve_filesystem(context)
        mode = self._dynamic_sandbox_instructions
        if self._sandbox_resolver is not None and mode != "resolve":
            sandbox_text = mode(context) if callable(mode) else DYNAMIC_SANDBOX_INSTRUCTIONS
            parts = [sandbox_text, *self._provider_instructions(filesystem, None, context)]
        else:
            parts = self._provider_instructions(filesystem, await self.resolve_sandbox(context), context)
        parts += await self._extension_instructions(context)
        return "\n\n".join(p for p in parts if p)

    def _instructions(self, filesystem: Any, sandbox: Any, request_context: RequestContext | None) -> str:
        parts = self._provider_instructions(filesystem, sandbox, request_context)
        parts += [e.get_instructions(request_context) for e in self.extensions if hasattr(e, "get_instructions")]
        return "\n\n".join(p for p in parts if p)

    def _provider_instructions(
        self, filesystem: Any, sandbox: Any, request_context: RequestContext | None
    ) -> list[str]:
        return [p.get_instructions(request_context) for p in (sandbox, filesystem) if p is not None]

    async def _extension_instructions(self, request_context: RequestContext | None) -> list[str]:
        parts = []
        for e in self.extensions:
            if hasattr(e, "get_instructions_async"):
                parts.append(await e.get_instructions_async(request_context))
            elif hasattr(e, "get_instructions"):
                parts.append(e.get_instructions(request_context))
        return parts

    async def get_info(
        self,
        *,
        include_file_count: bool = False,
        request_context: RequestContext | None = None,
        resolve_dynamic_providers: bool = True,
    ) -> dict[str, Any]:
        """`{id, name, status, createdAt, lastAccessedAt, filesystem?, sandbox?}` as Mastra reports it; resolver
        providers appear as `dynamic` unless `resolve_dynamic_providers` (the sandbox resolver is never called)."""
        info: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "status": self._status,
            "createdAt": iso_ms(self.created_at),
            "lastAccessedAt": iso_ms(self.last_accessed_at),
        }
        filesystem = self._fs
        if filesystem is None and self._filesystem_resolver is not None and resolve_dynamic_providers:
            filesystem = await self.resolve_filesystem(request_context)
        if filesystem is not None:
            fs_info = dict(filesystem.get_info())
            entry = {
                "id": fs_info.get("id"),
                "name": fs_info.get("name"),
                "provider": fs_info.get("provider"),
                "readOnly": bool(getattr(filesystem, "read_only", False)),
                "status": fs_info.get("status"),
                "metadata": fs_info.get("metadata"),
            }
            if include_file_count:
                entry["totalFiles"] = await _count_files(filesystem)
            info["filesystem"] = entry
        elif self._filesystem_resolver is not None:
            info["filesystem"] = {
                "id": f"{self.id}-dynamic-filesystem",
                "name": "DynamicFilesystem",
                "provider": "dynamic",
                "status": "pending",
            }
        if self._sandbox is not None:
            sandbox_info = dict(self._sandbox.get_info())
            info["sandbox"] = {
                "provider": self._sandbox.provider,
                "status": sandbox_info.get("status"),
                "resources": sandbox_info.get("resources"),
            }
        elif self._sandbox_resolver is not None:
            info["sandbox"] = {"provider": "dynamic", "status": "pending"}
        return info

    def touch(self) -> None:
        self.last_accessed_at = datetime.now(UTC)


def _is_resolver(value: Any) -> bool:
    return callable(value) and not inspect.isclass(value) and not hasattr(value, "provider")


async def _resolved(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _count_files(filesystem: Any) -> int | None:
    try:
        entries = await filesystem.readdir(".", recursive=True)
    except Exception:
        return None  # a filesystem that cannot list reports no count
    return sum(1 for e in entries if e.type == "file")
