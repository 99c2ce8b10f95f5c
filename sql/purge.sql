-- purge(): finished runs (with their steps, edges and jobs) and finished
-- plain jobs go in bounded batches, oldest first; live and young rows stay;
-- every argument error; what a worker gets for a purged job.
\set VERBOSITY terse
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;

-- err() shows the SQLSTATE and stable code of an error; msg() the whole
-- message, for errors whose messages name no id.
CREATE FUNCTION pg_temp.err(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END $$;
CREATE FUNCTION pg_temp.msg(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END $$;

-- rows left in every table
CREATE FUNCTION pg_temp.counts()
RETURNS TABLE (runs bigint, steps bigint, edges bigint, step_jobs bigint,
               plain_jobs bigint)
LANGUAGE sql AS $$
    SELECT (SELECT count(*) FROM workflow.workflow_runs),
           (SELECT count(*) FROM workflow.workflow_steps),
           (SELECT count(*) FROM workflow.workflow_step_dependencies),
           (SELECT count(*) FROM workflow.job_queue WHERE workflow_run_id IS NOT NULL),
           (SELECT count(*) FROM workflow.job_queue WHERE workflow_run_id IS NULL)
$$;

-- the runs left, by name, with their row counts
CREATE FUNCTION pg_temp.runs_left()
RETURNS TABLE (name text, status workflow.run_status, steps bigint,
               edges bigint, jobs bigint)
LANGUAGE sql AS $$
    SELECT r.name, r.status,
           (SELECT count(*) FROM workflow.workflow_steps s WHERE s.workflow_run_id = r.id),
           (SELECT count(*) FROM workflow.workflow_step_dependencies e WHERE e.workflow_run_id = r.id),
           (SELECT count(*) FROM workflow.job_queue j WHERE j.workflow_run_id = r.id)
      FROM workflow.workflow_runs r ORDER BY r.name
$$;

-- the plain jobs left, by job_type
CREATE FUNCTION pg_temp.plain_left() RETURNS TABLE (job_type text, status workflow.job_status)
LANGUAGE sql AS $$
    SELECT j.job_type, j.status FROM workflow.job_queue j
     WHERE j.workflow_run_id IS NULL ORDER BY j.job_type
$$;

-- Ageing moves finished_at into the past.  No status changes, so the
-- guards let this direct write through.
CREATE FUNCTION pg_temp.age_run(run_name text, days int) RETURNS void LANGUAGE sql AS $$
    UPDATE workflow.workflow_runs SET finished_at = finished_at - make_interval(days => days)
     WHERE name = run_name
$$;
CREATE FUNCTION pg_temp.age_job(type text, days int) RETURNS void LANGUAGE sql AS $$
    UPDATE workflow.job_queue SET finished_at = finished_at - make_interval(days => days)
     WHERE job_type = type AND workflow_run_id IS NULL
$$;

-- arguments: every error, with its message
SELECT pg_temp.msg($$SELECT workflow.purge(NULL, 10)$$);
SELECT pg_temp.msg($$SELECT workflow.purge('1 day', NULL)$$);
SELECT pg_temp.msg($$SELECT workflow.purge(NULL, NULL)$$);
SELECT pg_temp.msg($$SELECT workflow.purge('-1 second', 10)$$);
SELECT pg_temp.msg($$SELECT workflow.purge('1 day -25 hours', 10)$$);
SELECT pg_temp.msg($$SELECT workflow.purge('-1 month 29 days', 10)$$);
SELECT pg_temp.msg($$SELECT workflow.purge('1 day', 0)$$);
SELECT pg_temp.msg($$SELECT workflow.purge('1 day', -1)$$);
SELECT pg_temp.msg($$SELECT workflow.purge('1 day', 100001)$$);
SELECT pg_temp.msg($$SELECT workflow.purge('100000000 years', 10)$$);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.msg($$SELECT workflow.purge('1 day', 10)$$);
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT pg_temp.msg($$SELECT workflow.purge('1 day', 10)$$);
ROLLBACK;
-- the bounds themselves are accepted; an empty database purges nothing
SELECT workflow.purge('0 seconds', 1) AS purged;
SELECT workflow.purge('1 month -30 days', 100000) AS purged;

-- Finished runs of several shapes, all to be aged.
-- "a job": one job step, SUCCEEDED.
SELECT workflow.start_run('{"name": "a job", "result_step": "j",
    "steps": [{"key": "j", "job_type": "p.a"}]}') AS run_a \gset
SELECT * FROM workflow.claim('w', ARRAY['p.a']) \gset a_
SELECT workflow.complete_job(:'a_id', :'a_lease_token', '{"ok": true}');
-- "b external": a job step and an external step behind it, SUCCEEDED.
SELECT workflow.start_run('{"name": "b external", "steps": [
    {"key": "j", "job_type": "p.b"},
    {"key": "x", "kind": "external", "depends_on": ["j"]}]}') AS run_b \gset
SELECT * FROM workflow.claim('w', ARRAY['p.b']) \gset b_
SELECT workflow.complete_job(:'b_id', :'b_lease_token');
SELECT status FROM workflow.complete_external_step(:'run_b', 'x', 'SUCCEEDED');
-- "c edges": a diamond with an on_terminal edge; the root fails, so one
-- branch is canceled for an unsatisfied dependency and the run ends
-- COMPLETED_WITH_ERRORS.
SELECT workflow.start_run('{"name": "c edges", "steps": [
    {"key": "root", "job_type": "p.c.root", "max_attempts": 1},
    {"key": "left", "kind": "external", "depends_on": ["root"]},
    {"key": "right", "job_type": "p.c.right",
     "depends_on": [{"step": "root", "release": "on_terminal"}]},
    {"key": "join", "job_type": "p.c.join",
     "depends_on": [{"step": "left", "release": "on_terminal"},
                    {"step": "right", "release": "on_terminal"}]}]}') AS run_c \gset
