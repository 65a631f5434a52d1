// The real Mastra workflow engine (@mastra/core, LibSQL file storage), in process, running the same stored
// definitions as bench/workflow_runs.py: a 3-step definition (mapping -> tool `double` -> mapping) and a
// definition whose tool step (`ask-human`) suspends until resumed.
//
//   node workflows.mjs --definitions defs.json --runs 100 --cycles 30 --reps 3
//     -> one JSON line on stdout: {"runs_per_s": [...], "cycles_per_s": [...]}
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Mastra } from "@mastra/core";
import { LibSQLStore } from "@mastra/libsql";
import { asDynamicWorkflows, opt, workflowTools } from "./shared.mjs";

const RUNS = Number(opt("runs", "100"));
const CYCLES = Number(opt("cycles", "30"));
const REPS = Number(opt("reps", "3"));
const defs = JSON.parse(readFileSync(opt("definitions"), "utf8"));

const dir = mkdtempSync(join(tmpdir(), "keel-bench-mastra-wf-"));
const mastra = new Mastra({
  tools: workflowTools,
  storage: new LibSQLStore({ id: "bench", url: `file:${join(dir, "mastra.db")}` }),
  logger: false,
});
await mastra.addDynamicWorkflows(asDynamicWorkflows(defs));

async function bounded(count, inFlight, one) {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < count) await one(next++);
    }),
  );
  return count / ((performance.now() - started) / 1000);
}

async function three(i) {
  const run = await mastra.getWorkflow("three").createRun();
  const result = await run.start({ inputData: { n: i } });
  if (result.status !== "success" || result.result?.result !== i * 2) throw new Error(JSON.stringify(result));
}

async function cycle() {
  const run = await mastra.getWorkflow("ask").createRun();
  const first = await run.start({ inputData: {} });
  if (first.status !== "suspended") throw new Error(JSON.stringify(first));
  const done = await run.resume({ step: "human", resumeData: { answer: "yes" } });
  if (done.status !== "success" || done.result?.answer !== "yes") throw new Error(JSON.stringify(done));
}

await bounded(10, 5, three); // warm-up
await bounded(5, 5, cycle);
const out = { runs_per_s: [], cycles_per_s: [] };
for (let rep = 0; rep < REPS; rep++) {
  out.runs_per_s.push(await bounded(RUNS, 20, three));
  out.cycles_per_s.push(await bounded(CYCLES, 10, cycle));
}
console.log(JSON.stringify(out));
process.exit(0);
