-- 04_isolation_repeatable_read.sql: workflow.unsupported_isolation (25000).
-- Every function except enqueue (and the read-only ones) requires READ
-- COMMITTED and checks it on entry, so the check comes before any lookup:
-- the ids below need not exist.  The isolation level can only be chosen
-- when a transaction starts, hence this file's own transaction.

CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS workflow;

\set ON_ERROR_STOP 1
SET client_min_messages = warning;

BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT plan(19);

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

SELECT is(current_setting('transaction_isolation'), 'repeatable read',
    'this transaction runs REPEATABLE READ');

SELECT is(wf_tap.err($$SELECT workflow.enqueue('iso.rr')$$), 'ok',
    'enqueue works under REPEATABLE READ');
SELECT is((SELECT count(*)::int FROM workflow.job_queue WHERE job_type = 'iso.rr'), 1,
    'the enqueued job is in workflow.job_queue');

SELECT is(wf_tap.err($$SELECT * FROM workflow.claim('w', ARRAY['iso.rr'])$$),
    '25000 workflow.unsupported_isolation', 'claim of a due plain job');
SELECT is(wf_tap.err($$SELECT * FROM workflow.claim('w', ARRAY['iso.none'])$$),
    '25000 workflow.unsupported_isolation', 'claim that would find nothing');
SELECT is(wf_tap.err($$SELECT * FROM workflow.claim('w', ARRAY[]::text[])$$),
    '25000 workflow.unsupported_isolation', 'the isolation check comes before argument checks');
SELECT is((SELECT status::text FROM workflow.job_queue WHERE job_type = 'iso.rr'), 'QUEUED',
    'the refused claim left the job QUEUED');
SELECT is(wf_tap.err($$SELECT workflow.heartbeat('00000000-0000-7000-8000-000000000001',
        '00000000-0000-4000-8000-000000000002')$$),
    '25000 workflow.unsupported_isolation', 'heartbeat');
SELECT is(wf_tap.err($$SELECT workflow.complete_job('00000000-0000-7000-8000-000000000001',
        '00000000-0000-4000-8000-000000000002')$$),
    '25000 workflow.unsupported_isolation', 'complete_job');
SELECT is(wf_tap.err($$SELECT * FROM workflow.complete_and_claim('00000000-0000-7000-8000-000000000001',
        '00000000-0000-4000-8000-000000000002', NULL, 'w')$$),
    '25000 workflow.unsupported_isolation', 'complete_and_claim');
SELECT is(wf_tap.err($$SELECT workflow.fail_job('00000000-0000-7000-8000-000000000001',
        '00000000-0000-4000-8000-000000000002', 'e', 'm')$$),
    '25000 workflow.unsupported_isolation', 'fail_job');
SELECT is(wf_tap.err($$SELECT workflow.release_job('00000000-0000-7000-8000-000000000001',
        '00000000-0000-4000-8000-000000000002')$$),
    '25000 workflow.unsupported_isolation', 'release_job');
SELECT is(wf_tap.err($$SELECT workflow.cancel_job('00000000-0000-7000-8000-000000000001')$$),
    '25000 workflow.unsupported_isolation', 'cancel_job');
SELECT is(wf_tap.err($$SELECT workflow.reap_expired()$$),
    '25000 workflow.unsupported_isolation', 'reap_expired');
SELECT is(wf_tap.err($$SELECT * FROM workflow.complete_jobs(
        ARRAY['00000000-0000-7000-8000-000000000001']::uuid[],
        ARRAY['00000000-0000-4000-8000-000000000002']::uuid[])$$),
    '25000 workflow.unsupported_isolation', 'complete_jobs');
SELECT is(wf_tap.err($$SELECT * FROM workflow.fail_jobs(
        ARRAY['00000000-0000-7000-8000-000000000001']::uuid[],
        ARRAY['00000000-0000-4000-8000-000000000002']::uuid[], ARRAY['e'], ARRAY['m'])$$),
    '25000 workflow.unsupported_isolation', 'fail_jobs');
SELECT is(wf_tap.err($$SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "iso.rr.step"}]}')$$),
    '25000 workflow.unsupported_isolation', 'start_run');
SELECT is(wf_tap.err($$SELECT workflow.complete_external_step('00000000-0000-7000-8000-000000000003',
        'e', 'SUCCEEDED')$$),
    '25000 workflow.unsupported_isolation', 'complete_external_step');
SELECT is(wf_tap.err($$SELECT workflow.cancel_run('00000000-0000-7000-8000-000000000003')$$),
    '25000 workflow.unsupported_isolation', 'cancel_run');

SELECT * FROM finish();
ROLLBACK;
