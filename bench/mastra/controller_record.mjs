// Records the REAL Mastra AgentController (@mastra/core agent-controller) in process: a scripted mock model,
// LibSQL storage in a temp dir, a Workspace on a temp LocalFilesystem, MockMemory over that same LibSQL store.
// For each scenario it records the exact session event sequence (ids / timestamps normalised) and writes them,
// keyed by scenario, to tests/fixtures/mastra_controller_events.json (see CONTROLLER_SPEC.md).
//
//   cd bench/mastra && npm ci && node controller_record.mjs [--out ../../tests/fixtures/mastra_controller_events.json]
//                                                         [--only a_plain_text,b_workspace_write]
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Agent } from "@mastra/core/agent";
import { AgentController } from "@mastra/core/agent-controller";
import { MockMemory } from "@mastra/core/memory";
import { LocalFilesystem, Workspace } from "@mastra/core/workspace";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { createTool } from "@mastra/core/tools";
import { LibSQLStore } from "@mastra/libsql";
import { z } from "zod";
import { opt } from "./shared.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const OUT = resolve(opt("out", join(HERE, "../../tests/fixtures/mastra_controller_events.json")));
const ONLY = opt("only") ? new Set(opt("only").split(",")) : null;
const dir = mkdtempSync(join(tmpdir(), "keel-mastra-controller-"));
const wsDir = join(dir, "ws");
mkdirSync(wsDir);

// ---------------------------------------------------------------- the scripted model
// The script reads the LAST user message (a keyword) and the tool results since it, and answers with one step.
const usage = { inputTokens: 10, outputTokens: 5, totalTokens: 15 };
let calls = 0;
const tc = (toolCallId, toolName, input) => ({ type: "tool-call", toolCallId, toolName, input: JSON.stringify(input) });
const say = (t) => ({ content: [{ type: "text", text: t }], finishReason: "stop" });
const call = (...c) => ({ content: c, finishReason: "tool-calls" });

function lastTurn(prompt) {
  const results = [];
  for (let i = prompt.length - 1; i >= 0; i--) {
    const m = prompt[i];
    if (m.role === "user") {
      const text = m.content.filter((p) => p.type === "text").map((p) => p.text).join("\n");
      return { text, results: results.reverse() };
    }
    if (m.role === "tool") for (const p of m.content) if (p.type === "tool-result") results.push(p);
  }
  return { text: "", results };
}
const outText = (r) => JSON.stringify(r?.output ?? r?.result ?? null);

function mainScript(prompt) {
  const { text, results } = lastTurn(prompt);
  const n = results.length;
  const key = (/\[(\w[\w-]*)\]/.exec(text) ?? [])[1] ?? "plain";
  switch (key) {
    case "plain":
      return say("Hello from the scripted model.");
    case "write":
      if (n === 0) return call(tc("call_w1", "mastra_workspace_write_file", { path: "notes/hello.txt", content: "hi there" }));
      return say(`wrote: ${outText(results[0]).slice(0, 80)}`);
    case "note":
      if (n === 0) return call(tc(`call_note_${text.length}`, "save_note", { text: "remember this" }));
      return say(`note result: ${outText(results[0]).slice(0, 120)}`);
    case "ask":
      if (n === 0) return call(tc("call_ask1", "ask_user", { question: "Which database?", options: [{ label: "SQLite" }, { label: "Postgres" }] }));
      return say(`the user said: ${outText(results[0]).slice(0, 120)}`);
    case "plan":
      if (n === 0) return call(tc(`call_plan_${text.length}`, "submit_plan", { path: "plans/p.md" }));
      return say(`plan outcome: ${outText(results[0]).slice(0, 200)}`);
    case "tasks":
      if (n === 0)
        return call(
          tc("call_t1", "task_write", {
            tasks: [
              { content: "Investigate the bug", status: "in_progress", activeForm: "Investigating the bug" },
              { content: "Fix the bug", status: "pending", activeForm: "Fixing the bug" },
            ],
          }),
        );
      if (n === 1) return call(tc("call_t2", "task_complete", { id: "task_investigate_the_bug" }));
      if (n === 2) return call(tc("call_t3", "task_check", {}));
      return say("tasks done");
    case "sub":
      if (n === 0) return call(tc("call_sub1", "subagent", { agentType: "explore", task: "List what is in the workspace." }));
      return say(`subagent said: ${outText(results[0]).slice(0, 120)}`);
    case "fail":
      throw new Error("scripted model failure");
    case "slow":
      // A tool call gated by approval, used to hold a run open for followUp/steer.
      if (n === 0) return call(tc(`call_slow_${text.length}`, "save_note", { text: "slow" }));
      return say(`slow done: ${outText(results[0]).slice(0, 60)}`);
    case "read":
      if (n === 0) return call(tc("call_r1", "mastra_workspace_read_file", { path: "notes/hello.txt" }));
      return say(`read: ${outText(results[0]).slice(0, 80)}`);
    default:
      return say(`unknown key ${key}`);
  }
}

// The subagent's own model (resolved by id through a custom gateway): one read tool call, then text.
function subScript(prompt) {
  const { results } = lastTurn(prompt);
  if (results.length === 0) return call(tc("sub_call_1", "mastra_workspace_list_files", { path: "." }));
  return say("The workspace holds notes/.");
}

