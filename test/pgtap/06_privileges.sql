-- 06_privileges.sql: docs/reference.md: the four NOLOGIN
-- roles and their memberships, USAGE on schema workflow, EXECUTE on every
-- function per role and never for PUBLIC, SELECT on the tables and views for
-- readers only, no SECURITY DEFINER, row-level security enabled and forced
-- with one policy per table; then the same grants seen from login roles that
-- hold each of the four roles.
--
-- Every expectation is written out below; none is read from the catalog
-- being checked.  pgTAP's *_privs_are report effective privileges (what a
-- role holds itself or through its memberships); the ACL entries each role
-- holds itself are checked against explicit lists as well.

CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS workflow;

\set ON_ERROR_STOP 1
SET client_min_messages = warning;

BEGIN;
SELECT plan(495);

CREATE SCHEMA wf_tap;
GRANT USAGE ON SCHEMA wf_tap TO PUBLIC;

-- The four roles, in the order of the tables below.
CREATE TABLE wf_tap.roles (n int PRIMARY KEY, role name NOT NULL);
INSERT INTO wf_tap.roles VALUES
    (1, 'workflow_worker'), (2, 'workflow_client'), (3, 'workflow_reader'),
    (4, 'workflow_admin');

-- ---------------------------------------------------------------------------
-- Roles

SELECT has_role(r.role, format('role %s exists', r.role))
  FROM wf_tap.roles r ORDER BY r.n;

SELECT is((SELECT a.rolcanlogin FROM pg_catalog.pg_roles a WHERE a.rolname = r.role),
          false, format('role %s cannot log in', r.role))
  FROM wf_tap.roles r ORDER BY r.n;

SELECT is((SELECT row(a.rolsuper, a.rolcreaterole, a.rolcreatedb, a.rolreplication,
                      a.rolbypassrls, a.rolinherit)::text
             FROM pg_catalog.pg_roles a WHERE a.rolname = r.role),
          row(false, false, false, false, false, true)::text,
          format('role %s is no superuser, creates no roles or databases, has no '
                 'replication, does not bypass row-level security, and inherits', r.role))
  FROM wf_tap.roles r ORDER BY r.n;

SELECT is_member_of('workflow_worker', ARRAY['workflow_admin'::name],
    'workflow_admin is a member of workflow_worker');
SELECT is_member_of('workflow_client', ARRAY['workflow_admin'::name],
    'workflow_admin is a member of workflow_client');
SELECT is_member_of('workflow_reader', ARRAY['workflow_admin'::name],
    'workflow_admin is a member of workflow_reader');

SELECT set_eq($$
    SELECT g.rolname::text AS role, m.rolname::text AS member, a.admin_option
      FROM pg_catalog.pg_auth_members a
      JOIN pg_catalog.pg_roles g ON g.oid = a.roleid
      JOIN pg_catalog.pg_roles m ON m.oid = a.member
     WHERE m.rolname IN (SELECT role FROM wf_tap.roles)
$$, $$ VALUES
    ('workflow_worker', 'workflow_admin', false),
    ('workflow_client', 'workflow_admin', false),
    ('workflow_reader', 'workflow_admin', false)
$$, 'the four roles are members of no role but this: workflow_admin of the other '
    'three, without ADMIN OPTION');

-- ---------------------------------------------------------------------------
-- Schema workflow

SELECT schema_privs_are('workflow', r.role, ARRAY['USAGE'],
    format('role %s has USAGE on schema workflow, and not CREATE', r.role))
  FROM wf_tap.roles r ORDER BY r.n;
SELECT schema_privs_are('workflow', 'public', ARRAY[]::name[],
    'PUBLIC has neither USAGE nor CREATE on schema workflow');

SELECT set_eq($$
    SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee)::text END
               AS grantee,
           a.privilege_type, a.is_grantable
      FROM pg_catalog.pg_namespace n,
           aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
     WHERE n.nspname = 'workflow' AND a.grantee <> n.nspowner
$$, $$ VALUES
    ('workflow_worker', 'USAGE', false),
    ('workflow_client', 'USAGE', false),
    ('workflow_reader', 'USAGE', false),
    ('workflow_admin', 'USAGE', false)
$$, 'the ACL of schema workflow: USAGE for the four roles, nothing else for anyone but '
    'the owner');

-- ---------------------------------------------------------------------------
-- Functions: who may execute what

