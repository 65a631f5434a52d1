"""Keel's HTTP API: Mastra's server routes (`/api/...`) over the Temporal client and the storage read models,
wire-compatible with `@mastra/client-js`. Every route is a thin layer: a run started here is the same
`AgentRun` or workflow execution a Temporal client sees, and the API keeps no state of its own about a run.

    api = create_api(app, keel, storage)      # a FastAPI app; `keel serve` and `keel dev` run it on :4111
"""

from __future__ import annotations

from fastapi import FastAPI

from keel.app import App
from keel.client.api import agents, errors, memory, tools, workflows
from keel.client.api.context import ApiContext
from keel.client.keel_client import KeelClient
from keel.storage import Storage

API_PREFIX = "/api"


def create_api(app: App, keel: KeelClient, storage: Storage) -> FastAPI:
    api = FastAPI(
        title="Keel",
        description="Mastra's server routes on Temporal: agents, workflows, tools and memory.",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
    )
    api.state.keel = ApiContext(app, keel, storage)
    errors.install(api)
    for module in (agents, workflows, tools, memory):
        api.include_router(module.router, prefix=API_PREFIX)
    return api


__all__ = ["API_PREFIX", "create_api"]