// What the model was shown on each call (tool names offered, system prompt): the effective tool set of a turn.
const seen = [];
const capture = (modelId, { prompt, tools, toolChoice }) =>
  seen.push({
    modelId,
    tools: (tools ?? []).map((t) => t.name).sort(),
    toolChoice: toolChoice?.type,
    system: prompt.filter((m) => m.role === "system").map((m) => m.content),
  });

function scripted(modelId, script) {
  const meta = (id) => ({ id, modelId, timestamp: new Date(0) });
  return new MastraLanguageModelV2Mock({
    modelId,
    doGenerate: async (o) => (capture(modelId, o), { ...script(o.prompt), usage, warnings: [], response: meta(`resp-${++calls}`) }),
    doStream: async (o) => {
      capture(modelId, o);
      const { content, finishReason } = script(o.prompt);
      const parts = [{ type: "stream-start", warnings: [] }, { type: "response-metadata", ...meta(`resp-${++calls}`) }];
      for (const c of content) {
        if (c.type === "text") parts.push({ type: "text-start", id: "t1" }, { type: "text-delta", id: "t1", delta: c.text }, { type: "text-end", id: "t1" });
        else parts.push(c);
      }
      parts.push({ type: "finish", finishReason, usage });
      return { stream: new ReadableStream({ start: (ctl) => (parts.forEach((p) => ctl.enqueue(p)), ctl.close()) }) };
    },
  });
}
const mainModel = scripted("scripted-main", mainScript);
const subModel = scripted("scripted-sub", subScript);

// A gateway so that model ids "mock/..." (subagent defaultModelId, which Mastra resolves by id) reach subModel.
const mockGateway = {
  id: "mock",
  name: "mock",
  shouldEnable: () => true,
  handlesModel: (id) => id.startsWith("mock/"),
  fetchProviders: async () => ({ mock: { name: "mock", models: ["sub", "other"], apiKeyEnvVar: "MOCK_API_KEY", gateway: "mock" } }),
  buildUrl: () => undefined,
  getApiKey: async () => "mock-key",
  resolveAuth: () => ({ apiKey: "mock-key" }),
  resolveLanguageModel: () => subModel,
};

// ---------------------------------------------------------------- the controller
const storage = new LibSQLStore({ id: "controller-record", url: `file:${join(dir, "mastra.db")}` });
const memory = new MockMemory({ storage });
const workspace = new Workspace({ id: "record-ws", filesystem: new LocalFilesystem({ basePath: wsDir }) });

const saveNote = createTool({
  id: "save_note",
  description: "Save a note.",
  inputSchema: z.object({ text: z.string() }),
  execute: async (input) => ({ saved: input.text.length }),
});

const agent = new Agent({ id: "rec-agent", name: "rec-agent", instructions: "Agent instructions.", model: mainModel });

const CATEGORIES = {
  mastra_workspace_read_file: "read",
  mastra_workspace_list_files: "read",
  mastra_workspace_write_file: "edit",
  save_note: "edit",
  mastra_workspace_execute_command: "execute",
};

// A factory, so the restart scenario can build a second controller over the same storage (a "new process").
const makeController = () => new AgentController({
  id: "rec-controller",
  agent,
  storage,
  memory,
  workspace,
  instructions: "Controller instructions.",
  tools: { save_note: saveNote },
  gateways: [mockGateway],
  stateSchema: z.object({
    yolo: z.boolean().optional(),
    permissionRules: z.any().optional(),
    counter: z.number().int().default(0),
    activeProject: z.string().optional(),
  }).passthrough(),
  initialState: { activeProject: "demo" },
  toolCategoryResolver: (name) => CATEGORIES[name] ?? null,
  modes: [
    { id: "plan", name: "Plan", metadata: { default: true }, instructions: "Plan mode instructions.", transitionsTo: "build", defaultModelId: "mock/plan-model" },
    { id: "build", name: "Build", instructions: "Build mode instructions.", defaultModelId: "mock/build-model" },
    {
      id: "review",
      name: "Review",
      instructions: "Review mode instructions.",
      availableTools: ["mastra_workspace_read_file", "ask_user", "save_note", "review_extra"],
      additionalTools: { review_extra: createTool({ id: "review_extra", description: "Mode-only tool.", inputSchema: z.object({}), execute: async () => ({ ok: true }) }) },
    },
  ],
  subagents: [
    {
      id: "explore",
      name: "Explore",
      description: "Look around the workspace.",
      instructions: "You explore.",
      allowedWorkspaceTools: ["mastra_workspace_list_files", "mastra_workspace_read_file"],
      defaultModelId: "mock/sub",
    },
  ],
});
const controller = makeController();

