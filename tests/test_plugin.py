"""Keel in a user's own Temporal client and worker, as docs/your-app.md shows: one `KeelPlugin` on the client."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from keel import KeelClient, KeelPlugin
from keel.client.devserver import DevServer
from tests.apps import app as test_app
from tests.user_workflows import WhereAmI


async def test_a_plugin_on_the_client_gives_its_workers_keel_and_keeps_the_users_workflows_sandboxed(
    dev_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_queue: str
) -> None:
    monkeypatch.setenv("KEEL_STORAGE_URL", f"sqlite:///{tmp_path / 'own.db'}")
    plugin = KeelPlugin(test_app, sandbox_keel_workflows=False)
    client = await Client.connect(dev_server.cfg.address, plugins=[plugin])
    try:
        async with Worker(client, task_queue=task_queue, workflows=[WhereAmI]):
            keel = KeelClient(client, task_queue=task_queue, app=test_app)
            turn = await keel.result(await keel.start_run("multi", "steps=2"))
            in_sandbox = await client.execute_workflow(WhereAmI.run, id=f"w-{uuid.uuid4()}", task_queue=task_queue)
    finally:
        await plugin.aclose()
    assert turn.text == "done after 2 tool calls"
    assert in_sandbox is True
    assert (tmp_path / "own.db").exists()  # the plugin opened and migrated the storage of KEEL_STORAGE_URL
