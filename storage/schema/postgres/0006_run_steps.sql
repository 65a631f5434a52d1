-- What each step of a run has done, so a step executed again from scratch (a local activity re-run after its
-- workflow task was lost starts at attempt 1 again) returns the model answer it stored instead of asking
-- again, and tells a tool that may already have run that this is a later attempt. `key` is the step's
-- assistant message id (`answer`: the step's result) or a tool call's result message id (`starts`).
CREATE TABLE run_steps (
    run_id     TEXT NOT NULL,
    key        TEXT NOT NULL,
    starts     INTEGER NOT NULL DEFAULT 0,
    answer     JSONB,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, key)
);