// ---------------------------------------------------------------- normalisation
const UUID = /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi;
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
function makeNormaliser() {
  const ids = new Map();
  const idOf = (u) => {
    if (!ids.has(u)) ids.set(u, `<uuid-${ids.size + 1}>`);
    return ids.get(u);
  };
  const walk = (v, key) => {
    if (v instanceof Map) return walk(Object.fromEntries(v), key);
    if (v instanceof Date) return "<date>";
    if (v instanceof Error) return { name: v.name, message: walk(v.message) };
    if (Array.isArray(v)) return v.map((x) => walk(x));
    if (v && typeof v === "object") {
      const o = {};
      for (const [k, x] of Object.entries(v)) o[k] = walk(x, k);
      return o;
    }
    if (typeof v === "string") {
      if (ISO.test(v)) return "<date>";
      return v.replace(UUID, idOf).replaceAll(dir, "<tmp>");
    }
    if (typeof v === "number" && ["durationMs", "startTime", "createdAt", "updatedAt", "startedAt", "duration", "firstModified"].includes(key)) return "<ms>";
    return v;
  };
  return (v) => walk(v);
}

const snap = (session) => structuredClone(session.displayState.get());

// Record one scenario: subscribe, run `body`, return the normalised events (display_state_changed kept as a
// marker only unless `keepDisplay`), plus whatever `body` returns under `extra`.
async function record(session, body, { keepDisplay = false } = {}) {
  const norm = makeNormaliser();
  const raw = [];
  const unsubscribe = session.subscribe((event) => {
    // Serialise at emission time: message objects and the display state are live and mutate afterwards.
    if (event.type === "display_state_changed") {
      raw.push(keepDisplay ? { type: "display_state_changed", displayState: structuredClone(event.displayState) } : { type: "display_state_changed" });
    } else {
      raw.push(structuredClone(event));
    }
  });
  let extra;
  try {
    extra = await body({ raw });
  } finally {
    await new Promise((r) => setTimeout(r, 50));
    unsubscribe();
  }
  const events = raw.map((e) => norm(e));
  return { events, ...(extra !== undefined ? { extra: norm(extra) } : {}) };
}

// Wait until `pred(raw)` holds (polling), for responders that act on an event.
async function until(raw, pred, ms = 5000) {
  const t0 = Date.now();
  while (!pred(raw)) {
    if (Date.now() - t0 > ms) throw new Error("timeout waiting for event");
    await new Promise((r) => setTimeout(r, 5));
  }
}
const has = (type, f = () => true) => (raw) => raw.some((e) => e.type === type && f(e));
const settle = () => new Promise((r) => setTimeout(r, 30));

// ---------------------------------------------------------------- scenarios
const scenarios = {};
const describe = {};

describe.a_plain_text = "sendMessage('[plain] hi') → one text answer; no tools.";
scenarios.a_plain_text = async (session) =>
  record(session, async () => {
    await session.sendMessage({ content: "[plain] hi" });
  });

describe.b_workspace_write =
  "sendMessage → model calls mastra_workspace_write_file under DEFAULT permissions (no rules, no yolo). " +
  "toolCategoryResolver maps it to 'edit' but no category policy is set, so resolveToolApproval → 'ask': " +
  "the recorder approves the gate when it appears.";
scenarios.b_workspace_write = async (session) =>
  record(session, async ({ raw }) => {
    const sent = session.sendMessage({ content: "[write] please write a file" });
    const approvals = [];
    const watcher = (async () => {
      try {
        await until(raw, has("tool_approval_required"), 3000);
        const ev = raw.find((e) => e.type === "tool_approval_required");
        approvals.push({ toolCallId: ev.toolCallId, toolName: ev.toolName });
        session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "approve" });
      } catch {}
    })();
    await sent;
    await watcher;
    return { approvalsAnswered: approvals, fileOnDisk: readFileSync(join(wsDir, "notes/hello.txt"), "utf8"), resolveToolApproval: session.resolveToolApproval("mastra_workspace_write_file") };
  });

describe.c1_ask_approve =
  "permissions.setForCategory({category:'edit', policy:'ask'}); model calls save_note (category edit) → tool_approval_required; respondToToolApproval approve.";
scenarios.c1_ask_approve = async (session) => {
  await session.permissions.setForCategory({ category: "edit", policy: "ask" });
  return record(session, async ({ raw }) => {
    const sent = session.sendMessage({ content: "[note] one" });
    await until(raw, has("tool_approval_required"));
    await settle();
    const pending = snap(session);
    const ev = raw.find((e) => e.type === "tool_approval_required");
    session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "approve" });
    await sent;
    return { displayStateWhileApprovalPending: { pendingApproval: pending.pendingApproval, isRunning: pending.isRunning, activeTools: pending.activeTools } };
  });
};

describe.c2_ask_decline = "Same as c1 (setForCategory edit ask) but respondToToolApproval decline.";
scenarios.c2_ask_decline = async (session) => {
  await session.permissions.setForCategory({ category: "edit", policy: "ask" });
  return record(session, async ({ raw }) => {
    const sent = session.sendMessage({ content: "[note] two two" });
    await until(raw, has("tool_approval_required"));
    const ev = raw.find((e) => e.type === "tool_approval_required");
    session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "decline" });
    await sent;
  });
};

describe.c3_always_allow_category =
  "setForCategory edit ask; respondToToolApproval always_allow_category → approves and grants 'edit' for the session (grant beats the category 'ask' rule); a second call of save_note runs with no gate.";
