"""Time travel: `keel reset RUN --to-step N` runs step N and every later step again in a new execution (Temporal's
reset), the thread rewound to before step N and the old execution kept in the run's history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Replayer

from keel.client import KeelClient
from keel.client.devserver import DevServer
from keel.client.reset import ResetRefused, reset_run
from keel.plugin import KeelPlugin
from keel.storage import Storage, StoredMessage, open_storage
from tests.apps import app as test_app
from tests.conftest import running_worker
from tests.test_agent_run import wait_for_pending
from tests.test_cli import Keel
from tests.test_cli_imports import KEEL_NOT_FOR_CLIENT_COMMANDS, LIBRARIES_RUN_ONLY, imported, loaded, plain_env
from tests.test_continue_as_new import server_suggesting_continue_as_new

FIVE_STEPS = [line for n in range(1, 6) for line in (f"model {n}", f"tool {n}")]
"""tally.log of one `tally` run: each step's model call, then its tool."""


def ledger(data_dir: Path) -> list[str]:
    return (data_dir / "tally.log").read_text().splitlines()


async def five_steps(keel: KeelClient, thread_id: str | None = None) -> str:
    run_id = await keel.start_run("tally", "count to five", thread_id=thread_id)
    result = await keel.result(run_id)
    assert result.steps == 5 and result.text == "step 5"
    return run_id


