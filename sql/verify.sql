-- verify() finds broken invariants, recomputing from the rows themselves.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
-- run counters on the run row here; sql/counter_shards.sql breaks shards
SET workflow.counter_shards = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;

SELECT workflow.start_run('{"result_step": "c", "steps": [
    {"key": "a", "job_type": "v"}, {"key": "b", "job_type": "v"},
    {"key": "c", "job_type": "v.c", "depends_on": ["a", {"step": "b", "release": "on_terminal"}]},
    {"key": "x", "kind": "external", "depends_on": ["c"]}]}') AS run \gset
SELECT count(*) AS healthy FROM workflow.verify();
SELECT count(*) AS healthy_run FROM workflow.verify(:'run');
SELECT count(*) AS unknown_run FROM workflow.verify('00000000-0000-0000-0000-000000000001');

-- the engine's writes are not guarded against direct UPDATEs of run
-- counters or dependency counters: verify() is how such damage is found
BEGIN;
UPDATE workflow.workflow_runs SET steps_active = steps_active + 1 WHERE id = :'run';
SELECT step_key, problem, expected, actual FROM workflow.verify(:'run');
ROLLBACK;
BEGIN;
UPDATE workflow.workflow_steps SET dependency_count_pending = 1
 WHERE workflow_run_id = :'run' AND step_key = 'c';
SELECT step_key, problem, expected, actual FROM workflow.verify(:'run');
ROLLBACK;
BEGIN;
UPDATE workflow.workflow_runs SET status = 'SUCCEEDED', finished_at = now() WHERE id = :'run';
SELECT step_key, problem, expected, actual FROM workflow.verify(:'run') ORDER BY problem, step_key;
ROLLBACK;
BEGIN;
DELETE FROM workflow.workflow_step_dependencies
 WHERE dependent_step_id = (SELECT id FROM workflow.workflow_steps
                             WHERE workflow_run_id = :'run' AND step_key = 'x');
SELECT step_key, problem, expected, actual FROM workflow.verify(:'run') ORDER BY problem, step_key;
ROLLBACK;
BEGIN;
UPDATE workflow.workflow_steps SET job_id = NULL
 WHERE workflow_run_id = :'run' AND step_key = 'a';
SELECT step_key, problem, expected, actual FROM workflow.verify(:'run') ORDER BY problem, step_key;
ROLLBACK;
BEGIN;
INSERT INTO workflow.job_queue (job_type, workflow_run_id, workflow_step_id, generation)
SELECT 'v', workflow_run_id, id, 1 FROM workflow.workflow_steps
 WHERE workflow_run_id = :'run' AND step_key = 'b';
SELECT step_key, problem, expected, actual FROM workflow.verify(:'run') ORDER BY problem, step_key;
ROLLBACK;
SELECT count(*) AS healthy_again FROM workflow.verify();

-- a run driven to each end state stays healthy
SELECT id, lease_token FROM workflow.claim('w', ARRAY['v']) \gset
SELECT workflow.fail_job(:'id', :'lease_token', 'e', 'm', false);
SELECT count(*) AS after_failure FROM workflow.verify();
SELECT workflow.cancel_run(:'run');
SELECT count(*) AS after_cancel FROM workflow.verify();
SELECT status FROM workflow.workflow_runs WHERE id = :'run';
-- a job left live in a canceled run is found
BEGIN;
SET LOCAL session_replication_role = replica;
UPDATE workflow.job_queue SET status = 'QUEUED' WHERE workflow_run_id = :'run'
   AND status = 'CANCELED';
SELECT step_key, problem, expected, actual FROM workflow.verify(:'run') ORDER BY problem, step_key;
ROLLBACK;