scenarios.c3_always_allow_category = async (session) => {
  await session.permissions.setForCategory({ category: "edit", policy: "ask" });
  return record(session, async ({ raw }) => {
    const sent = session.sendMessage({ content: "[note] three three three" });
    await until(raw, has("tool_approval_required"));
    const ev = raw.find((e) => e.type === "tool_approval_required");
    session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "always_allow_category" });
    await sent;
    const grants = session.getGrants();
    raw.push({ type: "--- second turn (category granted) ---" });
    await session.sendMessage({ content: "[note] four four four four" });
    return { grantsAfter: grants, rules: session.permissions.getRules(), resolveToolApproval_save_note: session.resolveToolApproval("save_note") };
  });
};

describe.d_ask_user =
  "model calls ask_user. ask_user has no category → default 'ask' → approval gate first (recorder approves), then tool_suspended; respondToToolSuspension({toolCallId, resumeData:'SQLite'}).";
scenarios.d_ask_user = async (session) =>
  record(session, async ({ raw }) => {
    const sent = session.sendMessage({ content: "[ask] pick a db" });
    const gate = (async () => {
      try {
        await until(raw, has("tool_approval_required"), 2000);
        const ev = raw.find((e) => e.type === "tool_approval_required");
        session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "approve" });
      } catch {}
    })();
    await sent; // resolves at agent_end(suspended)
    await gate;
    await until(raw, has("tool_suspended"));
    const pending = snap(session);
    const ev = raw.find((e) => e.type === "tool_suspended");
    const hasPending = session.suspensions.hasPending();
    raw.push({ type: "--- respondToToolSuspension ---" });
    await session.respondToToolSuspension({ toolCallId: ev.toolCallId, resumeData: "SQLite" });
    await until(raw, has("agent_end", (e) => e.reason !== "suspended"));
    return {
      suspensionsHasPendingBefore: hasPending,
      displayStateWhileAskUserPending: { pendingSuspensions: pending.pendingSuspensions, isRunning: pending.isRunning, pendingApproval: pending.pendingApproval },
      suspensionsHasPendingAfter: session.suspensions.hasPending(),
    };
  });

describe.e1_plan_approved =
  "yolo off, category rules none; in mode 'plan' (transitionsTo 'build') the model calls submit_plan; recorder approves the gate if any, then respondToToolSuspension({action:'approved'}) → mode switches to build before the tool resumes.";
scenarios.e1_plan_approved = async (session) =>
  record(session, async ({ raw }) => {
    const modeBefore = session.mode.get();
    const sent = session.sendMessage({ content: "[plan] make a plan" });
    const gate = (async () => {
      try {
        await until(raw, has("tool_approval_required"), 2000);
        const ev = raw.find((e) => e.type === "tool_approval_required");
        session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "approve" });
      } catch {}
    })();
    await sent;
    await gate;
    await until(raw, has("tool_suspended"));
    const ev = raw.find((e) => e.type === "tool_suspended");
    raw.push({ type: "--- respondToToolSuspension approved ---" });
    await session.respondToToolSuspension({ toolCallId: ev.toolCallId, resumeData: { action: "approved" } });
    await until(raw, has("agent_end", (e) => e.reason !== "suspended"));
    return { modeBefore, modeAfter: session.mode.get(), modelAfter: session.model.get() };
  });

describe.e2_plan_rejected = "Back in mode 'plan'; submit_plan rejected with feedback → tool result carries the feedback text; no mode change.";
scenarios.e2_plan_rejected = async (session) => {
  await session.mode.switch({ modeId: "plan" });
  return record(session, async ({ raw }) => {
    const sent = session.sendMessage({ content: "[plan] make another plan" });
    const gate = (async () => {
      try {
        await until(raw, has("tool_approval_required"), 2000);
        const ev = raw.find((e) => e.type === "tool_approval_required");
        session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "approve" });
      } catch {}
    })();
    await sent;
    await gate;
    await until(raw, has("tool_suspended"));
    const ev = raw.find((e) => e.type === "tool_suspended");
    raw.push({ type: "--- respondToToolSuspension rejected ---" });
    await session.respondToToolSuspension({ toolCallId: ev.toolCallId, resumeData: { action: "rejected", feedback: "Add tests first." } });
    await until(raw, has("agent_end", (e) => e.reason !== "suspended"));
    await settle();
    return { modeAfter: session.mode.get() };
  });
};

describe.f_task_write = "yolo:true (so no gates); model calls task_write, task_complete, task_check → task_updated events + displayState.tasks.";
scenarios.f_task_write = async (session) => {
  await session.state.set({ yolo: true });
  const r = await record(session, async () => {
    await session.sendMessage({ content: "[tasks] track this" });
    const ds = snap(session);
    return { tasks: ds.tasks, previousTasks: ds.previousTasks };
  });
  await session.state.set({ yolo: false });
  return r;
};

describe.g_mode_and_model_switch =
  "mode.switch build; model.switch thread scope; model.switch global; model.switch thread for another mode (modeId); mode.switch plan (restores plan's model); subagents.model.set; om observer switch.";
