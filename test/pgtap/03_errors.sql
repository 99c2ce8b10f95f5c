-- 03_errors.sql: docs/reference.md: every code is raised with the SQLSTATE
-- of its class and a message that begins with the code.  Each check runs the
-- call through wf_tap.err(), which returns 'ok' or
-- "<SQLSTATE> <text before the first colon of the message>".
--
-- Not here:
--   workflow.unsupported_isolation (25000) needs a transaction that starts
--   REPEATABLE READ or SERIALIZABLE: 04_isolation_repeatable_read.sql and
--   05_isolation_serializable.sql.
--   workflow.release_conflict (40001) needs two sessions racing for a run's
--   release lock; the isolation specs cover it.

CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS workflow;

\set ON_ERROR_STOP 1
SET client_min_messages = warning;

BEGIN;
SELECT plan(151);

CREATE SCHEMA wf_tap;

CREATE FUNCTION wf_tap.err(sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END
$$;

-- Named fixtures: run ids, job ids and lease tokens.
CREATE TABLE wf_tap.fx (k text PRIMARY KEY, v uuid NOT NULL);
CREATE FUNCTION wf_tap.fx(key text) RETURNS uuid
    LANGUAGE sql STABLE STRICT AS $$SELECT v FROM wf_tap.fx WHERE k = key$$;

-- Claims the one queued job of jtype; records key (job id) and key.token.
CREATE FUNCTION wf_tap.claim_into(key text, jtype text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    j workflow.job_queue;
BEGIN
    SELECT * INTO STRICT j FROM workflow.claim('tap-worker', ARRAY[jtype]);
    INSERT INTO wf_tap.fx VALUES (key, j.id), (key || '.token', j.lease_token);
END
$$;

CREATE FUNCTION wf_tap.step_status(run_key text, step text) RETURNS text
    LANGUAGE sql STABLE AS $$
    SELECT status::text || coalesce('/' || status_reason, '')
      FROM workflow.workflow_steps
     WHERE workflow_run_id = wf_tap.fx(run_key) AND step_key = step
$$;

-- ---------------------------------------------------------------------------
-- Fixtures

DO $$
DECLARE
    o1 constant uuid := '11111111-0000-4000-8000-000000000001';
BEGIN
    -- r1: a queued job step, a waiting external step, a blocked external step
    INSERT INTO wf_tap.fx VALUES ('r1', workflow.start_run(
        '{"name": "err.r1", "steps": [
            {"key": "j", "job_type": "err.r1.j"},
            {"key": "wait", "kind": "external"},
            {"key": "blocked", "kind": "external", "depends_on": ["j"]}]}'));

    -- done: an external step completed once, with output and metadata
    INSERT INTO wf_tap.fx VALUES ('done', workflow.start_run(
        '{"steps": [{"key": "wait", "kind": "external"},
                    {"key": "next", "kind": "external", "depends_on": ["wait"]}]}'));
    PERFORM workflow.complete_external_step(wf_tap.fx('done'), 'wait', 'SUCCEEDED',
        '{"a": 1, "b": [1, 2]}', 'reason-1', 'code-1', 'message-1');

    -- org: a run of organization o1
    INSERT INTO wf_tap.fx VALUES ('org', workflow.start_run(
        '{"steps": [{"key": "e", "kind": "external"}]}', o1));

    -- unsat: the prerequisite fails, the external dependent is canceled
    INSERT INTO wf_tap.fx VALUES ('unsat', workflow.start_run(
        '{"steps": [{"key": "f", "job_type": "err.unsat.f"},
                    {"key": "after", "kind": "external", "depends_on": ["f"]}]}'));
    PERFORM wf_tap.claim_into('unsat.f', 'err.unsat.f');
    PERFORM workflow.fail_job(wf_tap.fx('unsat.f'), wf_tap.fx('unsat.f.token'),
                              'err.boom', 'it broke', false);

    -- canceled: a run with a waiting external step, canceled
    INSERT INTO wf_tap.fx VALUES ('canceled', workflow.start_run(
        '{"steps": [{"key": "e", "kind": "external"}]}'));
    PERFORM workflow.cancel_run(wf_tap.fx('canceled'), 'test');

    -- succeeded: a one-step run that succeeded
    INSERT INTO wf_tap.fx VALUES ('succeeded', workflow.start_run(
        '{"steps": [{"key": "a", "job_type": "err.succeeded.a"}]}'));
    PERFORM wf_tap.claim_into('succeeded.a', 'err.succeeded.a');
    PERFORM workflow.complete_job(wf_tap.fx('succeeded.a'), wf_tap.fx('succeeded.a.token'));

    -- runcancel: a run canceled while its job is RUNNING
    INSERT INTO wf_tap.fx VALUES ('runcancel', workflow.start_run(
        '{"steps": [{"key": "a", "job_type": "err.runcancel.a"}]}'));
    PERFORM wf_tap.claim_into('runcancel.a', 'err.runcancel.a');
    PERFORM workflow.cancel_run(wf_tap.fx('runcancel'));

    -- running: a run whose job step is RUNNING
    INSERT INTO wf_tap.fx VALUES ('running', workflow.start_run(
        '{"steps": [{"key": "a", "job_type": "err.running.a"}]}'));
    PERFORM wf_tap.claim_into('running.a', 'err.running.a');

    -- plain jobs in every state
    PERFORM workflow.enqueue('err.p.run');
    PERFORM wf_tap.claim_into('p.run', 'err.p.run');

    PERFORM workflow.enqueue('err.p.succ');
    PERFORM wf_tap.claim_into('p.succ', 'err.p.succ');
    PERFORM workflow.complete_job(wf_tap.fx('p.succ'), wf_tap.fx('p.succ.token'), '{"r": 1}');

    PERFORM workflow.enqueue('err.p.fail');
    PERFORM wf_tap.claim_into('p.fail', 'err.p.fail');
    PERFORM workflow.fail_job(wf_tap.fx('p.fail'), wf_tap.fx('p.fail.token'),
                              'err.code', 'err message', false);

    PERFORM workflow.enqueue('err.p.canc');
    PERFORM wf_tap.claim_into('p.canc', 'err.p.canc');
    PERFORM workflow.cancel_job(wf_tap.fx('p.canc'), 'test');

    PERFORM workflow.enqueue('err.p.rel');
    PERFORM wf_tap.claim_into('p.rel', 'err.p.rel');
    PERFORM workflow.release_job(wf_tap.fx('p.rel'), wf_tap.fx('p.rel.token'));

    PERFORM workflow.enqueue('err.p.retry');
    PERFORM wf_tap.claim_into('p.retry', 'err.p.retry');
    PERFORM workflow.fail_job(wf_tap.fx('p.retry'), wf_tap.fx('p.retry.token'),
                              'err.transient', 'try again', true);

    INSERT INTO wf_tap.fx VALUES ('p.new', workflow.enqueue('err.p.new'));

    -- idem: a run started under an idempotency key
    INSERT INTO wf_tap.fx VALUES ('idem', workflow.start_run(
        '{"steps": [{"key": "a", "job_type": "err.idem"}]}', NULL, 'err-key'));
END
$$;

-- The fixtures are in the states the checks below rely on.
SELECT is(
    (SELECT string_agg(k || '=' || status::text, ',' ORDER BY k) FROM (
        SELECT f.k, j.status FROM wf_tap.fx f JOIN workflow.job_queue j ON j.id = f.v
         WHERE f.k LIKE 'p.%' AND f.k NOT LIKE '%.token') s),
    'p.canc=CANCELED,p.fail=FAILED,p.new=QUEUED,p.rel=QUEUED,p.retry=QUEUED,p.run=RUNNING,p.succ=SUCCEEDED',
    'plain job fixtures are in the intended states');
SELECT is(
    (SELECT string_agg(k || '=' || status::text, ',' ORDER BY k) FROM (
        SELECT f.k, r.status FROM wf_tap.fx f JOIN workflow.workflow_runs r ON r.id = f.v) s),
    'canceled=CANCELED,done=WAITING_FOR_EXTERNAL,idem=RUNNING,org=WAITING_FOR_EXTERNAL,'
    'r1=RUNNING,runcancel=CANCELED,running=RUNNING,succeeded=SUCCEEDED,unsat=COMPLETED_WITH_ERRORS',
    'run fixtures are in the intended states');

-- ---------------------------------------------------------------------------
-- 22023 workflow.invalid_definition (start_run)

SELECT is(wf_tap.err($$SELECT workflow.start_run(NULL)$$),
    '22023 workflow.invalid_definition', 'start_run(NULL)');
SELECT is(wf_tap.err($$SELECT workflow.start_run('[]')$$),
    '22023 workflow.invalid_definition', 'a definition that is not an object');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{}')$$),
    '22023 workflow.invalid_definition', 'a definition without steps');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": []}')$$),
    '22023 workflow.invalid_definition', 'an empty steps array');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [
        {"key": "a", "job_type": "x"}, {"key": "a", "job_type": "x"}]}')$$),
    '22023 workflow.invalid_definition', 'a duplicate step key');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [{"key": "a b", "job_type": "x"}]}')$$),
    '22023 workflow.invalid_definition', 'a step key outside ^[A-Za-z0-9_.:-]{1,128}$');