-- Every function of schema workflow with the roles that may execute it
-- (through membership included): w(orker), c(lient), r(eader), a(dmin).
CREATE TABLE wf_tap.fn (
    n      serial PRIMARY KEY,
    fname  name NOT NULL,
    args   name[] NOT NULL,
    worker boolean NOT NULL,
    client boolean NOT NULL,
    reader boolean NOT NULL,
    admin  boolean NOT NULL
);
INSERT INTO wf_tap.fn (fname, args, worker, client, reader, admin) VALUES
    -- worker calls
    ('claim', ARRAY['text', 'text[]', 'integer', 'uuid', 'text'], true, false, false, true),
    ('heartbeat', ARRAY['uuid', 'uuid'], true, false, false, true),
    ('complete_job', ARRAY['uuid', 'uuid', 'jsonb'], true, false, false, true),
    ('complete_and_claim', ARRAY['uuid', 'uuid', 'jsonb', 'text', 'text[]', 'integer', 'uuid',
                                 'text'], true, false, false, true),
    ('complete_jobs', ARRAY['uuid[]', 'uuid[]', 'jsonb[]'], true, false, false, true),
    ('fail_job', ARRAY['uuid', 'uuid', 'text', 'text', 'boolean'], true, false, false, true),
    ('fail_jobs', ARRAY['uuid[]', 'uuid[]', 'text[]', 'text[]', 'boolean'], true, false, false, true),
    ('release_job', ARRAY['uuid', 'uuid'], true, false, false, true),
    ('reap_expired', ARRAY[]::name[], true, false, false, true),
    ('fire_timers', ARRAY['integer'], true, false, false, true),
    ('job_inputs', ARRAY['uuid', 'uuid'], true, false, false, true),
    ('job_step_key', ARRAY['uuid', 'uuid'], true, false, false, true),
    -- client calls
    ('enqueue', ARRAY['text', 'jsonb', 'integer', 'timestamp with time zone', 'integer',
                      'integer', 'uuid', 'text'], false, true, false, true),
    ('start_run', ARRAY['jsonb', 'uuid', 'text', 'jsonb'], false, true, false, true),
    ('start_workflow', ARRAY['text', 'jsonb', 'uuid', 'text'], false, true, false, true),
    ('complete_external_step', ARRAY['uuid', 'text', 'workflow.step_status', 'jsonb', 'text',
                                     'text', 'text', 'uuid'], false, true, false, true),
    ('cancel_job', ARRAY['uuid', 'text'], false, true, false, true),
    ('cancel_run', ARRAY['uuid', 'text', 'uuid'], false, true, false, true),
    ('send_event', ARRAY['uuid', 'text', 'jsonb', 'text', 'uuid'], false, true, false, true),
    -- client and reader
    ('run_counters', ARRAY['uuid'], false, true, true, true),
    ('run_history', ARRAY['uuid', 'uuid'], false, true, true, true),
    ('run_graph', ARRAY['uuid', 'text', 'uuid'], false, true, true, true),
    -- reader
    ('verify', ARRAY['uuid'], false, false, true, true),
    ('maintenance_passes', ARRAY[]::name[], false, false, true, true),
    -- admin
    ('purge', ARRAY['interval', 'integer'], false, false, false, true),
    ('grant_organization', ARRAY['regrole', 'uuid'], false, false, false, true),
    ('revoke_organization', ARRAY['regrole', 'uuid'], false, false, false, true),
    ('register_workflow', ARRAY['text', 'text', 'jsonb', 'boolean'], false, false, false, true),
    ('unregister_workflow', ARRAY['text', 'text'], false, false, false, true),
    ('compensate_run', ARRAY['uuid', 'text', 'uuid'], false, false, false, true),
    ('resume_run', ARRAY['uuid', 'uuid'], false, false, false, true),
    ('retire_run', ARRAY['uuid', 'text', 'uuid'], false, false, false, true),
    ('retry_run', ARRAY['uuid', 'uuid'], false, false, false, true),
    ('increase_execution_allowance', ARRAY['uuid', 'integer', 'integer', 'uuid'],
     false, false, false, true),
    -- all four
    ('uuid_v7', ARRAY[]::name[], true, true, true, true),
    ('my_organizations', ARRAY[]::name[], true, true, true, true),
    ('output_checksum', ARRAY['jsonb'], true, true, true, true),
    -- client and reader
    ('continuation_source', ARRAY['uuid', 'uuid'], false, true, true, true),
    -- client
    ('continue_run', ARRAY['uuid', 'integer', 'text', 'integer', 'uuid'], false, true, false, true),
    -- trigger functions: nobody
    ('job_queue_sync_step', ARRAY[]::name[], false, false, false, false),
    ('job_queue_finish_statement', ARRAY[]::name[], false, false, false, false),
    ('job_queue_guard', ARRAY[]::name[], false, false, false, false),
    ('workflow_steps_guard', ARRAY[]::name[], false, false, false, false),
    ('_organization_members_changed', ARRAY[]::name[], false, false, false, false),
    ('_workflow_events_guard', ARRAY[]::name[], false, false, false, false),
    -- internal: the run state machine's table, for its test
    ('_run_moves', ARRAY[]::name[], false, false, false, false);

