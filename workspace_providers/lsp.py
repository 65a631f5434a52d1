"""Mastra's LSP inspection: `WorkspaceLSP` (its `LSPManager`) runs language servers for a workspace and answers
the `mastra_workspace_lsp_inspect` tool (hover, diagnostics, definition and implementation at a cursor).

Servers start on first use, one per server and project root (the nearest directory up from the file, within the
workspace, holding one of the server's markers, else the LSP root), are reused, restarted on the next call when
they died, and all end with `stop()` / `destroy()`. Built in: `pylsp` for Python (Mastra uses Pyright; pass
``binary_overrides={"python": "pyright-langserver --stdio"}`` for it), `typescript-language-server` for
TypeScript and JavaScript, `gopls`, `rust-analyzer`; more through `servers`.

Errors::

    WorkspaceError
     └── LSPError                       a server failed to start, answer or stay up (`lsp_client`)
          ├── LSPTimeout
          ├── LSPServerExited
          └── LSPServerUnavailable      no server for this extension, or its binary is not installed

`inspect()` returns Mastra's ``{"error": ...}`` results for what Mastra reports so; a path outside the workspace
(`PermissionDenied`) or a missing file (`FileNotFound`) raise, as for the filesystem tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field

from keel.workspace_providers.errors import FileNotFound, IsDirectory, PermissionDenied, WorkspaceError
from keel.workspace_providers.leftovers import Leftovers
from keel.workspace_providers.lsp_client import LSPClient, LSPError, LSPServerExited, LSPTimeout, file_uri
from keel.workspace_providers.lsp_servers import (
    LANGUAGE_EXTENSIONS,
    PREFERRED_LANGUAGES,
    LSPConfig,
    ServerDef,
    build_server_defs,
    custom_extensions,
    language_id,
    normalize_lsp_config,
)
from keel.workspace_providers.paths import Resolver
from keel.workspace_providers.paths import _within as within
from keel.workspace_providers.tool_config import WORKSPACE_TOOLS

__all__ = [
    "LANGUAGE_EXTENSIONS",
    "LSP_INSPECT",
    "LSP_INSPECT_SPEC",
    "LSPConfig",
    "LSPError",
    "LSPServerExited",
    "LSPServerUnavailable",
    "LSPTimeout",
    "LspInspectInput",
    "ServerDef",
    "WorkspaceLSP",
    "build_server_defs",
    "normalize_lsp_config",
]

LSP_INSPECT = WORKSPACE_TOOLS.LSP.LSP_INSPECT
CURSOR_MARKER = "<<<"
LEASE_WAIT = 5.0
"""Seconds a start waits for a busy server to become idle when `max_open_clients` are running (Mastra: 5 s)."""
_MAX_SAFE_INTEGER = 9007199254740991
_PATH_DESCRIPTION = "Absolute path to the file"
_LINE_DESCRIPTION = "Line number (1-indexed)"
_MATCH_DESCRIPTION = (
    "Line content with <<< marking the cursor position. Exactly one <<< marker is required. "
    'Example: "const foo = <<<bar()" means cursor is at bar'
)

LSP_INSPECT_SPEC: dict[str, Any] = {
    "description": "Inspect code at a specific symbol position using the Language Server Protocol. Provide an "
    "absolute file path, a 1-indexed line number, and the exact line content with <<< marking the cursor position. "
    "Exactly one <<< marker is required. Returns hover information, any diagnostics reported on that line, plus "
    "definition and implementation locations when available. Use this for type information, symbol navigation, "
    "and go-to-definition; use view to read the surrounding implementation.",
    "inputSchema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "path": {"description": _PATH_DESCRIPTION, "type": "string"},
            "line": {
                "description": _LINE_DESCRIPTION,
                "type": "integer",
                "exclusiveMinimum": 0,
                "maximum": _MAX_SAFE_INTEGER,
            },
            "match": {"description": _MATCH_DESCRIPTION, "type": "string"},
        },
        "required": ["path", "line", "match"],
        "additionalProperties": False,
    },
}
"""What Mastra advertises for `mastra_workspace_lsp_inspect` (its zod schema as @mastra/core 1.71 converts it)."""


class LspInspectInput(BaseModel):
    """The tool's arguments."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description=_PATH_DESCRIPTION)
    line: int = Field(gt=0, le=_MAX_SAFE_INTEGER, description=_LINE_DESCRIPTION)
    match: str = Field(description=_MATCH_DESCRIPTION)


