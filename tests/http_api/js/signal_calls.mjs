// One sequence of `@mastra/client-js` agent signal calls (`POST /agents/:agentId/signals`), run against Mastra's own
// server by bench/mastra/signal_http_record.mjs (recorded in tests/fixtures/mastra_signal_http.json) and against
// Keel's by tests/http_api/test_signals_as_mastra.py, so both answer the very same calls. The agent both serve,
// `listener`, is scripted: "pause" -> a call of its tool `pause` ({seconds: 1.5}); anything else (and after the
// pause) -> the text "heard: " and every user message of the thread, joined by " | ". The calls wake the idle
// thread, try what is refused, then signal a run while it pauses (by its run id and by the thread). The thread's
// subscription collects what the agent answered to each run (`heard_idle`, `heard_active`). It imports nothing: the caller passes its
// `MastraClient` and a fresh thread id.
//
//   const out = normalSignalAnswers(await signalCalls(client, threadId), threadId);
//   // {label: answer or {status, body}} in call order, ids and times normalised

/** The answer of `call()`, or the status and body of the error it throws. */
async function outcome(call) {
  try {
    return await call();
  } catch (e) {
    return { status: e.status ?? null, body: e.body ?? String(e.message) };
  }
}

export async function signalCalls(client, threadId, { agentId = "listener", resourceId = "ann" } = {}) {
  const agent = client.getAgent(agentId);
  const thread = { resourceId, threadId };
  const send = (body) => outcome(() => agent.sendSignal(body));
  const out = {};

  // What the agent answers on the thread: the text of each run that answered, in order. (Mastra's subscription also
  // shows an idle signal persisted without a run as a run of its own, with no text: not counted.)
  const answers = [];
  let text = "";
  const waiters = [];
  const seen = { "tool-call": 0, answer: 0 };
  const until = (type, count) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${type} #${count} on the thread (saw ${JSON.stringify(seen)})`)), 30000);
      waiters.push({ type, count, resolve: () => (clearTimeout(timer), resolve()) });
      settle();
    });
  const settle = () => {
    for (const w of [...waiters])
      if (seen[w.type] >= w.count) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
  };
  // A run's `finish` may come a moment before its server counts the run as over (a signal sent in between would go
  // into that run): the next signal waits a little, to wake a run of its own.
  const ended = async (count) => {
    await until("answer", count);
    await new Promise((resolve) => setTimeout(resolve, 300));
  };
  const subscription = await agent.subscribeToThread(thread);
  const reading = subscription.processDataStream({
    onChunk: async (chunk) => {
      if (chunk.type === "text-delta") text += chunk.payload.text;
      if (chunk.type === "finish") {
        if (text) {
          answers.push(text);
          seen.answer += 1;
        }
        text = "";
      }
      if (chunk.type === "tool-call") seen["tool-call"] += 1;
      settle();
    },
  });

  // An idle thread: each signal wakes a run (or is discarded, or persisted for the next one).
  out.wake = await send({ ...thread, signal: { type: "user-message", contents: "hello" } });
  await ended(1);
  out.notification = await send({
    ...thread,
    signal: { type: "notification", contents: "build done", tagName: "ci", id: "sig-1", attributes: { ok: true, n: 2 } },
  });
  await ended(2);
  out.state = await send({ ...thread, signal: { type: "state", contents: "mode=fast" } });
  await ended(3);
  out.idle_discard = await send({ ...thread, ifIdle: { behavior: "discard" }, signal: { type: "user", contents: "dropped" } });
  out.idle_persist = await send({ ...thread, ifIdle: { behavior: "persist" }, signal: { type: "user", contents: "kept" } });
  out.wake_after_persist = await send({ ...thread, signal: { type: "user", contents: "bye" } });
  await ended(4);

  // What is refused.
  out.ended_run = await send({ runId: out.wake.runId, signal: { type: "user", contents: "late" } });
  out.unknown_run = await send({ runId: "no-such-run", signal: { type: "user", contents: "late" } });
  out.unknown_type = await send({ ...thread, signal: { type: "shout", contents: "x" } });
  out.no_target = await send({ signal: { type: "user", contents: "x" } });
  out.no_contents = await send({ ...thread, signal: { type: "user" } });
  out.unknown_agent = await outcome(() => client.getAgent("nobody").sendSignal({ ...thread, signal: { type: "user", contents: "x" } }));
  out.heard_idle = [...answers];

  // An active run: signals into it while it pauses, by its run id and by its thread; its next step reads them.
  out.wake_to_pause = await send({ ...thread, signal: { type: "user", contents: "pause" } });
  await until("tool-call", 1);
  out.active_by_run = await send({
    runId: out.wake_to_pause.runId,
    signal: { type: "system-reminder", contents: "be <brief>", attributes: { source: "cron" } },
  });
  out.active_by_thread = await send({ ...thread, signal: { type: "user-message", contents: "also this" } });
  await until("answer", 5);
  await new Promise((resolve) => setTimeout(resolve, 500)); // anything the run still says
  subscription.unsubscribe();
  await reading.catch(() => {});
  out.heard_active = answers.slice(out.heard_idle.length);
  return out;
}

const UUID = /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi;
const TIME = /\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\b/g;

/** `out` with each run id as `<run-N>` (N in order of first appearance: wherever it appears, a signal's id too),
 * the thread id as `<thread>`, other UUIDs as `<uuid>` and ISO timestamps as `<time>`. */
export function normalSignalAnswers(out, threadId) {
  let text = JSON.stringify(out).split(JSON.stringify(threadId)).join('"<thread>"');
  const runs = [];
  for (const answer of Object.values(out))
    if (typeof answer?.runId === "string" && !runs.includes(answer.runId)) runs.push(answer.runId);
  runs.forEach((id, i) => (text = text.split(JSON.stringify(id)).join(`"<run-${i + 1}>"`)));
  return JSON.parse(text.replace(UUID, "<uuid>").replace(TIME, "<time>"));
}
