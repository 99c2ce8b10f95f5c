-- 02_security.sql: docs/reference.md: pinned search_path, no unneeded
-- SECURITY DEFINER, schema ownership, and a search_path attack: look-alike
-- functions, operators and tables planted in public and pg_temp must not
-- change what the API does.
--
-- While the attacker's search_path is in force, no pgTAP function runs (its
-- own PL/pgSQL would resolve the planted operators too): results are
-- recorded in wf_tap tables through wf_tap.try(), the planted objects are
-- dropped, and only then are the results asserted.

CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS workflow;

\set ON_ERROR_STOP 1
SET client_min_messages = warning;

BEGIN;
SELECT plan(53);

CREATE SCHEMA wf_tap;

-- Runs sql and returns 'ok', or SQLSTATE and the code that begins the
-- message.  Everything is schema-qualified: it runs under the attacker's
-- search_path.
CREATE FUNCTION wf_tap.try(sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE OPERATOR(pg_catalog.||) ' '
        OPERATOR(pg_catalog.||) pg_catalog.split_part(SQLERRM, ':', 1);
END
$$;

CREATE TABLE wf_tap.results (k text PRIMARY KEY, v text);
CREATE TABLE wf_tap.claimed (LIKE workflow.job_queue);
CREATE TABLE wf_tap.ext_result (LIKE workflow.workflow_steps);

-- ---------------------------------------------------------------------------
-- Catalogue checks

SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'workflow'::regnamespace AND p.prosecdef
       AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c
                        WHERE c LIKE 'search_path=%')
$$, 'no SECURITY DEFINER function in schema workflow lacks a pinned search_path');

-- No function needs SECURITY DEFINER: since 1.3 every C entry point switches
-- to the extension's owner itself (06_privileges.sql checks each function,
-- 07_security_roles.sql repeats the attack below as the four roles).
SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'workflow'::regnamespace AND p.prosecdef
$$, 'no function in schema workflow is SECURITY DEFINER (none is documented)');

SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
      JOIN pg_catalog.pg_language l ON l.oid = p.prolang
     WHERE p.pronamespace = 'workflow'::regnamespace
       AND l.lanname <> 'c'
       AND NOT ('search_path=pg_catalog, pg_temp' = ANY (coalesce(p.proconfig, '{}')))
$$, 'every function in schema workflow is LANGUAGE C or SET search_path = pg_catalog, pg_temp');

SELECT cmp_ok((SELECT count(*)::int FROM pg_catalog.pg_proc p
                WHERE p.pronamespace = 'workflow'::regnamespace), '>=', 14,
              'the schema holds the API functions the checks above looked at');

SELECT is((SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'workflow'),
          (SELECT e.extowner FROM pg_catalog.pg_extension e WHERE e.extname = 'workflow'),
          'schema workflow is owned by the extension''s owner');

SELECT is_empty($$
    SELECT a.privilege_type FROM pg_catalog.pg_namespace n,
           aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) AS a
     WHERE n.nspname = 'workflow' AND a.grantee = 0 AND a.privilege_type = 'CREATE'
$$, 'PUBLIC cannot create objects in schema workflow');

SELECT is_empty($$
    SELECT format('%s %s', c.oid::regclass, c.relkind) FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'workflow'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                        WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                          AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e')
    UNION ALL
    SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'workflow'::regnamespace
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                        WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                          AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e')
$$, 'every relation and function in schema workflow belongs to the extension');

-- ---------------------------------------------------------------------------
-- Setup under the normal search_path

-- A job some other worker holds: claim must never take it again.
INSERT INTO wf_tap.results VALUES ('held_enqueued', workflow.enqueue('sp.plain', '{"held": true}')::text);
INSERT INTO wf_tap.results
SELECT 'held_job', c.id::text FROM workflow.claim('sp-holder', ARRAY['sp.plain']) c;
-- A due job of another type: a filtered claim must not take it.
INSERT INTO wf_tap.results VALUES ('other_job', workflow.enqueue('sp.other')::text);

