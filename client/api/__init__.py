"""Keel's HTTP API: Mastra's server routes (`/api/...`) over the Temporal client and the storage read models,
wire-compatible with `@mastra/client-js`. Every route is a thin layer: a run started here is the same
`AgentRun` or workflow execution a Temporal client sees, and the API keeps no state of its own about a run.

    api = create_api(app, keel, storage)      # a FastAPI app; `keel serve` and `keel dev` run it on :4111
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fastapi import FastAPI

from keel.app import App
from keel.client.api import (
    agents,
    auth,
    codec,
    controllers,
    conversations,
    errors,
    logs,
    mcp,
    memory,
    metrics,
    observability,
    responses,
    time_travel,
    tools,
    vectors,
    workflow_time_travel,
    workflows,
    workspaces,
)
from keel.client.api.context import ApiContext
from keel.client.api.json_bodies import JsonBodyCheck
from keel.client.keel_client import KeelClient
from keel.protocol.settings import Settings
from keel.storage import Storage

API_PREFIX = "/api"


def create_api(
    app: App,
    keel: KeelClient,
    storage: Storage,
    *,
    api_keys: Mapping[str, frozenset[str]] | None = None,
    ui_origins: Sequence[str] = (),
) -> FastAPI:
    """The API for `app`; with `api_keys` (`auth.parse_keys`), every route needs a key with its scope.
    `ui_origins`: the Temporal UI's origins, allowed to call the codec routes from the browser."""
    api = FastAPI(
        title="Keel",
        description="Mastra's server routes on Temporal: agents, workflows, tools, memory and agent controllers.",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        **observability.fastapi_options(),
    )
    api.state.keel = ApiContext(app, keel, storage)
    errors.install(api)
    api.add_middleware(JsonBodyCheck)  # inside the keys' check: a request without one is refused first
    auth.install(api, api_keys or {})
    for module in (agents, workflows, tools, memory, controllers, responses, conversations, mcp, workspaces, vectors):
        api.include_router(module.router, prefix=API_PREFIX)
    api.include_router(time_travel.router, prefix=API_PREFIX)
    api.include_router(workflow_time_travel.router, prefix=API_PREFIX)
    api.include_router(observability.router, prefix=API_PREFIX)
    api.include_router(logs.router, prefix=API_PREFIX)
    api.include_router(metrics.router, prefix=API_PREFIX)
    api.include_router(controllers.channels_router, prefix=API_PREFIX)
    api.include_router(codec.router)
    codec.install_cors(api, ui_origins)  # outside the keys: a browser's preflight carries none
    return api


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def api_for_settings(app: App, keel: KeelClient, storage: Storage, settings: Settings) -> FastAPI:
    """The API as `keel serve` and `keel dev` run it: keys from `KEEL_API_KEYS`; an address other than loopback
    is refused without them (anyone who reaches it could run the agents)."""
    keys = auth.parse_keys(settings.api_keys)
    if not keys and settings.api_host not in LOOPBACK:
        raise auth.ApiKeysError(
            f"The HTTP API on {settings.api_host} needs API keys: set KEEL_API_KEYS "
            '(\'{"<key>": ["*"]}\'), or serve on 127.0.0.1'
        )
    ui = f"{settings.ui_port}"
    origins = [f"http://{host}:{ui}" for host in {settings.temporal_host, *LOOPBACK[:2]}]
    return create_api(app, keel, storage, api_keys=keys, ui_origins=origins)


__all__ = ["API_PREFIX", "api_for_settings", "create_api"]
