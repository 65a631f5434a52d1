"""The `@mastra/client-js` agent signal calls (tests/http_api/js/signal_calls.mjs: `sendSignal` waking an idle
thread, into a run while it pauses, by its run id and by its thread, a notification and a state signal, an idle
thread's signal discarded and persisted, and the signals refused) answered by Keel as Mastra's own server answers
them, and heard by the agent as Mastra's agent hears them: Mastra's answers, recorded by
bench/mastra/signal_http_record.mjs with the same scripted agent, are tests/fixtures/mastra_signal_http.json.

Keel differs on purpose where `KEEL_STATUS` and `INVALID_BODY` say; of signals sent while its tool runs, the run's
last answer hears what Mastra's does, and one earlier answer may precede it (the last test says why)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import Client

from keel.app import Agent, App, ToolContext, tool
from keel.client.api import create_api
from keel.client.api.server import serving
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from keel.storage import Storage
from tests.conftest import free_port, running_worker
from tests.http_api.conftest import Api

ROOT = Path(__file__).resolve().parents[2]
CALLS = ROOT / "tests" / "http_api" / "js" / "signal_calls.mjs"
MASTRA: dict[str, Any] = json.loads((ROOT / "tests" / "fixtures" / "mastra_signal_http.json").read_text())["calls"]

KEEL_STATUS = {"ended_run": 409, "unknown_run": 404}
"""Mastra's server answers a signal for a run that has ended, or that it never ran, with a 500 ("No active agent
run found for signal target"); Keel with the caller's 409 (the run is over) or 404 (no such run)."""

INVALID_BODY = ("unknown_type", "no_target", "no_contents")
"""Mastra's zod and Keel's pydantic both refuse these bodies as "Invalid request body", each with its own issues
(zod names none for a body that matches neither of its target shapes)."""


class PauseInput(BaseModel):
    seconds: float


@tool("pause")
async def pause(args: PauseInput, ctx: ToolContext) -> dict[str, float]:
    """Wait a while, then say how long."""
    await asyncio.sleep(args.seconds)
    return {"paused": args.seconds}


def _listener_script(request: ModelRequest) -> ModelResponse:
    """The recording's script: "pause" -> `pause` for 1.5 s; anything else -> every user message of the thread."""
    if last_user_text(request) == "pause" and not tool_results_since_last_user(request):
        return ModelResponse(tool_calls=[ModelToolCall(id="pause-1", name="pause", args={"seconds": 1.5})])
    heard = []
    for message in request.messages:
        if message.role == "user":
            content = message.content
            heard.append(content if isinstance(content, str) else " ".join(p.text for p in content if p.type == "text"))
    return ModelResponse(text="heard: " + " | ".join(heard))


listener = Agent(id="listener", model=ScriptedModel(_listener_script, name="listener"), tools=(pause,))
app = App(agents={listener.id: listener})


def _same_invalid_body(keel: dict[str, Any], mastra: dict[str, Any]) -> None:
    assert keel["status"] == mastra["status"] == 400
    assert keel["body"]["error"] == mastra["body"]["error"] == "Invalid request body"
    assert keel["body"]["issues"] and mastra["body"]["issues"] == [{"field": "root", "message": "Invalid input"}]


def assert_answers_as_mastra(out: dict[str, Any]) -> None:
    """Every answer but `heard_active` (see the last test)."""
    assert list(out) == list(MASTRA)
    for label, mastra in MASTRA.items():
        keel = out[label]
        if label == "heard_active":
            continue
        if label in KEEL_STATUS:
            assert mastra["status"] == 500, label
            assert keel["status"] == KEEL_STATUS[label] and keel["body"]["error"], (label, keel)
        elif label in INVALID_BODY:
            _same_invalid_body(keel, mastra)
        else:
            assert keel == mastra, label


async def _signal_calls(client: Client, storage: Storage, task_queue: str) -> dict[str, Any]:
    thread_id = f"t-{uuid.uuid4()}"
    async with running_worker(client, app, storage, task_queue) as keel:
        async with serving(create_api(app, keel, storage), "127.0.0.1", free_port()) as url:
            out: dict[str, Any] = await Api(url, keel, storage).js(
                """const {signalCalls, normalSignalAnswers} = await import(vars.calls);
                   return normalSignalAnswers(await signalCalls(client, vars.threadId), vars.threadId);""",
                calls=str(CALLS),
                threadId=thread_id,
                timeout=90,
            )
    return out


@pytest.mark.timeout(120)
async def test_client_js_signal_calls_are_answered_as_mastras_server_answers_them(
    client: Client, storage: Storage, task_queue: str, client_js: Path
) -> None:
    out = await _signal_calls(client, storage, task_queue)
    assert_answers_as_mastra(out)
    assert out["unknown_run"]["body"] == {"error": "Run 'no-such-run' not found"}


def test_the_comparison_notices_an_answer_that_differs() -> None:
    answers = json.loads(json.dumps(MASTRA))
    for label, status in KEEL_STATUS.items():
        answers[label] = {"status": status, "body": {"error": "refused"}}
    assert_answers_as_mastra(answers)
    perturbations: list[tuple[str, Any]] = [
        ("idle_discard", {**MASTRA["idle_discard"], "accepted": False}),
        ("idle_persist", {**MASTRA["idle_persist"], "runId": None}),
        ("active_by_thread", {**MASTRA["active_by_thread"], "runId": "<run-8>"}),
        ("notification", {**MASTRA["notification"], "signal": {**MASTRA["notification"]["signal"], "type": "user"}}),
        ("heard_idle", MASTRA["heard_idle"][:-1]),
        ("no_target", {"status": 400, "body": {"error": "resourceId and threadId are required"}}),
        ("ended_run", {"status": 500, "body": {"error": "No active agent run found for signal target"}}),
    ]
    for label, answer in perturbations:
        with pytest.raises(AssertionError):
            assert_answers_as_mastra({**answers, label: answer})


@pytest.mark.timeout(120)
async def test_signals_into_a_run_while_its_tool_runs_are_heard_by_its_next_step_as_in_mastra(
    client: Client, storage: Storage, task_queue: str, client_js: Path
) -> None:
    """The run's last answer hears the reminder and 'also this', as Mastra's does. Before it, Keel may show one
    answer Mastra does not: the signals came in while the workflow task that would end the run ran its local
    steps, so the server refused the run's completion; the task ran again, its steps answered from storage (the
    model is never asked twice for a step whose tools may have run), and the run went on to a step that hears
    them (tests/test_delivered_messages.py). That earlier answer was given, and streamed, before they came."""
    out = await _signal_calls(client, storage, task_queue)
    [mastra] = MASTRA["heard_active"]
    assert out["heard_active"][-1] == mastra
    assert out["heard_active"][:-1] in ([], [mastra.split(" | <system-reminder")[0]])
