-- 07_security_roles.sql: the search_path attack of 02_security.sql, made by
-- the roles of docs/reference.md.  Engine statements run
-- as the extension's owner since 1.3, so a look-alike the engine picked up
-- would run with the owner's rights: functions, operators, aggregates and
-- types planted in public, and tables planted in pg_temp, by a role that
-- may create there, must not be called or written to while login roles
-- holding workflow_worker, workflow_client, workflow_reader and
-- workflow_admin (the first three confined to one organization) use the
-- API with public, or pg_temp, ahead of pg_catalog.
--
-- Every planted function, operator and aggregate writes who called it, as
-- which current user, into wf_tap.planted_calls.  While a planted search_path
-- is in force, no pgTAP function runs (its own PL/pgSQL would resolve the
-- planted objects too) and everything the tests type is schema-qualified:
-- results go to wf_tap tables, the planted objects are dropped, and only
-- then are the results asserted.  At the end, calls typed by the roles
-- themselves show that every planted object is really found first on
-- their search_path.

CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS workflow;

\set ON_ERROR_STOP 1
SET client_min_messages = warning;

BEGIN;
SELECT plan(64);

CREATE SCHEMA wf_tap;
GRANT USAGE ON SCHEMA wf_tap TO PUBLIC;

-- Runs sql and returns 'ok', or SQLSTATE and the code that begins the
-- message.  Everything is schema-qualified: it runs under the planted
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
CREATE TABLE wf_tap.fx (k text PRIMARY KEY, v uuid NOT NULL);
CREATE TABLE wf_tap.claimed (
    who text NOT NULL, id uuid, lease_token uuid, status workflow.job_status,
    attempt integer, worker_id text, organization_id uuid, leased_until timestamptz,
    stage text
);
CREATE TABLE wf_tap.ext_result (step_key text, status workflow.step_status, output jsonb);
CREATE TABLE wf_tap.planted_calls (
    n serial PRIMARY KEY, fn text NOT NULL, by_user name NOT NULL, session_user_name name NOT NULL
);
CREATE TABLE wf_tap.engine_calls (LIKE wf_tap.planted_calls);
GRANT SELECT, INSERT ON wf_tap.results, wf_tap.claimed, wf_tap.ext_result,
    wf_tap.planted_calls TO PUBLIC;
GRANT SELECT ON wf_tap.fx TO PUBLIC;
GRANT USAGE ON SEQUENCE wf_tap.planted_calls_n_seq TO PUBLIC;

-- ---------------------------------------------------------------------------
-- Roles: a login role holding each of the four; worker, client and reader
-- confined to organization A through wf_tap_org_a; the admin unconfined; a
-- planter that may create objects in public.

CREATE ROLE wf_tap_org_a NOLOGIN;
CREATE ROLE wf_tap_org_c NOLOGIN;
CREATE ROLE wf_tap_worker LOGIN IN ROLE workflow_worker, wf_tap_org_a;
CREATE ROLE wf_tap_client LOGIN IN ROLE workflow_client, wf_tap_org_a;
CREATE ROLE wf_tap_reader LOGIN IN ROLE workflow_reader, wf_tap_org_a;
CREATE ROLE wf_tap_admin LOGIN IN ROLE workflow_admin;
CREATE ROLE wf_tap_planter NOLOGIN IN ROLE workflow_reader;
GRANT CREATE ON SCHEMA public TO wf_tap_planter;

INSERT INTO wf_tap.results VALUES
    ('grant_a', workflow.grant_organization('wf_tap_org_a',
                                            'aaaaaaaa-0000-4000-8000-00000000000a')::text);

-- ---------------------------------------------------------------------------
-- Fixture under the normal search_path, as the superuser

-- a job of organization A that another worker holds
INSERT INTO wf_tap.fx VALUES ('held', workflow.enqueue('ra.plain', '{"held": true}',
    organization_id => 'aaaaaaaa-0000-4000-8000-00000000000a'));
INSERT INTO wf_tap.fx SELECT 'held.token', c.lease_token
  FROM workflow.claim('ra-holder', ARRAY['ra.plain']) c;
-- a job of organization B that another worker holds
INSERT INTO wf_tap.fx VALUES ('b_held', workflow.enqueue('ra.b.held',
    organization_id => 'bbbbbbbb-0000-4000-8000-00000000000b'));
INSERT INTO wf_tap.fx SELECT 'b_held.token', c.lease_token
  FROM workflow.claim('ra-holder', ARRAY['ra.b.held']) c;
-- due jobs of organization B and a job of A due in an hour: never claimed here
INSERT INTO wf_tap.fx VALUES
    ('b_plain', workflow.enqueue('ra.plain', organization_id => 'bbbbbbbb-0000-4000-8000-00000000000b')),
    ('b_cancel', workflow.enqueue('ra.b.cancel', organization_id => 'bbbbbbbb-0000-4000-8000-00000000000b')),
    ('future', workflow.enqueue('ra.plain', '{"future": true}', 0, now() + interval '1 hour',
                                organization_id => 'aaaaaaaa-0000-4000-8000-00000000000a'));
-- the jobs of organization A the worker will claim
INSERT INTO wf_tap.fx VALUES
    ('plain', workflow.enqueue('ra.plain', '{"n": 1}',
                               organization_id => 'aaaaaaaa-0000-4000-8000-00000000000a')),
    ('fail', workflow.enqueue('ra.fail', organization_id => 'aaaaaaaa-0000-4000-8000-00000000000a')),
    ('batch1', workflow.enqueue('ra.batch', organization_id => 'aaaaaaaa-0000-4000-8000-00000000000a')),
    ('batch2', workflow.enqueue('ra.batch', organization_id => 'aaaaaaaa-0000-4000-8000-00000000000a')),
    ('batchfail', workflow.enqueue('ra.batchfail',
                                   organization_id => 'aaaaaaaa-0000-4000-8000-00000000000a')),
    ('release', workflow.enqueue('ra.release', organization_id => 'aaaaaaaa-0000-4000-8000-00000000000a')),
    ('stage1', workflow.enqueue('ra.stage', organization_id => 'aaaaaaaa-0000-4000-8000-00000000000a',
                                stage => 's1')),
    ('stage2', workflow.enqueue('ra.stage', organization_id => 'aaaaaaaa-0000-4000-8000-00000000000a',
                                stage => 's2'));
