"""Keel against the durable agent peers on Temporal: pydantic-ai's Temporal integration and the OpenAI Agents SDK's
Temporal plugin (its default setting and its model call as a local activity), side by side.

    .venv/bin/python -m bench.peers [--quick] [--out bench/peers/results.json]

One dev server (tuned), one fake OpenAI-compatible model server (`bench.peers.fake_model`, a process of its own),
and per system a worker process and a driver process on a task queue of its own: Keel's in this venv
(`worker.py --app bench.peers.keel_app:app`, `bench.peers.keel_driver`), the peers' in their own venvs under
`bench/peers/.venvs/` (created on first use; `bench.peers.drivers`). The same turn everywhere: `steps=N` makes the
model call `write_read` once per step, N times, then answer (N+1 model calls over HTTP, N tool activities).
Repetitions are interleaved and their order rotates; histories are read by this process from the server. See
bench/README.md ("Keel and the durable agent peers").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import temporalio
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History
from temporalio.client import Client

from bench.harness import free_port
from keel.client.devserver import TUNED_DYNAMIC_CONFIG, DevServer, DevServerConfig, DevServerError
from keel.plugin import SANDBOX_ENV

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
VENVS = HERE / ".venvs"
TEMPORALIO_PIN = f"temporalio=={temporalio.__version__}"

# The peers' virtualenvs: what each installs (temporalio pinned to Keel's), and the packages whose versions go
# into the results.
VENV_SPECS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pydantic_ai": (
        ("pydantic-ai-slim[temporal,openai]==2.68.0", TEMPORALIO_PIN),
        ("pydantic-ai-slim", "temporalio", "openai", "pydantic"),
    ),
    "openai_agents": (
        ("temporalio-openai-agents==1.1.0", TEMPORALIO_PIN),
        ("temporalio-openai-agents", "openai-agents", "temporalio", "openai", "pydantic"),
    ),
}


@dataclass(frozen=True)
class System:
    key: str
    label: str
    venv: str | None  # None: Keel's own venv
    model_name: str  # what its requests name, for the fake server's call counts
    local_model: bool = False


SYSTEMS = (
    System("keel", "Keel", None, "keel-bench"),
    System("pydantic_ai", "pydantic-ai", "pydantic_ai", "pydantic-ai-bench"),
    System("openai_agents", "OpenAI Agents (default)", "openai_agents", "openai-agents-bench"),
    System("openai_agents_la", "OpenAI Agents (model as local activity)", "openai_agents", "openai-agents-bench", True),
)
PEERS = SYSTEMS[1:]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# --- virtualenvs ---------------------------------------------------------------------------------------------


def ensure_venv(name: str) -> tuple[Path, dict[str, str]]:
    """The peer's venv (created, and its packages installed, unless the marker says it holds them); returns its
    python and the versions installed."""
    requirements, report = VENV_SPECS[name]
    root = VENVS / name
    python = root / "bin" / "python"
    marker = root / ".bench-requirements"
    wanted = "\n".join(requirements) + "\n"
    if not (python.exists() and marker.exists() and marker.read_text() == wanted):
        log(f"[venv] creating {root} with {' '.join(requirements)} ...")
        shutil.rmtree(root, ignore_errors=True)
        VENVS.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements],
            capture_output=True,
            text=True,
        )
        if pip.returncode != 0:
            raise RuntimeError(f"pip install {' '.join(requirements)} failed:\n{pip.stdout}{pip.stderr}")
        marker.write_text(wanted)
    probe = "import importlib.metadata as m, json, sys; print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))"
    out = subprocess.run([str(python), "-c", probe, *report], check=True, capture_output=True, text=True).stdout
    versions: dict[str, str] = json.loads(out)
    return python, versions


# --- processes -----------------------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    proc: asyncio.subprocess.Process
    log_path: Path

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), 0 where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


@contextlib.asynccontextmanager
async def background(
    name: str, cmd: list[str], env: dict[str, str], logs: Path, ready: str, timeout: float = 90
) -> AsyncIterator[Proc]:
    """A long-running process (output to a log file) that is ready once its log holds `ready`; stopped on exit."""
    log_path = logs / f"{name}.log"
    with open(log_path, "wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *cmd, cwd=REPO, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
    p = Proc(name, proc, log_path)
    try:
        deadline = time.monotonic() + timeout
        while ready not in log_path.read_text(errors="replace"):
            if proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start (exit code {proc.returncode}):\n{p.tail()}")
            await asyncio.sleep(0.1)
        yield p
    finally:
        await p.stop()


class Driver:
    """A driver process (`bench.peers.shared.serve_driver`): one JSON command a line, one JSON answer a line."""

    def __init__(self, proc: Proc) -> None:
        self.p = proc

    async def call(self, timeout: float, **cmd: Any) -> dict[str, Any]:
        proc = self.p.proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps(cmd) + "\n").encode())
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), timeout)
        if not line:
            raise RuntimeError(f"driver {self.p.name} exited:\n{self.p.tail()}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"driver {self.p.name}: {answer['error']}\n{self.p.tail()}")
        return answer


@contextlib.asynccontextmanager
async def driver(name: str, cmd: list[str], env: dict[str, str], logs: Path) -> AsyncIterator[Driver]:
    log_path = logs / f"{name}.log"
    with open(log_path, "wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *cmd, cwd=REPO, env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err
        )
    p = Proc(name, proc, log_path)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 90)
        if b'"ready"' not in line:
            raise RuntimeError(f"driver {name} did not start: {line!r}\n{p.tail()}")
        yield Driver(p)
        with contextlib.suppress(Exception):
            proc.stdin.write(b'{"op": "quit"}\n')
            await proc.stdin.drain()
            await asyncio.wait_for(proc.stdout.readline(), 10)
    finally:
        await p.stop()


# --- histories -----------------------------------------------------------------------------------------------


@dataclass
class RunHistory:
    """A run's history, its child workflows' included: events, bytes of the serialized `History` protobufs, the
    number of workflows, and (count, bytes) per event type."""

    events: int = 0
    bytes: int = 0
    workflows: int = 0
    by_type: dict[str, list[int]] = field(default_factory=dict)


async def run_history(
    client: Client, wf_id: str, run_id: str | None = None, into: RunHistory | None = None
) -> RunHistory:
    found = into if into is not None else RunHistory()
    hist = await client.get_workflow_handle(wf_id, run_id=run_id).fetch_history()
    found.events += len(hist.events)
    found.bytes += len(History(events=hist.events).SerializeToString())
    found.workflows += 1
    for event in hist.events:
        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        tally = found.by_type.setdefault(kind, [0, 0])
        tally[0] += 1
        tally[1] += event.ByteSize()
        if event.HasField("child_workflow_execution_started_event_attributes"):
            child = event.child_workflow_execution_started_event_attributes.workflow_execution
            await run_history(client, child.workflow_id, child.run_id, found)
    return found


def model_calls(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats", timeout=10) as response:
        calls: dict[str, int] = json.loads(response.read())
        return calls


# --- the bench -----------------------------------------------------------------------------------------------


@dataclass
class Figures:
    run_seconds: dict[int, list[float]] = field(default_factory=lambda: {1: [], 10: []})
    last_id: dict[int, str] = field(default_factory=dict)
    throughput: list[float] = field(default_factory=list)
    # Seconds of CPU per throughput repetition: the system's worker, the dev server, its driver (the client),
    # the fake model server.
    cpu: dict[str, list[float]] = field(default_factory=lambda: {"worker": [], "server": [], "driver": [], "model": []})
    model_calls_expected: int = 0


async def start_server(tmp: Path) -> DevServer:
    """A tuned dev server on free ports; started again on other ports if it exits at once (a port taken between
    `free_port()` and the server's bind, on a machine where other processes open ports too)."""
    for attempt in range(3):
        cfg = DevServerConfig(
            host="127.0.0.1", port=free_port(), ui_port=free_port(), state_dir=tmp / f"temporal-{attempt}", tuned=True
        )
        server = DevServer(cfg)
        try:
            await server.start(reuse=False)
            return server
        except DevServerError:
            server.stop()
            tail = cfg.log_file.read_text(errors="replace")[-2000:] if cfg.log_file.exists() else "(no log)"
            log(f"[peers] the dev server on {cfg.address} did not start:\n{tail}")
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def bench(args: argparse.Namespace, pythons: dict[str, Path]) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="keel-peers-"))
    logs = tmp / "logs"
    logs.mkdir()
    server: DevServer | None = None
    figures = {s.key: Figures() for s in SYSTEMS}
    out: dict[str, Any] = {}
    try:
        server = await start_server(tmp)
        cfg = server.cfg
        log(f"[peers] dev server on {cfg.address} (tuned), temp dir {tmp}")
        assert server.proc is not None
        server_pid = server.proc.pid
        client = await Client.connect(cfg.address)
        async with contextlib.AsyncExitStack() as stack:
            model_port = free_port()
            model_url = f"http://127.0.0.1:{model_port}/v1"
            base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
            base_env |= {"OPENAI_AGENTS_DISABLE_TRACING": "1", "PYTHONDONTWRITEBYTECODE": "1"}
            fake_cmd = [sys.executable, "-m", "bench.peers.fake_model", "--port", str(model_port)]
            model = await stack.enter_async_context(background("fake-model", fake_cmd, base_env, logs, "listening on"))

            workers: dict[str, Proc] = {}
            drivers: dict[str, Driver] = {}

            async def start(system: System) -> None:
                queue = f"peers-{system.key}-{uuid.uuid4().hex[:8]}"
                env = base_env | {"PEERS_BENCH_DIR": str(tmp / "files" / system.key)}
                if system.venv is None:
                    env |= {
                        "KEEL_TEMPORAL_ADDRESS": cfg.address,
                        "KEEL_STORAGE_URL": f"sqlite:///{tmp / 'keel' / 'keel.db'}",
                        "KEEL_DATA_DIR": str(tmp / "keel"),
                        "OPENAI_BASE_URL": model_url,
                        "OPENAI_API_KEY": "x",
                    }
                    if args.sandbox == "all":
                        env[SANDBOX_ENV] = "1"
                    (tmp / "keel").mkdir(exist_ok=True)
                    worker_cmd = [sys.executable, "worker.py", "--app", "bench.peers.keel_app:app"]
                    worker_cmd += ["--task-queue", queue]
                    driver_cmd = [sys.executable, "-m", "bench.peers.keel_driver"]
                    driver_cmd += ["--address", cfg.address, "--task-queue", queue]
                    ready = "keel worker: task queue"
                else:
                    common = ["--address", cfg.address, "--task-queue", queue, "--model-url", model_url]
                    common += ["--local-model"] if system.local_model else []
                    python = str(pythons[system.venv])
                    if args.sandbox == "none":
                        env["PEERS_UNSANDBOXED"] = "1"
                    worker_cmd = [python, "-m", "bench.peers.drivers", system.venv, "worker", *common]
                    driver_cmd = [python, "-m", "bench.peers.drivers", system.venv, "driver", *common]
                    ready = "peer worker ready"
                workers[system.key] = await stack.enter_async_context(
                    background(f"{system.key}-worker", worker_cmd, env, logs, ready)
                )
                drivers[system.key] = await stack.enter_async_context(
                    driver(f"{system.key}-driver", driver_cmd, env, logs)
                )

            for system in SYSTEMS:  # one at a time: startup imports are CPU-heavy on 2 cores
                log(f"[peers] starting {system.label}: worker and driver")
                await start(system)

            async def run(system: System, n: int) -> tuple[float, str]:
                answer = await drivers[system.key].call(300, op="run", n=n)
                figures[system.key].model_calls_expected += n + 1
                return float(answer["seconds"]), str(answer["id"])

            log("[peers] warm-up")
            for _ in range(args.warmup):
                for system in SYSTEMS:
                    for n in (1, 10):
                        await run(system, n)

            # --- ms per run, interleaved, the order rotating each repetition --------------------------------
            for rep in range(args.reps):
                order = list(SYSTEMS[rep % len(SYSTEMS) :] + SYSTEMS[: rep % len(SYSTEMS)])
                for n in (1, 10):
                    for system in order:
                        seconds, wf_id = await run(system, n)
                        figures[system.key].run_seconds[n].append(seconds)
                        figures[system.key].last_id[n] = wf_id
                log(
                    f"[peers] rep {rep + 1}/{args.reps}: "
                    + ", ".join(
                        f"{s.key} {figures[s.key].run_seconds[1][-1] * 1000:.0f}/"
                        f"{figures[s.key].run_seconds[10][-1] * 1000:.0f} ms"
                        for s in SYSTEMS
                    )
                )

            # --- throughput ---------------------------------------------------------------------------------
            for rep in range(args.tp_reps):
                order = list(SYSTEMS[rep % len(SYSTEMS) :] + SYSTEMS[: rep % len(SYSTEMS)])
                for system in order:
                    pids = {
                        "worker": workers[system.key].proc.pid,
                        "server": server_pid,
                        "driver": drivers[system.key].p.proc.pid,
                        "model": model.proc.pid,
                    }
                    cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
                    answer = await drivers[system.key].call(
                        1800, op="throughput", n=1, total=args.tp_runs, concurrency=args.concurrency
                    )
                    f = figures[system.key]
                    for k, pid in pids.items():
                        f.cpu[k].append(cpu_seconds(pid) - cpu0[k])
                    f.throughput.append(float(answer["runs_per_s"]))
                    f.model_calls_expected += 2 * args.tp_runs
                    log(f"[peers] throughput {system.key}: {answer['runs_per_s']:.1f} runs/s")

            # --- histories and model calls ------------------------------------------------------------------
            served = model_calls(model_url)
            for system in SYSTEMS:
                f = figures[system.key]
                hist = {n: await run_history(client, f.last_id[n]) for n in (1, 10)}
                ms = {n: med(f.run_seconds[n]) * 1000 for n in (1, 10)}
                expected = sum(
                    figures[s.key].model_calls_expected for s in SYSTEMS if s.model_name == system.model_name
                )
                out[system.key] = {
                    "label": system.label,
                    "ms_per_run": {str(n): ms[n] for n in (1, 10)},
                    "ms_per_tool_step": (ms[10] - ms[1]) / 9,
                    "run_seconds": {str(n): f.run_seconds[n] for n in (1, 10)},
                    "runs_per_s": med(f.throughput),
                    "runs_per_s_all": f.throughput,
                    "history_events": {str(n): hist[n].events for n in (1, 10)},
                    "history_bytes": {str(n): hist[n].bytes for n in (1, 10)},
                    "workflows_per_run": {str(n): hist[n].workflows for n in (1, 10)},
                    "events_per_tool_call": (hist[10].events - hist[1].events) / 9,
                    "bytes_per_tool_call": (hist[10].bytes - hist[1].bytes) / 9,
                    "history_by_event_type": {str(n): hist[n].by_type for n in (1, 10)},
                    "cpu_ms_per_run": {k: med(v) * 1000 / args.tp_runs for k, v in f.cpu.items()},
                    "cpu_ms_per_run_total": med([sum(x) for x in zip(*f.cpu.values(), strict=True)])
                    * 1000
                    / args.tp_runs,
                    "model_calls": {
                        "model": system.model_name,
                        "served": served.get(system.model_name, 0),
                        "expected": expected,
                    },
                }
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        log("[peers] stopped every process, removed the temp dir")
    return out


