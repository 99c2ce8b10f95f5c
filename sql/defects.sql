-- Defects fixed in 1.3: the release lock in an advisory lock class of its
-- own; a job's step link checked both ways before a step moves; every
-- workflow.* setting that bounds the engine reserved to superusers.  And
-- the run-terminal notification on a channel per organization, when asked
-- for.
\set VERBOSITY terse
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.organization_members;

CREATE FUNCTION pg_temp.state(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

-- 1. The release lock.  A run's release lock is keyed by the run id's last
-- eight bytes, like pg_advisory_xact_lock(bigint) of that key would be,
-- but in class 22342 (0x5746), not in SQL's class 1 (bigint keys) or 2
-- (pairs of int keys): no SQL call can take it, hold it or wait for it.
-- specs/race_release_lock_class.spec shows that holding SQL's lock on the
-- same key blocks none of the engine's calls.
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "d.a"}, {"key": "b", "job_type": "d.b"},
                                      {"key": "x", "kind": "external"}]}') AS run \gset
SELECT ('x' || right(replace(:'run', '-', ''), 16))::bit(64)::bigint AS run_key \gset
CREATE TEMP VIEW release_locks AS
SELECT objsubid, mode, granted,
       classid::bigint = ((:run_key >> 32) & 4294967295) AS key_high,
       objid::bigint = (:run_key & 4294967295) AS key_low
  FROM pg_catalog.pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND database = (
       SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
 ORDER BY objsubid, mode;
SELECT id AS job_a, lease_token AS token_a FROM workflow.claim('w', ARRAY['d.a']) \gset
SELECT id AS job_b, lease_token AS token_b FROM workflow.claim('w', ARRAY['d.b']) \gset
-- a completion takes it shared, until commit
BEGIN;
SELECT workflow.complete_job(:'job_a', :'token_a');
SELECT * FROM release_locks;
-- SQL's lock on the same key is another lock
SELECT pg_advisory_xact_lock(:run_key);
SELECT pg_advisory_xact_lock((:run_key >> 32)::int4, ('x' || right(replace(:'run', '-', ''), 8))::bit(32)::int4);
SELECT * FROM release_locks;
ROLLBACK;
-- the batch form and an external completion take it shared too
BEGIN;
SELECT count(*) AS completed FROM workflow.complete_jobs(ARRAY[:'job_a']::uuid[], ARRAY[:'token_a']::uuid[]);
SELECT * FROM release_locks;
ROLLBACK;
BEGIN;
SELECT status FROM workflow.complete_external_step(:'run', 'x', 'SUCCEEDED');
SELECT * FROM release_locks;
ROLLBACK;
-- the reaper, for an expired lease
UPDATE workflow.job_queue SET leased_until = now() - interval '1 minute' WHERE id = :'job_b';
BEGIN;
SELECT workflow.reap_expired() AS reaped;
SELECT * FROM release_locks;
ROLLBACK;
-- cancel_run takes it exclusive
BEGIN;
SELECT workflow.cancel_run(:'run', 'lock class');
SELECT * FROM release_locks;
ROLLBACK;
-- the run goes on and finishes
SELECT workflow.complete_job(:'job_a', :'token_a');
SELECT workflow.complete_job(:'job_b', :'token_b');
SELECT status FROM workflow.complete_external_step(:'run', 'x', 'SUCCEEDED');
SELECT status FROM workflow.workflow_runs WHERE id = :'run';

-- 2. The step link.  The sync trigger moves a step only when the step's
-- job_id is the job and the step is of the job's run.  Job rows written
-- directly (by the superuser: nobody else may write a table) that name a
-- step which does not name them back, or name it from another run or
-- from no run, move nothing; verify() reports them.  All of it is rolled
-- back.
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;
SELECT workflow.start_run('{"name": "r1", "steps": [{"key": "x", "job_type": "d.x"},
                                                    {"key": "y", "job_type": "d.y", "depends_on": ["x"]}]}') AS r1 \gset
SELECT workflow.start_run('{"name": "r2", "steps": [{"key": "z", "job_type": "d.z"}]}') AS r2 \gset
SELECT id AS x_step, job_id AS x_job FROM workflow.workflow_steps WHERE workflow_run_id = :'r1' AND step_key = 'x' \gset
SELECT id AS z_step, job_id AS z_job FROM workflow.workflow_steps WHERE workflow_run_id = :'r2' \gset
CREATE TEMP VIEW state AS
SELECT r.name AS run, s.step_key, s.status AS step_status, s.output, j.status AS job_status, r.status AS run_status,
       c.steps_active, c.steps_blocked, c.steps_succeeded, c.steps_failed
  FROM workflow.workflow_steps s
  JOIN workflow.workflow_runs r ON r.id = s.workflow_run_id
  LEFT JOIN workflow.job_queue j ON j.id = s.job_id
 CROSS JOIN LATERAL workflow.run_counters(r.id) c
 ORDER BY 1, 2;