-- Two organizations using the same idempotency key for the same definition.
INSERT INTO wf_tap.results VALUES
    ('idem_a', workflow.start_run('{"steps": [{"key": "a", "job_type": "sp.idem"}]}',
                                  '00000000-0000-4000-8000-00000000000a', 'sp-shared')::text),
    ('idem_b', workflow.start_run('{"steps": [{"key": "a", "job_type": "sp.idem"}]}',
                                  'ffffffff-0000-4000-8000-00000000000b', 'sp-shared')::text);
INSERT INTO wf_tap.results VALUES
    ('idem_b_again', workflow.start_run('{"steps": [{"key": "a", "job_type": "sp.idem"}]}',
                                        'ffffffff-0000-4000-8000-00000000000b', 'sp-shared')::text);

-- ---------------------------------------------------------------------------
-- Plant look-alikes in public and pg_temp

CREATE FUNCTION public.statement_timestamp() RETURNS timestamptz
    LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE FUNCTION public.now() RETURNS timestamptz
    LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz
    LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE FUNCTION public.transaction_timestamp() RETURNS timestamptz
    LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE FUNCTION public.gen_random_uuid() RETURNS uuid
    LANGUAGE sql AS $$SELECT '00000000-0000-4000-8000-000000000000'::uuid$$;
CREATE FUNCTION public.uuid_v7() RETURNS uuid
    LANGUAGE sql AS $$SELECT '00000000-0000-7000-8000-000000000000'::uuid$$;
CREATE FUNCTION public.make_interval(secs double precision) RETURNS interval
    LANGUAGE sql AS $$SELECT '-1 day'::interval$$;

CREATE FUNCTION public.wf_evil_uuid_eq(uuid, uuid) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR public.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = public.wf_evil_uuid_eq);
CREATE FUNCTION public.wf_evil_text_eq(text, text) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.wf_evil_text_eq);
CREATE FUNCTION public.wf_evil_text_ne(text, text) RETURNS boolean
    LANGUAGE sql AS 'SELECT false';
CREATE OPERATOR public.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = public.wf_evil_text_ne);
CREATE FUNCTION public.wf_evil_jsonb_eq(jsonb, jsonb) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR public.= (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = public.wf_evil_jsonb_eq);
CREATE FUNCTION public.wf_evil_status_eq(workflow.job_status, workflow.job_status) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR public.= (LEFTARG = workflow.job_status, RIGHTARG = workflow.job_status,
                          FUNCTION = public.wf_evil_status_eq);
CREATE FUNCTION public.wf_evil_ts_true(timestamptz, timestamptz) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR public.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz,
                           FUNCTION = public.wf_evil_ts_true);
CREATE OPERATOR public.< (LEFTARG = timestamptz, RIGHTARG = timestamptz,
                          FUNCTION = public.wf_evil_ts_true);
CREATE FUNCTION public.wf_evil_ts_plus(timestamptz, interval) RETURNS timestamptz
    LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE OPERATOR public.+ (LEFTARG = timestamptz, RIGHTARG = interval,
                          FUNCTION = public.wf_evil_ts_plus);
CREATE FUNCTION public.wf_evil_int_eq(integer, integer) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR public.= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.wf_evil_int_eq);
CREATE FUNCTION public.wf_evil_int_plus(integer, integer) RETURNS integer
    LANGUAGE sql AS 'SELECT 1000';
CREATE OPERATOR public.+ (LEFTARG = integer, RIGHTARG = integer,
                          FUNCTION = public.wf_evil_int_plus);

CREATE TABLE public.job_queue (LIKE workflow.job_queue);
CREATE TABLE public.workflow_runs (LIKE workflow.workflow_runs);
CREATE TABLE public.workflow_steps (LIKE workflow.workflow_steps);
CREATE TABLE public.workflow_step_dependencies (LIKE workflow.workflow_step_dependencies);

