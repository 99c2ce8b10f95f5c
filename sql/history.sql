-- The event history: every event type where it belongs, with its detail,
-- in order; workflow.history = runs and off; purge; the guards; run_history
-- and its errors; verify() against a tampered history.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;

-- h(run) shows a run's history without ids, times and role names: "job"
-- where the detail names the step's new job, "me" where it names the
-- calling role
CREATE FUNCTION pg_temp.h(run uuid)
RETURNS TABLE (step_key text, event_type text, detail jsonb, names text)
LANGUAGE sql AS $$
    SELECT step_key, event_type, detail - '{job_id,run_at,role}'::text[],
           CASE WHEN detail ? 'job_id' THEN 'job'
                WHEN detail ->> 'role' = current_user THEN 'me' END
      FROM workflow.run_history(run)
$$;
-- err(sql) runs a statement and shows its error's code and SQLSTATE only
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN split_part(SQLERRM, ':', 1) || ' (' || SQLSTATE || ')';
END
$$;
-- take(type, worker) claims one job of a type
CREATE FUNCTION pg_temp.take(jt text, worker text DEFAULT 'w1')
RETURNS TABLE (id uuid, lease_token uuid)
LANGUAGE sql AS $$
    SELECT id, lease_token FROM workflow.claim(worker, ARRAY[jt])
$$;

-- 1. A job step's life: released, started, retried, started, returned by
-- release_job, started again, its lease expired, started, succeeded; its
-- dependents released (a job step and an external one), the external one
-- completed from outside, the run's status changes.
SELECT workflow.start_run('{"steps": [
  {"key": "a", "job_type": "h.a", "max_attempts": 5},
  {"key": "b", "job_type": "h.b", "depends_on": ["a"]},
  {"key": "x", "kind": "external", "depends_on": ["a"]}]}') AS r1 \gset
SELECT * FROM pg_temp.take('h.a') \gset
SELECT workflow.fail_job(:'id', :'lease_token', 'h.flaky', 'try again', true);
SELECT * FROM pg_temp.take('h.a') \gset
SELECT workflow.release_job(:'id', :'lease_token');
SELECT * FROM pg_temp.take('h.a', 'w2') \gset
UPDATE workflow.job_queue SET leased_until = now() - interval '1 second' WHERE id = :'id';
SELECT workflow.reap_expired();
UPDATE workflow.job_queue SET run_at = now() WHERE id = :'id';
SELECT * FROM pg_temp.take('h.a', 'w3') \gset
SELECT workflow.complete_job(:'id', :'lease_token', '{"a": 1}');
SELECT * FROM pg_temp.take('h.b') \gset
SELECT workflow.complete_job(:'id', :'lease_token', '{"b": 1}');
SELECT (workflow.complete_external_step(:'r1', 'x', 'SUCCEEDED', '{"x": 1}')).status;
SELECT * FROM pg_temp.h(:'r1');
-- ids ascend, times never go back
SELECT bool_and(id > lag_id) AS ids_ascend, bool_and(created_at >= lag_at) AS times_ascend
  FROM (SELECT id, created_at, lag(id) OVER (ORDER BY id) AS lag_id,
               lag(created_at) OVER (ORDER BY id) AS lag_at
          FROM workflow.run_history(:'r1')) e;
SELECT * FROM workflow.verify(:'r1');

-- 2. Failure and cancellation: a failed step cancels its ON_SUCCESS
-- dependent (cascaded), an ON_TERMINAL dependent is released; cancel_job
-- cancels a step's job; an external step completed as FAILED; a job whose
-- last attempt's lease expired fails.
SELECT workflow.start_run('{"steps": [
  {"key": "a", "job_type": "h.fail", "max_attempts": 1},
  {"key": "c", "job_type": "h.never", "depends_on": ["a"]},
  {"key": "d", "job_type": "h.never", "depends_on": ["c"]},
  {"key": "t", "job_type": "h.cancel", "depends_on": [{"step": "a", "release": "on_terminal"}]},
  {"key": "x", "kind": "external"},
  {"key": "e", "job_type": "h.expire", "max_attempts": 1}]}') AS r2 \gset