CREATE TEMP VIEW problems AS
SELECT r.name AS run, v.step_key, v.problem, v.expected, v.actual
  FROM workflow.verify() v LEFT JOIN workflow.workflow_runs r ON r.id = v.workflow_run_id
 ORDER BY 1, 2, 3;
SELECT * FROM state;
-- each case in a transaction of its own, rolled back
-- a: a second job of step x, same run, which x does not name
BEGIN;
INSERT INTO workflow.job_queue (id, job_type, workflow_run_id, workflow_step_id, generation)
VALUES ('00000000-0000-0000-0000-0000000000f1', 'd.rogue', :'r1', :'x_step', 1);
UPDATE workflow.job_queue SET status = 'RUNNING', attempt = 1, lease_token = gen_random_uuid(),
       leased_until = now() + interval '5 min', started_at = now()
 WHERE id = '00000000-0000-0000-0000-0000000000f1';
SELECT * FROM state;
UPDATE workflow.job_queue SET status = 'SUCCEEDED', output = '{"rogue": 1}', finished_at = now()
 WHERE id = '00000000-0000-0000-0000-0000000000f1';
SELECT * FROM state;
SELECT * FROM problems;
ROLLBACK;
-- b: a job naming step x from run r2
BEGIN;
INSERT INTO workflow.job_queue (id, job_type, workflow_run_id, workflow_step_id, generation)
VALUES ('00000000-0000-0000-0000-0000000000f2', 'd.rogue', :'r2', :'x_step', 2);
UPDATE workflow.job_queue SET status = 'FAILED', last_error_code = 'rogue', finished_at = now()
 WHERE id = '00000000-0000-0000-0000-0000000000f2';
SELECT * FROM state;
SELECT * FROM problems;
ROLLBACK;
-- c: a job naming step x from no run
BEGIN;
INSERT INTO workflow.job_queue (id, job_type, workflow_run_id, workflow_step_id, generation)
VALUES ('00000000-0000-0000-0000-0000000000f3', 'd.rogue', NULL, :'x_step', 3);
UPDATE workflow.job_queue SET status = 'CANCELED', finished_at = now()
 WHERE id = '00000000-0000-0000-0000-0000000000f3';
SELECT * FROM state;
SELECT * FROM problems;
ROLLBACK;
-- d: z's own job, moved to run r1: z names it, but z is not of r1
BEGIN;
UPDATE workflow.job_queue SET workflow_run_id = :'r1' WHERE id = :'z_job';
UPDATE workflow.job_queue SET status = 'CANCELED', finished_at = now() WHERE id = :'z_job';
SELECT * FROM state;
SELECT * FROM problems;
ROLLBACK;
-- a direct update of a job its step names, in its own run, still moves
-- the step, like the engine's own writes
BEGIN;
UPDATE workflow.job_queue SET status = 'RUNNING', attempt = 1, lease_token = gen_random_uuid(),
       leased_until = now() + interval '5 min', started_at = now()
 WHERE id = :'x_job';
UPDATE workflow.job_queue SET status = 'SUCCEEDED', output = '{"direct": true}', finished_at = now()
 WHERE id = :'x_job';
SELECT * FROM state;
SELECT * FROM problems;
ROLLBACK;
-- the runs finish as usual
SELECT count(*) AS completed FROM workflow.claim('w', ARRAY['d.x', 'd.z'], 10) c,
       workflow.complete_job(c.id, c.lease_token, '{"ok": true}') x;
SELECT count(*) AS completed FROM workflow.claim('w', ARRAY['d.y'], 10) c,
       workflow.complete_job(c.id, c.lease_token, '{"ok": true}') x;
SELECT * FROM state;
SELECT * FROM problems;

-- 3. Settings.  Every workflow.* setting but notify_jobs (1.5) is
-- PGC_SUSET: an ordinary role, even one granted every workflow role,
-- cannot set any of them, in any way; a superuser can.  notify_jobs only
-- asks for wake-ups, which any role may send with pg_notify: anyone sets it.
CREATE FUNCTION pg_temp.set_each() RETURNS TABLE (name text, context text, set text, set_local text,
                                                  set_config text, function_set text)
LANGUAGE sql AS $$
SELECT s.name, s.context,
       pg_temp.state(format('SET %s = %L', s.name, s.setting)),
       pg_temp.state(format('SET LOCAL %s = %L', s.name, s.setting)),
       pg_temp.state(format('SELECT set_config(%L, %L, false)', s.name, s.setting)),
       pg_temp.state(format('CREATE FUNCTION pg_temp.f_%s() RETURNS int LANGUAGE sql SET %s = %L AS ''SELECT 1''',
                            replace(s.name, '.', '_'), s.name, s.setting))
  FROM pg_catalog.pg_settings s WHERE s.name LIKE 'workflow.%' ORDER BY 1