SELECT is(wf_tap.err($$SELECT workflow.start_run(jsonb_build_object('steps', jsonb_build_array(
        jsonb_build_object('key', repeat('k', 129), 'job_type', 'x'))))$$),
    '22023 workflow.invalid_definition', 'a step key of 129 characters');
SELECT is(wf_tap.err($$SELECT workflow.start_run(jsonb_build_object('steps', jsonb_build_array(
        jsonb_build_object('key', repeat('k', 128), 'job_type', 'err.longkey'))))$$),
    'ok', 'a step key of 128 characters is accepted');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [
        {"key": "a", "job_type": "x", "depends_on": ["zz"]}]}')$$),
    '22023 workflow.invalid_definition', 'an unknown dependency');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [
        {"key": "a", "job_type": "x", "depends_on": ["a"]}]}')$$),
    '22023 workflow.invalid_definition', 'a self-edge');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [
        {"key": "a", "job_type": "x"},
        {"key": "b", "job_type": "x", "depends_on": ["a", {"step": "a", "release": "on_terminal"}]}]}')$$),
    '22023 workflow.invalid_definition', 'a duplicate edge');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [
        {"key": "a", "job_type": "x", "depends_on": ["c"]},
        {"key": "b", "job_type": "x", "depends_on": ["a"]},
        {"key": "c", "job_type": "x", "depends_on": ["b"]}]}')$$),
    '22023 workflow.invalid_definition', 'a cycle');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [{"key": "a"}]}')$$),
    '22023 workflow.invalid_definition', 'a job step without job_type');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [
        {"key": "a", "kind": "external", "job_type": "x"}]}')$$),
    '22023 workflow.invalid_definition', 'an external step with a job_type');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"result_step": "zz", "steps": [
        {"key": "a", "job_type": "x"}]}')$$),
    '22023 workflow.invalid_definition', 'a result_step that is not a step');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [
        {"key": "a", "job_type": "x", "depend_on": ["b"]}, {"key": "b", "job_type": "x"}]}')$$),
    '22023 workflow.invalid_definition', 'an unknown step key (depend_on)');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"stepz": [], "steps": [
        {"key": "a", "job_type": "x"}]}')$$),
    '22023 workflow.invalid_definition', 'an unknown definition key');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [
        {"key": "a", "job_type": "x", "kind": "timer"}]}')$$),
    '22023 workflow.invalid_definition', 'an unknown kind');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [
        {"key": "a", "job_type": "x"},
        {"key": "b", "job_type": "x", "depends_on": [{"step": "a", "release": "always"}]}]}')$$),
    '22023 workflow.invalid_definition', 'an unknown release mode');
