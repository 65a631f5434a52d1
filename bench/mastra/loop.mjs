// The real Mastra Agent loop (@mastra/core), in-process, with a mock model: the same script as Keel's bench
// agent ("steps=N" -> N write_read tool calls, then text). No memory, no storage, no durability: this is the
// floor of an in-memory agent loop, to compare with Keel's durable per-step cost.
//
//   node loop.mjs --steps 1,10,50 --reps 3     -> one JSON line on stdout: {"steps":[{"n":..,"ms_per_step":..}]}
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent } from "@mastra/core/agent";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { opt, writeReadTool } from "./shared.mjs";

const STEPS = opt("steps", "1,10,50").split(",").map(Number);
const REPS = Number(opt("reps", "3"));
const WARMUP = Number(opt("warmup", "5"));

const dir = mkdtempSync(join(tmpdir(), "keel-bench-mastra-"));

const writeRead = writeReadTool(dir);

// The scripted decision: count tool results since the last user message (as Keel's ScriptedModel script does).
function decide(prompt) {
  let steps = 1;
  let done = 0;
  for (let i = prompt.length - 1; i >= 0; i--) {
    const m = prompt[i];
    if (m.role === "user") {
      const text = m.content.filter((p) => p.type === "text").map((p) => p.text).join("\n");
      const match = /steps\s*=\s*(\d+)/.exec(text);
      if (match) steps = Number(match[1]);
      break;
    }
    if (m.role === "tool") done += m.content.filter((p) => p.type === "tool-result").length;
  }
  return { steps, done };
}

function streamOf(parts) {
  return new ReadableStream({
    start(controller) {
      for (const p of parts) controller.enqueue(p);
      controller.close();
    },
  });
}

const usage = { inputTokens: 10, outputTokens: 5, totalTokens: 15 };
let modelCalls = 0;

// One scripted answer, as LanguageModelV2 content parts (generate) or stream parts (stream).
function answer(prompt) {
  modelCalls++;
  const { steps, done } = decide(prompt);
  if (done < steps) {
    const k = done + 1;
    const call = {
      type: "tool-call",
      toolCallId: `call_${k}`,
      toolName: "write_read",
      input: JSON.stringify({ path: `step-${k}.txt`, content: `step ${k} of ${steps}` }),
    };
    return { content: [call], finishReason: "tool-calls" };
  }
  return { content: [{ type: "text", text: `done: ${done} steps` }], finishReason: "stop" };
}

const model = new MastraLanguageModelV2Mock({
  modelId: "scripted-bench",
  doGenerate: async ({ prompt }) => {
    const { content, finishReason } = answer(prompt);
    return { content, finishReason, usage, warnings: [], response: { id: `resp-${modelCalls}`, modelId: "scripted-bench", timestamp: new Date(0) } };
  },
  doStream: async ({ prompt }) => {
    const { content, finishReason } = answer(prompt);
    const parts = [
      { type: "stream-start", warnings: [] },
      { type: "response-metadata", id: `resp-${modelCalls}`, modelId: "scripted-bench", timestamp: new Date(0) },
    ];
    for (const c of content) {
      if (c.type === "text") {
        parts.push({ type: "text-start", id: "t1" }, { type: "text-delta", id: "t1", delta: c.text }, { type: "text-end", id: "t1" });
      } else {
        parts.push(c);
      }
    }
    parts.push({ type: "finish", finishReason, usage });
    return { stream: streamOf(parts) };
  },
});

const agent = new Agent({
  id: "bench",
  name: "bench",
  instructions: "Call write_read as asked.",
  model,
  tools: { write_read: writeRead },
});

async function run(n) {
  const t0 = performance.now();
  const result = await agent.generate(`steps=${n}`, { maxSteps: n + 1 });
  const elapsed = performance.now() - t0;
  const toolResults = (result.steps ?? []).flatMap((s) => s.toolResults ?? []).length;
  if (toolResults !== n || !String(result.text).startsWith("done:")) {
    throw new Error(`mastra run N=${n}: ${toolResults} tool results, text ${JSON.stringify(result.text)}`);
  }
  return elapsed;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

try {
  for (let i = 0; i < WARMUP; i++) await run(2);
  const out = [];
  for (const n of STEPS) {
    const ms = [];
    for (let r = 0; r < REPS; r++) ms.push(await run(n));
    out.push({ n, ms_per_step: median(ms) / n, run_ms: ms });
  }
  const pkg = JSON.parse(readFileSync(new URL("./node_modules/@mastra/core/package.json", import.meta.url), "utf8"));
  console.log(JSON.stringify({ mastra_version: pkg.version, node: process.version, reps: REPS, steps: out }));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