$$;
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_defects_plain, regress_defects_admin;
RESET client_min_messages;
CREATE ROLE regress_defects_plain LOGIN;
CREATE ROLE regress_defects_admin LOGIN IN ROLE workflow_admin;
SET ROLE regress_defects_plain;
BEGIN;
SELECT * FROM pg_temp.set_each();
ROLLBACK;
SELECT pg_temp.state('ALTER ROLE regress_defects_plain SET workflow.max_steps = 1000000000') AS alter_role;
SET ROLE regress_defects_admin;
BEGIN;
SELECT name, set, set_local, set_config, function_set FROM pg_temp.set_each();
ROLLBACK;
RESET ROLE;
BEGIN;
SELECT name, set, set_local, set_config, function_set FROM pg_temp.set_each();
ROLLBACK;
DROP ROLE regress_defects_plain, regress_defects_admin;

-- 4. workflow.notify_per_organization (off by default): when on, a run of
-- an organization notifies on workflow_run_terminal_<id without dashes>;
-- runs without one keep workflow_run_terminal.  psql writes the
-- notifications it receives to a file here (\o), read back below with
-- the run ids by name and the sender checked to be this backend.
SHOW workflow.notify_per_organization;
\set org_a 'a0000000-0000-4000-8000-00000000000a'
\set org_b 'b0000000-0000-4000-8000-00000000000b'
SELECT 'workflow_run_terminal_' || replace(:'org_a', '-', '') AS channel_a,
       'workflow_run_terminal_' || replace(:'org_b', '-', '') AS channel_b \gset
SELECT :'channel_a' AS channel_a, :'channel_b' AS channel_b;
CREATE TEMP TABLE runs (name text PRIMARY KEY, id uuid);
\set one '{"steps": [{"key": "x", "kind": "external"}]}'
\set wide '{"steps": [{"key": "x", "kind": "external"}, {"key": "y", "kind": "external"}]}'
INSERT INTO runs VALUES
    ('a.off', workflow.start_run(:'one', :'org_a')),
    ('none.off', workflow.start_run(:'one')),
    ('a.on', workflow.start_run(:'wide', :'org_a')),
    ('a.on.failed', workflow.start_run(:'one', :'org_a')),
    ('a.on.canceled', workflow.start_run(:'one', :'org_a')),
    ('b.on', workflow.start_run(:'one', :'org_b')),
    ('none.on', workflow.start_run(:'one'));
LISTEN workflow_run_terminal;
LISTEN :channel_a;
LISTEN :channel_b;
\o results/defects.notifications
SELECT status FROM workflow.complete_external_step((SELECT id FROM runs WHERE name = 'a.off'), 'x', 'SUCCEEDED');
SELECT status FROM workflow.complete_external_step((SELECT id FROM runs WHERE name = 'none.off'), 'x', 'SUCCEEDED');
SET workflow.notify_per_organization = on;
SELECT status FROM workflow.complete_external_step((SELECT id FROM runs WHERE name = 'a.on'), 'x', 'SUCCEEDED');
SELECT status FROM workflow.complete_external_step((SELECT id FROM runs WHERE name = 'a.on'), 'y', 'SUCCEEDED');
SELECT status FROM workflow.complete_external_step((SELECT id FROM runs WHERE name = 'a.on.failed'), 'x', 'FAILED');
SELECT workflow.cancel_run((SELECT id FROM runs WHERE name = 'a.on.canceled'));
SELECT status FROM workflow.complete_external_step((SELECT id FROM runs WHERE name = 'b.on'), 'x', 'SUCCEEDED');
SELECT status FROM workflow.complete_external_step((SELECT id FROM runs WHERE name = 'none.on'), 'x', 'SUCCEEDED');
-- a rolled-back finish notifies nothing
BEGIN;
SELECT status FROM workflow.complete_external_step(workflow.start_run(:'one', :'org_a'), 'x', 'SUCCEEDED');
ROLLBACK;
RESET workflow.notify_per_organization;
\o
UNLISTEN *;
CREATE TEMP TABLE received (n serial, line text);
\copy received (line) FROM 'results/defects.notifications'
SELECT m[1] AS channel, replace(m[2], runs.id::text, runs.name) AS payload,
       CASE m[3] WHEN pg_backend_pid()::text THEN 'this backend' ELSE 'another' END AS sender
  FROM received r
 CROSS JOIN LATERAL regexp_match(r.line,
       '^Asynchronous notification "([^"]*)" with payload "(.*)" received from server process with PID ([0-9]+)\.$') m
  LEFT JOIN runs ON strpos(m[2], runs.id::text) > 0
 WHERE m IS NOT NULL ORDER BY r.n;
SELECT count(*) AS lines_unread FROM received
 WHERE line LIKE 'Asynchronous%' AND line !~ '^Asynchronous notification "[^"]*" with payload ".*" received from server process with PID [0-9]+\.$';
SELECT runs.name, r.status FROM runs JOIN workflow.workflow_runs r USING (id) ORDER BY 1;
SELECT * FROM workflow.verify();
