-- bench/plain_insert.sql: the baseline for start_run.  One INSERT ... SELECT
-- statement writes the rows start_run writes for a "pairs" definition of :n
-- steps (the run with its definition, n steps, n/2 edges, n/2 root jobs)
-- into tables of the same shape (bench.p_*: same columns, defaults, indexes
-- and constraints, no triggers).  Variables: def, n.
WITH d AS (SELECT def FROM bench.defs WHERE name = ':def'),
r AS (INSERT INTO bench.p_runs (id, name, definition, status, steps_total, steps_active, steps_waiting, steps_blocked)
      SELECT workflow.uuid_v7(), d.def ->> 'name', d.def, 'RUNNING', :n, :n / 2, 0, :n / 2 FROM d RETURNING id),
g AS MATERIALIZED (SELECT i, workflow.uuid_v7() AS sid, CASE WHEN i % 2 = 0 THEN workflow.uuid_v7() END AS jid
      FROM generate_series(0, :n - 1) i),
s AS (INSERT INTO bench.p_steps (id, workflow_run_id, step_key, execution_kind, job_type, payload, priority, max_attempts, timeout_seconds, status, job_id, released_at, dependency_count_total, dependency_count_pending)
      SELECT g.sid, r.id, 's' || g.i, 'JOB', 'bench.plain', '{}', 0, 3, 300,
             CASE WHEN g.jid IS NULL THEN 'BLOCKED' ELSE 'ENQUEUED' END::workflow.step_status, g.jid,
             CASE WHEN g.jid IS NULL THEN NULL ELSE statement_timestamp() END, g.i % 2, g.i % 2
        FROM g, r),
e AS (INSERT INTO bench.p_deps (workflow_run_id, prerequisite_step_id, dependent_step_id, release_mode)
      SELECT r.id, a.sid, b.sid, 'ON_SUCCESS' FROM r, g a JOIN g b ON b.i = a.i + 1 WHERE a.jid IS NOT NULL)
INSERT INTO bench.p_jobs (id, job_type, payload, priority, max_attempts, timeout_seconds, run_at, workflow_run_id, workflow_step_id, generation)
SELECT g.jid, 'bench.plain', '{}', 0, 3, 300, statement_timestamp(), r.id, g.sid, 0 FROM g, r WHERE g.jid IS NOT NULL;