CREATE TEMP TABLE job_queue (LIKE workflow.job_queue);
CREATE TEMP TABLE workflow_runs (LIKE workflow.workflow_runs);
CREATE TEMP TABLE workflow_steps (LIKE workflow.workflow_steps);
CREATE TEMP TABLE workflow_step_dependencies (LIKE workflow.workflow_step_dependencies);
CREATE FUNCTION pg_temp.statement_timestamp() RETURNS timestamptz
    LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE FUNCTION pg_temp.gen_random_uuid() RETURNS uuid
    LANGUAGE sql AS $$SELECT '00000000-0000-4000-8000-000000000000'::uuid$$;

-- ---------------------------------------------------------------------------
-- The attack: public and pg_temp ahead of pg_catalog

SET search_path = public, pg_temp, pg_catalog;

-- queue API
INSERT INTO wf_tap.results VALUES ('plain_job', workflow.enqueue('sp.plain', '{"n": 1}')::text);
INSERT INTO wf_tap.results VALUES
    ('future_job', workflow.enqueue('sp.plain', '{"n": 2}', 0,
        pg_catalog.statement_timestamp() OPERATOR(pg_catalog.+) '1 hour'::interval)::text);
INSERT INTO wf_tap.claimed SELECT * FROM workflow.claim('sp-worker', ARRAY['sp.plain'], 10);
INSERT INTO wf_tap.results
SELECT 'heartbeat', workflow.heartbeat(c.id, c.lease_token)::text FROM wf_tap.claimed c;
INSERT INTO wf_tap.results
SELECT 'wrong_token', wf_tap.try(pg_catalog.format('SELECT workflow.complete_job(%L, %L)',
        c.id, '00000000-0000-4000-8000-000000000000'))
  FROM wf_tap.claimed c;
INSERT INTO wf_tap.results
SELECT 'held_wrong_token', wf_tap.try(pg_catalog.format('SELECT workflow.heartbeat(%L, %L)',
        r.v, '00000000-0000-4000-8000-000000000000'))
  FROM wf_tap.results r WHERE r.k OPERATOR(pg_catalog.=) 'held_job';
INSERT INTO wf_tap.results
SELECT 'complete', wf_tap.try(pg_catalog.format('SELECT workflow.complete_job(%L, %L, %L)',
        c.id, c.lease_token, '{"done": true}'))
  FROM wf_tap.claimed c;
INSERT INTO wf_tap.results
SELECT 'complete_other_output', wf_tap.try(pg_catalog.format(
        'SELECT workflow.complete_job(%L, %L, %L)', c.id, c.lease_token, '{"done": false}'))
  FROM wf_tap.claimed c;
INSERT INTO wf_tap.results VALUES ('reaped', workflow.reap_expired()::text);

-- workflow API
INSERT INTO wf_tap.results VALUES
    ('run', workflow.start_run(
        '{"name": "sp", "result_step": "b", "steps": [
            {"key": "a", "job_type": "sp.step"},
            {"key": "ext", "kind": "external", "depends_on": ["a"]},
            {"key": "b", "job_type": "sp.step", "depends_on": ["ext"]}]}',
        '11111111-0000-4000-8000-000000000001')::text);
INSERT INTO wf_tap.results
SELECT 'step_a_complete', wf_tap.try(pg_catalog.format(
        'SELECT workflow.complete_job(%L, %L, %L)', c.id, c.lease_token, '{"a": 1}'))
  FROM workflow.claim('sp-worker', ARRAY['sp.step']) c;
INSERT INTO wf_tap.results
SELECT 'ext_other_org', wf_tap.try(pg_catalog.format(
        'SELECT workflow.complete_external_step(%L, %L, %L, organization_id => %L)',
        r.v, 'ext', 'SUCCEEDED', '22222222-0000-4000-8000-000000000002'))
  FROM wf_tap.results r WHERE r.k OPERATOR(pg_catalog.=) 'run';
INSERT INTO wf_tap.ext_result
SELECT e.*
  FROM wf_tap.results r,
       LATERAL workflow.complete_external_step(r.v::uuid, 'ext', 'SUCCEEDED', '{"approved": true}',
           organization_id => '11111111-0000-4000-8000-000000000001') e
 WHERE r.k OPERATOR(pg_catalog.=) 'run';
