-- Least privilege and tenants: the four roles and their grants, the
-- engine's writes made as the extension's owner for callers that have no
-- table rights, and tenant roles confined to their organizations in every
-- call, claim and read.  Everything below acts as ordinary login roles
-- through SET ROLE; the roles are cluster-wide, so the file drops any left
-- by an earlier run first and drops its own at the end.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.organization_members;

\set org_a 'a0000000-0000-4000-8000-00000000000a'
\set org_b 'b0000000-0000-4000-8000-00000000000b'
\set org_c 'c0000000-0000-4000-8000-00000000000c'

-- err() shows a statement's SQLSTATE and stable code; errm() its SQLSTATE
-- and whole message with every uuid written <id>, so that the error for
-- another organization's object can be compared with a missing one's.
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
-- state() shows only the SQLSTATE (or ok)
CREATE FUNCTION pg_temp.state(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;
-- org() names the three organizations A, B and C ('-': none)
CREATE FUNCTION pg_temp.org(o uuid) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN o IS NULL THEN '-'
                WHEN o = 'a0000000-0000-4000-8000-00000000000a' THEN 'A'
                WHEN o = 'b0000000-0000-4000-8000-00000000000b' THEN 'B'
                WHEN o = 'c0000000-0000-4000-8000-00000000000c' THEN 'C'
                ELSE o::text END
$$;
CREATE FUNCTION pg_temp.orgs(o uuid[]) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN o IS NULL THEN NULL
                ELSE array_to_string(ARRAY(SELECT pg_temp.org(x) FROM unnest(o) x), ',') END
$$;
-- as_role() evaluates one expression as another role (or shows its error)
CREATE FUNCTION pg_temp.as_role(r text, expr text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE 'SELECT (' || expr || ')::text' INTO v;
    RESET ROLE;
    RETURN v;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END $$;

-- roles left by an earlier run that stopped half-way
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_worker_a, regress_client_a, regress_reader_a,
    regress_admin_a, regress_worker_b, regress_client_b, regress_worker_ac,
    regress_worker_any, regress_admin_any, regress_nobody, regress_tenant_a;
RESET client_min_messages;

-- 1. The roles and what they are granted.
-- four roles that cannot log in; the admin is a member of the other three
SELECT rolname, rolcanlogin, rolsuper, rolbypassrls, rolinherit
  FROM pg_catalog.pg_roles WHERE rolname LIKE 'workflow\_%' ORDER BY 1;
SELECT m.rolname AS member, g.rolname AS member_of
  FROM pg_catalog.pg_auth_members a
  JOIN pg_catalog.pg_roles m ON m.oid = a.member
  JOIN pg_catalog.pg_roles g ON g.oid = a.roleid
 WHERE m.rolname LIKE 'workflow\_%' ORDER BY 1, 2;
CREATE ROLE regress_nobody LOGIN;
-- EXECUTE on every function of the schema, per role; regress_nobody has
-- only what PUBLIC has: nothing
SELECT p.oid::regprocedure AS function,
       has_function_privilege('workflow_worker', p.oid, 'EXECUTE') AS worker,
       has_function_privilege('workflow_client', p.oid, 'EXECUTE') AS client,
       has_function_privilege('workflow_reader', p.oid, 'EXECUTE') AS reader,
       has_function_privilege('workflow_admin', p.oid, 'EXECUTE') AS admin,
       has_function_privilege('regress_nobody', p.oid, 'EXECUTE') AS public
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'workflow'::regnamespace ORDER BY p.oid::regprocedure::text;
-- table rights: SELECT for readers (and the admin, through reader), no
-- write for anyone but the owner; row-level security enabled and forced,
-- one policy per table
SELECT c.relname,
       (SELECT string_agg(p, ',') FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE',
            'TRUNCATE', 'REFERENCES', 'TRIGGER']) p
         WHERE has_table_privilege(r.rolname, c.oid, p)) AS rights,
       r.rolname
  FROM pg_catalog.pg_class c
 CROSS JOIN (VALUES ('workflow_worker'), ('workflow_client'), ('workflow_reader'),
                    ('workflow_admin'), ('regress_nobody')) r(rolname)
 WHERE c.relnamespace = 'workflow'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'p')
   AND has_table_privilege(r.rolname, c.oid,
        'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
 ORDER BY 1, 3;
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
       (SELECT string_agg(polname, ',') FROM pg_catalog.pg_policy p WHERE p.polrelid = c.oid) AS policies
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace = 'workflow'::regnamespace AND c.relkind = 'r' ORDER BY 1;
SELECT r AS role, has_schema_privilege(r, 'workflow', 'USAGE') AS usage,
       has_schema_privilege(r, 'workflow', 'CREATE') AS "create"
  FROM unnest(ARRAY['workflow_worker', 'workflow_client', 'workflow_reader',
                    'workflow_admin', 'regress_nobody']) r;

-- 2. Tenant roles.  Organization A is granted to a group role whose
-- members are A's worker, client, reader and admin; B is granted to B's
-- worker and client directly; regress_worker_ac belongs to A (through the
-- group) and to C; regress_worker_any and regress_admin_any have none.
CREATE ROLE regress_tenant_a NOLOGIN;
CREATE ROLE regress_worker_a LOGIN IN ROLE workflow_worker, workflow_reader, regress_tenant_a;
CREATE ROLE regress_client_a LOGIN IN ROLE workflow_client, regress_tenant_a;
CREATE ROLE regress_reader_a LOGIN IN ROLE workflow_reader, regress_tenant_a;
CREATE ROLE regress_admin_a LOGIN IN ROLE workflow_admin, regress_tenant_a;
CREATE ROLE regress_worker_b LOGIN IN ROLE workflow_worker, workflow_reader;
CREATE ROLE regress_client_b LOGIN IN ROLE workflow_client;
CREATE ROLE regress_worker_ac LOGIN IN ROLE workflow_worker, workflow_client, workflow_reader,
    regress_tenant_a;
CREATE ROLE regress_worker_any LOGIN IN ROLE workflow_worker, workflow_client, workflow_reader;
CREATE ROLE regress_admin_any LOGIN IN ROLE workflow_admin;
SELECT workflow.grant_organization('regress_tenant_a', :'org_a');
SELECT workflow.grant_organization('regress_worker_b', :'org_b');
SELECT workflow.grant_organization('regress_client_b', :'org_b');
SELECT workflow.grant_organization('regress_worker_ac', :'org_c');
-- a repeat adds nothing; NULLs are refused; a superuser or the owner is
-- never confined
SELECT workflow.grant_organization('regress_tenant_a', :'org_a') AS again;
SELECT pg_temp.err($$SELECT workflow.grant_organization(NULL, gen_random_uuid())$$);
SELECT pg_temp.err($$SELECT workflow.grant_organization('regress_worker_b', NULL)$$);
SELECT pg_temp.err(format('SELECT workflow.grant_organization(%L, gen_random_uuid())', current_user));
SELECT role, pg_temp.org(organization_id) AS org
  FROM workflow.organization_members ORDER BY role::text, 2;
-- each role's confinement (NULL: none); PUBLIC may not ask
SELECT r AS role, pg_temp.as_role(r, 'pg_temp.orgs(workflow.my_organizations())') AS my_organizations
  FROM unnest(ARRAY['regress_worker_a', 'regress_client_a', 'regress_reader_a', 'regress_admin_a',
                    'regress_worker_b', 'regress_client_b',
                    'regress_worker_ac', 'regress_worker_any', 'regress_admin_any',
                    'regress_nobody']) r;
SELECT workflow.my_organizations() AS superuser_confined_to;

-- 3. Each organization's work.  Tenant clients name no organization and
-- get their own; a run of the superuser has none.  These three runs keep
-- their counters in two shards whatever the session's settings, so that
-- workflow_run_counters has rows of each below.
\set def '{"name": "tenant", "steps": [{"key": "work", "job_type": "t.step"}, {"key": "approve", "kind": "external"}, {"key": "done", "job_type": "t.done", "depends_on": ["work", "approve"]}]}'
SET workflow.counter_shards = 2;
SET workflow.counter_shard_min_width = 2;
SET ROLE regress_client_a;
SELECT workflow.start_run(:'def') AS ra \gset
SELECT workflow.enqueue('t.plain', '{"org": "A"}') AS pa \gset
SET ROLE regress_client_b;
SELECT workflow.start_run(:'def') AS rb \gset
SELECT workflow.enqueue('t.plain', '{"org": "B"}') AS pb \gset
RESET ROLE;
SELECT workflow.start_run(:'def') AS rn \gset
RESET workflow.counter_shards;
RESET workflow.counter_shard_min_width;
SELECT workflow.enqueue('t.plain', '{"org": null}') AS pn \gset
SELECT workflow.enqueue('t.plain', '{"org": "C"}', organization_id => :'org_c') AS pc \gset
SELECT CASE id WHEN :'ra' THEN 'ra' WHEN :'rb' THEN 'rb' ELSE 'rn' END AS run,
       pg_temp.org(organization_id) AS org, status, counter_shards
  FROM workflow.workflow_runs ORDER BY 1;
SELECT pg_temp.org(organization_id) AS org, job_type, status, payload
  FROM workflow.job_queue ORDER BY 1, 2;
SELECT pg_temp.org(organization_id) AS org, count(*) AS steps
  FROM workflow.workflow_steps GROUP BY 1 ORDER BY 1;

-- 4. What each role sees, table by table, against the superuser's view:
-- organization=rows for every organization it sees rows of.
CREATE TEMP TABLE run_org (id uuid PRIMARY KEY, org uuid);
CREATE TEMP TABLE seen (who text, tbl text, orgs text);
GRANT SELECT ON run_org TO PUBLIC;
GRANT INSERT ON seen TO PUBLIC;
CREATE FUNCTION pg_temp.look(who text) RETURNS void LANGUAGE sql AS $$
INSERT INTO pg_temp.seen
SELECT who, t.tbl, coalesce(string_agg(c.o || '=' || c.n, ' ' ORDER BY c.o), '')
  FROM (VALUES ('job_queue'), ('workflow_runs'), ('workflow_steps'),
               ('workflow_step_dependencies'), ('workflow_run_counters'),
               ('organization_members')) t(tbl)
  LEFT JOIN (
    SELECT 'job_queue' AS tbl, pg_temp.org(organization_id) AS o, count(*) AS n
      FROM workflow.job_queue GROUP BY 2
    UNION ALL
    SELECT 'workflow_runs', pg_temp.org(organization_id), count(*)
      FROM workflow.workflow_runs GROUP BY 2
    UNION ALL
    SELECT 'workflow_steps', pg_temp.org(organization_id), count(*)
      FROM workflow.workflow_steps GROUP BY 2
    UNION ALL
    SELECT 'workflow_step_dependencies', pg_temp.org(r.org), count(*)
      FROM workflow.workflow_step_dependencies d
      LEFT JOIN pg_temp.run_org r ON r.id = d.workflow_run_id GROUP BY 2
    UNION ALL
    SELECT 'workflow_run_counters', pg_temp.org(r.org), count(*)
      FROM workflow.workflow_run_counters k
      LEFT JOIN pg_temp.run_org r ON r.id = k.workflow_run_id GROUP BY 2
    UNION ALL
    SELECT 'organization_members', pg_temp.org(organization_id), count(*)
      FROM workflow.organization_members GROUP BY 2) c ON c.tbl = t.tbl
 GROUP BY t.tbl
$$;
INSERT INTO run_org SELECT id, organization_id FROM workflow.workflow_runs;
SELECT pg_temp.look('superuser');
SET ROLE regress_reader_a;
SELECT pg_temp.look('reader_a');
SET ROLE regress_worker_a;
SELECT pg_temp.look('worker_a');
SET ROLE regress_worker_b;
SELECT pg_temp.look('worker_b');
SET ROLE regress_worker_ac;
SELECT pg_temp.look('worker_ac');
SET ROLE regress_worker_any;
SELECT pg_temp.look('worker_any');
RESET ROLE;
SELECT tbl,
       max(orgs) FILTER (WHERE who = 'superuser') AS superuser,
       max(orgs) FILTER (WHERE who = 'reader_a') AS reader_a,
       max(orgs) FILTER (WHERE who = 'worker_a') AS worker_a,
       max(orgs) FILTER (WHERE who = 'worker_b') AS worker_b,
       max(orgs) FILTER (WHERE who = 'worker_ac') AS worker_ac,
       max(orgs) FILTER (WHERE who = 'worker_any') AS worker_any
  FROM seen GROUP BY tbl ORDER BY tbl;
-- ... and nothing at all without a workflow role
SET ROLE regress_nobody;
SELECT pg_temp.errm('SELECT count(*) FROM workflow.job_queue');
SELECT pg_temp.errm('SELECT workflow.uuid_v7()');
RESET ROLE;

-- 5. Claims.  A's worker gets A's jobs only, whatever the types, batch
-- size or organization it asks for; naming B or C gives nothing.
SET ROLE regress_worker_a;
SELECT count(*) AS naming_b FROM workflow.claim('wa', NULL, 1000, :'org_b');
SELECT count(*) AS naming_c FROM workflow.claim('wa', ARRAY['t.plain'], 10, :'org_c');
SELECT count(*) AS naming_b_with_stage FROM workflow.claim('wa', ARRAY['t.plain', 't.step'], 10, :'org_b', 'x');
SELECT job_type, pg_temp.org(organization_id) AS org, status, worker_id
  FROM workflow.claim('wa', ARRAY['t.step'], 1);
SELECT job_type, pg_temp.org(organization_id) AS org, status, worker_id
  FROM workflow.claim('wa', ARRAY['t.plain', 't.step', 't.done'], 1000);
SELECT count(*) AS none_left FROM workflow.claim('wa', NULL, 1000);
SELECT count(*) AS none_left_of_a FROM workflow.claim('wa', NULL, 2, :'org_a');
RESET ROLE;
SELECT pg_temp.org(organization_id) AS org, job_type, status, worker_id
  FROM workflow.job_queue ORDER BY 1, 2;
SELECT id AS a_step, lease_token AS a_step_token FROM workflow.job_queue
 WHERE organization_id = :'org_a' AND job_type = 't.step' \gset
SELECT id AS a_plain, lease_token AS a_plain_token FROM workflow.job_queue
 WHERE organization_id = :'org_a' AND job_type = 't.plain' \gset
-- B's worker takes B's jobs
SET ROLE regress_worker_b;
SELECT id AS b_step, lease_token AS b_step_token, pg_temp.org(organization_id) AS b_step_org
  FROM workflow.claim('wb', ARRAY['t.step'], 10) \gset
SELECT id AS b_plain, lease_token AS b_plain_token, pg_temp.org(organization_id) AS b_plain_org
  FROM workflow.claim('wb', NULL, 10) \gset
SELECT :'b_step_org' AS b_step_org, :'b_plain_org' AS b_plain_org;
RESET ROLE;

-- 6. B's jobs behave for A's roles exactly like jobs that do not exist:
-- same SQLSTATE, same message, even with B's lease tokens in hand.
SET ROLE regress_worker_a;
SELECT pg_temp.errm(format('SELECT workflow.heartbeat(%L, %L)', :'b_step', :'b_step_token')) AS heartbeat_b,
       pg_temp.errm(format('SELECT workflow.heartbeat(%L, %L)', gen_random_uuid(), :'b_step_token')) AS heartbeat_missing;
SELECT pg_temp.errm(format('SELECT workflow.complete_job(%L, %L)', :'b_step', :'b_step_token'))
     = pg_temp.errm(format('SELECT workflow.complete_job(%L, %L)', gen_random_uuid(), :'b_step_token')) AS same,
       pg_temp.errm(format('SELECT workflow.complete_job(%L, %L)', :'b_step', :'b_step_token')) AS complete_job_b;
SELECT pg_temp.errm(format($$SELECT workflow.fail_job(%L, %L, 'e', 'm')$$, :'b_plain', :'b_plain_token'))
     = pg_temp.errm(format($$SELECT workflow.fail_job(%L, %L, 'e', 'm')$$, gen_random_uuid(), :'b_plain_token')) AS same,
       pg_temp.errm(format($$SELECT workflow.fail_job(%L, %L, 'e', 'm', false)$$, :'b_plain', :'b_plain_token')) AS fail_job_b;
SELECT pg_temp.errm(format('SELECT workflow.release_job(%L, %L)', :'b_plain', :'b_plain_token'))
     = pg_temp.errm(format('SELECT workflow.release_job(%L, %L)', gen_random_uuid(), :'b_plain_token')) AS same,
       pg_temp.errm(format('SELECT workflow.release_job(%L, %L)', :'b_plain', :'b_plain_token')) AS release_job_b;
-- the batch forms: B's job alone, or next to A's own job (which is not
-- finished either: the call fails whole)
SELECT pg_temp.errm(format('SELECT count(*) FROM workflow.complete_jobs(ARRAY[%L]::uuid[], ARRAY[%L]::uuid[])',
                           :'b_step', :'b_step_token')) AS complete_jobs_b;
SELECT pg_temp.errm(format('SELECT count(*) FROM workflow.complete_jobs(ARRAY[%L, %L]::uuid[], ARRAY[%L, %L]::uuid[])',
                           :'a_plain', :'b_plain', :'a_plain_token', :'b_plain_token')) AS complete_jobs_a_and_b;
SELECT pg_temp.errm(format($$SELECT count(*) FROM workflow.fail_jobs(ARRAY[%L, %L]::uuid[], ARRAY[%L, %L]::uuid[],
                                ARRAY['e', 'e'], ARRAY['m', 'm'])$$,
                           :'a_plain', :'b_step', :'a_plain_token', :'b_step_token')) AS fail_jobs_a_and_b;
SELECT pg_temp.errm(format($$SELECT count(*) FROM workflow.fail_jobs(ARRAY[%L]::uuid[], ARRAY[%L]::uuid[],
                                ARRAY['e'], ARRAY['m'])$$, gen_random_uuid(), :'b_step_token')) AS fail_jobs_missing;
SET ROLE regress_client_a;
SELECT pg_temp.errm(format('SELECT workflow.cancel_job(%L)', :'b_plain'))
     = pg_temp.errm(format('SELECT workflow.cancel_job(%L)', gen_random_uuid())) AS same,
       pg_temp.errm(format('SELECT workflow.cancel_job(%L)', :'b_plain')) AS cancel_job_b;
-- nor is a job without an organization one of A's
SELECT pg_temp.errm(format($$SELECT workflow.cancel_job(%L, 'mine?')$$, :'pn')) AS cancel_job_no_org;
RESET ROLE;
-- nothing moved: B's jobs are held by B's worker with their tokens, A's
-- plain job is still running
SELECT pg_temp.org(organization_id) AS org, job_type, status, worker_id, attempt,
       lease_token = CASE id WHEN :'b_step' THEN :'b_step_token'::uuid
                             WHEN :'b_plain' THEN :'b_plain_token'::uuid
                             ELSE lease_token END AS same_token
  FROM workflow.job_queue ORDER BY 1, 2;

-- 7. A's worker finishes its own jobs, though it may not write a table:
-- the engine writes them as the extension's owner.
SET ROLE regress_worker_a;
SELECT has_table_privilege('workflow.job_queue', 'UPDATE') AS may_update_jobs,
       has_table_privilege('workflow.workflow_steps', 'UPDATE') AS may_update_steps,
       has_table_privilege('workflow.workflow_runs', 'UPDATE') AS may_update_runs;
SELECT pg_temp.errm(format($$UPDATE workflow.job_queue SET status = 'SUCCEEDED' WHERE id = %L$$, :'a_step'));
SELECT workflow.heartbeat(:'a_step', :'a_step_token') > now() AS heartbeat;
SELECT workflow.release_job(:'a_step', :'a_step_token');
SELECT id AS a_step, lease_token AS a_step_token FROM workflow.claim('wa', ARRAY['t.step']) \gset
SELECT workflow.complete_job(:'a_step', :'a_step_token', '{"by": "worker_a"}');
SELECT workflow.fail_job(:'a_plain', :'a_plain_token', 'e.flaky', 'try again');
SELECT step_key, status, output FROM workflow.workflow_steps
 WHERE workflow_run_id = :'ra' ORDER BY step_key;
SELECT job_type, status, attempt, last_error_code FROM workflow.job_queue ORDER BY 1;
RESET ROLE;

-- 8. External steps and runs of another organization (or of none) are
-- missing for A's client, exactly like a run that does not exist.
SET ROLE regress_client_a;
SELECT pg_temp.errm(format($$SELECT workflow.complete_external_step(%L, 'approve', 'SUCCEEDED')$$, :'rb')) AS external_b,
       pg_temp.errm(format($$SELECT workflow.complete_external_step(%L, 'approve', 'SUCCEEDED')$$, gen_random_uuid())) AS external_missing;
SELECT pg_temp.errm(format($$SELECT workflow.complete_external_step(%L, 'approve', 'SUCCEEDED',
                                 organization_id => %L)$$, :'rb', :'org_b')) AS naming_b,
       pg_temp.errm(format($$SELECT workflow.complete_external_step(%L, 'approve', 'SUCCEEDED',
                                 organization_id => %L)$$, :'rb', :'org_a')) AS naming_a;
SELECT pg_temp.errm(format($$SELECT workflow.complete_external_step(%L, 'approve', 'SUCCEEDED')$$, :'rn')) AS external_no_org;
-- its own run, named under another organization, is missing too
SELECT pg_temp.errm(format($$SELECT workflow.complete_external_step(%L, 'approve', 'SUCCEEDED',
                                 organization_id => %L)$$, :'ra', :'org_b')) AS own_run_naming_b;
SELECT pg_temp.errm(format('SELECT workflow.cancel_run(%L)', :'rb'))
     = pg_temp.errm(format('SELECT workflow.cancel_run(%L)', gen_random_uuid())) AS same,
       pg_temp.errm(format($$SELECT workflow.cancel_run(%L, 'mine now')$$, :'rb')) AS cancel_run_b,
       pg_temp.errm(format($$SELECT workflow.cancel_run(%L, 'mine now', %L)$$, :'rn', :'org_a')) AS cancel_run_no_org;
SELECT count(*) AS counters_of_b FROM workflow.run_counters(:'rb');
SELECT steps_total, steps_succeeded, steps_waiting FROM workflow.run_counters(:'ra');
-- its own external step, with or without naming A
SELECT step_key, status FROM workflow.complete_external_step(:'ra', 'approve', 'SUCCEEDED', '{"ok": true}');
SELECT step_key, status FROM workflow.complete_external_step(:'ra', 'approve', 'SUCCEEDED', '{"ok": true}',
                                                             organization_id => :'org_a');
RESET ROLE;
SELECT CASE workflow_run_id WHEN :'ra' THEN 'ra' WHEN :'rb' THEN 'rb' ELSE 'rn' END AS run,
       step_key, status FROM workflow.workflow_steps ORDER BY 1, 2;
SELECT CASE id WHEN :'ra' THEN 'ra' WHEN :'rb' THEN 'rb' ELSE 'rn' END AS run, status
  FROM workflow.workflow_runs ORDER BY 1;

-- 9. Direct writes: no role but the owner may write a table, tenant or
-- not, admin or not.
CREATE FUNCTION pg_temp.writes() RETURNS TABLE (tbl name, ins text, upd text, del text, trunc text)
LANGUAGE sql AS $$
SELECT c.relname,
       pg_temp.state(format('INSERT INTO workflow.%I DEFAULT VALUES', c.relname)),
       pg_temp.state(format('UPDATE workflow.%I t SET %I = t.%I', c.relname, a.attname, a.attname)),
       pg_temp.state(format('DELETE FROM workflow.%I', c.relname)),
       pg_temp.state(format('TRUNCATE workflow.%I', c.relname))
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = 1
 WHERE c.relnamespace = 'workflow'::regnamespace AND c.relkind = 'r'
 ORDER BY 1
$$;
SET ROLE regress_worker_a;
SELECT * FROM pg_temp.writes();
SET ROLE regress_admin_any;
SELECT * FROM pg_temp.writes();
RESET ROLE;
-- and no caller can raise a bound for itself
SET ROLE regress_worker_a;
SET workflow.max_steps = 1000000000;
BEGIN;
SET LOCAL workflow.max_payload_bytes = 1000000000;
ROLLBACK;
SELECT set_config('workflow.max_edges', '1000000000', false);
SET workflow.retry_base_delay_ms = 1;
SET ROLE regress_admin_any;
SET workflow.max_steps = 1000000000;
RESET ROLE;
SELECT current_setting('workflow.max_steps') AS max_steps,
       current_setting('workflow.retry_base_delay_ms') AS retry_base_delay_ms;

-- 10. Functions outside a role's grants are refused.
SET ROLE regress_client_a;
SELECT pg_temp.errm($$SELECT count(*) FROM workflow.claim('c')$$) AS claim,
       pg_temp.errm($$SELECT workflow.reap_expired()$$) AS reap_expired;
SELECT pg_temp.errm(format('SELECT workflow.complete_job(%L, %L)', :'a_plain', :'a_plain_token')) AS complete_job,
       pg_temp.errm($$SELECT workflow.purge('1 day', 10)$$) AS purge;
SET ROLE regress_reader_a;
SELECT pg_temp.errm($$SELECT workflow.enqueue('r')$$) AS enqueue,
       pg_temp.errm(format('SELECT workflow.start_run(%L)', :'def')) AS start_run;
SELECT pg_temp.errm(format('SELECT workflow.cancel_run(%L)', :'ra')) AS cancel_run,
       pg_temp.errm(format($$SELECT workflow.complete_external_step(%L, 'approve', 'SUCCEEDED')$$, :'ra')) AS complete_external_step;
SELECT pg_temp.errm($$SELECT count(*) FROM workflow.claim('r')$$) AS claim;
SELECT steps_total, steps_succeeded FROM workflow.run_counters(:'ra');
SELECT count(*) AS problems FROM workflow.verify();
SET ROLE regress_worker_a;
SELECT pg_temp.errm($$SELECT workflow.purge('1 day', 10)$$) AS purge,
       pg_temp.errm(format('SELECT workflow.grant_organization(%L, %L)', 'regress_worker_a', :'org_b')) AS grant_organization;
SELECT pg_temp.errm(format('SELECT workflow.revoke_organization(%L, %L)', 'regress_tenant_a', :'org_a')) AS revoke_organization,
       pg_temp.errm($$SELECT workflow.enqueue('w')$$) AS enqueue;
SELECT pg_temp.errm(format('SELECT workflow.start_run(%L)', :'def')) AS start_run,
       pg_temp.errm(format('SELECT workflow.cancel_job(%L)', :'a_plain')) AS cancel_job;
RESET ROLE;

-- 11. Writing under an organization: a tenant writes only under its own,
-- and, naming none, under its only one.
SET ROLE regress_client_a;
SELECT pg_temp.errm(format($$SELECT workflow.enqueue('t.x', organization_id => %L)$$, :'org_b')) AS enqueue_b;
SELECT pg_temp.errm(format('SELECT workflow.start_run(%L, %L)', :'def', :'org_c')) AS start_run_c;
SELECT workflow.enqueue('t.named', organization_id => :'org_a') AS named \gset
-- idempotency keys are per organization: B's key is no match for A
SELECT workflow.start_run('{"steps": [{"key": "k", "kind": "external"}]}', NULL, 'key-1') AS ka \gset
SELECT workflow.start_run('{"steps": [{"key": "k", "kind": "external"}]}', :'org_a', 'key-1') = :'ka' AS same_run;
SET ROLE regress_client_b;
SELECT workflow.start_run('{"steps": [{"key": "k", "kind": "external"}]}', NULL, 'key-1') AS kb \gset
RESET ROLE;
SELECT pg_temp.org(organization_id) AS named_org FROM workflow.job_queue WHERE id = :'named';
SELECT :'ka' <> :'kb' AS two_runs,
       (SELECT string_agg(pg_temp.org(organization_id), ',' ORDER BY 1) FROM workflow.workflow_runs
         WHERE idempotency_key = 'key-1') AS orgs;
SELECT pg_temp.org(organization_id) AS org, job_type, status FROM workflow.job_queue
 WHERE job_type IN ('t.x', 't.named') ORDER BY 1, 2;

-- 12. Lease expiry: a tenant's reap_expired expires its organizations'
-- expired leases only.  Running now: A's plain job again, B's two jobs,
-- and C's and the unscoped plain jobs, taken by the unscoped worker.
SET ROLE regress_worker_a;
SELECT job_type, pg_temp.org(organization_id) AS org FROM workflow.claim('wa', ARRAY['t.plain']);
SET ROLE regress_worker_any;
SELECT job_type, pg_temp.org(organization_id) AS org FROM workflow.claim('wany', ARRAY['t.plain'], 10)
 ORDER BY 2;
RESET ROLE;
UPDATE workflow.job_queue SET leased_until = now() - interval '1 minute' WHERE status = 'RUNNING';
CREATE FUNCTION pg_temp.running() RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(pg_temp.org(organization_id) || ':' || job_type, ' '
                      ORDER BY pg_temp.org(organization_id), job_type)
      FROM workflow.job_queue WHERE status = 'RUNNING'
$$;
SELECT pg_temp.running() AS running;
SET ROLE regress_worker_a;
SELECT workflow.reap_expired() AS reaped_by_a;
RESET ROLE;
SELECT pg_temp.running() AS running;
SET ROLE regress_worker_ac;
SELECT workflow.reap_expired() AS reaped_by_ac;
RESET ROLE;
SELECT pg_temp.running() AS running;
SET ROLE regress_worker_b;
SELECT workflow.reap_expired() AS reaped_by_b;
RESET ROLE;
SELECT pg_temp.running() AS running;
SET ROLE regress_worker_any;
SELECT workflow.reap_expired() AS reaped_by_any;
RESET ROLE;
SELECT pg_temp.running() AS running;
SELECT pg_temp.org(organization_id) AS org, job_type, status, last_error_code
  FROM workflow.job_queue WHERE job_type IN ('t.plain', 't.step') ORDER BY 1, 2;
SELECT CASE workflow_run_id WHEN :'ra' THEN 'ra' WHEN :'rb' THEN 'rb' ELSE 'rn' END AS run,
       step_key, status FROM workflow.workflow_steps
 WHERE workflow_run_id IN (:'ra', :'rb', :'rn') ORDER BY 1, 2;

-- 13. Every role finishes its organization's work.
CREATE TEMP TABLE claimed (id uuid, lease_token uuid);
GRANT SELECT, INSERT ON claimed TO PUBLIC;
SET ROLE regress_worker_a;
SELECT count(*) AS completed_a FROM workflow.claim('wa', NULL, 10) c,
       workflow.complete_job(c.id, c.lease_token, jsonb_build_object('type', c.job_type)) x;
SET ROLE regress_worker_b;
SELECT count(*) AS completed_b FROM workflow.claim('wb', NULL, 10) c,
       workflow.complete_job(c.id, c.lease_token) x;
RESET ROLE;
SET ROLE regress_client_b;
SELECT step_key, status FROM workflow.complete_external_step(:'rb', 'approve', 'SUCCEEDED');
SET ROLE regress_worker_b;
INSERT INTO claimed SELECT id, lease_token FROM workflow.claim('wb', NULL, 10);
SELECT count(*) AS completed_b FROM workflow.complete_jobs(
    ARRAY(SELECT id FROM claimed ORDER BY id), ARRAY(SELECT lease_token FROM claimed ORDER BY id));
SET ROLE regress_worker_any;
SELECT step_key, status FROM workflow.complete_external_step(:'rn', 'approve', 'SUCCEEDED');
SELECT count(*) AS completed_any FROM workflow.claim('wany', ARRAY['t.step', 't.done', 't.plain'], 10) c,
       workflow.complete_job(c.id, c.lease_token) x;
SELECT count(*) AS completed_any FROM workflow.claim('wany', ARRAY['t.step', 't.done', 't.plain'], 10) c,
       workflow.complete_job(c.id, c.lease_token) x;
RESET ROLE;
SELECT CASE id WHEN :'ra' THEN 'ra' WHEN :'rb' THEN 'rb' ELSE 'rn' END AS run, status
  FROM workflow.workflow_runs WHERE id IN (:'ra', :'rb', :'rn') ORDER BY 1;
SELECT pg_temp.org(organization_id) AS org, job_type, status FROM workflow.job_queue ORDER BY 1, 2;

-- 14. A whole run as tenant roles: A's client starts it, A's worker works
-- it, the client approves, A's reader reads it.
SET ROLE regress_client_a;
SELECT workflow.start_run('{"name": "e2e", "result_step": "publish", "steps": [
    {"key": "fetch", "job_type": "e2e.fetch"},
    {"key": "test", "job_type": "e2e.test", "depends_on": ["fetch"]},
    {"key": "approve", "kind": "external", "depends_on": ["test"]},
    {"key": "publish", "job_type": "e2e.publish",
     "depends_on": ["approve", {"step": "test", "release": "on_terminal"}]}]}') AS e2e \gset
