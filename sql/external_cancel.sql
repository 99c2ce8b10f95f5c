-- complete_external_step and cancel_run: every check, idempotency,
-- organization scoping, and what workers see after a cancellation.
\set VERBOSITY terse
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;

CREATE FUNCTION pg_temp.err(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END $$;
CREATE FUNCTION pg_temp.ext(run uuid, key text, st text, out_json jsonb DEFAULT NULL,
                            reason text DEFAULT NULL, code text DEFAULT NULL,
                            msg text DEFAULT NULL, org uuid DEFAULT NULL)
RETURNS text LANGUAGE sql AS $$
    SELECT pg_temp.err(format(
        'SELECT workflow.complete_external_step(%L, %L, %L, %L, %L, %L, %L, %L)',
        run, key, st, out_json, reason, code, msg, org))
$$;

SELECT workflow.start_run('{"steps": [
    {"key": "job", "job_type": "e.job"},
    {"key": "gate", "kind": "external"},
    {"key": "later", "kind": "external", "depends_on": ["job"]},
    {"key": "end", "job_type": "e.end", "depends_on": ["gate", "later"]}]}',
    '00000000-0000-0000-0000-00000000000a') AS run \gset

-- the checks, in the documented order
SELECT pg_temp.ext('00000000-0000-0000-0000-000000000001', 'gate', 'SUCCEEDED');
SELECT pg_temp.ext(:'run', 'gate', 'SUCCEEDED', NULL, NULL, NULL, NULL,
                   '00000000-0000-0000-0000-00000000000b');
SELECT pg_temp.ext(:'run', 'nope', 'SUCCEEDED');
SELECT pg_temp.ext(:'run', 'job', 'SUCCEEDED');
SELECT pg_temp.ext(:'run', 'gate', 'RUNNING');
SELECT pg_temp.ext(:'run', 'gate', 'WAITING_FOR_EXTERNAL');
SELECT pg_temp.ext(:'run', 'gate', 'FAILED', '{"x": 1}');
SELECT pg_temp.ext(:'run', 'later', 'SUCCEEDED');
SELECT pg_temp.err(format('SELECT workflow.complete_external_step(NULL, %L, %L)', 'gate', 'SUCCEEDED'));
SELECT pg_temp.err(format('SELECT workflow.complete_external_step(%L, NULL, %L)', :'run', 'SUCCEEDED'));
SELECT pg_temp.err(format('SELECT workflow.complete_external_step(%L, %L, NULL)', :'run', 'gate'));

-- completion with the right organization, then identical and conflicting repeats
SELECT step_key, status, output, status_reason, last_error_code,
       last_error_message, completed_externally, finished_at IS NOT NULL AS finished
  FROM workflow.complete_external_step(:'run', 'gate', 'SUCCEEDED', '{"ok": 1}',
       'approved', NULL, 'by ann', '00000000-0000-0000-0000-00000000000a');
SELECT pg_temp.ext(:'run', 'gate', 'SUCCEEDED', '{"ok": 1}', 'approved', NULL, 'by ann');
SELECT pg_temp.ext(:'run', 'gate', 'FAILED');
SELECT pg_temp.ext(:'run', 'gate', 'SUCCEEDED', '{"ok": 2}', 'approved', NULL, 'by ann');
SELECT pg_temp.ext(:'run', 'gate', 'SUCCEEDED', NULL, 'approved', NULL, 'by ann');
SELECT pg_temp.ext(:'run', 'gate', 'SUCCEEDED', '{"ok": 1}', 'approved', 'c', 'by ann');
SELECT pg_temp.ext(:'run', 'gate', 'SUCCEEDED', '{"ok": 1}', 'other', NULL, 'by ann');
SELECT pg_temp.ext(:'run', 'gate', 'SUCCEEDED', '{"ok": 1}', 'approved', NULL, 'by bob');
SELECT pg_temp.ext(:'run', 'gate', 'RUNNING');
SELECT r.status, c.steps_waiting, c.steps_succeeded FROM workflow.workflow_runs r, workflow.run_counters(r.id) c WHERE r.id = :'run';

-- cancel_run: the run and every live step become CANCELED, jobs too
SELECT * FROM workflow.claim('w', ARRAY['e.job']) \gset c_
SELECT pg_temp.err(format('SELECT workflow.cancel_run(%L, NULL, %L)', :'run',
                          '00000000-0000-0000-0000-00000000000b'));
SELECT pg_temp.err($$SELECT workflow.cancel_run('00000000-0000-0000-0000-000000000001')$$);
SELECT pg_temp.err($$SELECT workflow.cancel_run(NULL)$$);
SELECT workflow.cancel_run(:'run', 'user asked', '00000000-0000-0000-0000-00000000000a');
SELECT step_key, status, status_reason, last_error_message, finished_at IS NOT NULL AS finished
  FROM workflow.workflow_steps WHERE workflow_run_id = :'run' ORDER BY step_key;
SELECT j.job_type, j.status, j.last_error_code FROM workflow.job_queue j
 WHERE j.workflow_run_id = :'run';
SELECT r.status, r.result, r.finished_at IS NOT NULL AS finished, c.*
  FROM workflow.workflow_runs r, workflow.run_counters(r.id) c WHERE r.id = :'run';
-- a worker finishing a canceled job gets job.canceled, whatever it does
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'c_id', :'c_lease_token'));
SELECT pg_temp.err(format('SELECT workflow.fail_job(%L, %L, %L, %L)', :'c_id', :'c_lease_token', 'e', 'm'));
SELECT pg_temp.err(format('SELECT workflow.heartbeat(%L, %L)', :'c_id', :'c_lease_token'));
SELECT count(*) AS claimable FROM workflow.claim('w', NULL, 10);
-- external steps of a canceled run are not waiting any more
SELECT pg_temp.ext(:'run', 'later', 'SUCCEEDED');
-- canceling again returns CANCELED
SELECT workflow.cancel_run(:'run');

-- a finished run cannot be canceled
SELECT workflow.start_run('{"steps": [{"key": "x", "kind": "external"}]}') AS done \gset
SELECT pg_temp.ext(:'done', 'x', 'SUCCEEDED');
SELECT pg_temp.err(format('SELECT workflow.cancel_run(%L)', :'done'));
SELECT status FROM workflow.workflow_runs WHERE id = :'done';

-- an unscoped call (NULL organization) reaches any run
SELECT workflow.start_run('{"steps": [{"key": "x", "kind": "external"}]}',
                          '00000000-0000-0000-0000-00000000000c') AS scoped \gset
SELECT pg_temp.ext(:'scoped', 'x', 'SUCCEEDED', NULL, NULL, NULL, NULL,
                   '00000000-0000-0000-0000-00000000000d');
SELECT pg_temp.ext(:'scoped', 'x', 'SUCCEEDED');
SELECT status FROM workflow.workflow_runs WHERE id = :'scoped';

-- every invariant holds at the end
SELECT * FROM workflow.verify();
