// Mastra's own search answers (the real @mastra/core Workspace: LocalFilesystem, autoIndexPaths ['**/*'])
// for a corpus and a list of queries, recorded as JSON for Keel's tests to compare with (tests/fixtures/):
// BM25 alone (bm25: true), and vector and hybrid (bm25 + a LibSQLVector in memory) with a deterministic
// embedder both sides can compute exactly: the letter counts a-z of the text, `a` nudged by 0.01.
//
//   node search_answers.mjs --corpus DIR --queries "q1|q2|..." [--top-k 5]   -> JSON on stdout
import { LocalFilesystem, Workspace } from "@mastra/core/workspace";
import { LibSQLVector } from "@mastra/libsql";
import { opt } from "./shared.mjs";

const corpus = opt("corpus");
const queries = opt("queries").split("|");
const topK = Number(opt("top-k", "5"));

const letters = async (text) =>
  [..."abcdefghijklmnopqrstuvwxyz"].map((c) => text.toLowerCase().split(c).length - 1 + (c === "a" ? 0.01 : 0));

const bm25 = new Workspace({ filesystem: new LocalFilesystem({ basePath: corpus }), bm25: true, autoIndexPaths: ["**/*"] });
const both = new Workspace({
  id: "answers",
  filesystem: new LocalFilesystem({ basePath: corpus }),
  bm25: true,
  vectorStore: new LibSQLVector({ id: "answers", url: ":memory:" }),
  embedder: letters,
  autoIndexPaths: ["**/*"],
});
await bm25.init();
await both.init();

const shape = (results) =>
  results.map((r) => ({ id: r.id, score: r.score, lineRange: r.lineRange ?? null, scoreDetails: r.scoreDetails }));
const answers = [];
for (const query of queries) {
  answers.push({
    query,
    bm25: shape(await bm25.search(query, { topK, mode: "bm25" })),
    vector: shape(await both.search(query, { topK, mode: "vector" })),
    hybrid: shape(await both.search(query, { topK, mode: "hybrid" })),
    hybrid_03: shape(await both.search(query, { topK, mode: "hybrid", vectorWeight: 0.3 })),
  });
}
console.log(JSON.stringify({ mastra: "@mastra/core 1.71.0", topK, answers }, null, 2));