SELECT functions_are('workflow', ARRAY[
    'claim', 'heartbeat', 'complete_job', 'complete_jobs', 'fail_job', 'fail_jobs',
    'release_job', 'reap_expired', 'enqueue', 'start_run', 'complete_external_step',
    'cancel_job', 'cancel_run', 'run_counters', 'run_graph', 'verify', 'purge',
    'grant_organization', 'revoke_organization', 'uuid_v7', 'my_organizations',
    'job_queue_sync_step', 'job_queue_finish_statement', 'job_queue_guard',
    'workflow_steps_guard', '_organization_members_changed', 'run_history',
    '_workflow_events_guard', 'complete_and_claim', 'send_event', 'fire_timers',
    '_run_moves', 'job_inputs', 'start_workflow', 'register_workflow',
    'unregister_workflow', 'compensate_run', 'resume_run', 'retire_run',
    'retry_run', 'job_step_key', 'maintenance_passes',
    'increase_execution_allowance', 'output_checksum', 'continuation_source',
    'continue_run']::name[],
    'schema workflow holds the 46 functions listed here, and no other');
SELECT is((SELECT count(*)::int FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'workflow'::regnamespace), 46,
          'schema workflow holds 46 functions (no overloads besides the list)');

-- 46 functions x 4 roles
SELECT function_privs_are('workflow', f.fname, f.args, r.role,
           CASE WHEN CASE r.role WHEN 'workflow_worker' THEN f.worker
                                 WHEN 'workflow_client' THEN f.client
                                 WHEN 'workflow_reader' THEN f.reader
                                 ELSE f.admin END
                THEN ARRAY['EXECUTE'] ELSE ARRAY[]::name[] END,
           format('%s %s execute workflow.%s(%s)', r.role,
                  CASE WHEN CASE r.role WHEN 'workflow_worker' THEN f.worker
                                        WHEN 'workflow_client' THEN f.client
                                        WHEN 'workflow_reader' THEN f.reader
                                        ELSE f.admin END
                       THEN 'may' ELSE 'may not' END,
                  f.fname, array_to_string(f.args, ', ')))
  FROM wf_tap.fn f CROSS JOIN wf_tap.roles r
 ORDER BY f.n, r.n;

-- 46 functions x PUBLIC
SELECT function_privs_are('workflow', f.fname, f.args, 'public', ARRAY[]::name[],
           format('PUBLIC may not execute workflow.%s(%s)', f.fname,
                  array_to_string(f.args, ', ')))
  FROM wf_tap.fn f ORDER BY f.n;

SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'workflow'::regnamespace
       AND EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                    WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
$$, 'no function in schema workflow is executable by PUBLIC (catalog: proacl)');

-- The grants each role holds itself (the owner's own entries left out).
SELECT set_eq($$
    SELECT p.proname::text AS fname, pg_get_userbyid(a.grantee)::text AS grantee,
           a.privilege_type, a.is_grantable
      FROM pg_catalog.pg_proc p,
           aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
     WHERE p.pronamespace = 'workflow'::regnamespace AND a.grantee <> p.proowner
$$, $$ VALUES
    ('claim', 'workflow_worker', 'EXECUTE', false),
    ('heartbeat', 'workflow_worker', 'EXECUTE', false),
    ('complete_job', 'workflow_worker', 'EXECUTE', false),
    ('complete_and_claim', 'workflow_worker', 'EXECUTE', false),
    ('complete_jobs', 'workflow_worker', 'EXECUTE', false),
    ('fail_job', 'workflow_worker', 'EXECUTE', false),
    ('fail_jobs', 'workflow_worker', 'EXECUTE', false),
    ('release_job', 'workflow_worker', 'EXECUTE', false),
    ('reap_expired', 'workflow_worker', 'EXECUTE', false),
    ('fire_timers', 'workflow_worker', 'EXECUTE', false),
    ('job_inputs', 'workflow_worker', 'EXECUTE', false),
    ('job_step_key', 'workflow_worker', 'EXECUTE', false),
    ('enqueue', 'workflow_client', 'EXECUTE', false),
    ('start_run', 'workflow_client', 'EXECUTE', false),
    ('start_workflow', 'workflow_client', 'EXECUTE', false),
    ('complete_external_step', 'workflow_client', 'EXECUTE', false),
    ('cancel_job', 'workflow_client', 'EXECUTE', false),
    ('cancel_run', 'workflow_client', 'EXECUTE', false),
    ('send_event', 'workflow_client', 'EXECUTE', false),
    ('run_counters', 'workflow_client', 'EXECUTE', false),
    ('run_counters', 'workflow_reader', 'EXECUTE', false),
    ('run_history', 'workflow_client', 'EXECUTE', false),
    ('run_history', 'workflow_reader', 'EXECUTE', false),
    ('run_graph', 'workflow_client', 'EXECUTE', false),
    ('run_graph', 'workflow_reader', 'EXECUTE', false),
    ('verify', 'workflow_reader', 'EXECUTE', false),
    ('maintenance_passes', 'workflow_reader', 'EXECUTE', false),
    ('purge', 'workflow_admin', 'EXECUTE', false),
    ('grant_organization', 'workflow_admin', 'EXECUTE', false),
    ('revoke_organization', 'workflow_admin', 'EXECUTE', false),
    ('register_workflow', 'workflow_admin', 'EXECUTE', false),
    ('unregister_workflow', 'workflow_admin', 'EXECUTE', false),
    ('compensate_run', 'workflow_admin', 'EXECUTE', false),
    ('resume_run', 'workflow_admin', 'EXECUTE', false),
    ('retire_run', 'workflow_admin', 'EXECUTE', false),
    ('retry_run', 'workflow_admin', 'EXECUTE', false),
    ('increase_execution_allowance', 'workflow_admin', 'EXECUTE', false),
    ('uuid_v7', 'workflow_worker', 'EXECUTE', false),
    ('uuid_v7', 'workflow_client', 'EXECUTE', false),
    ('uuid_v7', 'workflow_reader', 'EXECUTE', false),
    ('uuid_v7', 'workflow_admin', 'EXECUTE', false),
    ('output_checksum', 'workflow_worker', 'EXECUTE', false),
    ('output_checksum', 'workflow_client', 'EXECUTE', false),
    ('output_checksum', 'workflow_reader', 'EXECUTE', false),
    ('output_checksum', 'workflow_admin', 'EXECUTE', false),
    ('continuation_source', 'workflow_client', 'EXECUTE', false),
    ('continuation_source', 'workflow_reader', 'EXECUTE', false),
    ('continue_run', 'workflow_client', 'EXECUTE', false),
    ('my_organizations', 'workflow_worker', 'EXECUTE', false),
    ('my_organizations', 'workflow_client', 'EXECUTE', false),
    ('my_organizations', 'workflow_reader', 'EXECUTE', false),
    ('my_organizations', 'workflow_admin', 'EXECUTE', false)
$$, 'the function grants, grantee by grantee: exactly the list of the design, '
    'none WITH GRANT OPTION');

-- No SECURITY DEFINER anywhere: the engine switches to the owner in C.
SELECT isnt_definer('workflow', f.fname, f.args,
           format('workflow.%s(%s) is not SECURITY DEFINER', f.fname,
                  array_to_string(f.args, ', ')))
  FROM wf_tap.fn f ORDER BY f.n;

SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'workflow'::regnamespace
       AND p.proowner <> (SELECT e.extowner FROM pg_catalog.pg_extension e
                           WHERE e.extname = 'workflow')
$$, 'every function of schema workflow is owned by the extension''s owner');

-- ---------------------------------------------------------------------------
-- Tables: SELECT for readers, nothing else for anyone but the owner

CREATE TABLE wf_tap.tbl (n int PRIMARY KEY, tname name NOT NULL);
INSERT INTO wf_tap.tbl VALUES
    (1, 'job_queue'), (2, 'workflow_runs'), (3, 'workflow_steps'),
    (4, 'workflow_step_dependencies'), (5, 'workflow_run_counters'),
    (6, 'organization_members'), (7, 'workflow_events'), (8, 'event_inbox'),
    (9, 'workflow_definitions'), (10, 'parked_steps'), (11, 'workflow_continuations');

SELECT tables_are('workflow', ARRAY[
    'job_queue', 'workflow_runs', 'workflow_steps', 'workflow_step_dependencies',
    'workflow_run_counters', 'organization_members', 'workflow_events',
    'event_inbox', 'workflow_definitions', 'parked_steps', 'workflow_continuations']::name[],
    'schema workflow holds the eleven tables listed here, and no other');

-- 10 tables x 4 roles: the reader SELECTs; the admin too, through
-- workflow_reader; worker and client hold nothing.
SELECT table_privs_are('workflow', t.tname, r.role,
           CASE WHEN r.role IN ('workflow_reader', 'workflow_admin')
                THEN ARRAY['SELECT'] ELSE ARRAY[]::name[] END,
           format('%s holds %s on workflow.%s', r.role,
                  CASE WHEN r.role IN ('workflow_reader', 'workflow_admin')
                       THEN 'SELECT only' ELSE 'no privilege' END, t.tname))
  FROM wf_tap.tbl t CROSS JOIN wf_tap.roles r
 ORDER BY t.n, r.n;

-- 10 tables x PUBLIC
SELECT table_privs_are('workflow', t.tname, 'public', ARRAY[]::name[],
           format('PUBLIC holds no privilege on workflow.%s', t.tname))
  FROM wf_tap.tbl t ORDER BY t.n;

SELECT is_empty($$
    SELECT c.oid::regclass::text || ' ' || a.privilege_type
      FROM pg_catalog.pg_class c,
           aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
     WHERE c.relnamespace = 'workflow'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
       AND a.grantee = 0
$$, 'PUBLIC holds no privilege on any relation of schema workflow (catalog: relacl)');

-- The grants each role holds itself: SELECT for workflow_reader on every
-- table and view; admin, worker and client hold no grant of their own.
SELECT set_eq($$
    SELECT c.relname::text AS tname, pg_get_userbyid(a.grantee)::text AS grantee,
           a.privilege_type, a.is_grantable
      FROM pg_catalog.pg_class c,
           aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
     WHERE c.relnamespace = 'workflow'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
       AND a.grantee <> c.relowner
$$, $$ VALUES
    ('job_queue', 'workflow_reader', 'SELECT', false),
    ('workflow_runs', 'workflow_reader', 'SELECT', false),
    ('workflow_steps', 'workflow_reader', 'SELECT', false),
    ('workflow_step_dependencies', 'workflow_reader', 'SELECT', false),
    ('workflow_run_counters', 'workflow_reader', 'SELECT', false),
    ('organization_members', 'workflow_reader', 'SELECT', false),
    ('workflow_events', 'workflow_reader', 'SELECT', false),
    ('event_inbox', 'workflow_reader', 'SELECT', false),
    ('workflow_definitions', 'workflow_reader', 'SELECT', false),
    ('parked_steps', 'workflow_reader', 'SELECT', false),
    ('workflow_continuations', 'workflow_reader', 'SELECT', false),
    ('run_overview', 'workflow_reader', 'SELECT', false),
    ('queue_stats', 'workflow_reader', 'SELECT', false),
    ('step_timeline', 'workflow_reader', 'SELECT', false),
    ('maintenance_status', 'workflow_reader', 'SELECT', false)
$$, 'the table and view grants, grantee by grantee: SELECT for workflow_reader on each '
    'table and view, nothing else');

SELECT is_empty($$
    SELECT c.relname || '.' || a.attname FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
     WHERE c.relnamespace = 'workflow'::regnamespace AND a.attacl IS NOT NULL
$$, 'no column privilege is granted on any table of schema workflow');

-- ---------------------------------------------------------------------------
-- Views: SELECT for readers, nothing for anyone else

CREATE TABLE wf_tap.vw (n int PRIMARY KEY, vname name NOT NULL);
INSERT INTO wf_tap.vw VALUES (1, 'run_overview'), (2, 'queue_stats'), (3, 'step_timeline'),
    (4, 'maintenance_status');

SELECT views_are('workflow', ARRAY['run_overview', 'queue_stats', 'step_timeline',
                                   'maintenance_status']::name[],
    'schema workflow holds the four views listed here, and no other');

-- 4 views x 4 roles: the reader SELECTs; the admin too, through
-- workflow_reader; worker and client hold nothing.
SELECT table_privs_are('workflow', v.vname, r.role,
           CASE WHEN r.role IN ('workflow_reader', 'workflow_admin')
                THEN ARRAY['SELECT'] ELSE ARRAY[]::name[] END,
           format('%s holds %s on view workflow.%s', r.role,
                  CASE WHEN r.role IN ('workflow_reader', 'workflow_admin')
                       THEN 'SELECT only' ELSE 'no privilege' END, v.vname))
  FROM wf_tap.vw v CROSS JOIN wf_tap.roles r
 ORDER BY v.n, r.n;

-- 4 views x PUBLIC
SELECT table_privs_are('workflow', v.vname, 'public', ARRAY[]::name[],
           format('PUBLIC holds no privilege on view workflow.%s', v.vname))
  FROM wf_tap.vw v ORDER BY v.n;

SELECT is_empty($$
    SELECT d.defaclobjtype::text FROM pg_catalog.pg_default_acl d
     WHERE d.defaclnamespace = 'workflow'::regnamespace
$$, 'no default privileges are set in schema workflow');

-- ---------------------------------------------------------------------------
-- Row-level security: enabled and forced, one policy tenant_rows per table

SELECT is((SELECT row(c.relrowsecurity, c.relforcerowsecurity)::text
             FROM pg_catalog.pg_class c
            WHERE c.oid = format('workflow.%I', t.tname)::regclass),
          row(true, true)::text,
          format('row-level security is enabled and forced on workflow.%s', t.tname))
  FROM wf_tap.tbl t ORDER BY t.n;

SELECT policies_are('workflow', t.tname, ARRAY['tenant_rows']::name[],
           format('workflow.%s has the one policy tenant_rows', t.tname))
  FROM wf_tap.tbl t ORDER BY t.n;

SELECT policy_cmd_is('workflow', t.tname, 'tenant_rows', 'all',
           format('policy tenant_rows on workflow.%s is for ALL commands', t.tname))
  FROM wf_tap.tbl t ORDER BY t.n;

-- (pgTAP's policy_roles_are does not know PUBLIC, role 0)
SELECT is((SELECT array_agg(CASE WHEN x = 0 THEN 'PUBLIC'
                                 ELSE pg_get_userbyid(x)::text END ORDER BY x)
             FROM pg_catalog.pg_policy p, unnest(p.polroles) AS x
            WHERE p.polrelid = format('workflow.%I', t.tname)::regclass
              AND p.polname = 'tenant_rows'),
          ARRAY['PUBLIC'],
          format('policy tenant_rows on workflow.%s applies to PUBLIC', t.tname))
  FROM wf_tap.tbl t ORDER BY t.n;

-- The policies' USING expressions, as PostgreSQL prints them back.
CREATE TABLE wf_tap.policy_qual (n int PRIMARY KEY, tname name NOT NULL, qual text NOT NULL);
INSERT INTO wf_tap.policy_qual VALUES
    (1, 'job_queue',
     '((( SELECT workflow.my_organizations() AS my_organizations) IS NULL) OR '
     '(organization_id = ANY (( SELECT workflow.my_organizations() AS my_organizations)::uuid[])))'),
    (2, 'workflow_runs',
     '((( SELECT workflow.my_organizations() AS my_organizations) IS NULL) OR '
     '(organization_id = ANY (( SELECT workflow.my_organizations() AS my_organizations)::uuid[])))'),
    (3, 'workflow_steps',
     '((( SELECT workflow.my_organizations() AS my_organizations) IS NULL) OR '
     '(organization_id = ANY (( SELECT workflow.my_organizations() AS my_organizations)::uuid[])))'),
    (4, 'workflow_step_dependencies',
     '((( SELECT workflow.my_organizations() AS my_organizations) IS NULL) OR '
     || E'(workflow_run_id IN ( SELECT r.id\n   FROM workflow.workflow_runs r)))'),
    (5, 'workflow_run_counters',
     '((( SELECT workflow.my_organizations() AS my_organizations) IS NULL) OR '
     || E'(workflow_run_id IN ( SELECT r.id\n   FROM workflow.workflow_runs r)))'),
    (6, 'organization_members',
     '((( SELECT workflow.my_organizations() AS my_organizations) IS NULL) OR '
     '(organization_id = ANY (( SELECT workflow.my_organizations() AS my_organizations)::uuid[])))'),
    -- the registry is shared: a tenant role sees every version
    (7, 'workflow_definitions', 'true'),
    (8, 'parked_steps',
     '((( SELECT workflow.my_organizations() AS my_organizations) IS NULL) OR '
     || E'(workflow_run_id IN ( SELECT r.id\n   FROM workflow.workflow_runs r)))'),
    (9, 'workflow_continuations',
     '((( SELECT workflow.my_organizations() AS my_organizations) IS NULL) OR '
     || E'(successor_run_id IN ( SELECT r.id\n   FROM workflow.workflow_runs r)))');

SELECT is((SELECT pg_catalog.pg_get_expr(p.polqual, p.polrelid)
             FROM pg_catalog.pg_policy p
            WHERE p.polrelid = format('workflow.%I', q.tname)::regclass
              AND p.polname = 'tenant_rows'),
          q.qual,
          format('policy tenant_rows on workflow.%s shows a confined role only its '
                 'organizations'' rows', q.tname))
  FROM wf_tap.policy_qual q ORDER BY q.n;

SELECT is_empty($$
    SELECT p.polrelid::regclass::text || ' ' || p.polname FROM pg_catalog.pg_policy p
     WHERE p.polrelid IN (SELECT c.oid FROM pg_catalog.pg_class c
                           WHERE c.relnamespace = 'workflow'::regnamespace)
       AND (NOT p.polpermissive OR p.polwithcheck IS NOT NULL)
$$, 'no policy in schema workflow is RESTRICTIVE or has a WITH CHECK clause');

-- ---------------------------------------------------------------------------
-- The grants at work: login roles holding each role

CREATE ROLE wf_tap_worker LOGIN IN ROLE workflow_worker;
CREATE ROLE wf_tap_client LOGIN IN ROLE workflow_client;
CREATE ROLE wf_tap_reader LOGIN IN ROLE workflow_reader;
CREATE ROLE wf_tap_admin LOGIN IN ROLE workflow_admin;
CREATE ROLE wf_tap_nobody LOGIN;
CREATE ROLE wf_tap_tenant NOLOGIN;

-- A finished run and a queued plain job to read, cancel and purge.
CREATE TABLE wf_tap.fx (k text PRIMARY KEY, v uuid NOT NULL);
GRANT SELECT ON wf_tap.fx TO PUBLIC;
INSERT INTO wf_tap.fx VALUES
    ('run', workflow.start_run('{"steps": [{"key": "e", "kind": "external"}]}')),
    ('job', workflow.enqueue('privs.plain'));
INSERT INTO wf_tap.fx
SELECT 'step', (workflow.complete_external_step(v, 'e', 'SUCCEEDED')).id FROM wf_tap.fx WHERE k = 'run';

-- A table write, each kind, as each of the four roles.
CREATE TABLE wf_tap.writes (n int PRIMARY KEY, sql text NOT NULL, what text NOT NULL);
INSERT INTO wf_tap.writes VALUES
    (1, $$INSERT INTO workflow.job_queue (job_type) VALUES ('privs.direct')$$,
     'INSERT INTO workflow.job_queue'),
    (2, $$UPDATE workflow.workflow_runs SET name = 'x'$$, 'UPDATE workflow.workflow_runs'),
    (3, $$DELETE FROM workflow.workflow_steps$$, 'DELETE FROM workflow.workflow_steps'),
    (4, $$TRUNCATE workflow.organization_members$$, 'TRUNCATE workflow.organization_members');
GRANT SELECT ON wf_tap.writes TO PUBLIC;

SET ROLE wf_tap_worker;
SELECT throws_ok(w.sql, '42501', NULL, format('a worker may not %s', w.what))
  FROM wf_tap.writes w ORDER BY w.n;
SELECT lives_ok($$SELECT * FROM workflow.claim('privs-worker', ARRAY['privs.none'])$$,
    'a worker may claim');
SELECT lives_ok($$SELECT workflow.reap_expired()$$, 'a worker may reap expired leases');
SELECT throws_ok($$SELECT workflow.enqueue('privs.worker')$$, '42501', NULL,
    'a worker may not enqueue');
SELECT throws_ok($$SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}]}')$$,
    '42501', NULL, 'a worker may not start a run');
