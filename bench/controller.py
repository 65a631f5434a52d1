"""AgentController sessions: a turn through a session against the same turn through a bare `AgentRun`, and
message -> first text delta at a subscriber against Mastra's AgentController, in process and over HTTP.

    .venv/bin/python -m bench.controller              # full run (~2-3 min on 2 cores)
    .venv/bin/python -m bench.controller --quick      # a smoke run (~40 s)
    .venv/bin/python -m bench.controller --no-mastra --no-http    # Keel in process only (no node)

The app is `bench/controller_apps.py`: agent `ctl-bench` on a scripted model and controller `bench-controller`
on it (one mode, no workspace). Two kinds of turn: **text** (the answer `TEXT`, 74 characters streamed in 10
deltas) and **tool** (one call of `note`, allowed by the session's permission, then a short text answer). Mastra's
side (`bench/mastra/controller_bench.mjs`, `@mastra/core` 1.71 AgentController, LibSQL file storage, MockMemory)
runs the same script, the same tool and the same deltas.

(a) **Session vs bare AgentRun.** One dev server (tuned, as `keel dev`), one worker in this process (SQLite
storage), `KeelClient` on the same task queue. *session*: `await session.send_message(content)` (wait=True: the
`send` update, then the `settled` update that answers once the turn has ended); *bare*: `start_run(ctl-bench,
content, thread_id=...)` + `result()` on a thread of its own (so both conversations grow alike). Latency: one
session and one bare thread, turn by turn interleaved (the order alternates each turn). Throughput: C clients at
once, each its own session (or bare thread) doing T turns in a row; session and bare phases alternate. With it,
CPU per turn of this process (worker + client: `time.process_time`) and of the dev server (`/proc`), and the
Temporal history events a turn adds (the session's own + its child run, against the bare run's).

(b) **Message -> first text delta at a subscriber**, and -> `agent_end` at the subscriber. *In process*: Keel
`session.subscribe(listener)` in this process (which also runs the worker: `keel dev`'s shape), t0 just before
`send_message(wait=False)`; Mastra `session.subscribe(listener)`, t0 just before `sendMessage` (node, in
process). The bare AgentRun's first text delta (`run_events.follow`) is shown for reference. *Over HTTP*: Keel
as `keel serve --worker` (API + worker in one process, its own task queue and SQLite file), Mastra as
`controller_bench.mjs --mode serve` (`@mastra/hono`); the same httpx client drives both: `GET S/stream` (SSE)
open, then per turn t0, `POST S/messages`, and the first `message_update` text-delta frame and the `agent_end`
frame read off the stream. Medians and p90 over N turns after warm-up; ratios Keel/Mastra.

The figures go to stdout (markdown), progress to stderr, every sample to `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from bench.controller_apps import AGENT_ID, CONTROLLER_ID, TEXT, app, controller
from bench.floor import server_cpu_seconds
from bench.harness import Stack, free_port, fresh_stack
from bench.http_api import KEEL, MASTRA_DIR, ROOT, ensure_node_modules, process, serving
from keel.client import KeelClient
from keel.client.controller import Session
from keel.client.run_events import follow
from keel.storage import Storage
from keel.worker import build_worker

KINDS = ("text", "tool")
CONTENT = {"text": "hi", "tool": "tool please"}
QUEUE = "bench-controller"
HTTP_QUEUE = "bench-controller-http"


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": statistics.median(values), "p90": pct(values, 90), "n": len(values)}


def ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def check_answer(kind: str, text: str) -> None:
    expected = TEXT if kind == "text" else 'noted: {"saved":1}'
    if text != expected:
        raise RuntimeError(f"{kind} turn answered {text!r}, not {expected!r}")


# --- (a) a turn through a session vs through a bare AgentRun -------------------------------------------------


class Sides:
    """One turn on each side, on a session or a bare thread of a given client."""

    def __init__(self, keel: KeelClient, storage: Storage) -> None:
        self.keel = keel
        self.storage = storage
        self.bare_threads: dict[str, str] = {}
        self.last_bare_run: str | None = None
        self.last_turn_run: str | None = None

    async def session(self, resource_id: str) -> Session:
        session = await controller.create_session(resource_id)
        await session.permissions.set_for_tool("note", "allow")
        return session

    async def session_turn(self, session: Session, kind: str) -> None:
        accepted = await session.send_message(CONTENT[kind])  # wait=True: returns once the turn has ended
        self.last_turn_run = accepted.run_id

    async def bare_turn(self, client_id: str, kind: str) -> None:
        thread = self.bare_threads.setdefault(client_id, f"bare-{client_id}-{uuid.uuid4().hex[:8]}")
        run_id = await self.keel.start_run(AGENT_ID, CONTENT[kind], thread_id=thread, resource_id=f"bare-{client_id}")
        result = await self.keel.result(run_id)
        check_answer(kind, result.text)
        self.last_bare_run = run_id


async def turn_latency(sides: Sides, turns: int, warmup: int) -> tuple[dict[str, Any], Session]:
    session = await sides.session(f"lat-{uuid.uuid4().hex[:8]}")
    samples: dict[str, dict[str, list[float]]] = {k: {"session": [], "bare": []} for k in KINDS}
    for i in range(warmup + turns):
        for kind in KINDS:
            order = ("session", "bare") if i % 2 == 0 else ("bare", "session")
            for who in order:
                t0 = time.perf_counter()
                if who == "session":
                    await sides.session_turn(session, kind)
                else:
                    await sides.bare_turn("lat", kind)
                if i >= warmup:
                    samples[kind][who].append(ms_since(t0))
    messages = await session.thread.list_messages(limit=4)
    texts = [m["content"] if isinstance(m["content"], str) else m for m in messages if m["role"] == "assistant"]
    if not texts:
        raise RuntimeError("the session's thread holds no answer")
    out: dict[str, Any] = {"session_id": session.id}
    for kind in KINDS:
        s, b = samples[kind]["session"], samples[kind]["bare"]
        out[kind] = {
            "session": summary(s),
            "bare": summary(b),
            "ratio_p50": statistics.median(s) / statistics.median(b),
            "samples": samples[kind],
        }
    return out, session


async def history_of_a_turn(stack: Stack, sides: Sides, session: Session) -> dict[str, Any]:
    """The Temporal history one text turn adds: to the session's own history, its child run's, and a bare run's;
    in events and per event type (workflow tasks, search attribute upserts, local activity markers, ...)."""
    from temporalio.api.enums.v1 import EventType

    temporal = stack.client
    handle = temporal.get_workflow_handle(session.id)
    before = len((await handle.fetch_history()).events)
    await sides.session_turn(session, "text")
    added = (await handle.fetch_history()).events[before:]
    await sides.bare_turn("lat", "text")
    assert sides.last_turn_run is not None and sides.last_bare_run is not None
    child = (await temporal.get_workflow_handle(sides.last_turn_run).fetch_history()).events
    bare = (await temporal.get_workflow_handle(sides.last_bare_run).fetch_history()).events

    def types(events: Any) -> dict[str, int]:
        counted: dict[str, int] = {}
        for e in events:
            name = EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")
            counted[name] = counted.get(name, 0) + 1
        return counted

    return {
        "session": {"events": len(added), "types": types(added)},
        "child_run": {"events": len(child), "types": types(child)},
        "bare_run": {"events": len(bare), "types": types(bare)},
    }


async def throughput(stack: Stack, sides: Sides, clients: int, per_client: int, reps: int) -> dict[str, Any]:
    sessions = [await sides.session(f"tp-{c}-{uuid.uuid4().hex[:6]}") for c in range(clients)]
    for c, session in enumerate(sessions):  # warm each session and bare thread (first turn makes the thread)
        await sides.session_turn(session, "text")
        await sides.bare_turn(f"tp{c}", "text")

    async def phase(who: str, kind: str) -> dict[str, float]:
        async def one_client(c: int) -> None:
            for _ in range(per_client):
                if who == "session":
                    await sides.session_turn(sessions[c], kind)
                else:
                    await sides.bare_turn(f"tp{c}", kind)

        cpu0, server0, t0 = time.process_time(), server_cpu_seconds(stack.server), time.perf_counter()
        await asyncio.gather(*(one_client(c) for c in range(clients)))
        elapsed = time.perf_counter() - t0
        n = clients * per_client
        return {
            "per_s": n / elapsed,
            "process_cpu_ms": (time.process_time() - cpu0) * 1000 / n,
            "server_cpu_ms": (server_cpu_seconds(stack.server) - server0) * 1000 / n,
        }

    runs: dict[str, dict[str, list[dict[str, float]]]] = {k: {"session": [], "bare": []} for k in KINDS}
    for rep in range(reps):
        for kind in KINDS:
            order = ("session", "bare") if rep % 2 == 0 else ("bare", "session")
            for who in order:
                figures = await phase(who, kind)
                log(f"  throughput rep {rep + 1} {kind} {who}: {figures['per_s']:.1f} turns/s")
                runs[kind][who].append(figures)
    out: dict[str, Any] = {"clients": clients, "turns_per_client": per_client}
    for kind in KINDS:
        med = {
            who: {m: statistics.median(r[m] for r in runs[kind][who]) for m in runs[kind][who][0]}
            for who in ("session", "bare")
        }
        out[kind] = {**med, "ratio": med["bare"]["per_s"] / med["session"]["per_s"], "runs": runs[kind]}
    return out


# --- (b) message -> first text delta at a subscriber --------------------------------------------------------


class Turn:
    """What a subscriber saw of the turn being timed."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.first_delta: float | None = None
        self.agent_end: float | None = None
        self.text = ""
        self.ended = asyncio.Event()

    def seen(self, event: dict[str, Any], now: float) -> None:
        if event.get("type") == "message_update" and (event.get("event") or {}).get("type") == "text-delta":
            if self.first_delta is None:
                self.first_delta = (now - self.t0) * 1000
            self.text += event["event"].get("delta", "")
        elif event.get("type") == "agent_end" and self.agent_end is None:
            self.agent_end = (now - self.t0) * 1000
            self.ended.set()


