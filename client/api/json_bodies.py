"""What a JSON request body may hold, checked before any route reads it: valid Unicode, and a bounded nesting.

JSON can carry what nothing after the parser takes: a lone surrogate (`"\\ud800"`), which Python parses into a
string that cannot be encoded (pydantic's serializer, the payload converter and the storage then fail: an HTTP 500,
sometimes after a first write), and nesting past what pydantic's serializer walks (255 levels: a 500, or a run that
fails at its first step). Such a body gets a 400 here, before a route has done anything with it.

Cheap for the rest: a body is parsed again only when its bytes could hold either (a `\\uD8..`-`\\uDF..` escape, or
more than `MAX_DEPTH` opening brackets); a body that does not parse is left to FastAPI, which answers it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_DEPTH = 100
"""The deepest nesting of arrays and objects a request body may have."""

SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def body_problem(body: bytes) -> str | None:
    """Why this JSON body is refused, or None."""
    if SURROGATE_ESCAPE.search(body) is None and body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None  # not JSON that parses: FastAPI says so
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, str):
            if not _encodable(node):
                return f"a string holds a lone surrogate (not valid Unicode): {node[:40]!r}"
        elif isinstance(node, dict | list):
            if depth >= MAX_DEPTH:
                return f"nested more than {MAX_DEPTH} levels deep"
            items = [*node.keys(), *node.values()] if isinstance(node, dict) else node
            todo.extend((item, depth + 1) for item in items)
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class JsonBodyCheck:
    """ASGI middleware: a JSON body `body_problem` refuses gets a 400 (`{error}`); any other goes on unchanged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: let the app see it
                await self.app(scope, _replay([message]), send)
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        problem = body_problem(body)
        if problem is None:
            await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)
            return
        answer = json.dumps({"error": f"Invalid request body: {problem}"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return b"json" in value.lower()
    return False


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    """A `receive` that gives `messages`, then defers to `then` (a disconnect, when the app waits for one)."""
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive
