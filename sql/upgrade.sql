-- An installed 1.0 updates in place, with its runs, to the default version
-- (through 1.1 and 1.2); an installed 1.1 updates to 1.2, then on.  Until
-- it is updated, an old database is refused with workflow.version_mismatch.
\set VERBOSITY terse
DROP EXTENSION workflow CASCADE;
CREATE EXTENSION workflow VERSION '1.0';
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow';
SELECT to_regproc('workflow.purge') IS NULL AS no_purge,
       to_regclass('workflow.workflow_run_counters') IS NULL AS no_counter_shards;
-- rows written under 1.0 (by hand: its functions need the 1.0 library)
INSERT INTO workflow.workflow_runs (id, definition, status, steps_total,
    steps_active, steps_waiting, steps_blocked)
VALUES ('00000000-0000-0000-0000-0000000000a1', '{"steps": []}', 'RUNNING', 1, 1, 0, 0);
INSERT INTO workflow.workflow_steps (id, workflow_run_id, step_key, execution_kind,
    job_type, status, job_id, released_at, dependency_count_total, dependency_count_pending)
VALUES ('00000000-0000-0000-0000-0000000000b1', '00000000-0000-0000-0000-0000000000a1',
        'only', 'JOB', 'up.only', 'ENQUEUED', '00000000-0000-0000-0000-0000000000c1', now(), 0, 0);
INSERT INTO workflow.job_queue (id, job_type, workflow_run_id, workflow_step_id, generation)
VALUES ('00000000-0000-0000-0000-0000000000c1', 'up.only',
        '00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-0000000000b1', 0);
-- this library refuses the 1.0 objects with a clear error, not deep inside
-- a trigger, and tells what to do
\set VERBOSITY default
SELECT * FROM workflow.claim('w', ARRAY['up.only']);
SELECT workflow.cancel_run('00000000-0000-0000-0000-0000000000a1');
\set VERBOSITY terse
SELECT status FROM workflow.job_queue;

ALTER EXTENSION workflow UPDATE;
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow';
SELECT to_regproc('workflow.purge') IS NOT NULL AS purge,
       to_regprocedure('workflow.run_counters(uuid)') IS NOT NULL AS run_counters,
       to_regclass('workflow.workflow_run_counters') IS NOT NULL AS counter_shards,
       to_regclass('workflow.workflow_run_counters')::oid = ANY (e.extconfig) AS dumped
  FROM pg_catalog.pg_extension e WHERE e.extname = 'workflow';
-- the run started under 1.0 keeps its counters on the run row and finishes
SELECT counter_shards FROM workflow.workflow_runs;
SELECT counter_shard FROM workflow.workflow_steps;
SELECT workflow.complete_job(c.id, c.lease_token) FROM workflow.claim('w', ARRAY['up.only']) c;
SELECT status, finished_at IS NOT NULL AS finished FROM workflow.workflow_runs;
-- 1.3 -> 1.4: its history begins at the update, and its rows say that
-- some of their changes were never recorded, so verify() does not expect
-- the events of before
SELECT step_key, event_type FROM workflow.run_history('00000000-0000-0000-0000-0000000000a1');
SELECT history_gap FROM workflow.workflow_runs;
SELECT step_key, history_gap FROM workflow.workflow_steps;
SELECT * FROM workflow.run_counters('00000000-0000-0000-0000-0000000000a1');
SELECT * FROM workflow.verify();
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps,
         workflow.workflow_step_dependencies;

-- 1.1 -> 1.2: the unique (workflow_step_id, generation) of job_queue becomes
-- a unique index of step jobs only, under the same name, and still refuses
-- a second job for one step release
DROP EXTENSION workflow CASCADE;
CREATE EXTENSION workflow VERSION '1.1';
-- a 1.1 database is refused too, until it is updated
\set VERBOSITY default
SELECT workflow.enqueue('up.plain');
\set VERBOSITY terse
SELECT conname, contype FROM pg_catalog.pg_constraint
 WHERE conrelid = 'workflow.job_queue'::regclass AND contype = 'u';
ALTER EXTENSION workflow UPDATE TO '1.2';
SELECT count(*) AS unique_constraints FROM pg_catalog.pg_constraint
 WHERE conrelid = 'workflow.job_queue'::regclass AND contype = 'u';
