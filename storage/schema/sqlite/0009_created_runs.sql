-- Runs named by the HTTP API's `create-run` with a resource id, before any execution exists: `start`,
-- `start-async` and `stream` of that run id (which client-js sends without it) start it as the resource's. Rows
-- are pruned by age when new ones are written (`CREATED_RUN_DAYS`).
CREATE TABLE created_runs (
    run_id      TEXT NOT NULL,
    workflow_id TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (run_id, workflow_id)
);
CREATE INDEX created_runs_by_time ON created_runs (created_at);
