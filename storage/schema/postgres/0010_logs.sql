-- Log records a worker keeps (KEEL_LOGS), bounded by age and count, read by the /api/logs routes and `keel logs`.
-- `seq` orders the writes (pruning deletes the oldest first) and is never reused, and records are read in the order
-- they were logged (`logged_at`, then `seq`). `run_id` is the Keel run (or Temporal workflow) a record was logged
-- for, when known, and `data` (JSON) holds the rest: the tool call, Temporal's activity or workflow, the exception.
CREATE TABLE logs (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    logged_at    TIMESTAMPTZ NOT NULL,
    level        TEXT NOT NULL,
    logger       TEXT NOT NULL,
    message      TEXT NOT NULL,
    run_id       TEXT,
    agent_id     TEXT,
    step         INTEGER,
    thread_id    TEXT,
    trace_id     TEXT,
    span_id      TEXT,
    data         JSONB NOT NULL,
    pid          INTEGER NOT NULL,
    hostname     TEXT NOT NULL,
    service_name TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX logs_by_run ON logs (run_id, logged_at) WHERE run_id IS NOT NULL;
CREATE INDEX logs_by_time ON logs (logged_at);
