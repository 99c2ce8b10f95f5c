-- Continuations (1.12): continuation_source and continue_run.  A run that
-- ended only because its loop was exhausted is continued once, in one
-- successor that copies its finished work and runs the loop again from the
-- exhausted output; the lineage adds up along a chain; every ineligible
-- source, a stale checksum, identical and conflicting repeats; the source
-- left as it was; purge and the lineage.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox, workflow.workflow_continuations;

-- try() shows a statement's result, or its SQLSTATE and stable code
CREATE FUNCTION pg_temp.try(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    EXECUTE stmt INTO v;
    RETURN v;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END $$;
-- why() shows the detail of the error a statement raises
CREATE FUNCTION pg_temp.why(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    d text;
BEGIN
    EXECUTE stmt;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
    RETURN split_part(SQLERRM, ':', 1) || ': ' || d;
END $$;
-- finish(run, key, output) runs the job of the run's step key
CREATE FUNCTION pg_temp.finish(run uuid, key text, output jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    j record;
BEGIN
    UPDATE workflow.job_queue q SET status = 'RUNNING', attempt = q.attempt + 1,
           lease_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
      FROM workflow.workflow_steps s
     WHERE s.workflow_run_id = run AND s.step_key = key AND q.id = s.job_id
       AND q.status = 'QUEUED'
    RETURNING q.* INTO j;
    IF j.id IS NULL THEN
        RAISE EXCEPTION 'step % has no queued job', key;
    END IF;
    PERFORM workflow.complete_job(j.id, j.lease_token, output);
    RETURN j.payload;
END $$;
-- fail(run, key) fails the job of the run's step key for good
CREATE FUNCTION pg_temp.fail(run uuid, key text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    j record;
BEGIN
    UPDATE workflow.job_queue q SET status = 'RUNNING', attempt = q.attempt + 1,
           lease_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
      FROM workflow.workflow_steps s
     WHERE s.workflow_run_id = run AND s.step_key = key AND q.id = s.job_id
    RETURNING q.* INTO j;
    PERFORM workflow.fail_job(j.id, j.lease_token, 'ct.bad', 'it failed', false);
END $$;
-- rounds(run, n) runs n generations of the loop that go round
CREATE FUNCTION pg_temp.rounds(run uuid, n integer) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM pg_temp.finish(run, 'draft', jsonb_build_object('text', 'v' || i));
        PERFORM pg_temp.finish(run, 'review', jsonb_build_object('approved', false, 'round', i));
    END LOOP;
    RETURN n;
END $$;
-- steps(run): each step as the run holds it
CREATE FUNCTION pg_temp.steps(run uuid)
RETURNS TABLE (step_key text, status text, generation integer, continued boolean,
               jobs bigint, output jsonb)
LANGUAGE sql AS $$
    SELECT s.step_key, s.status::text, s.generation, s.continued,
           (SELECT count(*) FROM workflow.job_queue j WHERE j.workflow_step_id = s.id), s.output
      FROM workflow.workflow_steps s WHERE s.workflow_run_id = run ORDER BY s.step_key
$$;
-- snapshot(run): every row of a run and of its steps, jobs and events
CREATE FUNCTION pg_temp.snapshot(run uuid) RETURNS text LANGUAGE sql AS $$
    SELECT md5(string_agg(t, E'\n' ORDER BY t)) FROM (
        SELECT r::text AS t FROM workflow.workflow_runs r WHERE r.id = run
        UNION ALL SELECT s::text FROM workflow.workflow_steps s WHERE s.workflow_run_id = run
        UNION ALL SELECT j::text FROM workflow.job_queue j WHERE j.workflow_run_id = run
        UNION ALL SELECT e::text FROM workflow.workflow_events e WHERE e.workflow_run_id = run
        UNION ALL SELECT d::text FROM workflow.workflow_step_dependencies d WHERE d.workflow_run_id = run) x
$$;
-- the definition: prepare -> draft -> review -> again (repeat back to draft)
-- -> publish; side runs beside the loop
CREATE FUNCTION pg_temp.def(max_iterations integer, limits jsonb DEFAULT '{}') RETURNS jsonb
LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'doc', 'limits', limits, 'steps', jsonb_build_array(
        jsonb_build_object('key', 'prepare', 'job_type', 'ct.prepare'),
        jsonb_build_object('key', 'side', 'job_type', 'ct.side'),
        jsonb_build_object('key', 'draft', 'job_type', 'ct.draft', 'depends_on', '["prepare"]'::jsonb),
        jsonb_build_object('key', 'review', 'job_type', 'ct.review', 'depends_on', '["draft"]'::jsonb),
        jsonb_build_object('key', 'again', 'kind', 'repeat', 'depends_on', '["review"]'::jsonb,
                           'back_to', '["draft"]'::jsonb, 'while', '$.approved == false',
                           'max_iterations', max_iterations),
        jsonb_build_object('key', 'publish', 'job_type', 'ct.publish', 'depends_on', '["again"]'::jsonb)))
$$;

-- 1. A loop exhausted after 2 iterations: the source.
SELECT workflow.start_run(pg_temp.def(2, '{"retry_cap": 1, "deadline_seconds": 86400}'),
                          input => '{"topic": "notes"}') AS src \gset
SELECT pg_temp.finish(:'src', 'prepare', '{"outline": 1}') IS NOT NULL,
       pg_temp.finish(:'src', 'side', '{"side": 1}') IS NOT NULL,
       pg_temp.rounds(:'src', 2);
SELECT status FROM workflow.workflow_runs WHERE id = :'src';
SELECT step_key, status, generation, jobs FROM pg_temp.steps(:'src');
SELECT repeat_step_key, generation, iterations_completed, total_iterations_completed,
       document_scope_id = :'src' AS scope_is_the_run, output,
       output_checksum = workflow.output_checksum(output) AS checksum
  FROM workflow.continuation_source(:'src');
SELECT output_checksum AS src_checksum FROM workflow.continuation_source(:'src') \gset
SELECT pg_temp.snapshot(:'src') AS src_before \gset

-- 2. Bad arguments, each refused before anything is written.
SELECT pg_temp.try('SELECT workflow.continue_run(NULL, 1, ''x'')');
SELECT pg_temp.try(format('SELECT workflow.continue_run(%L, NULL, %L)', :'src', :'src_checksum'));
SELECT pg_temp.try(format('SELECT workflow.continue_run(%L, 1, NULL)', :'src'));
SELECT pg_temp.try(format('SELECT workflow.continue_run(%L, 0, %L)', :'src', :'src_checksum'));
SELECT pg_temp.try(format('SELECT workflow.continue_run(%L, 1001, %L)', :'src', :'src_checksum'));
SELECT pg_temp.try(format('SELECT workflow.continue_run(%L, 1, %L, 0)', :'src', :'src_checksum'));
SELECT pg_temp.try('SELECT workflow.continue_run(''00000000-0000-0000-0000-000000000000'', 1, ''x'')');
SELECT pg_temp.try(format('SELECT workflow.continue_run(%L, 1, %L, NULL, %L)', :'src', :'src_checksum',
                          '00000000-0000-0000-0000-0000000000ff'));
SELECT pg_temp.try('SELECT count(*) FROM workflow.continuation_source(NULL)');
-- a stale checksum conflicts
SELECT pg_temp.try(format('SELECT workflow.continue_run(%L, 2, %L)', :'src',
                          workflow.output_checksum('{"approved": false, "round": 1}')));
SELECT count(*) AS nothing_written FROM workflow.workflow_continuations;

-- 3. The successor: 3 more iterations.  What succeeded outside the loop is
-- copied, without a job; the body runs again from generation 0 with the
-- exhausted output as previous; the repeat and what follows it wait.
SELECT workflow.continue_run(:'src', 3, :'src_checksum') AS s1 \gset
SELECT step_key, status, generation, continued, jobs, output FROM pg_temp.steps(:'s1');
SELECT payload FROM workflow.job_queue WHERE workflow_run_id = :'s1';
SELECT payload -> 'max_iterations' FROM workflow.workflow_steps WHERE workflow_run_id = :'s1' AND step_key = 'again';
SELECT r.status, r.input, r.cycle_cap, r.retry_cap, r.node_execution_cap,
       r.deadline_at = s.deadline_at AS same_deadline, r.steps_succeeded, r.steps_active, r.steps_blocked
  FROM workflow.workflow_runs r, workflow.workflow_runs s WHERE r.id = :'s1' AND s.id = :'src';
SELECT successor_run_id = :'s1' AS successor, predecessor_run_id = :'src' AS predecessor,
       document_scope_id = :'src' AS scope, prior_iterations, additional_iterations, request
  FROM workflow.workflow_continuations;
SELECT event_type, detail - 'predecessor_run_id' - 'document_scope_id' - 'output_checksum' AS detail,
       detail ->> 'predecessor_run_id' = :'src' AS names_the_source
  FROM workflow.run_history(:'s1') WHERE event_type = 'run_continued';
SELECT event_type, step_key FROM workflow.run_history(:'s1') ORDER BY id;
SELECT * FROM workflow.verify(:'s1');
-- the source is as it was, its history included
SELECT pg_temp.snapshot(:'src') = :'src_before' AS source_unchanged;
-- the same request again returns the same successor; another conflicts
SELECT workflow.continue_run(:'src', 3, :'src_checksum') = :'s1' AS same_successor;
SELECT pg_temp.try(format('SELECT workflow.continue_run(%L, 2, %L)', :'src', :'src_checksum'));
SELECT pg_temp.try(format('SELECT workflow.continue_run(%L, 3, %L, 5)', :'src', :'src_checksum'));
SELECT count(*) AS one_successor FROM workflow.workflow_continuations;

-- 4. Not eligible: a live run (the successor).
SELECT pg_temp.why(format('SELECT count(*) FROM workflow.continuation_source(%L)', :'s1'));
-- the successor exhausts its 3 iterations in turn: 2 + 3 = 5 so far, the
-- first run the document scope
SELECT pg_temp.rounds(:'s1', 3);
SELECT status FROM workflow.workflow_runs WHERE id = :'s1';
SELECT repeat_step_key, generation, iterations_completed, total_iterations_completed,
       document_scope_id = :'src' AS scope_is_the_first_run
  FROM workflow.continuation_source(:'s1');
SELECT output_checksum AS s1_checksum FROM workflow.continuation_source(:'s1') \gset

-- 5. The chain goes on with 3 more and clears in the third: 2 + 3 + 3.
SELECT workflow.continue_run(:'s1', 3, :'s1_checksum', node_execution_cap => 20) AS s2 \gset
SELECT prior_iterations, additional_iterations, document_scope_id = :'src' AS scope
  FROM workflow.workflow_continuations WHERE successor_run_id = :'s2';
SELECT node_execution_cap, cycle_cap FROM workflow.workflow_runs WHERE id = :'s2';
SELECT pg_temp.rounds(:'s2', 2);
SELECT pg_temp.finish(:'s2', 'draft', '{"text": "final"}') IS NOT NULL,
       pg_temp.finish(:'s2', 'review', '{"approved": true}') IS NOT NULL,
       pg_temp.finish(:'s2', 'publish', '{"published": true}') IS NOT NULL;
SELECT status FROM workflow.workflow_runs WHERE id = :'s2';
SELECT step_key, status, generation, continued, jobs FROM pg_temp.steps(:'s2');
SELECT * FROM workflow.verify();
-- a run that cleared is not a source
SELECT pg_temp.try(format('SELECT count(*) FROM workflow.continuation_source(%L)', :'s2'));

-- 6. The other ineligible sources.
-- a run whose failure is not its loop's: a step beside the loop failed
SELECT workflow.start_run(pg_temp.def(1)) AS other \gset
SELECT pg_temp.finish(:'other', 'prepare', '{}') IS NOT NULL;
SELECT pg_temp.fail(:'other', 'side');
SELECT pg_temp.rounds(:'other', 1);
SELECT status FROM workflow.workflow_runs WHERE id = :'other';
SELECT pg_temp.why(format('SELECT count(*) FROM workflow.continuation_source(%L)', :'other'));
-- a run with no exhausted loop: a failed body step
SELECT workflow.start_run(pg_temp.def(3)) AS body_failed \gset
SELECT pg_temp.finish(:'body_failed', 'prepare', '{}') IS NOT NULL,
       pg_temp.finish(:'body_failed', 'side', '{}') IS NOT NULL,
       pg_temp.finish(:'body_failed', 'draft', '{}') IS NOT NULL;
SELECT pg_temp.fail(:'body_failed', 'review');
SELECT pg_temp.why(format('SELECT count(*) FROM workflow.continuation_source(%L)', :'body_failed'));
-- exhausted under emit_outcome: the run SUCCEEDED
SELECT workflow.start_run(jsonb_set(pg_temp.def(1), '{steps,4,exhaustion_policy}', '"emit_outcome"')) AS emitted \gset
SELECT pg_temp.finish(:'emitted', 'prepare', '{}') IS NOT NULL,
       pg_temp.finish(:'emitted', 'side', '{}') IS NOT NULL,
       pg_temp.rounds(:'emitted', 1),
       pg_temp.finish(:'emitted', 'publish', '{}') IS NOT NULL;
SELECT pg_temp.try(format('SELECT count(*) FROM workflow.continuation_source(%L)', :'emitted'));
-- a canceled run
SELECT workflow.start_run(pg_temp.def(1)) AS canceled \gset
SELECT workflow.cancel_run(:'canceled');
SELECT pg_temp.try(format('SELECT workflow.continue_run(%L, 1, %L)', :'canceled', :'src_checksum'));
-- the evidence is checked against the step: a broken one is internal_state
SELECT workflow.start_run(pg_temp.def(1)) AS broken \gset
SELECT pg_temp.finish(:'broken', 'prepare', '{}') IS NOT NULL,
       pg_temp.finish(:'broken', 'side', '{}') IS NOT NULL,
       pg_temp.rounds(:'broken', 1);
UPDATE workflow.workflow_steps SET output = '{"approved": false, "forged": true}'
 WHERE workflow_run_id = :'broken' AND step_key = 'again';
SELECT pg_temp.try(format('SELECT count(*) FROM workflow.continuation_source(%L)', :'broken'));
UPDATE workflow.workflow_steps SET output = '{"approved": false, "round": 1}'
 WHERE workflow_run_id = :'broken' AND step_key = 'again';
SELECT generation FROM workflow.continuation_source(:'broken');

-- 7. Two loops side by side: the one that cleared is copied with the rest,
-- the exhausted one runs again; verify() reads the lineage of the
-- exhausted one; a compensation of the successor leaves the copies done.
SELECT workflow.start_run('{"steps": [
    {"key": "a1", "job_type": "ct.a1"},
    {"key": "r1", "kind": "repeat", "depends_on": ["a1"], "back_to": ["a1"],
     "while": "$.more", "max_iterations": 2},
    {"key": "a2", "job_type": "ct.a2", "compensate": {"job_type": "ct.undo"}},
    {"key": "r2", "kind": "repeat", "depends_on": ["a2"], "back_to": ["a2"],
     "while": "$.more", "max_iterations": 3, "exhaustion_policy": "emit_outcome"}]}') AS two \gset
SELECT pg_temp.finish(:'two', 'a1', '{"more": true}') IS NOT NULL,
       pg_temp.finish(:'two', 'a1', '{"more": true}') IS NOT NULL,
       pg_temp.finish(:'two', 'a2', '{"more": true}') IS NOT NULL,
       pg_temp.finish(:'two', 'a2', '{"more": true}') IS NOT NULL,
       pg_temp.finish(:'two', 'a2', '{"more": true}') IS NOT NULL;
SELECT status FROM workflow.workflow_runs WHERE id = :'two';
SELECT repeat_step_key, iterations_completed FROM workflow.continuation_source(:'two');
SELECT workflow.continue_run(:'two', 1, output_checksum) AS two_s
  FROM workflow.continuation_source(:'two') \gset
SELECT step_key, status, generation, continued, jobs FROM pg_temp.steps(:'two_s');
SELECT * FROM workflow.verify(:'two_s');
SELECT workflow.compensate_run(:'two_s');
SELECT step_key, status, continued FROM pg_temp.steps(:'two_s');
SELECT * FROM workflow.verify(:'two_s');

-- 8. Purge: the predecessor goes, its successor's lineage stays readable;
-- the successor goes with its own lineage row.
SELECT workflow.purge('0 seconds', 1) AS purged_the_oldest;
SELECT count(*) AS source_left FROM workflow.workflow_runs WHERE id = :'src';
SELECT predecessor_run_id = :'src' AS continues_the_purged_run, prior_iterations, document_scope_id = :'src' AS scope
  FROM workflow.workflow_continuations WHERE successor_run_id = :'s1';
SELECT total_iterations_completed FROM workflow.continuation_source(:'s1');
SELECT * FROM workflow.verify();
SELECT workflow.purge('0 seconds', 1000) > 0 AS purged;
SELECT count(*) AS runs_left FROM workflow.workflow_runs WHERE id IN (:'src', :'s1', :'s2');
SELECT count(*) AS lineage_left FROM workflow.workflow_continuations;
SELECT * FROM workflow.verify();
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox, workflow.workflow_continuations;