SELECT pg_catalog.pg_get_indexdef('workflow.job_queue_step_generation_key'::regclass);
INSERT INTO workflow.job_queue (job_type, workflow_step_id, generation)
VALUES ('up.dup', '00000000-0000-7000-8000-0000000000d1', 0);
INSERT INTO workflow.job_queue (job_type, workflow_step_id, generation)
VALUES ('up.dup', '00000000-0000-7000-8000-0000000000d1', 0);
ALTER EXTENSION workflow UPDATE;
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow';
SELECT count(workflow.enqueue('up.plain')) AS plain_jobs FROM generate_series(1, 2);
TRUNCATE workflow.job_queue;

-- 1.4 -> 1.5: a job claimed before the update is completed after it by
-- complete_and_claim, which claims the next in the same call
DROP EXTENSION workflow CASCADE;
CREATE EXTENSION workflow VERSION '1.4';
SELECT to_regproc('workflow.complete_and_claim') IS NULL AS no_complete_and_claim;
INSERT INTO workflow.job_queue (id, job_type, status, attempt, worker_id, lease_token,
    leased_until, started_at)
VALUES ('00000000-0000-7000-8000-0000000000e1', 'up.cac', 'RUNNING', 1, 'w',
        '00000000-0000-4000-8000-0000000000e2', now() + interval '5 minutes', now());
INSERT INTO workflow.job_queue (id, job_type)
VALUES ('00000000-0000-7000-8000-0000000000e3', 'up.cac');
ALTER EXTENSION workflow UPDATE;
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow';
SELECT id, status, attempt FROM workflow.complete_and_claim('00000000-0000-7000-8000-0000000000e1',
    '00000000-0000-4000-8000-0000000000e2', '{"up": 5}', 'w', ARRAY['up.cac']);
SELECT id, status, output FROM workflow.job_queue ORDER BY id;

-- 1.5 -> 1.6: a run started before the update, waiting for the outside
-- world, goes on after it; the new step kinds and status, send_event and
-- fire_timers arrive with it
DROP EXTENSION workflow CASCADE;
CREATE EXTENSION workflow VERSION '1.5';
SELECT to_regproc('workflow.send_event') IS NULL AS no_send_event,
       to_regproc('workflow.fire_timers') IS NULL AS no_fire_timers;
INSERT INTO workflow.workflow_runs (id, definition, status, steps_total,
    steps_active, steps_waiting, steps_blocked, history_gap)
VALUES ('00000000-0000-7000-8000-0000000000f1',
        '{"steps": [{"key": "approve", "kind": "external"}]}',
        'WAITING_FOR_EXTERNAL', 1, 0, 1, 0, true);
INSERT INTO workflow.workflow_steps (id, workflow_run_id, step_key, execution_kind,
    status, released_at, dependency_count_total, dependency_count_pending, history_gap)
VALUES ('00000000-0000-7000-8000-0000000000f2', '00000000-0000-7000-8000-0000000000f1',
        'approve', 'EXTERNAL', 'WAITING_FOR_EXTERNAL', now(), 0, 0, true);
ALTER EXTENSION workflow UPDATE;
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow';
SELECT enum_range(NULL::workflow.execution_kind) AS kinds,
       enum_range(NULL::workflow.step_status) AS step_statuses;
SELECT step_key, event_name, wake_at FROM workflow.workflow_steps;
-- an external step consumes no event: the event stays in the inbox
SELECT event_name, payload, consumed_at IS NULL AS unconsumed
  FROM workflow.send_event('00000000-0000-7000-8000-0000000000f1', 'approve', '{"ok": true}');
SELECT status FROM workflow.complete_external_step('00000000-0000-7000-8000-0000000000f1',
    'approve', 'SUCCEEDED');
SELECT status FROM workflow.workflow_runs WHERE id = '00000000-0000-7000-8000-0000000000f1';
SELECT * FROM workflow.verify();
SELECT workflow.start_run('{"steps": [{"key": "nap", "kind": "sleep", "seconds": 3600},
    {"key": "go", "kind": "event", "depends_on": ["nap"]}]}') AS nap_run \gset