SELECT is(wf_tap.err($$SELECT workflow.start_run(jsonb_build_object('steps', jsonb_build_array(
        jsonb_build_object('key', 'a', 'job_type', repeat('x', 129)))))$$),
    '22023 workflow.invalid_definition', 'a job_type over 128 bytes');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [
        {"key": "a", "job_type": "x", "max_attempts": 0}]}')$$),
    '22023 workflow.invalid_definition', 'max_attempts 0');

-- ---------------------------------------------------------------------------
-- 22023 workflow.external_completion_invalid_status / _output_invalid

SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'RUNNING')$$,
        wf_tap.fx('r1'))),
    '22023 workflow.external_completion_invalid_status', 'external completion with status RUNNING');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'BLOCKED')$$,
        wf_tap.fx('r1'))),
    '22023 workflow.external_completion_invalid_status', 'external completion with status BLOCKED');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'ENQUEUED')$$,
        wf_tap.fx('r1'))),
    '22023 workflow.external_completion_invalid_status', 'external completion with status ENQUEUED');
SELECT is(wf_tap.err(format(
        $$SELECT workflow.complete_external_step(%L, 'wait', 'WAITING_FOR_EXTERNAL')$$,
        wf_tap.fx('r1'))),
    '22023 workflow.external_completion_invalid_status',
    'external completion with status WAITING_FOR_EXTERNAL');
SELECT is(wf_tap.err(format(
        $$SELECT workflow.complete_external_step(%L, 'wait', 'FAILED', '{"x": 1}')$$,
        wf_tap.fx('r1'))),
    '22023 workflow.external_completion_output_invalid', 'output with status FAILED');
SELECT is(wf_tap.err(format(
        $$SELECT workflow.complete_external_step(%L, 'wait', 'CANCELED', '{"x": 1}')$$,
        wf_tap.fx('r1'))),
    '22023 workflow.external_completion_output_invalid', 'output with status CANCELED');
SELECT is(wf_tap.err(format(
        $$SELECT workflow.complete_external_step(%L, 'wait', 'RUNNING', '{"x": 1}')$$,
        wf_tap.fx('r1'))),
    '22023 workflow.external_completion_invalid_status',
    'the status is checked before the output');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'j', 'RUNNING')$$,
        wf_tap.fx('r1'))),
    '55000 workflow.external_step_not_external',
    'not_external is checked before the status');

-- ---------------------------------------------------------------------------
-- 22023 job.invalid_argument

SELECT is(wf_tap.err($$SELECT * FROM workflow.claim('w', NULL, 0)$$),
    '22023 job.invalid_argument', 'claim with batch_size 0');
SELECT is(wf_tap.err($$SELECT * FROM workflow.claim('w', NULL, 1001)$$),
    '22023 job.invalid_argument', 'claim with batch_size 1001');
SELECT is(wf_tap.err($$SELECT * FROM workflow.claim('w', NULL, NULL)$$),
    '22023 job.invalid_argument', 'claim with batch_size NULL');
SELECT is(wf_tap.err($$SELECT * FROM workflow.claim('w', ARRAY['err.none'], 1000)$$),
    'ok', 'claim with batch_size 1000 is accepted');
SELECT is(wf_tap.err($$SELECT * FROM workflow.claim('w', ARRAY[]::text[])$$),
    '22023 job.invalid_argument', 'claim with an empty job_types array');
SELECT is(wf_tap.err($$SELECT * FROM workflow.claim('w', ARRAY[NULL]::text[])$$),
    '22023 job.invalid_argument', 'claim with a NULL job type');
SELECT is(wf_tap.err($$SELECT * FROM workflow.claim(NULL)$$),
    '22023 job.invalid_argument', 'claim with worker_id NULL');
SELECT is(wf_tap.err($$SELECT workflow.enqueue(NULL)$$),
    '22023 job.invalid_argument', 'enqueue with job_type NULL');
SELECT is(wf_tap.err($$SELECT workflow.enqueue('x', NULL)$$),
    '22023 job.invalid_argument', 'enqueue with payload NULL');
SELECT is(wf_tap.err($$SELECT workflow.enqueue(repeat('x', 129))$$),
    '22023 job.invalid_argument', 'enqueue with a job_type over 128 bytes');
SELECT is(wf_tap.err($$SELECT workflow.enqueue('x', '{}', 0, now(), 0)$$),
    '22023 job.invalid_argument', 'enqueue with max_attempts 0');
