"""Apps the tests run: small scripted agents that exercise one behaviour each."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from keel.app import Agent, App, ToolContext, tool
from keel.app.demo import demo
from keel.model_providers import (
    ModelRequest,
    ModelResponse,
    ModelRetryableError,
    ModelToolCall,
    ScriptedModel,
    last_user_text,
    tool_results_since_last_user,
)
from keel.workspace_providers import LocalFilesystem, LocalSandbox, Workspace
from tests.controller import apps as controller_apps
from tests.workflows_json import apps as definition_apps
from tests.workspace.apps import plan_agent


def data_dir() -> Path:
    return Path(os.environ.get("KEEL_DATA_DIR", ".keel"))


class EchoInput(BaseModel):
    text: str


@tool("echo")
async def echo(args: EchoInput, ctx: ToolContext) -> dict[str, str]:
    """Return the text."""
    return {"echo": args.text}


def steps_script(request: ModelRequest) -> ModelResponse:
    """Calls `echo` once per step until it has N results ("steps=N" in the user message), then answers."""
    match = re.search(r"steps=(\d+)", last_user_text(request))
    wanted = int(match.group(1)) if match else 1
    talk = re.search(r"talk=(\d+)", last_user_text(request))  # each step's text this long
    done = len(tool_results_since_last_user(request))
    if done < wanted:
        return ModelResponse(
            text=f"step {done + 1}".ljust(int(talk.group(1)) if talk else 0, "."),
            tool_calls=[ModelToolCall(id=f"call_{done + 1}", name="echo", args={"text": f"#{done + 1}"})],
        )
    return ModelResponse(text=f"done after {done} tool calls")


multi = Agent(id="multi", model=ScriptedModel(steps_script, name="steps"), tools=(echo,), max_steps=100)


class LedgerInput(BaseModel):
    entry: str


@tool("slow_ledger", require_approval=True)
async def slow_ledger(args: LedgerInput, ctx: ToolContext) -> dict[str, int]:
    """Mark that it started, work for a while, then append one line to the ledger when it completes."""
    root = data_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "started.log", "a") as f:
        f.write(f"{ctx.tool_call_id} attempt={ctx.attempt}\n")
    await asyncio.sleep(float(os.environ.get("KEEL_TEST_TOOL_SECONDS", "3")))
    with open(root / "ledger.log", "a") as f:
        f.write(f"{ctx.idempotency_key} {args.entry}\n")
    return {"lines": len((root / "ledger.log").read_text().splitlines())}


def ledger_script(request: ModelRequest) -> ModelResponse:
    results = tool_results_since_last_user(request)
    if not results:
        return ModelResponse(
            tool_calls=[ModelToolCall(id="call_1", name="slow_ledger", args={"entry": last_user_text(request)})]
        )
    last = results[-1]
    return ModelResponse(text=f"ledger: {'declined' if last.denied else last.result}")


ledger = Agent(id="ledger", model=ScriptedModel(ledger_script, name="ledger"), tools=(slow_ledger,))


@tool("fire_once", idempotent=False)
async def fire_once(args: EchoInput, ctx: ToolContext) -> dict[str, str]:
    """A non-idempotent tool: never re-run after a lost attempt."""
    root = data_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "fired.log", "a") as f:
        f.write(f"{ctx.attempt}\n")
    await asyncio.sleep(float(os.environ.get("KEEL_TEST_TOOL_SECONDS", "3")))
    return {"fired": args.text}


def fire_script(request: ModelRequest) -> ModelResponse:
    results = tool_results_since_last_user(request)
    if not results:
        return ModelResponse(tool_calls=[ModelToolCall(id="call_1", name="fire_once", args={"text": "go"})])
    last = results[-1]
    return ModelResponse(text=f"{'error' if last.is_error else 'ok'}: {last.result}")


once = Agent(id="once", model=ScriptedModel(fire_script, name="once"), tools=(fire_once,))


def note(log: str, line: str) -> None:
    root = data_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / log, "a") as f:
        f.write(line + "\n")


class NapInput(BaseModel):
    label: str
    seconds: float


@tool("nap")
async def nap(args: NapInput, ctx: ToolContext) -> str:
    """Sleep; each start (with its attempt) and each wake-up is noted in naps.log."""
    note("naps.log", f"start {args.label} attempt={ctx.attempt}")
    await asyncio.sleep(args.seconds)
    note("naps.log", f"done {args.label}")
    return f"{args.label} slept"


def napper_script(request: ModelRequest) -> ModelResponse:
    """Three naps in one step (c1 short, c2 and c3 `KEEL_TEST_TOOL_SECONDS` long) under fresh call ids, as real
    models give; then how many results it was shown. Each time it is asked is noted in model.log."""
    results = tool_results_since_last_user(request)
    note("model.log", f"asked with {len(results)} results")
    if results:
        return ModelResponse(text=f"woke after {len(results)} naps")
    long = float(os.environ.get("KEEL_TEST_TOOL_SECONDS", "3"))
    naps = (("c1", 0.05), ("c2", long), ("c3", long))
    return ModelResponse(
        tool_calls=[
            ModelToolCall(id=f"call_{uuid.uuid4().hex[:8]}", name="nap", args={"label": label, "seconds": seconds})
            for label, seconds in naps
        ]
    )


napper = Agent(id="napper", model=ScriptedModel(napper_script, name="napper"), tools=(nap,))


class BoomInput(BaseModel):
    n: int


@tool("huge")
async def huge(args: BoomInput, ctx: ToolContext) -> str:
    """Returns n MiB of text."""
    return "x" * (args.n * 1024 * 1024)


@tool("boom")
async def boom(args: BoomInput, ctx: ToolContext) -> None:
    """Always raises."""
    raise RuntimeError(f"boom {args.n}")


def mistakes_script(request: ModelRequest) -> ModelResponse:
    """First step: an unknown tool, invalid arguments and a failing tool; then report what came back."""
    results = tool_results_since_last_user(request)
    if not results:
        return ModelResponse(
            tool_calls=[
                ModelToolCall(id="call_a", name="no_such_tool", args={}),
                ModelToolCall(id="call_b", name="boom", args={"n": "not a number"}),
                ModelToolCall(id="call_c", name="boom", args={"n": 7}),
                ModelToolCall(id="call_d", name="huge", args={"n": 3}),
            ]
        )
    return ModelResponse(text=" | ".join(str(r.result) for r in results))


mistakes = Agent(id="mistakes", model=ScriptedModel(mistakes_script, name="mistakes"), tools=(boom, huge))


class PayInput(BaseModel):
    amount: int


@tool("pay", require_approval=lambda args: args.amount > 100)
async def pay(args: PayInput, ctx: ToolContext) -> dict[str, int]:
    """Pay an amount; above 100 needs approval."""
    return {"paid": args.amount}


def pay_script(request: ModelRequest) -> ModelResponse:
    results = tool_results_since_last_user(request)
    if not results:
        return ModelResponse(
            tool_calls=[
                ModelToolCall(id="small", name="pay", args={"amount": 5}),
                ModelToolCall(id="large", name="pay", args={"amount": 500}),
            ]
        )
    return ModelResponse(text=", ".join(f"{r.tool_call_id}={r.result}" for r in results))


payer = Agent(id="payer", model=ScriptedModel(pay_script, name="payer"), tools=(pay,))


HOLDER = {"asked": 0, "released": 0}
"""The holder's first model step of a run waits until `released` has caught up with `asked` (a client's
approval can then reach the run while the step that asks for it runs)."""


async def holder_script(request: ModelRequest) -> ModelResponse:
    results = tool_results_since_last_user(request)
    if not results:
        HOLDER["asked"] += 1
        while HOLDER["released"] < HOLDER["asked"]:
            await asyncio.sleep(0.01)
        return ModelResponse(tool_calls=[ModelToolCall(id="call_1", name="pay", args={"amount": 500})])
    return ModelResponse(text=", ".join(str(r.result) for r in results))


holder = Agent(id="holder", model=ScriptedModel(holder_script, name="holder"), tools=(pay,))


async def _slow_pay_script(request: ModelRequest) -> ModelResponse:
    results = tool_results_since_last_user(request)
    note("slowpay.log", f"asked with {len(results)} results")
    if not results:
        await asyncio.sleep(float(os.environ.get("KEEL_TEST_TOOL_SECONDS", "3")))
        return ModelResponse(tool_calls=[ModelToolCall(id="call_1", name="pay", args={"amount": 500})])
    return ModelResponse(text=", ".join(str(r.result) for r in results))


slow_payer = Agent(id="slowpayer", model=ScriptedModel(_slow_pay_script, name="slowpayer"), tools=(pay,))
"""Its first model step of a run takes `KEEL_TEST_TOOL_SECONDS`, then asks to approve `call_1` (asks noted in
slowpay.log): an approval can wait for that step when the step's worker is killed."""


