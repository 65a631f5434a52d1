// The real Mastra server: a Mastra instance (@mastra/core, LibSQL file storage in a fresh temp dir) served over
// HTTP by @mastra/hono on @hono/node-server, for http_load.mjs (driven by the unmodified @mastra/client-js) to
// compare with Keel's HTTP API. It registers mock-model agents and the stored workflow definitions:
//   bench     "steps=N" -> N write_read tool calls (call_1..call_N), then text "done: N steps" (loop.mjs's script)
//   ticker    "ticks=K gap=D" -> K text deltas D ms apart, each "<T>" with T the epoch ms when it was emitted
//   approver  calls save_note (requireApproval: true) -> generate suspends; once approved it answers "saved"
//   workflows the definitions in --definitions (as workflows.mjs: tools double and ask-human)
//
//   node server.mjs --port 4111 --definitions defs.json   -> {"ready": true, "port": 4111} on stdout, then serves
//                                                            until SIGTERM/SIGINT
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { LibSQLStore } from "@mastra/libsql";
import { MastraServer } from "@mastra/hono";
import { Hono } from "hono";
import { serve } from "@hono/node-server";
import { z } from "zod";
import { asDynamicWorkflows, opt, workflowTools, writeReadTool } from "./shared.mjs";

const PORT = Number(opt("port", "4111"));
const defs = opt("definitions") ? JSON.parse(readFileSync(opt("definitions"), "utf8")) : [];
const dir = mkdtempSync(join(tmpdir(), "keel-bench-mastra-http-"));

// ---- tools
const writeRead = writeReadTool(dir);
const saveNote = createTool({
  id: "save_note",
  description: "Save a note (needs a person's approval).",
  inputSchema: z.object({ text: z.string() }),
  requireApproval: true,
  execute: async (input) => ({ saved: input.text.length }),
});

// ---- mock models
// The last user message's text and the number of tool results since it.
function lastTurn(prompt) {
  let results = 0;
  for (let i = prompt.length - 1; i >= 0; i--) {
    const m = prompt[i];
    if (m.role === "user") return { text: m.content.filter((p) => p.type === "text").map((p) => p.text).join("\n"), results };
    if (m.role === "tool") results += m.content.filter((p) => p.type === "tool-result").length;
  }
  return { text: "", results };
}
const usage = { inputTokens: 10, outputTokens: 5, totalTokens: 15 };
const meta = (id) => ({ id, modelId: "scripted-bench", timestamp: new Date(0) });
let calls = 0;

// A model from a script: prompt -> {content (text / tool-call parts), finishReason}, for generate and stream.
function scripted(script) {
  return new MastraLanguageModelV2Mock({
    modelId: "scripted-bench",
    doGenerate: async ({ prompt }) => ({ ...script(prompt), usage, warnings: [], response: meta(`resp-${++calls}`) }),
    doStream: async ({ prompt }) => {
      const { content, finishReason } = script(prompt);
      const parts = [{ type: "stream-start", warnings: [] }, { type: "response-metadata", ...meta(`resp-${++calls}`) }];
      for (const c of content) {
        if (c.type === "text") parts.push({ type: "text-start", id: "t1" }, { type: "text-delta", id: "t1", delta: c.text }, { type: "text-end", id: "t1" });
        else parts.push(c);
      }
      parts.push({ type: "finish", finishReason, usage });
      return { stream: new ReadableStream({ start: (c) => (parts.forEach((p) => c.enqueue(p)), c.close()) }) };
    },
  });
}
const toolCall = (toolCallId, toolName, input) => ({ type: "tool-call", toolCallId, toolName, input: JSON.stringify(input) });
const text = (t) => ({ content: [{ type: "text", text: t }], finishReason: "stop" });

const benchModel = scripted((prompt) => {
  const { text: said, results } = lastTurn(prompt);
  const steps = Number(/steps\s*=\s*(\d+)/.exec(said)?.[1] ?? 1);
  if (results >= steps) return text(`done: ${results} steps`);
  const k = results + 1;
  return { content: [toolCall(`call_${k}`, "write_read", { path: `step-${k}.txt`, content: `step ${k} of ${steps}` })], finishReason: "tool-calls" };
});

const approverModel = scripted((prompt) => {
  const { text: said, results } = lastTurn(prompt);
  if (results > 0) return text("saved");
  return { content: [toolCall("call_1", "save_note", { text: said })], finishReason: "tool-calls" };
});

// ticker: K text deltas D ms apart, each stamped with the wall-clock epoch ms at the moment it is enqueued.
const stamp = () => `<${(performance.timeOrigin + performance.now()).toFixed(3)}>`;
const tickerModel = new MastraLanguageModelV2Mock({
  modelId: "ticker",
  doGenerate: async ({ prompt }) => {
    const { ticks } = tickerArgs(prompt);
    return { ...text(Array.from({ length: ticks }, stamp).join("")), usage, warnings: [], response: meta(`resp-${++calls}`) };
  },
  doStream: async ({ prompt }) => {
    const { ticks, gap } = tickerArgs(prompt);
    // Pushed on a timer, whether or not Mastra has read the previous part yet: a stamp is the emission time,
    // so time a part spends queued inside Mastra's pipeline counts in the client's delta latency.
    let cancelled = false;
    const stream = new ReadableStream({
      start(c) {
        c.enqueue({ type: "stream-start", warnings: [] });
        c.enqueue({ type: "response-metadata", ...meta(`resp-${++calls}`) });
        c.enqueue({ type: "text-start", id: "t1" });
        (async () => {
          for (let k = 0; k < ticks; k++) {
            if (k > 0) await sleep(gap);
            if (cancelled) return;
            c.enqueue({ type: "text-delta", id: "t1", delta: stamp() });
          }
          c.enqueue({ type: "text-end", id: "t1" });
          c.enqueue({ type: "finish", finishReason: "stop", usage });
          c.close();
        })();
      },
      cancel: () => (cancelled = true),
    });
    return { stream };
  },
});
function tickerArgs(prompt) {
  const { text: said } = lastTurn(prompt);
  return { ticks: Number(/ticks\s*=\s*(\d+)/.exec(said)?.[1] ?? 20), gap: Number(/gap\s*=\s*(\d+)/.exec(said)?.[1] ?? 20) };
}

// ---- the Mastra instance and its server
const agent = (id, model, tools = {}) => new Agent({ id, name: id, instructions: "Follow the script.", model, tools });
const mastra = new Mastra({
  agents: {
    bench: agent("bench", benchModel, { write_read: writeRead }),
    ticker: agent("ticker", tickerModel),
    approver: agent("approver", approverModel, { save_note: saveNote }),
  },
  tools: workflowTools,
  storage: new LibSQLStore({ id: "bench", url: `file:${join(dir, "mastra.db")}` }),
  logger: false,
});
await mastra.addDynamicWorkflows(asDynamicWorkflows(defs));

const app = new Hono();
await new MastraServer({ app, mastra }).init();
const server = serve({ fetch: app.fetch, port: PORT, hostname: "127.0.0.1" }, (info) => {
  console.log(JSON.stringify({ ready: true, port: info.port }));
});

function stop() {
  server.close();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