SET ROLE regress_worker_a;
SELECT id AS j, lease_token AS t FROM workflow.claim('wa', ARRAY['e2e.fetch', 'e2e.test', 'e2e.publish']) \gset
SELECT workflow.heartbeat(:'j', :'t') > now() AS heartbeat;
SELECT workflow.complete_job(:'j', :'t', '{"sha": "abc"}');
SELECT id AS j, lease_token AS t FROM workflow.claim('wa', ARRAY['e2e.fetch', 'e2e.test', 'e2e.publish']) \gset
SELECT workflow.fail_job(:'j', :'t', 'e.flaky', 'first try');
SELECT id AS j, lease_token AS t FROM workflow.claim('wa', ARRAY['e2e.fetch', 'e2e.test', 'e2e.publish']) \gset
SELECT workflow.complete_job(:'j', :'t', '{"passed": 12}');
SET ROLE regress_reader_a;
SELECT status FROM workflow.workflow_runs WHERE id = :'e2e';
SET ROLE regress_client_a;
SELECT step_key, status FROM workflow.complete_external_step(:'e2e', 'approve', 'SUCCEEDED', '{"by": "ann"}');
SET ROLE regress_worker_a;
SELECT id AS j, lease_token AS t FROM workflow.claim('wa', ARRAY['e2e.fetch', 'e2e.test', 'e2e.publish']) \gset
SELECT workflow.complete_job(:'j', :'t', '{"url": "https://example.com/r/1"}');
SET ROLE regress_reader_a;
SELECT pg_temp.org(organization_id) AS org, name, status, result FROM workflow.workflow_runs WHERE id = :'e2e';
SELECT step_key, status, (SELECT max(attempt) FROM workflow.job_queue j WHERE j.workflow_step_id = s.id) AS attempts,
       pg_temp.org(organization_id) AS org
  FROM workflow.workflow_steps s WHERE workflow_run_id = :'e2e' ORDER BY created_at, step_key;
SELECT * FROM workflow.run_counters(:'e2e');
SELECT * FROM workflow.verify(:'e2e');
SELECT * FROM workflow.verify();
RESET ROLE;
SELECT * FROM workflow.verify(:'e2e');

-- 15. A role of two organizations must name one to write, claims from
-- both when it names none, and sees both.
SET ROLE regress_worker_ac;
SELECT pg_temp.orgs(workflow.my_organizations()) AS my_organizations;
SELECT pg_temp.errm($$SELECT workflow.enqueue('ac.job')$$) AS enqueue_unnamed;
SELECT pg_temp.errm(format('SELECT workflow.start_run(%L)', :'def')) AS start_run_unnamed;
SELECT pg_temp.errm(format($$SELECT workflow.enqueue('ac.job', organization_id => %L)$$, :'org_b')) AS enqueue_b;
SELECT workflow.enqueue('ac.job', '{"n": 1}', organization_id => :'org_a') AS ac1 \gset
SELECT workflow.enqueue('ac.job', '{"n": 2}', organization_id => :'org_c') AS ac2 \gset
SELECT pg_temp.org(organization_id) AS org FROM workflow.job_queue
 WHERE id IN (:'ac1', :'ac2') ORDER BY 1;
SELECT workflow.start_run('{"name": "ac", "steps": [{"key": "w", "kind": "external"}]}', :'org_c') AS rc \gset
RESET ROLE;
SELECT workflow.enqueue('ac.job', '{"n": 3}', organization_id => :'org_b') IS NOT NULL AS enqueued;
SELECT workflow.enqueue('ac.job', '{"n": 4}') IS NOT NULL AS enqueued;
SET ROLE regress_worker_ac;
SELECT payload, pg_temp.org(organization_id) AS org
  FROM workflow.claim('wac', ARRAY['ac.job'], 10) ORDER BY payload->>'n';
SELECT count(*) AS completed FROM workflow.job_queue j, workflow.complete_job(j.id, j.lease_token) x
 WHERE j.id IN (:'ac1', :'ac2');
SELECT count(*) AS naming_b FROM workflow.claim('wac', ARRAY['ac.job'], 10, :'org_b');
SELECT count(*) AS more FROM workflow.claim('wac', ARRAY['ac.job'], 10);
SELECT pg_temp.org(organization_id) AS org, count(*) AS jobs
  FROM workflow.job_queue GROUP BY 1 ORDER BY 1;
SELECT pg_temp.org(organization_id) AS org, name, status FROM workflow.workflow_runs ORDER BY 1, 2;
SELECT workflow.cancel_run(:'rc', 'not needed');
RESET ROLE;

-- 16. Forgetting cached organizations.  A backend caches the organizations
-- of the role it serves.  Here the superuser changes organization_members
-- by hand, and then the tenant's role membership, in statements that look
-- up no role's organizations: only the invalidation that such a change
-- sends makes the tenant's next call in this session read them again.
-- specs/race_revoke_organization.spec changes them from another session.
SET ROLE regress_worker_b;
SELECT pg_temp.orgs(workflow.my_organizations()) AS worker_b;
RESET ROLE;
DELETE FROM workflow.organization_members WHERE role = 'regress_worker_b'::regrole;
SET ROLE regress_worker_b;
SELECT pg_temp.orgs(workflow.my_organizations()) AS worker_b_after_delete;
RESET ROLE;
INSERT INTO workflow.organization_members (role, organization_id) VALUES ('regress_worker_b', :'org_b');
SET ROLE regress_worker_b;
SELECT pg_temp.orgs(workflow.my_organizations()) AS worker_b_after_insert;
SET ROLE regress_reader_a;
SELECT pg_temp.orgs(workflow.my_organizations()) AS reader_a, count(*) AS runs_seen FROM workflow.workflow_runs;
RESET ROLE;
REVOKE regress_tenant_a FROM regress_reader_a;
SET ROLE regress_reader_a;
SELECT pg_temp.orgs(workflow.my_organizations()) AS reader_a_left_a, count(*) AS runs_seen FROM workflow.workflow_runs;
RESET ROLE;
GRANT regress_tenant_a TO regress_reader_a;
SET ROLE regress_reader_a;
SELECT pg_temp.orgs(workflow.my_organizations()) AS reader_a_back_in_a, count(*) AS runs_seen FROM workflow.workflow_runs;
RESET ROLE;
-- revoke_organization: C is taken from regress_worker_ac, which keeps A;
-- B is taken from B's worker, which has no organization left and is
-- unconfined again: it sees and claims everything
SELECT workflow.revoke_organization('regress_worker_ac', :'org_c');
SELECT workflow.revoke_organization('regress_worker_ac', :'org_c') AS again;
SELECT pg_temp.err($$SELECT workflow.revoke_organization(NULL, gen_random_uuid())$$);
SELECT workflow.revoke_organization('regress_worker_b', :'org_b');
SELECT r AS role, pg_temp.as_role(r, 'pg_temp.orgs(workflow.my_organizations())') AS my_organizations
  FROM unnest(ARRAY['regress_worker_ac', 'regress_worker_b', 'regress_client_b']) r;
SELECT workflow.enqueue('rev.job', '{"n": 1}', organization_id => :'org_a') IS NOT NULL AS enqueued;
SELECT workflow.enqueue('rev.job', '{"n": 2}', organization_id => :'org_c') IS NOT NULL AS enqueued;
SELECT workflow.enqueue('rev.job', '{"n": 3}') IS NOT NULL AS enqueued;
SET ROLE regress_worker_ac;
SELECT payload, pg_temp.org(organization_id) AS org FROM workflow.claim('wac', ARRAY['rev.job'], 10);
SET ROLE regress_worker_b;
SELECT payload, pg_temp.org(organization_id) AS org
  FROM workflow.claim('wb', ARRAY['rev.job'], 10) ORDER BY payload->>'n';
SELECT count(*) AS runs_seen FROM workflow.workflow_runs;
RESET ROLE;
SELECT count(*) AS runs_total FROM workflow.workflow_runs;
SELECT workflow.grant_organization('regress_worker_b', :'org_b');
SELECT count(*) AS completed FROM workflow.job_queue j, workflow.complete_job(j.id, j.lease_token) x
 WHERE j.job_type = 'rev.job' AND j.status = 'RUNNING';

-- 17. A tenant admin: changes no memberships at all (not even of its own
-- organizations: it could otherwise revoke its own last one and be
-- unconfined, or confine other roles), sees only its organizations'
-- memberships, and purges only their finished work.
SET ROLE regress_admin_a;
SELECT role, pg_temp.org(organization_id) AS org FROM workflow.organization_members ORDER BY role::text;
SELECT pg_temp.errm(format('SELECT workflow.grant_organization(%L, %L)', 'regress_worker_ac', :'org_b')) AS grant_b;
SELECT pg_temp.errm(format('SELECT workflow.revoke_organization(%L, %L)', 'regress_worker_b', :'org_b')) AS revoke_b;
SELECT pg_temp.errm(format('SELECT workflow.grant_organization(%L, %L)', 'regress_client_b', :'org_a')) AS grant_a;
SELECT pg_temp.errm(format('SELECT workflow.revoke_organization(%L, %L)', 'regress_admin_a', :'org_a')) AS revoke_own;
SELECT workflow.my_organizations() AS still_confined;
RESET ROLE;
SELECT role, pg_temp.org(organization_id) AS org FROM workflow.organization_members ORDER BY role::text, 2;
-- everything finished is aged two days
UPDATE workflow.workflow_runs SET finished_at = finished_at - interval '2 days' WHERE finished_at IS NOT NULL;
UPDATE workflow.job_queue SET finished_at = finished_at - interval '2 days'
 WHERE finished_at IS NOT NULL AND workflow_run_id IS NULL;
CREATE FUNCTION pg_temp.finished() RETURNS TABLE (org text, runs bigint, plain_jobs bigint)
LANGUAGE sql AS $$
    SELECT o, sum(r), sum(p) FROM (
        SELECT pg_temp.org(organization_id) AS o, 1 AS r, 0 AS p FROM workflow.workflow_runs
         WHERE finished_at IS NOT NULL
        UNION ALL
        SELECT pg_temp.org(organization_id), 0, 1 FROM workflow.job_queue
         WHERE finished_at IS NOT NULL AND workflow_run_id IS NULL) x
     GROUP BY o ORDER BY o
$$;
SELECT * FROM pg_temp.finished();
SET ROLE regress_admin_a;
SELECT workflow.purge('1 day', 1000) AS purged_by_a;
SELECT workflow.purge('1 day', 1000) AS purged_by_a_again;
RESET ROLE;
SELECT * FROM pg_temp.finished();
SET ROLE regress_admin_any;
SELECT workflow.purge('1 day', 1000) > 0 AS purged_by_any;
RESET ROLE;
SELECT * FROM pg_temp.finished();

-- 18. Unscoped roles work as before: any organization or none, named or not.
SET ROLE regress_worker_any;
SELECT workflow.enqueue('any.job', '{"n": 1}', organization_id => :'org_b') IS NOT NULL AS enqueued,
       workflow.enqueue('any.job', '{"n": 2}') IS NOT NULL AS enqueued_no_org;
SELECT payload, pg_temp.org(organization_id) AS org FROM workflow.claim('wany', ARRAY['any.job'], 10)
 ORDER BY payload->>'n';
SELECT count(*) AS completed FROM workflow.job_queue j, workflow.complete_job(j.id, j.lease_token) x
 WHERE j.job_type = 'any.job';
SELECT workflow.start_run('{"steps": [{"key": "x", "kind": "external"}]}', :'org_b') AS rany \gset
SELECT workflow.cancel_run(:'rany', 'unscoped', :'org_b');
SELECT pg_temp.org(organization_id) AS org, status FROM workflow.workflow_runs WHERE id = :'rany';
RESET ROLE;

-- the roles go; organization_members keeps nothing of them
SELECT count(*) AS revoked FROM workflow.organization_members m,
       workflow.revoke_organization(m.role, m.organization_id) r WHERE r;
SELECT count(*) AS grants_left FROM workflow.organization_members;
DROP OWNED BY regress_worker_a, regress_client_a, regress_reader_a, regress_admin_a,
    regress_worker_b, regress_client_b, regress_worker_ac, regress_worker_any,
    regress_admin_any, regress_nobody, regress_tenant_a;
DROP ROLE regress_worker_a, regress_client_a, regress_reader_a, regress_admin_a,
    regress_worker_b, regress_client_b, regress_worker_ac, regress_worker_any,
    regress_admin_any, regress_nobody, regress_tenant_a;
SELECT * FROM workflow.verify();