-- a run of organization B, and a plain job of B that finished just now
INSERT INTO wf_tap.fx VALUES
    ('b_run', workflow.start_run('{"steps": [{"key": "e", "kind": "external"}]}',
                                 'bbbbbbbb-0000-4000-8000-00000000000b')),
    ('b_done', workflow.enqueue('ra.b.done', organization_id => 'bbbbbbbb-0000-4000-8000-00000000000b'));
INSERT INTO wf_tap.results SELECT 'b_done_complete', wf_tap.try(format(
        'SELECT workflow.complete_job(%L, %L)', c.id, c.lease_token))
  FROM workflow.claim('ra-holder', ARRAY['ra.b.done']) c;

-- ---------------------------------------------------------------------------
-- Plant look-alikes, as a role allowed to create objects in public

SET ROLE wf_tap_planter;

CREATE FUNCTION public.statement_timestamp() RETURNS pg_catalog.timestamptz LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.statement_timestamp()', current_user, session_user);
    SELECT '2100-01-01 00:00:00+00'::pg_catalog.timestamptz $$;
CREATE FUNCTION public.now() RETURNS pg_catalog.timestamptz LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.now()', current_user, session_user);
    SELECT '2100-01-01 00:00:00+00'::pg_catalog.timestamptz $$;
CREATE FUNCTION public.clock_timestamp() RETURNS pg_catalog.timestamptz LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.clock_timestamp()', current_user, session_user);
    SELECT '2100-01-01 00:00:00+00'::pg_catalog.timestamptz $$;
CREATE FUNCTION public.transaction_timestamp() RETURNS pg_catalog.timestamptz LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.transaction_timestamp()', current_user, session_user);
    SELECT '2100-01-01 00:00:00+00'::pg_catalog.timestamptz $$;
CREATE FUNCTION public.gen_random_uuid() RETURNS pg_catalog.uuid LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.gen_random_uuid()', current_user, session_user);
    SELECT '00000000-0000-4000-8000-000000000000'::pg_catalog.uuid $$;
CREATE FUNCTION public.uuid_v7() RETURNS pg_catalog.uuid LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.uuid_v7()', current_user, session_user);
    SELECT '00000000-0000-7000-8000-000000000000'::pg_catalog.uuid $$;
CREATE FUNCTION public.make_interval(secs double precision) RETURNS pg_catalog.interval
LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.make_interval(secs)', current_user, session_user);
    SELECT '100 years'::pg_catalog.interval $$;
CREATE FUNCTION public.hashtextextended(pg_catalog.text, bigint) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.hashtextextended(text, bigint)', current_user, session_user);
    SELECT 0::bigint $$;
CREATE FUNCTION public.pg_has_role(oid, oid, pg_catalog.text) RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.pg_has_role(oid, oid, text)', current_user, session_user);
    SELECT true $$;
CREATE FUNCTION public.pg_notify(pg_catalog.text, pg_catalog.text) RETURNS void LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.pg_notify(text, text)', current_user, session_user) $$;
CREATE FUNCTION public.unnest(anyarray) RETURNS SETOF anyelement LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.unnest(anyarray)', current_user, session_user);
    SELECT x FROM pg_catalog.unnest($1) AS x WHERE false $$;

-- aggregates
CREATE FUNCTION public.wf_evil_count(bigint) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.count(*)', current_user, session_user);
    SELECT 1000::bigint $$;
CREATE AGGREGATE public.count(*) (SFUNC = public.wf_evil_count, STYPE = bigint, INITCOND = '1000');
CREATE FUNCTION public.wf_evil_sum(bigint, integer) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.sum(integer)', current_user, session_user);
    SELECT 1000::bigint $$;
CREATE AGGREGATE public.sum(integer) (SFUNC = public.wf_evil_sum, STYPE = bigint, INITCOND = '1000');

-- operators: = says equal, <> says different never, comparisons of time
-- always hold, arithmetic is wrong
CREATE FUNCTION public.wf_evil_eq_uuid(pg_catalog.uuid, pg_catalog.uuid) RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.=(uuid, uuid)', current_user, session_user);
    SELECT true $$;
CREATE OPERATOR public.= (LEFTARG = pg_catalog.uuid, RIGHTARG = pg_catalog.uuid,
                          FUNCTION = public.wf_evil_eq_uuid);
CREATE FUNCTION public.wf_evil_ne_uuid(pg_catalog.uuid, pg_catalog.uuid) RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.<>(uuid, uuid)', current_user, session_user);
    SELECT false $$;
CREATE OPERATOR public.<> (LEFTARG = pg_catalog.uuid, RIGHTARG = pg_catalog.uuid,
                           FUNCTION = public.wf_evil_ne_uuid);
CREATE FUNCTION public.wf_evil_eq_text(pg_catalog.text, pg_catalog.text) RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.=(text, text)', current_user, session_user);
    SELECT true $$;
CREATE OPERATOR public.= (LEFTARG = pg_catalog.text, RIGHTARG = pg_catalog.text,
                          FUNCTION = public.wf_evil_eq_text);
CREATE FUNCTION public.wf_evil_eq_jsonb(pg_catalog.jsonb, pg_catalog.jsonb) RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.=(jsonb, jsonb)', current_user, session_user);
    SELECT true $$;
CREATE OPERATOR public.= (LEFTARG = pg_catalog.jsonb, RIGHTARG = pg_catalog.jsonb,
                          FUNCTION = public.wf_evil_eq_jsonb);
CREATE FUNCTION public.wf_evil_eq_int(integer, integer) RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.=(integer, integer)', current_user, session_user);
    SELECT true $$;
CREATE OPERATOR public.= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.wf_evil_eq_int);
CREATE FUNCTION public.wf_evil_plus_int(integer, integer) RETURNS integer LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.+(integer, integer)', current_user, session_user);
    SELECT 1000 $$;
CREATE OPERATOR public.+ (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.wf_evil_plus_int);
CREATE FUNCTION public.wf_evil_minus_int(integer, integer) RETURNS integer LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.-(integer, integer)', current_user, session_user);
    SELECT 1000 $$;
CREATE OPERATOR public.- (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.wf_evil_minus_int);
CREATE FUNCTION public.wf_evil_ge_int(integer, integer) RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.>=(integer, integer)', current_user, session_user);
    SELECT true $$;