def ratios(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Keel/peer for each figure (below 1 is Keel smaller: better for times and history, worse for runs/s)."""
    keel = results["keel"]
    out: dict[str, dict[str, float]] = {}
    for peer in PEERS:
        p = results[peer.key]
        out[peer.key] = {
            "ms_per_run_1": keel["ms_per_run"]["1"] / p["ms_per_run"]["1"],
            "ms_per_run_10": keel["ms_per_run"]["10"] / p["ms_per_run"]["10"],
            "ms_per_tool_step": keel["ms_per_tool_step"] / p["ms_per_tool_step"],
            "runs_per_s": keel["runs_per_s"] / p["runs_per_s"],
            "history_events_1": keel["history_events"]["1"] / p["history_events"]["1"],
            "history_events_10": keel["history_events"]["10"] / p["history_events"]["10"],
            "events_per_tool_call": keel["events_per_tool_call"] / p["events_per_tool_call"],
            "history_bytes_1": keel["history_bytes"]["1"] / p["history_bytes"]["1"],
            "history_bytes_10": keel["history_bytes"]["10"] / p["history_bytes"]["10"],
            "bytes_per_tool_call": keel["bytes_per_tool_call"] / p["bytes_per_tool_call"],
            **{
                f"{k}_cpu_ms_per_run": keel["cpu_ms_per_run"][k] / p["cpu_ms_per_run"][k]
                for k in keel["cpu_ms_per_run"]
            },
            "cpu_ms_per_run_total": keel["cpu_ms_per_run_total"] / p["cpu_ms_per_run_total"],
        }
    return out


# (row label, how to read the figure, its ratio key, format)
ROWS: tuple[tuple[str, Any, str, str], ...] = (
    ("ms per run, N=1", lambda r: r["ms_per_run"]["1"], "ms_per_run_1", "{:.1f}"),
    ("ms per run, N=10", lambda r: r["ms_per_run"]["10"], "ms_per_run_10", "{:.1f}"),
    ("**ms per tool step**", lambda r: r["ms_per_tool_step"], "ms_per_tool_step", "{:.1f}"),
    ("**runs/s, 20 in flight**", lambda r: r["runs_per_s"], "runs_per_s", "{:.1f}"),
    ("history events, N=1", lambda r: r["history_events"]["1"], "history_events_1", "{:d}"),
    ("history events, N=10", lambda r: r["history_events"]["10"], "history_events_10", "{:d}"),
    ("**events per tool call**", lambda r: r["events_per_tool_call"], "events_per_tool_call", "{:.1f}"),
    ("history bytes, N=1", lambda r: r["history_bytes"]["1"], "history_bytes_1", "{:,d}"),
    ("**history bytes, N=10**", lambda r: r["history_bytes"]["10"], "history_bytes_10", "{:,d}"),
    ("bytes per tool call", lambda r: r["bytes_per_tool_call"], "bytes_per_tool_call", "{:,.0f}"),
    ("CPU ms per run: worker", lambda r: r["cpu_ms_per_run"]["worker"], "worker_cpu_ms_per_run", "{:.1f}"),
    ("CPU ms per run: dev server", lambda r: r["cpu_ms_per_run"]["server"], "server_cpu_ms_per_run", "{:.1f}"),
    ("CPU ms per run: driver (client)", lambda r: r["cpu_ms_per_run"]["driver"], "driver_cpu_ms_per_run", "{:.1f}"),
    ("CPU ms per run: fake model", lambda r: r["cpu_ms_per_run"]["model"], "model_cpu_ms_per_run", "{:.1f}"),
    ("CPU ms per run: all four", lambda r: r["cpu_ms_per_run_total"], "cpu_ms_per_run_total", "{:.1f}"),
)

# The acceptance targets: (ratio key, bound, "<=" or ">=", what).
TARGETS = (
    ("ms_per_tool_step", 0.33, "<=", "per tool step"),
    ("runs_per_s", 3.0, ">=", "runs/s at 20 in flight"),
    ("events_per_tool_call", 0.25, "<=", "history events per tool call"),
    ("history_bytes_10", 0.5, "<=", "history bytes at N=10"),
)


def render(results: dict[str, Any]) -> str:
    systems, rat, params = results["systems"], results["ratios"], results["params"]
    sandbox = {
        "default": "each system's default (Keel's AgentRun unsandboxed, the peers' workflows sandboxed)",
        "all": "every workflow sandboxed",
        "none": "no workflow sandboxed",
    }[params["sandbox"]]
    head = ["", "Keel", *(f"{p.label}" for p in PEERS)]
    lines = [
        f"Tuned dev server; ms per run: median of {params['reps']} (after {params['warmup']} warm-up round(s)); "
        f"runs/s: {params['throughput_runs']} runs of N=1, {params['concurrency']} in flight, median of "
        f"{params['throughput_reps']}; CPU: user+system time of each process during those runs, per run; "
        f"history: the last run at each N; sandbox: {sandbox}.",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    for label, get, key, fmt in ROWS:
        cells = [label, fmt.format(get(systems["keel"]))]
        for peer in PEERS:
            cells.append(f"{fmt.format(get(systems[peer.key]))} ({rat[peer.key][key]:.2f}x)")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Peer cells: value (Keel/peer). Targets, Keel/peer:")
    for key, bound, op, what in TARGETS:
        verdicts = []
        for peer in PEERS:
            value = rat[peer.key][key]
            met = value <= bound if op == "<=" else value >= bound
            verdicts.append(f"{peer.label} {value:.3f} ({'met' if met else 'NOT met'})")
        lines.append(f"- {what} {op} {bound}: " + "; ".join(verdicts))
    calls = {s.model_name: systems[s.key]["model_calls"] for s in SYSTEMS}
    lines.append(
        "- model calls served/expected by the fake server, per model name (both OpenAI Agents columns share one): "
        + ", ".join(f"{name} {c['served']}/{c['expected']}" for name, c in calls.items())
    )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    load_start = os.getloadavg()
    pythons: dict[str, Path] = {}
    versions: dict[str, dict[str, str]] = {}
    for name in VENV_SPECS:
        pythons[name], versions[name] = ensure_venv(name)
    t1 = time.perf_counter()
    systems = await bench(args, pythons)
    results: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "temporalio": temporalio.__version__,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
        },
        "params": {
            "quick": args.quick,
            "server": "dev server, tuned",
            "dynamic_config": TUNED_DYNAMIC_CONFIG,
            "warmup": args.warmup,
            "reps": args.reps,
            "throughput_runs": args.tp_runs,
            "throughput_reps": args.tp_reps,
            "concurrency": args.concurrency,
            "sandbox": args.sandbox,
        },
        "peer_versions": versions,
        "systems": systems,
        "ratios": ratios(systems),
        "venv_seconds": t1 - t0,
        "bench_seconds": time.perf_counter() - t1,
    }
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 repetition, 20 runs of throughput (a smoke run)")
    parser.add_argument("--out", default=str(HERE / "results.json"), help="where to write the JSON results")
    parser.add_argument(
        "--sandbox",
        choices=["default", "all", "none"],
        default="default",
        help="workflows in Temporal's sandbox: each system's default (Keel's AgentRun unsandboxed, the peers' "
        "workflows sandboxed, as their docs run them), all of them, or none",
    )
    parser.add_argument("--reps", type=int, help="repetitions of the N=1 and N=10 runs (default 7; --quick 1)")
    parser.add_argument("--tp-reps", type=int, help="repetitions of the throughput figure (default 2; --quick 1)")
    args = parser.parse_args(argv)
    args.concurrency = 20
    if args.quick:
        args.warmup, reps, args.tp_runs, tp_reps = 1, 1, 20, 1
    else:
        args.warmup, reps, args.tp_runs, tp_reps = 2, 7, 100, 2
    args.reps = args.reps or reps
    args.tp_reps = args.tp_reps or tp_reps
    results = asyncio.run(main_async(args))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(render(results))
    print(
        f"\n(bench {results['bench_seconds']:.0f} s, venvs {results['venv_seconds']:.0f} s; load average "
        f"{results['machine']['loadavg_start'][0]:.2f} at the start, {results['machine']['loadavg_end'][0]:.2f} "
        f"at the end; JSON written to {args.out})",
        flush=True,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # sdk-python#300: a Temporal client process can crash at interpreter exit


if __name__ == "__main__":
    main()
