// Records the REAL Mastra HTTP API of agent signals (`POST /agents/:agentId/signals`): a Mastra instance with one
// scripted agent, `listener` (MockMemory on LibSQL file storage in a temp dir, recalling the thread's whole history
// as a Keel agent does, not Mastra's default last 10 messages; "pause" -> a call of its tool `pause`
// ({seconds: 1.5}), anything else -> "heard: " and every user message of the thread joined by " | ", as the agent of
// Keel's tests/http_api/test_signals_as_mastra.py), served by @mastra/hono on @hono/node-server (as server.mjs
// does), driven by the unmodified @mastra/client-js through the call sequence Keel's test runs too
// (tests/http_api/js/signal_calls.mjs). Writes tests/fixtures/mastra_signal_http.json.
//
//   cd bench/mastra && npm ci && node signal_http_record.mjs [--port 4196] [--out ../../tests/fixtures/mastra_signal_http.json]
import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { MockMemory } from "@mastra/core/memory";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { createTool } from "@mastra/core/tools";
import { LibSQLStore } from "@mastra/libsql";
import { MastraServer } from "@mastra/hono";
import { MastraClient } from "@mastra/client-js";
import { Hono } from "hono";
import { serve } from "@hono/node-server";
import { z } from "zod";
import { opt } from "./shared.mjs";
import { normalSignalAnswers, signalCalls } from "../../tests/http_api/js/signal_calls.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const OUT = resolve(opt("out", join(HERE, "../../tests/fixtures/mastra_signal_http.json")));
const PORT = Number(opt("port", "4196"));
const dir = mkdtempSync(join(tmpdir(), "keel-mastra-signal-http-"));

// ---- the scripted model
const usage = { inputTokens: 10, outputTokens: 5, totalTokens: 15 };
let calls = 0;
function script(prompt) {
  const users = prompt
    .filter((m) => m.role === "user")
    .map((m) => m.content.filter((p) => p.type === "text").map((p) => p.text).join(" "));
  let results = 0;
  for (let i = prompt.length - 1; i >= 0 && prompt[i].role !== "user"; i--) if (prompt[i].role === "tool") results++;
  if (users.at(-1) === "pause" && results === 0)
    return { content: [{ type: "tool-call", toolCallId: "pause-1", toolName: "pause", input: JSON.stringify({ seconds: 1.5 }) }], finishReason: "tool-calls" };
  return { content: [{ type: "text", text: `heard: ${users.join(" | ")}` }], finishReason: "stop" };
}
const meta = (id) => ({ id, modelId: "scripted-signals", timestamp: new Date(0) });
const model = new MastraLanguageModelV2Mock({
  modelId: "scripted-signals",
  doGenerate: async ({ prompt }) => ({ ...script(prompt), usage, warnings: [], response: meta(`resp-${++calls}`) }),
  doStream: async ({ prompt }) => {
    const { content, finishReason } = script(prompt);
    const parts = [{ type: "stream-start", warnings: [] }, { type: "response-metadata", ...meta(`resp-${++calls}`) }];
    for (const c of content) {
      if (c.type === "text") parts.push({ type: "text-start", id: "t1" }, { type: "text-delta", id: "t1", delta: c.text }, { type: "text-end", id: "t1" });
      else parts.push(c);
    }
    parts.push({ type: "finish", finishReason, usage });
    return { stream: new ReadableStream({ start: (ctl) => (parts.forEach((p) => ctl.enqueue(p)), ctl.close()) }) };
  },
});
const pause = createTool({
  id: "pause",
  description: "Wait a while, then say how long.",
  inputSchema: z.object({ seconds: z.number() }),
  execute: async ({ seconds }) => {
    await new Promise((r) => setTimeout(r, seconds * 1000));
    return { paused: seconds };
  },
});

// ---- the Mastra instance
const storage = new LibSQLStore({ id: "signal-http", url: `file:${join(dir, "mastra.db")}` });
const listener = new Agent({ id: "listener", name: "listener", instructions: "Follow the script.", model, tools: { pause }, memory: new MockMemory({ storage, options: { lastMessages: 100 } }) });
const mastra = new Mastra({ agents: { listener }, storage, logger: false });
const app = new Hono();
await new MastraServer({ app, mastra }).init();
const server = serve({ fetch: app.fetch, port: PORT, hostname: "127.0.0.1" });
await new Promise((r) => setTimeout(r, 200));

const client = new MastraClient({ baseUrl: `http://127.0.0.1:${PORT}`, retries: 0 });
const threadId = `t-${randomUUID()}`;
const out = { calls: normalSignalAnswers(await signalCalls(client, threadId), threadId) };
const version = (pkg) => JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url), "utf8")).version;
out._meta = {
  generator: "bench/mastra/signal_http_record.mjs",
  calls: "tests/http_api/js/signal_calls.mjs",
  mastra_core: version("@mastra/core"),
  mastra_server: version("@mastra/server"),
  mastra_libsql: version("@mastra/libsql"),
  client_js: version("@mastra/client-js"),
  node: process.version,
  normalisation: "normalSignalAnswers (tests/http_api/js/signal_calls.mjs): run ids -> <run-N> (in order of appearance), the thread id -> <thread>, UUIDs -> <uuid>, ISO timestamps -> <time>.",
};
mkdirSync(dirname(OUT), { recursive: true });
writeFileSync(OUT, JSON.stringify(out, null, 1) + "\n");
process.stderr.write(`wrote ${OUT}\n`);
server.close();
rmSync(dir, { recursive: true, force: true });
process.exit(0);