SELECT is(wf_tap.err($$SELECT workflow.heartbeat(NULL, NULL)$$),
    '22023 job.invalid_argument', 'heartbeat(NULL, NULL)');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_job(%L, NULL)$$, wf_tap.fx('p.run'))),
    '22023 job.invalid_argument', 'complete_job with lease_token NULL');
SELECT is(wf_tap.err(format($$SELECT workflow.fail_job(%L, %L, NULL, 'm')$$,
        wf_tap.fx('p.run'), wf_tap.fx('p.run.token'))),
    '22023 job.invalid_argument', 'fail_job with error_code NULL');
-- complete_and_claim checks every argument, the claim's too, before it
-- completes anything: p.run stays RUNNING through all of these.
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_and_claim(%L, NULL, NULL, 'w')$$,
        wf_tap.fx('p.run'))),
    '22023 job.invalid_argument', 'complete_and_claim with lease_token NULL');
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, NULL, NULL)$$,
        wf_tap.fx('p.run'), wf_tap.fx('p.run.token'))),
    '22023 job.invalid_argument', 'complete_and_claim with worker_id NULL');
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, NULL, 'w', NULL, 0)$$,
        wf_tap.fx('p.run'), wf_tap.fx('p.run.token'))),
    '22023 job.invalid_argument', 'complete_and_claim with batch_size 0');
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, NULL, 'w', NULL, 1001)$$,
        wf_tap.fx('p.run'), wf_tap.fx('p.run.token'))),
    '22023 job.invalid_argument', 'complete_and_claim with batch_size 1001');
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, NULL, 'w', ARRAY[]::text[])$$,
        wf_tap.fx('p.run'), wf_tap.fx('p.run.token'))),
    '22023 job.invalid_argument', 'complete_and_claim with an empty job_types array');
SELECT is((SELECT status::text FROM workflow.job_queue WHERE id = wf_tap.fx('p.run')), 'RUNNING',
    'a complete_and_claim refused for its claim arguments completed nothing');
SELECT is(wf_tap.err($$SELECT workflow.cancel_job(NULL)$$),
    '22023 job.invalid_argument', 'cancel_job(NULL)');
SELECT is(wf_tap.err($$SELECT workflow.cancel_run(NULL)$$),
    '22023 job.invalid_argument', 'cancel_run(NULL)');
SELECT is(wf_tap.err($$SELECT workflow.complete_external_step(NULL, 'wait', 'SUCCEEDED')$$),
    '22023 job.invalid_argument', 'complete_external_step with workflow_run_id NULL');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', NULL)$$,
        wf_tap.fx('r1'))),
    '22023 job.invalid_argument', 'complete_external_step with status NULL');
SELECT is(wf_tap.err($$SELECT * FROM workflow.complete_jobs(NULL, NULL)$$),
    '22023 job.invalid_argument', 'complete_jobs(NULL, NULL)');

SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_jobs(ARRAY[%L]::uuid[], ARRAY[]::uuid[])$$,
        wf_tap.fx('p.run'))),
    '22023 job.invalid_argument', 'complete_jobs with arrays of unequal length');
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.fail_jobs(ARRAY[%L]::uuid[], ARRAY[%L]::uuid[],
        ARRAY['e', 'f'], ARRAY['m'])$$, wf_tap.fx('p.run'), wf_tap.fx('p.run.token'))),
    '22023 job.invalid_argument', 'fail_jobs with arrays of unequal length');
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_jobs(ARRAY[%L, %L]::uuid[],
        ARRAY[%L, %L]::uuid[])$$, wf_tap.fx('p.run'), wf_tap.fx('p.run'),
        wf_tap.fx('p.run.token'), wf_tap.fx('p.run.token'))),
    '22023 job.invalid_argument', 'complete_jobs with a duplicate id');
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_jobs(ARRAY[%L]::uuid[], ARRAY[%L]::uuid[])$$,
        wf_tap.fx('p.run'), wf_tap.fx('p.run.token'))),
    'ok', 'complete_jobs accepts a claimed job with its token');
SELECT is((SELECT status::text FROM workflow.job_queue WHERE id = wf_tap.fx('p.run')),
    'SUCCEEDED', 'complete_jobs left the job SUCCEEDED');

-- ---------------------------------------------------------------------------
-- P0002 workflow.run_not_found, workflow.external_step_not_found, job.not_found

SELECT is(wf_tap.err($$SELECT workflow.complete_external_step(
        '00000000-0000-7000-8000-0000000000f1', 'wait', 'SUCCEEDED')$$),
    'P0002 workflow.run_not_found', 'complete_external_step for an unknown run');
SELECT is(wf_tap.err($$SELECT workflow.complete_external_step(
        '00000000-0000-7000-8000-0000000000f1', 'j', 'RUNNING', '{"x": 1}')$$),
    'P0002 workflow.run_not_found', 'an unknown run is reported before anything else');
SELECT is(wf_tap.err($$SELECT workflow.cancel_run('00000000-0000-7000-8000-0000000000f1')$$),
    'P0002 workflow.run_not_found', 'cancel_run for an unknown run');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'e', 'SUCCEEDED',
        organization_id => '22222222-0000-4000-8000-000000000002')$$, wf_tap.fx('org'))),
    'P0002 workflow.run_not_found', 'complete_external_step for another organization''s run');
SELECT is(wf_tap.err(format($$SELECT workflow.cancel_run(%L,
        organization_id => '22222222-0000-4000-8000-000000000002')$$, wf_tap.fx('org'))),
    'P0002 workflow.run_not_found', 'cancel_run for another organization''s run');
