-- Threads, messages and run events: the schema Keel created before migrations were versioned.
CREATE TABLE IF NOT EXISTS threads (
    id          TEXT PRIMARY KEY,
    seq         BIGINT GENERATED ALWAYS AS IDENTITY,
    resource_id TEXT NOT NULL,
    title       TEXT,
    metadata    JSONB,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS threads_resource_created ON threads (resource_id, created_at DESC, seq DESC);
CREATE INDEX IF NOT EXISTS threads_created ON threads (created_at DESC, seq DESC);

CREATE TABLE IF NOT EXISTS messages (
    id          TEXT PRIMARY KEY,
    seq         BIGINT GENERATED ALWAYS AS IDENTITY,
    thread_id   TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    resource_id TEXT NOT NULL,
    role        TEXT NOT NULL,
    content     JSONB NOT NULL,
    run_id      TEXT,
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_thread_order ON messages (thread_id, created_at, seq);

CREATE TABLE IF NOT EXISTS run_events (
    run_id     TEXT NOT NULL,
    "offset"   BIGINT NOT NULL,
    type       TEXT NOT NULL,
    payload    JSONB NOT NULL,
    source     TEXT,
    attempt    INTEGER NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, "offset")
);