def reused_id_script(request: ModelRequest) -> ModelResponse:
    """Like some local model servers: every step's tool call has the same id."""
    results = tool_results_since_last_user(request)
    if len(results) < 2:
        return ModelResponse(tool_calls=[ModelToolCall(id="call_0", name="pay", args={"amount": 200 + len(results)})])
    return ModelResponse(text=", ".join(str(r.result) for r in results))


reuser = Agent(id="reuser", model=ScriptedModel(reused_id_script, name="reuser"), tools=(pay,))


class BlobInput(BaseModel):
    size: int


@tool("blob")
async def blob(args: BlobInput, ctx: ToolContext) -> str:
    """Return `size` bytes of text."""
    return "x" * args.size


def bulky_script(request: ModelRequest) -> ModelResponse:
    """`parallel=P steps=S size=B [hold=1]`: S steps of P parallel `blob` calls of B bytes each (then, with
    `hold=1`, a `hold` call with B bytes of arguments that waits for approval), then report the lengths the model
    was shown (so a large result provably reached it)."""
    spec = dict(re.findall(r"(\w+)=(\d+)", last_user_text(request)))
    parallel, steps, size = int(spec.get("parallel", 1)), int(spec.get("steps", 1)), int(spec.get("size", 10))
    results = tool_results_since_last_user(request)
    done = len(results) // parallel
    if done < steps:
        calls = [ModelToolCall(id=f"b{done}_{i}", name="blob", args={"size": size}) for i in range(parallel)]
        return ModelResponse(tool_calls=calls)
    if spec.get("hold") and not any(r.tool_name == "hold" for r in results):  # `hold=1`: then wait for approval
        return ModelResponse(tool_calls=[ModelToolCall(id="hold-1", name="hold", args={"note": "h" * size})])
    results = [r for r in results if r.tool_name == "blob"]
    return ModelResponse(text=f"saw {len(results)} results of {sorted({len(str(r.result)) for r in results})} bytes")