scenarios.g_mode_and_model_switch = async (session) =>
  record(session, async ({ raw }) => {
    const steps = [];
    const mark = (label) => raw.push({ type: `--- ${label} ---` });
    const st = () => ({ mode: session.mode.get(), model: session.model.get() });
    steps.push({ start: st() });
    mark("mode.switch({modeId:'build'})");
    await session.mode.switch({ modeId: "build" });
    steps.push({ afterBuild: st() });
    mark("model.switch({modelId:'mock/other', scope:'thread'})");
    await session.model.switch({ modelId: "mock/other", scope: "thread" });
    steps.push({ afterModelThread: st(), persisted: await session.thread.getSetting({ key: "modeModelId_build" }) });
    mark("model.switch({modelId:'mock/global-pick', scope:'global'})");
    await session.model.switch({ modelId: "mock/global-pick", scope: "global" });
    steps.push({ afterModelGlobal: st(), persisted: await session.thread.getSetting({ key: "modeModelId_build" }) });
    mark("model.switch({modelId:'mock/plan-override', modeId:'plan'})");
    await session.model.switch({ modelId: "mock/plan-override", modeId: "plan" });
    steps.push({ afterModelForOtherMode: st() });
    mark("mode.switch({modeId:'plan'})");
    await session.mode.switch({ modeId: "plan" });
    steps.push({ afterPlan: st(), currentModeId: await session.thread.getSetting({ key: "currentModeId" }) });
    mark("mode.switch({modeId:'build'})");
    await session.mode.switch({ modeId: "build" });
    steps.push({ backToBuild: st() });
    mark("subagents.model.set({modelId:'mock/sub2'}) and ({agentType:'explore', modelId:'mock/sub3'})");
    await session.subagents.model.set({ modelId: "mock/sub2" });
    await session.subagents.model.set({ agentType: "explore", modelId: "mock/sub3" });
    steps.push({ subagentModel: session.subagents.model.get(), subagentModelExplore: session.subagents.model.get({ agentType: "explore" }), subagentModelOther: session.subagents.model.get({ agentType: "other" }) });
    mark("om.observer.switchModel({modelId:'mock/observer'})");
    await session.om.observer.switchModel({ modelId: "mock/observer" });
    mark("state.set({counter: 1})");
    await session.state.set({ counter: 1 });
    mark("mode.switch({modeId:'plan'}) (restore for later scenarios)");
    await session.mode.switch({ modeId: "plan" });
    return { steps, resolvedMode: session.mode.resolve() };
  });

describe.h_subagent =
  "yolo:true; model calls subagent {agentType:'explore'}; the child (model 'mock/sub' via a custom gateway) calls mastra_workspace_list_files then answers.";
scenarios.h_subagent = async (session) => {
  await session.state.set({ yolo: true });
  const r = await record(session, async () => {
    await session.sendMessage({ content: "[sub] delegate" });
    const ds = snap(session);
    return { activeSubagentsAfter: ds.activeSubagents };
  });
  await session.state.set({ yolo: false });
  return r;
};

describe.i_display_state =
  "displayState.get() snapshots: idle (fresh session), after a completed turn; the pending-approval and pending-ask_user snapshots are in c1_ask_approve.extra and d_ask_user.extra.";
scenarios.i_display_state = async (session) => {
  const norm = makeNormaliser();
  const idle = norm(snap(session));
  await session.sendMessage({ content: "[plain] hi again" });
  await settle();
  const after = norm(snap(session));
  return { events: [], extra: { idle, afterTurn: after } };
};

describe.j_errors =
  "mode.switch unknown → throws; respondToToolApproval for an unknown toolCallId (nothing armed, and while another call is armed) → silent no-op; a second decision for an already-decided call → no-op; state.set failing the schema → throws; respondToToolSuspension with unknown id → no-op.";
scenarios.j_errors = async (session) =>
  record(session, async ({ raw }) => {
    const out = {};
    const tryIt = async (label, fn) => {
      raw.push({ type: `--- ${label} ---` });
      try {
        const v = await fn();
        out[label] = { ok: true, returned: v === undefined ? "undefined" : v };
      } catch (e) {
        out[label] = { ok: false, error: { name: e.name, message: e.message } };
      }
    };
    await tryIt("mode.switch unknown", () => session.mode.switch({ modeId: "nope" }));
    await tryIt("respondToToolApproval unknown (idle)", () => session.respondToToolApproval({ toolCallId: "no-such-call", decision: "approve" }));
    await tryIt("respondToToolSuspension unknown (idle)", () => session.respondToToolSuspension({ toolCallId: "no-such-call", resumeData: "x" }));
    await tryIt("state.set bad type", () => session.state.set({ counter: "not a number" }));
    await tryIt("state.set bad type (state after)", async () => session.state.get());
    // Approvals while a gate is armed.
    await session.permissions.setForCategory({ category: "edit", policy: "ask" });
    const sent = session.sendMessage({ content: "[note] five five five five five" });
    await until(raw, has("tool_approval_required"));
    const ev = raw.filter((e) => e.type === "tool_approval_required").at(-1);
    await tryIt("respondToToolApproval wrong id while armed", () => session.respondToToolApproval({ toolCallId: "wrong-id", decision: "decline" }));
    out.armedAfterWrongId = session.approval.isArmed();
    await tryIt("respondToToolApproval approve (real)", () => session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "approve" }));
    await tryIt("respondToToolApproval decline (already decided)", () => session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "decline" }));
    await sent;
    await tryIt("respondToToolApproval after run ended", () => session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "approve" }));
    await tryIt("thread.switch unknown", () => session.thread.switch({ threadId: "no-such-thread" }));
    await tryIt("thread.listMessages unknown", () => session.thread.listMessages({ threadId: "no-such-thread" }));
    await tryIt("thread.delete unknown", () => session.thread.delete({ threadId: "no-such-thread" }));
    await tryIt("model.switch unknown id (no validation)", () => session.model.switch({ modelId: "no/such-model", scope: "global" }));
    await tryIt("mode.resolve", () => session.mode.resolve().id);
    return out;
  });

