-- The workflow ids whose histories may reference a payload, so a sweep deletes only payloads no execution can
-- reference; `last_put_at` is renewed by every put, and a sweep deletes only payloads last put before its cutoff.
ALTER TABLE payloads ADD COLUMN IF NOT EXISTS last_put_at TIMESTAMPTZ;
UPDATE payloads SET last_put_at = created_at WHERE last_put_at IS NULL;
ALTER TABLE payloads ALTER COLUMN last_put_at SET NOT NULL;
CREATE TABLE IF NOT EXISTS payload_owners (
    key         TEXT NOT NULL REFERENCES payloads (key) ON DELETE CASCADE,
    workflow_id TEXT NOT NULL,
    PRIMARY KEY (key, workflow_id)
);
