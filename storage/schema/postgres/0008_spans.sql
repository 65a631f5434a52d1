-- Trace spans the storage exporter keeps (OTEL_TRACES_EXPORTER=keel), bounded by age and count, read by the
-- observability routes and `keel trace`. `seq` orders the writes (pruning deletes the oldest first) and is never
-- reused. `is_root` marks a span whose parent is not stored: the earliest such span heads its trace. `run_id` is
-- the Keel run (or Temporal workflow) a span belongs to, when it says.
CREATE TABLE spans (
    seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    trace_id       TEXT NOT NULL,
    span_id        TEXT NOT NULL,
    parent_span_id TEXT,
    name           TEXT NOT NULL,
    kind           TEXT NOT NULL,
    span_type      TEXT NOT NULL,
    status         TEXT NOT NULL,
    status_message TEXT,
    started_at     TIMESTAMPTZ NOT NULL,
    ended_at       TIMESTAMPTZ NOT NULL,
    run_id         TEXT,
    entity_type    TEXT,
    entity_id      TEXT,
    entity_name    TEXT,
    thread_id      TEXT,
    service_name   TEXT,
    scope          TEXT,
    attributes     JSONB NOT NULL,
    events         JSONB NOT NULL,
    links          JSONB NOT NULL,
    resource       JSONB NOT NULL,
    is_root        BOOLEAN NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    UNIQUE (trace_id, span_id)
);
CREATE INDEX spans_by_run ON spans (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX spans_by_start ON spans (started_at);
CREATE INDEX span_roots ON spans (started_at) WHERE is_root;
