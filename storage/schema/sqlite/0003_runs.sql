-- Which execution chain a run id belongs to: a run id names one run (its events, its messages), never two.
CREATE TABLE IF NOT EXISTS runs (
    run_id       TEXT PRIMARY KEY,
    execution_id TEXT NOT NULL,
    created_at   TEXT NOT NULL
) WITHOUT ROWID;