def first_delta_figures(samples: dict[str, list[float]]) -> dict[str, Any]:
    return {name: summary(values) for name, values in samples.items()} | {"samples": samples}


async def keel_in_process(sides: Sides, turns: int, warmup: int) -> dict[str, Any]:
    """Keel: a session's subscriber in this process (the worker's too); and a bare run's event reader."""
    session = await sides.session(f"sub-{uuid.uuid4().hex[:8]}")
    current: list[Turn | None] = [None]

    def listener(event: dict[str, Any]) -> None:
        turn = current[0]
        if turn is not None:
            turn.seen(event, time.perf_counter())

    unsubscribe = session.subscribe(listener)
    out: dict[str, dict[str, list[float]]] = {
        k: {"first_delta": [], "agent_end": [], "send_ack": [], "bare_first_delta": [], "bare_finish": []}
        for k in KINDS
    }
    thread = f"bare-sub-{uuid.uuid4().hex[:8]}"
    try:
        for i in range(warmup + turns):
            for kind in KINDS:
                turn = current[0] = Turn()
                await session.send_message(CONTENT[kind], wait=False)
                ack = ms_since(turn.t0)
                async with asyncio.timeout(30):
                    await turn.ended.wait()
                current[0] = None
                check_answer(kind, turn.text)
                # The same turn as a bare run, read by `follow` (the CLI's and the run API's reader).
                t0 = time.perf_counter()
                run_id = await sides.keel.start_run(AGENT_ID, CONTENT[kind], thread_id=thread)
                bare_first = None
                async for shown in follow(sides.storage, run_id):
                    if shown.event.type == "text-delta" and bare_first is None:
                        bare_first = ms_since(t0)
                bare_finish = ms_since(t0)
                if i >= warmup and turn.first_delta is not None and turn.agent_end is not None:
                    row = out[kind]
                    row["first_delta"].append(turn.first_delta)
                    row["agent_end"].append(turn.agent_end)
                    row["send_ack"].append(ack)
                    row["bare_first_delta"].append(bare_first or float("nan"))
                    row["bare_finish"].append(bare_finish)
    finally:
        unsubscribe()
    return {kind: first_delta_figures(out[kind]) for kind in KINDS}


