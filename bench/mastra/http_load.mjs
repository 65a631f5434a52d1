// HTTP load driver on the unmodified @mastra/client-js, for the real Mastra server (server.mjs) and Keel's HTTP
// API alike. C workers each run one user-visible operation in a loop until N are done (after W untimed warm-up
// operations); every operation's result is checked (a wrong one throws). Ops:
//   generate        agent bench generate "steps=1" -> text "done: 1 steps"
//   stream          agent bench stream "steps=1", every chunk read -> a text-delta and a finish
//   workflow-run    workflow three createRun + startAsync {n: i} -> success {result: 2i}
//   workflow-cycle  workflow ask createRun + startAsync -> suspended at "human"; resumeAsync {answer} -> success
//   approval-cycle  agent approver generate -> finishReason suspended; approveToolCallGenerate -> text "saved"
//   latency         agent ticker stream "ticks=20 gap=20": time to first chunk (ttfc) and to the first text-delta
//                   (ttft), and per text-delta the receipt
//                   wall-clock time minus the "<T>" stamp(s) the server put in it (and the first stamp's alone)
//   thread-latency  agent ticker: subscribeToThread on a thread of its own, then sendMessage "ticks=20 gap=20"
//                   per operation; the same stamps, read from the thread subscription
//
//   node http_load.mjs --base-url http://127.0.0.1:4111 --op generate --concurrency 20 --count 200 [--warmup 5]
//     -> one JSON line on stdout: {"op":..,"concurrency":..,"count":..,"per_s":..,"ms":{"p50":..,"p95":..}, ...}
import { MastraClient } from "@mastra/client-js";
import { opt } from "./shared.mjs";

const BASE_URL = opt("base-url", "http://127.0.0.1:4111");
const OP = opt("op", "generate");
const CONCURRENCY = Number(opt("concurrency", "1"));
const COUNT = Number(opt("count", "100"));
const WARMUP = Number(opt("warmup", "5"));
const TICKS = 20;

const client = new MastraClient({ baseUrl: BASE_URL, retries: 0 });
const now = () => performance.timeOrigin + performance.now(); // wall-clock epoch ms, comparable across processes
const check = (ok, what, got) => {
  if (!ok) throw new Error(`${OP}: expected ${what}, got ${JSON.stringify(got)?.slice(0, 800)}`);
};

// Reads a client-js agent stream to its end; returns the chunk types seen.
async function drain(response, onChunk = () => {}) {
  const types = [];
  await response.processDataStream({
    onChunk: async (chunk) => {
      types.push(chunk.type);
      onChunk(chunk);
    },
  });
  return types;
}

const ttfc = [];
const ttft = [];
const deltaLatency = [];
const firstDeltaLatency = [];