SELECT * FROM workflow.claim('w', ARRAY['p.c.root']) \gset c_
SELECT workflow.fail_job(:'c_id', :'c_lease_token', 'boom', 'it broke');
SELECT * FROM workflow.claim('w', ARRAY['p.c.right']) \gset cr_
SELECT workflow.complete_job(:'cr_id', :'cr_lease_token');
SELECT * FROM workflow.claim('w', ARRAY['p.c.join']) \gset cj_
SELECT workflow.complete_job(:'cj_id', :'cj_lease_token');
-- "d canceled": canceled while its job was running and another step blocked.
SELECT workflow.start_run('{"name": "d canceled", "steps": [
    {"key": "j", "job_type": "p.d"},
    {"key": "k", "job_type": "p.d.k", "depends_on": ["j"]},
    {"key": "x", "kind": "external"}]}') AS run_d \gset
SELECT * FROM workflow.claim('w', ARRAY['p.d']) \gset d_
SELECT workflow.cancel_run(:'run_d', 'not needed');

-- Runs that stay: a young finished run and live ones.
SELECT workflow.start_run('{"name": "e young", "steps": [
    {"key": "x", "kind": "external"}]}') AS run_e \gset
SELECT status FROM workflow.complete_external_step(:'run_e', 'x', 'SUCCEEDED');
SELECT workflow.start_run('{"name": "f live queued", "steps": [
    {"key": "j", "job_type": "p.f"},
    {"key": "k", "job_type": "p.f.k", "depends_on": ["j"]}]}') AS run_f \gset
SELECT workflow.start_run('{"name": "g live running", "steps": [
    {"key": "j", "job_type": "p.g"}]}') AS run_g \gset
SELECT * FROM workflow.claim('w', ARRAY['p.g']) \gset g_
SELECT workflow.start_run('{"name": "h live waiting", "steps": [
    {"key": "j", "job_type": "p.h"},
    {"key": "x", "kind": "external", "depends_on": ["j"]}]}') AS run_h \gset
SELECT * FROM workflow.claim('w', ARRAY['p.h']) \gset h_
SELECT workflow.complete_job(:'h_id', :'h_lease_token');

-- Plain jobs: finished ones to be aged, a young finished one, live ones.
SELECT workflow.enqueue('q.succeeded') AS qs \gset
SELECT * FROM workflow.claim('w', ARRAY['q.succeeded']) \gset qs_
SELECT workflow.complete_job(:'qs_id', :'qs_lease_token');
SELECT workflow.enqueue('q.failed', max_attempts => 1) AS qf \gset
SELECT * FROM workflow.claim('w', ARRAY['q.failed']) \gset qf_
SELECT workflow.fail_job(:'qf_id', :'qf_lease_token', 'boom', 'it broke');
SELECT workflow.enqueue('q.canceled') AS qc \gset
SELECT workflow.cancel_job(:'qc', 'not needed');
SELECT workflow.enqueue('q.young') AS qy \gset
SELECT * FROM workflow.claim('w', ARRAY['q.young']) \gset qy_
SELECT workflow.complete_job(:'qy_id', :'qy_lease_token');
SELECT workflow.enqueue('q.queued') AS qq \gset
SELECT workflow.enqueue('q.running') AS qr \gset
SELECT * FROM workflow.claim('w', ARRAY['q.running']) \gset qr_
-- queued for later: due in the future, but not finished
SELECT workflow.enqueue('q.later', run_at => now() + interval '1 year') AS ql \gset