INSERT INTO wf_tap.results
SELECT 'ext_other_output', wf_tap.try(pg_catalog.format(
        'SELECT workflow.complete_external_step(%L, %L, %L, %L)',
        r.v, 'ext', 'SUCCEEDED', '{"approved": false}'))
  FROM wf_tap.results r WHERE r.k OPERATOR(pg_catalog.=) 'run';
INSERT INTO wf_tap.results
SELECT 'cancel_other_org', wf_tap.try(pg_catalog.format(
        'SELECT workflow.cancel_run(%L, organization_id => %L)',
        r.v, '22222222-0000-4000-8000-000000000002'))
  FROM wf_tap.results r WHERE r.k OPERATOR(pg_catalog.=) 'run';
INSERT INTO wf_tap.results VALUES
    ('run2', workflow.start_run('{"steps": [{"key": "x", "job_type": "sp.cancel"}]}')::text);
INSERT INTO wf_tap.results
SELECT 'cancel', workflow.cancel_run(r.v::uuid)::text
  FROM wf_tap.results r WHERE r.k OPERATOR(pg_catalog.=) 'run2';
INSERT INTO wf_tap.results
SELECT 'idem_b_attack', workflow.start_run('{"steps": [{"key": "a", "job_type": "sp.idem"}]}',
        'ffffffff-0000-4000-8000-00000000000b', 'sp-shared')::text;
INSERT INTO wf_tap.results
SELECT 'idem_conflict', wf_tap.try(
    $$SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "sp.idem.other"}]}',
                                'ffffffff-0000-4000-8000-00000000000b', 'sp-shared')$$);

-- a join: completing one of its two prerequisites must not release it
INSERT INTO wf_tap.results VALUES
    ('join', workflow.start_run('{"steps": [
        {"key": "p1", "job_type": "sp.join.p1"}, {"key": "p2", "job_type": "sp.join.p2"},
        {"key": "j", "job_type": "sp.join.j", "depends_on": ["p1", "p2"]}]}')::text);
INSERT INTO wf_tap.results
SELECT 'join_p1_complete', wf_tap.try(pg_catalog.format(
        'SELECT workflow.complete_job(%L, %L)', c.id, c.lease_token))
  FROM workflow.claim('sp-worker', ARRAY['sp.join.p1']) c;

-- pg_temp first: temporary tables named like the extension's
SET search_path = pg_temp, public, pg_catalog;
INSERT INTO wf_tap.results VALUES ('tmp_job', workflow.enqueue('sp.tmp')::text);
INSERT INTO wf_tap.results
SELECT 'tmp_complete', wf_tap.try(pg_catalog.format(
        'SELECT workflow.complete_job(%L, %L)', c.id, c.lease_token))
  FROM workflow.claim('sp-tmp-worker', ARRAY['sp.tmp']) c;
INSERT INTO wf_tap.results VALUES
    ('tmp_run', workflow.start_run('{"steps": [{"key": "e", "kind": "external"}]}')::text);
INSERT INTO wf_tap.results
SELECT 'tmp_ext', wf_tap.try(pg_catalog.format(
        'SELECT workflow.complete_external_step(%L, %L, %L)', r.v, 'e', 'FAILED'))
  FROM wf_tap.results r WHERE r.k OPERATOR(pg_catalog.=) 'tmp_run';

-- Record what landed in the look-alike tables, then remove the look-alikes.
INSERT INTO wf_tap.results VALUES ('planted_rows', (
    (SELECT pg_catalog.count(*) FROM public.job_queue) OPERATOR(pg_catalog.+)
    (SELECT pg_catalog.count(*) FROM public.workflow_runs) OPERATOR(pg_catalog.+)
    (SELECT pg_catalog.count(*) FROM public.workflow_steps) OPERATOR(pg_catalog.+)
    (SELECT pg_catalog.count(*) FROM public.workflow_step_dependencies) OPERATOR(pg_catalog.+)
    (SELECT pg_catalog.count(*) FROM pg_temp.job_queue) OPERATOR(pg_catalog.+)
    (SELECT pg_catalog.count(*) FROM pg_temp.workflow_runs) OPERATOR(pg_catalog.+)
    (SELECT pg_catalog.count(*) FROM pg_temp.workflow_steps) OPERATOR(pg_catalog.+)
    (SELECT pg_catalog.count(*) FROM pg_temp.workflow_step_dependencies))::text);

