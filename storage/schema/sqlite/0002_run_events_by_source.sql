-- Every step's write looks up the highest attempt its source wrote: an index instead of a scan of the run's log.
CREATE INDEX IF NOT EXISTS run_events_source_attempt ON run_events (run_id, source, attempt);
