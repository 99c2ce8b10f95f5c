-- bench/history_run_history.sql: one read of a run's whole history through
-- workflow.run_history, every row streamed through the executor: counted
-- (copy = 0) or written out as text by COPY to /dev/null (copy = 1; the
-- bench connects as a superuser).  Variables: run (a run id), copy.
\if :copy
COPY (SELECT * FROM workflow.run_history(':run')) TO '/dev/null';
\else
SELECT count(*) FROM workflow.run_history(':run');
\endif