describe.k_threads =
  "thread.create / list / rename / switch / clone / listMessages / delete on a separate resource; createSession get-or-create semantics.";
scenarios.k_threads = async () => {
  const s1 = await controller.createSession({ resourceId: "user-k", scope: "web" });
  const s1b = await controller.createSession({ resourceId: "user-k", scope: "web" });
  const s2 = await controller.createSession({ resourceId: "user-k", scope: "worker" });
  const s3 = await controller.createSession({ resourceId: "user-k" });
  const facts = {
    sameScopeSameObject: s1 === s1b,
    differentScopeDifferentObject: s1 !== s2,
    noScopeDifferentObject: s3 !== s1,
    firstThreadOfEachSession: [s1.thread.getId(), s2.thread.getId(), s3.thread.getId()],
    sessionIdentity: { id: s1.identity.getId(), ownerId: s1.identity.getOwnerId(), resourceId: s1.identity.getResourceId() },
  };
  const r = await record(s1, async ({ raw }) => {
    const mark = (label) => raw.push({ type: `--- ${label} ---` });
    mark("thread.create({title:'Release planning'})");
    const t = await s1.thread.create({ title: "Release planning" });
    mark("thread.rename({title:'Renamed'})");
    await s1.thread.rename({ title: "Renamed" });
    mark("sendMessage");
    await s1.sendMessage({ content: "[plain] in a new thread" });
    const msgs = await s1.thread.listMessages({ threadId: t.id });
    mark("thread.clone()");
    const clone = await s1.thread.clone({ title: "Cloned" });
    mark("thread.switch({threadId: t.id})");
    await s1.thread.switch({ threadId: t.id });
    const list = await s1.thread.list();
    mark("thread.delete({threadId: clone.id})");
    await s1.thread.delete({ threadId: clone.id });
    mark("createSession({resourceId:'user-k', scope:'web', threadId:'explicit-thread'})");
    const again = await controller.createSession({ resourceId: "user-k", scope: "web", threadId: "explicit-thread" });
    return {
      created: t,
      clone,
      messagesInThread: msgs,
      threadList: list.map((x) => ({ id: x.id, title: x.title, metadata: x.metadata })),
      afterExplicitThread: { same: again === s1, threadId: s1.thread.getId() },
      knownResourceIds: await controller.getKnownResourceIds(s1),
    };
  });
  r.extra = { ...makeNormaliser()(facts), ...r.extra };
  return r;
};

describe.l_abort_while_approval_pending = "setForCategory edit ask; approval pending; session.abort() → the gated call is declined with 'Aborted by the user'.";
scenarios.l_abort_while_approval_pending = async (session) => {
  await session.permissions.setForCategory({ category: "edit", policy: "ask" });
  return record(session, async ({ raw }) => {
    const sent = session.sendMessage({ content: "[note] six six six six six six" });
    await until(raw, has("tool_approval_required"));
    raw.push({ type: "--- abort() ---" });
    session.abort();
    await sent;
    await settle();
  });
};

describe.m_model_error = "The model throws → error + agent_end(error).";
scenarios.m_model_error = async (session) =>
  record(session, async () => {
    try {
      await session.sendMessage({ content: "[fail] boom" });
    } catch (e) {
      return { sendMessageThrew: { name: e.name, message: e.message } };
    }
  });


describe.n_follow_up_and_steer =
  "setForCategory edit ask; a run parks on an approval gate; followUp() while running → follow_up_queued(1); approve → the run ends and the follow-up runs as the next turn. Then steer() while parked on a second gate.";
scenarios.n_follow_up_and_steer = async (session) => {
  await session.permissions.setForCategory({ category: "edit", policy: "ask" });
  return record(session, async ({ raw }) => {
    const sent = session.sendMessage({ content: "[slow] hold the run" });
    await until(raw, has("tool_approval_required"));
    raw.push({ type: "--- followUp('[plain] afterwards') while parked ---" });
    const fu = session.followUp({ content: "[plain] afterwards" });
    await until(raw, has("follow_up_queued", (e) => e.count > 0)).catch(() => {});
    const ev = raw.find((e) => e.type === "tool_approval_required");
    raw.push({ type: "--- approve ---" });
    session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "approve" });
    await sent;
    await fu;
    await until(raw, (r) => r.filter((e) => e.type === "agent_end").length >= 2, 5000).catch(() => {});
    await settle();
    raw.push({ type: "--- sendMessage('[slow] …') then steer('[plain] steer now') while parked ---" });
    const sent2 = session.sendMessage({ content: "[slow] hold it again!" });
    await until(raw, (r) => r.filter((e) => e.type === "tool_approval_required").length >= 2);
    const st = session.steer({ content: "[plain] steer now" });
    await sent2;
    await st;
    await settle();
    return { messages: (await session.thread.listActiveMessages()).map((m) => ({ role: m.role, type: m.type, parts: m.content.parts.map((p) => p.type === "text" ? `text:${p.text}` : p.type === "tool-invocation" ? `tool:${p.toolInvocation.toolName}:${p.toolInvocation.state}` : p.type) })) };
  });
};

