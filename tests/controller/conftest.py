from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.client import Client

from keel import AgentController
from keel.client import KeelClient
from keel.storage import Storage
from keel.worker import build_worker
from tests.controller.apps import app, controller


@pytest.fixture
async def ctl(client: Client, storage: Storage, task_queue: str) -> AsyncIterator[AgentController]:
    """The test controller, with a worker for its app, bound to the test's storage and task queue."""
    async with bound_controller(client, storage, task_queue) as bound:
        yield bound


@asynccontextmanager
async def bound_controller(
    client: Client, storage: Storage, task_queue: str, **worker_options: Any
) -> AsyncIterator[AgentController]:
    """`ctl`, with options for its worker (`sandboxed=False` to patch a workflow module's limits)."""
    async with build_worker(client, app, storage, task_queue=task_queue, **worker_options):
        bound = AgentController.__new__(AgentController)
        bound.__dict__.update(controller.__dict__)
        bound._client = None
        await bound.init(KeelClient(client, task_queue=task_queue, app=app), storage)
        yield bound


async def collect(events: Any, until: str, limit: int = 500) -> list[dict[str, Any]]:
    found = []
    async for event in events:
        found.append(event)
        if event["type"] == until or len(found) >= limit:
            break
    return found