UPDATE workflow.workflow_steps SET wake_at = now() - interval '1 second'
 WHERE workflow_run_id = :'nap_run' AND step_key = 'nap';
SELECT workflow.fire_timers();
SELECT step_key, status FROM workflow.workflow_steps
 WHERE workflow_run_id = :'nap_run' ORDER BY step_key;
SELECT * FROM workflow.verify();

-- 1.6 -> 1.7: a run that finished with errors under 1.6 is retried after
-- the update (its failed step gets the next job generation); the new
-- statuses, columns, registry and operator calls arrive with it
DROP EXTENSION workflow CASCADE;
CREATE EXTENSION workflow VERSION '1.6';
SELECT to_regproc('workflow.retry_run') IS NULL AS no_retry_run,
       to_regproc('workflow.compensate_run') IS NULL AS no_compensate_run,
       to_regclass('workflow.workflow_definitions') IS NULL AS no_registry;
INSERT INTO workflow.workflow_runs (id, definition, status, steps_total, steps_active,
    steps_waiting, steps_blocked, steps_succeeded, steps_failed, finished_at, history_gap)
VALUES ('00000000-0000-7000-8000-000000000a01',
        '{"steps": [{"key": "a", "job_type": "up.a"}, {"key": "b", "job_type": "up.b"}]}',
        'COMPLETED_WITH_ERRORS', 2, 0, 0, 0, 1, 1, now(), true);
INSERT INTO workflow.job_queue (id, job_type, status, attempt, max_attempts, output,
    last_error_code, workflow_run_id, workflow_step_id, generation, finished_at)
VALUES ('00000000-0000-7000-8000-000000000a11', 'up.a', 'SUCCEEDED', 1, 1, '{"a": 1}', NULL,
        '00000000-0000-7000-8000-000000000a01', '00000000-0000-7000-8000-000000000a02', 0, now()),
       ('00000000-0000-7000-8000-000000000a12', 'up.b', 'FAILED', 1, 1, NULL, 'up.boom',
        '00000000-0000-7000-8000-000000000a01', '00000000-0000-7000-8000-000000000a03', 0, now());
INSERT INTO workflow.workflow_steps (id, workflow_run_id, step_key, execution_kind, job_type,
    max_attempts, status, job_id, released_at, finished_at, output, last_error_code,
    dependency_count_total, dependency_count_pending, history_gap)
VALUES ('00000000-0000-7000-8000-000000000a02', '00000000-0000-7000-8000-000000000a01', 'a',
        'JOB', 'up.a', 1, 'SUCCEEDED', '00000000-0000-7000-8000-000000000a11', now(), now(),
        '{"a": 1}', NULL, 0, 0, true),
       ('00000000-0000-7000-8000-000000000a03', '00000000-0000-7000-8000-000000000a01', 'b',
        'JOB', 'up.b', 1, 'FAILED', '00000000-0000-7000-8000-000000000a12', now(), now(),
        NULL, 'up.boom', 0, 0, true);
ALTER EXTENSION workflow UPDATE;
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow';
SELECT enum_range(NULL::workflow.run_status) AS run_statuses;
SELECT enum_range(NULL::workflow.step_status) AS step_statuses;
SELECT step_key, generation, pinned, held, compensate, completion_seq
  FROM workflow.workflow_steps ORDER BY step_key;
SELECT input, workflow_name, compensate_on_failure, compensations_failed
  FROM workflow.workflow_runs;
SELECT workflow.retry_run('00000000-0000-7000-8000-000000000a01');
SELECT j.job_type, j.generation, j.status
  FROM workflow.job_queue j ORDER BY j.job_type, j.generation;
SELECT id AS up_job, lease_token AS up_token FROM workflow.claim('up-worker', ARRAY['up.b']) \gset
SELECT workflow.complete_job(:'up_job', :'up_token', '{"b": 2}');
SELECT status FROM workflow.workflow_runs WHERE id = '00000000-0000-7000-8000-000000000a01';
SELECT * FROM workflow.verify();
-- the registry and the new calls
SELECT length(workflow.register_workflow('up.flow', 'v1',
    '{"steps": [{"key": "s", "job_type": "up.s", "compensate": {"job_type": "up.undo"}}]}')) AS signature_length;
