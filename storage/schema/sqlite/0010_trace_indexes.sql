-- Whole traces are pruned: whether a trace holds a span newer than the retention is asked by trace and time.
-- Deleting traces deletes their log records (by trace). A trace is listed by its earliest run span.
CREATE INDEX spans_by_trace_time ON spans (trace_id, started_at);
CREATE INDEX span_runs ON spans (trace_id, started_at) WHERE span_type IN ('agent_run', 'workflow_run');
CREATE INDEX logs_by_trace ON logs (trace_id) WHERE trace_id IS NOT NULL;