_failed_once: set[str] = set()


def flaky_script(request: ModelRequest) -> ModelResponse:
    """Rate limited the first time it sees a conversation (by its last message id), then answers."""
    key = request.messages[-1].id if request.messages else ""
    if key not in _failed_once:
        _failed_once.add(key)
        raise ModelRetryableError("rate limited, try again", retry_after=0.2)
    return ModelResponse(text="answered after a retry")


flaky = Agent(id="flaky", model=ScriptedModel(flaky_script, name="flaky"))

workspace_agent = plan_agent(
    "workspace",
    Workspace(
        id="tests-workspace",
        filesystem=LocalFilesystem(Path(tempfile.gettempdir()) / f"keel-tests-ws-{os.getpid()}"),
        sandbox=LocalSandbox(Path(tempfile.gettempdir()) / f"keel-tests-ws-{os.getpid()}"),
    ),
)
"""Runs a JSON plan of workspace tool calls (`tests.workspace.apps`)."""


class Nothing(BaseModel):
    pass


@tool("hold", require_approval=True)
async def hold(args: Nothing, ctx: ToolContext) -> dict[str, bool]:
    """Wait for a person's approval."""
    return {"held": True}


bulky = Agent(id="bulky", model=ScriptedModel(bulky_script, name="bulky"), tools=(blob, hold), max_steps=200)


class PostInput(BaseModel):
    text: str


@tool("post", idempotent=False)
async def post(args: PostInput, ctx: ToolContext) -> int:
    """Post a text (not idempotent: each call an activity of its own); its length. With KEEL_TEST_POST_SECONDS,
    each post takes that long and says so in `posted.log`."""
    seconds = float(os.environ.get("KEEL_TEST_POST_SECONDS", "0"))
    if seconds:
        log = data_dir() / "posted.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            f.write(f"start {ctx.tool_call_id} attempt={ctx.attempt}\n")
        await asyncio.sleep(seconds)
        with open(log, "a") as f:
            f.write(f"done {ctx.tool_call_id}\n")
    return len(args.text)


def poster_script(request: ModelRequest) -> ModelResponse:
    """`posts=P size=B`: one step of P parallel `post` calls, each with B bytes of arguments, then the lengths."""
    spec = dict(re.findall(r"(\w+)=(\d+)", last_user_text(request)))
    results = tool_results_since_last_user(request)
    if not results:
        size = int(spec["size"])
        texts = [f"{i:05d}".ljust(size, "p") for i in range(int(spec["posts"]))]
        return ModelResponse(
            tool_calls=[ModelToolCall(id=f"p{i}", name="post", args={"text": t}) for i, t in enumerate(texts)]
        )
    lengths = sorted({r.result for r in results if isinstance(r.result, int)})
    failed = sum(not isinstance(r.result, int) for r in results)
    return ModelResponse(text=f"posted {len(results)} texts of {lengths} bytes" + (f", {failed} failed" * bool(failed)))


poster = Agent(id="poster", model=ScriptedModel(poster_script, name="poster"), tools=(post,))