SELECT workflow.start_workflow('up.flow', '{"n": 1}') AS up_run \gset
SELECT workflow_name, workflow_version, input FROM workflow.workflow_runs WHERE id = :'up_run';
SELECT workflow.compensate_run(:'up_run');
SELECT step_key, status, status_reason FROM workflow.workflow_steps
 WHERE workflow_run_id = :'up_run';
SELECT * FROM workflow.verify();
-- 1.7 -> 1.8: a job claimed under 1.7 is held across the update; its
-- worker reads its step's key with job_step_key and completes it; the
-- maintenance view arrives (empty unless the library is preloaded)
DROP EXTENSION workflow CASCADE;
CREATE EXTENSION workflow VERSION '1.7';
SELECT to_regproc('workflow.job_step_key') IS NULL AS no_job_step_key,
       to_regclass('workflow.maintenance_status') IS NULL AS no_maintenance_status;
INSERT INTO workflow.workflow_runs (id, definition, status, steps_total, steps_active,
    steps_waiting, steps_blocked, steps_succeeded, steps_failed, history_gap)
VALUES ('00000000-0000-7000-8000-000000000b01',
        '{"steps": [{"key": "only", "job_type": "up.key"}]}', 'RUNNING', 1, 1, 0, 0, 0, 0, true);
INSERT INTO workflow.job_queue (id, job_type, status, attempt, max_attempts, lease_token,
    leased_until, worker_id, started_at, workflow_run_id, workflow_step_id, generation)
VALUES ('00000000-0000-7000-8000-000000000b11', 'up.key', 'RUNNING', 1, 1,
        '00000000-0000-4000-8000-000000000b99', now() + interval '1 hour', 'up-worker', now(),
        '00000000-0000-7000-8000-000000000b01', '00000000-0000-7000-8000-000000000b02', 0);
INSERT INTO workflow.workflow_steps (id, workflow_run_id, step_key, execution_kind, job_type,
    max_attempts, status, job_id, released_at, started_at, dependency_count_total,
    dependency_count_pending, history_gap)
VALUES ('00000000-0000-7000-8000-000000000b02', '00000000-0000-7000-8000-000000000b01', 'only',
        'JOB', 'up.key', 1, 'RUNNING', '00000000-0000-7000-8000-000000000b11', now(), now(),
        0, 0, true);
ALTER EXTENSION workflow UPDATE;
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow';
SELECT workflow.job_step_key('00000000-0000-7000-8000-000000000b11',
                             '00000000-0000-4000-8000-000000000b99') AS step_key;
SELECT workflow.complete_job('00000000-0000-7000-8000-000000000b11',
                             '00000000-0000-4000-8000-000000000b99', '{"done": true}');
SELECT status FROM workflow.workflow_runs WHERE id = '00000000-0000-7000-8000-000000000b01';
SELECT to_regclass('workflow.maintenance_status') IS NOT NULL AS maintenance_status,
       has_table_privilege('workflow_reader', 'workflow.maintenance_status', 'SELECT') AS reader_reads_it;
SELECT * FROM workflow.verify();
-- 1.8 -> 1.9: a run of 1.8 with one job done and one in flight counts
-- both as executions after the update (verify agrees), keeps no limits,
-- and finishes; a capped run parks and is given more allowance
DROP EXTENSION workflow CASCADE;
CREATE EXTENSION workflow VERSION '1.8';
SELECT to_regproc('workflow.increase_execution_allowance') IS NULL AS no_increase;
INSERT INTO workflow.workflow_runs (id, definition, status, steps_total, steps_active,
    steps_waiting, steps_blocked, steps_succeeded, steps_failed, history_gap)
VALUES ('00000000-0000-7000-8000-000000000c01',
        '{"steps": [{"key": "a", "job_type": "up.c"}, {"key": "b", "job_type": "up.c"}]}',
        'RUNNING', 2, 1, 0, 0, 1, 0, true);
INSERT INTO workflow.job_queue (id, job_type, status, attempt, max_attempts, lease_token,
    leased_until, worker_id, started_at, finished_at, workflow_run_id, workflow_step_id, generation)
