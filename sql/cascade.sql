-- Terminal processing, the release cascade, transitive cancellation and
-- run status, driven through the queue API and through direct UPDATEs.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
-- The engine's statements that join a list of moves to their rows then
-- run as nested loops in the list's order, in which case 15 below can tell
-- a right outcome from a wrong one (a hash join happened to hide it).
SET enable_hashjoin = off;
SET enable_mergejoin = off;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;

-- steps(run) shows a run's steps without ids
CREATE FUNCTION pg_temp.steps(run uuid)
RETURNS TABLE (step_key text, status workflow.step_status, pending int,
               unsatisfied int, reason text, error_code text, output jsonb,
               has_job boolean)
LANGUAGE sql AS $$
    SELECT step_key, status, dependency_count_pending,
           dependency_count_unsatisfied, status_reason, last_error_code,
           output, job_id IS NOT NULL
      FROM workflow.workflow_steps WHERE workflow_run_id = run ORDER BY step_key
$$;
CREATE FUNCTION pg_temp.run(run uuid)
RETURNS TABLE (status workflow.run_status, active int, waiting int,
               blocked int, succeeded int, failed int, canceled int,
               result jsonb, finished boolean)
LANGUAGE sql AS $$
    SELECT r.status, c.steps_active, c.steps_waiting, c.steps_blocked,
           c.steps_succeeded, c.steps_failed, c.steps_canceled, r.result,
           r.finished_at IS NOT NULL
      FROM workflow.workflow_runs r, workflow.run_counters(r.id) c WHERE r.id = run
$$;
-- work(run, key, outcome) claims the step's job and finishes it
CREATE FUNCTION pg_temp.work(run uuid, key text, outcome text,
                             out_json jsonb DEFAULT NULL)
RETURNS workflow.job_status LANGUAGE plpgsql AS $$
DECLARE
    j workflow.job_queue;
BEGIN
    SELECT * INTO STRICT j FROM workflow.claim('w', ARRAY[(
        SELECT job_type FROM workflow.workflow_steps
         WHERE workflow_run_id = run AND step_key = key)]);
    IF (SELECT step_key FROM workflow.workflow_steps WHERE id = j.workflow_step_id) <> key THEN
        RAISE EXCEPTION 'claimed the wrong step';
    END IF;
    IF outcome = 'ok' THEN
        PERFORM workflow.complete_job(j.id, j.lease_token, out_json);
    ELSIF outcome = 'retry' THEN
        PERFORM workflow.fail_job(j.id, j.lease_token, 'flaky', 'try again', true);
    ELSIF outcome = 'release' THEN
        PERFORM workflow.release_job(j.id, j.lease_token);
    ELSE
        PERFORM workflow.fail_job(j.id, j.lease_token, 'broken', 'gave up', false);
    END IF;
    RETURN (SELECT status FROM workflow.job_queue WHERE id = j.id);
END $$;

-- 1. fan-out / fan-in with an external step, ending SUCCEEDED with a result
SELECT workflow.start_run('{"result_step": "join", "steps": [
    {"key": "root", "job_type": "t.root"},
    {"key": "left", "job_type": "t.left", "depends_on": ["root"]},
    {"key": "right", "job_type": "t.right", "depends_on": ["root"]},
    {"key": "approve", "kind": "external", "depends_on": ["root"]},
    {"key": "join", "job_type": "t.join", "depends_on": ["left", "right", "approve"]}]}') AS r1 \gset
SELECT * FROM pg_temp.run(:'r1');
-- claim moves the step to RUNNING, a retry back to ENQUEUED, a release too
SELECT * FROM workflow.claim('w', ARRAY['t.root']) \gset c_
SELECT status, started_at IS NOT NULL AS started FROM workflow.workflow_steps WHERE id = :'c_workflow_step_id';
SELECT workflow.fail_job(:'c_id', :'c_lease_token', 'flaky', 'try again');
SELECT status, last_error_code, started_at IS NOT NULL AS started_kept
  FROM workflow.workflow_steps WHERE id = :'c_workflow_step_id';