RESET search_path;

DROP TABLE public.job_queue, public.workflow_runs, public.workflow_steps,
    public.workflow_step_dependencies;
DROP TABLE pg_temp.job_queue, pg_temp.workflow_runs, pg_temp.workflow_steps,
    pg_temp.workflow_step_dependencies;
DROP FUNCTION pg_temp.statement_timestamp(), pg_temp.gen_random_uuid();
DROP OPERATOR public.= (uuid, uuid), public.= (text, text), public.<> (text, text),
    public.= (jsonb, jsonb), public.= (workflow.job_status, workflow.job_status),
    public.<= (timestamptz, timestamptz), public.< (timestamptz, timestamptz),
    public.+ (timestamptz, interval), public.= (integer, integer), public.+ (integer, integer);
DROP FUNCTION public.statement_timestamp(), public.now(), public.clock_timestamp(),
    public.transaction_timestamp(), public.gen_random_uuid(), public.uuid_v7(),
    public.make_interval(double precision),
    public.wf_evil_uuid_eq(uuid, uuid), public.wf_evil_text_eq(text, text),
    public.wf_evil_text_ne(text, text), public.wf_evil_jsonb_eq(jsonb, jsonb),
    public.wf_evil_status_eq(workflow.job_status, workflow.job_status),
    public.wf_evil_ts_true(timestamptz, timestamptz),
    public.wf_evil_ts_plus(timestamptz, interval), public.wf_evil_int_eq(integer, integer),
    public.wf_evil_int_plus(integer, integer);

CREATE FUNCTION wf_tap.r(key text) RETURNS text
    LANGUAGE sql STABLE AS $$SELECT v FROM wf_tap.results WHERE k = key$$;

-- ---------------------------------------------------------------------------
-- What the API did under the attacker's search_path

SELECT is((SELECT count(*)::int FROM wf_tap.claimed), 1,
    'claim took exactly one job: not the held RUNNING one, not the future one, not another type');
SELECT is((SELECT id::text FROM wf_tap.claimed), wf_tap.r('plain_job'),
    'claim took the due QUEUED job of the requested type');
SELECT is((SELECT row(status, attempt, worker_id)::text FROM wf_tap.claimed),
          row('RUNNING'::workflow.job_status, 1, 'sp-worker')::text,
          'the claimed row is RUNNING, attempt 1, with the worker id');
SELECT ok((SELECT leased_until > statement_timestamp() + interval '290 seconds'
              AND leased_until < statement_timestamp() + interval '310 seconds'
             FROM wf_tap.claimed),
          'the lease ends timeout_seconds (300) after the real statement time');
SELECT ok((SELECT lease_token IS NOT NULL
              AND lease_token <> '00000000-0000-4000-8000-000000000000'
             FROM wf_tap.claimed),
          'the lease token comes from pg_catalog.gen_random_uuid, not the planted one');
SELECT ok((SELECT substr(id::text, 15, 1) = '7' AND id <> '00000000-0000-7000-8000-000000000000'
             FROM wf_tap.claimed),
          'the job id comes from workflow.uuid_v7, not a look-alike');
SELECT ok(wf_tap.r('heartbeat')::timestamptz > statement_timestamp() + interval '290 seconds',
    'heartbeat returned a lease end in the future');
SELECT is(wf_tap.r('wrong_token'), '40001 job.lease_lost',
    'complete_job with a wrong token raises job.lease_lost although the planted = says equal');
SELECT is(wf_tap.r('held_wrong_token'), '40001 job.lease_lost',
    'heartbeat of another worker''s job with a wrong token raises job.lease_lost');
SELECT is(wf_tap.r('complete'), 'ok', 'complete_job with the real token succeeded');
SELECT is((SELECT row(j.status, j.output, j.finished_at IS NOT NULL)::text
             FROM workflow.job_queue j WHERE j.id = wf_tap.r('plain_job')::uuid),
          row('SUCCEEDED'::workflow.job_status, '{"done": true}'::jsonb, true)::text,
          'the real workflow.job_queue row is SUCCEEDED with its output');