VALUES ('00000000-0000-7000-8000-000000000c11', 'up.c', 'SUCCEEDED', 1, 1, NULL, NULL, NULL,
        now(), now(), '00000000-0000-7000-8000-000000000c01', '00000000-0000-7000-8000-000000000c02', 0),
       ('00000000-0000-7000-8000-000000000c12', 'up.c', 'RUNNING', 1, 1,
        '00000000-0000-4000-8000-000000000c99', now() + interval '1 hour', 'up-worker', now(), NULL,
        '00000000-0000-7000-8000-000000000c01', '00000000-0000-7000-8000-000000000c03', 0);
INSERT INTO workflow.workflow_steps (id, workflow_run_id, step_key, execution_kind, job_type,
    max_attempts, status, job_id, released_at, started_at, finished_at, dependency_count_total,
    dependency_count_pending, history_gap)
VALUES ('00000000-0000-7000-8000-000000000c02', '00000000-0000-7000-8000-000000000c01', 'a',
        'JOB', 'up.c', 1, 'SUCCEEDED', '00000000-0000-7000-8000-000000000c11', now(), now(), now(),
        0, 0, true),
       ('00000000-0000-7000-8000-000000000c03', '00000000-0000-7000-8000-000000000c01', 'b',
        'JOB', 'up.c', 1, 'RUNNING', '00000000-0000-7000-8000-000000000c12', now(), now(), NULL,
        0, 0, true);
ALTER EXTENSION workflow UPDATE;
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow';
SELECT 'PARKED' = ANY (enum_range(NULL::workflow.step_status)::text[]) AS parked,
       'WAITING_FOR_ALLOWANCE' = ANY (enum_range(NULL::workflow.run_status)::text[]) AS waiting_for_allowance;
SELECT executions_used, steps_parked, node_execution_cap, concurrency_cap, cycle_cap, retry_cap
  FROM workflow.workflow_runs WHERE id = '00000000-0000-7000-8000-000000000c01';
SELECT * FROM workflow.verify();
SELECT workflow.complete_job('00000000-0000-7000-8000-000000000c12',
                             '00000000-0000-4000-8000-000000000c99', '{"done": true}');
SELECT status, executions_used FROM workflow.workflow_runs
 WHERE id = '00000000-0000-7000-8000-000000000c01';
SELECT workflow.start_run('{"steps": [{"key": "p", "job_type": "up.p"}, {"key": "q", "job_type": "up.p"}],
                            "limits": {"node_execution_cap": 1}}') AS up_capped \gset
SELECT step_key, status FROM workflow.workflow_steps WHERE workflow_run_id = :'up_capped' ORDER BY step_key;
SELECT workflow.increase_execution_allowance(:'up_capped', 1, 2);
SELECT step_key, status FROM workflow.workflow_steps WHERE workflow_run_id = :'up_capped' ORDER BY step_key;
SELECT * FROM workflow.verify();
DROP EXTENSION workflow CASCADE;

-- 1.9 -> 1.10: the CHECK constraints of the run and job rows are gone;
-- verify() checks what they kept
CREATE EXTENSION workflow VERSION '1.9';
SELECT conrelid::regclass, conname FROM pg_catalog.pg_constraint
 WHERE contype = 'c' AND connamespace = 'workflow'::regnamespace ORDER BY 1, 2;
ALTER EXTENSION workflow UPDATE;
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow';
SELECT conrelid::regclass, conname FROM pg_catalog.pg_constraint
 WHERE contype = 'c' AND connamespace = 'workflow'::regnamespace ORDER BY 1, 2;
SELECT workflow.start_run('{"steps": [{"key": "p", "job_type": "up.t"}, {"key": "q", "job_type": "up.t"}],
                            "limits": {"concurrency_cap": 1}}') AS up_ten \gset
SELECT status, steps_parked FROM workflow.workflow_runs WHERE id = :'up_ten';
SELECT * FROM workflow.verify();
UPDATE workflow.workflow_runs SET concurrency_cap = 0 WHERE id = :'up_ten';
UPDATE workflow.job_queue SET max_attempts = 0 WHERE workflow_run_id = :'up_ten';
SELECT problem, expected, regexp_replace(actual, 'job \S+:', 'job J:') AS actual
  FROM workflow.verify(:'up_ten')
 WHERE problem LIKE '%out of range' ORDER BY problem;