CREATE OPERATOR public.>= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.wf_evil_ge_int);
CREATE FUNCTION public.wf_evil_eq_job_status(workflow.job_status, workflow.job_status)
RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.=(job_status, job_status)', current_user, session_user);
    SELECT true $$;
CREATE OPERATOR public.= (LEFTARG = workflow.job_status, RIGHTARG = workflow.job_status,
                          FUNCTION = public.wf_evil_eq_job_status);
CREATE FUNCTION public.wf_evil_eq_step_status(workflow.step_status, workflow.step_status)
RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.=(step_status, step_status)', current_user, session_user);
    SELECT true $$;
CREATE OPERATOR public.= (LEFTARG = workflow.step_status, RIGHTARG = workflow.step_status,
                          FUNCTION = public.wf_evil_eq_step_status);
CREATE FUNCTION public.wf_evil_eq_regrole(regrole, regrole) RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.=(regrole, regrole)', current_user, session_user);
    SELECT true $$;
CREATE OPERATOR public.= (LEFTARG = regrole, RIGHTARG = regrole, FUNCTION = public.wf_evil_eq_regrole);
CREATE FUNCTION public.wf_evil_ts_true(pg_catalog.timestamptz, pg_catalog.timestamptz)
RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.<, <=, >, >=(timestamptz, timestamptz)', current_user, session_user);
    SELECT true $$;
CREATE OPERATOR public.< (LEFTARG = pg_catalog.timestamptz, RIGHTARG = pg_catalog.timestamptz,
                          FUNCTION = public.wf_evil_ts_true);
CREATE OPERATOR public.<= (LEFTARG = pg_catalog.timestamptz, RIGHTARG = pg_catalog.timestamptz,
                           FUNCTION = public.wf_evil_ts_true);
CREATE OPERATOR public.> (LEFTARG = pg_catalog.timestamptz, RIGHTARG = pg_catalog.timestamptz,
                          FUNCTION = public.wf_evil_ts_true);
CREATE OPERATOR public.>= (LEFTARG = pg_catalog.timestamptz, RIGHTARG = pg_catalog.timestamptz,
                           FUNCTION = public.wf_evil_ts_true);
CREATE FUNCTION public.wf_evil_ts_plus(pg_catalog.timestamptz, pg_catalog.interval)
RETURNS pg_catalog.timestamptz LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('public.+(timestamptz, interval)', current_user, session_user);
    SELECT '2100-01-01 00:00:00+00'::pg_catalog.timestamptz $$;
CREATE OPERATOR public.+ (LEFTARG = pg_catalog.timestamptz, RIGHTARG = pg_catalog.interval,
                          FUNCTION = public.wf_evil_ts_plus);
CREATE OPERATOR public.- (LEFTARG = pg_catalog.timestamptz, RIGHTARG = pg_catalog.interval,
                          FUNCTION = public.wf_evil_ts_plus);

-- types named like the built-in ones the engine casts to
CREATE TYPE public.uuid AS (x integer);
CREATE TYPE public.jsonb AS (x integer);
CREATE TYPE public.text AS (x integer);
CREATE TYPE public.int4 AS (x integer);
CREATE TYPE public.timestamptz AS (x integer);

-- pg_temp: the seven tables, and a function and an operator (PostgreSQL
-- never looks functions and operators up in pg_temp unless qualified; here
-- to show that the engine does not either)
CREATE TEMP TABLE job_queue (LIKE workflow.job_queue);
CREATE TEMP TABLE workflow_runs (LIKE workflow.workflow_runs);
CREATE TEMP TABLE workflow_steps (LIKE workflow.workflow_steps);
CREATE TEMP TABLE workflow_step_dependencies (LIKE workflow.workflow_step_dependencies);
CREATE TEMP TABLE workflow_run_counters (LIKE workflow.workflow_run_counters);
CREATE TEMP TABLE organization_members (LIKE workflow.organization_members);
CREATE TEMP TABLE workflow_events (LIKE workflow.workflow_events);
GRANT ALL ON pg_temp.job_queue, pg_temp.workflow_runs, pg_temp.workflow_steps,
    pg_temp.workflow_step_dependencies, pg_temp.workflow_run_counters,
    pg_temp.organization_members, pg_temp.workflow_events TO PUBLIC;
CREATE FUNCTION pg_temp.now() RETURNS pg_catalog.timestamptz LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('pg_temp.now()', current_user, session_user);
    SELECT '2100-01-01 00:00:00+00'::pg_catalog.timestamptz $$;
CREATE FUNCTION pg_temp.wf_evil_eq_uuid(pg_catalog.uuid, pg_catalog.uuid) RETURNS boolean
LANGUAGE sql AS $$
    INSERT INTO wf_tap.planted_calls (fn, by_user, session_user_name)
    VALUES ('pg_temp.=(uuid, uuid)', current_user, session_user);
    SELECT true $$;
CREATE OPERATOR pg_temp.= (LEFTARG = pg_catalog.uuid, RIGHTARG = pg_catalog.uuid,
                           FUNCTION = pg_temp.wf_evil_eq_uuid);

RESET ROLE;

-- ---------------------------------------------------------------------------
-- public ahead of pg_catalog: the client of organization A

SET SESSION AUTHORIZATION wf_tap_client;
SET search_path = public, pg_temp, pg_catalog;

INSERT INTO wf_tap.results VALUES ('c_enqueue', workflow.enqueue('ra.client', '{"c": 1}')::pg_catalog.text);
INSERT INTO wf_tap.results VALUES ('c_enqueue_b', wf_tap.try(
    $$SELECT workflow.enqueue('ra.client', organization_id => 'bbbbbbbb-0000-4000-8000-00000000000b')$$));
INSERT INTO wf_tap.results VALUES ('c_run', workflow.start_run(
    '{"name": "ra", "result_step": "b", "steps": [
        {"key": "a", "job_type": "ra.step"},
        {"key": "ext", "kind": "external", "depends_on": ["a"]},
        {"key": "b", "job_type": "ra.step.b", "depends_on": ["ext"]}]}',
    idempotency_key => 'ra-key')::pg_catalog.text);