SELECT * FROM pg_temp.run(:'r1');
SELECT pg_temp.work(:'r1', 'root', 'release');
SELECT status FROM workflow.workflow_steps WHERE id = :'c_workflow_step_id';
SELECT attempt FROM workflow.job_queue WHERE id = :'c_id';
SELECT pg_temp.work(:'r1', 'root', 'ok', '{"n": 1}');
SELECT * FROM pg_temp.steps(:'r1');
SELECT * FROM pg_temp.run(:'r1');
SELECT pg_temp.work(:'r1', 'left', 'ok');
SELECT pg_temp.work(:'r1', 'right', 'ok');
-- only the external step is left: the run waits for the outside world
SELECT * FROM pg_temp.run(:'r1');
SELECT (workflow.complete_external_step(:'r1', 'approve', 'SUCCEEDED', '{"by": "ann"}')).status;
SELECT * FROM pg_temp.run(:'r1');
SELECT pg_temp.work(:'r1', 'join', 'ok', '{"artifact": "a.tar"}');
SELECT * FROM pg_temp.steps(:'r1');
SELECT * FROM pg_temp.run(:'r1');
SELECT count(*) AS jobs, count(DISTINCT workflow_step_id) AS steps_with_jobs
  FROM workflow.job_queue WHERE workflow_run_id = :'r1';

-- 2. a failure cancels ON_SUCCESS dependents transitively; ON_TERMINAL
--    dependents still run; the run ends COMPLETED_WITH_ERRORS
SELECT workflow.start_run('{"result_step": "deploy", "steps": [
    {"key": "build", "job_type": "t2.build", "max_attempts": 2},
    {"key": "test", "job_type": "t2.test", "depends_on": ["build"]},
    {"key": "deploy", "job_type": "t2.deploy", "depends_on": ["test"]},
    {"key": "notify", "kind": "external", "depends_on": ["deploy"]},
    {"key": "cleanup", "job_type": "t2.cleanup",
     "depends_on": [{"step": "build", "release": "on_terminal"}]},
    {"key": "report", "job_type": "t2.report",
     "depends_on": [{"step": "deploy", "release": "on_terminal"}, "cleanup"]}]}') AS r2 \gset
SELECT pg_temp.work(:'r2', 'build', 'retry');
SELECT pg_temp.work(:'r2', 'build', 'retry');
SELECT * FROM pg_temp.steps(:'r2');
SELECT * FROM pg_temp.run(:'r2');
SELECT pg_temp.work(:'r2', 'cleanup', 'ok');
SELECT * FROM pg_temp.steps(:'r2');
SELECT pg_temp.work(:'r2', 'report', 'ok');
SELECT * FROM pg_temp.run(:'r2');

-- 3. cancel_job of a step's job cancels the step and cascades like a failure
SELECT workflow.start_run('{"steps": [
    {"key": "a", "job_type": "t3.a"},
    {"key": "b", "job_type": "t3.b", "depends_on": ["a"]}]}') AS r3 \gset
SELECT workflow.cancel_job(job_id, 'operator said so')
  FROM workflow.workflow_steps WHERE workflow_run_id = :'r3' AND step_key = 'a';
SELECT * FROM pg_temp.steps(:'r3');
SELECT * FROM pg_temp.run(:'r3');

-- 4. a direct UPDATE of job_queue drives the same machinery
SELECT workflow.start_run('{"steps": [
    {"key": "a", "job_type": "t4.a"},
    {"key": "b", "job_type": "t4.a"},
    {"key": "c", "job_type": "t4.c", "depends_on": ["a", "b"]}]}') AS r4 \gset
UPDATE workflow.job_queue SET status = 'RUNNING'
 WHERE workflow_run_id = :'r4' AND job_type = 't4.a';
SELECT * FROM pg_temp.steps(:'r4');
UPDATE workflow.job_queue SET status = 'SUCCEEDED', output = '{"direct": true}'
 WHERE workflow_run_id = :'r4' AND job_type = 't4.a';
SELECT * FROM pg_temp.steps(:'r4');
SELECT * FROM pg_temp.run(:'r4');
UPDATE workflow.job_queue SET status = 'FAILED'
 WHERE workflow_run_id = :'r4' AND job_type = 't4.c';
SELECT * FROM pg_temp.run(:'r4');

-- 5. external steps finishing the run, FAILED outcome
SELECT workflow.start_run('{"steps": [{"key": "x", "kind": "external"},
    {"key": "y", "kind": "external", "depends_on": [{"step": "x", "release": "on_terminal"}]}]}') AS r5 \gset
SELECT (workflow.complete_external_step(:'r5', 'x', 'FAILED', NULL, 'declined', 'ext.no', 'they said no')).status;
SELECT * FROM pg_temp.steps(:'r5');
SELECT (workflow.complete_external_step(:'r5', 'y', 'CANCELED')).status;
SELECT * FROM pg_temp.run(:'r5');

-- 6. a run without result_step has no result
SELECT workflow.start_run('{"steps": [{"key": "only", "job_type": "t6"}]}') AS r6 \gset
SELECT pg_temp.work(:'r6', 'only', 'ok', '{"x": 1}');
SELECT * FROM pg_temp.run(:'r6');

