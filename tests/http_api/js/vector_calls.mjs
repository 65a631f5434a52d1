// One sequence of `@mastra/client-js` vector calls, run against Mastra's own server by
// bench/mastra/vector_http_record.mjs (recorded in tests/fixtures/mastra_vector_http.json) and against Keel's by
// tests/http_api/test_vectors.py, so both answer the very same calls. It imports nothing: the caller passes its
// `MastraClient` (with `retries: 0`, so a 5xx is answered once).
//
//   const out = await vectorCalls(client, "docs");   // {label: answer or {status, body}} in call order

const DOCS = [
  { id: "v1", vector: [1, 0, 0], metadata: { kind: "guide", year: 2020, tags: ["intro"], author: { name: "ada" } } },
  { id: "v2", vector: [0.9, 0.1, 0], metadata: { kind: "guide", year: 2022, tags: ["deep"], author: { name: "bob" } } },
  { id: "v3", vector: [0.6, 0.8, 0], metadata: { kind: "note", year: 2021, author: { name: "ada" } } },
  { id: "v4", vector: [0, 1, 0], metadata: { kind: "note", year: 2024, draft: true } },
  { id: "v5", vector: [0, 0, 1], metadata: { kind: "spec", year: 2019 } },
];

/** The answer of `call()`, or the status and body of the error it throws. */
async function outcome(call) {
  try {
    return await call();
  } catch (e) {
    return { status: e.status ?? null, body: e.body ?? String(e.message) };
  }
}

export async function vectorCalls(client, vectorName, { indexName = "docs" } = {}) {
  const v = client.getVector(vectorName);
  const out = {};
  const q = (body) => outcome(() => v.query({ indexName, queryVector: [1, 0.05, 0], ...body }));

  out.list = await outcome(() => client.listVectors());
  out.create = await outcome(() => v.createIndex({ indexName, dimension: 3 }));
  out.create_again = await outcome(() => v.createIndex({ indexName, dimension: 3, metric: "cosine" }));
  out.create_other_dimension = await outcome(() => v.createIndex({ indexName, dimension: 4 }));
  out.create_zero_dimension = await outcome(() => v.createIndex({ indexName: "zero", dimension: 0 }));
  out.create_unknown_metric = await outcome(() => v.createIndex({ indexName: "odd", dimension: 3, metric: "manhattan" }));
  out.upsert = await outcome(() =>
    v.upsert({ indexName, vectors: DOCS.map((d) => d.vector), metadata: DOCS.map((d) => d.metadata), ids: DOCS.map((d) => d.id) }),
  );
  out.upsert_without_ids = await outcome(() => v.upsert({ indexName, vectors: [[0, 0.6, 0.8]], metadata: [{ kind: "tmp" }] }));
  out.upsert_wrong_dimension = await outcome(() => v.upsert({ indexName, vectors: [[1, 0]], ids: ["short"] }));
  out.indexes = await outcome(() => v.getIndexes());
  out.details = await outcome(() => v.details(indexName));
  out.query_top2 = await q({ topK: 2 });
  out.query_default_top_k = await q({});
  out.query_eq = await q({ topK: 10, filter: { kind: "note" } });
  out.query_eq_operator = await q({ topK: 10, filter: { kind: { $eq: "guide" } } });
  out.query_ne = await q({ topK: 10, filter: { kind: { $ne: "guide" } } });
  out.query_in = await q({ topK: 10, filter: { year: { $in: [2019, 2024] } } });
  out.query_nin = await q({ topK: 10, filter: { kind: { $nin: ["guide", "note"] } } });
  out.query_range = await q({ topK: 10, filter: { year: { $gte: 2020, $lt: 2022 } } });
  out.query_and = await q({ topK: 10, filter: { $and: [{ kind: "guide" }, { year: { $gt: 2020 } }] } });
  out.query_or = await q({ topK: 10, filter: { $or: [{ kind: "spec" }, { year: 2024 }] } });
  out.query_nested = await q({ topK: 10, filter: { "author.name": "ada" } });
  out.query_exists = await q({ topK: 10, filter: { draft: { $exists: true } } });
  out.query_include_vector = await q({ topK: 2, includeVector: true });
  out.query_wrong_dimension = await outcome(() => v.query({ indexName, queryVector: [1, 0], topK: 1 }));
  out.query_unknown_operator = await q({ topK: 1, filter: { kind: { $like: "g%" } } });
  out.query_unknown_index = await outcome(() => v.query({ indexName: "missing", queryVector: [1, 0, 0] }));
  out.details_unknown_index = await outcome(() => v.details("missing"));
  out.delete = await outcome(() => v.delete(indexName));
  out.indexes_after_delete = await outcome(() => v.getIndexes());
  out.unknown_store = await outcome(() => client.getVector("no-such-store").getIndexes());
  return out;
}
