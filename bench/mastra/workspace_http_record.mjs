// Records the REAL Mastra HTTP API of workspaces: a Mastra instance with the two agents of Keel's
// tests/http_api/workspace_app.py — `files` ("Files") with the workspace `api-files` ("API files": a LocalFilesystem
// on a temp dir holding the skill `skills/release-notes`, BM25 search, skills ["skills"]) and `files_reader` with
// `api-files-read-only` (the same dir, read-only) — served by @mastra/hono on @hono/node-server (as server.mjs
// does), driven by the unmodified @mastra/client-js through the call sequence Keel's test runs too
// (tests/http_api/js/workspace_calls.mjs). Writes tests/fixtures/mastra_workspace_http.json.
//
//   cd bench/mastra && npm ci && node workspace_http_record.mjs [--port 4199] [--out ../../tests/fixtures/mastra_workspace_http.json]
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { LocalFilesystem, Workspace } from "@mastra/core/workspace";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { MastraServer } from "@mastra/hono";
import { MastraClient } from "@mastra/client-js";
import { Hono } from "hono";
import { serve } from "@hono/node-server";
import { opt } from "./shared.mjs";
import { workspaceCalls } from "../../tests/http_api/js/workspace_calls.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const OUT = resolve(opt("out", join(HERE, "../../tests/fixtures/mastra_workspace_http.json")));
const PORT = Number(opt("port", "4199"));

// The folder, as tests/http_api/workspace_app.py writes it (SKILL_MD, STYLE_MD).
const top = realpathSync(mkdtempSync(join(tmpdir(), "keel-mastra-workspace-http-")));
const dir = join(top, "files");
const SKILL_MD = `---
name: release-notes
description: How to write the release notes of a Keel release. Use it when asked for release notes.
license: Apache-2.0
---
# Release notes

Group the changes by component, newest first, and link each to its issue.
`;
const STYLE_MD = "# Style\n\nWrite in the past tense: 'Added', 'Fixed'. One line per change.\n";
mkdirSync(join(dir, "skills", "release-notes", "references"), { recursive: true });
writeFileSync(join(dir, "skills", "release-notes", "SKILL.md"), SKILL_MD);
writeFileSync(join(dir, "skills", "release-notes", "references", "style.md"), STYLE_MD);

// Never run: the agents give the app their workspaces, as Keel's do.
const model = new MastraLanguageModelV2Mock({ modelId: "never" });
const files = new Agent({
  id: "files",
  name: "Files",
  instructions: "",
  model,
  workspace: new Workspace({
    id: "api-files",
    name: "API files",
    filesystem: new LocalFilesystem({ basePath: dir }),
    bm25: true,
    skills: ["skills"],
  }),
});
const reader = new Agent({
  id: "files_reader",
  name: "files_reader",
  instructions: "",
  model,
  workspace: new Workspace({ id: "api-files-read-only", filesystem: new LocalFilesystem({ basePath: dir, readOnly: true }) }),
});
// Not in Keel's app: the same skills in a workspace whose search index holds nothing else (see below).
const alone = new Agent({
  id: "skills_alone",
  name: "skills_alone",
  instructions: "",
  model,
  workspace: new Workspace({ id: "skills-alone", filesystem: new LocalFilesystem({ basePath: dir, readOnly: true }), bm25: true, skills: ["skills"] }),
});
const mastra = new Mastra({ agents: { files, files_reader: reader, skills_alone: alone }, logger: false });
const app = new Hono();
await new MastraServer({ app, mastra }).init();
const server = serve({ fetch: app.fetch, port: PORT, hostname: "127.0.0.1" });
await new Promise((r) => setTimeout(r, 200));

const UUID = /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi;
const FS_ID = /\blocal-fs-[0-9a-z]+-[0-9a-z]+\b/g;
const TIME = /\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\b/g;
const escaped = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const norm = (v) =>
  JSON.parse(
    JSON.stringify(v)
      .replace(new RegExp(escaped(dir), "g"), "<dir>")
      .replace(UUID, "<uuid>")
      .replace(FS_ID, "<fs-id>")
      .replace(TIME, "<time>"),
  );

const client = new MastraClient({ baseUrl: `http://127.0.0.1:${PORT}`, retries: 0 });
const out = { calls: norm(await workspaceCalls(client)) };
// A Mastra workspace's skills share its search engine: their BM25 documents count in the same statistics as the
// content indexed with `index`, so the skill searches above score against both. Keel keeps a skill catalog's
// index apart; these are Mastra's answers when the index holds the skills alone.
const skillsAlone = client.getWorkspace("skills-alone");
out.skills_alone = norm({
  skills_search: await skillsAlone.searchSkills({ query: "past tense" }),
  skills_search_names: await skillsAlone.searchSkills({ query: "release notes", skillNames: ["release-notes"], includeReferences: false }),
});
if (existsSync(join(top, "outside.txt"))) throw new Error("Mastra wrote outside its workspace");
const version = (pkg) => JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url), "utf8")).version;
out._meta = {
  generator: "bench/mastra/workspace_http_record.mjs",
  calls: "tests/http_api/js/workspace_calls.mjs",
  mastra_core: version("@mastra/core"),
  mastra_server: version("@mastra/server"),
  client_js: version("@mastra/client-js"),
  node: process.version,
  normalisation: "The workspace's folder -> <dir>, UUIDs -> <uuid>, ISO timestamps -> <time>, filesystem ids -> <fs-id>.",
};
mkdirSync(dirname(OUT), { recursive: true });
writeFileSync(OUT, JSON.stringify(out, null, 1) + "\n");
process.stderr.write(`wrote ${OUT}\n`);
server.close();
rmSync(top, { recursive: true, force: true });
process.exit(0);