SELECT * FROM pg_temp.take('h.fail') \gset
SELECT workflow.fail_job(:'id', :'lease_token', 'h.broken', 'it broke', true);
SELECT id AS t_job FROM workflow.job_queue WHERE job_type = 'h.cancel' \gset
SELECT workflow.cancel_job(:'t_job', 'not needed');
SELECT (workflow.complete_external_step(:'r2', 'x', 'FAILED', NULL, 'rejected', 'h.no', 'said no')).status;
SELECT * FROM pg_temp.take('h.expire') \gset
UPDATE workflow.job_queue SET leased_until = now() - interval '1 second' WHERE id = :'id';
SELECT workflow.reap_expired();
SELECT * FROM pg_temp.h(:'r2');
SELECT * FROM workflow.verify(:'r2');

-- 3. cancel_run: every unfinished step canceled with the reason, a running
-- job's step included; the job's own cancellation adds nothing.  A step
-- whose only attempt was given back (release_job) used none.
SELECT workflow.start_run('{"steps": [
  {"key": "a", "job_type": "h.run"},
  {"key": "b", "job_type": "h.run", "depends_on": ["a"]},
  {"key": "r", "job_type": "h.ret"},
  {"key": "x", "kind": "external"}]}') AS r3 \gset
SELECT * FROM pg_temp.take('h.ret') \gset
SELECT workflow.release_job(:'id', :'lease_token');
SELECT * FROM pg_temp.take('h.run') \gset
SELECT workflow.cancel_run(:'r3', 'operator stop');
SELECT * FROM pg_temp.h(:'r3');
SELECT * FROM workflow.verify(:'r3');
-- the worker that held a's job learns it was canceled; nothing is added
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L, %L)',
                          :'id', :'lease_token', '{}')) AS late_completion;
SELECT count(*) AS events FROM workflow.run_history(:'r3');

-- 4. history = runs: run events and operator actions (cancel_job) only;
-- every step change without its event is marked, so verify() is quiet.
SET workflow.history = runs;
SELECT workflow.start_run('{"steps": [
  {"key": "a", "job_type": "h.runs"},
  {"key": "b", "job_type": "h.runs2", "depends_on": ["a"]}]}') AS r4 \gset
SELECT * FROM pg_temp.take('h.runs') \gset
SELECT workflow.complete_job(:'id', :'lease_token', '{}');
SELECT id AS b_job FROM workflow.job_queue WHERE job_type = 'h.runs2' \gset
SELECT workflow.cancel_job(:'b_job', 'enough');
SELECT * FROM pg_temp.h(:'r4');
SELECT step_key, history_gap FROM workflow.workflow_steps
 WHERE workflow_run_id = :'r4' ORDER BY step_key;
SELECT history_gap FROM workflow.workflow_runs WHERE id = :'r4';
SELECT * FROM workflow.verify(:'r4');

-- 5. history = off: nothing at all, run and steps marked.
SET workflow.history = off;
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "h.off"},
  {"key": "x", "kind": "external"}]}') AS r5 \gset
SELECT * FROM pg_temp.take('h.off') \gset
SELECT workflow.complete_job(:'id', :'lease_token', '{}');
SELECT (workflow.complete_external_step(:'r5', 'x', 'SUCCEEDED', '{}')).status;
SELECT count(*) AS events FROM workflow.run_history(:'r5');
SELECT step_key, history_gap FROM workflow.workflow_steps
 WHERE workflow_run_id = :'r5' ORDER BY step_key;
SELECT status, history_gap FROM workflow.workflow_runs WHERE id = :'r5';
SELECT * FROM workflow.verify(:'r5');
-- turned back on mid-run, a run started under off stays unchecked
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "h.mid"},
  {"key": "b", "job_type": "h.mid", "depends_on": ["a"]}]}') AS r6 \gset
RESET workflow.history;
SELECT * FROM pg_temp.take('h.mid') \gset
SELECT workflow.complete_job(:'id', :'lease_token', '{}');
SELECT * FROM pg_temp.take('h.mid') \gset
SELECT workflow.complete_job(:'id', :'lease_token', '{}');
SELECT * FROM pg_temp.h(:'r6');
SELECT step_key, history_gap FROM workflow.workflow_steps
 WHERE workflow_run_id = :'r6' ORDER BY step_key;