const OPS = {
  async generate() {
    const r = await client.getAgent("bench").generate("steps=1", { maxSteps: 2 });
    check(r.text === "done: 1 steps", "text 'done: 1 steps'", r);
  },
  async stream() {
    const types = await drain(await client.getAgent("bench").stream("steps=1", { maxSteps: 2 }));
    check(types.includes("text-delta") && types.at(-1) === "finish", "a text-delta and a final finish", types);
  },
  async "workflow-run"(i) {
    const run = await client.getWorkflow("three").createRun();
    const r = await run.startAsync({ inputData: { n: i } });
    check(r.status === "success" && r.result?.result === i * 2, `success {result: ${i * 2}}`, r);
  },
  async "workflow-cycle"(i) {
    const run = await client.getWorkflow("ask").createRun();
    const first = await run.startAsync({ inputData: {} });
    check(first.status === "suspended", "suspended", first);
    const answer = `yes ${i}`;
    const done = await run.resumeAsync({ step: "human", resumeData: { answer } });
    check(done.status === "success" && done.result?.answer === answer, `success {answer: ${answer}}`, done);
  },
  async "approval-cycle"() {
    const agent = client.getAgent("approver");
    const first = await agent.generate("note hi");
    const toolCallId = first.suspendPayload?.toolCallId;
    check(first.finishReason === "suspended" && first.runId && toolCallId, "finishReason suspended with a pending call", first);
    const done = await agent.approveToolCallGenerate({ runId: first.runId, toolCallId });
    check(done.text === "saved", "text 'saved'", done);
  },
  async latency(i, timed) {
    const t0 = performance.now();
    let first;
    let firstText;
    let deltas = 0;
    const lat = [];
    const response = await client.getAgent("ticker").stream(`ticks=${TICKS} gap=20`);
    const types = await drain(response, (chunk) => {
      first ??= performance.now() - t0;
      if (chunk.type !== "text-delta") return;
      firstText ??= performance.now() - t0;
      const received = now();
      for (const [, t] of String(chunk.payload?.text ?? "").matchAll(/<([\d.]+)>/g)) {
        lat.push(received - Number(t));
        deltas++;
      }
    });
    check(deltas === TICKS && types.at(-1) === "finish", `${TICKS} stamps and a final finish`, { deltas, types });
    if (timed) ttfc.push(first), ttft.push(firstText), deltaLatency.push(...lat), firstDeltaLatency.push(lat[0]);
  },
  async "thread-latency"(i, timed) {
    const agent = client.getAgent("ticker");
    threadSubscription ??= await subscribeTicker(agent);
    const lat = [];
    const finished = new Promise((resolve) => (threadSubscription.onFinish = resolve));
    threadSubscription.onDelta = (received, text) => {
      for (const [, t] of String(text).matchAll(/<([\d.]+)>/g)) lat.push(received - Number(t));
    };
    await agent.sendMessage({ ...threadSubscription.thread, message: `ticks=${TICKS} gap=20` });
    await finished;
    check(lat.length === TICKS, `${TICKS} stamps`, { n: lat.length });
    if (timed) deltaLatency.push(...lat), firstDeltaLatency.push(lat[0]);
  },
};

// One subscription to a thread of the ticker for every thread-latency operation: each run on the thread is
// followed by it, from its first chunk.
let threadSubscription;
async function subscribeTicker(agent) {
  const thread = { resourceId: `bench-${process.pid}`, threadId: `bench-thread-${process.pid}` };
  const subscription = await agent.subscribeToThread(thread);
  const state = { thread, onDelta: () => {}, onFinish: () => {}, subscription };
  subscription.processDataStream({
    onChunk: async (chunk) => {
      if (chunk.type === "text-delta") state.onDelta(now(), chunk.payload?.text ?? "");
      if (chunk.type === "finish") state.onFinish();
    },
  }).catch(() => {});
  return state;
}

// C workers doing operations in a loop until `count` are done; returns per-op ms and the overall rate.
async function bounded(count, inFlight, one) {
  let next = 0;
  const ms = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < count) {
        const i = next++;
        const t0 = performance.now();
        await one(i);
        ms.push(performance.now() - t0);
      }
    }),
  );
  return { ms, per_s: count / ((performance.now() - started) / 1000) };
}

const pct = (xs, p) => {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return Number(s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)].toFixed(3));
};
const summary = (xs) => ({ p50: pct(xs, 50), p95: pct(xs, 95) });

const op = OPS[OP];
if (!op) throw new Error(`unknown --op ${OP}; one of ${Object.keys(OPS).join(", ")}`);
await bounded(WARMUP, Math.min(WARMUP, CONCURRENCY), (i) => op(COUNT + i, false));
const { ms, per_s } = await bounded(COUNT, CONCURRENCY, (i) => op(i, true));
const out = { op: OP, concurrency: CONCURRENCY, count: COUNT, per_s: Number(per_s.toFixed(2)), ms: summary(ms) };
if (OP === "latency") Object.assign(out, { ttfc: summary(ttfc), ttft: summary(ttft) });
if (OP === "latency" || OP === "thread-latency")
  Object.assign(out, {
    delta_latency: { ...summary(deltaLatency), n: deltaLatency.length },
    first_delta_latency: { ...summary(firstDeltaLatency), n: firstDeltaLatency.length },
  });
console.log(JSON.stringify(out));
threadSubscription?.subscription.unsubscribe();
process.exit(0);
