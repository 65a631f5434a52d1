// Mastra's S3Filesystem (`@mastra/s3`) on an S3 server bench/s3_filesystem.py started: writeFile and readFile
// calls per second, the same calls Keel's side makes.
//
//   echo '{"endpoint": "http://127.0.0.1:8333", "bucket": "keel", "prefix": "mastra-0", "region": "us-east-1",
//          "accessKeyId": "...", "secretAccessKey": "...", "calls": 200, "contentBytes": 128, "warmUp": 50}' \
//     | node s3_bench.mjs
//
// A fresh `S3Filesystem` under `prefix`; `warmUp` untimed writeFile + readFile pairs (under `prefix/warm`: the
// client, the bucket check, the JIT), then `calls` writeFile calls of distinct files `f<i>.txt` one after the
// other, then `calls` readFile calls of the same files (`encoding: "utf-8"`, each checked). The content is
// "hello workspace\n" repeated to `contentBytes`, as on Keel's side. JSON on stdout:
// {write_calls_per_s, read_calls_per_s, calls_per_s, write_s, read_s, mastra_s3_version, node}.
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { S3Filesystem } from "@mastra/s3";

const input = JSON.parse(readFileSync(0, "utf8"));
const calls = Number(input.calls ?? 200);
const warmUp = Number(input.warmUp ?? 50);
const size = Number(input.contentBytes ?? 128);
const content = "hello workspace\n".repeat(Math.ceil(size / 16)).slice(0, size);

const filesystem = (prefix) =>
  new S3Filesystem({
    bucket: input.bucket,
    region: input.region ?? "us-east-1",
    endpoint: input.endpoint,
    forcePathStyle: true,
    accessKeyId: input.accessKeyId,
    secretAccessKey: input.secretAccessKey,
    prefix,
  });

const check = (path, text) => {
  if (text !== content) throw new Error(`readFile ${path}: ${JSON.stringify(String(text).slice(0, 60))}`);
};

const fs = filesystem(input.prefix);
await fs.init();
for (let i = 0; i < warmUp; i++) {
  await fs.writeFile(`warm/w${i}.txt`, content);
  check(`warm/w${i}.txt`, await fs.readFile(`warm/w${i}.txt`, { encoding: "utf-8" }));
}

const paths = Array.from({ length: calls }, (_, i) => `f${i}.txt`);
let started = performance.now();
for (const path of paths) await fs.writeFile(path, content);
const writeS = (performance.now() - started) / 1000;
started = performance.now();
for (const path of paths) check(path, await fs.readFile(path, { encoding: "utf-8" }));
const readS = (performance.now() - started) / 1000;
await fs.destroy();

const pkg = JSON.parse(readFileSync(new URL("./node_modules/@mastra/s3/package.json", import.meta.url), "utf8"));
console.log(
  JSON.stringify({
    write_calls_per_s: calls / writeS,
    read_calls_per_s: calls / readS,
    calls_per_s: (2 * calls) / (writeS + readS),
    write_s: writeS,
    read_s: readS,
    mastra_s3_version: pkg.version,
    node: process.version,
  }),
);
