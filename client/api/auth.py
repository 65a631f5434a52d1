"""Optional API keys with scopes. Off when no keys are configured (the default, for a server on loopback);
with keys, every route but the OpenAPI document needs `Authorization: Bearer <key>` (401 without a known key)
and the scope of what it does (403 without it):

    KEEL_API_KEYS='{"k-ops": ["*"], "k-reader": ["stored-workflows:read", "agents:read"]}'

A scope is `<resource>:read` (GET) or `<resource>:write` (anything else), the resource being the first part of
the path: `agents` (and the OpenAI-compatible `/api/v1/...`), `workflows`, `stored-workflows` (for
`/api/stored/workflows`), `tools`, `memory`, `workspaces`, `vectors` (and `/api/vector/...`), `mcp` (every MCP
message is a POST: a client needs `mcp:write`), `observability` and `telemetry` (the traces kept in storage),
`logs` (the log records kept), `agent-controllers` (for `/api/agent-controller/...`, and the channel webhooks
`/api/agent-controllers/...`, which a platform then calls with the key in `x-api-key`), and `payloads:read` for the
codec (`/codec/...`); `*` is every scope, `<resource>:*` both of one resource."""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Mapping

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from keel.client.api.errors import body
from keel.client.errors import KeelClientError

OPEN_PATHS = ("/api/openapi.json", "/api/docs")


class ApiKeysError(KeelClientError):
    """KEEL_API_KEYS that cannot be read, or an API served beyond loopback without keys."""


def parse_keys(raw: str | None) -> dict[str, frozenset[str]]:
    """`{"<key>": ["scope", ...]}` as JSON; empty for none."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as err:
        raise ApiKeysError(f"KEEL_API_KEYS must be a JSON object of key -> scopes: {err}") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, list) and all(isinstance(s, str) for s in v)
        for k, v in value.items()
    ):
        raise ApiKeysError('KEEL_API_KEYS must be a JSON object like {"<key>": ["agents:read", ...]}')
    return {k: frozenset(v) for k, v in value.items()}


def required_scope(method: str, path: str) -> str:
    parts = [p for p in path.removeprefix("/api").split("/") if p]
    resource = parts[0] if parts else ""
    if resource == "stored" and len(parts) > 1:
        resource = f"stored-{parts[1]}"
    if path.startswith("/codec"):  # the Temporal UI's and CLI's codec calls: they read stored values
        return "payloads:read"
    if resource in ("agent-controller", "agent-controllers"):  # sessions, and the channel webhooks
        resource = "agent-controllers"
    if resource == "vector":  # a store's routes (`/api/vector/:vectorName/...`) and the list (`/api/vectors`)
        resource = "vectors"
    if resource == "v1":  # the OpenAI-compatible responses and conversations run and read agents, as Mastra's
        resource = "agents"
    return f"{resource}:{'read' if method in ('GET', 'HEAD', 'OPTIONS') else 'write'}"


def allows(scopes: frozenset[str], scope: str) -> bool:
    resource = scope.split(":", 1)[0]
    return "*" in scopes or scope in scopes or f"{resource}:*" in scopes


def install(api: FastAPI, keys: Mapping[str, frozenset[str]]) -> None:
    if not keys:
        return

    @api.middleware("http")
    async def authenticate(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path
        guarded = path.startswith("/api") or (path.startswith("/codec") and request.method != "OPTIONS")
        if not guarded or path.startswith(OPEN_PATHS):
            return await call_next(request)
        given = request.headers.get("authorization", "")
        token = given[7:].strip() if given.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
        scopes = next((s for k, s in keys.items() if token and hmac.compare_digest(k, token)), None)
        if scopes is None:
            return JSONResponse(body("Unauthorized: a valid API key is required (Authorization: Bearer <key>)"), 401)
        scope = required_scope(request.method, path)
        if not allows(scopes, scope):
            return JSONResponse(body(f"Forbidden: this API key lacks the scope {scope}"), 403)
        return await call_next(request)