SELECT throws_ok($$SELECT count(*) FROM workflow.job_queue$$, '42501', NULL,
    'a worker may not read workflow.job_queue');
SELECT throws_ok($$SELECT workflow.purge('1 day', 10)$$, '42501', NULL,
    'a worker may not purge');
SELECT throws_ok($$SELECT count(*) FROM workflow.queue_stats$$, '42501', NULL,
    'a worker may not read workflow.queue_stats');
SELECT throws_ok($$SELECT workflow.run_graph((SELECT v FROM wf_tap.fx WHERE k = 'run'))$$,
    '42501', NULL, 'a worker may not draw a run');
RESET ROLE;

SET ROLE wf_tap_client;
SELECT throws_ok(w.sql, '42501', NULL, format('a client may not %s', w.what))
  FROM wf_tap.writes w ORDER BY w.n;
SELECT lives_ok($$SELECT workflow.enqueue('privs.client')$$, 'a client may enqueue');
SELECT lives_ok($$SELECT * FROM workflow.run_counters((SELECT v FROM wf_tap.fx WHERE k = 'run'))$$,
    'a client may read run counters');
SELECT throws_ok($$SELECT * FROM workflow.claim('privs-client')$$, '42501', NULL,
    'a client may not claim');
SELECT throws_ok($$SELECT * FROM workflow.verify()$$, '42501', NULL,
    'a client may not run verify()');
SELECT throws_ok($$SELECT count(*) FROM workflow.workflow_runs$$, '42501', NULL,
    'a client may not read workflow.workflow_runs');
SELECT throws_ok($$SELECT count(*) FROM workflow.run_overview$$, '42501', NULL,
    'a client may not read workflow.run_overview');
SELECT lives_ok($$SELECT workflow.run_graph((SELECT v FROM wf_tap.fx WHERE k = 'run'), 'mermaid')$$,
    'a client may draw a run');
SELECT throws_ok($$SELECT workflow.grant_organization('wf_tap_tenant',
                                                      '00000000-0000-4000-8000-0000000000e1')$$,
    '42501', NULL, 'a client may not grant organizations');
RESET ROLE;

SET ROLE wf_tap_reader;
SELECT throws_ok(w.sql, '42501', NULL, format('a reader may not %s', w.what))
  FROM wf_tap.writes w ORDER BY w.n;
SELECT is((SELECT count(*)::int FROM workflow.workflow_runs
            WHERE id = (SELECT v FROM wf_tap.fx WHERE k = 'run')), 1,
          'a reader may read workflow.workflow_runs');
SELECT is((SELECT steps_succeeded FROM workflow.run_counters((SELECT v FROM wf_tap.fx WHERE k = 'run'))),
          1, 'a reader may read run counters');
SELECT is_empty($$SELECT * FROM workflow.verify()$$, 'a reader may run verify()');
SELECT is((SELECT row(status, steps_total, steps_succeeded, progress)::text
             FROM workflow.run_overview
            WHERE workflow_run_id = (SELECT v FROM wf_tap.fx WHERE k = 'run')),
          row('SUCCEEDED', 1, 1, 1.0000)::text, 'a reader may read workflow.run_overview');
