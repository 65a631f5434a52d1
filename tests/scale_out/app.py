"""The app of the scale-out test (tests/scale_out/test_two_workers.py): every worker process loads it, and shares
nothing with the others but Temporal, PostgreSQL (`KEEL_STORAGE_URL`) and S3.

Agent `scale`, a scripted model whose user message is a run's tag (`r007`). Its workspace's files are in the
bucket `$SCALE_OUT_BUCKET` under `ws/` (`S3Filesystem`: endpoint and credentials from the AWS variables), with
BM25 search (its index in the storage) and a local sandbox in this worker's `$KEEL_DATA_DIR` (its background
processes live on this host alone). Steps:

1. write `runs/<tag>.txt`, start a background command printing who runs it (after 2 s), and `bulk` (900 KiB of
   text, after 1 s);
2. read the file back and index it;
3. search for the run's token, and wait for the background process's output (a follow-up: it goes to the host
   that owns the process).

The answer is a JSON object of what the model saw (`expected_answer` says what it must be).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from keel.app import Agent, App, ToolContext, tool
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from keel.workspace_providers import WORKSPACE_TOOLS, LocalSandbox, S3Filesystem, Workspace

FS, SB, SEARCH = WORKSPACE_TOOLS.FILESYSTEM, WORKSPACE_TOOLS.SANDBOX, WORKSPACE_TOOLS.SEARCH
BULK_BYTES = 900 * 1024
BULK_SECONDS = 1.0
PROCESS_SECONDS = 2.0
"""How long `bulk` and the background command take: a run is in flight for a few seconds, so kills catch runs
mid-tool, mid-follow-up and between steps."""
WORDS = "river stone lantern copper harbor meadow signal orbit velvet quartz ember willow".split()
WORKSPACE_ID = "scale-out"
WORKER = f"{os.environ.get('SCALE_OUT_NAME', 'worker')}:{os.getpid()}"
"""Who this worker process is (its name and pid), as its background commands print it."""


def file_path(tag: str) -> str:
    return f"runs/{tag}.txt"


def file_content(tag: str) -> str:
    """The run's file: its own token (found by its search alone), then words drawn from a short list (so the BM25
    scores of a query over every run's file differ)."""
    rng = random.Random(tag)
    return f"token{tag} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40))) + "\n"


def bulk_text(tag: str) -> str:
    return (f"{tag} " * (BULK_BYTES // 4 + 1))[:BULK_BYTES]


def expected_answer(tag: str) -> dict[str, Any]:
    """The answer of run `tag`, but for `process` (what became of its background command)."""
    bulk = bulk_text(tag)
    return {
        "tag": tag,
        "wrote": f"Wrote {len(file_content(tag).encode())} bytes to {file_path(tag)}",
        "read": f"{file_path(tag)} ({len(file_content(tag).encode())} bytes)\n{file_content(tag)}",
        "bulk": {"bytes": len(bulk), "sha256": hashlib.sha256(bulk.encode()).hexdigest()},
        "indexed": f"Indexed {file_path(tag)}",
        "search": [file_path(tag)],
    }


class BulkInput(BaseModel):
    tag: str


@tool("bulk")
async def bulk(args: BulkInput, ctx: ToolContext) -> str:
    """900 KiB of text (kept by reference in the payload store, S3), after a while (a kill can catch it)."""
    await asyncio.sleep(BULK_SECONDS)
    return bulk_text(args.tag)


class ProbeInput(BaseModel):
    query: str
    top_k: int = 200


@tool("bm25_probe")
async def bm25_probe(args: ProbeInput, ctx: ToolContext) -> dict[str, Any]:
    """This worker's BM25 answer (ids, scores, line ranges) to `query`, and which worker gave it."""
    results = await workspace.search(args.query, top_k=args.top_k, mode="bm25")
    return {"worker": WORKER, "results": [r.to_dict() for r in results]}


def _script(request: ModelRequest) -> ModelResponse:
    tag = last_user_text(request).strip()
    path = file_path(tag)
    done = {r.tool_call_id: r for r in tool_results_since_last_user(request)}
    if not done:
        command = f"sleep {PROCESS_SECONDS:g}; echo proc {tag} by $SCALE_OUT_WORKER"
        return ModelResponse(
            tool_calls=[
                ModelToolCall(id="write", name=FS.WRITE_FILE, args={"path": path, "content": file_content(tag)}),
                ModelToolCall(id="start", name=SB.EXECUTE_COMMAND, args={"command": command, "background": True}),
                ModelToolCall(id="bulk", name="bulk", args={"tag": tag}),
            ]
        )
    if "read" not in done:
        return ModelResponse(
            tool_calls=[
                ModelToolCall(id="read", name=FS.READ_FILE, args={"path": path, "showLineNumbers": False}),
                ModelToolCall(id="index", name=SEARCH.INDEX, args={"path": path, "content": file_content(tag)}),
            ]
        )
    started = str(done["start"].result)
    pid = re.search(r"PID: (\w+)\)", started)
    if "search" not in done:
        calls = [ModelToolCall(id="search", name=SEARCH.SEARCH, args={"query": f"token{tag}", "mode": "bm25"})]
        if pid is not None:
            calls.append(ModelToolCall(id="output", name=SB.GET_PROCESS_OUTPUT, args={"pid": pid[1], "wait": True}))
        return ModelResponse(tool_calls=calls)
    bulk = str(done["bulk"].result)
    found = str(done["search"].result)
    answer = {
        "tag": tag,
        "wrote": done["write"].result,
        "read": done["read"].result,
        "bulk": {"bytes": len(bulk), "sha256": hashlib.sha256(bulk.encode()).hexdigest()},
        "indexed": done["index"].result,
        "search": [line.split(":", 1)[0] for line in found.split("\n---\n")[0].splitlines() if line],
        "process": {"started": started, "output": done["output"].result if "output" in done else None},
    }
    return ModelResponse(text=json.dumps(answer))


def _data_dir() -> Path:
    return Path(os.environ.get("KEEL_DATA_DIR", ".keel"))


workspace = Workspace(
    id=WORKSPACE_ID,
    filesystem=S3Filesystem(os.environ.get("SCALE_OUT_BUCKET", "keel-scale-out"), prefix="ws"),
    sandbox=LocalSandbox(_data_dir() / "sandbox", env={"SCALE_OUT_WORKER": WORKER}),
    bm25=True,
)
scale = Agent(id="scale", model=ScriptedModel(_script, name="scale"), workspace=workspace, tools=(bulk,))
app = App.of(scale, tools=[bm25_probe])