-- 7. a lease that expires on the last attempt fails the step and cascades
SELECT workflow.start_run('{"steps": [{"key": "slow", "job_type": "t7", "max_attempts": 1},
    {"key": "after", "job_type": "t7.after", "depends_on": ["slow"]}]}') AS r7 \gset
SELECT count(*) FROM workflow.claim('w', ARRAY['t7']);
UPDATE workflow.job_queue SET leased_until = now() - interval '1 s' WHERE workflow_run_id = :'r7';
SELECT workflow.reap_expired();
SELECT * FROM pg_temp.steps(:'r7');
SELECT * FROM pg_temp.run(:'r7');

-- 8. batch completion across runs
SELECT workflow.start_run('{"steps": [{"key": "p", "job_type": "t8"},
    {"key": "q", "job_type": "t8"}, {"key": "z", "job_type": "t8.z", "depends_on": ["p", "q"]}]}') AS r8a \gset
SELECT workflow.start_run('{"steps": [{"key": "p", "job_type": "t8"},
    {"key": "q", "job_type": "t8"}, {"key": "z", "job_type": "t8.z", "depends_on": ["p", "q"]}]}') AS r8b \gset
CREATE TEMP TABLE c8 AS SELECT id, lease_token FROM workflow.claim('w', ARRAY['t8'], 10);
SELECT count(*) AS finished FROM workflow.complete_jobs(
    ARRAY(SELECT id FROM c8 ORDER BY id DESC), ARRAY(SELECT lease_token FROM c8 ORDER BY id DESC));
SELECT * FROM pg_temp.steps(:'r8a');
SELECT * FROM pg_temp.run(:'r8b');
CREATE TEMP TABLE c8z AS SELECT id, lease_token FROM workflow.claim('w', ARRAY['t8.z'], 10);
SELECT count(*) AS failed FROM workflow.fail_jobs(
    ARRAY(SELECT id FROM c8z), ARRAY(SELECT lease_token FROM c8z),
    ARRAY['e', 'e'], ARRAY['m', 'm'], false);
SELECT * FROM pg_temp.run(:'r8a');
SELECT * FROM pg_temp.run(:'r8b');

-- 9. a step finished in the same statement that started its run still
--    releases its dependents (the edges are read on a fresh snapshot)
WITH r AS MATERIALIZED (
    SELECT workflow.start_run('{"steps": [{"key": "a", "kind": "external"},
        {"key": "b", "kind": "external", "depends_on": ["a"]}]}') AS id)
SELECT (workflow.complete_external_step(r.id, 'a', 'SUCCEEDED')).status FROM r;
SELECT s.step_key, s.status, s.dependency_count_pending
  FROM workflow.workflow_steps s JOIN workflow.workflow_runs r ON r.id = s.workflow_run_id
 WHERE r.definition @> '{"steps": [{"key": "b", "kind": "external", "depends_on": ["a"]}]}'
 ORDER BY 1;

-- 10. a rolled-back savepoint takes back only its own step changes
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t10"},
    {"key": "b", "job_type": "t10"},
    {"key": "after_a", "job_type": "t10.after", "depends_on": ["a"]},
    {"key": "after_b", "job_type": "t10.after", "depends_on": ["b"]}]}') AS r10 \gset
CREATE TEMP TABLE c10 AS SELECT j.id, j.lease_token, s.step_key
  FROM workflow.claim('w', ARRAY['t10'], 2) j
  JOIN workflow.workflow_steps s ON s.id = j.workflow_step_id;
BEGIN;
SELECT workflow.complete_job(id, lease_token) FROM c10 WHERE step_key = 'a';
SAVEPOINT before_b;
SELECT workflow.complete_job(id, lease_token) FROM c10 WHERE step_key = 'b';
ROLLBACK TO SAVEPOINT before_b;
COMMIT;
SELECT * FROM pg_temp.steps(:'r10');
SELECT * FROM pg_temp.run(:'r10');

-- 11. a user trigger that catches an error inside the statement does not
--     make the engine forget the step it is finishing
CREATE FUNCTION pg_temp.audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        PERFORM 1 / 0;
    EXCEPTION WHEN division_by_zero THEN
        NULL;
    END;
    RETURN NULL;
END $$;
CREATE TRIGGER zz_audit AFTER UPDATE ON workflow.job_queue
    FOR EACH ROW EXECUTE FUNCTION pg_temp.audit();
SELECT workflow.complete_job(id, lease_token) FROM c10 WHERE step_key = 'b';
DROP TRIGGER zz_audit ON workflow.job_queue;
SELECT * FROM pg_temp.steps(:'r10');
SELECT * FROM pg_temp.run(:'r10');