INSERT INTO wf_tap.results VALUES ('c_run_again', workflow.start_run(
    '{"name": "ra", "result_step": "b", "steps": [
        {"key": "a", "job_type": "ra.step"},
        {"key": "ext", "kind": "external", "depends_on": ["a"]},
        {"key": "b", "job_type": "ra.step.b", "depends_on": ["ext"]}]}',
    idempotency_key => 'ra-key')::pg_catalog.text);
INSERT INTO wf_tap.results VALUES ('c_run_conflict', wf_tap.try(
    $$SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "ra.other"}]}',
                                idempotency_key => 'ra-key')$$));
INSERT INTO wf_tap.results VALUES ('c_run2', workflow.start_run(
    '{"steps": [{"key": "x", "job_type": "ra.cancel"}]}')::pg_catalog.text);
INSERT INTO wf_tap.results SELECT 'c_cancel_job_b', wf_tap.try(pg_catalog.format(
        'SELECT workflow.cancel_job(%L)', f.v))
  FROM wf_tap.fx f WHERE f.k OPERATOR(pg_catalog.=) 'b_cancel';
INSERT INTO wf_tap.results SELECT 'c_cancel_run_b', wf_tap.try(pg_catalog.format(
        'SELECT workflow.cancel_run(%L)', f.v))
  FROM wf_tap.fx f WHERE f.k OPERATOR(pg_catalog.=) 'b_run';
INSERT INTO wf_tap.results SELECT 'c_ext_b', wf_tap.try(pg_catalog.format(
        'SELECT workflow.complete_external_step(%L, %L, %L)', f.v, 'e', 'SUCCEEDED'))
  FROM wf_tap.fx f WHERE f.k OPERATOR(pg_catalog.=) 'b_run';
INSERT INTO wf_tap.results SELECT 'c_counters', c::pg_catalog.text
  FROM wf_tap.results r, workflow.run_counters(r.v::pg_catalog.uuid) c
 WHERE r.k OPERATOR(pg_catalog.=) 'c_run';

RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------
-- public ahead of pg_catalog: the worker of organization A

SET SESSION AUTHORIZATION wf_tap_worker;
SET search_path = public, pg_temp, pg_catalog;

INSERT INTO wf_tap.claimed
SELECT 'plain', c.id, c.lease_token, c.status, c.attempt, c.worker_id, c.organization_id,
       c.leased_until, c.stage
  FROM workflow.claim('ra-worker', ARRAY['ra.plain'], 10) c;
INSERT INTO wf_tap.results
SELECT 'w_heartbeat', workflow.heartbeat(c.id, c.lease_token)::pg_catalog.text
  FROM wf_tap.claimed c WHERE c.who OPERATOR(pg_catalog.=) 'plain';
INSERT INTO wf_tap.results
SELECT 'w_wrong_token', wf_tap.try(pg_catalog.format('SELECT workflow.complete_job(%L, %L)',
        c.id, '00000000-0000-4000-8000-000000000000'))
  FROM wf_tap.claimed c WHERE c.who OPERATOR(pg_catalog.=) 'plain';
INSERT INTO wf_tap.results
SELECT 'w_held_wrong_token', wf_tap.try(pg_catalog.format('SELECT workflow.heartbeat(%L, %L)',
        f.v, '00000000-0000-4000-8000-000000000000'))
  FROM wf_tap.fx f WHERE f.k OPERATOR(pg_catalog.=) 'held';
INSERT INTO wf_tap.results
SELECT 'w_other_org', wf_tap.try(pg_catalog.format('SELECT workflow.complete_job(%L, %L)',
        f.v, t.v))
  FROM wf_tap.fx f, wf_tap.fx t
 WHERE f.k OPERATOR(pg_catalog.=) 'b_held' AND t.k OPERATOR(pg_catalog.=) 'b_held.token';
INSERT INTO wf_tap.results
SELECT 'w_complete', wf_tap.try(pg_catalog.format('SELECT workflow.complete_job(%L, %L, %L)',
        c.id, c.lease_token, '{"done": true}'))
  FROM wf_tap.claimed c WHERE c.who OPERATOR(pg_catalog.=) 'plain';
INSERT INTO wf_tap.results
SELECT 'w_complete_other_output', wf_tap.try(pg_catalog.format(
        'SELECT workflow.complete_job(%L, %L, %L)', c.id, c.lease_token, '{"done": false}'))
  FROM wf_tap.claimed c WHERE c.who OPERATOR(pg_catalog.=) 'plain';

INSERT INTO wf_tap.claimed
SELECT 'fail', c.id, c.lease_token, c.status, c.attempt, c.worker_id, c.organization_id,
       c.leased_until, c.stage
  FROM workflow.claim('ra-worker', ARRAY['ra.fail']) c;
INSERT INTO wf_tap.results
SELECT 'w_fail', wf_tap.try(pg_catalog.format('SELECT workflow.fail_job(%L, %L, %L, %L, false)',
        c.id, c.lease_token, 'ra.boom', 'it broke'))
  FROM wf_tap.claimed c WHERE c.who OPERATOR(pg_catalog.=) 'fail';

INSERT INTO wf_tap.claimed
SELECT 'batch', c.id, c.lease_token, c.status, c.attempt, c.worker_id, c.organization_id,
       c.leased_until, c.stage
  FROM workflow.claim('ra-worker', ARRAY['ra.batch'], 10) c;
INSERT INTO wf_tap.results
SELECT 'w_complete_jobs', pg_catalog.count(*)::pg_catalog.text
  FROM workflow.complete_jobs(
           ARRAY(SELECT c.id FROM wf_tap.claimed c WHERE c.who OPERATOR(pg_catalog.=) 'batch'
                  ORDER BY c.id),
           ARRAY(SELECT c.lease_token FROM wf_tap.claimed c
                  WHERE c.who OPERATOR(pg_catalog.=) 'batch' ORDER BY c.id));

INSERT INTO wf_tap.claimed
SELECT 'batchfail', c.id, c.lease_token, c.status, c.attempt, c.worker_id, c.organization_id,
       c.leased_until, c.stage
  FROM workflow.claim('ra-worker', ARRAY['ra.batchfail']) c;
INSERT INTO wf_tap.results
SELECT 'w_fail_jobs', pg_catalog.count(*)::pg_catalog.text
  FROM wf_tap.claimed c,
       workflow.fail_jobs(ARRAY[c.id], ARRAY[c.lease_token], ARRAY['ra.retry'], ARRAY['again']) f
 WHERE c.who OPERATOR(pg_catalog.=) 'batchfail';

