"""The app every worker of the chaos run loads (`bench.chaos.app:app`). Its tools write a ledger outside the system
under test (`$CHAOS_LEDGER`, one append-only JSON-lines file per process, each line fsynced before the tool
returns), so the checker can count every side effect whatever the workers, Temporal or PostgreSQL went through.

- `shop` (agent): `shop <tag> <cents>` → step 1 calls `charge` (not idempotent, needs approval) and `note`
  (idempotent); step 2 answers what became of each: `charged <cents> | noted <tag>`, `charge declined | ...`, or
  `charge lost: ... | ...` when the charge's single attempt was lost.
- `busy` (agent): `busy <tag>` → three steps, each calling `tick` (idempotent), then `ticked 3`.
- `bulky` (agent): `bulky <tag> <filler>` (a message of `BULKY_BYTES`, so the run's input and its steps' inputs
  are payloads the payload store (S3) holds, not the history) → one `tick`, then `read <length> <crc32>` of the
  message: each step of the run reads its input back from S3.
- `batch` (stored workflow, `definition()`): `record` (idempotent) over five items in a foreach, a one-second
  sleep, an `ask-human` step (the driver answers it with the run's tag), then `{"answer": <tag>}`.

- `files` (agent, workspace tools on a local workspace in `$CHAOS_WORKSPACE`, shared by the workers):
  `files <tag>` → writes `<tag>/notes.txt` ("draft <tag>"), reads it, edits it to "final <tag>", runs
  `echo <tag> >> <tag>/cmd.log` in the sandbox (a command: never run twice), reads the notes again, and answers
  the five results as JSON. The files themselves are its ledger.
- `chat` (agent on a model behind a real LiteLLM proxy, `$CHAOS_MODEL_URL`): `chat <tag>` → `echo <tag>`, the
  model failing about two calls in five (429s, 500s mid-stream, slow streams: `litellm_handler.py`).
- `chatter` (AgentController `desk`): a session is sent `say <tag>-0`, `-1`, `-2` in quick succession, the later
  ones into the running turn (or as it ends); it answers `heard <text> | ...` for what it has not answered yet.
- `session` (AgentController `desk`): a session of resource `chaos-<tag>` is sent `session <tag> <cents>`; its
  turn calls `pledge` (not idempotent, category `edit`: the session asks), the driver approves or declines it
  through the session, and the turn answers `pledged <cents>`, `pledge declined` or `pledge lost: ...`.

`charge` crashes its own worker right after charging when the run's tag says so (`crash_after_charge`): the worker
dies between the side effect and its report, the harshest moment for a tool that must run at most once.
`CHAOS_PLANT=retried-charge` declares `charge` idempotent, a planted defect: after such a crash the step runs it
again, and the checker must catch the second charge.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from keel import AgentController, Mode
from keel.app import Agent, App, ToolContext, tool
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelToolCall,
    OpenAIChatModel,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
    user_texts_since_last_answer,
)
from keel.workspace_providers import WORKSPACE_TOOLS, LocalFilesystem, LocalSandbox, Workspace

PLANT = os.environ.get("CHAOS_PLANT", "")
BATCH_ITEMS = 5
BULKY_BYTES = 300 * 1024
"""A `bulky` run's message: past the 256 KiB from which a payload is kept in the payload store."""
CRASH_ONE_IN = int(os.environ.get("CHAOS_CRASH_ONE_IN", "6"))
"""About one shop run in this many crashes its worker right after charging (`CHAOS_CRASH_ONE_IN`; 0: none)."""


def crash_after_charge(tag: str) -> bool:
    return CRASH_ONE_IN > 0 and zlib.crc32(tag.encode()) % CRASH_ONE_IN == 0