SELECT lives_ok($$SELECT count(*) FROM workflow.queue_stats$$,
    'a reader may read workflow.queue_stats');
SELECT is((SELECT string_agg(step_key || ' ' || kind || ' ' || status, ',')
             FROM workflow.step_timeline
            WHERE workflow_run_id = (SELECT v FROM wf_tap.fx WHERE k = 'run')),
          'e EXTERNAL SUCCEEDED', 'a reader may read workflow.step_timeline');
SELECT lives_ok($$SELECT workflow.run_graph((SELECT v FROM wf_tap.fx WHERE k = 'run'))$$,
    'a reader may draw a run');
SELECT throws_ok($$SELECT workflow.cancel_job((SELECT v FROM wf_tap.fx WHERE k = 'job'))$$,
    '42501', NULL, 'a reader may not cancel a job');
SELECT throws_ok($$SELECT * FROM workflow.claim('privs-reader')$$, '42501', NULL,
    'a reader may not claim');
RESET ROLE;

SET ROLE wf_tap_admin;
SELECT throws_ok(w.sql, '42501', NULL, format('an admin may not %s', w.what))
  FROM wf_tap.writes w ORDER BY w.n;
SELECT is(workflow.grant_organization('wf_tap_tenant', '00000000-0000-4000-8000-0000000000e1'),
          true, 'an admin may grant an organization');
SELECT is(workflow.revoke_organization('wf_tap_tenant', '00000000-0000-4000-8000-0000000000e1'),
          true, 'an admin may revoke an organization');
SELECT lives_ok($$SELECT workflow.cancel_job((SELECT v FROM wf_tap.fx WHERE k = 'job'))$$,
    'an admin may cancel a job (through workflow_client)');
SELECT lives_ok($$SELECT * FROM workflow.claim('privs-admin', ARRAY['privs.none'])$$,
    'an admin may claim (through workflow_worker)');
SELECT is((SELECT count(*)::int FROM workflow.job_queue
            WHERE id = (SELECT v FROM wf_tap.fx WHERE k = 'job')), 1,
          'an admin may read workflow.job_queue (through workflow_reader)');
SELECT is(workflow.purge('1 day', 10), 0::bigint, 'an admin may purge');
SELECT lives_ok($$SELECT count(*) FROM workflow.step_timeline$$,
    'an admin may read workflow.step_timeline (through workflow_reader)');
SELECT lives_ok($$SELECT workflow.run_graph((SELECT v FROM wf_tap.fx WHERE k = 'run'))$$,
    'an admin may draw a run');
RESET ROLE;

-- memberships: only unconfined callers change them, never for the
-- extension's own roles
SELECT throws_ok($$SELECT workflow.grant_organization('workflow_worker', '00000000-0000-4000-8000-0000000000e1')$$,
    '22023', 'job.invalid_argument: role "workflow_worker" is one of the extension''s roles; grant organizations to the roles that hold it',
    'no organization is granted to one of the four roles');
RESET ROLE;
CREATE ROLE wf_tap_org_admin NOLOGIN IN ROLE workflow_admin;
GRANT wf_tap_org_admin TO wf_tap_admin;
SELECT workflow.grant_organization('wf_tap_org_admin', '00000000-0000-4000-8000-0000000000e2');
SET ROLE wf_tap_admin;
SELECT is(workflow.my_organizations(), '{00000000-0000-4000-8000-0000000000e2}'::uuid[],
          'an admin granted an organization is confined to it');
SELECT throws_ok($$SELECT workflow.revoke_organization('wf_tap_org_admin', '00000000-0000-4000-8000-0000000000e2')$$,
    '42501', 'workflow.organization_forbidden: a tenant role may not change organization memberships',
    'a confined admin may not revoke its own organization (and so be unconfined)');
SELECT throws_ok($$SELECT workflow.grant_organization('wf_tap_tenant', '00000000-0000-4000-8000-0000000000e2')$$,
    '42501', 'workflow.organization_forbidden: a tenant role may not change organization memberships',
    'a confined admin may not confine other roles to its organization');
SELECT is(workflow.my_organizations(), '{00000000-0000-4000-8000-0000000000e2}'::uuid[],
          'the confined admin is still confined');
RESET ROLE;
SELECT workflow.revoke_organization('wf_tap_org_admin', '00000000-0000-4000-8000-0000000000e2');

SET ROLE wf_tap_nobody;
SELECT throws_ok($$SELECT workflow.uuid_v7()$$, '42501', NULL,
    'a role holding none of the four may not even call uuid_v7()');
SELECT throws_ok($$SELECT count(*) FROM workflow.job_queue$$, '42501', NULL,
    'a role holding none of the four may not read workflow.job_queue');
SELECT throws_ok($$SELECT count(*) FROM workflow.run_overview$$, '42501', NULL,
    'a role holding none of the four may not read workflow.run_overview');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
