"""Workspace search: Keel's BM25 and hybrid query latency and index throughput, side by side in one run with
Mastra's Workspace BM25 on the same files, and the default embedder's throughput.

    .venv/bin/python -m bench.search [--sizes 10000,100000] [--passes 3] [--no-mastra] [--no-hybrid] [--no-embed]

The corpus is generated (seeded, so every run indexes the same text): a Zipf-distributed vocabulary (real stop
words at the top ranks, then pseudo-words), 40-70 words a document over lines of 6-14 words, ~376 characters, so
each file is one chunk. Files go under a temp dir, 1,000 to a folder. The queries are 2-3 words drawn from the
same distribution (stop words left out), so common terms with long postings come up as they would.

Per size, in this order, one process at a time:

- **Keel BM25, `index()`**: `Workspace(bm25=True)`, `await workspace.index(path, content)` per document
  (contents already in memory); chunks/s. **`files`**: a fresh workspace's `rebuild_search_index(["**/*"])`,
  what `auto_index_paths` runs at `init()` (the walk, the reads, chunking, BM25); chunks/s.
- **Keel queries**: `workspace.search(q, top_k=10, mode="bm25")`, the first 50 queries untimed, then
  `--passes` timed passes over all of them; median and p95 of every query's latency.
- **Mastra** (`bench/mastra/search_bench.mjs`, `@mastra/core` 1.71): the same three measurements with the same
  calls (`workspace.index`, `rebuildSearchIndex(["**/*"])`, `workspace.search(q, {topK: 10, mode: "bm25"})`),
  and its answers, compared with Keel's (same ids in the same order, scores within 1e-9). Up to 10k chunks also
  its hybrid: `LibSQLVector` on `:memory:` + the same hashing embedder, built by `rebuildSearchIndex`.
- **Keel hybrid**: `bm25=True` + `InMemoryVectorStore` + `HashingEmbedder` (384 dimensions, deterministic, cheap:
  MiniLM would take hours on 100k chunks here), indexed by `SearchEngine.index_many` in groups of 256 (and, up
  to 10k, by `rebuild_search_index`, which is quadratic with a vector store for now); latency of
  `mode="hybrid"` and `mode="vector"`, with numpy's BLAS threads as they come and limited to one. The real
  embedder's cost per query is measured on its own (below) and adds to both.

Then `SentenceTransformerEmbedder` (all-MiniLM-L6-v2, CPU, batches of 64): sentences/s on short sentences and on
~4,000-character chunks, and the latency of one query's embedding.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from keel.workspace_providers.bm25 import STOPWORDS, tokenize
from keel.workspace_providers.embedders import SentenceTransformerEmbedder, embed_all, embed_one
from keel.workspace_providers.local_filesystem import LocalFilesystem
from keel.workspace_providers.search import SearchDocument
from keel.workspace_providers.vector_stores import InMemoryVectorStore
from keel.workspace_providers.workspace import Workspace

MASTRA_DIR = Path(__file__).parent / "mastra"
TOP_K = 10
VOCABULARY = 50_000
DIMENSION = 384
PER_FOLDER = 1000
INDEX_GROUP = 256
WARM_UP = 50
MASTRA_HYBRID_MAX = 10_000
"""LibSQLVector indexes ~65 chunks/s here (2k chunks: 31 s), so Mastra's hybrid runs at the small size only."""
# The most frequent English words first (the stop words the tokenizer drops among them), then pseudo-words.
COMMON = "the of and to in is that it was for on are as with he at by from be this or an will were has its a"
SUBJECTS = ["The worker", "A client", "Our team", "The server", "Each agent", "The scheduler", "A user", "The model"]
VERBS = ["updates", "reads", "stores", "rejects", "retries", "indexes", "approves", "streams", "checks", "sends"]
ADJECTIVES = ["pending", "large", "stale", "new", "signed", "cached", "broken", "final", "remote", "local"]
NOUNS = ["invoice", "report", "message", "workflow", "document", "payment", "order", "schedule", "file", "request"]
PLACES = ["before noon", "every hour", "after the review", "in the queue", "for the customer", "on the main branch"]
SYLLABLES = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "er", "an")]