SELECT is(wf_tap.step_status('org', 'e'), 'WAITING_FOR_EXTERNAL',
    'the other organization''s calls changed nothing');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'nope', 'SUCCEEDED')$$,
        wf_tap.fx('r1'))),
    'P0002 workflow.external_step_not_found', 'complete_external_step for an unknown step');
SELECT is(wf_tap.err($$SELECT workflow.complete_job('00000000-0000-7000-8000-0000000000f2',
        '00000000-0000-4000-8000-0000000000f3')$$),
    'P0002 job.not_found', 'complete_job of an unknown job');
SELECT is(wf_tap.err($$SELECT workflow.fail_job('00000000-0000-7000-8000-0000000000f2',
        '00000000-0000-4000-8000-0000000000f3', 'e', 'm')$$),
    'P0002 job.not_found', 'fail_job of an unknown job');
SELECT is(wf_tap.err($$SELECT workflow.heartbeat('00000000-0000-7000-8000-0000000000f2',
        '00000000-0000-4000-8000-0000000000f3')$$),
    'P0002 job.not_found', 'heartbeat of an unknown job');
SELECT is(wf_tap.err($$SELECT workflow.release_job('00000000-0000-7000-8000-0000000000f2',
        '00000000-0000-4000-8000-0000000000f3')$$),
    'P0002 job.not_found', 'release_job of an unknown job');
SELECT is(wf_tap.err($$SELECT workflow.cancel_job('00000000-0000-7000-8000-0000000000f2')$$),
    'P0002 job.not_found', 'cancel_job of an unknown job');

-- ---------------------------------------------------------------------------
-- 55000 workflow.external_step_not_external, workflow.external_step_not_waiting,
-- workflow.run_already_terminal, job.canceled, job.not_running

SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'j', 'SUCCEEDED')$$,
        wf_tap.fx('r1'))),
    '55000 workflow.external_step_not_external', 'complete_external_step of a job step');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'blocked', 'SUCCEEDED')$$,
        wf_tap.fx('r1'))),
    '55000 workflow.external_step_not_waiting', 'complete_external_step of a BLOCKED step');
SELECT is(wf_tap.step_status('unsat', 'after'), 'CANCELED/workflow.dependency_unsatisfied',
    'the external dependent of a failed step was canceled by the engine');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'after', 'SUCCEEDED')$$,
        wf_tap.fx('unsat'))),
    '55000 workflow.external_step_not_waiting',
    'complete_external_step of a step canceled as dependency_unsatisfied');
SELECT is(wf_tap.step_status('canceled', 'e'), 'CANCELED/workflow.run_canceled',
    'cancel_run canceled the waiting external step');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'e', 'CANCELED')$$,
        wf_tap.fx('canceled'))),
    '55000 workflow.external_step_not_waiting',
    'complete_external_step of a step canceled with its run (even with status CANCELED)');
SELECT is(wf_tap.err(format($$SELECT workflow.cancel_run(%L)$$, wf_tap.fx('succeeded'))),
    '55000 workflow.run_already_terminal', 'cancel_run of a SUCCEEDED run');
SELECT is(wf_tap.err(format($$SELECT workflow.cancel_run(%L)$$, wf_tap.fx('unsat'))),
    '55000 workflow.run_already_terminal', 'cancel_run of a COMPLETED_WITH_ERRORS run');
SELECT is(workflow.cancel_run(wf_tap.fx('canceled')), 'CANCELED'::workflow.run_status,
    'cancel_run of a CANCELED run returns CANCELED');

SELECT is(wf_tap.err(format($$SELECT workflow.complete_job(%L, %L)$$,
        wf_tap.fx('p.canc'), wf_tap.fx('p.canc.token'))),
    '55000 job.canceled', 'complete_job of a canceled job');
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, NULL, 'w')$$,
        wf_tap.fx('p.canc'), wf_tap.fx('p.canc.token'))),
    '55000 job.canceled', 'complete_and_claim of a canceled job');
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_and_claim(%L, '00000000-0000-4000-8000-0000000000f3', NULL, 'w')$$,
        wf_tap.fx('p.run'))),
    '40001 job.lease_lost', 'complete_and_claim with a stale token');
SELECT is(wf_tap.err($$SELECT * FROM workflow.complete_and_claim('00000000-0000-7000-8000-0000000000f2',
        '00000000-0000-4000-8000-0000000000f3', NULL, 'w')$$),
    'P0002 job.not_found', 'complete_and_claim of an unknown job');
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, '{"r": 2}', 'w', ARRAY['err.none'])$$,
        wf_tap.fx('p.succ'), wf_tap.fx('p.succ.token'))),
    '55000 job.not_running', 'complete_and_claim of a SUCCEEDED job with another output');
SELECT is(wf_tap.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, '{"r": 1}', 'w', ARRAY['err.none'])$$,
        wf_tap.fx('p.succ'), wf_tap.fx('p.succ.token'))),
    'ok', 'an identical repeat through complete_and_claim returns quietly (and claims)');
SELECT is(wf_tap.err(format($$SELECT workflow.fail_job(%L, %L, 'e', 'm')$$,
        wf_tap.fx('p.canc'), wf_tap.fx('p.canc.token'))),
    '55000 job.canceled', 'fail_job of a canceled job');
SELECT is(wf_tap.err(format($$SELECT workflow.heartbeat(%L, %L)$$,
        wf_tap.fx('p.canc'), wf_tap.fx('p.canc.token'))),
    '55000 job.canceled', 'heartbeat of a canceled job');