def record(kind: str, key: str, ctx: ToolContext, **extra: Any) -> None:
    """One side effect, in the ledger, durable before the tool goes on."""
    ledger = Path(os.environ["CHAOS_LEDGER"])
    line = {"kind": kind, "key": key, "run": ctx.run_id, "attempt": ctx.attempt, "pid": os.getpid(),
            "at": time.time(), **extra}  # fmt: skip
    with open(ledger / f"{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps(line) + "\n")
        out.flush()
        os.fsync(out.fileno())


class ChargeInput(BaseModel):
    tag: str
    cents: int


@tool("charge", require_approval=True, idempotent=PLANT == "retried-charge")
async def charge(args: ChargeInput, ctx: ToolContext) -> dict[str, Any]:
    """Charge a card: must never happen twice for one call."""
    await asyncio.sleep(0.2)
    record("charge", f"{ctx.run_id}/{ctx.tool_call_id}", ctx, cents=args.cents)
    if crash_after_charge(args.tag) and ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # charged, not yet reported: the worker dies here
    return {"charged": args.cents}


class TagInput(BaseModel):
    tag: str
    n: int = 0


@tool("note", idempotent=True)
async def note(args: TagInput, ctx: ToolContext) -> str:
    """Note the order (idempotent)."""
    record("note", f"{ctx.run_id}/{ctx.tool_call_id}", ctx)
    return f"noted {args.tag}"


@tool("tick", idempotent=True)
async def tick(args: TagInput, ctx: ToolContext) -> str:
    """One tick of a busy run (idempotent)."""
    await asyncio.sleep(0.3)
    record("tick", f"{ctx.run_id}/{args.n}", ctx)
    return f"tick {args.n}"


class ItemsInput(BaseModel):
    tag: str
    count: int


@tool("items", idempotent=True)
async def items(args: ItemsInput, ctx: ToolContext) -> list[dict[str, Any]]:
    """A batch's items: [{tag, n: 1}, ..., {tag, n: count}]."""
    return [{"tag": args.tag, "n": n} for n in range(1, args.count + 1)]


@tool("record", idempotent=True)
async def record_item(args: TagInput, ctx: ToolContext) -> dict[str, Any]:
    """One item of a batch (idempotent)."""
    record("record", f"{args.tag}/{args.n}", ctx)
    return {"n": args.n}


def _shop(request: ModelRequest) -> ModelResponse:
    _, tag, cents = last_user_text(request).split()
    done = {r.tool_name: r for r in tool_results_since_last_user(request)}
    if not done:
        return ModelResponse(
            tool_calls=[
                ModelToolCall(id="charge-1", name="charge", args={"tag": tag, "cents": int(cents)}),
                ModelToolCall(id="note-1", name="note", args={"tag": tag}),
            ]
        )
    charged = done["charge"]
    result = charged.result
    if isinstance(result, dict) and "charged" in result:
        said = f"charged {result['charged']}"
    elif "not approved" in json.dumps(result).lower():  # Keel's (and Mastra's) result of a declined call
        said = "charge declined"
    else:
        said = f"charge lost: {json.dumps(result)[:200]}"
    return ModelResponse(text=f"{said} | {done['note'].result}")


def _busy(request: ModelRequest) -> ModelResponse:
    _, tag = last_user_text(request).split()
    ticks = len(tool_results_since_last_user(request))
    if ticks < 3:
        return ModelResponse(tool_calls=[ModelToolCall(id=f"tick-{ticks}", name="tick", args={"tag": tag, "n": ticks})])
    return ModelResponse(text="ticked 3")


def bulky_message(tag: str) -> str:
    head = f"bulky {tag} "
    return head + (f"{tag}." * (BULKY_BYTES // (len(tag) + 1) + 1))[: BULKY_BYTES - len(head)]


def bulky_answer(message: str) -> str:
    return f"read {len(message)} {zlib.crc32(message.encode())}"


def _bulky(request: ModelRequest) -> ModelResponse:
    message = last_user_text(request)
    tag = message.split(maxsplit=2)[1]
    if not tool_results_since_last_user(request):
        return ModelResponse(tool_calls=[ModelToolCall(id="tick-0", name="tick", args={"tag": tag, "n": 0})])
    return ModelResponse(text=bulky_answer(message))


MODEL_URL = os.environ.get("CHAOS_MODEL_URL", "http://127.0.0.1:9/v1")
"""The LiteLLM proxy of the run (`bench/chaos/litellm_handler.py`), serving `chaos-model`."""
WORKSPACE = Path(os.environ.get("CHAOS_WORKSPACE", "/tmp/keel-chaos-workspace"))
FS, SB = WORKSPACE_TOOLS.FILESYSTEM, WORKSPACE_TOOLS.SANDBOX


def files_plan(tag: str) -> list[tuple[str, dict[str, Any]]]:
    notes = f"{tag}/notes.txt"
    return [
        (FS.WRITE_FILE, {"path": notes, "content": f"draft {tag}\n"}),
        (FS.READ_FILE, {"path": notes, "showLineNumbers": False}),
        (FS.EDIT_FILE, {"path": notes, "old_string": "draft", "new_string": "final"}),
        (SB.EXECUTE_COMMAND, {"command": f"echo {tag} >> {tag}/cmd.log"}),
        (FS.READ_FILE, {"path": notes, "showLineNumbers": False}),
    ]


def _files(request: ModelRequest) -> ModelResponse:
    tag = last_user_text(request).split()[1]
    done = tool_results_since_last_user(request)
    plan = files_plan(tag)
    if len(done) < len(plan):
        name, args = plan[len(done)]
        return ModelResponse(tool_calls=[ModelToolCall(id=f"f{len(done)}", name=name, args=args)])
    return ModelResponse(text=json.dumps([r.result for r in done]))


@tool("pledge", idempotent=False)
async def pledge(args: ChargeInput, ctx: ToolContext) -> dict[str, Any]:
    """Pledge an amount (not idempotent: must never happen twice for one call)."""
    await asyncio.sleep(0.2)
    record("pledge", args.tag, ctx, cents=args.cents)
    return {"pledged": args.cents}


def _desk(request: ModelRequest) -> ModelResponse:
    if last_user_text(request).startswith("say "):  # `chatter`: every message since the last answer, heard
        return ModelResponse(text="heard " + " | ".join(user_texts_since_last_answer(request)))
    _, tag, cents = last_user_text(request).split()
    done = tool_results_since_last_user(request)
    if not done:
        return ModelResponse(
            tool_calls=[ModelToolCall(id="pledge-1", name="pledge", args={"tag": tag, "cents": int(cents)})]
        )
    result = done[0].result
    if isinstance(result, dict) and "pledged" in result:
        return ModelResponse(text=f"pledged {result['pledged']}")
    if "not approved" in json.dumps(result).lower() or "declined" in json.dumps(result).lower():
        return ModelResponse(text="pledge declined")
    return ModelResponse(text=f"pledge lost: {json.dumps(result)[:200]}")


desk = AgentController(
    "desk",
    Agent(id="desk-agent", model=ScriptedModel(_desk, name="desk")),
    modes=[Mode("work", name="Work", default=True)],
    tools=[pledge],
    tool_category_resolver=lambda name: "edit" if name == "pledge" else None,
)


def definition() -> dict[str, Any]:
    """The stored workflow `batch`: input `{"tag"}`."""
    return {
        "id": "batch",
        "inputSchema": {"type": "object", "required": ["tag"], "properties": {"tag": {"type": "string"}}},
        "outputSchema": {"type": "object"},
        "graph": [
            {
                "type": "mapping",
                "id": "ask",
                "mapConfig": {"tag": {"initData": True, "path": "tag"}, "count": {"value": BATCH_ITEMS}},
            },
            {"type": "tool", "id": "list", "toolId": "items"},
            {
                "type": "foreach",
                "id": "each",
                "step": {"type": "tool", "id": "rec", "toolId": "record"},
                "opts": {"concurrency": 2},
            },
            {"type": "sleep", "id": "nap", "duration": 1000},
            {"type": "mapping", "id": "q", "mapConfig": {"question": {"template": "Done with ${initData.tag}?"}}},
            {"type": "tool", "id": "human", "toolId": "ask-human"},
            {"type": "mapping", "id": "out", "mapConfig": {"answer": {"step": "human", "path": "answer"}}},
        ],
    }


app = App.of(
    Agent(id="shop", model=ScriptedModel(_shop, name="shop"), tools=(charge, note)),
    Agent(id="busy", model=ScriptedModel(_busy, name="busy"), tools=(tick,)),
    Agent(id="bulky", model=ScriptedModel(_bulky, name="bulky"), tools=(tick,)),
    Agent(
        id="files",
        model=ScriptedModel(_files, name="files"),
        workspace=Workspace(id="chaos-files", filesystem=LocalFilesystem(WORKSPACE), sandbox=LocalSandbox(WORKSPACE)),
        max_steps=10,
    ),
    Agent(id="chat", model=OpenAIChatModel("chaos-model", base_url=MODEL_URL, api_key="sk-local")),
    tools=(items, record_item),
    controllers=[desk],
)