SELECT ok((SELECT j.finished_at > statement_timestamp() - interval '1 hour'
             FROM workflow.job_queue j WHERE j.id = wf_tap.r('plain_job')::uuid),
          'finished_at is the real time, not the planted statement_timestamp()');
SELECT is(wf_tap.r('complete_other_output'), '55000 job.not_running',
    'a repeat with another output is not taken for identical although the planted jsonb = says so');
SELECT is((SELECT row(j.status, j.attempt, j.worker_id)::text
             FROM workflow.job_queue j WHERE j.id = wf_tap.r('held_job')::uuid),
          row('RUNNING'::workflow.job_status, 1, 'sp-holder')::text,
          'the held job was neither claimed again nor reaped');
SELECT is(wf_tap.r('reaped'), '0', 'reap_expired expired nothing (no lease has expired)');
SELECT is((SELECT status::text FROM workflow.job_queue WHERE id = wf_tap.r('future_job')::uuid),
          'QUEUED', 'the job due in an hour stayed QUEUED');
SELECT is((SELECT status::text FROM workflow.job_queue WHERE id = wf_tap.r('other_job')::uuid),
          'QUEUED', 'the job of another type stayed QUEUED');
SELECT ok((SELECT run_at > statement_timestamp() + interval '50 minutes'
             FROM workflow.job_queue WHERE id = wf_tap.r('future_job')::uuid),
          'enqueue stored the run_at it was given');

SELECT ok((SELECT count(*) = 1 FROM workflow.workflow_runs r
            WHERE r.id = wf_tap.r('run')::uuid
              AND r.organization_id = '11111111-0000-4000-8000-000000000001'),
          'start_run wrote its run into workflow.workflow_runs');
SELECT is((SELECT count(*)::int FROM workflow.workflow_steps s
            WHERE s.workflow_run_id = wf_tap.r('run')::uuid), 3,
          'start_run wrote its three steps into workflow.workflow_steps');
SELECT is((SELECT count(*)::int FROM workflow.workflow_step_dependencies d
            WHERE d.workflow_run_id = wf_tap.r('run')::uuid), 2,
          'start_run wrote its two edges into workflow.workflow_step_dependencies');
SELECT is(wf_tap.r('step_a_complete'), 'ok', 'the root step''s job was claimed and completed');
SELECT is(wf_tap.r('ext_other_org'), 'P0002 workflow.run_not_found',
    'complete_external_step for another organization raises workflow.run_not_found');
SELECT is((SELECT row(e.step_key, e.status, e.output)::text FROM wf_tap.ext_result e),
          row('ext', 'SUCCEEDED'::workflow.step_status, '{"approved": true}'::jsonb)::text,
          'complete_external_step returned the completed step');
SELECT is(wf_tap.r('ext_other_output'), '23505 workflow.external_completion_output_conflict',
    'a repeat with another output conflicts although the planted jsonb = says equal');
SELECT is((SELECT string_agg(s.step_key || '=' || s.status, ',' ORDER BY s.step_key)
             FROM workflow.workflow_steps s WHERE s.workflow_run_id = wf_tap.r('run')::uuid),
          'a=SUCCEEDED,b=ENQUEUED,ext=SUCCEEDED',
          'the cascade released b once a and ext succeeded');
SELECT is((SELECT count(*)::int FROM workflow.job_queue j
             JOIN workflow.workflow_steps s ON s.job_id = j.id
            WHERE s.workflow_run_id = wf_tap.r('run')::uuid AND s.step_key = 'b'
              AND j.status = 'QUEUED' AND j.workflow_run_id = s.workflow_run_id), 1,
          'b''s job is QUEUED in the real workflow.job_queue');
SELECT is((SELECT status::text FROM workflow.workflow_runs WHERE id = wf_tap.r('run')::uuid),
          'RUNNING', 'the run is RUNNING again');