-- 12. retries in a batch take no release lock
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t12", "max_attempts": 5}]}') AS r12 \gset
CREATE TEMP TABLE c12 AS SELECT id, lease_token FROM workflow.claim('w', ARRAY['t12']);
BEGIN;
SELECT count(*) AS retried FROM workflow.fail_jobs(ARRAY(SELECT id FROM c12),
    ARRAY(SELECT lease_token FROM c12), ARRAY['e'], ARRAY['m'], true);
SELECT count(*) AS advisory_locks FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid();
COMMIT;
SELECT * FROM pg_temp.steps(:'r12');

-- 13. one statement moves several steps in different ways: the reaper
--     requeues one expired job and fails two on their last attempt
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t13", "max_attempts": 1},
    {"key": "b", "job_type": "t13", "max_attempts": 3},
    {"key": "c", "job_type": "t13", "max_attempts": 1},
    {"key": "after_b", "job_type": "t13.after", "depends_on": ["b"]}]}') AS r13 \gset
SELECT count(*) AS claimed FROM workflow.claim('w', ARRAY['t13'], 3);
UPDATE workflow.job_queue SET leased_until = now() - interval '1 minute'
 WHERE workflow_run_id = :'r13' AND status = 'RUNNING';
SELECT workflow.reap_expired() AS expired;
SELECT * FROM pg_temp.steps(:'r13');
SELECT * FROM pg_temp.run(:'r13');

-- 14. a user trigger that updates job_queue inside a block it rolls back
--     does not take the step move of the statement that fired it along
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t14"},
    {"key": "after_a", "job_type": "t14.after", "depends_on": ["a"]}]}') AS r14 \gset
CREATE FUNCTION pg_temp.nested_rollback() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        UPDATE workflow.job_queue SET priority = priority WHERE false;
        PERFORM 1 / 0;
    EXCEPTION WHEN division_by_zero THEN
        NULL;
    END;
    RETURN NULL;
END $$;
CREATE TRIGGER zz_nested AFTER UPDATE ON workflow.job_queue
    FOR EACH ROW EXECUTE FUNCTION pg_temp.nested_rollback();
SELECT pg_temp.work(:'r14', 'a', 'ok');
DROP TRIGGER zz_nested ON workflow.job_queue;
SELECT * FROM pg_temp.steps(:'r14');
SELECT * FROM pg_temp.run(:'r14');

-- 15. a user trigger that cancels a job as it is claimed: the step is
--     claimed, then canceled, in that order, within one statement
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t15"},
    {"key": "after_a", "job_type": "t15.after", "depends_on": ["a"]}]}') AS r15 \gset
CREATE FUNCTION pg_temp.cancel_on_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM workflow.cancel_job(NEW.id, 'not today');
    RETURN NULL;
END $$;
CREATE TRIGGER zz_cancel AFTER UPDATE ON workflow.job_queue
    FOR EACH ROW WHEN (OLD.status = 'QUEUED' AND NEW.status = 'RUNNING'
                       AND NEW.job_type = 't15')
    EXECUTE FUNCTION pg_temp.cancel_on_claim();
SELECT status AS claimed_as FROM workflow.claim('w', ARRAY['t15']);
DROP TRIGGER zz_cancel ON workflow.job_queue;
SELECT status FROM workflow.job_queue WHERE workflow_run_id = :'r15';
SELECT * FROM pg_temp.steps(:'r15');
SELECT * FROM pg_temp.run(:'r15');

-- 16. a user trigger on workflow_steps that cancels the queued siblings of
--     a step that failed, while the engine is writing that step
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t16"},
    {"key": "b", "job_type": "t16.sibling"}, {"key": "c", "job_type": "t16.sibling"},
    {"key": "after_b", "job_type": "t16.after", "depends_on": ["b"]}]}') AS r16 \gset
CREATE FUNCTION pg_temp.cancel_siblings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM workflow.cancel_job(j.id, 'sibling failed')
       FROM workflow.job_queue j
      WHERE j.workflow_run_id = NEW.workflow_run_id AND j.status = 'QUEUED'
      ORDER BY j.id;
    RETURN NULL;
END $$;
CREATE TRIGGER zz_siblings AFTER UPDATE ON workflow.workflow_steps
    FOR EACH ROW WHEN (NEW.status = 'FAILED' AND OLD.status <> 'FAILED')
    EXECUTE FUNCTION pg_temp.cancel_siblings();
SELECT pg_temp.work(:'r16', 'a', 'fail');
DROP TRIGGER zz_siblings ON workflow.workflow_steps;
SELECT * FROM pg_temp.steps(:'r16');
SELECT * FROM pg_temp.run(:'r16');

-- every invariant holds at the end
RESET enable_hashjoin;
RESET enable_mergejoin;
SELECT * FROM workflow.verify();