# --- the corpus ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    ids: list[str]
    contents: list[str]
    queries: list[str]


def vocabulary(rng: np.random.Generator) -> list[str]:
    words = COMMON.split()
    seen = set(words)
    while len(words) < VOCABULARY:
        count = int(rng.integers(1, 5))
        word = "".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), count))
        if len(word) >= 3 and word not in seen:
            seen.add(word)
            words.append(word)
    return words


def zipf(size: int) -> np.ndarray:
    """Zipf-Mandelbrot weights (exponent 1.07, offset 2.7): close to word frequencies in English text."""
    weights = 1.0 / (np.arange(size) + 2.7) ** 1.07
    return np.asarray(weights / weights.sum())


def generate(count: int, seed: int, queries: int) -> Corpus:
    rng = np.random.default_rng(seed)
    words = vocabulary(rng)
    weights = zipf(len(words))
    lengths = rng.integers(40, 71, count)
    drawn = rng.choice(len(words), size=int(lengths.sum()), p=weights)
    ids, contents = [], []
    at = 0
    for i, length in enumerate(lengths):
        doc = [words[w] for w in drawn[at : at + length]]
        at += int(length)
        lines, start = [], 0
        while start < len(doc):
            width = int(rng.integers(6, 15))
            line = doc[start : start + width]
            lines.append(" ".join([line[0].capitalize(), *line[1:]]) + ".")
            start += width
        ids.append(f"d{i // PER_FOLDER:03d}/doc{i:06d}.txt")
        contents.append("\n".join(lines))
    content_words = np.array([i for i, w in enumerate(words) if w not in STOPWORDS])
    content_weights = weights[content_words] / weights[content_words].sum()
    asked = [
        " ".join(words[w] for w in rng.choice(content_words, size=int(rng.integers(2, 4)), p=content_weights))
        for _ in range(queries)
    ]
    return Corpus(ids, contents, asked)


def write(corpus: Corpus, root: Path) -> None:
    for folder in sorted({i.split("/")[0] for i in corpus.ids}):
        (root / folder).mkdir()
    for doc_id, content in zip(corpus.ids, corpus.contents, strict=True):
        (root / doc_id).write_text(content, encoding="utf-8")


# --- the cheap embedder --------------------------------------------------------------------------------------


class HashingEmbedder:
    """Feature hashing of the BM25 tokens into 384 signed buckets, unit length: deterministic and far cheaper
    than MiniLM, so a 100k-chunk vector index can be built here; the query cost it leaves out is the model's."""

    batch = True
    max_batch_size = INDEX_GROUP

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[int, float]] = {}

    def _bucket(self, token: str) -> tuple[int, float]:
        found = self._buckets.get(token)
        if found is None:
            h = zlib.crc32(token.encode())
            found = self._buckets[token] = (h % DIMENSION, 1.0 if h & 0x80000000 else -1.0)
        return found

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in tokenize(text):
                column, sign = self._bucket(token)
                out[row, column] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        rows: list[list[float]] = (out / np.where(norms == 0, 1, norms)).tolist()
        return rows


# --- Keel -----------------------------------------------------------------------------------------------------


async def timed_queries(workspace: Workspace, queries: list[str], passes: int, mode: str) -> dict[str, Any]:
    for q in queries[:WARM_UP]:
        await workspace.search(q, top_k=TOP_K, mode=mode)
    latencies: list[float] = []
    answers: list[list[tuple[str, float]]] = []
    for pass_ in range(passes):
        for q in queries:
            started = time.perf_counter()
            results = await workspace.search(q, top_k=TOP_K, mode=mode)
            latencies.append((time.perf_counter() - started) * 1000)
            if pass_ == 0:
                answers.append([(r.id, r.score) for r in results])
    return {"latencies_ms": latencies, "answers": answers}


