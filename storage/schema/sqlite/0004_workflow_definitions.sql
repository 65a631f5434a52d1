-- Stored workflow definitions: one row per workflow, one per version. A run pins the version it started with,
-- so editing or deleting a definition never changes a run in flight: versions are never updated or removed.
CREATE TABLE workflow_definitions (
    workflow_id    TEXT PRIMARY KEY,
    latest_version INTEGER NOT NULL,
    status         TEXT NOT NULL,
    author_id      TEXT,
    deleted        INTEGER NOT NULL DEFAULT 0,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE workflow_definition_versions (
    workflow_id TEXT NOT NULL,
    version     INTEGER NOT NULL,
    hash        TEXT NOT NULL,
    definition  TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (workflow_id, version)
) WITHOUT ROWID;