SELECT ok((SELECT s.dependency_count_pending = 0 AND s.dependency_count_unsatisfied = 0
             FROM workflow.workflow_steps s
            WHERE s.workflow_run_id = wf_tap.r('run')::uuid AND s.step_key = 'b'),
          'the cascade counted b''s dependency with the real + and -');
SELECT is(wf_tap.r('cancel_other_org'), 'P0002 workflow.run_not_found',
    'cancel_run for another organization raises workflow.run_not_found');
SELECT is(wf_tap.r('cancel'), 'CANCELED', 'cancel_run returned CANCELED');
SELECT is((SELECT r.status::text || '/' || j.status::text FROM workflow.workflow_runs r
             JOIN workflow.job_queue j ON j.workflow_run_id = r.id
            WHERE r.id = wf_tap.r('run2')::uuid),
          'CANCELED/CANCELED', 'the canceled run and its job are CANCELED');
SELECT ok((SELECT r.finished_at > statement_timestamp() - interval '1 hour'
             FROM workflow.workflow_runs r WHERE r.id = wf_tap.r('run2')::uuid),
          'the canceled run''s finished_at is the real time');
SELECT is(wf_tap.r('idem_conflict'), '23505 workflow.idempotency_conflict',
    'another definition under a used key conflicts although the planted jsonb = says equal');

SELECT is(wf_tap.r('idem_b_again'), wf_tap.r('idem_b'),
    'idempotency keys are scoped by organization (normal search_path)');
SELECT isnt(wf_tap.r('idem_a'), wf_tap.r('idem_b'),
    'the same key in two organizations made two runs');
-- IS NOT DISTINCT FROM would look = up on the search_path.
SELECT is(wf_tap.r('idem_b_attack'), wf_tap.r('idem_b'),
    'under the attack, an idempotent repeat returns its own organization''s run');

SELECT is(wf_tap.r('join_p1_complete'), 'ok', 'the first prerequisite of the join completed');
-- A simple CASE would look = up on the search_path.
SELECT is((SELECT s.status::text || ' pending=' || s.dependency_count_pending
                  || ' job=' || (s.job_id IS NOT NULL)::text
             FROM workflow.workflow_steps s
            WHERE s.workflow_run_id = wf_tap.r('join')::uuid AND s.step_key = 'j'),
          'BLOCKED pending=1 job=false',
          'under the attack, the join stays BLOCKED until its second prerequisite finishes');

SELECT is(wf_tap.r('tmp_complete'), 'ok',
    'with pg_temp first, a claimed job completes');
SELECT is((SELECT status::text FROM workflow.job_queue WHERE id = wf_tap.r('tmp_job')::uuid),
          'SUCCEEDED', 'with pg_temp first, the real workflow.job_queue row is SUCCEEDED');
SELECT is(wf_tap.r('tmp_ext'), 'ok', 'with pg_temp first, complete_external_step works');
SELECT is((SELECT status::text FROM workflow.workflow_runs WHERE id = wf_tap.r('tmp_run')::uuid),
          'COMPLETED_WITH_ERRORS', 'with pg_temp first, the run ends COMPLETED_WITH_ERRORS');
SELECT is(wf_tap.r('planted_rows'), '0',
    'no row landed in any look-alike table in public or pg_temp');

-- ---------------------------------------------------------------------------
-- Installation into a schema someone else owns must fail (docs/reference.md,
-- section 2).

DROP TABLE wf_tap.claimed, wf_tap.ext_result;
DROP EXTENSION workflow;
SELECT is((SELECT count(*)::int FROM pg_catalog.pg_extension WHERE extname = 'workflow'), 0,
    'the extension can be dropped');
DROP SCHEMA IF EXISTS workflow CASCADE;
CREATE ROLE wf_tap_squatter NOLOGIN;
CREATE SCHEMA workflow AUTHORIZATION wf_tap_squatter;
SELECT throws_ok('CREATE EXTENSION workflow', 'XX000',
    'workflow.internal_state: schema workflow is owned by another role',
    'CREATE EXTENSION workflow fails when another role owns schema workflow');

SELECT * FROM finish();
ROLLBACK;
