// Mastra's real AgentController (@mastra/core 1.71) for bench/controller.py, on the scripted model of
// bench/controller_apps.py: a message starting "tool" makes the model call `note` once, then answer
// "noted: ..."; any other message is answered with TEXT in CHUNK-character text deltas. LibSQL file storage in a
// temp dir, MockMemory over it (as controller_record.mjs), one mode, `note` in category `edit`, allowed by the
// session's permission (the bench sets it).
//
//   node controller_bench.mjs --mode inproc --turns 30 --warmup 5 --kinds text,tool   # one JSON line on stdout
//   node controller_bench.mjs --mode serve --port 4199                                # the Mastra server (hono)
//
// inproc: one session, a subscriber on it (session.subscribe), then per turn: t0, sendMessage({content}); the
// subscriber stamps the first assistant text delta (message_update text-delta) and agent_end; sendMessage
// resolving is the turn's end as Mastra's caller sees it. Turns alternate between the kinds.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { AgentController } from "@mastra/core/agent-controller";
import { MockMemory } from "@mastra/core/memory";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { createTool } from "@mastra/core/tools";
import { LibSQLStore } from "@mastra/libsql";
import { z } from "zod";
import { opt } from "./shared.mjs";

const TEXT = "Hello from the scripted model, streamed to the subscriber in small deltas.";
const CHUNK = 8;
const CONTROLLER_ID = "bench-controller";
const MODE = opt("mode", "inproc");
const dir = mkdtempSync(join(tmpdir(), "keel-bench-mastra-controller-"));

// ---- the scripted model (bench/controller_apps.py's `script`)
const usage = { inputTokens: 10, outputTokens: 5, totalTokens: 15 };
let calls = 0;
function script(prompt) {
  let results = [];
  let text = "";
  let users = 0;
  for (let i = prompt.length - 1; i >= 0; i--) {
    const m = prompt[i];
    if (m.role === "user") {
      if (!text) text = m.content.filter((p) => p.type === "text").map((p) => p.text).join("\n");
      users++;
    } else if (m.role === "tool" && !text) results.push(...m.content.filter((p) => p.type === "tool-result"));
  }
  if (results.length) return { text: `noted: ${JSON.stringify(results[0].output?.value ?? results[0].output ?? null)}` };
  if (text.startsWith("tool")) return { toolCall: { type: "tool-call", toolCallId: `call_note_${users}`, toolName: "note", input: JSON.stringify({ text: "x" }) } };
  return { text: TEXT };
}
const meta = (id) => ({ id, modelId: "ctl-bench", timestamp: new Date(0) });
const model = new MastraLanguageModelV2Mock({
  modelId: "ctl-bench",
  doGenerate: async ({ prompt }) => {
    const s = script(prompt);
    const content = s.toolCall ? [s.toolCall] : [{ type: "text", text: s.text }];
    return { content, finishReason: s.toolCall ? "tool-calls" : "stop", usage, warnings: [], response: meta(`resp-${++calls}`) };
  },
  doStream: async ({ prompt }) => {
    const s = script(prompt);
    const parts = [{ type: "stream-start", warnings: [] }, { type: "response-metadata", ...meta(`resp-${++calls}`) }];
    if (s.toolCall) parts.push(s.toolCall);
    else {
      parts.push({ type: "text-start", id: "t1" });
      for (let i = 0; i < s.text.length; i += CHUNK) parts.push({ type: "text-delta", id: "t1", delta: s.text.slice(i, i + CHUNK) });
      parts.push({ type: "text-end", id: "t1" });
    }
    parts.push({ type: "finish", finishReason: s.toolCall ? "tool-calls" : "stop", usage });
    return { stream: new ReadableStream({ start: (ctl) => (parts.forEach((p) => ctl.enqueue(p)), ctl.close()) }) };
  },
});

const storage = new LibSQLStore({ id: "controller-bench", url: `file:${join(dir, "mastra.db")}` });
const note = createTool({
  id: "note",
  description: "Save a note.",
  inputSchema: z.object({ text: z.string() }),
  execute: async (input) => ({ saved: input.text.length }),
});
const agent = new Agent({ id: "ctl-bench", name: "Controller bench", instructions: "Follow the script.", model, tools: { note } });
const controller = new AgentController({
  id: CONTROLLER_ID,
  agent,
  storage,
  memory: new MockMemory({ storage }),
  toolCategoryResolver: (name) => (name === "note" ? "edit" : null),
  modes: [{ id: "build", name: "Build", metadata: { default: true } }],
});

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : null;
};

async function inproc() {
  const turns = Number(opt("turns", "30"));
  const warmup = Number(opt("warmup", "5"));
  const kinds = opt("kinds", "text,tool").split(",");
  await controller.init();
  const session = await controller.createSession({ resourceId: `bench-${process.pid}` });
  await session.permissions.setForTool({ toolName: "note", policy: "allow" });
  let current = null; // the turn being timed: {t0, firstDelta, agentEnd}
  session.subscribe((event) => {
    if (!current) return;
    const now = performance.now();
    if (current.firstDelta === undefined && event.type === "message_update" && event.event?.type === "text-delta")
      current.firstDelta = now - current.t0;
    if (event.type === "agent_end" && current.agentEnd === undefined) current.agentEnd = now - current.t0;
  });
  const out = {};
  for (const kind of kinds) out[kind] = { first_delta: [], agent_end: [], turn: [] };
  for (let i = 0; i < warmup + turns; i++) {
    for (const kind of kinds) {
      const content = kind === "tool" ? "tool please" : "hi";
      current = { t0: performance.now() };
      await session.sendMessage({ content });
      const turn = performance.now() - current.t0;
      await new Promise((r) => setImmediate(r));
      if (current.firstDelta === undefined || current.agentEnd === undefined) throw new Error(`turn ${i} (${kind}): no text delta or agent_end`);
      if (i >= warmup) {
        out[kind].first_delta.push(current.firstDelta);
        out[kind].agent_end.push(current.agentEnd);
        out[kind].turn.push(turn);
      }
      current = null;
    }
  }
  // The answers are right: the last turn of each kind's assistant text.
  const messages = await session.thread.listMessages({ threadId: session.thread.getId() });
  const texts = messages.filter((m) => m.role === "assistant").map((m) => m.content?.content ?? "");
  if (!texts.some((t) => t === TEXT) || (kinds.includes("tool") && !texts.some((t) => t.startsWith("noted: "))))
    throw new Error(`unexpected answers: ${JSON.stringify(texts.slice(-4))}`);
  for (const kind of kinds) out[kind].medians = Object.fromEntries(["first_delta", "agent_end", "turn"].map((k) => [k, median(out[kind][k])]));
  process.stdout.write(JSON.stringify(out) + "\n");
}

async function serve() {
  const { MastraServer } = await import("@mastra/hono");
  const { Hono } = await import("hono");
  const { serve: serveNode } = await import("@hono/node-server");
  const port = Number(opt("port", "4199"));
  const mastra = new Mastra({ agentControllers: { [CONTROLLER_ID]: controller }, storage, logger: false });
  const app = new Hono();
  await new MastraServer({ app, mastra }).init();
  const server = serveNode({ fetch: app.fetch, port, hostname: "127.0.0.1" });
  process.stderr.write(`mastra controller server on ${port}\n`);
  const stop = () => {
    server.close();
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

try {
  if (MODE === "serve") await serve();
  else {
    await inproc();
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  }
} catch (err) {
  process.stderr.write(`${err?.stack ?? err}\n`);
  rmSync(dir, { recursive: true, force: true });
  process.exit(1);
}
