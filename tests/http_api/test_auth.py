"""API keys with scopes: without keys configured nothing is asked; with them, a request without a known key is
a 401, one whose key lacks the route's scope a 403, and the OpenAPI document stays open. Serving beyond
loopback without keys is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from keel.client.api import api_for_settings, auth, create_api
from keel.client.api.server import serving
from keel.protocol.settings import load_settings
from keel.storage import Storage
from tests.conftest import free_port, running_worker
from tests.http_api.apps import app
from tests.http_api.conftest import Api

KEYS = {"k-ops": frozenset({"*"}), "k-reader": frozenset({"stored-workflows:read", "agents:read"})}


@pytest.fixture
async def keyed(client: Client, storage: Storage, task_queue: str, client_js: Path) -> AsyncIterator[Api]:
    async with running_worker(client, app, storage, task_queue) as keel:
        async with serving(create_api(app, keel, storage, api_keys=KEYS), "127.0.0.1", free_port()) as url:
            yield Api(url, keel, storage)


async def test_keys_and_scopes_decide_who_may_do_what(keyed: Api) -> None:
    out = await keyed.js(
        """
        const { MastraClient } = await import("@mastra/client-js");
        const as = (key) => new MastraClient({ baseUrl: vars.url, retries: 0,
            headers: key ? { Authorization: `Bearer ${key}` } : {} });
        const status = async (f) => { try { await f(); return 200; } catch (e) { return e.status; } };
        return {
            anonymous: await status(() => as(null).listAgents()),
            wrongKey: await status(() => as("nope").listAgents()),
            readerReads: await status(() => as("k-reader").listDynamicWorkflows()),
            readerWrites: await status(() => as("k-reader").upsertDynamicWorkflow(
                {id: "x", inputSchema: {}, outputSchema: {}, graph: [{type: "tool", id: "t", toolId: "double"}]})),
            readerRuns: await status(() => as("k-reader").getAgent("writer").generate("hi")),
            opsRuns: await status(() => as("k-ops").getAgent("writer").generate("hi")),
        };
    """,
        url=keyed.url,
    )
    assert out == {
        "anonymous": 401, "wrongKey": 401, "readerReads": 200, "readerWrites": 403, "readerRuns": 403, "opsRuns": 200,
    }  # fmt: skip
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{keyed.url}/api/openapi.json")).status_code == 200
        denied = await http.post(f"{keyed.url}/api/stored/workflows", headers={"x-api-key": "k-reader"}, json={})
    assert denied.status_code == 403 and denied.json() == {
        "error": "Forbidden: this API key lacks the scope stored-workflows:write"
    }


def test_an_api_beyond_loopback_needs_keys(storage: Storage) -> None:
    with pytest.raises(auth.ApiKeysError, match="needs API keys"):
        api_for_settings(app, None, storage, load_settings(api_host="0.0.0.0"))  # type: ignore[arg-type]
    with pytest.raises(auth.ApiKeysError, match="JSON object"):
        auth.parse_keys('["not", "an", "object"]')