SELECT pg_temp.age_run('a job', 10);
SELECT pg_temp.age_run('b external', 10);
SELECT pg_temp.age_run('c edges', 10);
SELECT pg_temp.age_run('d canceled', 10);
SELECT pg_temp.age_job('q.succeeded', 10);
SELECT pg_temp.age_job('q.failed', 10);
SELECT pg_temp.age_job('q.canceled', 10);
-- a finished step's or job's own finished_at does not matter, only the run's
UPDATE workflow.job_queue SET finished_at = finished_at - interval '10 days'
 WHERE workflow_run_id = :'run_e';
UPDATE workflow.workflow_steps SET finished_at = finished_at - interval '10 days'
 WHERE workflow_run_id = :'run_e';

SELECT * FROM pg_temp.runs_left();
SELECT * FROM pg_temp.plain_left();
SELECT * FROM pg_temp.counts();

-- too young for an older_than of 11 days: nothing goes
SELECT workflow.purge('11 days', 100) AS purged;
SELECT * FROM pg_temp.counts();

-- a purge that is rolled back leaves everything in place; it gave back
-- each run's release lock once the run was dealt with
BEGIN;
SELECT workflow.purge('1 day', 100) AS purged;
SELECT * FROM pg_temp.counts();
SELECT count(*) AS release_locks_held FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid();
ROLLBACK;
SELECT * FROM pg_temp.counts();

-- before the purge, the worker of the canceled run's job gets job.canceled
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'d_id', :'d_lease_token'));

-- the four old runs and the three old plain jobs go, with every row of
-- those runs; the young and the live stay
SELECT workflow.purge('1 day', 100) AS purged;
SELECT * FROM pg_temp.runs_left();
SELECT * FROM pg_temp.plain_left();
SELECT * FROM pg_temp.counts();
SELECT count(*) AS rows_of_purged_runs
  FROM (SELECT id FROM workflow.workflow_runs
         WHERE id IN (:'run_a', :'run_b', :'run_c', :'run_d')
        UNION ALL
        SELECT id FROM workflow.workflow_steps
         WHERE workflow_run_id IN (:'run_a', :'run_b', :'run_c', :'run_d')
        UNION ALL
        SELECT dependent_step_id FROM workflow.workflow_step_dependencies
         WHERE workflow_run_id IN (:'run_a', :'run_b', :'run_c', :'run_d')
        UNION ALL
        SELECT id FROM workflow.job_queue
         WHERE workflow_run_id IN (:'run_a', :'run_b', :'run_c', :'run_d')) x;
SELECT workflow.purge('1 day', 100) AS purged;

-- A worker reporting on a purged job gets job.not_found, like for any
-- unknown id: a repeat of its completion, a late failure, a heartbeat, the
-- worker of the canceled run's job; calls naming a purged run get
-- workflow.run_not_found.
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L, %L)', :'a_id', :'a_lease_token', '{"ok": true}'));
SELECT pg_temp.err(format('SELECT workflow.fail_job(%L, %L, %L, %L)', :'c_id', :'c_lease_token', 'boom', 'it broke'));
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'d_id', :'d_lease_token'));
SELECT pg_temp.err(format('SELECT workflow.heartbeat(%L, %L)', :'d_id', :'d_lease_token'));
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'qs_id', :'qs_lease_token'));
SELECT pg_temp.err(format('SELECT workflow.fail_job(%L, %L, %L, %L)', :'qf_id', :'qf_lease_token', 'boom', 'it broke'));
SELECT pg_temp.err(format('SELECT workflow.cancel_job(%L)', :'qc'));
SELECT pg_temp.err(format('SELECT workflow.cancel_run(%L)', :'run_d'));
SELECT pg_temp.err(format('SELECT workflow.complete_external_step(%L, %L, %L)', :'run_b', 'x', 'SUCCEEDED'));
-- the live ones are untouched and still work
SELECT workflow.complete_job(:'g_id', :'g_lease_token');
SELECT workflow.complete_job(:'qr_id', :'qr_lease_token');
SELECT status FROM workflow.complete_external_step(:'run_h', 'x', 'SUCCEEDED');
SELECT * FROM pg_temp.runs_left();
SELECT * FROM pg_temp.plain_left();

-- batch bounds: 5 old runs, batch 2 -> 2, 2, 1, 0
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;
SELECT count(workflow.start_run(jsonb_build_object('name', 'r' || i,
           'steps', jsonb_build_array(jsonb_build_object('key', 'x', 'kind', 'external')))))
  AS started FROM generate_series(1, 5) i;
SELECT count(*) AS finished
  FROM workflow.workflow_runs r,
       LATERAL workflow.complete_external_step(r.id, 'x', 'SUCCEEDED') s;
SELECT pg_temp.age_run('r' || i, 10) FROM generate_series(1, 5) i;
SELECT workflow.purge('1 day', 2) AS purged;
SELECT workflow.purge('1 day', 2) AS purged;
SELECT workflow.purge('1 day', 2) AS purged;
SELECT workflow.purge('1 day', 2) AS purged;
SELECT * FROM pg_temp.counts();

-- batch bounds: 3 old plain jobs, batch 2 -> 2, 1, 0
SELECT count(workflow.cancel_job(workflow.enqueue('b' || i))) FROM generate_series(1, 3) i;
SELECT pg_temp.age_job('b' || i, 10) FROM generate_series(1, 3) i;
SELECT workflow.purge('1 day', 2) AS purged;
SELECT workflow.purge('1 day', 2) AS purged;
SELECT workflow.purge('1 day', 2) AS purged;
SELECT * FROM pg_temp.counts();

-- both kinds: 3 old runs and 1 old plain job, batch 2 -> 2 + 1, 1 + 0, 0
SELECT count(workflow.start_run(jsonb_build_object('name', 'm' || i,
           'steps', jsonb_build_array(jsonb_build_object('key', 'x', 'kind', 'external')))))
  AS started FROM generate_series(1, 3) i;
SELECT count(*) AS finished
  FROM workflow.workflow_runs r,
       LATERAL workflow.complete_external_step(r.id, 'x', 'SUCCEEDED') s;
SELECT pg_temp.age_run('m' || i, 10) FROM generate_series(1, 3) i;
SELECT workflow.cancel_job(workflow.enqueue('m.plain'));
SELECT pg_temp.age_job('m.plain', 10);
SELECT workflow.purge('1 day', 2) AS purged;
SELECT workflow.purge('1 day', 2) AS purged;
SELECT workflow.purge('1 day', 2) AS purged;
SELECT * FROM pg_temp.counts();

-- oldest first: runs and plain jobs aged out of creation order go by
-- finished_at
SELECT count(workflow.start_run(jsonb_build_object('name', 'o' || i,
           'steps', jsonb_build_array(jsonb_build_object('key', 'x', 'kind', 'external')))))
  AS started FROM generate_series(1, 3) i;
SELECT count(*) AS finished
  FROM workflow.workflow_runs r,
       LATERAL workflow.complete_external_step(r.id, 'x', 'SUCCEEDED') s;
SELECT pg_temp.age_run('o1', 20), pg_temp.age_run('o2', 30), pg_temp.age_run('o3', 10);
SELECT count(workflow.cancel_job(workflow.enqueue('o.plain' || i))) FROM generate_series(1, 3) i;
SELECT pg_temp.age_job('o.plain1', 10), pg_temp.age_job('o.plain2', 30),
       pg_temp.age_job('o.plain3', 20);
SELECT workflow.purge('1 day', 1) AS purged;
SELECT string_agg(name, ',' ORDER BY name) AS runs_left FROM workflow.workflow_runs;
SELECT string_agg(job_type, ',' ORDER BY job_type) AS plain_left FROM workflow.job_queue;
SELECT workflow.purge('1 day', 1) AS purged;
SELECT string_agg(name, ',' ORDER BY name) AS runs_left FROM workflow.workflow_runs;
SELECT string_agg(job_type, ',' ORDER BY job_type) AS plain_left FROM workflow.job_queue;
-- older_than is honored: o3 and o.plain1 finished 10 days ago
SELECT workflow.purge('11 days', 1) AS purged;
SELECT workflow.purge('9 days', 1) AS purged;
SELECT * FROM pg_temp.counts();

-- every invariant holds at the end
SELECT * FROM workflow.verify();
