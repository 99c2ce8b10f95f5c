-- Run input and job_inputs: start_run stores the run's input (bounded like
-- a payload, part of its idempotency), and a worker holding a job reads
-- the run's input and its step's prerequisites' outputs (a root step, a
-- join, an ON_TERMINAL prerequisite that failed, a plain job), with the
-- errors of the other worker calls in their order, and another
-- organization's job looking like a missing one to a tenant role.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.organization_members;

\set org_a 'a0000000-0000-4000-8000-00000000000a'
\set org_b 'b0000000-0000-4000-8000-00000000000b'

-- err() shows a statement's SQLSTATE and stable code; errm() its SQLSTATE
-- and whole message with every uuid written <id>
CREATE FUNCTION pg_temp.err(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END $$;
CREATE FUNCTION pg_temp.errm(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || regexp_replace(SQLERRM,
        '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<id>', 'g');
END $$;

-- 1. The run's input is stored as given, NULL included.
SELECT workflow.start_run('{"steps": [
    {"key": "a", "job_type": "ji.a"},
    {"key": "b", "job_type": "ji.b"},
    {"key": "c", "job_type": "ji.c"},
    {"key": "j", "job_type": "ji.join",
     "depends_on": ["a", "b", {"step": "c", "release": "on_terminal"}]},
    {"key": "after", "job_type": "ji.after", "depends_on": ["j"]}]}',
    NULL, NULL, '{"order": 42, "items": ["x", "y"]}') AS r1 \gset
SELECT input FROM workflow.workflow_runs WHERE id = :'r1';
SELECT workflow.start_run('{"steps": [{"key": "solo", "job_type": "ji.solo"}]}') AS r2 \gset
SELECT input IS NULL AS no_input FROM workflow.workflow_runs WHERE id = :'r2';
SELECT workflow.start_run('{"steps": [{"key": "s", "job_type": "ji.scalar"}]}',
    input => '"just text"') AS r3 \gset
SELECT input FROM workflow.workflow_runs WHERE id = :'r3';

-- 2. A root step sees the run's input and no steps.
SELECT id AS ja, lease_token AS ta FROM workflow.claim('w', ARRAY['ji.a']) \gset
SELECT workflow.job_inputs(:'ja', :'ta');
SELECT workflow.complete_job(:'ja', :'ta', '{"a": 1}');
-- a root step of a run without input: JSON null
SELECT id AS js, lease_token AS ts FROM workflow.claim('w', ARRAY['ji.solo']) \gset
SELECT workflow.job_inputs(:'js', :'ts');
SELECT id AS jsc, lease_token AS tsc FROM workflow.claim('w', ARRAY['ji.scalar']) \gset
SELECT workflow.job_inputs(:'jsc', :'tsc');

-- 3. A join: every prerequisite, ON_SUCCESS and ON_TERMINAL alike; one
-- that succeeded without output and one that failed give JSON null.
SELECT id AS jb, lease_token AS tb FROM workflow.claim('w', ARRAY['ji.b']) \gset
SELECT workflow.complete_job(:'jb', :'tb');
SELECT id AS jc, lease_token AS tc FROM workflow.claim('w', ARRAY['ji.c']) \gset
SELECT workflow.fail_job(:'jc', :'tc', 'ji.broken', 'c broke', false);
SELECT step_key, status FROM workflow.workflow_steps WHERE workflow_run_id = :'r1' ORDER BY step_key;
SELECT id AS jj, lease_token AS tj FROM workflow.claim('w', ARRAY['ji.join']) \gset
SELECT workflow.job_inputs(:'jj', :'tj');
SELECT jsonb_object_keys(workflow.job_inputs(:'jj', :'tj')->'steps') AS prerequisite ORDER BY 1;
SELECT workflow.complete_job(:'jj', :'tj', '{"joined": true}');
-- the next step sees only its own prerequisite
SELECT id AS jn, lease_token AS tn FROM workflow.claim('w', ARRAY['ji.after']) \gset
SELECT workflow.job_inputs(:'jn', :'tn');

-- 4. A plain job has no run: no input, no steps.
SELECT workflow.enqueue('ji.plain', '{"p": 1}') AS jp \gset
SELECT lease_token AS tp FROM workflow.claim('w', ARRAY['ji.plain']) \gset
SELECT workflow.job_inputs(:'jp', :'tp');

-- 5. Errors, in the order of the other worker calls.
SELECT pg_temp.err(format('SELECT workflow.job_inputs(NULL, %L)', :'tp')) AS null_job,
       pg_temp.err(format('SELECT workflow.job_inputs(%L, NULL)', :'jp')) AS null_token;