def mastra_in_process(turns: int, warmup: int) -> dict[str, Any]:
    command = ["node", "controller_bench.mjs", "--mode", "inproc", "--turns", str(turns), "--warmup", str(warmup)]
    done = subprocess.run(command, cwd=MASTRA_DIR, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        kind: first_delta_figures({k: found[kind][k] for k in ("first_delta", "agent_end", "turn")}) for kind in KINDS
    }


async def http_turns(base: str, turns: int, warmup: int) -> dict[str, Any]:
    """The same client for both servers: the session's SSE stream open, then per turn POST S/messages and the
    first text-delta frame and the agent_end frame read off the stream."""
    resource = f"http-{uuid.uuid4().hex[:8]}"
    controller_url = f"{base}/api/agent-controller/{CONTROLLER_ID}"
    s = f"{controller_url}/sessions/{resource}"
    current: list[Turn | None] = [None]
    connected = asyncio.Event()
    out: dict[str, dict[str, list[float]]] = {k: {"first_delta": [], "agent_end": [], "send_ack": []} for k in KINDS}
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=None), limits=limits) as http:
        (await http.post(f"{controller_url}/sessions", json={"resourceId": resource})).raise_for_status()
        (await http.put(f"{s}/permissions/tool", json={"toolName": "note", "policy": "allow"})).raise_for_status()

        async def reader() -> None:
            async with http.stream("GET", f"{s}/stream") as response:
                response.raise_for_status()
                buffer = ""
                async for chunk in response.aiter_text():
                    now = time.perf_counter()
                    connected.set()
                    buffer += chunk
                    while "\n\n" in buffer:
                        frame, buffer = buffer.split("\n\n", 1)
                        for line in frame.split("\n"):
                            # only the frames the figures need are decoded (display-state snapshots are not)
                            if line.startswith("data:") and ('"text-delta"' in line or '"agent_end"' in line):
                                event = json.loads(line[5:].strip())
                                turn = current[0]
                                if turn is not None and isinstance(event, dict):
                                    turn.seen(event, now)

        task = asyncio.create_task(reader())
        try:
            async with asyncio.timeout(30):
                await connected.wait()
            for i in range(warmup + turns):
                for kind in KINDS:
                    turn = current[0] = Turn()
                    posted = await http.post(f"{s}/messages", json={"message": CONTENT[kind]})
                    posted.raise_for_status()
                    ack = ms_since(turn.t0)
                    async with asyncio.timeout(30):
                        await turn.ended.wait()
                    current[0] = None
                    check_answer(kind, turn.text)
                    if i >= warmup and turn.first_delta is not None and turn.agent_end is not None:
                        out[kind]["first_delta"].append(turn.first_delta)
                        out[kind]["agent_end"].append(turn.agent_end)
                        out[kind]["send_ack"].append(ack)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return {kind: first_delta_figures(out[kind]) for kind in KINDS}