def listener_script(request: ModelRequest) -> ModelResponse:
    """'hold' -> the `hold` call (waits for approval); anything else -> every user message of the thread."""
    if last_user_text(request) == "hold" and not tool_results_since_last_user(request):
        return ModelResponse(tool_calls=[ModelToolCall(id="hold-1", name="hold", args={})])
    heard = []
    for message in request.messages:
        if message.role == "user":
            parts = message.content if not isinstance(message.content, str) else []
            heard.append(message.content if isinstance(message.content, str) else " ".join(
                p.text for p in parts if p.type == "text"
            ))  # fmt: skip
    return ModelResponse(text="heard: " + " | ".join(heard))


listener = Agent(id="listener", model=ScriptedModel(listener_script, name="listener"), tools=(hold,))
"""Holds its turn open on an approval ('hold') and answers with every user message it heard: for delivering
messages into an active run."""


class AskInput(BaseModel):
    question: str


@tool("ask", require_approval=True)
async def ask(args: AskInput, ctx: ToolContext) -> dict[str, Any]:
    """Ask the user (after they approve the asking), and wait for the answer."""
    if ctx.resume_data is None:
        ctx.suspend({"question": args.question}, {"type": "object", "properties": {"answer": {"type": "string"}}})
    return {"answer": ctx.resume_data["answer"]}


def _asker_script(request: ModelRequest) -> ModelResponse:
    """ "ask" -> `ask`; once it answered, every user message of the thread and the answer."""
    if last_user_text(request) == "ask" and not tool_results_since_last_user(request):
        return ModelResponse(tool_calls=[ModelToolCall(id="ask-1", name="ask", args={"question": "which?"})])
    heard = [_text(m.content) for m in request.messages if m.role == "user"]
    return ModelResponse(text="heard: " + " | ".join(heard))


asker = Agent(id="asker", model=ScriptedModel(_asker_script, name="asker"), tools=(ask,))
"""Asks (`ask`: approved, then suspended until resumed with an answer) and answers with every user message it
heard: for messages delivered around a suspension."""


def _text(content: Any) -> str:
    return content if isinstance(content, str) else " ".join(p.text for p in content if p.type == "text")


class TallyInput(BaseModel):
    step: int


@tool("tally")
async def tally(args: TallyInput, ctx: ToolContext) -> dict[str, int]:
    """Append `tool N` to tally.log: a ledger of the steps whose tool ran."""
    note("tally.log", f"tool {args.step}")
    return {"step": args.step}


def tally_script(request: ModelRequest) -> ModelResponse:
    """Every step notes `model N` in tally.log (N: the tool results so far, plus one) and calls `tally` with N."""
    step = len(tool_results_since_last_user(request)) + 1
    note("tally.log", f"model {step}")
    call = ModelToolCall(id=f"call_{step}", name="tally", args={"step": step})
    return ModelResponse(text=f"step {step}", tool_calls=[call])


tallier = Agent(id="tally", model=ScriptedModel(tally_script, name="tally"), tools=(tally,), max_steps=5)
"""Five steps, each a model call and a `tally` call, both noted in tally.log: a ledger of what ran (time travel)."""


def _drawl_script(request: ModelRequest) -> ModelResponse:
    note("drawl.log", "asked")
    return ModelResponse(text="one two three four five six seven eight")


drawler = Agent(id="drawler", model=ScriptedModel(_drawl_script, name="drawler", chunk_size=4, delay=0.4))
"""Streams the same answer slowly every time it is asked (four characters each 0.4 s; asks noted in drawl.log):
a worker killed mid-stream leaves a live reader part of an answer its retry streams again."""


def _stumble_script(request: ModelRequest) -> ModelResponse:
    note("stumble.log", "asked")
    if len((data_dir() / "stumble.log").read_text().splitlines()) == 1:
        raise ModelRetryableError("rate limited, try again", retry_after=0.2)
    return ModelResponse(text="one two three four five six seven eight")


stumbler = Agent(id="stumbler", model=ScriptedModel(_stumble_script, name="stumbler", chunk_size=4, delay=0.4))
"""Rate limited the first time it is asked (so its step runs again as a regular activity), then streams slowly
(asks noted in stumble.log): a worker killed mid-stream loses a regular model activity."""


search_workspace = Workspace(
    id="tests-search",
    filesystem=LocalFilesystem(Path(tempfile.gettempdir()) / f"keel-tests-search-{os.getpid()}"),
    bm25=True,
)
"""BM25 search over a few files, indexed by `IndexWorkspace` (no agent uses it)."""

app = dataclasses.replace(App.of(
    demo, multi, listener, asker, ledger, once, napper, mistakes, payer, reuser, bulky, flaky, workspace_agent, tallier,
    drawler, stumbler, holder, slow_payer, poster,
    definition_apps.writer,
    tools=definition_apps.app.tools.values(), classifiers=definition_apps.app.classifiers.values(),
    controllers=[controller_apps.controller],
), workspaces={search_workspace.id: search_workspace, **controller_apps.app.workspaces})  # fmt: skip
