// A workflow run's events read with the unmodified @mastra/client-js (`run.observe({offset})`), as a client that
// must not miss or repeat one does: after every dropped or ended stream (a stream ends when the run suspends) it
// observes again from the number of events it has, until the run's final `workflow-finish`. Each event is printed
// as a JSON line. Run by the chaos driver (bench/chaos/driver.py) with `node --input-type=module -e` from
// tests/http_api/js, where client-js is installed; `process.env.OBSERVE` is `{baseUrl, workflowId, runId}`.
import { MastraClient } from "@mastra/client-js";

const { baseUrl, workflowId, runId } = JSON.parse(process.env.OBSERVE);
const client = new MastraClient({ baseUrl, retries: 0 });
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
let got = 0;
let finished = false;
while (!finished) {
  try {
    const run = await client.getWorkflow(workflowId).createRun({ runId });
    const stream = await run.observe({ offset: got });
    for await (const event of stream) {
      process.stdout.write(JSON.stringify(event) + "\n");
      got += 1;
      finished ||= event.type === "workflow-finish" && event.payload?.workflowStatus !== "suspended";
    }
  } catch (err) {
    process.stderr.write(`observe: ${err}\n`);
  }
  if (!finished) await sleep(300);
}
