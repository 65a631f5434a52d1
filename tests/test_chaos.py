"""The fault matrix as a test (`bench/chaos`): a seeded chaos run of every kind of run (agents with approvals, a
model failing behind a LiteLLM proxy, workspace files and commands, controller sessions, JSON workflows, MCP calls,
large payloads) while workers, the HTTP API, the Temporal server, PostgreSQL and SeaweedFS (the S3 payload store)
are killed at random and the workspace's disk fills up, streams read over HTTP through the API's deaths, checked
against the ledger its tools keep outside the system (nothing lost without saying so, nothing run twice that must
not be, nothing stuck, every stream whole, visibility agreeing); and the check itself, shown to fail on a planted
defect (the non-idempotent tool declared idempotent, so a crash right after its side effect runs it again).
`make chaos` runs the long version (`MINUTES=`, `SEED=`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
MINUTES = float(os.environ.get("KEEL_CHAOS_MINUTES", "2"))


async def chaos(tmp_path: Path, *args: str, timeout: float) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "chaos.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.chaos", "--json", str(out), *args,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # its workers, Temporal and PostgreSQL go with it if the test gives up
    )  # fmt: skip
    try:
        printed, _ = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    text = printed.decode(errors="replace")
    assert out.exists(), text[-4000:]
    return proc.returncode or 0, json.loads(out.read_text()), text


@pytest.mark.timeout(int(MINUTES * 60) + 420)
async def test_a_seeded_chaos_run_loses_nothing_runs_nothing_twice_and_leaves_nothing_stuck(tmp_path: Path) -> None:
    code, report, printed = await chaos(
        tmp_path, "--minutes", str(MINUTES), "--seed", "11", "--in-flight", "8", "--fault-every", "5",
        timeout=MINUTES * 60 + 360,
    )  # fmt: skip
    summary = printed[printed.rfind("chaos seed=") :]
    assert code == 0 and report["ok"], summary
    assert sum(report["runs"].values()) >= 30, summary
    kinds = {"shop", "busy", "batch", "mcp", "bulky", "files", "session", "chat", "chatter"}
    assert set(report["runs"]) == kinds, summary
    faults = {"worker-kill", "worker-stop", "api-kill", "temporal-kill", "postgres-kill", "s3-kill", "disk-full",
              "model-kill"}  # fmt: skip
    assert set(report["faults"]) | set(report["skipped_faults"]) == faults, summary
    assert set(report["skipped_faults"]) <= {"disk-full"}, summary  # only where a tmpfs cannot be mounted
    assert report["streams"] >= 5 and not report["stream_gaps"], summary
    assert report["lost_reported"] >= 1, summary  # crashes right after a charge happened, and were told honestly


@pytest.mark.timeout(480)
async def test_the_check_catches_a_non_idempotent_tool_made_to_run_again(tmp_path: Path) -> None:
    # Long enough for the driver's grace after the mix (`GRACE_SECONDS`, 180 s) and its stack's start: a run
    # stuck for another reason is then reported beside the duplicates instead of cutting the driver off unheard.
    code, report, printed = await chaos(
        tmp_path, "--minutes", "0.4", "--seed", "5", "--in-flight", "4", "--fault-every", "100000",
        "--plant", "retried-charge", "--crash-one-in", "1",
        timeout=420,
    )  # fmt: skip
    summary = printed[printed.rfind("chaos seed=") :]
    assert code == 1 and not report["ok"], summary
    assert report["duplicated"] and all("charge" in d and "ran 2 times" in d for d in report["duplicated"]), summary


def test_the_model_proxy_starts_again_after_a_kill_left_its_call_counts_empty(tmp_path: Path) -> None:
    # A `model-kill` landing while the handler wrote its counts left `calls.json` empty; LiteLLM then failed to load
    # the handler at every start, and the `chat` runs waited to the end for a model that never came back.
    from bench.chaos.driver import ModelProxy

    proxy = ModelProxy(tmp_path)
    (tmp_path / "litellm").mkdir()
    (tmp_path / "litellm" / "calls.json").write_text("")
    proxy.start()
    try:
        import httpx

        answer = None
        for attempt in range(6):  # about two calls in five fail, by a roll on the call's count
            said = [{"role": "user", "content": f"chat t{attempt}"}]
            body = {"model": "chaos-model", "stream": True, "messages": said}
            reply = httpx.post(f"{proxy.url}/chat/completions", json=body, timeout=30)
            chunks = [line[6:] for line in reply.text.splitlines() if line.startswith("data: {")]
            if reply.status_code == 200 and chunks and "error" not in reply.text:
                answer = "".join(json.loads(c)["choices"][0]["delta"].get("content") or "" for c in chunks)
                break
        assert answer is not None and answer.startswith("echo t")
        assert json.loads((tmp_path / "litellm" / "calls.json").read_text())  # counted again, written whole
    finally:
        proxy.stop()