INSERT INTO wf_tap.claimed
SELECT 'release', c.id, c.lease_token, c.status, c.attempt, c.worker_id, c.organization_id,
       c.leased_until, c.stage
  FROM workflow.claim('ra-worker', ARRAY['ra.release']) c;
INSERT INTO wf_tap.results
SELECT 'w_release', wf_tap.try(pg_catalog.format('SELECT workflow.release_job(%L, %L)',
        c.id, c.lease_token))
  FROM wf_tap.claimed c WHERE c.who OPERATOR(pg_catalog.=) 'release';

INSERT INTO wf_tap.claimed
SELECT 'stage', c.id, c.lease_token, c.status, c.attempt, c.worker_id, c.organization_id,
       c.leased_until, c.stage
  FROM workflow.claim('ra-worker', ARRAY['ra.stage'], 10, stage => 's1') c;

INSERT INTO wf_tap.results
SELECT 'w_step_a', wf_tap.try(pg_catalog.format('SELECT workflow.complete_job(%L, %L, %L)',
        c.id, c.lease_token, '{"a": 1}'))
  FROM workflow.claim('ra-worker', ARRAY['ra.step']) c;

INSERT INTO wf_tap.results VALUES ('w_reaped', workflow.reap_expired()::pg_catalog.text);

RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------
-- public ahead of pg_catalog: the client again, on its run

SET SESSION AUTHORIZATION wf_tap_client;
SET search_path = public, pg_temp, pg_catalog;

INSERT INTO wf_tap.ext_result
SELECT e.step_key, e.status, e.output
  FROM wf_tap.results r,
       LATERAL workflow.complete_external_step(r.v::pg_catalog.uuid, 'ext', 'SUCCEEDED',
                                               '{"approved": true}') e
 WHERE r.k OPERATOR(pg_catalog.=) 'c_run';
INSERT INTO wf_tap.results
SELECT 'c_ext_other_output', wf_tap.try(pg_catalog.format(
        'SELECT workflow.complete_external_step(%L, %L, %L, %L)',
        r.v, 'ext', 'SUCCEEDED', '{"approved": false}'))
  FROM wf_tap.results r WHERE r.k OPERATOR(pg_catalog.=) 'c_run';
INSERT INTO wf_tap.results
SELECT 'c_cancel_run2', workflow.cancel_run(r.v::pg_catalog.uuid)::pg_catalog.text
  FROM wf_tap.results r WHERE r.k OPERATOR(pg_catalog.=) 'c_run2';

RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------
-- public ahead of pg_catalog: the reader of organization A

SET SESSION AUTHORIZATION wf_tap_reader;
SET search_path = public, pg_temp, pg_catalog;

INSERT INTO wf_tap.results VALUES ('r_rows', pg_catalog.concat_ws(' ',
    (SELECT pg_catalog.count(*) FROM workflow.job_queue),
    (SELECT pg_catalog.count(*) FROM workflow.workflow_runs),
    (SELECT pg_catalog.count(*) FROM workflow.workflow_steps),
    (SELECT pg_catalog.count(*) FROM workflow.workflow_step_dependencies),
    (SELECT pg_catalog.count(*) FROM workflow.workflow_run_counters),
    (SELECT pg_catalog.count(*) FROM workflow.organization_members)));
INSERT INTO wf_tap.results VALUES ('r_b_rows', (
    SELECT pg_catalog.count(*) FROM workflow.job_queue j
     WHERE j.organization_id OPERATOR(pg_catalog.=) 'bbbbbbbb-0000-4000-8000-00000000000b'
    )::pg_catalog.text);
INSERT INTO wf_tap.results SELECT 'r_counters', c::pg_catalog.text
  FROM wf_tap.results r, workflow.run_counters(r.v::pg_catalog.uuid) c
 WHERE r.k OPERATOR(pg_catalog.=) 'c_run';
INSERT INTO wf_tap.results SELECT 'r_counters_b', wf_tap.try(pg_catalog.format(
        'SELECT * FROM workflow.run_counters(%L)', f.v))
  FROM wf_tap.fx f WHERE f.k OPERATOR(pg_catalog.=) 'b_run';
INSERT INTO wf_tap.results VALUES ('r_counters_none', wf_tap.try(
    $$SELECT * FROM workflow.run_counters('00000000-0000-7000-8000-0000000000ff')$$));
INSERT INTO wf_tap.results SELECT 'r_verify', pg_catalog.count(*)::pg_catalog.text
  FROM workflow.verify();
INSERT INTO wf_tap.results VALUES ('r_my_orgs', workflow.my_organizations()::pg_catalog.text);

RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------
-- public ahead of pg_catalog: the admin, unconfined

SET SESSION AUTHORIZATION wf_tap_admin;
SET search_path = public, pg_temp, pg_catalog;

INSERT INTO wf_tap.results VALUES ('a_membership', pg_catalog.concat_ws(' ',
    workflow.grant_organization('wf_tap_org_c', 'cccccccc-0000-4000-8000-00000000000c'),
    workflow.grant_organization('wf_tap_org_c', 'cccccccc-0000-4000-8000-00000000000c'),
    workflow.revoke_organization('wf_tap_org_c', 'cccccccc-0000-4000-8000-00000000000c'),
    workflow.revoke_organization('wf_tap_org_c', 'cccccccc-0000-4000-8000-00000000000c')));
INSERT INTO wf_tap.results VALUES ('a_purge', workflow.purge('1 hour', 100)::pg_catalog.text);
INSERT INTO wf_tap.results VALUES ('a_enqueue_b', workflow.enqueue('ra.admin',
    organization_id => 'bbbbbbbb-0000-4000-8000-00000000000b')::pg_catalog.text);
INSERT INTO wf_tap.results VALUES ('a_my_orgs',
    COALESCE(workflow.my_organizations()::pg_catalog.text, 'NULL'));

RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------
-- pg_temp first: temporary tables named like the extension's

