"""Recorded histories replay with the current workflow code, in the sandbox and without it, whatever the
replaying worker's run shape; a deliberately changed workflow does not replay."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from keel.client.converter import data_converter
from keel.plugin import KeelPlugin, sandboxed_runner
from keel.storage import DirectoryBlobStore
from keel.workflows import options as run_options
from keel.workflows.contracts import ALL_SHAPES, RunShape
from tests.changed_workflow import ReorderedAgentRun
from tests.record_histories import PAYLOADS, SCENARIOS, TASK_QUEUE, WORKFLOW_IDS, options_of

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


@pytest.fixture(autouse=True)
def recorded_payloads(payload_store: DirectoryBlobStore) -> None:
    """The payloads the histories hold by reference, in the store the replaying worker reads."""
    for blob in PAYLOADS.glob("*/*"):
        kept = payload_store.root / blob.relative_to(PAYLOADS)
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(blob, kept)


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(WORKFLOW_IDS.get(path.stem, path.stem), path.read_text())


def test_the_expected_histories_are_recorded() -> None:
    assert {p.stem for p in HISTORIES} == set(SCENARIOS)


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_recorded_history_replays_with_the_current_workflow(path: Path, sandboxed: bool) -> None:
    replayer = Replayer(workflows=[], plugins=[KeelPlugin(sandbox_keel_workflows=sandboxed)])
    await replayer.replay_workflow(load(path))


@pytest.mark.parametrize("worker_shape", ALL_SHAPES, ids=lambda s: s.marker().split(":")[1])
@pytest.mark.parametrize(
    "path",
    [p for p in HISTORIES if "_shape_" in p.stem or p.stem.endswith(("_pinned", "_gen2", "_gen3"))],
    ids=lambda p: p.stem,
)
async def test_a_worker_with_other_run_shape_settings_replays_a_run_as_it_began(
    path: Path, worker_shape: RunShape
) -> None:
    run_options.register(TASK_QUEUE, options_of(worker_shape))
    try:
        await Replayer(workflows=[], plugins=[KeelPlugin()]).replay_workflow(load(path))
    finally:
        run_options.unregister(TASK_QUEUE, run_options.options_for(TASK_QUEUE))


async def test_a_changed_workflow_fails_replay_with_a_nondeterminism_error() -> None:
    replayer = Replayer(
        workflows=[ReorderedAgentRun], data_converter=data_converter(None), workflow_runner=sandboxed_runner()
    )
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(load(HISTORIES[0]))


@pytest.mark.parametrize("name", ["session_late_waiting_gen4", "session_pending_overflow_gen7"])
async def test_a_session_whose_older_worker_answered_a_waiting_send_at_once_replays(name: str) -> None:
    """A client newer than the worker sends `wait: true`; the older worker ignores it and answers at once (the
    client then asks `settled`). A newer worker replaying that execution must answer at once too: only sessions
    of generation 8 wait in the send. The recorded sends, each given `wait: true`, replay."""
    history = json.loads((Path(__file__).parent / "histories" / f"{name}.json").read_text())
    waited = 0
    for event in history["events"]:
        request = event.get("workflowExecutionUpdateAcceptedEventAttributes", {}).get("acceptedRequest", {})
        if request.get("input", {}).get("name") != "send_message":
            continue
        [payload] = request["input"]["args"]["payloads"]
        sent = json.loads(base64.b64decode(payload["data"]))
        payload["data"] = base64.b64encode(json.dumps({**sent, "wait": True}).encode()).decode()
        waited += 1
    assert waited, f"{name} holds no send"
    replayed = WorkflowHistory.from_json(WORKFLOW_IDS[name], json.dumps(history))
    await Replayer(workflows=[], plugins=[KeelPlugin()]).replay_workflow(replayed)
