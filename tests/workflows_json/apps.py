"""An app for the workflow definition tests: small tools, a scripted agent, and definitions using them."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from keel.app import Agent, App, Classifier, ToolContext, tool
from keel.model_providers import ModelRequest, ModelResponse, ScriptedModel, last_user_text


class Number(BaseModel):
    n: int


class Count(BaseModel):
    count: int


class Text(BaseModel):
    text: str = ""


@tool("double")
async def double(args: Number, ctx: ToolContext) -> dict[str, int]:
    """Twice n."""
    return {"n": args.n * 2}


@tool("inc")
async def inc(args: Number, ctx: ToolContext) -> dict[str, int]:
    """n + 1."""
    return {"n": args.n + 1}


@tool("range")
async def numbers(args: Count, ctx: ToolContext) -> list[dict[str, int]]:
    """[{n: 1}, ..., {n: count}]."""
    return [{"n": i} for i in range(1, args.count + 1)]


class Texts(BaseModel):
    count: int
    size: int
    fill: str = "x"


@tool("texts")
async def texts(args: Texts, ctx: ToolContext) -> list[dict[str, str]]:
    """`count` texts of `size` characters each (`fill` after a number), as [{text}, ...]."""
    return [{"text": f"{i:06d}".ljust(args.size, args.fill)} for i in range(args.count)]


@tool("echo")
async def echo(args: Text, ctx: ToolContext) -> dict[str, str]:
    """The text back. With KEEL_TEST_ECHO_SECONDS, after that long, `echoed.log` saying when it started."""
    seconds = float(os.environ.get("KEEL_TEST_ECHO_SECONDS", "0"))
    if seconds:
        data = Path(os.environ.get("KEEL_DATA_DIR", ".keel"))
        data.mkdir(parents=True, exist_ok=True)
        with (data / "echoed.log").open("a") as log:
            log.write(f"{args.text[:6]} attempt={ctx.attempt}\n")
        await asyncio.sleep(seconds)
    return {"echo": args.text}


class Item(BaseModel):
    n: int


@tool("record")
async def record(args: Item, ctx: ToolContext) -> dict[str, int]:
    """Append the item to `$KEEL_DATA_DIR/record.log` once per step (a retry finds its line), slowly."""
    log = Path(os.environ.get("KEEL_DATA_DIR", ".keel")) / "record.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with (log.parent / "started.log").open("a") as started:
        started.write(f"{ctx.idempotency_key} attempt={ctx.attempt}\n")
    await asyncio.sleep(float(os.environ.get("KEEL_TEST_TOOL_SECONDS", "0")))
    lines = log.read_text().splitlines() if log.exists() else []
    if not any(line.startswith(f"{ctx.idempotency_key} ") for line in lines):
        with log.open("a") as out:
            out.write(f"{ctx.idempotency_key} {args.n}\n")
    return {"n": args.n}


@tool("send", idempotent=False)
async def send(args: Item, ctx: ToolContext) -> dict[str, int]:
    """Send item n (not idempotent: never started twice): `$KEEL_DATA_DIR/sent.log` gets a start line, then,
    slowly, the sent line."""
    data = Path(os.environ.get("KEEL_DATA_DIR", ".keel"))
    data.mkdir(parents=True, exist_ok=True)
    with (data / "sent.log").open("a") as log:
        log.write(f"start {args.n} attempt={ctx.attempt}\n")
    await asyncio.sleep(float(os.environ.get("KEEL_TEST_TOOL_SECONDS", "0")))
    with (data / "sent.log").open("a") as log:
        log.write(f"sent {args.n}\n")
    return {"n": args.n}


_stumbled: set[str] = set()


@tool("stumble", idempotent=True)
async def stumble(args: Number, ctx: ToolContext) -> dict[str, int]:
    """n + 1, after failing the first time it is called in a run (so a step with `retries` tries again)."""
    if ctx.run_id not in _stumbled:
        _stumbled.add(ctx.run_id)
        raise RuntimeError("not this time")
    return {"n": args.n + 1}


def writer_script(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text=f"draft: {last_user_text(request)}")


async def triage(state: Any, ctx: ToolContext) -> dict[str, Any]:
    """Is it urgent (an exclamation mark), and how long is it."""
    text = str(state)
    return {"urgent": {"value": "!" in text, "reason": "an exclamation mark"}, "length": len(text)}


writer = Agent(id="writer", model=ScriptedModel(writer_script, name="writer"))
app = App.of(
    writer,
    tools=(double, inc, numbers, texts, echo, record, send, stumble),
    classifiers=(Classifier("triage", triage, "Is it urgent?"),),
)


def definition(workflow_id: str, graph: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": workflow_id,
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object"},
        "graph": graph,
        **extra,
    }


def tool_step(step_id: str, tool_id: str) -> dict[str, Any]:
    return {"type": "tool", "id": step_id, "toolId": tool_id}


def mapping(step_id: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"type": "mapping", "id": step_id, "mapConfig": config}


CHILD = definition("child", [tool_step("twice", "double")])

EVERYTHING = definition(
    "everything",
    [
        mapping("prep", {"n": {"initData": True, "path": "n"}, "text": {"template": "hi ${initData.name}!"}}),
        {"type": "classifier", "id": "kind", "classifierId": "triage", "state": {"path": "inputData.text"}},
        mapping("again", {"n": {"initData": True, "path": "n"}}),
        tool_step("d1", "double"),
        {"type": "parallel", "id": "fan", "steps": [tool_step("p1", "double"), tool_step("p2", "inc")]},
        mapping("howmany", {"count": {"value": 3}}),
        tool_step("list", "range"),
        {"type": "foreach", "id": "each", "step": tool_step("e", "double"), "opts": {"concurrency": 2}},
        mapping("ask", {"prompt": {"template": "count ${stepResults.d1.n}"}}),
        {"type": "agent", "id": "draft", "agentId": "writer"},
        {"type": "sleep", "id": "nap", "duration": 10},
        {"type": "sleepUntil", "id": "past", "date": "2020-01-01T00:00:00Z"},
        {
            "type": "conditional",
            "steps": [tool_step("yes", "echo"), tool_step("no", "echo")],
            "predicates": [
                {"op": "eq", "left": {"path": "stepResults.d1.n"}, "right": {"literal": 6}},
                {"op": "ne", "left": {"path": "stepResults.d1.n"}, "right": {"literal": 6}},
            ],
        },
        mapping("zero", {"n": {"value": 0}}),
        {
            "type": "loop",
            "step": tool_step("up", "inc"),
            "loopType": "dountil",
            "predicate": {"op": "gte", "left": {"path": "inputData.n"}, "right": {"literal": 3}},
        },
        {"type": "workflow", "id": "nested", "workflowId": "child"},
        mapping(
            "out",
            {
                "doubled": {"step": "d1", "path": "n"},
                "fan": {"step": "p2", "path": "n"},
                "each": {"step": "e", "path": "2.n"},
                "draft": {"step": "draft", "path": "text"},
                "branch": {"step": ["yes", "no"], "path": "echo"},
                "loop": {"step": "up", "path": "n"},
                "nested": {"step": "nested", "path": "n"},
                "who": {"requestContextPath": "user"},
                "urgent": {"step": "kind", "path": "values.urgent"},
                "why": {"step": "kind", "path": "answers.urgent.reason"},
            },
        ),
    ],
)

ASK = definition(
    "ask",
    [
        mapping("q", {"question": {"template": "Ship ${initData.what}?"}}),
        tool_step("human", "ask-human"),
        mapping("out", {"answer": {"step": "human", "path": "answer"}, "version": {"value": 1}}),
    ],
)

FOREACH_AND_SLEEP = definition(
    "crashy",
    [
        mapping("howmany", {"count": {"value": 6}}),
        tool_step("list", "range"),
        {"type": "foreach", "id": "each", "step": tool_step("rec", "record"), "opts": {"concurrency": 3}},
        {"type": "sleep", "id": "nap", "duration": 3000},
        mapping("out", {"items": {"step": "rec", "path": "5.n"}}),
    ],
)


SEND = definition("send", [mapping("in", {"n": {"initData": True, "path": "n"}}), tool_step("s", "send")])

STUMBLES = definition(
    "stumbles",
    [
        {"type": "mapping", "id": "in", "mapConfig": {"n": {"initData": True, "path": "n"}}},
        {"type": "tool", "id": "s", "toolId": "stumble", "options": {"retries": 1}},
    ],
)
"""An idempotent tool step whose local attempt fails and whose retry (as an activity) answers."""