DROP EXTENSION workflow CASCADE;

-- 1.10 -> 1.11: parked steps wait in the parking queue, which the update
-- fills from the steps parked at the time; the steps' parked index goes.
-- A run of 1.10 under concurrency_cap 1: p runs, q and r are parked
CREATE EXTENSION workflow VERSION '1.10';
SELECT to_regclass('workflow.workflow_steps_parked_idx') IS NOT NULL AS parked_index;
INSERT INTO workflow.workflow_runs (id, definition, status, steps_total, steps_active,
    steps_waiting, steps_blocked, steps_succeeded, steps_failed, steps_parked,
    executions_used, concurrency_cap, history_gap)
VALUES ('00000000-0000-7000-8000-000000000d01',
        '{"steps": [{"key": "p", "job_type": "up.d"}, {"key": "q", "job_type": "up.d"},
                    {"key": "r", "job_type": "up.d"}], "limits": {"concurrency_cap": 1}}',
        'RUNNING', 3, 1, 0, 0, 0, 0, 2, 1, 1, true);
INSERT INTO workflow.job_queue (id, job_type, status, attempt, max_attempts, lease_token,
    leased_until, worker_id, started_at, workflow_run_id, workflow_step_id, generation)
VALUES ('00000000-0000-7000-8000-000000000d11', 'up.d', 'RUNNING', 1, 1,
        '00000000-0000-4000-8000-000000000d99', now() + interval '1 hour', 'up-worker', now(),
        '00000000-0000-7000-8000-000000000d01', '00000000-0000-7000-8000-000000000d02', 0);
INSERT INTO workflow.workflow_steps (id, workflow_run_id, step_key, execution_kind, job_type,
    max_attempts, status, job_id, released_at, started_at, parked_at, capped,
    dependency_count_total, dependency_count_pending, history_gap)
VALUES ('00000000-0000-7000-8000-000000000d02', '00000000-0000-7000-8000-000000000d01', 'p',
        'JOB', 'up.d', 1, 'RUNNING', '00000000-0000-7000-8000-000000000d11', now(), now(), NULL,
        true, 0, 0, true),
       ('00000000-0000-7000-8000-000000000d03', '00000000-0000-7000-8000-000000000d01', 'q',
        'JOB', 'up.d', 1, 'PARKED', NULL, now() - interval '2 s', NULL, now() - interval '2 s',
        true, 0, 0, true),
       ('00000000-0000-7000-8000-000000000d04', '00000000-0000-7000-8000-000000000d01', 'r',
        'JOB', 'up.d', 1, 'PARKED', NULL, now() - interval '1 s', NULL, now() - interval '1 s',
        true, 0, 0, true);
ALTER EXTENSION workflow UPDATE;
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow';
SELECT s.step_key, q.parked_at = s.parked_at AS same_parked_at
  FROM workflow.parked_steps q JOIN workflow.workflow_steps s ON s.id = q.workflow_step_id
 ORDER BY s.step_key;
SELECT to_regclass('workflow.workflow_steps_parked_idx') IS NOT NULL AS parked_index;
SELECT * FROM workflow.verify();
-- p's completion hands its place to the oldest parked step, q
SELECT workflow.complete_job('00000000-0000-7000-8000-000000000d11',
                             '00000000-0000-4000-8000-000000000d99', '{"done": true}');
SELECT step_key, status FROM workflow.workflow_steps ORDER BY step_key;
SELECT s.step_key AS still_parked
  FROM workflow.parked_steps q JOIN workflow.workflow_steps s ON s.id = q.workflow_step_id;
SELECT steps_active, steps_parked, executions_used FROM workflow.workflow_runs;
SELECT * FROM workflow.verify();
-- verify() reads the queue against the steps: a parked step without its
-- row, and a row whose step is not parked
UPDATE workflow.parked_steps SET workflow_step_id = '00000000-0000-7000-8000-000000000d03';
SELECT step_key, problem FROM workflow.verify('00000000-0000-7000-8000-000000000d01')
 ORDER BY problem;
DROP EXTENSION workflow CASCADE;

