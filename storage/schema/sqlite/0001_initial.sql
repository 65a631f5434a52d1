-- Threads, messages and run events: the schema Keel created before migrations were versioned.
CREATE TABLE IF NOT EXISTS threads (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    resource_id TEXT NOT NULL,
    title       TEXT,
    metadata    TEXT,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS threads_resource_created ON threads (resource_id, created_at);
CREATE INDEX IF NOT EXISTS threads_created ON threads (created_at);

CREATE TABLE IF NOT EXISTS messages (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    thread_id   TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    role        TEXT NOT NULL,
    content     TEXT NOT NULL,
    run_id      TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_thread_order ON messages (thread_id, created_at, seq);

CREATE TABLE IF NOT EXISTS run_events (
    run_id     TEXT NOT NULL,
    "offset"   INTEGER NOT NULL,
    type       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    source     TEXT,
    attempt    INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, "offset")
) WITHOUT ROWID;