SELECT is(wf_tap.err(format($$SELECT workflow.release_job(%L, %L)$$,
        wf_tap.fx('p.canc'), wf_tap.fx('p.canc.token'))),
    '55000 job.canceled', 'release_job of a canceled job');
SELECT is(wf_tap.err(format($$SELECT workflow.cancel_job(%L)$$, wf_tap.fx('p.canc'))),
    '55000 job.canceled', 'cancel_job of a CANCELED job');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_job(%L, '00000000-0000-4000-8000-0000000000f3')$$,
        wf_tap.fx('p.canc'))),
    '55000 job.canceled', 'job.canceled is checked before job.lease_lost');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_job(%L, %L)$$,
        wf_tap.fx('runcancel.a'), wf_tap.fx('runcancel.a.token'))),
    '55000 job.canceled', 'a worker finishing a job of a canceled run gets job.canceled');

SELECT is(wf_tap.err(format($$SELECT workflow.cancel_job(%L)$$, wf_tap.fx('p.succ'))),
    '55000 job.not_running', 'cancel_job of a SUCCEEDED job');
SELECT is(wf_tap.err(format($$SELECT workflow.cancel_job(%L)$$, wf_tap.fx('p.fail'))),
    '55000 job.not_running', 'cancel_job of a FAILED job');
SELECT is(wf_tap.err(format($$SELECT workflow.fail_job(%L, %L, 'e', 'm')$$,
        wf_tap.fx('p.succ'), wf_tap.fx('p.succ.token'))),
    '55000 job.not_running', 'fail_job of a SUCCEEDED job with its token');
SELECT is(wf_tap.err(format($$SELECT workflow.heartbeat(%L, %L)$$,
        wf_tap.fx('p.succ'), wf_tap.fx('p.succ.token'))),
    '55000 job.not_running', 'heartbeat of a SUCCEEDED job with its token');
SELECT is(wf_tap.err(format($$SELECT workflow.release_job(%L, %L)$$,
        wf_tap.fx('p.succ'), wf_tap.fx('p.succ.token'))),
    '55000 job.not_running', 'release_job of a SUCCEEDED job with its token');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_job(%L, %L, '{"r": 2}')$$,
        wf_tap.fx('p.succ'), wf_tap.fx('p.succ.token'))),
    '55000 job.not_running', 'complete_job of a SUCCEEDED job with another output');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_job(%L, %L)$$,
        wf_tap.fx('p.fail'), wf_tap.fx('p.fail.token'))),
    '55000 job.not_running', 'complete_job of a FAILED job with its token');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_job(%L, %L, '{"r": 1}')$$,
        wf_tap.fx('p.succ'), wf_tap.fx('p.succ.token'))),
    'ok', 'an identical repeat of complete_job returns quietly');
SELECT is(wf_tap.err(format($$SELECT workflow.fail_job(%L, %L, 'err.code', 'err message', false)$$,
        wf_tap.fx('p.fail'), wf_tap.fx('p.fail.token'))),
    'ok', 'an identical repeat of a fail_job that left the job FAILED returns quietly');

-- ---------------------------------------------------------------------------
-- 23505 workflow.idempotency_conflict and the external completion conflicts

SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "err.idem.other"}]}',
        NULL, 'err-key')$$),
    '23505 workflow.idempotency_conflict', 'the same idempotency key with another definition');
SELECT is(workflow.start_run('{"steps": [{"key": "a", "job_type": "err.idem"}]}', NULL, 'err-key'),
    wf_tap.fx('idem'), 'the same key with the same definition returns the first run');
SELECT isnt(workflow.start_run('{"steps": [{"key": "a", "job_type": "err.idem.other"}]}',
        '33333333-0000-4000-8000-000000000003', 'err-key'),
    wf_tap.fx('idem'), 'the same key in another organization is another run');

SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'FAILED')$$,
        wf_tap.fx('done'))),
    '23505 workflow.external_completion_conflict', 'a repeat with another status');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'CANCELED',
        NULL, 'other reason')$$, wf_tap.fx('done'))),
    '23505 workflow.external_completion_conflict', 'the status is compared before the metadata');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'SUCCEEDED',
        '{"a": 2}', 'reason-1', 'code-1', 'message-1')$$, wf_tap.fx('done'))),
    '23505 workflow.external_completion_output_conflict', 'a repeat with another output');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'SUCCEEDED',
        NULL, 'reason-1', 'code-1', 'message-1')$$, wf_tap.fx('done'))),
    '23505 workflow.external_completion_output_conflict', 'a repeat without the output');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'SUCCEEDED',
        '{"a": 2}', 'other reason')$$, wf_tap.fx('done'))),
    '23505 workflow.external_completion_output_conflict',
    'the output is compared before the metadata');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'SUCCEEDED',
        '{"a": 1, "b": [1, 2]}', 'other reason', 'code-1', 'message-1')$$, wf_tap.fx('done'))),
    '23505 workflow.external_completion_metadata_conflict', 'a repeat with another reason');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'SUCCEEDED',
        '{"a": 1, "b": [1, 2]}', 'reason-1', 'code-2', 'message-1')$$, wf_tap.fx('done'))),
    '23505 workflow.external_completion_metadata_conflict', 'a repeat with another error code');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'SUCCEEDED',
        '{"a": 1, "b": [1, 2]}', 'reason-1', 'code-1', 'message-2')$$, wf_tap.fx('done'))),
    '23505 workflow.external_completion_metadata_conflict', 'a repeat with another error message');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_external_step(%L, 'wait', 'SUCCEEDED',
        '{"a": 1, "b": [1, 2]}')$$, wf_tap.fx('done'))),
    '23505 workflow.external_completion_metadata_conflict', 'a repeat without the metadata');