SELECT pg_temp.errm(format('SELECT workflow.job_inputs(%L, %L)', gen_random_uuid(), :'tp')) AS missing;
-- lease lost: another token
SELECT pg_temp.errm(format('SELECT workflow.job_inputs(%L, %L)', :'jp', gen_random_uuid())) AS other_token;
-- not running: a finished job under its own token
SELECT pg_temp.errm(format('SELECT workflow.job_inputs(%L, %L)', :'ja', :'ta')) AS finished;
-- lease lost before not running: a finished job under another token
SELECT pg_temp.err(format('SELECT workflow.job_inputs(%L, %L)', :'ja', gen_random_uuid())) AS finished_other_token;
-- canceled comes before the token
SELECT workflow.cancel_job(:'jp');
SELECT pg_temp.errm(format('SELECT workflow.job_inputs(%L, %L)', :'jp', :'tp')) AS canceled,
       pg_temp.err(format('SELECT workflow.job_inputs(%L, %L)', :'jp', gen_random_uuid())) AS canceled_other_token;
-- a job released back to the queue holds no lease
SELECT workflow.enqueue('ji.released') AS jr \gset
SELECT lease_token AS tr FROM workflow.claim('w', ARRAY['ji.released']) \gset
SELECT workflow.release_job(:'jr', :'tr');
SELECT pg_temp.err(format('SELECT workflow.job_inputs(%L, %L)', :'jr', :'tr')) AS released;
-- like the other worker calls, READ COMMITTED only
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.err(format('SELECT workflow.job_inputs(%L, %L)', :'jn', :'tn')) AS repeatable_read;
ROLLBACK;
SELECT workflow.job_inputs(:'jn', :'tn') ->> 'input' AS still_held;

-- 6. start_run's idempotency covers the input: the same key, definition
-- and input return the first run; another input is a conflict.
SELECT workflow.start_run('{"steps": [{"key": "k", "job_type": "ji.idem"}]}',
    NULL, 'ji-key', '{"n": 1}') AS k1 \gset
SELECT workflow.start_run('{"steps": [{"key": "k", "job_type": "ji.idem"}]}',
    NULL, 'ji-key', '{"n": 1}') = :'k1' AS same_run;
SELECT pg_temp.errm($$SELECT workflow.start_run('{"steps": [{"key": "k", "job_type": "ji.idem"}]}',
    NULL, 'ji-key', '{"n": 2}')$$) AS other_input;
SELECT pg_temp.errm($$SELECT workflow.start_run('{"steps": [{"key": "k", "job_type": "ji.idem"}]}',
    NULL, 'ji-key')$$) AS no_input;
SELECT pg_temp.errm($$SELECT workflow.start_run('{"steps": [{"key": "k", "job_type": "ji.other"}]}',
    NULL, 'ji-key', '{"n": 1}')$$) AS other_definition;
SELECT workflow.start_run('{"steps": [{"key": "k", "job_type": "ji.idem"}]}',
    NULL, 'ji-key-null') AS k2 \gset
SELECT workflow.start_run('{"steps": [{"key": "k", "job_type": "ji.idem"}]}',
    NULL, 'ji-key-null', NULL) = :'k2' AS same_run_without_input;
SELECT pg_temp.err($$SELECT workflow.start_run('{"steps": [{"key": "k", "job_type": "ji.idem"}]}',
    NULL, 'ji-key-null', '{}')$$) AS input_where_none_was;
SELECT count(*) AS idempotent_runs FROM workflow.workflow_runs WHERE idempotency_key LIKE 'ji-key%';

-- 7. The input is bounded like a payload; nothing is written.
SET workflow.max_payload_bytes = 64;
SELECT pg_temp.errm($$SELECT workflow.start_run('{"steps": [{"key": "k", "job_type": "ji.big"}]}',
    input => jsonb_build_object('x', repeat('x', 100)))$$) AS too_big;
RESET workflow.max_payload_bytes;
SELECT count(*) AS big_runs FROM workflow.workflow_steps WHERE job_type = 'ji.big';

-- 8. Another organization's job is, to a tenant role, a missing job.
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_ji_worker_a, regress_ji_tenant_a;
RESET client_min_messages;
CREATE ROLE regress_ji_tenant_a NOLOGIN;
CREATE ROLE regress_ji_worker_a LOGIN IN ROLE workflow_worker, regress_ji_tenant_a;
SELECT workflow.grant_organization('regress_ji_tenant_a', :'org_a');
SELECT workflow.start_run('{"steps": [{"key": "ta", "job_type": "ji.tenant"}]}',
    :'org_a', NULL, '{"org": "A"}') AS ra \gset
SELECT workflow.start_run('{"steps": [{"key": "tb", "job_type": "ji.tenant"}]}',
    :'org_b', NULL, '{"org": "B"}') AS rb \gset