SET SESSION AUTHORIZATION wf_tap_client;
SET search_path = pg_temp, public, pg_catalog;
INSERT INTO wf_tap.results VALUES ('t_job', workflow.enqueue('ra.tmp')::pg_catalog.text);
INSERT INTO wf_tap.results VALUES
    ('t_run', workflow.start_run('{"steps": [{"key": "e", "kind": "external"}]}')::pg_catalog.text);
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION wf_tap_worker;
SET search_path = pg_temp, public, pg_catalog;
INSERT INTO wf_tap.results
SELECT 't_complete', wf_tap.try(pg_catalog.format('SELECT workflow.complete_job(%L, %L)',
        c.id, c.lease_token))
  FROM workflow.claim('ra-tmp-worker', ARRAY['ra.tmp']) c;
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION wf_tap_client;
SET search_path = pg_temp, public, pg_catalog;
INSERT INTO wf_tap.results
SELECT 't_ext', wf_tap.try(pg_catalog.format(
        'SELECT workflow.complete_external_step(%L, %L, %L)', r.v, 'e', 'FAILED'))
  FROM wf_tap.results r WHERE r.k OPERATOR(pg_catalog.=) 't_run';
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION wf_tap_reader;
SET search_path = pg_temp, public, pg_catalog;
INSERT INTO wf_tap.results SELECT 't_verify', pg_catalog.count(*)::pg_catalog.text
  FROM workflow.verify();
RESET SESSION AUTHORIZATION;

SET SESSION AUTHORIZATION wf_tap_admin;
SET search_path = pg_temp, public, pg_catalog;
INSERT INTO wf_tap.results VALUES ('t_membership', pg_catalog.concat_ws(' ',
    workflow.grant_organization('wf_tap_org_c', 'cccccccc-0000-4000-8000-00000000000c'),
    workflow.revoke_organization('wf_tap_org_c', 'cccccccc-0000-4000-8000-00000000000c')));
RESET SESSION AUTHORIZATION;

-- ---------------------------------------------------------------------------
-- What the engine called, and what landed in the planted tables

RESET search_path;
INSERT INTO wf_tap.engine_calls SELECT * FROM wf_tap.planted_calls;
INSERT INTO wf_tap.results VALUES ('planted_rows', (
    (SELECT count(*) FROM pg_temp.job_queue) + (SELECT count(*) FROM pg_temp.workflow_runs)
    + (SELECT count(*) FROM pg_temp.workflow_steps)
    + (SELECT count(*) FROM pg_temp.workflow_step_dependencies)
    + (SELECT count(*) FROM pg_temp.workflow_run_counters)
    + (SELECT count(*) FROM pg_temp.organization_members)
    + (SELECT count(*) FROM pg_temp.workflow_events))::text);

-- Controls: the same look-alikes, typed by the roles themselves, are found.
SET SESSION AUTHORIZATION wf_tap_worker;
SET search_path = public, pg_temp, pg_catalog;
INSERT INTO wf_tap.results VALUES ('control_worker', pg_catalog.concat_ws(' ',
    now() OPERATOR(pg_catalog.=) '2100-01-01 00:00:00+00'::pg_catalog.timestamptz,
    '00000000-0000-4000-8000-000000000001'::pg_catalog.uuid
        = '00000000-0000-4000-8000-000000000002'::pg_catalog.uuid,
    pg_catalog.pg_typeof('(1)'::uuid)::pg_catalog.oid
        OPERATOR(pg_catalog.=) 'public.uuid'::pg_catalog.regtype::pg_catalog.oid));
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION wf_tap_reader;
SET search_path = pg_temp, public, pg_catalog;
INSERT INTO wf_tap.results VALUES ('control_reader', pg_catalog.concat_ws(' ',
    (SELECT count(*) FROM workflow.job_queue) OPERATOR(pg_catalog.>) 0,
    pg_catalog.to_regclass('job_queue')::pg_catalog.oid
        OPERATOR(pg_catalog.=) 'pg_temp.job_queue'::pg_catalog.regclass::pg_catalog.oid));
RESET SESSION AUTHORIZATION;
RESET search_path;

