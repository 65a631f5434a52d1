-- Values too large for Temporal's history (over 256 KiB), by content address (SHA-256 hex).
CREATE TABLE IF NOT EXISTS payloads (
    key        TEXT PRIMARY KEY,
    data       BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