SELECT id AS jta, lease_token AS tta FROM workflow.claim('w', ARRAY['ji.tenant'], 1, :'org_a') \gset
SELECT id AS jtb, lease_token AS ttb FROM workflow.claim('w', ARRAY['ji.tenant'], 1, :'org_b') \gset
SET ROLE regress_ji_worker_a;
SELECT workflow.job_inputs(:'jta', :'tta') AS own_job;
SELECT pg_temp.errm(format('SELECT workflow.job_inputs(%L, %L)', :'jtb', :'ttb')) AS other_org,
       pg_temp.errm(format('SELECT workflow.job_inputs(%L, %L)', :'jtb', :'ttb'))
     = pg_temp.errm(format('SELECT workflow.job_inputs(%L, %L)', gen_random_uuid(), :'ttb')) AS same_as_missing;
RESET ROLE;
-- an unscoped caller sees it
SELECT workflow.job_inputs(:'jtb', :'ttb') AS unscoped;
SELECT workflow.revoke_organization('regress_ji_tenant_a', :'org_a');
DROP ROLE regress_ji_worker_a, regress_ji_tenant_a;

-- 9. job_step_key (1.8): the key of the held job's step (one the
-- completion released too), NULL for a plain job, the errors of job_inputs
-- in their order, and another organization's job missing to a tenant role.
SELECT workflow.start_run('{"steps": [{"key": "sk.first", "job_type": "ji.key"},
    {"key": "sk.second", "job_type": "ji.key", "depends_on": ["sk.first"]}]}') AS rk \gset
SELECT workflow.enqueue('ji.key') AS plain_key_job \gset
SELECT c.workflow_step_id IS NULL AS plain, workflow.job_step_key(c.id, c.lease_token) AS step_key
  FROM workflow.claim('w', ARRAY['ji.key'], 5) c ORDER BY 2 NULLS FIRST;
SELECT id AS jk, lease_token AS tk FROM workflow.job_queue
 WHERE job_type = 'ji.key' AND workflow_step_id IS NOT NULL \gset
SELECT count(*) AS claimed_second FROM workflow.complete_and_claim(:'jk', :'tk', NULL, 'w', ARRAY['ji.key']);
SELECT workflow.job_step_key(id, lease_token) AS released_key
  FROM workflow.job_queue WHERE job_type = 'ji.key' AND status = 'RUNNING' AND workflow_step_id IS NOT NULL;
SELECT pg_temp.err(format('SELECT workflow.job_step_key(%L, %L)', :'jk', :'tk')) AS done_job,
       pg_temp.err(format('SELECT workflow.job_step_key(%L, %L)', :'jk', gen_random_uuid())) AS wrong_token,
       pg_temp.err(format('SELECT workflow.job_step_key(%L, %L)', gen_random_uuid(), :'tk')) AS missing_job,
       pg_temp.err(format('SELECT workflow.job_step_key(NULL, %L)', :'tk')) AS null_job,
       pg_temp.err(format('SELECT workflow.job_step_key(%L, NULL)', :'jk')) AS null_token;
SELECT workflow.cancel_job(:'plain_key_job');
SELECT pg_temp.err(format('SELECT workflow.job_step_key(%L, %L)', :'plain_key_job',
    (SELECT lease_token FROM workflow.job_queue WHERE id = :'plain_key_job'))) AS canceled_job;
-- a tenant worker: its own job's key; another organization's job is missing
CREATE ROLE regress_ji_tenant_k NOLOGIN;
CREATE ROLE regress_ji_worker_k LOGIN IN ROLE workflow_worker, regress_ji_tenant_k;
SELECT workflow.grant_organization('regress_ji_tenant_k', :'org_a');
SELECT workflow.start_run('{"steps": [{"key": "own", "job_type": "ji.tkey"}]}', :'org_a') AS rka \gset
SELECT workflow.start_run('{"steps": [{"key": "theirs", "job_type": "ji.tkey"}]}', :'org_b') AS rkb \gset
SELECT id AS jka, lease_token AS tka FROM workflow.claim('w', ARRAY['ji.tkey'], 1, :'org_a') \gset
SELECT id AS jkb, lease_token AS tkb FROM workflow.claim('w', ARRAY['ji.tkey'], 1, :'org_b') \gset
SET ROLE regress_ji_worker_k;
SELECT workflow.job_step_key(:'jka', :'tka') AS own_key;
SELECT pg_temp.err(format('SELECT workflow.job_step_key(%L, %L)', :'jkb', :'tkb')) AS other_org;
RESET ROLE;
SELECT workflow.job_step_key(:'jkb', :'tkb') AS unscoped_key;
SELECT workflow.revoke_organization('regress_ji_tenant_k', :'org_a');
DROP ROLE regress_ji_worker_k, regress_ji_tenant_k;