@contextlib.asynccontextmanager
async def keel_http(address: str, tmp: Path) -> AsyncIterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "KEEL_TEMPORAL_ADDRESS": address,
        "KEEL_TASK_QUEUE": HTTP_QUEUE,
        "KEEL_STORAGE_URL": f"sqlite:///{tmp / 'keel-http.db'}",
        "KEEL_APP": "bench.controller_apps:app",
        "KEEL_API_PORT": str(port),
        "PYTHONPATH": str(ROOT),
    }
    log_file = tmp / "keel-serve.log"
    with process([str(KEEL), "serve", "--worker"], cwd=ROOT, env=env, log=log_file) as proc:
        url = f"http://127.0.0.1:{port}"
        await serving(url, proc, log_file)
        yield url


@contextlib.asynccontextmanager
async def mastra_http(tmp: Path) -> AsyncIterator[str]:
    port = free_port()
    log_file = tmp / "mastra-controller-server.log"
    command = ["node", "controller_bench.mjs", "--mode", "serve", "--port", str(port)]
    with process(command, cwd=MASTRA_DIR, env=dict(os.environ), log=log_file) as proc:
        url = f"http://127.0.0.1:{port}"
        await serving(url, proc, log_file)
        yield url


# --- the run --------------------------------------------------------------------------------------------------


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    mastra = not args.no_mastra
    http = not args.no_http
    if mastra or http:
        ensure_node_modules()
    results: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "out"}}
    async with fresh_stack("keel-bench-controller-") as stack:
        keel = KeelClient(stack.client, task_queue=QUEUE, app=app)
        sides = Sides(keel, stack.storage)
        async with build_worker(stack.client, app, stack.storage, task_queue=QUEUE):
            await controller.init(keel, stack.storage)
            log("(a) turn latency: session vs bare AgentRun ...")
            latency, session = await turn_latency(sides, args.turns, args.warmup)
            results["latency"] = latency
            results["history"] = await history_of_a_turn(stack, sides, session)
            for kind in KINDS:
                row = latency[kind]
                log(f"  {kind}: session {row['session']['p50']:.1f} ms, bare {row['bare']['p50']:.1f} ms")
            log("(a) throughput ...")
            results["throughput"] = await throughput(stack, sides, args.clients, args.per_client, args.reps)
            log("(b) first text delta in process: Keel ...")
            results["in_process"] = {"keel": await keel_in_process(sides, args.turns, args.warmup)}
        if mastra:
            log("(b) first text delta in process: Mastra ...")
            results["in_process"]["mastra"] = await asyncio.to_thread(mastra_in_process, args.turns, args.warmup)
        if http:
            address = stack.client.service_client.config.target_host
            results["http"] = {"keel": [], "mastra": []}
            async with keel_http(address, stack.tmp) as keel_url, mastra_http(stack.tmp) as mastra_url:
                urls = {"keel": keel_url, "mastra": mastra_url}
                for rep in range(args.reps):
                    order = ("keel", "mastra") if rep % 2 == 0 else ("mastra", "keel")
                    for who in order:
                        log(f"(b) first text delta over HTTP, rep {rep + 1}: {who} ...")
                        results["http"][who].append(await http_turns(urls[who], args.turns, args.warmup))
    return results