async def keel_bm25(corpus: Corpus, root: Path, passes: int) -> dict[str, Any]:
    workspace = Workspace(filesystem=LocalFilesystem(root), bm25=True)
    await workspace.init()
    started = time.perf_counter()
    for doc_id, content in zip(corpus.ids, corpus.contents, strict=True):
        await workspace.index(doc_id, content)
    index_s = time.perf_counter() - started
    queries = await timed_queries(workspace, corpus.queries, passes, "bm25")
    del workspace
    gc.collect()
    workspace = Workspace(filesystem=LocalFilesystem(root), bm25=True)
    await workspace.init()
    started = time.perf_counter()
    indexed = await workspace.rebuild_search_index(["**/*"])
    files_s = time.perf_counter() - started
    assert len(indexed) == len(corpus.ids), (len(indexed), len(corpus.ids))
    return {"index_s": index_s, "files_s": files_s, **queries}


def hybrid_workspace(root: Path) -> Workspace:
    return Workspace(
        filesystem=LocalFilesystem(root), bm25=True, vector_store=InMemoryVectorStore(), embedder=HashingEmbedder()
    )


async def keel_hybrid(corpus: Corpus, root: Path, passes: int, files: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if files:  # as Mastra's side indexes; quadratic in Keel for now (see bench/README.md), so the small size only
        workspace = hybrid_workspace(root)
        await workspace.init()
        started = time.perf_counter()
        indexed = await workspace.rebuild_search_index(["**/*"])
        out["files_s"] = time.perf_counter() - started
        assert len(indexed) == len(corpus.ids), (len(indexed), len(corpus.ids))
        del workspace
        gc.collect()
    workspace = hybrid_workspace(root)
    await workspace.init()
    engine = workspace.search_engine
    assert engine is not None
    docs = [SearchDocument(i, c) for i, c in zip(corpus.ids, corpus.contents, strict=True)]
    started = time.perf_counter()
    for at in range(0, len(docs), INDEX_GROUP):
        await engine.index_many(docs[at : at + INDEX_GROUP])
    out["index_s"] = time.perf_counter() - started
    for threads in ("default", "1"):
        with blas_threads(threads):
            for mode in ("hybrid", "vector"):
                found = await timed_queries(workspace, corpus.queries, passes, mode)
                out[f"{mode}_{threads}_ms"] = found["latencies_ms"]
                if threads == "default":
                    out[f"{mode}_answers"] = found["answers"]
    return out


@contextlib.contextmanager
def blas_threads(threads: str) -> Iterator[None]:
    """numpy's BLAS (OpenBLAS: one thread per core) as it comes, or limited to one thread: on a busy 2-core
    machine its threads wait for each other, and the store's matrix product takes milliseconds instead of µs."""
    if threads == "default":
        yield
        return
    from threadpoolctl import threadpool_limits  # installed with sentence-transformers (scikit-learn)

    with threadpool_limits(limits=int(threads), user_api="blas"):
        yield


def english(count: int, seed: int) -> list[str]:
    """Short English sentences (the pseudo-words of the BM25 corpus split into many word pieces)."""
    rng = random.Random(seed)
    pick = rng.choice
    return [
        f"{pick(SUBJECTS)} {pick(VERBS)} the {pick(ADJECTIVES)} {pick(NOUNS)} {pick(PLACES)}." for _ in range(count)
    ]


async def embedding(seed: int) -> dict[str, Any]:
    """The real embedder: 512 short English sentences and 128 ~4,000-character chunks of them (the model reads
    the first 256 word pieces of each: MiniLM's `max_seq_length`)."""
    embedder = SentenceTransformerEmbedder()
    await embed_all(embedder, ["warm up"] * 8)  # loads the model
    lines = english(512, seed)
    text = " ".join(english(128 * 70, seed + 1))
    long = [text[i * 4000 : (i + 1) * 4000] for i in range(128)]
    figures: dict[str, Any] = {"short_chars": statistics.mean(map(len, lines)), "long_chars": 4000}
    for name, texts in (("short", lines), ("long", long)):
        started = time.perf_counter()
        vectors = await embed_all(embedder, texts)
        figures[f"{name}_per_s"] = len(texts) / (time.perf_counter() - started)
        figures[f"{name}_count"] = len(vectors)
    one: list[float] = []
    for q in english(50, seed + 2):
        started = time.perf_counter()
        await embed_one(embedder, q)
        one.append((time.perf_counter() - started) * 1000)
    figures["query_ms"] = statistics.median(one)
    return figures


# --- Mastra ---------------------------------------------------------------------------------------------------


def mastra(corpus: Corpus, root: Path, work: Path, passes: int, hybrid_passes: int) -> dict[str, Any]:
    if shutil.which("node") is None:
        return {"error": "node not found"}
    if not (MASTRA_DIR / "node_modules" / "@mastra" / "core").exists():
        print("[mastra] npm ci ...", file=sys.stderr, flush=True)
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=MASTRA_DIR, check=True, timeout=600)
    manifest, queries = work / "docs.json", work / "queries.json"
    manifest.write_text(json.dumps(corpus.ids))
    queries.write_text(json.dumps(corpus.queries))
    command = ["node", "--max-old-space-size=6144", "search_bench.mjs", "--corpus", str(root)]
    command += ["--manifest", str(manifest), "--queries", str(queries), "--top-k", str(TOP_K)]
    command += ["--passes", str(passes), "--warm-up", str(WARM_UP), "--hybrid-passes", str(hybrid_passes)]
    proc = subprocess.run(command, cwd=MASTRA_DIR, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        return {"error": f"node search_bench.mjs failed: {proc.stderr.strip()[-800:]}"}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def agreement(
    keel: list[list[tuple[str, float]]], other: list[list[list[Any]]], within: float = 1e-9
) -> dict[str, int]:
    """Queries whose top-k ids are the same in the same order, and those whose top-k scores agree `within` (the
    same ranking up to the order of ties)."""
    same_ids = same_scores = 0
    for mine, theirs in zip(keel, other, strict=True):
        same_ids += [i for i, _ in mine] == [i for i, _ in theirs]
        same_scores += len(mine) == len(theirs) and all(
            abs(a[1] - b[1]) <= within for a, b in zip(mine, theirs, strict=True)
        )
    return {"queries": len(keel), "same_ids": same_ids, "same_scores": same_scores}


# --- the run --------------------------------------------------------------------------------------------------


def stats(latencies: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(latencies),
        "p95_ms": statistics.quantiles(latencies, n=100, method="inclusive")[94],
    }


async def one_size(args: argparse.Namespace, size: int, work: Path) -> dict[str, Any]:
    print(f"[{size}] generating the corpus ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    corpus = generate(size, args.seed, args.queries)
    root = work / f"corpus-{size}"
    root.mkdir()
    write(corpus, root)
    out: dict[str, Any] = {
        "docs": size,
        "generate_s": time.perf_counter() - started,
        "mean_chars": statistics.mean(map(len, corpus.contents)),
        "queries": corpus.queries,
    }
    print(f"[{size}] Keel BM25 ...", file=sys.stderr, flush=True)
    keel = await keel_bm25(corpus, root, args.passes)
    out["keel"] = {
        "index_per_s": size / keel["index_s"],
        "files_per_s": size / keel["files_s"],
        **stats(keel["latencies_ms"]),
        "raw": {k: v for k, v in keel.items() if k != "answers"},
    }
    gc.collect()
    their_hybrid: dict[str, Any] = {}
    if args.mastra:
        print(f"[{size}] Mastra BM25 ...", file=sys.stderr, flush=True)
        hybrid_passes = args.hybrid_passes if args.hybrid and size <= MASTRA_HYBRID_MAX else 0
        theirs = mastra(corpus, root, work, args.passes, hybrid_passes)
        if "error" in theirs:
            out["mastra"] = theirs
        else:
            out["mastra"] = {
                "index_per_s": size / theirs["index_s"],
                "files_per_s": size / theirs["files_s"],
                **stats(theirs["latencies_ms"]),
                "raw": {k: v for k, v in theirs.items() if k not in ("answers", "hybrid")},
            }
            if theirs["hybrid"]:
                h = their_hybrid = theirs["hybrid"]
                out["mastra_hybrid"] = {
                    "index_per_s": size / h["index_s"],
                    "hybrid": stats(h["hybrid_ms"]),
                    "vector": stats(h["vector_ms"]),
                }
            out["agreement"] = agreement(keel["answers"], theirs["answers"])
            k, m = out["keel"], out["mastra"]
            out["ratios"] = {
                "index() throughput Keel/Mastra": k["index_per_s"] / m["index_per_s"],
                "files throughput Keel/Mastra": k["files_per_s"] / m["files_per_s"],
                "median latency Keel/Mastra": k["median_ms"] / m["median_ms"],
                "p95 latency Keel/Mastra": k["p95_ms"] / m["p95_ms"],
            }
    if args.hybrid:
        print(f"[{size}] Keel hybrid ...", file=sys.stderr, flush=True)
        hybrid = await keel_hybrid(corpus, root, args.hybrid_passes, size <= MASTRA_HYBRID_MAX)
        out["hybrid"] = {
            "index_per_s": size / hybrid["index_s"],
            **({"files_per_s": size / hybrid["files_s"]} if "files_s" in hybrid else {}),
            **{name[: -len("_ms")]: stats(values) for name, values in hybrid.items() if name.endswith("_ms")},
        }
        if their_hybrid:
            k, m = out["hybrid"], out["mastra_hybrid"]
            out["hybrid_agreement"] = {
                mode: agreement(hybrid[f"{mode}_answers"], their_hybrid[f"{mode}_answers"], 1e-5)
                for mode in ("hybrid", "vector")
            }
            out["hybrid_ratios"] = {
                "files throughput Keel/Mastra": k["files_per_s"] / m["index_per_s"],
                **{
                    f"{mode} {stat} latency Keel/Mastra": k[f"{mode}_default"][f"{stat}_ms"] / m[mode][f"{stat}_ms"]
                    for mode in ("hybrid", "vector")
                    for stat in ("median", "p95")
                },
            }
        gc.collect()
    shutil.rmtree(root)
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"sizes": [], "passes": args.passes, "top_k": TOP_K, "seed": args.seed}
    with tempfile.TemporaryDirectory(prefix="keel-bench-search-") as tmp:
        for size in args.sizes:
            result["sizes"].append(await one_size(args, size, Path(tmp)))
            gc.collect()
        if args.embed:
            print("embedding throughput ...", file=sys.stderr, flush=True)
            result["embedding"] = await embedding(args.seed)
    return result


def render(r: dict[str, Any]) -> str:
    lines = [
        f"BM25, top_k {r['top_k']}, {len(r['sizes'][0]['queries'])} queries x {r['passes']} passes "
        "(throughput: higher is better; latency: lower is better; Keel/Mastra > 1 in throughput and < 1 in "
        "latency mean Keel is faster)",
        f"{'chunks':>7} | {'':6} | {'index() /s':>10} | {'files /s':>9} | {'median ms':>9} | {'p95 ms':>7}",
    ]
    for s in r["sizes"]:
        rows = [("Keel", s["keel"])]
        if "error" not in s.get("mastra", {"error": ""}):
            rows.append(("Mastra", s["mastra"]))
        for who, f in rows:
            lines.append(
                f"{s['docs']:>7} | {who:6} | {f['index_per_s']:>10.0f} | {f['files_per_s']:>9.0f} | "
                f"{f['median_ms']:>9.3f} | {f['p95_ms']:>7.3f}"
            )
        if "ratios" in s:
            q = s["ratios"]
            lines.append(
                f"{s['docs']:>7} | K/M    | {q['index() throughput Keel/Mastra']:>10.2f} | "
                f"{q['files throughput Keel/Mastra']:>9.2f} | {q['median latency Keel/Mastra']:>9.2f} | "
                f"{q['p95 latency Keel/Mastra']:>7.2f}"
            )
            a = s["agreement"]
            lines.append(
                f"{'':>7}   answers: same top-{r['top_k']} ids in order {a['same_ids']}/{a['queries']}, "
                f"scores within 1e-9 {a['same_scores']}/{a['queries']}"
            )
        elif "mastra" in s:
            lines.append(f"{'':>7}   Mastra: {s['mastra']['error']}")
    hybrid = [s for s in r["sizes"] if "hybrid" in s]
    if hybrid:
        lines += [
            "Hybrid: bm25 + HashingEmbedder (384 dims; add the real embedder's query cost); Keel InMemoryVectorStore, "
            "Mastra LibSQLVector :memory:; index: SearchEngine.index_many (Keel), files: rebuild_search_index",
            f"{'chunks':>7} | {'':20} | {'index /s':>8} | {'files /s':>8} | hybrid median, p95 ms | vector median, p95",
        ]

        def row(docs: int, who: str, index: str, files: str, hy: dict[str, float], ve: dict[str, float]) -> str:
            return (
                f"{docs:>7} | {who:20} | {index:>8} | {files:>8} | {hy['median_ms']:>9.3f} {hy['p95_ms']:>9.3f}   | "
                f"{ve['median_ms']:>9.3f} {ve['p95_ms']:>9.3f}"
            )

        for s in hybrid:
            h = s["hybrid"]
            index, files = f"{h['index_per_s']:.0f}", f"{h['files_per_s']:.0f}" if "files_per_s" in h else "-"
            for threads in ("default", "1"):
                who = f"Keel, BLAS {threads}"
                lines.append(row(s["docs"], who, index, files, h[f"hybrid_{threads}"], h[f"vector_{threads}"]))
            if "mastra_hybrid" in s:
                m = s["mastra_hybrid"]
                lines.append(row(s["docs"], "Mastra", "-", f"{m['index_per_s']:.0f}", m["hybrid"], m["vector"]))
                q = s["hybrid_ratios"]
                lines.append(
                    f"{s['docs']:>7} | {'Keel(default)/Mastra':20} | {'':>8} | "
                    f"{q['files throughput Keel/Mastra']:>8.2f} | "
                    f"{q['hybrid median latency Keel/Mastra']:>9.3f} {q['hybrid p95 latency Keel/Mastra']:>9.3f}   | "
                    f"{q['vector median latency Keel/Mastra']:>9.3f} {q['vector p95 latency Keel/Mastra']:>9.3f}"
                )
                a = s["hybrid_agreement"]
                lines.append(
                    f"{'':>7}   answers: same ids in order / scores within 1e-5 (float32; ties any order): hybrid "
                    f"{a['hybrid']['same_ids']}/{a['hybrid']['same_scores']}, vector {a['vector']['same_ids']}/"
                    f"{a['vector']['same_scores']} of {a['vector']['queries']}"
                )
    if "embedding" in r:
        e = r["embedding"]
        lines.append(
            f"SentenceTransformerEmbedder (all-MiniLM-L6-v2, CPU): {e['short_per_s']:.0f} sentences/s "
            f"({e['short_count']} of ~{e['short_chars']:.0f} chars), {e['long_per_s']:.1f} chunks/s "
            f"({e['long_count']} of {e['long_chars']} chars), one query {e['query_ms']:.1f} ms"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.search", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=[10_000, 100_000])
    parser.add_argument("--passes", type=int, default=3, help="timed passes over the queries, BM25")
    parser.add_argument("--hybrid-passes", type=int, default=1, help="timed passes, hybrid and vector")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--no-mastra", dest="mastra", action="store_false", help="skip Mastra's BM25")
    parser.add_argument("--no-hybrid", dest="hybrid", action="store_false", help="skip Keel's hybrid search")
    parser.add_argument("--no-embed", dest="embed", action="store_false", help="skip the embedder's throughput")
    parser.add_argument("--out", type=Path, default=Path("bench/search_results.json"))
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    args.out.write_text(json.dumps(result, indent=2))
    print(render(result))


if __name__ == "__main__":
    main()
