// One sequence of `@mastra/client-js` workspace calls, run against Mastra's own server by
// bench/mastra/workspace_http_record.mjs (recorded in tests/fixtures/mastra_workspace_http.json) and against Keel's
// by tests/http_api/test_workspaces_as_mastra.py, so both answer the very same calls. The app both serve: the agent
// `files` ("Files") with the workspace `api-files` ("API files": a local folder with BM25 search and the skill
// `skills/release-notes`), and the agent `files_reader` with `api-files-read-only`, the same folder read-only
// (tests/http_api/workspace_app.py). The files it writes are under `dir` (removed at the end). It imports nothing:
// the caller passes its `MastraClient`.
//
//   const out = await workspaceCalls(client);   // {label: answer or {status, body}} in call order

/** The answer of `call()`, or the status and body of the error it throws. */
async function outcome(call) {
  try {
    return await call();
  } catch (e) {
    return { status: e.status ?? null, body: e.body ?? String(e.message) };
  }
}

const B_MD = "# B\n\nTemporal replays workflow histories.\n";

export async function workspaceCalls(
  client,
  { workspaceId = "api-files", readOnlyId = "api-files-read-only", dir = "as-mastra" } = {},
) {
  const ws = client.getWorkspace(workspaceId);
  const ro = client.getWorkspace(readOnlyId);
  const none = client.getWorkspace("no-such-workspace");
  const skill = ws.getSkill("release-notes");
  const out = {};
  const at = (path) => `${dir}/${path}`;

  // What the server is configured with (the app's other workspaces left out).
  out.list = await outcome(async () => {
    const { workspaces } = await client.listWorkspaces();
    return workspaces.filter((w) => w.id === workspaceId || w.id === readOnlyId).sort((a, b) => (a.id < b.id ? -1 : 1));
  });
  out.info = await outcome(() => ws.info());
  out.info_read_only = await outcome(() => ro.info());
  out.info_unknown = await outcome(() => none.info());

  // The filesystem.
  out.write = await outcome(() => ws.writeFile(at("a.txt"), "hello\n"));
  out.write_nested = await outcome(() => ws.writeFile(at("sub/b.md"), B_MD));
  out.write_base64 = await outcome(() =>
    ws.writeFile(at("bin/c.bin"), Buffer.from([0, 1, 255]).toString("base64"), { encoding: "base64" }),
  );
  out.write_overwrite = await outcome(() => ws.writeFile(at("a.txt"), "hello again\n"));
  out.write_no_parent = await outcome(() => ws.writeFile(at("nowhere/d.txt"), "x", { recursive: false }));
  out.write_outside = await outcome(() => ws.writeFile("../outside.txt", "x"));
  out.write_read_only = await outcome(() => ro.writeFile(at("ro.txt"), "x"));
  out.write_unknown = await outcome(() => none.writeFile("x.txt", "x"));
  out.read = await outcome(() => ws.readFile(at("a.txt")));
  out.read_base64 = await outcome(() => ws.readFile(at("bin/c.bin"), "base64"));
  out.read_through_read_only = await outcome(() => ro.readFile(at("sub/b.md")));
  out.read_missing = await outcome(() => ws.readFile(at("nope.txt")));
  out.read_outside = await outcome(() => ws.readFile("../outside.txt"));
  out.read_no_path = await outcome(() => ws.readFile(""));
  out.read_unknown = await outcome(() => none.readFile("x.txt"));
  out.stat = await outcome(() => ws.stat(at("a.txt")));
  out.stat_directory = await outcome(() => ws.stat(at("sub")));
  out.stat_missing = await outcome(() => ws.stat(at("nope.txt")));
  out.stat_absolute = await outcome(() => ws.stat("/etc/hostname"));
  out.mkdir = await outcome(() => ws.mkdir(at("made/deeper")));
  out.mkdir_existing = await outcome(() => ws.mkdir(at("made")));
  out.mkdir_read_only = await outcome(() => ro.mkdir(at("ro")));
  out.list_dir = await outcome(() => ws.listFiles(dir));
  out.list_recursive = await outcome(() => ws.listFiles(dir, true));
  out.list_missing = await outcome(() => ws.listFiles(at("nope")));
  out.list_unknown = await outcome(() => none.listFiles("x"));
  out.delete_not_empty = await outcome(() => ws.delete(at("made")));
  out.delete_file = await outcome(() => ws.delete(at("a.txt")));
  out.delete_missing = await outcome(() => ws.delete(at("a.txt")));
  out.delete_missing_forced = await outcome(() => ws.delete(at("a.txt"), { force: true }));
  out.delete_read_only = await outcome(() => ro.delete(at("sub/b.md")));
  out.delete_recursive = await outcome(() => ws.delete(at("made"), { recursive: true }));
  out.list_after_delete = await outcome(() => ws.listFiles(dir));

  // Search.
  out.index = await outcome(() => ws.index({ path: at("docs/temporal.md"), content: "Temporal replays workflow histories.\nActivities retry." }));
  out.index_other = await outcome(() => ws.index({ path: at("docs/other.md"), content: "Nothing to see here.\nReally nothing." }));
  out.index_with_metadata = await outcome(() =>
    ws.index({ path: at("docs/third.md"), content: "Workers poll task queues for workflow tasks.", metadata: { kind: "note" } }),
  );
  out.search = await outcome(() => ws.search({ query: "replays histories", topK: 3 }));
  out.search_bm25 = await outcome(() => ws.search({ query: "workflow", mode: "bm25" }));
  out.search_top1 = await outcome(() => ws.search({ query: "workflow", topK: 1 }));
  out.search_nothing = await outcome(() => ws.search({ query: "zebra" }));
  out.search_read_only = await outcome(() => ro.search({ query: "replays" }));
  out.search_unknown = await outcome(() => none.search({ query: "replays" }));
  out.index_read_only = await outcome(() => ro.index({ path: "a", content: "b" }));
  out.index_unknown = await outcome(() => none.index({ path: "a", content: "b" }));

  // Skills.
  out.skills = await outcome(() => ws.listSkills());
  out.skill = await outcome(() => skill.details());
  out.skill_by_path = await outcome(() => ws.getSkill("release-notes", "skills/release-notes").details());
  out.references = await outcome(() => skill.listReferences());
  out.reference = await outcome(() => skill.getReference("style.md"));
  out.reference_missing = await outcome(() => skill.getReference("nope.md"));
  out.reference_escape = await outcome(() => skill.getReference("../SKILL.md"));
  out.skill_missing = await outcome(() => ws.getSkill("nope").details());
  out.references_missing = await outcome(() => ws.getSkill("nope").listReferences());
  out.skills_search = await outcome(() => ws.searchSkills({ query: "past tense" }));
  out.skills_search_names = await outcome(() =>
    ws.searchSkills({ query: "release notes", skillNames: ["release-notes"], includeReferences: false }),
  );
  out.skills_read_only = await outcome(() => ro.listSkills());
  out.skill_read_only = await outcome(() => ro.getSkill("release-notes").details());
  out.skills_search_read_only = await outcome(() => ro.searchSkills({ query: "past tense" }));

  out.cleanup = await outcome(() => ws.delete(dir, { recursive: true }));
  return out;
}
