"""The HTTP API served in-process on a free port, over a real worker and dev server, and the real
`@mastra/client-js` 1.47 (installed by npm on first use into tests/http_api/js) to drive it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from keel.client import KeelClient
from keel.client.api import create_api
from keel.client.api.server import serving
from keel.storage import Storage
from tests.conftest import free_port, npm_installed, running_worker
from tests.http_api.apps import app

JS = Path(__file__).parent / "js"


@pytest.fixture(scope="session")
def client_js() -> Path:
    """tests/http_api/js with its node_modules (`npm ci` the first time)."""
    return npm_installed(JS, "@mastra/client-js", "the HTTP API is tested with the real @mastra/client-js")


@dataclass
class Api:
    url: str
    keel: KeelClient
    storage: Storage

    async def js(self, body: str, *, timeout: float = 60, **values: Any) -> Any:
        """Run `body` (an async function body that returns a JSON-able value) against the API with an
        unmodified `MastraClient` named `client`; its return value. `values` are the script's `vars`, and
        `chunksOf(response)` collects an agent stream's chunks."""
        script = (
            'import { MastraClient } from "@mastra/client-js";\n'
            f"const client = new MastraClient({{ baseUrl: {json.dumps(self.url)} }});\n"
            f"const vars = {json.dumps(values)};\n"
            "async function chunksOf(response) {\n"
            "  const chunks = [];\n"
            "  await response.processDataStream({ onChunk: async (chunk) => { chunks.push(chunk); } });\n"
            "  return chunks;\n"
            "}\n"
            f"const result = await (async () => {{\n{body}\n}})();\n"
            "process.stdout.write(JSON.stringify(result ?? null));\n"
        )
        proc = await asyncio.create_subprocess_exec(
            "node", "--input-type=module", "-e", script,
            cwd=JS,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        finally:
            if proc.returncode is None:  # timed out: no client left holding a stream open
                proc.kill()
                await proc.wait()
        if proc.returncode != 0:
            raise AssertionError(f"node failed ({proc.returncode}):\n{err.decode()[-3000:]}")
        return json.loads(out.decode() or "null")


@pytest.fixture
async def api(client: Client, storage: Storage, task_queue: str, client_js: Path) -> AsyncIterator[Api]:
    async with running_worker(client, app, storage, task_queue) as keel:
        async with serving(create_api(app, keel, storage), "127.0.0.1", free_port()) as url:
            yield Api(url, keel, storage)