SELECT is((SELECT row(s.status, s.output, s.status_reason, s.last_error_code, s.last_error_message)::text
             FROM workflow.complete_external_step(wf_tap.fx('done'), 'wait', 'SUCCEEDED',
                  '{"b": [1, 2],   "a": 1}', 'reason-1', 'code-1', 'message-1') s),
          row('SUCCEEDED'::workflow.step_status, '{"a": 1, "b": [1, 2]}'::jsonb,
              'reason-1', 'code-1', 'message-1')::text,
          'an identical repeat (output equal as jsonb) returns the step unchanged');

-- ---------------------------------------------------------------------------
-- 40001 job.lease_lost (workflow.release_conflict: see the header)

SELECT is(wf_tap.err(format($$SELECT workflow.complete_job(%L, '00000000-0000-4000-8000-0000000000f3')$$,
        wf_tap.fx('running.a'))),
    '40001 job.lease_lost', 'complete_job of a RUNNING job with a wrong token');
SELECT is(wf_tap.err(format($$SELECT workflow.heartbeat(%L, '00000000-0000-4000-8000-0000000000f3')$$,
        wf_tap.fx('running.a'))),
    '40001 job.lease_lost', 'heartbeat with a wrong token');
SELECT is(wf_tap.err(format($$SELECT workflow.fail_job(%L, '00000000-0000-4000-8000-0000000000f3',
        'e', 'm')$$, wf_tap.fx('running.a'))),
    '40001 job.lease_lost', 'fail_job with a wrong token');
SELECT is(wf_tap.err(format($$SELECT workflow.release_job(%L, '00000000-0000-4000-8000-0000000000f3')$$,
        wf_tap.fx('running.a'))),
    '40001 job.lease_lost', 'release_job with a wrong token');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_job(%L, '00000000-0000-4000-8000-0000000000f3')$$,
        wf_tap.fx('p.succ'))),
    '40001 job.lease_lost', 'job.lease_lost is checked before job.not_running');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_job(%L, %L)$$,
        wf_tap.fx('p.rel'), wf_tap.fx('p.rel.token'))),
    '40001 job.lease_lost', 'the old token after release_job');
SELECT is(wf_tap.err(format($$SELECT workflow.heartbeat(%L, %L)$$,
        wf_tap.fx('p.retry'), wf_tap.fx('p.retry.token'))),
    '40001 job.lease_lost', 'the old token after a retry');
SELECT is(wf_tap.err(format($$SELECT workflow.complete_job(%L, '00000000-0000-4000-8000-0000000000f3')$$,
        wf_tap.fx('p.new'))),
    '40001 job.lease_lost', 'complete_job of a job that was never claimed');
SELECT is((SELECT row(status, attempt)::text FROM workflow.job_queue WHERE id = wf_tap.fx('running.a')),
          row('RUNNING'::workflow.job_status, 1)::text,
          'the calls with a wrong token changed nothing');

-- ---------------------------------------------------------------------------
-- XX000 workflow.internal_state: direct writes the triggers refuse

SELECT is(wf_tap.err(format($$UPDATE workflow.workflow_steps SET status = 'SUCCEEDED'
        WHERE workflow_run_id = %L AND step_key = 'j'$$, wf_tap.fx('r1'))),
    'XX000 workflow.internal_state', 'a direct status change of an ENQUEUED step');
SELECT is(wf_tap.err(format($$UPDATE workflow.workflow_steps SET status = 'ENQUEUED'
        WHERE workflow_run_id = %L AND step_key = 'blocked'$$, wf_tap.fx('r1'))),
    'XX000 workflow.internal_state', 'a direct status change of a BLOCKED step');
SELECT is(wf_tap.err(format($$UPDATE workflow.workflow_steps SET status = 'SUCCEEDED'
        WHERE workflow_run_id = %L AND step_key = 'wait'$$, wf_tap.fx('r1'))),
    'XX000 workflow.internal_state', 'a direct status change of a waiting external step');
SELECT is(wf_tap.err(format($$UPDATE workflow.job_queue SET status = 'QUEUED' WHERE id = %L$$,
        wf_tap.fx('succeeded.a'))),
    'XX000 workflow.internal_state', 'an UPDATE that moves a SUCCEEDED step job back to QUEUED');
SELECT is(wf_tap.err(format($$UPDATE workflow.job_queue SET status = 'QUEUED' WHERE id = %L$$,
        wf_tap.fx('p.succ'))),
    'XX000 workflow.internal_state', 'an UPDATE that moves a SUCCEEDED plain job back to QUEUED');
SELECT is(wf_tap.err(format($$UPDATE workflow.job_queue SET status = 'QUEUED' WHERE id = %L$$,
        wf_tap.fx('p.fail'))),
    'XX000 workflow.internal_state', 'an UPDATE that moves a FAILED job back to QUEUED');
SELECT is(wf_tap.err(format($$UPDATE workflow.job_queue SET status = 'RUNNING' WHERE id = %L$$,
        wf_tap.fx('p.canc'))),
    'XX000 workflow.internal_state', 'an UPDATE that moves a CANCELED job to RUNNING');