class LSPServerUnavailable(LSPError):
    """No server handles the file's extension, or the one that does is not installed."""


# --- results -------------------------------------------------------------------------------------------------


def _hover(result: Any) -> dict[str, str] | None:
    """Mastra's `{value, kind}` from a hover's contents (string, MarkedString[], MarkupContent)."""
    contents = result.get("contents") if isinstance(result, dict) else None
    if not contents:
        return None
    if isinstance(contents, str):
        return {"value": contents, "kind": "plaintext"}
    if isinstance(contents, list):
        first = contents[0] if contents else None
        if isinstance(first, str):
            return {"value": first, "kind": "plaintext"}
        if isinstance(first, dict) and first.get("value"):
            return {"value": first["value"], "kind": first.get("kind") or "markdown"}
        return None
    if isinstance(contents, dict) and contents.get("value"):
        return {"value": contents["value"], "kind": contents.get("kind") or "markdown"}
    return None


def _as_list(result: Any) -> list[Any]:
    """A definition / implementation answer as a list (Mastra: an array, a single `Location`, else nothing)."""
    if isinstance(result, list):
        return result
    return [result] if isinstance(result, dict) and result.get("uri") else []


@dataclass(frozen=True)
class _Location:
    path: str
    line: int
    character: int


def _locations(items: list[Any]) -> list[_Location]:
    """`Location`s and `LocationLink`s on ``file://`` URIs, 1-based."""
    found = []
    for item in items:
        if not isinstance(item, dict):
            continue
        uri = item.get("uri") or item.get("targetUri")
        start = (item.get("range") or item.get("targetRange") or {}).get("start") or {}
        if not isinstance(uri, str) or not uri.startswith("file://"):
            continue
        found.append(_Location(unquote(urlsplit(uri).path), start.get("line", 0) + 1, start.get("character", 0) + 1))
    return found


def _line_preview(path: str, line: int) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
    except OSError:
        return None
    return lines[line - 1].strip() if 0 < line <= len(lines) else None


_SEVERITIES = {1: "error", 2: "warning", 3: "info", 4: "hint"}


def _line_diagnostics(diagnostics: list[dict[str, Any]], line: int) -> list[dict[str, Any]]:
    """Mastra's `{severity, message, source}` of the diagnostics on `line` (1-based)."""
    out = []
    for d in diagnostics:
        if isinstance(d.get("line"), int):
            at = d["line"]
        else:
            at = ((d.get("range") or {}).get("start") or {}).get("line", -1) + 1
        severity = d.get("severity")
        if isinstance(severity, int):
            severity = _SEVERITIES.get(severity, "hint")
        elif not isinstance(severity, str):
            severity = "error"
        if at == line:
            out.append({"severity": severity, "message": d.get("message"), "source": d.get("source")})
    return out


# --- the manager ---------------------------------------------------------------------------------------------


