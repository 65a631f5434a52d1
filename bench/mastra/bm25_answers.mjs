// Mastra's own BM25 answers (the real @mastra/core Workspace: LocalFilesystem, bm25: true, autoIndexPaths) for a
// corpus and a list of queries, recorded as JSON for Keel's tests to compare with (tests/fixtures/).
//
//   node bm25_answers.mjs --corpus DIR --queries "q1|q2|..." [--top-k 5]   -> JSON on stdout
import { LocalFilesystem, Workspace } from "@mastra/core/workspace";
import { opt } from "./shared.mjs";

const corpus = opt("corpus");
const queries = opt("queries").split("|");
const topK = Number(opt("top-k", "5"));

const workspace = new Workspace({
  filesystem: new LocalFilesystem({ basePath: corpus }),
  bm25: true,
  autoIndexPaths: ["**/*"],
});
await workspace.init();
const answers = [];
for (const query of queries) {
  const results = await workspace.search(query, { topK, mode: "bm25" });
  answers.push({ query, results: results.map((r) => ({ id: r.id, score: r.score, lineRange: r.lineRange ?? null })) });
}
console.log(JSON.stringify({ mastra: "@mastra/core 1.71.0", topK, answers }, null, 2));
