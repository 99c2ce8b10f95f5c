-- Counter shards: a wide run counts its steps in shard rows, and the run
-- row only counts the shards where a counter is not zero.
\set VERBOSITY terse
LOAD 'workflow';
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;

SELECT name, boot_val, min_val, max_val FROM pg_catalog.pg_settings
 WHERE name IN ('workflow.counter_shards', 'workflow.counter_shard_min_width') ORDER BY name;
SET workflow.counter_shards = 1025;
SET workflow.counter_shard_min_width = 1;

-- state(run): the run row, the shard rows and run_counters() side by side
CREATE FUNCTION pg_temp.state(run uuid)
RETURNS TABLE (what text, shard smallint, active int, waiting int, blocked int,
               succeeded int, failed int, canceled int, status text)
LANGUAGE sql AS $$
    SELECT 'run row', r.counter_shards, r.steps_active, r.steps_waiting,
           r.steps_blocked, r.steps_succeeded, r.steps_failed,
           r.steps_canceled, r.status::text
      FROM workflow.workflow_runs r WHERE r.id = run
    UNION ALL
    SELECT 'shard', c.shard, c.steps_active, c.steps_waiting, c.steps_blocked,
           c.steps_succeeded, c.steps_failed, c.steps_canceled, NULL
      FROM workflow.workflow_run_counters c WHERE c.workflow_run_id = run
    UNION ALL
    SELECT 'run_counters', NULL, c.steps_active, c.steps_waiting,
           c.steps_blocked, c.steps_succeeded, c.steps_failed,
           c.steps_canceled, NULL
      FROM workflow.run_counters(run) c
    ORDER BY 1 DESC, 2