describe.o_deny =
  "setForTool save_note deny → the tool is removed from the run's toolsets (the model does not see it; a call anyway → 'Tool not found' error result). Then tool rule removed and setForCategory edit deny → the tool stays visible but each call is declined without a prompt (tool_end denied). resolveToolApproval precedence checks (tool ask beats category deny; yolo beats category deny; tool deny beats yolo in resolveToolApproval) — and under yolo a tool-level deny on a WORKSPACE tool is not enforced (the call runs).";
scenarios.o_deny = async (session) => {
  return record(session, async ({ raw }) => {
    const out = {};
    raw.push({ type: "--- setForTool({toolName:'save_note', policy:'deny'}) then [note] ---" });
    await session.permissions.setForTool({ toolName: "save_note", policy: "deny" });
    seen.length = 0;
    await session.sendMessage({ content: "[note] seven seven seven seven seven seven seven" });
    out.toolDenyModelSawSaveNote = seen.map((c) => c.tools.includes("save_note"));
    out.resolve_tool_deny = session.resolveToolApproval("save_note");
    raw.push({ type: "--- setForTool({toolName:'save_note', policy:'ask'}); setForCategory({category:'edit', policy:'deny'}) then [note] ---" });
    await session.permissions.setForTool({ toolName: "save_note", policy: "ask" });
    out.resolve_tool_ask_beats_category_deny = session.resolveToolApproval("save_note");
    const rules = session.permissions.getRules();
    delete rules.tools.save_note;
    await session.state.set({ permissionRules: rules });
    await session.permissions.setForCategory({ category: "edit", policy: "deny" });
    out.resolve_category_deny = session.resolveToolApproval("save_note");
    seen.length = 0;
    await session.sendMessage({ content: "[note] eight eight eight eight eight eight eight eight" });
    out.categoryDenyModelSawSaveNote = seen.map((c) => c.tools.includes("save_note"));
    out.rules = structuredClone(session.permissions.getRules());
    raw.push({ type: "--- state.set({yolo:true}) ---" });
    await session.state.set({ yolo: true });
    out.resolve_category_deny_with_yolo = session.resolveToolApproval("save_note");
    await session.permissions.setForTool({ toolName: "save_note", policy: "deny" });
    out.resolve_tool_deny_with_yolo = session.resolveToolApproval("save_note");
    raw.push({ type: "--- yolo + setForTool({toolName:'mastra_workspace_write_file', policy:'deny'}) then [write] ---" });
    await session.permissions.setForTool({ toolName: "mastra_workspace_write_file", policy: "deny" });
    await session.sendMessage({ content: "[write] despite the deny" });
    out.workspaceToolDenyUnderYolo = { resolve: session.resolveToolApproval("mastra_workspace_write_file"), ranAnyway: raw.some((e) => e.type === "tool_end" && e.toolCallId === "call_w1" && !e.denied && !e.isError) };
    await session.state.set({ yolo: false });
    return out;
  });
};

describe.p_tool_set_and_instructions =
  "What the model is shown: tool names and system prompt per model call, in mode 'plan' (no availableTools) and mode 'review' (additionalTools {review_extra}; availableTools ['mastra_workspace_read_file','ask_user','save_note','review_extra'] with category edit denied → save_note filtered out).";
scenarios.p_tool_set_and_instructions = async (session) => {
  const out = {};
  seen.length = 0;
  await session.sendMessage({ content: "[plain] what do you see" });
  out.planMode = seen.slice();
  await session.mode.switch({ modeId: "review" });
  await session.permissions.setForCategory({ category: "edit", policy: "deny" });
  seen.length = 0;
  await session.sendMessage({ content: "[plain] and now" });
  out.reviewModeWithEditDenied = seen.slice();
  await session.mode.switch({ modeId: "plan" });
  return { events: [], extra: makeNormaliser()(out) };
};

describe.q_restart =
  "Process-restart simulation: session on resource 'user-restart' switches to mode build, model mock/kept, state {counter:5}, " +
  "setForCategory edit allow, a session grant, and leaves an ask_user call suspended. Then a SECOND AgentController (same config, same " +
  "LibSQL storage) creates the session for that resource: what comes back, and whether the old suspension can be answered.";
