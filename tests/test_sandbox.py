"""The sandbox is decided per workflow: a user's workflows run in it on a Keel worker, Keel's own opt out."""

from __future__ import annotations

import uuid

from temporalio import workflow
from temporalio.client import Client

from keel.storage import Storage
from keel.workflows import WORKFLOWS
from tests.apps import app as test_app
from tests.conftest import running_worker
from tests.user_workflows import WhereAmI


def test_keel_workflows_opt_out_of_the_sandbox_and_only_them() -> None:
    assert all(workflow._Definition.must_from_class(w).sandboxed is False for w in WORKFLOWS)
    assert workflow._Definition.must_from_class(WhereAmI).sandboxed is True


async def test_a_users_workflow_runs_sandboxed_on_a_worker_that_runs_keel_unsandboxed(
    client: Client, storage: Storage, task_queue: str
) -> None:
    async with running_worker(client, test_app, storage, task_queue, workflows=[WhereAmI], sandboxed=False) as keel:
        in_sandbox = await client.execute_workflow(WhereAmI.run, id=f"where-{uuid.uuid4()}", task_queue=task_queue)
        turn = await keel.result(await keel.start_run("multi", "steps=1"))
    assert in_sandbox is True
    assert turn.text == "done after 1 tool calls"
