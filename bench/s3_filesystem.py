"""`S3Filesystem` write_file / read_file calls per second, against `LocalFilesystem` and Mastra's `@mastra/s3`.

    .venv/bin/python -m bench.s3_filesystem [--calls 200] [--reps 3] [--content-bytes 128] [--json PATH]

One SeaweedFS (`weed mini`, `keel.client.s3_server.LocalS3Server` on a free port in a temp dir, stopped and
removed at the end, even on error). Per repetition, the three sides in an order that rotates each repetition:

- **Keel S3**: a fresh `S3Filesystem` on a fresh key prefix of the bucket, calls made as the workspace tools make
  them (`await fs.write_file(path, content)`, `await fs.read_file(path, encoding="utf-8")`, one after the other);
- **Keel local**: a fresh `LocalFilesystem` in a temp dir, the same calls;
- **Mastra S3**: `bench/mastra/s3_bench.mjs` (`@mastra/s3` 0.6.1 on `@aws-sdk/client-s3`, pinned in
  `bench/mastra/package.json`) in a node process of its own, on the same server, its own fresh prefix:
  `writeFile(path, content)`, `readFile(path, {encoding: "utf-8"})`.

Each side makes `warm_up` untimed write+read pairs first (client, bucket check, imports, JIT), then `calls`
writes of distinct files `f<i>.txt` (content "hello workspace\\n" repeated to `content_bytes`), then `calls`
reads of them, each read checked. Only the calls are timed (inside the node process for Mastra). Reported: write,
read and overall (2 x calls over the two phases' time) calls/s per side, median of the repetitions, and the
ratios Keel-S3/Mastra-S3 and Keel-S3/Keel-local, each the median of the ratios within a repetition.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from keel.client.local_service import free_port
from keel.client.s3_server import LocalS3, LocalS3Server
from keel.workspace_providers import LocalFilesystem, S3Filesystem

MASTRA_DIR = Path(__file__).parent / "mastra"
SIDES = ("keel_s3", "keel_local", "mastra_s3")
KINDS = ("write", "read", "all")
WARM_UP = 50


def content_of(size: int) -> str:
    """The same content as `s3_bench.mjs` makes: "hello workspace\\n" repeated, cut to `size` characters."""
    return ("hello workspace\n" * (size // 16 + 1))[:size]


Filesystem = S3Filesystem | LocalFilesystem


async def timed_calls(fs: Filesystem, calls: int, content: str, warm_up: int) -> dict[str, float]:
    """`warm_up` untimed pairs, then `calls` writes and `calls` reads, each phase timed."""
    for i in range(warm_up):
        await fs.write_file(f"warm/w{i}.txt", content)
        assert await fs.read_file(f"warm/w{i}.txt", encoding="utf-8") == content
    paths = [f"f{i}.txt" for i in range(calls)]
    started = time.perf_counter()
    for path in paths:
        await fs.write_file(path, content)
    write_s = time.perf_counter() - started
    started = time.perf_counter()
    for path in paths:
        text = await fs.read_file(path, encoding="utf-8")
        if text != content:
            raise AssertionError(f"read_file {path}: {text!r:.60}")
    read_s = time.perf_counter() - started
    return figures(calls, write_s, read_s)


def figures(calls: int, write_s: float, read_s: float) -> dict[str, float]:
    return {"write": calls / write_s, "read": calls / read_s, "all": 2 * calls / (write_s + read_s)}


async def keel_s3(s3: LocalS3, prefix: str, calls: int, content: str, warm_up: int) -> dict[str, float]:
    fs = S3Filesystem(
        s3.bucket,
        prefix=prefix,
        endpoint=s3.endpoint,
        region=s3.region,
        access_key_id=s3.access_key,
        secret_access_key=s3.secret_key,
    )
    await fs.init()
    try:
        return await timed_calls(fs, calls, content, warm_up)
    finally:
        await fs.destroy()


async def keel_local(tmp: Path, calls: int, content: str, warm_up: int) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix="local-", dir=tmp))
    try:
        return await timed_calls(LocalFilesystem(directory), calls, content, warm_up)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def ensure_node_modules() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise SystemExit("node and npm are needed (the Mastra side is @mastra/s3 in node)")
    if not (MASTRA_DIR / "node_modules" / "@mastra" / "s3").exists():
        print("[mastra] npm ci ...", file=sys.stderr, flush=True)
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=MASTRA_DIR, check=True, timeout=900)


def mastra_s3(s3: LocalS3, prefix: str, calls: int, content_bytes: int, warm_up: int) -> dict[str, Any]:
    """`s3_bench.mjs` in a node process of its own: its figures and versions (times measured in node)."""
    options = {
        "endpoint": s3.endpoint,
        "bucket": s3.bucket,
        "prefix": prefix,
        "region": s3.region,
        "accessKeyId": s3.access_key,
        "secretAccessKey": s3.secret_key,
        "calls": calls,
        "contentBytes": content_bytes,
        "warmUp": warm_up,
    }
    proc = subprocess.run(
        ["node", "s3_bench.mjs"],
        cwd=MASTRA_DIR,
        input=json.dumps(options),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"node s3_bench.mjs failed: {proc.stderr.strip()[-800:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    ensure_node_modules()
    content = content_of(args.content_bytes)
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    versions: dict[str, Any] = {}
    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-s3-"))
    server = LocalS3Server(tmp, free_port())
    try:
        print("[s3] starting SeaweedFS ...", file=sys.stderr, flush=True)
        s3 = await asyncio.to_thread(server.start)
        for rep in range(args.reps):
            order = SIDES[rep % len(SIDES) :] + SIDES[: rep % len(SIDES)]
            print(f"repetition {rep + 1}/{args.reps}: {', '.join(order)}", file=sys.stderr, flush=True)
            for side in order:
                if side == "keel_s3":
                    runs[side].append(await keel_s3(s3, f"keel-{rep}", args.calls, content, args.warm_up))
                elif side == "keel_local":
                    runs[side].append(await keel_local(tmp, args.calls, content, args.warm_up))
                else:
                    out = await asyncio.to_thread(
                        mastra_s3, s3, f"mastra-{rep}", args.calls, args.content_bytes, args.warm_up
                    )
                    versions = {"mastra_s3": out["mastra_s3_version"], "node": out["node"]}
                    runs[side].append(figures(args.calls, out["write_s"], out["read_s"]))
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(tmp, ignore_errors=True)

    def ratio(num: str, den: str) -> dict[str, float]:
        return {
            kind: statistics.median(a[kind] / b[kind] for a, b in zip(runs[num], runs[den], strict=True))
            for kind in KINDS
        }

    return {
        "calls": args.calls,
        "reps": args.reps,
        "content_bytes": args.content_bytes,
        "warm_up": args.warm_up,
        "versions": {**versions, "python": sys.version.split()[0]},
        "calls_per_s": {side: {k: statistics.median(r[k] for r in runs[side]) for k in KINDS} for side in SIDES},
        "ratios": {
            "keel_s3/mastra_s3": ratio("keel_s3", "mastra_s3"),
            "keel_s3/keel_local": ratio("keel_s3", "keel_local"),
        },
        "all": runs,
    }


def render(r: dict[str, Any]) -> str:
    c, q = r["calls_per_s"], r["ratios"]
    names = {"keel_s3": "Keel S3Filesystem", "keel_local": "Keel LocalFilesystem", "mastra_s3": "Mastra @mastra/s3"}
    lines = [
        f"S3Filesystem calls/s ({r['calls']} writes then {r['calls']} reads of {r['content_bytes']} B files, "
        f"one SeaweedFS, median of {r['reps']}):",
        f"  {'':28} {'write':>9} {'read':>9} {'all':>9}",
    ]
    lines += [f"  {names[s]:28} " + " ".join(f"{c[s][k]:9.1f}" for k in KINDS) for s in SIDES]
    lines += [f"  {name:28} " + " ".join(f"{q[name][k]:9.3f}" for k in KINDS) for name in q]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.s3_filesystem", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="writes, then as many reads, per side (default 200)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions, the sides' order rotating (default 3)")
    parser.add_argument("--content-bytes", type=int, default=128, help="size of each file (default 128)")
    parser.add_argument("--warm-up", type=int, default=WARM_UP, help="untimed write+read pairs first (default 50)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure there as JSON")
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    print(render(result))


if __name__ == "__main__":
    main()