$$;
-- finish(run, key, ok) claims the step's job and completes or fails it
CREATE FUNCTION pg_temp.finish(run uuid, key text, ok boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    j workflow.job_queue;
BEGIN
    SELECT c.* INTO j FROM workflow.claim('w', ARRAY['cs.' || key]) c;
    IF j.workflow_run_id IS DISTINCT FROM run THEN
        RAISE EXCEPTION 'no job for %', key;
    END IF;
    IF ok THEN
        PERFORM workflow.complete_job(j.id, j.lease_token);
    ELSE
        PERFORM workflow.fail_job(j.id, j.lease_token, 'boom', 'no', false);
    END IF;
END $$;
CREATE FUNCTION pg_temp.jstep(key text, deps text[] DEFAULT NULL) RETURNS jsonb
LANGUAGE sql AS $$
    SELECT jsonb_build_object('key', key, 'job_type', 'cs.' || key)
           || CASE WHEN deps IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('depends_on', to_jsonb(deps)) END
$$;

-- which runs get shards: a level of 8 steps, with shards from a width of 4
SET workflow.counter_shard_min_width = 4;
SET workflow.counter_shards = 2;
SELECT workflow.start_run(jsonb_build_object('steps', jsonb_build_array(
    pg_temp.jstep('a1'), pg_temp.jstep('a2'), pg_temp.jstep('a3'), pg_temp.jstep('a4'),
    pg_temp.jstep('a5'), pg_temp.jstep('a6'),
    jsonb_build_object('key', 'x1', 'kind', 'external'),
    jsonb_build_object('key', 'x2', 'kind', 'external'),
    pg_temp.jstep('j', ARRAY['a1', 'a2']),
    pg_temp.jstep('k', ARRAY['a3'])))) AS wide \gset
-- too narrow, and a chain: counters on the run row
SELECT workflow.start_run(jsonb_build_object('steps', jsonb_build_array(
    pg_temp.jstep('n1'), pg_temp.jstep('n2'), pg_temp.jstep('n3')))) AS narrow \gset
SELECT workflow.start_run(jsonb_build_object('steps', jsonb_build_array(
    pg_temp.jstep('c1'), pg_temp.jstep('c2', ARRAY['c1']),
    pg_temp.jstep('c3', ARRAY['c2']), pg_temp.jstep('c4', ARRAY['c3'])))) AS chain \gset
SELECT r.id = :'wide' AS wide, r.counter_shards,
       (SELECT count(*) FROM workflow.workflow_run_counters c
         WHERE c.workflow_run_id = r.id) AS shard_rows
  FROM workflow.workflow_runs r ORDER BY r.id;
-- steps of one level go round-robin over the shards
SELECT step_key, counter_shard FROM workflow.workflow_steps
 WHERE workflow_run_id = :'wide' ORDER BY step_key;
SELECT * FROM pg_temp.state(:'wide');

-- a completion that leaves its shard's active count above zero does not
-- write the run row at all
SELECT xmin AS run_xmin FROM workflow.workflow_runs WHERE id = :'wide' \gset
SELECT pg_temp.finish(:'wide', 'a4', true);
SELECT xmin = :'run_xmin' AS run_row_untouched FROM workflow.workflow_runs WHERE id = :'wide';
SELECT * FROM pg_temp.state(:'wide');

-- a1 and a2 release j (shard 1); a3 fails and cancels k (shard 2)
SELECT pg_temp.finish(:'wide', 'a1', true);
SELECT pg_temp.finish(:'wide', 'a2', true);
SELECT pg_temp.finish(:'wide', 'a3', false);
SELECT step_key, status, counter_shard FROM workflow.workflow_steps
 WHERE workflow_run_id = :'wide' AND step_key IN ('j', 'k') ORDER BY step_key;
SELECT * FROM pg_temp.state(:'wide');

-- shard 2 runs out of active steps, shard 1 still has j: RUNNING
SELECT pg_temp.finish(:'wide', 'a6', true);
SELECT * FROM pg_temp.state(:'wide');
-- no job step left anywhere: the run waits for the outside world
SELECT pg_temp.finish(:'wide', 'a5', true);
SELECT pg_temp.finish(:'wide', 'j', true);
SELECT * FROM pg_temp.state(:'wide');
SELECT (workflow.complete_external_step(:'wide', 'x1', 'SUCCEEDED')).status;
SELECT * FROM pg_temp.state(:'wide');

-- the last step finishes the run, and its counters are summed into the row
SELECT (workflow.complete_external_step(:'wide', 'x2', 'FAILED')).status;
SELECT * FROM pg_temp.state(:'wide');
SELECT status, finished_at IS NOT NULL AS finished FROM workflow.workflow_runs WHERE id = :'wide';

-- cancel_run of a sharded run zeroes the shards' live counts
SELECT workflow.start_run(jsonb_build_object('steps', jsonb_build_array(
    pg_temp.jstep('b1'), pg_temp.jstep('b2'), pg_temp.jstep('b3'), pg_temp.jstep('b4'),
    pg_temp.jstep('b5', ARRAY['b1'])))) AS doomed \gset
SELECT pg_temp.finish(:'doomed', 'b2', true);
SELECT workflow.cancel_run(:'doomed', 'enough');
SELECT * FROM pg_temp.state(:'doomed');

-- the narrow run and the chain still count on the run row
SELECT pg_temp.finish(:'narrow', k, true) FROM unnest(ARRAY['n1', 'n2', 'n3']) k;
SELECT pg_temp.finish(:'chain', k, true) FROM unnest(ARRAY['c1', 'c2', 'c3']) k;
SELECT * FROM pg_temp.state(:'narrow');
SELECT * FROM pg_temp.state(:'chain');

SELECT * FROM workflow.verify();

-- verify() checks the shards too
SELECT workflow.start_run(jsonb_build_object('steps', jsonb_build_array(
    pg_temp.jstep('v1'), pg_temp.jstep('v2'), pg_temp.jstep('v3'),
    pg_temp.jstep('v4')))) AS v \gset
BEGIN;
UPDATE workflow.workflow_run_counters SET steps_active = steps_active + 1
 WHERE workflow_run_id = :'v' AND shard = 1;
SELECT step_key, problem, expected, actual FROM workflow.verify(:'v') ORDER BY problem;
ROLLBACK;
BEGIN;
DELETE FROM workflow.workflow_run_counters WHERE workflow_run_id = :'v' AND shard = 2;
SELECT step_key, problem, expected, actual FROM workflow.verify(:'v') ORDER BY problem;
ROLLBACK;
BEGIN;
UPDATE workflow.workflow_steps SET counter_shard = 3
 WHERE workflow_run_id = :'v' AND step_key = 'v1';
SELECT step_key, problem, expected, actual FROM workflow.verify(:'v') ORDER BY problem;
ROLLBACK;
BEGIN;
UPDATE workflow.workflow_runs SET steps_active = 1 WHERE id = :'v';
SELECT step_key, problem, expected, actual FROM workflow.verify(:'v') ORDER BY problem;
ROLLBACK;
BEGIN;
INSERT INTO workflow.workflow_run_counters (workflow_run_id, shard, steps_active,
    steps_waiting, steps_blocked)
VALUES ('00000000-0000-0000-0000-0000000000c5', 1, 0, 0, 0);
SELECT workflow_run_id, problem FROM workflow.verify() ORDER BY problem;
ROLLBACK;
-- shard numbers start at 1
INSERT INTO workflow.workflow_run_counters (workflow_run_id, shard, steps_active,
    steps_waiting, steps_blocked)
VALUES (:'v', 0, 0, 0, 0);

SELECT * FROM workflow.verify();