SELECT is(wf_tap.err(format($$DELETE FROM workflow.job_queue j USING workflow.workflow_steps s
        WHERE s.job_id = j.id AND s.workflow_run_id = %L AND s.step_key = 'j'$$, wf_tap.fx('r1'))),
    'XX000 workflow.internal_state', 'a DELETE of an ENQUEUED step''s job');
SELECT is(wf_tap.err(format($$DELETE FROM workflow.job_queue WHERE id = %L$$,
        wf_tap.fx('running.a'))),
    'XX000 workflow.internal_state', 'a DELETE of a RUNNING step''s job');
SELECT is(wf_tap.step_status('r1', 'j') || ',' || wf_tap.step_status('r1', 'blocked') || ','
          || wf_tap.step_status('running', 'a'),
          'ENQUEUED,BLOCKED,RUNNING', 'the refused writes changed nothing');
SELECT is(wf_tap.err(format($$UPDATE workflow.workflow_steps SET priority = 7
        WHERE workflow_run_id = %L AND step_key = 'blocked'$$, wf_tap.fx('r1'))),
    'ok', 'an UPDATE of a step that leaves its status alone passes');
SELECT is(wf_tap.err(format($$DELETE FROM workflow.job_queue WHERE id = %L$$, wf_tap.fx('p.new'))),
    'ok', 'a DELETE of a plain job passes');

-- ---------------------------------------------------------------------------
-- The allowance codes (1.9): 23505 workflow.execution_allowance_conflict,
-- 55000 workflow.execution_allowance_ineligible, and the bad-input and
-- wrong-state codes increase_execution_allowance shares.
SELECT workflow.start_run('{"limits": {"node_execution_cap": 1}, "steps": [
    {"key": "a", "job_type": "errors.cap"}, {"key": "b", "job_type": "errors.cap"}]}') AS capped \gset
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "errors.nocap"}]}') AS uncapped \gset
SELECT is(wf_tap.err(format('SELECT workflow.increase_execution_allowance(%L, 2, 3)', :'capped')),
    '23505 workflow.execution_allowance_conflict', 'an increase from a cap that is not in force');
SELECT is(wf_tap.err(format('SELECT workflow.increase_execution_allowance(%L, 1, 2)', :'uncapped')),
    '55000 workflow.execution_allowance_ineligible', 'an increase for a run without node_execution_cap');
SELECT is(wf_tap.err(format('SELECT workflow.increase_execution_allowance(%L, 1, 1)', :'capped')),
    '22023 job.invalid_argument', 'an increase whose target is not above the expected cap');
SELECT is(wf_tap.err(format('SELECT workflow.increase_execution_allowance(%L, 1, 2)',
        '00000000-0000-7000-8000-000000000000')),
    'P0002 workflow.run_not_found', 'an increase for a run that does not exist');
SELECT is(wf_tap.err(format('SELECT workflow.cancel_run(%L)', :'capped')), 'ok', 'the capped run is canceled');
SELECT is(wf_tap.err(format('SELECT workflow.increase_execution_allowance(%L, 1, 2)', :'capped')),
    '55000 workflow.run_already_terminal', 'an increase for a finished run');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"limits": {"concurrency_cap": 0},
    "steps": [{"key": "a", "job_type": "errors.cap"}]}')$$),
    '22023 workflow.invalid_definition', 'a definition with a bad limit');

-- ---------------------------------------------------------------------------
-- The loop and continuation codes (1.12): 55000
-- workflow.continuation_ineligible, 23505 workflow.continuation_conflict,
-- and the codes a repeat step writes into its row.
SELECT workflow.start_run('{"steps": [{"key": "d", "job_type": "errors.loop"},
    {"key": "r", "kind": "repeat", "depends_on": ["d"], "back_to": ["d"],
     "while": "$.again", "max_iterations": 1}]}') AS looped \gset
SELECT is(wf_tap.err(format('SELECT count(*) FROM workflow.continuation_source(%L)', :'looped')),
    '55000 workflow.continuation_ineligible', 'a live run is no continuation source');
SELECT is(wf_tap.err($$SELECT workflow.complete_job(c.id, c.lease_token, '{"again": true}')
                        FROM workflow.claim('errors', ARRAY['errors.loop']) c$$),
    'ok', 'the loop reaches its bound');
SELECT is((SELECT last_error_code FROM workflow.workflow_steps
            WHERE workflow_run_id = :'looped' AND step_key = 'r'),
    'workflow.repeat_iteration_limit_exhausted', 'the exhausted repeat step carries its code');
SELECT is(wf_tap.err(format('SELECT workflow.continue_run(%L, 1, %L)', :'looped',
                            workflow.output_checksum('{"again": false}'))),
    '23505 workflow.continuation_conflict', 'a continuation from another output than the exhausted one');
SELECT is(wf_tap.err(format('SELECT workflow.continue_run(%L, 0, %L)', :'looped',
                            workflow.output_checksum('{"again": true}'))),
    '22023 job.invalid_argument', 'a continuation with no iteration');
SELECT is(wf_tap.err(format('SELECT workflow.continue_run(%L, 1, %L)', :'looped',
                            workflow.output_checksum('{"again": true}'))),
    'ok', 'the continuation of the exhausted loop');
SELECT is(wf_tap.err(format('SELECT workflow.continue_run(%L, 2, %L)', :'looped',
                            workflow.output_checksum('{"again": true}'))),
    '23505 workflow.continuation_conflict', 'a second continuation of another request');

SELECT * FROM finish();
ROLLBACK;
