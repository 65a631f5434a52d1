"""The codec server: `temporal workflow result --codec-endpoint` (and the UI) show a run's values kept in the payload
store by reference, cut to a readable size; behind the API's keys; CORS for the UI's origin only."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from keel.client import KeelClient
from keel.client.api import create_api
from keel.client.api.codec import CUT_CHARS
from keel.client.api.server import serving
from keel.client.connection import connect
from keel.client.devserver import DevServer, DevServerConfig, wait_for_ui
from keel.storage import Storage
from tests.apps import app as test_app
from tests.conftest import free_port, running_worker
from tests.test_phoenix import CHROMIUM_FLAGS, SCREENSHOTS, chromium
from tests.test_temporal_cli import TEMPORAL

UI = "http://127.0.0.1:8233"
KEYS = {"k-codec": frozenset({"payloads:read"}), "k-agents": frozenset({"agents:read"})}
SIZE = 900 * 1024


@pytest.fixture
async def served(client: Client, storage: Storage, task_queue: str) -> AsyncIterator[tuple[str, KeelClient]]:
    async with running_worker(client, test_app, storage, task_queue) as keel:
        api = create_api(test_app, keel, storage, api_keys=KEYS, ui_origins=[UI])
        async with serving(api, "127.0.0.1", free_port()) as url:
            yield url, keel


async def cli(dev_server: DevServer, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        TEMPORAL, *args, "--address", dev_server.cfg.address,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


async def test_the_cli_prints_a_stored_result_through_the_codec(
    served: tuple[str, KeelClient], dev_server: DevServer
) -> None:
    url, keel = served
    run_id = await keel.start_run("bulky", f"parallel=3 size={SIZE}")
    await keel.result(run_id)
    code, out, _ = await cli(dev_server, "workflow", "result", "-w", run_id, "-o", "json")
    assert code == 0 and "claimData" in out and "saw 3 results" not in out  # without the codec: references

    codec = ["--codec-endpoint", f"{url}/codec", "--codec-auth", "Bearer k-codec"]
    code, out, err = await cli(dev_server, "workflow", "result", "-w", run_id, "-o", "json", *codec)
    assert code == 0, err
    result = json.loads(out)["result"]
    assert result["text"] == f"saw 3 results of [{SIZE}] bytes"
    shown = [r["payload"]["result"] for r in result["toolResults"]]
    assert shown == [shown[0]] * 3 and shown[0].endswith(f"… [cut: {SIZE:,} characters in full]")
    assert len(shown[0]) < CUT_CHARS + 100 and "claimData" not in out


async def test_decode_needs_a_key_with_payloads_read_and_answers_cors_for_the_ui_only(
    served: tuple[str, KeelClient],
) -> None:
    url, _ = served
    plain = {
        "metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
        "data": base64.b64encode(b'"hi"').decode(),
    }
    body = {"payloads": [plain]}
    async with httpx.AsyncClient(base_url=url) as http:
        assert (await http.post("/codec/decode", json=body)).status_code == 401
        refused = await http.post("/codec/decode", json=body, headers={"Authorization": "Bearer k-agents"})
        assert refused.status_code == 403 and "payloads:read" in refused.json()["error"]
        ok = await http.post("/codec/decode", json=body, headers={"Authorization": "Bearer k-codec", "Origin": UI})
        assert ok.status_code == 200 and ok.json() == {"payloads": [plain]}  # small inline values: unchanged
        assert ok.headers["access-control-allow-origin"] == UI

        preflight = {"Origin": UI, "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "content-type,x-namespace,authorization"}  # fmt: skip
        answered = await http.options("/codec/decode", headers=preflight)
        assert answered.status_code == 204 and answered.headers["access-control-allow-origin"] == UI
        assert answered.headers["access-control-allow-headers"] == "content-type,x-namespace,authorization"
        elsewhere = await http.options("/codec/decode", headers={**preflight, "Origin": "http://evil.example"})
        assert elsewhere.status_code == 403 and "access-control-allow-origin" not in elsewhere.headers

        bad = await http.post("/codec/decode", content=b"not json", headers={"Authorization": "Bearer k-codec"})
        assert bad.status_code == 400 and "payloads" in bad.json()["error"]


async def test_a_dev_server_started_with_a_codec_gives_it_to_its_ui(tmp_path: Path) -> None:
    """`keel dev` starts the UI with its API's codec: the UI's settings (what the browser reads) name it."""
    cfg = DevServerConfig(
        host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp_path, codec_endpoint=f"{UI}/codec"
    )
    server = await DevServer(cfg).start(reuse=False)
    try:
        await wait_for_ui(cfg)
        async with httpx.AsyncClient() as http:
            settings = (await http.get(f"{cfg.ui_url}/api/v1/settings")).json()
        assert settings["Codec"]["Endpoint"] == f"{UI}/codec"
    finally:
        server.stop()


@pytest.mark.timeout(300)
async def test_the_temporal_ui_in_chromium_shows_a_stored_result_through_the_codec(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    """The Temporal UI of a dev server started with Keel's codec (as `keel dev` starts it), in headless Chromium:
    the run's result, kept in the payload store by reference, is shown decoded (cut to a readable size) on the
    run's page, and the screenshot is left in `SCREENSHOTS` to look at."""
    browser = chromium()
    api_port = free_port()
    cfg = DevServerConfig(
        host="127.0.0.1",
        port=free_port(),
        ui_port=free_port(),
        state_dir=tmp_path / "temporal",
        codec_endpoint=f"http://127.0.0.1:{api_port}/codec",
    )
    server = await DevServer(cfg).start(reuse=False)
    try:
        client = await connect(cfg.address)
        async with running_worker(client, test_app, storage, task_queue) as keel:
            api = create_api(test_app, keel, storage, ui_origins=[cfg.ui_url])
            async with serving(api, "127.0.0.1", api_port):
                run_id = await keel.start_run("bulky", f"parallel=3 size={SIZE}")
                await keel.result(run_id)
                await wait_for_ui(cfg)
                page = f"{cfg.ui_url}/namespaces/default/workflows/{run_id}"
                shot = SCREENSHOTS / "temporal-ui-codec.png"
                shot.parent.mkdir(parents=True, exist_ok=True)
                shot.unlink(missing_ok=True)
                common = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}",
                          "--window-size=1600,2400", "--virtual-time-budget=15000"]  # fmt: skip
                dom = ""
                for action in ("--dump-dom", f"--screenshot={shot}"):
                    done = await asyncio.to_thread(
                        subprocess.run, [*common, action, page], capture_output=True, text=True, timeout=120
                    )
                    assert done.returncode == 0, done.stderr[-2000:]
                    dom = dom or done.stdout
    finally:
        server.stop()
    assert run_id in dom
    assert f"saw 3 results of [{SIZE}] bytes" in dom  # the result, decoded by the codec in the browser
    assert "claimData" not in dom  # not the reference the history holds
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