class WorkspaceLSP:
    """The language servers of one workspace (Mastra's `LSPManager`), attached as a workspace extension.

    The contract with `Workspace`: `root` is always the workspace filesystem's directory (its base path), the
    containment root of every tool path; the config's own ``root`` (Mastra's `LSPConfig.root`) is only the default
    project root of servers (used when no marker is found up from a file), and must lie inside `root`.

    Args:
        root: the workspace directory (a `LocalFilesystem`'s base path): tool paths resolve against it and may not
            leave it.
        config: ``True`` (defaults), a mapping with Mastra's `LSPConfig` keys, or an `LSPConfig`. Its ``root``
            (absolute, or relative to `root`) defaults to `root`.
        cwd: the directory that locations under it are shown relative to, as ``$cwd/...`` (Mastra uses the
            process's working directory, the default).
        leftovers: where server process groups are recorded until reaped (default: the host's usual directory).

    Raises:
        WorkspaceError: an unknown config key, or a config root outside the workspace directory.
    """

    kind = "lsp"

    def __init__(
        self,
        root: str | os.PathLike[str],
        config: bool | Mapping[str, Any] | LSPConfig | None = True,
        *,
        cwd: str | None = None,
        leftovers: Leftovers | None = None,
    ) -> None:
        self.config = normalize_lsp_config(config)
        self.workspace_root = os.path.abspath(os.fspath(root))
        self._real_root = os.path.realpath(self.workspace_root)
        self.root = self.workspace_root
        """The default project root: the config's root, else the workspace directory."""
        if self.config.root:
            self.root = os.path.abspath(os.path.join(self.workspace_root, self.config.root))
            if not within(os.path.realpath(self.root), self._real_root):
                raise WorkspaceError(
                    f"lsp root {self.config.root} must be inside the workspace directory {self.workspace_root}: "
                    "it is only the default project root of the language servers"
                )
        self._cwd = cwd
        self._leftovers = leftovers or Leftovers()
        self._resolver = Resolver(self.workspace_root)
        self._servers = build_server_defs(self.config)
        self._extensions = custom_extensions(self.config)
        self._clients: dict[str, LSPClient] = {}  # least recently used first
        self._start_locks: dict[str, asyncio.Lock] = {}
        self._start_queue = asyncio.Lock()  # with max_open_clients: one start (and eviction) at a time
        self._leases: dict[LSPClient, int] = {}
        self._released = asyncio.Event()
        self._file_locks: dict[str, tuple[asyncio.Lock, int]] = {}

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def init(self) -> None:
        """Nothing to do: servers start on first use."""

    async def stop(self) -> None:
        """End every server (the next call starts them again)."""
        await asyncio.gather(*(self._close(key) for key in list(self._start_locks)))

    async def destroy(self) -> None:
        await self.stop()

    async def _close(self, key: str) -> None:
        async with self._start_locks[key]:  # a server still starting is closed once started
            client = self._clients.pop(key, None)
            if client is not None:
                await client.close()

    def server_pids(self) -> list[int]:
        """The process ids of the servers now running (each leads its own process group)."""
        return [c.pid for c in self._clients.values() if c.pid is not None and c.alive]

    # --- servers ------------------------------------------------------------------------------------------

    def server_for(self, path: str) -> ServerDef:
        """The server that handles `path` (by extension).

        Raises:
            LSPServerUnavailable: no server for this file type.
        """
        language = language_id(path, self._extensions)
        candidates = [
            s
            for s in self._servers.values()
            if language and s.id not in self.config.disable_servers and language in s.language_ids
        ]
        if not candidates:
            raise LSPServerUnavailable(f"No language server available for files of this type: {path}")
        return next((s for s in candidates if set(s.language_ids) & set(PREFERRED_LANGUAGES)), candidates[0])

    def project_root(self, absolute_path: str, markers: Sequence[str]) -> str:
        """The nearest directory up from the file, not above the workspace, holding a marker; else the LSP root.
        (Mastra walks up to the filesystem root; a server rooted outside the workspace would read outside it.)"""
        current = os.path.dirname(absolute_path)
        while within(current, self._real_root):
            if any(os.path.exists(os.path.join(current, m)) for m in markers):
                return current
            if current == self._real_root:
                break
            current = os.path.dirname(current)
        return self.root

    async def client_for(self, absolute_path: str) -> LSPClient:
        """The running server for a file, started (or restarted, if it died) as needed.

        Raises:
            LSPServerUnavailable: no server for the file type, or it is not installed.
            LSPError: it failed to start, or `max_open_clients` servers are all busy.
        """
        server = self.server_for(absolute_path)
        root = await asyncio.to_thread(self.project_root, absolute_path, server.markers)
        argv = await asyncio.to_thread(server.command, root)  # looks on disk and PATH
        if argv is None:
            raise LSPServerUnavailable(
                f"No language server available for files of this type: {absolute_path} ({server.name} not found; "
                f"install it: {server.install})"
            )
        key = f"{server.name}:{root}"
        async with self._start_locks.setdefault(key, asyncio.Lock()):
            client = self._clients.pop(key, None)
            if client is not None and client.alive:
                self._clients[key] = client  # now the most recently used
                return client
            if client is not None:  # crashed: reap what is left of it before starting afresh
                await client.close()
            if self.config.max_open_clients is None:
                client = await self._start(server, argv, root)
            else:
                async with self._start_queue:
                    await self._make_room(self.config.max_open_clients)
                    client = await self._start(server, argv, root)
            self._clients[key] = client
            return client

    async def _start(self, server: ServerDef, argv: list[str], root: str) -> LSPClient:
        init = server.initialization(root)
        client = LSPClient(
            argv,
            root,
            name=server.name,
            initialization_options=init,
            leftovers=self._leftovers,
            write_timeout=self.config.request_timeout / 1000,
        )
        try:
            await client.start(self.config.init_timeout / 1000)
        except BaseException:
            await asyncio.shield(client.close(graceful=False))  # a server that failed its handshake is just ended
            raise
        return client

    async def _make_room(self, limit: int) -> None:
        """Close least recently used idle servers until another may start; wait a while if all are busy."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEASE_WAIT
        while len(self._clients) >= limit:
            idle = next((k for k, c in self._clients.items() if not self._leases.get(c)), None)
            if idle is not None:
                await self._clients.pop(idle).close()
                continue
            if loop.time() >= deadline:
                raise LSPError(f"All {limit} language servers allowed (max_open_clients) are busy")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._released.wait(), deadline - loop.time())

    @contextlib.asynccontextmanager
    async def _lease(self, absolute_path: str) -> AsyncIterator[LSPClient]:
        """The file's server, kept from eviction while in use."""
        client = await self.client_for(absolute_path)
        self._leases[client] = self._leases.get(client, 0) + 1  # no await since client_for: it cannot be evicted
        try:
            yield client
        finally:
            self._leases[client] -= 1
            if not self._leases[client]:
                del self._leases[client]
                self._released.set()
                self._released = asyncio.Event()

    @contextlib.asynccontextmanager
    async def _file_lock(self, path: str) -> AsyncIterator[None]:
        """One inspection of a file at a time: the open, change and close of two calls must not interleave."""
        lock, users = self._file_locks.get(path, (asyncio.Lock(), 0))
        self._file_locks[path] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._file_locks[path]
            if users == 1:
                del self._file_locks[path]
            else:
                self._file_locks[path] = (lock, users - 1)

    # --- the tool -----------------------------------------------------------------------------------------

    def resolve(self, path: str) -> str:
        """The file's absolute path (symlinks resolved), which must lie inside the workspace.

        Raises:
            PermissionDenied: outside the workspace. FileNotFound, IsDirectory.
        """
        target = self._resolver.target(path)
        absolute = os.path.realpath(os.path.join(target.root, *target.parts))
        if not within(absolute, self._real_root):
            raise PermissionDenied(path, "access (the path leads outside the workspace through a symlink)")
        if os.path.isdir(absolute):
            raise IsDirectory(path)
        if not os.path.isfile(absolute):
            raise FileNotFound(path)
        return absolute

    def _show(self, path: str) -> str:
        cwd = self._cwd if self._cwd is not None else os.getcwd()
        return "$cwd" + path[len(cwd) :] if path.startswith(cwd) else path

    async def inspect(self, path: str, line: int, match: str) -> dict[str, Any]:
        """Mastra's `mastra_workspace_lsp_inspect`: what the server knows at the ``<<<`` cursor in `match`.

        The cursor's column is where ``<<<`` stands in `match` (taken as the whole line's text; like Mastra, the
        text is not compared with the file). Returns any of ``hover: {value, kind}``, ``diagnostics: [{severity,
        message, source}]`` (those on `line`), ``definition: [{location, preview}]``, ``implementation:
        [location]``, with locations as ``"$cwd/src/a.ts:L3:C17"``; ``{}`` when the server knows nothing; or
        ``{"error": ...}``.

        Raises:
            PermissionDenied: `path` is outside the workspace. FileNotFound, IsDirectory.
        """
        count = match.count(CURSOR_MARKER)
        if count == 0:
            return {"error": "No <<< cursor marker found in match"}
        if count > 1:
            return {"error": f"Multiple <<< markers found (found {count}, expected 1)"}
        before = match[: match.index(CURSOR_MARKER)]
        position = {"line": line - 1, "character": len(before.encode("utf-16-le")) // 2}  # LSP counts UTF-16 units
        absolute = await asyncio.to_thread(self.resolve, path)
        try:
            content = await asyncio.to_thread(Path(absolute).read_text, encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            content = ""
        language = language_id(absolute, self._extensions) or "plaintext"
        try:
            async with self._lease(absolute) as client, self._file_lock(absolute):
                return await self._query(client, absolute, language, content, line, position)
        except LSPServerUnavailable as exc:
            return {"error": str(exc).replace(absolute, path)}
        except LSPError as exc:  # _query reports its own failures: these are the server's start
            return {"error": f"Failed to initialize LSP client: {exc}"}

    async def _query(
        self, client: LSPClient, absolute: str, language: str, content: str, line: int, position: dict[str, int]
    ) -> dict[str, Any]:
        timeout = self.config.request_timeout / 1000
        document = {"textDocument": {"uri": file_uri(absolute)}, "position": position}

        async def ask(method: str) -> Any:
            try:
                return await client.request(method, document, timeout)
            except LSPError:
                return None  # Mastra: a failed or timed-out query is simply no answer

        async def diagnostics() -> list[dict[str, Any]]:
            if not content:
                return []
            try:
                await client.change(absolute, content, 1)
                wait = self.config.diagnostic_timeout / 1000
                return await client.wait_for_diagnostics(absolute, wait, wait_for_change=True)
            except LSPError:
                return []

        result: dict[str, Any] = {}
        try:
            await client.open(absolute, content, language)
            if hover := _hover(await ask("textDocument/hover")):
                result["hover"] = hover
            diags, definition, implementation = await asyncio.gather(
                diagnostics(), ask("textDocument/definition"), ask("textDocument/implementation")
            )
            if on_line := _line_diagnostics(diags, line):
                result["diagnostics"] = on_line
            here = (absolute, line)
            defs = [d for d in _locations(_as_list(definition)) if (d.path, d.line) != here]
            if defs:
                previews = await asyncio.gather(*(asyncio.to_thread(_line_preview, d.path, d.line) for d in defs))
                result["definition"] = [
                    {"location": f"{self._show(d.path)}:L{d.line}:C{d.character}", "preview": p}
                    for d, p in zip(defs, previews, strict=True)
                ]
            seen = {(d.path, d.line) for d in defs} | {here}
            impls = [i for i in _locations(_as_list(implementation)) if (i.path, i.line) not in seen]
            if impls:
                result["implementation"] = [f"{self._show(i.path)}:L{i.line}:C{i.character}" for i in impls]
            if not client.alive:  # beyond Mastra: a server that died mid-call is not "nothing found"
                raise LSPServerExited(client.exit_reason())
        except LSPError as exc:
            result["error"] = f"LSP query failed: {exc}"
        except Exception:
            with contextlib.suppress(LSPError):
                await client.close_document(absolute)
            raise
        # Not in a `finally`: after a cancellation nothing more is written, so a stuck pipe cannot hold it up.
        with contextlib.suppress(LSPError):
            await client.close_document(absolute)
        return result
