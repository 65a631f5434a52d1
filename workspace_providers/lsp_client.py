"""One language server process and the JSON-RPC 2.0 conversation with it over stdio (LSP base protocol:
``Content-Length`` framed messages), after Mastra's `LSPClient`.

The server runs in its own session (so in its own process group: `typescript-language-server` starts `tsserver`
children, and closing signals them all). Requests are multiplexed by id; the server's own requests
(`workspace/configuration`, `window/workDoneProgress/create`, `client/registerCapability`, ...) are answered at
once so it never waits on us; `textDocument/publishDiagnostics` is kept per document.

Every write is bounded: a server that stops reading its stdin (wedged, or busy for longer than a request may
take) fills the pipe, and a write that cannot finish in time kills the server's process group and fails with
`LSPTimeout`, so no call (and no `close()`) waits on such a server for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from keel.workspace_providers.errors import WorkspaceError
from keel.workspace_providers.leftovers import Leftovers

WRITE_TIMEOUT = 5.0
"""Seconds a notification may take to be written before the server is taken as stuck and killed."""
SHUTDOWN_TIMEOUT = 1.0
"""Seconds the `shutdown` request may take before the process is signalled (Mastra: 1 s)."""
KILL_GRACE = 0.5
"""Seconds between SIGTERM and SIGKILL, and given to a server to exit by itself after `exit`."""
STDERR_TAIL = 4096
"""Bytes of the server's stderr kept, to say why it died."""
METHOD_NOT_FOUND = -32601

# What Mastra's client declares (vscode-jsonrpc defaults aside): servers shape their answers on it, e.g. markdown
# hovers and `LocationLink`s.
CLIENT_CAPABILITIES: dict[str, Any] = {
    "window": {"workDoneProgress": True},
    "workspace": {"configuration": True},
    "textDocument": {
        "publishDiagnostics": {"relatedInformation": True, "tagSupport": {"valueSet": [1, 2]}, "versionSupport": False},
        "synchronization": {
            "didOpen": True,
            "didChange": True,
            "dynamicRegistration": False,
            "willSave": False,
            "willSaveWaitUntil": False,
            "didSave": False,
        },
        "completion": {
            "dynamicRegistration": False,
            "completionItem": {
                "snippetSupport": False,
                "commitCharactersSupport": False,
                "documentationFormat": ["markdown", "plaintext"],
                "deprecatedSupport": False,
                "preselectSupport": False,
            },
        },
        "definition": {"dynamicRegistration": False, "linkSupport": True},
        "typeDefinition": {"dynamicRegistration": False, "linkSupport": True},
        "implementation": {"dynamicRegistration": False, "linkSupport": True},
        "references": {"dynamicRegistration": False},
        "documentHighlight": {"dynamicRegistration": False},
        "documentSymbol": {"dynamicRegistration": False, "hierarchicalDocumentSymbolSupport": True},
        "codeAction": {
            "dynamicRegistration": False,
            "codeActionLiteralSupport": {
                "codeActionKind": {
                    "valueSet": [
                        "quickfix",
                        "refactor",
                        "refactor.extract",
                        "refactor.inline",
                        "refactor.rewrite",
                        "source",
                        "source.organizeImports",
                    ]
                }
            },
        },
        "hover": {"dynamicRegistration": False, "contentFormat": ["markdown", "plaintext"]},
    },
}


class LSPError(WorkspaceError):
    """A language server could not be started, failed a request, or died."""

    error_name = "LSPError"


class LSPTimeout(LSPError):
    """A request (or the `initialize` handshake) got no answer in time."""


class LSPServerExited(LSPError):
    """The server process ended while (or before) we talked to it."""


def file_uri(path: str) -> str:
    """An absolute path as a percent-encoded ``file://`` URI (Node's `pathToFileURL`)."""
    return Path(path).as_uri()


class LSPClient:
    """One running language server.

    Args:
        argv: the command line (the server must speak LSP on stdin/stdout).
        root: the project root: the server's `rootUri`, its one workspace folder and its working directory.
        name: for messages ("TypeScript Language Server").
        initialization_options: sent with `initialize` and as the `workspace/didChangeConfiguration` settings.
        leftovers: where the process group is recorded until it is reaped, so a worker killed with `kill -9`
            leaves no orphaned server behind (the next sandbox on the host kills it).
        write_timeout: seconds a notification (or a reply to the server) may take to be written; a request's
            write counts against its own timeout. A write that runs out of time kills the server.
    """

    def __init__(
        self,
        argv: Sequence[str],
        root: str,
        *,
        name: str,
        initialization_options: Mapping[str, Any] | None = None,
        leftovers: Leftovers | None = None,
        write_timeout: float = WRITE_TIMEOUT,
    ) -> None:
        self.argv = list(argv)
        self.write_timeout = write_timeout
        self.root = root
        self.name = name
        self.initialization_options = dict(initialization_options) if initialization_options else None
        self.server_capabilities: dict[str, Any] = {}
        self._leftovers = leftovers
        self._proc: asyncio.subprocess.Process | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._write_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._answers: set[asyncio.Task[None]] = set()
        self._stderr = bytearray()
        self._eof = False
        self._closed = False
        self._killed: str | None = None  # why the server was killed while running (a write timed out)
        self._diagnostics: dict[str, list[dict[str, Any]]] = {}
        self._diagnostic_versions: dict[str, int] = {}
        self._published = asyncio.Event()

    # --- process ------------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def alive(self) -> bool:
        """Whether the server process runs, its output is still open and it was not killed for not reading."""
        return self._proc is not None and self._proc.returncode is None and not self._eof and self._killed is None

    async def start(self, init_timeout: float) -> None:
        """Spawn the server and do the `initialize` / `initialized` handshake.

        Raises:
            LSPError: the command cannot be run. LSPTimeout: no `initialize` answer in `init_timeout` seconds.
            LSPServerExited: the server died during the handshake.
        """
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.root,
                start_new_session=True,
            )
        except OSError as exc:
            raise LSPError(f"Failed to start {self.name} ({' '.join(self.argv)}): {exc}") from exc
        if self._leftovers is not None:
            self._leftovers.add(self._proc.pid)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read_stdout()), loop.create_task(self._read_stderr())]
        root_uri = file_uri(self.root)
        params: dict[str, Any] = {
            "processId": os.getpid(),
            "rootUri": root_uri,
            "workspaceFolders": [{"name": "workspace", "uri": root_uri}],
            "capabilities": CLIENT_CAPABILITIES,
        }
        if self.initialization_options:
            params["initializationOptions"] = self.initialization_options
        result = await self.request("initialize", params, init_timeout)
        self.server_capabilities = dict((result or {}).get("capabilities") or {})
        await self.notify("initialized", {})
        await self.notify("workspace/didChangeConfiguration", {"settings": self.initialization_options or {}})

    async def close(self, *, graceful: bool = True) -> None:
        """`shutdown` and `exit` if the server still runs and reads its input (and `graceful`), then end its
        whole process group and reap it. Only once: a reaped leader's id may be reused, so its group is never
        signalled again."""
        proc = self._proc
        if proc is None or self._closed:
            return
        self._closed = True
        if graceful and self.alive and not self._pipe_stuck():
            with contextlib.suppress(LSPError, OSError, TimeoutError):
                await self.request("shutdown", None, SHUTDOWN_TIMEOUT)
                await self.notify("exit", None, timeout=KILL_GRACE)
                await asyncio.wait_for(proc.wait(), KILL_GRACE)
        if proc.returncode is None:
            self._killpg(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), KILL_GRACE)
        self._killpg(signal.SIGKILL)  # also children (tsserver) that ignored SIGTERM or outlived the leader
        await proc.wait()
        tasks = [*self._tasks, *self._answers]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if proc.stdin is not None and not proc.stdin.transport.is_closing():
            proc.stdin.transport.abort()  # what is still buffered has no reader any more
        self._fail_pending()
        if self._leftovers is not None:
            self._leftovers.remove(proc.pid)

    def _pipe_stuck(self) -> bool:
        """Whether bytes written earlier still wait for the server to read them (a write gave up on it)."""
        stdin = self._proc.stdin if self._proc else None
        return stdin is not None and stdin.transport.get_write_buffer_size() > 0

    def _kill(self, reason: str) -> None:
        """End a server that stopped reading (at once: its pipe would hold every later write too)."""
        if self._killed is None:
            self._killed = reason
        self._killpg(signal.SIGKILL)
        self._fail_pending()

    def _killpg(self, sig: signal.Signals) -> None:
        assert self._proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def exit_reason(self) -> str:
        """Why the server is gone: its exit code (if reaped yet) and the end of its stderr."""
        if self._killed is not None:
            return self._killed
        code = self._proc.returncode if self._proc else None
        tail = self._stderr.decode("utf-8", errors="replace").strip()
        status = f"exit code {code}" if code is not None else "its output closed"
        return f"{self.name} exited ({status})" + (f": {tail[-500:]}" if tail else "")

    def _fail_pending(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(LSPServerExited(self.exit_reason()))
        self._pending.clear()

    # --- messages -----------------------------------------------------------------------------------------

    async def request(self, method: str, params: Any, timeout: float) -> Any:
        """Send a request and wait `timeout` seconds for its result; on timeout the request is cancelled.

        The timeout covers writing the request too: a server that does not read it in time is killed.

        Raises:
            LSPTimeout, LSPServerExited, LSPError: the server answered with an error.
        """
        if not self.alive:
            raise LSPServerExited(self.exit_reason())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        request_id = next(self._ids)
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[request_id] = future
        try:
            await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}, timeout)
            return await asyncio.wait_for(future, max(deadline - loop.time(), 0))
        except TimeoutError:
            with contextlib.suppress(LSPError, OSError):
                await self.notify("$/cancelRequest", {"id": request_id})
            raise LSPTimeout(f"LSP request {method} timed out after {round(timeout * 1000)}ms ({self.name})") from None
        finally:
            self._pending.pop(request_id, None)
            if not future.done():
                future.cancel()

    async def notify(self, method: str, params: Any, *, timeout: float | None = None) -> None:
        """Send a notification, written within `timeout` seconds (default: `write_timeout`).

        Raises:
            LSPTimeout: the server did not read it in time (and was killed). LSPServerExited.
        """
        await self._send({"jsonrpc": "2.0", "method": method, "params": params}, timeout)

    async def _send(self, message: Mapping[str, Any], timeout: float | None = None) -> None:
        stdin = self._proc.stdin if self._proc else None
        if stdin is None or not self.alive:
            raise LSPServerExited(self.exit_reason())
        body = json.dumps(message, ensure_ascii=False).encode()
        limit = self.write_timeout if timeout is None else timeout

        async def write() -> None:
            async with self._write_lock:  # header and body of one message are never split by another's
                if not self.alive:  # killed while this message waited for the lock
                    raise LSPServerExited(self.exit_reason())
                stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await stdin.drain()

        try:
            await asyncio.wait_for(write(), limit)
        except TimeoutError:
            # the message may be half read: the conversation cannot go on, and a pipe nobody reads would hold
            # every later write (and `shutdown`) too
            self._kill(
                f"{self.name} stopped reading its input: writing {message.get('method') or 'a reply'} timed out "
                f"after {round(limit * 1000)}ms, so the server was killed"
            )
            raise LSPTimeout(self.exit_reason()) from None
        except (ConnectionError, RuntimeError) as exc:
            raise LSPServerExited(self.exit_reason()) from exc

    async def _read_stdout(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        try:
            while True:
                length = None
                while (header := await stdout.readline()) not in (b"\r\n", b"\n"):
                    if not header:
                        return
                    name, _, value = header.decode("ascii", errors="replace").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                if length is None:
                    continue
                try:
                    message = json.loads(await stdout.readexactly(length))
                except ValueError:
                    continue  # a garbled message: skip it rather than lose the conversation
                self._dispatch(message)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            return
        finally:
            self._eof = True
            self._fail_pending()

    async def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        while chunk := await self._proc.stderr.read(65536):
            self._stderr += chunk
            del self._stderr[:-STDERR_TAIL]

    def _dispatch(self, message: Any) -> None:
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if method is None:
            request_id = message.get("id")
            future = self._pending.get(request_id) if isinstance(request_id, int) else None
            if future is None or future.done():
                return
            if "error" in message:
                error = message["error"] or {}
                future.set_exception(LSPError(f"{self.name}: {error.get('message', 'request failed')}"))
            else:
                future.set_result(message.get("result"))
        elif "id" in message:
            # answered from a task: the reader must keep reading while the reply waits for the pipe
            task = asyncio.get_running_loop().create_task(self._answer(message["id"], method, message.get("params")))
            self._answers.add(task)
            task.add_done_callback(self._answers.discard)
        elif method == "textDocument/publishDiagnostics":
            params = message.get("params") or {}
            uri = str(params.get("uri", ""))
            self._diagnostics[uri] = list(params.get("diagnostics") or [])
            self._diagnostic_versions[uri] = self._diagnostic_versions.get(uri, 0) + 1
            self._published.set()
            self._published = asyncio.Event()

    async def _answer(self, request_id: Any, method: str, params: Any) -> None:
        """Answer a server's request at once: servers block on some of these (e.g. progress creation)."""
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if method == "workspace/configuration":
            reply["result"] = [{} for _ in (params or {}).get("items") or []]
        elif method == "workspace/workspaceFolders":
            reply["result"] = [{"name": "workspace", "uri": file_uri(self.root)}]
        elif method in (
            "window/workDoneProgress/create",
            "client/registerCapability",
            "client/unregisterCapability",
            "window/showMessageRequest",
        ):
            reply["result"] = None
        elif method == "workspace/applyEdit":
            reply["result"] = {"applied": False}
        else:
            reply["error"] = {"code": METHOD_NOT_FOUND, "message": f"Unhandled method {method}"}
        with contextlib.suppress(LSPError):
            await self._send(reply)

    # --- documents ----------------------------------------------------------------------------------------

    async def open(self, path: str, text: str, language_id: str) -> None:
        """`textDocument/didOpen` at version 0 (forgetting the document's earlier diagnostics)."""
        uri = file_uri(path)
        self._diagnostics.pop(uri, None)
        document = {"uri": uri, "languageId": language_id, "version": 0, "text": text}
        await self.notify("textDocument/didOpen", {"textDocument": document})

    async def change(self, path: str, text: str, version: int) -> None:
        """`textDocument/didChange` with the whole text."""
        document = {"uri": file_uri(path), "version": version}
        await self.notify("textDocument/didChange", {"textDocument": document, "contentChanges": [{"text": text}]})

    async def close_document(self, path: str) -> None:
        uri = file_uri(path)
        self._diagnostics.pop(uri, None)
        await self.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    async def wait_for_diagnostics(
        self, path: str, timeout: float, *, wait_for_change: bool = False, settle: float = 0.5
    ) -> list[dict[str, Any]]:
        """The document's diagnostics as the server last published them (Mastra's `waitForDiagnostics`).

        With `wait_for_change`, the first publication after this call; otherwise the current ones, but an empty
        list is only believed after `settle` seconds without a non-empty one (servers publish ``[]`` first while
        still analysing). A server that supports pull diagnostics is asked instead. After `timeout` seconds:
        what there is (with `wait_for_change`, the diagnostics from before the call).
        """
        uri = file_uri(path)
        if self.server_capabilities.get("diagnosticProvider"):
            try:
                result = await self.request("textDocument/diagnostic", {"textDocument": {"uri": uri}}, timeout)
            except LSPError:
                return []
            items = list((result or {}).get("items") or [])
            self._diagnostics[uri] = items
            return items
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        initial, initial_version = self._diagnostics.get(uri), self._diagnostic_versions.get(uri)
        empty_since: float | None = None
        while (remaining := deadline - loop.time()) > 0:
            current = self._diagnostics.get(uri)
            if wait_for_change:
                if current is not None and self._diagnostic_versions.get(uri) != initial_version:
                    return current
            elif current is not None:
                if current:
                    return current
                empty_since = loop.time() if empty_since is None else empty_since
                if loop.time() - empty_since >= settle:
                    return current
                remaining = min(remaining, settle - (loop.time() - empty_since))
            if not self.alive:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._published.wait(), max(remaining, 0.001))
        return (initial or []) if wait_for_change else self._diagnostics.get(uri) or []
