// Mastra's Workspace BM25 on a corpus bench/search.py generated: index throughput and query latency, the same
// calls Keel's side makes (the real @mastra/core Workspace on a LocalFilesystem, bm25: true).
//
//   node search_bench.mjs --corpus DIR --manifest docs.json --queries queries.json [--top-k 10] [--passes 3]
//                         [--warm-up 50] [--hybrid-passes 1]   (--hybrid-passes 0: no hybrid)
//
// - index: `workspace.index(id, content)` once per document, in manifest order (contents read first, untimed);
// - files: `workspace.rebuildSearchIndex(["**/*"])` on a fresh workspace (what `autoIndexPaths` runs at init:
//   the walk, the reads, the chunking, the BM25 adds);
// - queries: `workspace.search(q, {topK, mode: "bm25"})` on the `index` workspace, the first `warm-up` queries
//   untimed, then `passes` timed passes; every latency in ms, and the first timed pass's answers (ids, scores);
// - hybrid: bm25 + LibSQLVector on ":memory:" (exact cosine, a full scan, as Keel's InMemoryVectorStore) + the
//   same hashing embedder as bench/search.py's `HashingEmbedder`, indexed by `rebuildSearchIndex(["**/*"])`;
//   latency of `mode: "hybrid"` and `mode: "vector"`.
// JSON on stdout.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { crc32 } from "node:zlib";
import { LocalFilesystem, Workspace } from "@mastra/core/workspace";
import { LibSQLVector } from "@mastra/libsql";
import { opt } from "./shared.mjs";

const corpus = opt("corpus");
const ids = JSON.parse(readFileSync(opt("manifest"), "utf8"));
const queries = JSON.parse(readFileSync(opt("queries"), "utf8"));
const topK = Number(opt("top-k", "10"));
const passes = Number(opt("passes", "3"));
const warmUp = Number(opt("warm-up", "50"));
const hybridPasses = Number(opt("hybrid-passes", "1"));

const fresh = async (search = {}) => {
  const workspace = new Workspace({ filesystem: new LocalFilesystem({ basePath: corpus }), bm25: true, ...search });
  await workspace.init();
  return workspace;
};

/** Latencies (ms) of `passes` passes over the queries after `warmUp` untimed ones, and the first pass's answers. */
const timed = async (workspace, mode, count) => {
  for (const q of queries.slice(0, warmUp)) await workspace.search(q, { topK, mode }); // JIT
  const latencies = [];
  let answers = null;
  for (let pass = 0; pass < count; pass++) {
    const found = [];
    for (const q of queries) {
      const t = performance.now();
      const results = await workspace.search(q, { topK, mode });
      latencies.push(performance.now() - t);
      found.push(results.map((r) => [r.id, r.score]));
    }
    answers ??= found;
  }
  return { latencies, answers };
};

// bench/search.py's HashingEmbedder: Mastra's BM25 tokens, crc32 into 384 signed buckets, unit length.
const STOPWORDS = new Set(
  "a an and are as at be by for from has he in is it its of on or that the to was were will with".split(" "),
);
const tokens = (text) =>
  text
    .toLowerCase()
    .replace(/[^\p{L}\p{N}_\s]/gu, " ")
    .split(/\s+/)
    .filter((t) => t.length >= 2 && !STOPWORDS.has(t));
const hashed = (text) => {
  const v = new Float64Array(384);
  for (const t of tokens(text)) {
    const h = crc32(t) >>> 0;
    v[h % 384] += h & 0x80000000 ? 1 : -1;
  }
  const norm = Math.hypot(...v) || 1;
  return Array.from(v, (x) => x / norm);
};
const embedder = Object.assign(async (texts) => texts.map(hashed), { batch: true, maxBatchSize: 256 });

const contents = ids.map((id) => readFileSync(join(corpus, id), "utf8"));
let workspace = await fresh();
let started = performance.now();
for (let i = 0; i < ids.length; i++) await workspace.index(ids[i], contents[i]);
const indexSeconds = (performance.now() - started) / 1000;

const { latencies, answers } = await timed(workspace, "bm25", passes);

workspace = await fresh(); // let the first one go before the second index is built
started = performance.now();
await workspace.rebuildSearchIndex(["**/*"]);
const filesSeconds = (performance.now() - started) / 1000;
const check = await workspace.search(queries[0], { topK, mode: "bm25" });

const hybrid = {};
if (hybridPasses > 0) {
  workspace = await fresh({ vectorStore: new LibSQLVector({ id: "bench", url: ":memory:" }), embedder });
  started = performance.now();
  await workspace.rebuildSearchIndex(["**/*"]);
  hybrid.index_s = (performance.now() - started) / 1000;
  for (const mode of ["hybrid", "vector"]) {
    const found = await timed(workspace, mode, hybridPasses);
    hybrid[`${mode}_ms`] = found.latencies;
    hybrid[`${mode}_answers`] = found.answers;
  }
}

console.log(
  JSON.stringify({
    mastra: "@mastra/core 1.71.0",
    node: process.version,
    docs: ids.length,
    index_s: indexSeconds,
    files_s: filesSeconds,
    files_check: check.map((r) => [r.id, r.score]),
    latencies_ms: latencies,
    answers,
    hybrid,
  }),
);
