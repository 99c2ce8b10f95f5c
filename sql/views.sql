-- The operator views: run_overview (a run's status and steps by status,
-- true for runs with and without counter shards), queue_stats (jobs per
-- type and status, due, oldest due age, expired leases) and step_timeline
-- (each step's times and attempts); each served by an index for one run,
-- readable by workflow_reader only, and confined for tenant roles by the
-- tables' row-level security.  Nothing shown depends on uuids or clocks.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.organization_members;

\set org_a 'a0000000-0000-4000-8000-00000000000a'
\set org_b 'b0000000-0000-4000-8000-00000000000b'

-- errm() shows a statement's SQLSTATE and message with every uuid <id>
CREATE FUNCTION pg_temp.errm(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || regexp_replace(SQLERRM,
        '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<id>', 'g');
END $$;
-- finish(run, key, ok) claims the step's job (of type v.<key>) and
-- completes it, fails it for good, or (ok NULL) leaves it RUNNING
CREATE FUNCTION pg_temp.finish(run uuid, key text, ok boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    j workflow.job_queue;
BEGIN
    SELECT c.* INTO j FROM workflow.claim('w', ARRAY['v.' || key]) c;
    IF j.workflow_run_id IS DISTINCT FROM run THEN
        RAISE EXCEPTION 'no job for %', key;
    END IF;
    IF ok THEN
        PERFORM workflow.complete_job(j.id, j.lease_token);
    ELSIF NOT ok THEN
        PERFORM workflow.fail_job(j.id, j.lease_token, 'boom', 'no', false);
    END IF;
END $$;
-- mismatches(): every run whose run_overview counts differ from its steps
-- counted one by one (nothing on a healthy database)
CREATE FUNCTION pg_temp.mismatches() RETURNS TABLE (name text, view text, steps text)
LANGUAGE sql AS $$
    SELECT o.name,
           concat_ws(',', o.steps_total, o.steps_active, o.steps_waiting, o.steps_blocked,
                     o.steps_succeeded, o.steps_failed, o.steps_canceled, o.progress),
           concat_ws(',', s.total, s.active, s.waiting, s.blocked, s.succeeded, s.failed,
                     s.canceled, trunc((s.succeeded + s.failed + s.canceled)::numeric / s.total, 4))
      FROM workflow.run_overview o
      JOIN (SELECT workflow_run_id, count(*) AS total,
                   count(*) FILTER (WHERE status IN ('ENQUEUED', 'RUNNING')) AS active,
                   count(*) FILTER (WHERE status = 'WAITING_FOR_EXTERNAL') AS waiting,
                   count(*) FILTER (WHERE status = 'BLOCKED') AS blocked,
                   count(*) FILTER (WHERE status = 'SUCCEEDED') AS succeeded,
                   count(*) FILTER (WHERE status = 'FAILED') AS failed,
                   count(*) FILTER (WHERE status = 'CANCELED') AS canceled
              FROM workflow.workflow_steps GROUP BY workflow_run_id) s
        ON s.workflow_run_id = o.workflow_run_id
     WHERE (o.steps_total, o.steps_active, o.steps_waiting, o.steps_blocked,
            o.steps_succeeded, o.steps_failed, o.steps_canceled)
           IS DISTINCT FROM (s.total, s.active, s.waiting, s.blocked, s.succeeded,
                             s.failed, s.canceled)
        OR o.progress <> trunc((s.succeeded + s.failed + s.canceled)::numeric / s.total, 4)
$$;
-- seq_scans(query): the plan's sequential scans, with them disabled: a
-- table no index can serve for the query
CREATE FUNCTION pg_temp.seq_scans(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    line text;
    found text := '';
BEGIN
    SET LOCAL enable_seqscan = off;
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
        IF line ~ 'Seq Scan' THEN
            found := found || regexp_replace(line, '^.*Seq Scan on (\S+).*$', '\1') || ' ';
        END IF;
    END LOOP;
    RETURN coalesce(nullif(found, ''), 'none');
END $$;

-- roles left by an earlier run that stopped half-way
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_views_reader_a, regress_views_client, regress_views_worker,
    regress_views_nobody;
RESET client_min_messages;

-- 1. The columns and who may read them: workflow_reader (and the admin
-- through it), nobody else; row-level security applies to the reader.
SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
 WHERE c.oid IN ('workflow.run_overview'::regclass, 'workflow.queue_stats'::regclass,
                 'workflow.step_timeline'::regclass)
 ORDER BY 1, 2;
SELECT c.relname, c.relkind, c.reloptions
  FROM pg_class c
 WHERE c.relnamespace = 'workflow'::regnamespace AND c.relkind = 'v' ORDER BY 1;
CREATE ROLE regress_views_nobody LOGIN;
SELECT v AS view, r AS role, has_table_privilege(r, 'workflow.' || v, 'SELECT') AS can_select,
       has_table_privilege(r, 'workflow.' || v, 'INSERT, UPDATE, DELETE, TRUNCATE') AS can_write
  FROM unnest(ARRAY['run_overview', 'queue_stats', 'step_timeline']) v,
       unnest(ARRAY['workflow_worker', 'workflow_client', 'workflow_reader', 'workflow_admin',
                    'regress_views_nobody']) r
 ORDER BY 1, 2;

-- 2. A run with a step in every status: done SUCCEEDED, broke FAILED,
-- skipped CANCELED (it needed broke), cleanup ENQUEUED (it waited for
-- broke whatever the outcome), busy RUNNING, approve WAITING_FOR_EXTERNAL,
-- publish BLOCKED behind it.
\set every '{"name": "every", "steps": [{"key": "done", "job_type": "v.done"}, {"key": "broke", "job_type": "v.broke", "max_attempts": 1}, {"key": "skipped", "job_type": "v.skipped", "depends_on": ["broke"]}, {"key": "cleanup", "job_type": "v.cleanup", "depends_on": [{"step": "broke", "release": "on_terminal"}]}, {"key": "busy", "job_type": "v.busy"}, {"key": "approve", "kind": "external", "depends_on": ["done"]}, {"key": "publish", "job_type": "v.publish", "depends_on": ["approve"]}]}'
SELECT workflow.start_run(:'every') AS every \gset
SELECT pg_temp.finish(:'every', 'done', true);
SELECT pg_temp.finish(:'every', 'broke', false);
SELECT pg_temp.finish(:'every', 'busy', NULL);
-- a run that succeeded, and one canceled while it waited
SELECT workflow.start_run('{"name": "ok", "steps": [{"key": "a", "job_type": "v.a"}, {"key": "b", "job_type": "v.b", "depends_on": ["a"]}]}') AS ok \gset
SELECT pg_temp.finish(:'ok', 'a', true);
SELECT pg_temp.finish(:'ok', 'b', true);
SELECT workflow.start_run('{"name": "gone", "steps": [{"key": "wait", "kind": "external"}, {"key": "then", "job_type": "v.then", "depends_on": ["wait"]}]}') AS gone \gset
SELECT workflow.cancel_run(:'gone', 'not needed');

SELECT name, status, steps_total, steps_active, steps_waiting, steps_blocked,
       steps_succeeded, steps_failed, steps_canceled, progress,
       organization_id IS NULL AS no_org, created_at IS NOT NULL AS created,
       finished_at IS NOT NULL AS finished,
       duration = coalesce(finished_at - created_at, duration) AND duration >= '0' AS duration_ok
  FROM workflow.run_overview ORDER BY name;
-- a finished run's duration is finished - created; a live one's grows
SELECT duration = finished_at - created_at AS took FROM workflow.run_overview
 WHERE workflow_run_id = :'ok';
SELECT (SELECT duration FROM workflow.run_overview WHERE workflow_run_id = :'every')
       <= (SELECT statement_timestamp() - created_at FROM workflow.workflow_runs
            WHERE id = :'every') AS so_far;
SELECT * FROM pg_temp.mismatches();

SELECT step_key, kind, status, attempts,
       released_at IS NOT NULL AS released, started_at IS NOT NULL AS started,
       finished_at IS NOT NULL AS finished,
       waited IS NOT DISTINCT FROM started_at - released_at AND waited >= '0' AS waited_ok,
       ran IS NOT DISTINCT FROM finished_at - started_at AND ran >= '0' AS ran_ok,
       waited IS NULL AS no_wait, ran IS NULL AS no_run
  FROM workflow.step_timeline WHERE workflow_run_id = :'every' ORDER BY step_key;
-- attempts is the step's job's: a retry counts
SELECT workflow.start_run('{"name": "retry", "steps": [{"key": "again", "job_type": "v.again"}]}') AS retry \gset
SELECT id AS rj, lease_token AS rt FROM workflow.claim('w', ARRAY['v.again']) \gset
SELECT workflow.fail_job(:'rj', :'rt', 'flaky', 'try again');
SELECT id AS rj, lease_token AS rt FROM workflow.claim('w', ARRAY['v.again']) \gset
SELECT workflow.complete_job(:'rj', :'rt');
SELECT step_key, status, attempts FROM workflow.step_timeline WHERE workflow_run_id = :'retry';

-- 3. Counter shards.  A live run with shards keeps its step counts in
-- workflow_run_counters and, on its row, the number of shards where a
-- count is not zero; the view shows the steps.
SET workflow.counter_shards = 2;
SET workflow.counter_shard_min_width = 4;
SELECT workflow.start_run(jsonb_build_object('name', 'wide', 'steps',
    (SELECT jsonb_agg(jsonb_build_object('key', 'w' || i, 'job_type', 'v.w' || i)
                      || CASE WHEN i > 8 THEN jsonb_build_object('depends_on', jsonb_build_array('w1'))
                              ELSE '{}' END ORDER BY i)
       FROM generate_series(1, 10) i))) AS wide \gset
RESET workflow.counter_shards;
RESET workflow.counter_shard_min_width;
SELECT pg_temp.finish(:'wide', 'w1', true);
SELECT pg_temp.finish(:'wide', 'w2', false);
SELECT pg_temp.finish(:'wide', 'w3', NULL);
SELECT counter_shards, steps_active AS row_active, steps_blocked AS row_blocked,
       steps_succeeded AS row_succeeded
  FROM workflow.workflow_runs WHERE id = :'wide';
SELECT steps_total, steps_active, steps_waiting, steps_blocked, steps_succeeded,
       steps_failed, steps_canceled, progress
  FROM workflow.run_overview WHERE workflow_run_id = :'wide';
SELECT * FROM workflow.run_counters(:'wide');
SELECT * FROM pg_temp.mismatches();
-- finished, its row is exact and the view reads it
SELECT pg_temp.finish(:'wide', 'w' || i, true) FROM generate_series(4, 10) i;
SELECT id AS w3, lease_token AS w3t FROM workflow.job_queue
 WHERE workflow_run_id = :'wide' AND job_type = 'v.w3' \gset
SELECT workflow.complete_job(:'w3', :'w3t');
SELECT status, steps_total, steps_active, steps_succeeded, steps_failed, progress,
       finished_at IS NOT NULL AS finished
  FROM workflow.run_overview WHERE workflow_run_id = :'wide';
SELECT * FROM pg_temp.mismatches();
-- and a sharded run canceled while live
SET workflow.counter_shards = 2;
SET workflow.counter_shard_min_width = 4;
SELECT workflow.start_run(jsonb_build_object('name', 'wide-canceled', 'steps',
    (SELECT jsonb_agg(jsonb_build_object('key', 'c' || i, 'job_type', 'v.c') ORDER BY i)
       FROM generate_series(1, 8) i))) AS widec \gset
RESET workflow.counter_shards;
RESET workflow.counter_shard_min_width;
SELECT workflow.cancel_run(:'widec');
SELECT o.status, r.counter_shards, o.steps_total, o.steps_canceled, o.progress
  FROM workflow.run_overview o JOIN workflow.workflow_runs r ON r.id = o.workflow_run_id
 WHERE o.workflow_run_id = :'widec';
SELECT * FROM pg_temp.mismatches();

-- 4. The queue: plain jobs due long ago, due later, and running with a
-- lease that ran out, beside the steps' jobs.
SELECT workflow.enqueue('v.plain', run_at => statement_timestamp() - interval '2 hours') AS p1 \gset
SELECT workflow.enqueue('v.plain', run_at => statement_timestamp() - interval '1 minute') AS p2 \gset
SELECT workflow.enqueue('v.plain', run_at => statement_timestamp() + interval '1 hour') AS p3 \gset
SELECT workflow.enqueue('v.lease', run_at => statement_timestamp() - interval '1 hour') AS l1 \gset
SELECT workflow.enqueue('v.lease') AS l2 \gset
SELECT count(*) FROM workflow.claim('w', ARRAY['v.lease'], 2);
UPDATE workflow.job_queue SET leased_until = statement_timestamp() - interval '1 second'
 WHERE id = (SELECT id FROM workflow.job_queue WHERE job_type = 'v.lease' ORDER BY run_at LIMIT 1);
SELECT job_type, status, jobs, due,
       CASE WHEN oldest_due_age IS NULL THEN NULL
            WHEN oldest_due_age >= '2 hours' THEN '>= 2 hours'
            WHEN oldest_due_age >= '1 minute' THEN '>= 1 minute'
            ELSE 'less' END AS oldest_due,
       expired_leases
  FROM workflow.queue_stats WHERE job_type IN ('v.plain', 'v.lease', 'v.cleanup', 'v.busy',
                                               'v.done', 'v.broke')
 ORDER BY 1, 2;
SELECT sum(jobs) = (SELECT count(*) FROM workflow.job_queue) AS every_job_counted
  FROM workflow.queue_stats;
-- reap_expired() takes the expired one back: no expired lease is left
SELECT workflow.reap_expired();
SELECT job_type, status, jobs, due, expired_leases
  FROM workflow.queue_stats WHERE job_type = 'v.lease' ORDER BY 2;

-- 5. One run's rows come through indexes: no table is read whole (with
-- sequential scans disabled, a plan shows one only where no index serves).
SELECT pg_temp.seq_scans(format('SELECT * FROM workflow.run_overview WHERE workflow_run_id = %L', :'wide')) AS run_overview;
SELECT pg_temp.seq_scans(format('SELECT * FROM workflow.step_timeline WHERE workflow_run_id = %L', :'every')) AS step_timeline;

-- 6. Tenants: the views show a tenant role only its organizations' rows.
SELECT workflow.start_run('{"name": "of-a", "steps": [{"key": "x", "job_type": "v.tenant"}]}', :'org_a') AS ra \gset
SELECT workflow.start_run('{"name": "of-b", "steps": [{"key": "x", "job_type": "v.tenant"}]}', :'org_b') AS rb \gset
SELECT workflow.enqueue('v.tenant', organization_id => :'org_b') AS pb \gset
CREATE ROLE regress_views_reader_a LOGIN IN ROLE workflow_reader;
CREATE ROLE regress_views_client LOGIN IN ROLE workflow_client;
CREATE ROLE regress_views_worker LOGIN IN ROLE workflow_worker;
SELECT workflow.grant_organization('regress_views_reader_a', :'org_a');
SET ROLE regress_views_reader_a;
SELECT name, status, steps_total, steps_active FROM workflow.run_overview ORDER BY name;
SELECT job_type, status, jobs FROM workflow.queue_stats ORDER BY 1, 2;
SELECT step_key, status FROM workflow.step_timeline;
SELECT count(*) AS b_steps FROM workflow.step_timeline WHERE workflow_run_id = :'rb';
RESET ROLE;
-- the superuser sees both
SELECT name, status FROM workflow.run_overview WHERE name LIKE 'of-%' ORDER BY name;
SELECT job_type, status, jobs FROM workflow.queue_stats WHERE job_type = 'v.tenant';
-- a client, a worker and a role without a workflow role may not read them
SET ROLE regress_views_client;
SELECT pg_temp.errm('SELECT count(*) FROM workflow.run_overview');
SET ROLE regress_views_worker;
SELECT pg_temp.errm('SELECT count(*) FROM workflow.queue_stats');
SET ROLE regress_views_nobody;
SELECT pg_temp.errm('SELECT count(*) FROM workflow.step_timeline');
RESET ROLE;

SELECT workflow.revoke_organization('regress_views_reader_a', :'org_a');
DROP ROLE regress_views_reader_a, regress_views_client, regress_views_worker,
    regress_views_nobody;