async def test_a_finished_five_step_run_reset_to_step_3_runs_steps_3_to_5_again_in_a_new_execution(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    keel = Keel(dev_server, task_queue, tmp_path, data_dir)
    async with running_worker(client, test_app, storage, task_queue) as k:
        run_id = await five_steps(k)
        assert ledger(data_dir) == FIVE_STEPS
        before, _ = await storage.list_messages(run_id)
        old = (await client.get_workflow_handle(run_id).describe()).run_id

        code, out, err = await keel("reset", run_id, "--to-step", "3", "--reason", "try steps 3-5 again")
        assert code == 0, err
        assert f"run {run_id} reset to step 3 of 5" in out and f"(execution {old} stays" in out
        assert "steps 3-5 again" in out and "6 messages of those steps removed" in out
        assert '<- tally: {"step": 3}' in out and "retrying" not in out  # run again on purpose: no retries
        assert out.splitlines()[-1] == f"run {run_id} completed: finishReason=tool-calls steps=5"

        # The tool ledger: steps 1 and 2 ran once, 3 to 5 twice (their model calls and their tools).
        assert ledger(data_dir) == [*FIVE_STEPS, "model 3", "tool 3", "model 4", "tool 4", "model 5", "tool 5"]
        result = await k.result(run_id)
        assert result.steps == 5 and [r.payload.result for r in result.tool_results] == [
            {"step": n} for n in range(1, 6)
        ]

    # The thread: what steps 1 and 2 wrote, untouched; then steps 3 to 5, written again.
    after, _ = await storage.list_messages(run_id)
    assert [m.id for m in after] == [m.id for m in before]
    kept = [m.id for m in before[:5]]
    assert kept == [f"{run_id}-m1", f"{run_id}-m2", f"{run_id}-s1-call_1", f"{run_id}-m3", f"{run_id}-s2-call_2"]
    assert after[:5] == before[:5]
    assert all(a.created_at > before[-1].created_at for a in after[5:])

    # Temporal's own reset: the new execution's history shows it, the old one stays, completed, pointing to it.
    new = await client.get_workflow_handle(run_id).describe()
    assert new.run_id != old and new.status == WorkflowExecutionStatus.COMPLETED
    history = await client.get_workflow_handle(run_id, run_id=new.run_id).fetch_history()
    [failed] = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    reset = failed.workflow_task_failed_event_attributes
    assert reset.cause == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW
    assert (reset.base_run_id, reset.new_run_id, reset.failure.message) == (old, new.run_id, "try steps 3-5 again")
    base = await client.get_workflow_handle(run_id, run_id=old).describe()
    assert base.status == WorkflowExecutionStatus.COMPLETED
    assert base.raw_description.workflow_extended_info.reset_run_id == new.run_id
    # The new execution replays with the current workflow code.
    await Replayer(workflows=[], plugins=[KeelPlugin()]).replay_workflow(history)


async def test_bad_step_numbers_and_unknown_runs_are_one_line_errors_with_exit_code_2_and_change_nothing(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    keel = Keel(dev_server, task_queue, tmp_path, data_dir)
    async with running_worker(client, test_app, storage, task_queue) as k:
        run_id = await five_steps(k)
    before, _ = await storage.list_messages(run_id)
    for step, message in [
        ("6", f"Cannot reset run '{run_id}' to step 6: it has taken 5 steps"),
        ("0", f"Cannot reset run '{run_id}' to step 0: steps are numbered from 1"),
    ]:
        code, out, err = await keel("reset", run_id, "--to-step", step)
        assert (code, out, err) == (2, "", f"error: {message}\n")
    code, _, err = await keel("reset", "run-none", "--to-step", "1")
    assert (code, err) == (2, "error: Run 'run-none' not found\n")
    code, _, err = await keel("reset", run_id, "--to-step", "three")
    assert code == 2 and "--to-step: invalid int value: 'three'" in err
    code, _, err = await keel("reset", run_id)
    assert code == 2 and "the following arguments are required: --to-step" in err
    assert (await storage.list_messages(run_id))[0] == before
    assert ledger(data_dir) == FIVE_STEPS
    assert len([e async for e in client.list_workflows(f"WorkflowId='{run_id}'")]) == 1


async def test_reset_to_step_1_runs_the_whole_turn_again_under_the_same_run_id(
    client: Client, dev_server: DevServer, storage: Storage, task_queue: str, tmp_path: Path, data_dir: Path
) -> None:
    keel = Keel(dev_server, task_queue, tmp_path, data_dir)
    async with running_worker(client, test_app, storage, task_queue) as k:
        run_id = await five_steps(k)
        code, out, err = await keel("reset", run_id, "--to-step", "1", "--json")
        assert code == 0, err
        reset = json.loads(out)
        assert (reset["step"], reset["steps"], reset["forgottenMessages"]) == (1, 5, 10)  # all but the user's
        assert (await k.result(run_id)).text == "step 5"
    assert ledger(data_dir) == FIVE_STEPS * 2
    messages, _ = await storage.list_messages(run_id)
    assert len(messages) == 11 and messages[0].content == "count to five"
    assert len([e async for e in client.list_workflows(f"WorkflowId='{run_id}'")]) == 2


async def test_a_run_waiting_for_approval_is_reset_and_its_old_execution_terminated_by_the_reset(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as k:
        run_id = await k.start_run("ledger", "entry-1")
        [call_id] = await wait_for_pending(k, run_id)
        old = (await client.get_workflow_handle(run_id).describe()).run_id
        reset = await reset_run(k, storage, run_id, 1, reason="ask again")
        assert await wait_for_pending(k, run_id) == [call_id]  # the new execution asks again
        base = await client.get_workflow_handle(run_id, run_id=old).describe()
        assert base.status == WorkflowExecutionStatus.TERMINATED
        history = await client.get_workflow_handle(run_id, run_id=old).fetch_history()
        end = history.events[-1].workflow_execution_terminated_event_attributes
        assert end.reason == "ask again"
        assert reset.base_execution == old and reset.execution != old
        await client.get_workflow_handle(run_id).terminate("test cleanup")
    assert not (data_dir / "ledger.log").exists()


async def test_a_step_after_an_approval_runs_again_on_the_approval_given_and_its_approved_tool_does_not(
    client: Client, storage: Storage, task_queue: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEL_TEST_TOOL_SECONDS", "0")
    async with running_worker(client, test_app, storage, task_queue) as k:
        run_id = await k.start_run("ledger", "entry-1")
        [call_id] = await wait_for_pending(k, run_id)
        await k.approve(run_id, call_id)
        assert (await k.result(run_id)).text == "ledger: {'lines': 1}"
        # Step 2 is the model step after the approved tool (which ran in the same activity, before it).
        reset = await reset_run(k, storage, run_id, 2)
        assert (await k.result(run_id)).text == "ledger: {'lines': 1}"
        assert await k.pending_tool_calls(run_id) == []
    # The approving update came after the reset point: Temporal applied it again to the new execution.
    history = await client.get_workflow_handle(run_id, run_id=reset.execution).fetch_history()
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED in [e.event_type for e in history.events]
    assert (data_dir / "ledger.log").read_text().splitlines() == [f"{run_id}/{call_id} entry-1"]


async def test_a_run_whose_thread_went_on_is_not_reset_but_the_threads_latest_run_is(
    client: Client, storage: Storage, task_queue: str, data_dir: Path
) -> None:
    async with running_worker(client, test_app, storage, task_queue) as k:
        first = await five_steps(k, thread_id="t-reset")
        second = await five_steps(k, thread_id="t-reset")
        went_on = rf"thread 't-reset' went on after it \(11 later messages, of {second}\)"
        with pytest.raises(ResetRefused, match=went_on):
            await reset_run(k, storage, first, 3)
        other = await client.start_workflow("Other", id=f"other-{task_queue}", task_queue=f"{task_queue}-none")
        with pytest.raises(ResetRefused, match=f"'{other.id}' is a Other execution, not an agent run"):
            await reset_run(k, storage, other.id, 1)
        await other.terminate("test cleanup")
        await reset_run(k, storage, second, 4)
        assert (await k.result(second)).steps == 5
    assert ledger(data_dir)[20:] == ["model 4", "tool 4", "model 5", "tool 5"]


async def test_a_step_before_a_continue_as_new_is_reset_in_the_execution_that_ran_it(
    storage: Storage, task_queue: str, tmp_path: Path
) -> None:
    async with server_suggesting_continue_as_new(tmp_path) as client:
        async with running_worker(client, test_app, storage, task_queue) as k:
            run_id = await k.start_run("multi", "steps=20")
            assert (await k.result(run_id)).steps == 21
            executions = [e.run_id async for e in client.list_workflows(f"WorkflowId='{run_id}'")]
            assert len(executions) == 2
            reset = await reset_run(k, storage, run_id, 2)
            result = await k.result(run_id)
    assert (reset.base_execution, reset.steps, reset.forgotten) == (executions[-1], 21, 39)
    assert result.text == "done after 20 tool calls" and result.steps == 21
    assert len((await storage.list_messages(run_id))[0]) == 42


async def test_a_run_running_a_step_is_not_reset(client: Client, storage: Storage, task_queue: str) -> None:
    keel = KeelClient(client, task_queue=task_queue, app=test_app)  # no worker: its first step never ends
    run_id = await keel.start_run("tally", "count")
    with pytest.raises(ResetRefused, match=r"is running a step: reset it once it has finished or waits for approval"):
        await reset_run(keel, storage, run_id, 1)
    await client.get_workflow_handle(run_id).terminate("test cleanup")


async def test_forgetting_steps_deletes_their_messages_and_stored_answers_and_nothing_else(store_url: str) -> None:
    from datetime import UTC, datetime

    from keel.storage import StepAnswer

    store = open_storage(store_url)
    await store.init()
    try:
        await store.create_thread("t", "r")
        at = datetime.now(UTC)
        kept, later = (
            [StoredMessage(id=i, thread_id="t", resource_id="r", role="user", content=i, run_id="run", created_at=at)]
            for i in ("run-m1", "run-m2")
        )
        await store.write("run", messages=kept, answer=StepAnswer("run-m1", {"text": "one"}))
        await store.write("run", messages=later, answer=StepAnswer("run-m2", {"text": "two"}))
        await store.begin_step("run", tool_ids=["run-s2-c"])
        assert await store.forget_steps("run", ["run-m2", "run-s2-c", "run-m2"]) == 1
        assert await store.forget_steps("run", []) == 0
        assert [m.id for m in (await store.list_messages("t"))[0]] == ["run-m1"]
        assert (await store.begin_step("run", answer_id="run-m1")).answer == {"text": "one"}
        assert (await store.begin_step("run", answer_id="run-m2")).answer is None
        assert (await store.begin_step("run", tool_ids=["run-s2-c"])).attempts == {"run-s2-c": 1}
    finally:
        await store.close()


def test_keel_reset_imports_no_app_workspace_http_or_worker_code(
    dev_server: DevServer, storage: Storage, tmp_path: Path
) -> None:
    assert hasattr(storage, "path")
    env = plain_env(KEEL_TEMPORAL_ADDRESS=dev_server.cfg.address, KEEL_STORAGE_URL=f"sqlite:///{storage.path}")
    modules = imported(["reset", "run-none", "--to-step", "1"], env, tmp_path, 2)
    assert loaded(modules, LIBRARIES_RUN_ONLY | KEEL_NOT_FOR_CLIENT_COMMANDS) == []
