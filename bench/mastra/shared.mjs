// What the Mastra bench scripts share: command-line options, the bench tools, and stored definitions as
// Mastra's addDynamicWorkflows takes them.
import { readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { createTool } from "@mastra/core/tools";
import { z } from "zod";

const args = process.argv.slice(2);
/** The value after `--name` on the command line, else `dflt`. */
export const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};

/** Keel's bench tool `write_read`: write a small file under `dir`, read it back, return its length. */
export const writeReadTool = (dir) =>
  createTool({
    id: "write_read",
    description: "Write a small file, read it back and return its length.",
    inputSchema: z.object({ path: z.string(), content: z.string() }),
    execute: async (input) => {
      const target = join(dir, basename(input.path));
      writeFileSync(target, input.content);
      return { length: readFileSync(target, "utf8").length };
    },
  });

/** The tools of the stored definitions `three` and `ask` (bench/workflow_runs.py). */
export const workflowTools = {
  double: createTool({
    id: "double",
    description: "Twice n.",
    inputSchema: z.object({ n: z.number().int() }),
    outputSchema: z.object({ n: z.number().int() }),
    execute: async (input) => ({ n: input.n * 2 }),
  }),
  "ask-human": createTool({
    id: "ask-human",
    description: "Ask a person: suspends with {question} until resumed with {answer}, which it returns.",
    inputSchema: z.object({ question: z.string().min(1) }),
    outputSchema: z.object({ answer: z.string() }),
    suspendSchema: z.object({ question: z.string() }),
    resumeSchema: z.object({ answer: z.string() }),
    execute: async (input, context) => {
      const flow = context?.workflow ?? context;
      if (flow?.resumeData === undefined) {
        await flow.suspend({ question: input.question });
        return undefined;
      }
      return { answer: String(flow.resumeData.answer) };
    },
  }),
};

/** Keel's stored definitions as Mastra takes them: a mapping's `mapConfig` is a JSON string there. */
export const asDynamicWorkflows = (defs) =>
  defs.map((d) => ({
    ...d,
    graph: d.graph.map((e) =>
      e.type === "mapping" && typeof e.mapConfig !== "string" ? { ...e, mapConfig: JSON.stringify(e.mapConfig) } : e,
    ),
  }));
