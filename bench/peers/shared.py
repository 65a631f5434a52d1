"""What all three systems share, standard library only (the peers import it from their own virtualenvs).

- `write_read_file`: the tool's work, the same code in Keel's tool and the peers' activities: write a small
  file under `$PEERS_BENCH_DIR`, read it back, return its length.
- `fake_answer`: the fake model's decision, from the request alone: the number of tool results since the last
  user message against the `steps=N` that message asks for.
- `serve_driver`: the command loop every driver process runs (JSON lines on stdin, answers on stdout), so the
  parent times Keel and the peers the same way, each from a process of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

TOOL_NAME = "write_read"
TOOL_DESCRIPTION = "Write a small file, read it back and return its length."
INSTRUCTIONS = "You are a benchmark agent: call write_read as asked, then answer."
_STEPS = re.compile(r"steps\s*=\s*(\d+)")
_dirs: dict[str, Path] = {}


def bench_dir() -> Path:
    """Where `write_read` writes: $PEERS_BENCH_DIR (created on first use), else a temp dir made once."""
    key = os.environ.get("PEERS_BENCH_DIR", "")
    found = _dirs.get(key)
    if found is None:
        found = Path(key) if key else Path(tempfile.mkdtemp(prefix="keel-peers-files-"))
        found.mkdir(parents=True, exist_ok=True)
        _dirs[key] = found
    return found


def write_read_file(path: str, content: str) -> int:
    """The tool's work: write a small file (its name only, under `bench_dir()`), read it back, return its length."""
    target = bench_dir() / Path(path).name
    target.write_text(content)
    return len(target.read_text())


def prompt(steps: int) -> str:
    return f"steps={steps}"


def final_text(steps: int) -> str:
    """The fake model's answer once it has `steps` tool results: what every driver checks a run ended with."""
    return f"done: {steps} steps"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def fake_answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message for a chat-completions request: a `write_read` call with a fresh id while there are
    fewer tool results since the last user message than its `steps=N`, else the final text."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    match = _STEPS.search(_text(messages[last_user].get("content")) if last_user >= 0 else "")
    steps = int(match.group(1)) if match else 1
    done = sum(1 for m in messages[last_user + 1 :] if m.get("role") == "tool")
    if done >= steps:
        return {"role": "assistant", "content": final_text(done)}
    k = done + 1
    args = {"path": f"step-{k}.txt", "content": f"step {k} of {steps}"}
    call = {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": TOOL_NAME, "arguments": json.dumps(args)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def reply(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


async def throughput(run: Callable[[int], Awaitable[str]], n: int, total: int, concurrency: int) -> float:
    """Seconds taken by `total` runs of `steps=n`, at most `concurrency` in flight."""
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            await run(n)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(total)))
    return time.perf_counter() - t0


async def serve_driver(run: Callable[[int], Awaitable[str]]) -> None:
    """Answer the parent's commands until `quit` (or end of input). `run(n)` starts one run of `steps=n`, waits for
    its result, checks it and returns the workflow id. Commands, one JSON object a line:

    - `{"op": "run", "n": N}` -> `{"seconds": wall time of run(N), "id": workflow id}`
    - `{"op": "throughput", "n": N, "total": T, "concurrency": C}` -> `{"runs_per_s": ..., "seconds": ...}`
    - `{"op": "quit"}`

    A failure answers `{"error": ...}` and the loop goes on."""
    reply({"ready": True})
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return
        cmd = json.loads(line)
        try:
            if cmd["op"] == "quit":
                reply({"bye": True})
                return
            if cmd["op"] == "run":
                t0 = time.perf_counter()
                wf_id = await run(int(cmd["n"]))
                reply({"seconds": time.perf_counter() - t0, "id": wf_id})
            elif cmd["op"] == "throughput":
                total = int(cmd["total"])
                elapsed = await throughput(run, int(cmd["n"]), total, int(cmd["concurrency"]))
                reply({"runs_per_s": total / elapsed, "seconds": elapsed})
            else:
                reply({"error": f"unknown op {cmd['op']!r}"})
        except Exception as err:
            traceback.print_exc(file=sys.stderr)
            reply({"error": f"{type(err).__name__}: {err}"})
