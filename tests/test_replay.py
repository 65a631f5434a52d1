"""Recorded histories replay with the current workflow code; a deliberately changed workflow does not."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from keel.worker import workflow_runner
from keel.workflows import DATA_CONVERTER, AgentRun
from tests.changed_workflow import ReorderedAgentRun
from tests.record_histories import SCENARIOS

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


def replayer(*workflows: type) -> Replayer:
    runner = workflow_runner(sandboxed=True)
    return Replayer(workflows=list(workflows), data_converter=DATA_CONVERTER, workflow_runner=runner)


def test_the_expected_histories_are_recorded() -> None:
    assert {p.stem for p in HISTORIES} == set(SCENARIOS)


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_recorded_history_replays_with_the_current_workflow(path: Path) -> None:
    await replayer(AgentRun).replay_workflow(load(path))


async def test_a_changed_workflow_fails_replay_with_a_nondeterminism_error() -> None:
    with pytest.raises(NondeterminismError):
        await replayer(ReorderedAgentRun).replay_workflow(load(HISTORIES[0]))