-- Drop every planted object (and the planter's grants).
DROP OWNED BY wf_tap_planter;

CREATE FUNCTION wf_tap.r(key text) RETURNS text
    LANGUAGE sql STABLE AS $$SELECT v FROM wf_tap.results WHERE k = key$$;
CREATE FUNCTION wf_tap.fx(key text) RETURNS uuid
    LANGUAGE sql STABLE AS $$SELECT v FROM wf_tap.fx WHERE k = key$$;

-- ---------------------------------------------------------------------------
-- Nothing planted was called or written to

SELECT is_empty($$SELECT fn, by_user, session_user_name FROM wf_tap.engine_calls ORDER BY n$$,
    'no planted function, operator or aggregate ran while the four roles used the API');
SELECT is(wf_tap.r('planted_rows'), '0', 'no row landed in a planted pg_temp table');
SELECT set_eq($$SELECT fn, by_user::text, session_user_name::text FROM wf_tap.planted_calls
                 WHERE n NOT IN (SELECT n FROM wf_tap.engine_calls)$$,
              $$VALUES ('public.now()', 'wf_tap_worker', 'wf_tap_worker'),
                       ('public.=(uuid, uuid)', 'wf_tap_worker', 'wf_tap_worker'),
                       ('public.count(*)', 'wf_tap_reader', 'wf_tap_reader')$$,
    'control: the planted now(), = and count(*) are what the roles'' own statements call');
SELECT is(wf_tap.r('control_worker'), 't t t',
    'control: a role''s own statement gets the planted time, equality and type');
SELECT is(wf_tap.r('control_reader'), 't t',
    'control: with pg_temp first, a role''s own statement finds the planted table');

-- ---------------------------------------------------------------------------
-- The worker of organization A

SELECT is(wf_tap.r('grant_a'), 'true', 'organization A was granted to wf_tap_org_a');
SELECT is((SELECT count(*)::int FROM wf_tap.claimed WHERE who = 'plain'), 1,
    'claim took exactly one job: not the held one, the future one, organization B''s '
    'or another type');
SELECT is((SELECT id FROM wf_tap.claimed WHERE who = 'plain'), wf_tap.fx('plain'),
    'claim took organization A''s due QUEUED job');
SELECT is((SELECT row(status, attempt, worker_id, organization_id)::text
             FROM wf_tap.claimed WHERE who = 'plain'),
          row('RUNNING'::workflow.job_status, 1, 'ra-worker',
              'aaaaaaaa-0000-4000-8000-00000000000a'::uuid)::text,
          'the claimed job is RUNNING, attempt 1, with the worker id, in organization A');
SELECT ok((SELECT leased_until > statement_timestamp() + interval '290 seconds'
              AND leased_until < statement_timestamp() + interval '310 seconds'
             FROM wf_tap.claimed WHERE who = 'plain'),
          'the lease ends 300 seconds after the real statement time');
SELECT ok((SELECT lease_token IS NOT NULL
              AND lease_token <> '00000000-0000-4000-8000-000000000000'
             FROM wf_tap.claimed WHERE who = 'plain'),
          'the lease token comes from pg_catalog.gen_random_uuid, not the planted one');
SELECT ok(wf_tap.r('w_heartbeat')::timestamptz BETWEEN statement_timestamp() + interval '290 seconds'
                                                   AND statement_timestamp() + interval '310 seconds',
    'heartbeat returned a lease end 300 seconds from the real time');
SELECT is(wf_tap.r('w_wrong_token'), '40001 job.lease_lost',
    'complete_job with a wrong token raises job.lease_lost although the planted = says equal');
SELECT is(wf_tap.r('w_held_wrong_token'), '40001 job.lease_lost',
    'heartbeat of another worker''s job with a wrong token raises job.lease_lost');
SELECT is(wf_tap.r('w_other_org'), 'P0002 job.not_found',
    'a job of organization B, with its token, is not found by the worker of A');
SELECT is(wf_tap.r('w_complete'), 'ok', 'complete_job with the real token succeeded');
SELECT is((SELECT row(j.status, j.output)::text FROM workflow.job_queue j
            WHERE j.id = wf_tap.fx('plain')),
          row('SUCCEEDED'::workflow.job_status, '{"done": true}'::jsonb)::text,
          'the completed job is SUCCEEDED with its output');
SELECT ok((SELECT j.finished_at BETWEEN now() AND clock_timestamp() FROM workflow.job_queue j
            WHERE j.id = wf_tap.fx('plain')),
          'its finished_at is the real time, not the planted one');
SELECT is(wf_tap.r('w_complete_other_output'), '55000 job.not_running',
    'a repeat with another output is refused although the planted jsonb = says equal');
SELECT is(wf_tap.r('w_fail'), 'ok', 'fail_job succeeded');
SELECT is((SELECT row(j.status, j.last_error_code)::text FROM workflow.job_queue j
            WHERE j.id = wf_tap.fx('fail')),
          row('FAILED'::workflow.job_status, 'ra.boom')::text,
          'a final failure left the job FAILED with its code');
SELECT is(wf_tap.r('w_complete_jobs'), '2', 'complete_jobs completed both claimed jobs');
SELECT is((SELECT count(*)::int FROM workflow.job_queue
            WHERE id IN (wf_tap.fx('batch1'), wf_tap.fx('batch2')) AND status = 'SUCCEEDED'), 2,
          'both batch jobs are SUCCEEDED');
SELECT is(wf_tap.r('w_fail_jobs'), '1', 'fail_jobs failed the claimed job');
SELECT ok((SELECT j.status = 'QUEUED' AND j.attempt = 1 AND j.run_at > now()
                  AND j.run_at < now() + interval '1 hour'
             FROM workflow.job_queue j WHERE j.id = wf_tap.fx('batchfail')),
          'a retryable failure queued the job again, its backoff counted from the real time');
SELECT is(wf_tap.r('w_release'), 'ok', 'release_job succeeded');
SELECT is((SELECT row(j.status, j.lease_token)::text FROM workflow.job_queue j
            WHERE j.id = wf_tap.fx('release')),
          row('QUEUED'::workflow.job_status, NULL::uuid)::text,
          'the released job is QUEUED with no lease');
SELECT is((SELECT array_agg(id) FROM wf_tap.claimed WHERE who = 'stage'),
          ARRAY[wf_tap.fx('stage1')],
          'a claim filtered by stage took the job of that stage only');
SELECT is(wf_tap.r('w_reaped'), '0', 'reap_expired expired nothing (no lease has expired)');
SELECT is((SELECT row(j.status, j.worker_id)::text FROM workflow.job_queue j
            WHERE j.id = wf_tap.fx('held')),
          row('RUNNING'::workflow.job_status, 'ra-holder')::text,
          'the held job was neither claimed again nor reaped');
SELECT is((SELECT string_agg(j.status::text, ',' ORDER BY j.id) FROM workflow.job_queue j
            WHERE j.id IN (wf_tap.fx('future'), wf_tap.fx('b_plain'), wf_tap.fx('stage2'))),
          'QUEUED,QUEUED,QUEUED',
          'the job due in an hour, organization B''s job and the other stage''s job stayed QUEUED');

-- ---------------------------------------------------------------------------
-- The client of organization A

SELECT is((SELECT organization_id FROM workflow.job_queue WHERE id = wf_tap.r('c_enqueue')::uuid),
          'aaaaaaaa-0000-4000-8000-00000000000a'::uuid,
          'enqueue without organization used the client''s only organization');
SELECT is(wf_tap.r('c_enqueue_b'), '42501 workflow.organization_forbidden',
    'enqueue for organization B raises workflow.organization_forbidden');
SELECT is((SELECT row(r.organization_id, r.name)::text FROM workflow.workflow_runs r
            WHERE r.id = wf_tap.r('c_run')::uuid),
          row('aaaaaaaa-0000-4000-8000-00000000000a'::uuid, 'ra')::text,
          'start_run wrote its run, in organization A');
SELECT is((SELECT count(*)::int FROM workflow.workflow_steps WHERE workflow_run_id = wf_tap.r('c_run')::uuid)
          + (SELECT count(*)::int FROM workflow.workflow_step_dependencies
              WHERE workflow_run_id = wf_tap.r('c_run')::uuid),
          5, 'start_run wrote three steps and two edges');
SELECT is(wf_tap.r('c_run_again'), wf_tap.r('c_run'),
    'an idempotent repeat returned the same run');
SELECT is(wf_tap.r('c_run_conflict'), '23505 workflow.idempotency_conflict',
    'another definition under the key conflicts although the planted jsonb = says equal');
SELECT is(wf_tap.r('c_cancel_job_b'), 'P0002 job.not_found',
    'cancel_job of organization B''s job: job.not_found');
SELECT is(wf_tap.r('c_cancel_run_b'), 'P0002 workflow.run_not_found',
    'cancel_run of organization B''s run: workflow.run_not_found');
SELECT is(wf_tap.r('c_ext_b'), 'P0002 workflow.run_not_found',
    'complete_external_step in organization B''s run: workflow.run_not_found');
SELECT is(wf_tap.r('c_counters'), '(3,1,0,2,0,0,0)',
    'run_counters of the new run: three steps, one active, two blocked');
SELECT is(wf_tap.r('w_step_a'), 'ok', 'the worker completed the run''s first step');
SELECT is((SELECT row(e.step_key, e.status, e.output)::text FROM wf_tap.ext_result e),
          row('ext', 'SUCCEEDED'::workflow.step_status, '{"approved": true}'::jsonb)::text,
          'complete_external_step returned the completed step');
SELECT is(wf_tap.r('c_ext_other_output'), '23505 workflow.external_completion_output_conflict',
    'a repeat with another output conflicts although the planted jsonb = says equal');
SELECT is((SELECT string_agg(s.step_key || '=' || s.status, ',' ORDER BY s.step_key)
             FROM workflow.workflow_steps s WHERE s.workflow_run_id = wf_tap.r('c_run')::uuid),
          'a=SUCCEEDED,b=ENQUEUED,ext=SUCCEEDED',
          'the cascade released b once a and ext had succeeded');
SELECT is(wf_tap.r('c_cancel_run2'), 'CANCELED', 'cancel_run of its own run returned CANCELED');
SELECT is((SELECT string_agg(status::text, ',') FROM workflow.workflow_runs
            WHERE id IN (wf_tap.fx('b_run'))) || ' ' ||
          (SELECT status::text FROM workflow.job_queue WHERE id = wf_tap.fx('b_cancel')),
          'WAITING_FOR_EXTERNAL QUEUED',
          'organization B''s run and job are untouched');

-- ---------------------------------------------------------------------------
-- The reader of organization A

-- (the rows the pg_temp round made later left out)
SELECT is(wf_tap.r('r_rows'), concat_ws(' ',
    (SELECT count(*) FROM workflow.job_queue
      WHERE organization_id = 'aaaaaaaa-0000-4000-8000-00000000000a'
        AND id <> wf_tap.r('t_job')::uuid
        AND workflow_run_id IS DISTINCT FROM wf_tap.r('t_run')::uuid),
    (SELECT count(*) FROM workflow.workflow_runs
      WHERE organization_id = 'aaaaaaaa-0000-4000-8000-00000000000a'
        AND id <> wf_tap.r('t_run')::uuid),
    (SELECT count(*) FROM workflow.workflow_steps
      WHERE organization_id = 'aaaaaaaa-0000-4000-8000-00000000000a'
        AND workflow_run_id <> wf_tap.r('t_run')::uuid),
    (SELECT count(*) FROM workflow.workflow_step_dependencies d JOIN workflow.workflow_runs r
         ON r.id = d.workflow_run_id
      WHERE r.organization_id = 'aaaaaaaa-0000-4000-8000-00000000000a'),
    (SELECT count(*) FROM workflow.workflow_run_counters c JOIN workflow.workflow_runs r
         ON r.id = c.workflow_run_id
      WHERE r.organization_id = 'aaaaaaaa-0000-4000-8000-00000000000a'),
    (SELECT count(*) FROM workflow.organization_members
      WHERE organization_id = 'aaaaaaaa-0000-4000-8000-00000000000a')),
    'the reader saw exactly organization A''s rows of every table');
SELECT is(wf_tap.r('r_b_rows'), '0', 'the reader saw none of organization B''s jobs');
SELECT is(wf_tap.r('r_counters'),
          (SELECT c::text FROM workflow.run_counters(wf_tap.r('c_run')::uuid) c),
          'the reader read the run''s counters as they are');
SELECT is(wf_tap.r('r_counters_b'), wf_tap.r('r_counters_none'),
    'run_counters of organization B''s run, as the reader: what a run that does not exist gives');
SELECT is(wf_tap.r('r_verify'), '0', 'verify() as the reader found nothing wrong');
SELECT is(wf_tap.r('r_my_orgs'), '{aaaaaaaa-0000-4000-8000-00000000000a}',
    'my_organizations() of the reader is organization A');

-- ---------------------------------------------------------------------------
-- The admin

SELECT is(wf_tap.r('a_membership'), 't f t f',
    'grant_organization and revoke_organization said new, known, removed, absent');
SELECT is((SELECT string_agg(format('%s %s', role, organization_id), ',')
             FROM workflow.organization_members),
          'wf_tap_org_a aaaaaaaa-0000-4000-8000-00000000000a',
          'revoking C left organization A''s grant alone although the planted = says equal');
SELECT is(wf_tap.r('a_purge'), '0',
    'purge of what finished over an hour ago deleted nothing (the planted clock says 2100)');
SELECT is((SELECT status::text FROM workflow.job_queue WHERE id = wf_tap.fx('b_done')),
          'SUCCEEDED', 'the job that finished just now is still there');
SELECT is((SELECT organization_id FROM workflow.job_queue WHERE id = wf_tap.r('a_enqueue_b')::uuid),
          'bbbbbbbb-0000-4000-8000-00000000000b'::uuid,
          'the unconfined admin enqueued for organization B');
SELECT is(wf_tap.r('a_my_orgs'), 'NULL', 'my_organizations() of the admin is NULL');

-- ---------------------------------------------------------------------------
-- pg_temp first

SELECT is(wf_tap.r('t_complete'), 'ok', 'with pg_temp first, the worker completed a claimed job');
SELECT is((SELECT status::text FROM workflow.job_queue WHERE id = wf_tap.r('t_job')::uuid),
          'SUCCEEDED', 'with pg_temp first, the real workflow.job_queue row is SUCCEEDED');
SELECT is(wf_tap.r('t_ext'), 'ok', 'with pg_temp first, complete_external_step worked');
SELECT is((SELECT status::text FROM workflow.workflow_runs WHERE id = wf_tap.r('t_run')::uuid),
          'COMPLETED_WITH_ERRORS', 'with pg_temp first, the run ended COMPLETED_WITH_ERRORS');
SELECT is(wf_tap.r('t_verify') || ' ' || wf_tap.r('t_membership'), '0 t t',
    'with pg_temp first, verify() found nothing and grant and revoke worked');

SELECT * FROM finish();
ROLLBACK;