-- 1.11 -> 1.12: execution_kind gains REPEAT; output_checksum, the lineage
-- table and the steps' continued column come.
-- A run of 1.11 in flight (p runs, q waits for it) goes on after the
-- update, and a loop starts and goes round in the updated database.
CREATE EXTENSION workflow VERSION '1.11';
SELECT enum_range(NULL::workflow.execution_kind) AS kinds,
       to_regprocedure('workflow.output_checksum(jsonb)') IS NOT NULL AS checksum;
INSERT INTO workflow.workflow_runs (id, definition, status, steps_total, steps_active,
    steps_waiting, steps_blocked, steps_succeeded, steps_failed, executions_used, history_gap)
VALUES ('00000000-0000-7000-8000-000000000e01',
        '{"steps": [{"key": "p", "job_type": "up.e"},
                    {"key": "q", "job_type": "up.e", "depends_on": ["p"]}]}',
        'RUNNING', 2, 1, 0, 1, 0, 0, 1, true);
INSERT INTO workflow.job_queue (id, job_type, status, attempt, max_attempts, lease_token,
    leased_until, worker_id, started_at, workflow_run_id, workflow_step_id, generation)
VALUES ('00000000-0000-7000-8000-000000000e11', 'up.e', 'RUNNING', 1, 1,
        '00000000-0000-4000-8000-000000000e99', now() + interval '1 hour', 'up-worker', now(),
        '00000000-0000-7000-8000-000000000e01', '00000000-0000-7000-8000-000000000e02', 0);
INSERT INTO workflow.workflow_steps (id, workflow_run_id, step_key, execution_kind, job_type,
    max_attempts, status, job_id, released_at, started_at,
    dependency_count_total, dependency_count_pending, history_gap)
VALUES ('00000000-0000-7000-8000-000000000e02', '00000000-0000-7000-8000-000000000e01', 'p',
        'JOB', 'up.e', 1, 'RUNNING', '00000000-0000-7000-8000-000000000e11', now(), now(), 0, 0, true),
       ('00000000-0000-7000-8000-000000000e03', '00000000-0000-7000-8000-000000000e01', 'q',
        'JOB', 'up.e', 1, 'BLOCKED', NULL, NULL, NULL, 1, 1, true);
INSERT INTO workflow.workflow_step_dependencies (workflow_run_id, prerequisite_step_id,
    dependent_step_id, release_mode)
VALUES ('00000000-0000-7000-8000-000000000e01', '00000000-0000-7000-8000-000000000e02',
        '00000000-0000-7000-8000-000000000e03', 'ON_SUCCESS');
ALTER EXTENSION workflow UPDATE;
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'workflow';
SELECT enum_range(NULL::workflow.execution_kind) AS kinds,
       workflow.output_checksum('{"a": 1}') = encode(sha256('{"a": 1}'::bytea), 'hex') AS checksum;
SELECT to_regclass('workflow.workflow_continuations') IS NOT NULL AS lineage_table,
       (SELECT count(*) FROM workflow.workflow_steps WHERE continued) AS continued_steps;
SELECT * FROM workflow.verify();
SELECT workflow.complete_job('00000000-0000-7000-8000-000000000e11',
                             '00000000-0000-4000-8000-000000000e99', '{"done": true}');
SELECT step_key, status FROM workflow.workflow_steps ORDER BY step_key;
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "up.loop"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"],
     "while": "$.again", "max_iterations": 2}]}') AS up_loop \gset
UPDATE workflow.job_queue SET status = 'RUNNING', attempt = 1,
       lease_token = '00000000-0000-4000-8000-000000000e98', leased_until = now() + interval '1 hour'
 WHERE workflow_run_id = :'up_loop' AND status = 'QUEUED';
SELECT workflow.complete_job(id, lease_token, '{"again": true}')
  FROM workflow.job_queue WHERE workflow_run_id = :'up_loop' AND status = 'RUNNING';
SELECT step_key, execution_kind, status, generation FROM workflow.workflow_steps
 WHERE workflow_run_id = :'up_loop' ORDER BY step_key;
SELECT * FROM workflow.verify();
DROP EXTENSION workflow CASCADE;
CREATE EXTENSION workflow;
