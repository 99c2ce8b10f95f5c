-- bench/history_select.sql: the baseline of history_run_history.sql, a plain
-- SELECT of the same rows and columns of workflow.workflow_events, by
-- workflow_run_id in id order (the index (workflow_run_id, id)), counted or
-- written out by COPY to /dev/null.  Variables: run, copy.
\if :copy
COPY (SELECT id, workflow_run_id, step_key, event_type, detail, created_at FROM workflow.workflow_events WHERE workflow_run_id = ':run' ORDER BY id) TO '/dev/null';
\else
SELECT count(*) FROM (SELECT id, workflow_run_id, step_key, event_type, detail, created_at FROM workflow.workflow_events WHERE workflow_run_id = ':run' ORDER BY id) e;
\endif