scenarios.q_restart = async (session) => {
  await session.mode.switch({ modeId: "build" });
  await session.model.switch({ modelId: "mock/kept" });
  await session.state.set({ counter: 5 });
  await session.permissions.setForCategory({ category: "edit", policy: "allow" });
  session.grantCategory("execute");
  const raw0 = [];
  const un = session.subscribe((e) => raw0.push(e));
  const sent = session.sendMessage({ content: "[ask] pick a db" });
  const gate = (async () => {
    try {
      await until(raw0, has("tool_approval_required"), 2000);
      const ev = raw0.find((e) => e.type === "tool_approval_required");
      session.respondToToolApproval({ toolCallId: ev.toolCallId, decision: "approve" });
    } catch {}
  })();
  await sent;
  await gate;
  await until(raw0, has("tool_suspended"));
  un();
  const suspended = raw0.find((e) => e.type === "tool_suspended");
  const before = {
    threadId: session.thread.getId(), mode: session.mode.get(), model: session.model.get(), state: session.state.get(),
    rules: structuredClone(session.permissions.getRules()), grants: session.getGrants(), hasPendingSuspension: session.suspensions.hasPending(),
  };
  const controller2 = makeController();
  await controller2.init();
  const s2 = await controller2.createSession({ resourceId: session.identity.getResourceId() });
  const r = await record(s2, async ({ raw }) => {
    const after = {
      threadId: s2.thread.getId(), mode: s2.mode.get(), model: s2.model.get(), state: s2.state.get(),
      rules: structuredClone(s2.permissions.getRules()), grants: s2.getGrants(), hasPendingSuspension: s2.suspensions.hasPending(),
      displayPendingSuspensions: s2.displayState.get().pendingSuspensions,
    };
    raw.push({ type: "--- new controller: respondToToolSuspension(old toolCallId) ---" });
    await s2.respondToToolSuspension({ toolCallId: suspended.toolCallId, resumeData: "SQLite" });
    await settle();
    const msgs = await s2.thread.listActiveMessages();
    return {
      before, after, sameThread: before.threadId === after.threadId,
      lastStoredMessage: msgs.at(-1) && { role: msgs.at(-1).role, parts: msgs.at(-1).content.parts.map((p) => p.type === "tool-invocation" ? { tool: p.toolInvocation.toolName, state: p.toolInvocation.state } : p.type) },
    };
  });
  session.abort();
  return r;
};

// ---------------------------------------------------------------- main
await controller.init();
const results = { _meta: {} };
const core = JSON.parse(readFileSync(new URL("./node_modules/@mastra/core/package.json", import.meta.url), "utf8"));
results._meta = {
  generator: "bench/mastra/controller_record.mjs",
  mastra_core: core.version,
  node: process.version,
  normalisation:
    "UUIDs → <uuid-N> (numbered per scenario in order of appearance), Dates/ISO strings → <date>, durations/epoch-ms fields → <ms>, the temp dir → <tmp>. " +
    "Every event is followed by a synthetic {type:'display_state_changed'} (snapshot dropped here except where noted). Lines {type:'--- … ---'} are recorder markers, not Mastra events.",
  controller: {
    modes: controller.listModes().map((m) => ({ id: m.id, transitionsTo: m.transitionsTo, defaultModelId: m.defaultModelId, metadata: m.metadata })),
    toolCategoryResolver: CATEGORIES,
    stateSchema: "z.object({yolo?: boolean, permissionRules?: any, counter: int default 0, activeProject?: string}).passthrough()",
    initialState: { activeProject: "demo" },
  },
  scenarios: describe,
};

// One session for the main scenarios (a..j, l, m), fresh resource so the idle snapshot is clean.
const session = await controller.createSession({ resourceId: "user-1" });
results._meta.initialSession = makeNormaliser()({
  threadId: session.thread.getId(),
  mode: session.mode.get(),
  model: session.model.get(),
  state: session.state.get(),
  rules: session.permissions.getRules(),
  grants: session.getGrants(),
});
const order = [
  "i_display_state",
  "a_plain_text",
  "b_workspace_write",
  "c1_ask_approve",
  "c2_ask_decline",
  "c3_always_allow_category",
  "d_ask_user",
  "e1_plan_approved",
  "e2_plan_rejected",
  "f_task_write",
  "g_mode_and_model_switch",
  "h_subagent",
  "j_errors",
  "l_abort_while_approval_pending",
  "m_model_error",
  "n_follow_up_and_steer",
  "o_deny",
  "p_tool_set_and_instructions",
  "q_restart",
  "k_threads",
];
let failed = 0;
for (const name of order) {
  if (ONLY && !ONLY.has(name)) continue;
  // Fresh session per scenario so grants/rules/suspensions don't leak between them (shared controller).
  const s = name === "i_display_state" ? session : await controller.createSession({ resourceId: `user-${name}` });
  const t0 = performance.now();
  try {
    results[name] = await Promise.race([
      scenarios[name](s),
      new Promise((_, rej) => setTimeout(() => rej(new Error("scenario timeout (20s)")), 20000)),
    ]);
    process.stderr.write(`ok   ${name} (${(performance.now() - t0).toFixed(0)} ms, ${results[name].events.length} events)\n`);
  } catch (e) {
    failed++;
    results[name] = { failed: { name: e.name, message: e.message, stack: String(e.stack).split("\n").slice(0, 4) } };
    process.stderr.write(`FAIL ${name}: ${e.message}\n`);
  }
}

mkdirSync(dirname(OUT), { recursive: true });
writeFileSync(OUT, JSON.stringify(results, null, 1) + "\n");
process.stderr.write(`wrote ${OUT}\n`);
rmSync(dir, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