SELECT * FROM workflow.verify(:'r6');

-- 6. verify() finds a history that disagrees with the steps: an event
-- added, an event taken away (past the guard, with triggers off).
INSERT INTO workflow.workflow_events (workflow_run_id, step_key, event_type, detail)
VALUES (:'r1', 'b', 'step_failed', '{"attempt": 1}');
INSERT INTO workflow.workflow_events (workflow_run_id, step_key, event_type, detail)
VALUES (:'r1', 'b', 'step_started', '{"attempt": 2}');
INSERT INTO workflow.workflow_events (workflow_run_id, step_key, event_type, detail)
VALUES (:'r1', 'b', 'step_released', '{}');
INSERT INTO workflow.workflow_events (workflow_run_id, step_key, event_type, detail)
VALUES (:'r3', NULL, 'run_status_changed', '{"from": "RUNNING", "to": "SUCCEEDED"}');
SET session_replication_role = replica;
DELETE FROM workflow.workflow_events
 WHERE workflow_run_id = :'r1' AND event_type = 'run_status_changed'
   AND detail ->> 'to' = 'SUCCEEDED';
DELETE FROM workflow.workflow_events
 WHERE workflow_run_id = :'r2' AND step_key = 'c';
RESET session_replication_role;
SELECT step_key, problem, expected, actual FROM workflow.verify()
 ORDER BY workflow_run_id, step_key, problem;

-- 7. The guards: no UPDATE, DELETE or TRUNCATE but the engine's.
UPDATE workflow.workflow_events SET detail = '{}' WHERE workflow_run_id = :'r1';
DELETE FROM workflow.workflow_events WHERE workflow_run_id = :'r1';
TRUNCATE workflow.workflow_events;
SELECT count(*) > 0 AS still_there FROM workflow.workflow_events WHERE workflow_run_id = :'r1';
-- a role with no table right gets 42501 first
CREATE ROLE regress_history_client;
GRANT workflow_client TO regress_history_client;
SET ROLE regress_history_client;
\set VERBOSITY default
DELETE FROM workflow.workflow_events;
-- but reads the history through run_history
SELECT count(*) > 0 AS reads FROM workflow.run_history(:'r1');
-- run_history's errors
SELECT * FROM workflow.run_history(NULL);
SELECT * FROM workflow.run_history('00000000-0000-7000-8000-000000000000');
\set VERBOSITY terse
RESET ROLE;
-- another organization's run is as missing as an unknown one
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "h.org"}]}',
                          '00000000-0000-0000-0000-00000000000a') AS r7 \gset
SELECT count(*) AS own_org FROM workflow.run_history(:'r7', '00000000-0000-0000-0000-00000000000a');
SELECT pg_temp.err(format('SELECT * FROM workflow.run_history(%L, %L)', :'r7',
                          '00000000-0000-0000-0000-00000000000b')) AS other_org;
SELECT workflow.grant_organization('regress_history_client', '00000000-0000-0000-0000-00000000000b');
SET ROLE regress_history_client;
SELECT pg_temp.err(format('SELECT * FROM workflow.run_history(%L)', :'r7')) AS tenant_of_b;
RESET ROLE;
SELECT workflow.revoke_organization('regress_history_client', '00000000-0000-0000-0000-00000000000b');
DROP ROLE regress_history_client;

-- 8. purge takes a finished run's history with it, and only a finished
-- run's.
SELECT workflow.cancel_run(:'r7');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "h.live"}]}') AS r8 \gset
SELECT count(DISTINCT workflow_run_id) AS runs_with_history FROM workflow.workflow_events;
SELECT workflow.purge('0 seconds', 100);
SELECT count(*) AS events_left, count(DISTINCT workflow_run_id) AS runs_left
  FROM workflow.workflow_events;
SELECT e.workflow_run_id = r.id AS live_run_kept, r.status
  FROM workflow.workflow_events e JOIN workflow.workflow_runs r ON r.id = e.workflow_run_id
 GROUP BY 1, 2;