def pooled(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """The HTTP repetitions' samples pooled per kind and figure."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        names = reps[0][kind]["samples"].keys()
        samples = {n: [x for r in reps for x in r[kind]["samples"][n]] for n in names}
        out[kind] = first_delta_figures(samples)
    return out


def render(results: dict[str, Any]) -> str:
    lines: list[str] = []
    lat, tp, hist = results["latency"], results["throughput"], results["history"]
    lines += [
        "### (a) A turn through a session vs through a bare AgentRun",
        "",
        "| turn | session ms p50 / p90 | bare ms p50 / p90 | session/bare (p50) | session turns/s | bare turns/s "
        "| bare/session (turns/s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in KINDS:
        s, b, t = lat[kind]["session"], lat[kind]["bare"], tp[kind]
        lines.append(
            f"| {kind} | {s['p50']:.1f} / {s['p90']:.1f} | {b['p50']:.1f} / {b['p90']:.1f} | "
            f"**{lat[kind]['ratio_p50']:.2f}** | {t['session']['per_s']:.1f} | {t['bare']['per_s']:.1f} | "
            f"**{t['ratio']:.2f}** |"
        )
    lines += [
        "",
        f"Throughput: {tp['clients']} clients at once, {tp['turns_per_client']} turns each. CPU ms per turn "
        "(this process: worker + client / dev server), session vs bare:",
        "",
    ]
    for kind in KINDS:
        s, b = tp[kind]["session"], tp[kind]["bare"]
        lines.append(
            f"- {kind}: {s['process_cpu_ms']:.1f} / {s['server_cpu_ms']:.1f} vs {b['process_cpu_ms']:.1f} / "
            f"{b['server_cpu_ms']:.1f}"
        )

    def kinds_of(row: dict[str, Any]) -> str:
        t = row["types"]
        tasks = t.get("WORKFLOW_TASK_COMPLETED", 0)
        upserts = t.get("UPSERT_WORKFLOW_SEARCH_ATTRIBUTES", 0)
        markers = t.get("MARKER_RECORDED", 0)
        return f"{row['events']} ({tasks} workflow tasks, {upserts} upserts, {markers} markers)"

    lines.append(
        f"- Temporal history of one text turn: session {kinds_of(hist['session'])} + its child run "
        f"{kinds_of(hist['child_run'])}, against the bare run {kinds_of(hist['bare_run'])}"
    )
    blocks = [("in process", results.get("in_process", {}))]
    if "http" in results:
        blocks.append(("over HTTP", {who: pooled(reps) for who, reps in results["http"].items()}))
    for where, block in blocks:
        keel, mastra = block.get("keel"), block.get("mastra")
        if keel is None:
            continue
        lines += [
            "",
            f"### (b) Message -> first text delta at a subscriber, {where} (ms, p50 / p90)",
            "",
            "| turn | Keel first delta | Mastra first delta | Keel/Mastra (p50) | Keel agent_end | "
            "Mastra agent_end | Keel/Mastra (p50) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for kind in KINDS:
            k = keel[kind]
            m = mastra[kind] if mastra else None
            end_key = "agent_end"

            def cell(fig: dict[str, float] | None) -> str:
                return f"{fig['p50']:.1f} / {fig['p90']:.1f}" if fig else "-"

            def ratio(a: dict[str, float], b: dict[str, float] | None) -> str:
                return f"**{a['p50'] / b['p50']:.2f}**" if b else "-"

            lines.append(
                f"| {kind} | {cell(k['first_delta'])} | {cell(m['first_delta'] if m else None)} | "
                f"{ratio(k['first_delta'], m['first_delta'] if m else None)} | {cell(k[end_key])} | "
                f"{cell(m[end_key] if m else None)} | {ratio(k[end_key], m[end_key] if m else None)} |"
            )
        extra = []
        for kind in KINDS:
            k = keel[kind]
            part = f"{kind}: send ack {k['send_ack']['p50']:.1f}"
            if "bare_first_delta" in k:
                part += (
                    f", bare AgentRun first delta {k['bare_first_delta']['p50']:.1f} / finish "
                    f"{k['bare_finish']['p50']:.1f}"
                )
            if mastra and "turn" in mastra[kind]:
                part += f", Mastra sendMessage resolved {mastra[kind]['turn']['p50']:.1f}"
            extra.append(part)
        lines += ["", "Keel " + "; ".join(extra) + " (ms, p50)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few turns, one repetition")
    parser.add_argument("--turns", type=int, default=30, help="timed turns per kind and side")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--clients", type=int, default=10, help="throughput: clients at once")
    parser.add_argument("--per-client", type=int, default=10, help="throughput: turns per client")
    parser.add_argument("--reps", type=int, default=2, help="throughput and HTTP repetitions")
    parser.add_argument("--no-mastra", action="store_true", help="no Mastra in process (no node)")
    parser.add_argument("--no-http", action="store_true", help="no HTTP part")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "keel-bench-controller.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.turns, args.warmup, args.clients, args.per_client, args.reps = 5, 2, 4, 3, 1
    started = time.perf_counter()
    results = asyncio.run(measure(args))
    results["wall_s"] = time.perf_counter() - started
    args.out.write_text(json.dumps(results, indent=2))
    print(render(results))
    log(f"({results['wall_s']:.0f} s; every sample in {args.out})")


if __name__ == "__main__":
    main()
