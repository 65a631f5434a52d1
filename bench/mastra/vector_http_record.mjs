// Records the REAL Mastra HTTP API of vector stores: a Mastra instance with one vector store registered
// (`new Mastra({ vectors: { docs: new LibSQLVector({ id: "docs-store", url: ":memory:" }) } })`), served by
// @mastra/hono on @hono/node-server (as server.mjs does), driven by the unmodified @mastra/client-js through the
// call sequence Keel's test runs too (tests/http_api/js/vector_calls.mjs). Writes
// tests/fixtures/mastra_vector_http.json.
//
//   cd bench/mastra && npm ci && node vector_http_record.mjs [--port 4197] [--out ../../tests/fixtures/mastra_vector_http.json]
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Mastra } from "@mastra/core";
import { LibSQLVector } from "@mastra/libsql";
import { MastraServer } from "@mastra/hono";
import { MastraClient } from "@mastra/client-js";
import { Hono } from "hono";
import { serve } from "@hono/node-server";
import { opt } from "./shared.mjs";
import { vectorCalls } from "../../tests/http_api/js/vector_calls.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const OUT = resolve(opt("out", join(HERE, "../../tests/fixtures/mastra_vector_http.json")));
const PORT = Number(opt("port", "4197"));

const mastra = new Mastra({ vectors: { docs: new LibSQLVector({ id: "docs-store", url: ":memory:" }) }, logger: false });
const app = new Hono();
await new MastraServer({ app, mastra }).init();
const server = serve({ fetch: app.fetch, port: PORT, hostname: "127.0.0.1" });
await new Promise((r) => setTimeout(r, 200));

const UUID = /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi;
const norm = (v) => JSON.parse(JSON.stringify(v).replace(UUID, "<uuid>"));

const client = new MastraClient({ baseUrl: `http://127.0.0.1:${PORT}`, retries: 0 });
const out = { calls: norm(await vectorCalls(client, "docs")) };
const version = (pkg) => JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url), "utf8")).version;
out._meta = {
  generator: "bench/mastra/vector_http_record.mjs",
  calls: "tests/http_api/js/vector_calls.mjs",
  mastra_core: version("@mastra/core"),
  mastra_server: version("@mastra/server"),
  mastra_libsql: version("@mastra/libsql"),
  client_js: version("@mastra/client-js"),
  node: process.version,
  normalisation: "UUIDs -> <uuid>.",
};
mkdirSync(dirname(OUT), { recursive: true });
writeFileSync(OUT, JSON.stringify(out, null, 1) + "\n");
process.stderr.write(`wrote ${OUT}\n`);
server.close();
process.exit(0);
