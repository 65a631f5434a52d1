// Records the REAL Mastra HTTP API of an AgentController: a Mastra instance with the controller registered
// (`new Mastra({ agentControllers })`, LibSQL file storage in a temp dir, a scripted mock model), served by
// @mastra/hono on @hono/node-server (as server.mjs does). It calls the `/api/agent-controller/...` routes with
// plain fetch (exact status codes, bodies and SSE bytes) and a few through the unmodified @mastra/client-js, and
// writes tests/fixtures/mastra_controller_http.json (see CONTROLLER_SPEC.md §11).
//
//   cd bench/mastra && npm ci && node controller_http_record.mjs [--port 4198] [--out ../../tests/fixtures/mastra_controller_http.json]
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { AgentController } from "@mastra/core/agent-controller";
import { MockMemory } from "@mastra/core/memory";
import { LocalFilesystem, Workspace } from "@mastra/core/workspace";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { createTool } from "@mastra/core/tools";
import { LibSQLStore } from "@mastra/libsql";
import { MastraServer } from "@mastra/hono";
import { MastraClient } from "@mastra/client-js";
import { Hono } from "hono";
import { serve } from "@hono/node-server";
import { z } from "zod";
import { opt } from "./shared.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const OUT = resolve(opt("out", join(HERE, "../../tests/fixtures/mastra_controller_http.json")));
const PORT = Number(opt("port", "4198"));
const dir = mkdtempSync(join(tmpdir(), "keel-mastra-controller-http-"));
mkdirSync(join(dir, "ws"));

// ---- scripted model: "[note]" → save_note tool call, then text; anything else → text.
const usage = { inputTokens: 10, outputTokens: 5, totalTokens: 15 };
let calls = 0;
function lastTurn(prompt) {
  let results = 0;
  for (let i = prompt.length - 1; i >= 0; i--) {
    const m = prompt[i];
    if (m.role === "user") return { text: m.content.filter((p) => p.type === "text").map((p) => p.text).join("\n"), results };
    if (m.role === "tool") results += m.content.filter((p) => p.type === "tool-result").length;
  }
  return { text: "", results };
}
function script(prompt) {
  const { text, results } = lastTurn(prompt);
  if (text.includes("[note]") && results === 0)
    return { content: [{ type: "tool-call", toolCallId: `call_note_${text.length}`, toolName: "save_note", input: JSON.stringify({ text: "x" }) }], finishReason: "tool-calls" };
  return { content: [{ type: "text", text: results ? "noted" : "Hello over HTTP." }], finishReason: "stop" };
}
const meta = (id) => ({ id, modelId: "scripted-http", timestamp: new Date(0) });
const model = new MastraLanguageModelV2Mock({
  modelId: "scripted-http",
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

// ---- the Mastra instance with the controller registered under key == id
const storage = new LibSQLStore({ id: "controller-http", url: `file:${join(dir, "mastra.db")}` });
const saveNote = createTool({
  id: "save_note",
  description: "Save a note.",
  inputSchema: z.object({ text: z.string() }),
  execute: async (input) => ({ saved: input.text.length }),
});
const controller = new AgentController({
  id: "http-controller",
  agent: new Agent({ id: "http-agent", name: "http-agent", instructions: "Follow the script.", model }),
  memory: new MockMemory({ storage }),
  workspace: new Workspace({ id: "http-ws", filesystem: new LocalFilesystem({ basePath: join(dir, "ws") }) }),
  tools: { save_note: saveNote },
  toolCategoryResolver: (name) => (name === "save_note" ? "edit" : null),
  stateSchema: z.object({ counter: z.number().int().default(0) }).passthrough(),
  modes: [
    { id: "build", name: "Build", metadata: { default: true }, defaultModelId: "mock/build" },
    { id: "plan", name: "Plan", transitionsTo: "build" },
  ],
});
const mastra = new Mastra({ agentControllers: { "http-controller": controller }, storage, logger: false });
const app = new Hono();
await new MastraServer({ app, mastra }).init();
const server = serve({ fetch: app.fetch, port: PORT, hostname: "127.0.0.1" });
await new Promise((r) => setTimeout(r, 200));
const BASE = `http://127.0.0.1:${PORT}`;

// ---- normalisation (as controller_record.mjs)
const UUID = /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi;
const ISO = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z/g;
const ids = new Map();
const normStr = (s) =>
  s
    .replace(UUID, (u) => (ids.has(u) ? ids.get(u) : (ids.set(u, `<uuid-${ids.size + 1}>`), ids.get(u))))
    .replace(ISO, "<date>")
    .replaceAll(dir, "<tmp>")
    .replace(/"(durationMs|startedAt|updatedAt|createdAt)":\d+/g, '"$1":"<ms>"');
const norm = (v) => JSON.parse(normStr(JSON.stringify(v)));

// ---- plain-fetch exchange recorder
const exchanges = [];
async function http(label, method, path, body, { note } = {}) {
  const res = await fetch(BASE + path, {
    method,
    headers: body !== undefined ? { "content-type": "application/json" } : {},
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {}
  const entry = {
    label,
    request: { method, path, ...(body !== undefined ? { body } : {}) },
    response: { status: res.status, contentType: res.headers.get("content-type"), body: json ?? text },
    ...(note ? { note } : {}),
  };
  exchanges.push(norm(entry));
  return json;
}

// ---- SSE reader: keeps the raw text and parsed frames of one open stream
function openStream(path) {
  const ctl = new AbortController();
  const state = { raw: "", frames: [], status: 0, headers: {}, closed: false };
  state.ready = fetch(BASE + path, { signal: ctl.signal }).then(async (res) => {
    state.status = res.status;
    state.headers = Object.fromEntries(["content-type", "cache-control", "connection", "x-accel-buffering", "transfer-encoding"].map((h) => [h, res.headers.get(h)]));
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    (async () => {
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          const chunk = dec.decode(value, { stream: true });
          state.raw += chunk;
        }
      } catch {}
      state.closed = true;
    })();
  });
  state.close = () => ctl.abort();
  state.events = () =>
    state.raw
      .split("\n\n")
      .filter((f) => f.startsWith("data: "))
      .map((f) => {
        try {
          return JSON.parse(f.slice(6));
        } catch {
          return f;
        }
      });
  return state;
}
const waitFor = async (pred, ms = 5000) => {
  const t0 = Date.now();
  while (!pred()) {
    if (Date.now() - t0 > ms) throw new Error("timeout");
    await new Promise((r) => setTimeout(r, 10));
  }
};
const summarize = (events) =>
  events.map((e) => {
    if (typeof e !== "object") return e;
    if (e.type === "display_state_changed") return { type: e.type, displayStateKeys: Object.keys(e.displayState), isRunning: e.displayState.isRunning, pendingApproval: e.displayState.pendingApproval };
    return e;
  });

const C = "/api/agent-controller/http-controller";
const S = `${C}/sessions/user-1`;
const out = { _meta: {} };
try {
  await http("list controllers", "GET", "/api/agent-controller");
  await http("list modes", "GET", `${C}/modes`);
  await http("unknown controller → 404", "GET", "/api/agent-controller/nope/modes");
  await http("create session", "POST", `${C}/sessions`, { resourceId: "user-1" });
  await http("create session again (get-or-create: same thread)", "POST", `${C}/sessions`, { resourceId: "user-1" });
  await http("create session with sessionScope", "POST", `${C}/sessions`, { resourceId: "user-1", sessionScope: "web" });
  await http("create session with explicit threadId", "POST", `${C}/sessions`, { resourceId: "user-2", threadId: "thread-explicit" });
  await http("create session, missing resourceId → 400", "POST", `${C}/sessions`, {});
  await http("get session state", "GET", S);
  await http("get session state, scoped", "GET", `${S}?sessionScope=web`);
  await http("get session state, unknown threadId → 404", "GET", `${S}?threadId=nope`);

  // The SSE stream: first bytes, then the frames of one turn.
  const stream = openStream(`${S}/stream`);
  await stream.ready;
  await new Promise((r) => setTimeout(r, 150));
  out.sse_on_connect = { status: stream.status, headers: stream.headers, firstBytes: stream.raw };
  await http("send message", "POST", `${S}/messages`, { message: "hi" });
  await waitFor(() => stream.events().some((e) => e.type === "agent_end"));
  await new Promise((r) => setTimeout(r, 100));
  out.sse_plain_turn = { rawFirst1500: normStr(stream.raw.slice(0, 1500)), events: norm(summarize(stream.events())) };

  // Approval over HTTP: category edit → ask; a [note] turn parks on the gate.
  await http("set category permission", "PUT", `${S}/permissions/category`, { category: "edit", policy: "ask" });
  await http("get permissions", "GET", `${S}/permissions`);
  const before = stream.events().length;
  await http("send [note] message", "POST", `${S}/messages`, { message: "[note] please" });
  await waitFor(() => stream.events().some((e) => e.type === "tool_approval_required"));
  const gate = stream.events().find((e) => e.type === "tool_approval_required");
  await http("approve unknown toolCallId while a gate is armed", "POST", `${S}/tool-approval`, { toolCallId: "no-such-call", approved: true });
  await http("get session state while the gate is armed", "GET", S);
  await http("approve the real call", "POST", `${S}/tool-approval`, { toolCallId: gate.toolCallId, approved: true });
  await waitFor(() => stream.events().slice(before).some((e) => e.type === "agent_end"));
  await http("approve the same call again (already decided)", "POST", `${S}/tool-approval`, { toolCallId: gate.toolCallId, approved: false });
  await new Promise((r) => setTimeout(r, 100));
  out.sse_approval_turn = norm(summarize(stream.events().slice(before)));

  // Errors and run-control answers.
  await http("switch to unknown mode", "POST", `${S}/mode`, { modeId: "nope" });
  await http("switch mode, missing modeId → 400", "POST", `${S}/mode`, {});
  await http("switch mode, malformed JSON → 400", "POST", `${S}/mode`, "{not json");
  await http("switch mode plan", "POST", `${S}/mode`, { modeId: "plan" });
  await http("switch model", "POST", `${S}/model`, { modelId: "mock/other", scope: "thread" });
  await http("approve unknown toolCallId (idle)", "POST", `${S}/tool-approval`, { toolCallId: "no-such-call", approved: true });
  await http("tool-suspension unknown toolCallId (idle)", "POST", `${S}/tool-suspension`, { toolCallId: "no-such-call", resumeData: "x" });
  await http("set state ok", "PUT", `${S}/state`, { state: { counter: 2 } });
  await http("set state failing the schema", "PUT", `${S}/state`, { state: { counter: "two" } });
  await http("abort (idle)", "POST", `${S}/abort`);
  await http("list threads", "GET", `${S}/threads`);
  const threads = await (await fetch(`${BASE}${S}/threads`)).json();
  const tid = threads.threads[0].id;
  await http("list thread messages (legacy limit)", "GET", `${S}/threads/${tid}/messages?limit=10`);
  await http("list thread messages (perPage)", "GET", `${S}/threads/${tid}/messages?perPage=2&page=0`);
  await http("list messages of unknown thread → 404", "GET", `${S}/threads/nope/messages`);
  await http("create thread", "POST", `${S}/threads`, { title: "Second" });
  await http("rename thread", "PUT", `${S}/threads/${tid}`, { title: "Renamed" });
  await http("switch thread unknown", "POST", `${S}/thread`, { threadId: "nope" });
  await http("delete unknown thread", "DELETE", `${S}/threads/nope`);
  await http("get goal (none)", "GET", `${S}/goal`);
  await http("set goal", "POST", `${S}/goal`, { objective: "Ship it", maxRuns: 3 });
  await http("update goal", "PUT", `${S}/goal`, { status: "paused" });
  await http("clear goal", "DELETE", `${S}/goal`);
  await http("get om record", "GET", `${S}/om`);
  await http("resource ids", "GET", `${S}/resources`);
  await http("active runs", "GET", `${C}/active-runs`);
  await http("workspace status", "GET", `${C}/workspace`);
  out.sse_control_events = norm(summarize(stream.events().slice(before)).filter((e) => !["display_state_changed"].includes(e.type)).slice(-30));
  stream.close();

  // A second stream connection does not replay anything that happened before it connected.
  const late = openStream(`${S}/stream`);
  await late.ready;
  await new Promise((r) => setTimeout(r, 200));
  out.sse_late_subscriber_first_bytes = late.raw;
  late.close();

  // The same routes through the unmodified client-js (what Keel's HTTP API must answer).
  const client = new MastraClient({ baseUrl: BASE, retries: 0 });
  const cs = client.getAgentController("http-controller").session("user-3", "tab-1");
  const clientLog = {};
  clientLog.create = await cs.create();
  clientLog.state = await cs.state();
  const seen = [];
  const sub = await cs.subscribe({ onEvent: (e) => seen.push(e.type), reconnect: true });
  await cs.sendMessage("hello from client-js");
  await waitFor(() => seen.includes("agent_end"));
  sub.unsubscribe();
  clientLog.subscribeEventTypes = seen.filter((t) => t !== "display_state_changed");
  try {
    await cs.switchMode("nope");
    clientLog.switchModeUnknown = "resolved";
  } catch (e) {
    clientLog.switchModeUnknown = { name: e.name, status: e.status, message: e.message };
  }
  await cs.approveTool("no-such-call", true);
  clientLog.approveUnknown = "resolved (void)";
  out.client_js = norm(clientLog);
} finally {
  out.exchanges = exchanges;
  const core = JSON.parse(readFileSync(new URL("./node_modules/@mastra/core/package.json", import.meta.url), "utf8"));
  const srv = JSON.parse(readFileSync(new URL("./node_modules/@mastra/server/package.json", import.meta.url), "utf8"));
  out._meta = {
    generator: "bench/mastra/controller_http_record.mjs",
    mastra_core: core.version,
    mastra_server: srv.version,
    node: process.version,
    normalisation: "UUIDs → <uuid-N> (numbered in order of appearance), ISO dates → <date>, epoch-ms fields → <ms>, temp dir → <tmp>.",
  };
  mkdirSync(dirname(OUT), { recursive: true });
  writeFileSync(OUT, JSON.stringify(out, null, 1) + "\n");
  process.stderr.write(`wrote ${OUT} (${exchanges.length} exchanges)\n`);
  server.close();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}
