-- The job queue: enqueue, claim, heartbeat, complete, fail, release,
-- cancel, lease expiry and the batch forms, on plain jobs.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;

-- err() runs a statement and shows its SQLSTATE and stable error code,
-- which stay the same while the ids in the message change.
CREATE FUNCTION pg_temp.err(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END $$;

-- enqueue: defaults
SELECT workflow.enqueue('mail.send') AS j1 \gset
SELECT job_type, payload, priority, status, attempt, max_attempts,
       timeout_seconds, organization_id, stage, lease_token IS NULL AS no_token,
       run_at <= now() AS due, workflow_run_id IS NULL AS plain, generation
  FROM workflow.job_queue WHERE id = :'j1';

-- enqueue: bad input
SELECT pg_temp.err($$SELECT workflow.enqueue(NULL)$$);
SELECT pg_temp.err($$SELECT workflow.enqueue('')$$);
SELECT pg_temp.err($$SELECT workflow.enqueue(repeat('x', 129))$$);
SELECT pg_temp.err($$SELECT workflow.enqueue('t', NULL)$$);
SELECT pg_temp.err($$SELECT workflow.enqueue('t', '{}', NULL)$$);
SELECT pg_temp.err($$SELECT workflow.enqueue('t', '{}', 0, NULL)$$);
SELECT pg_temp.err($$SELECT workflow.enqueue('t', '{}', 0, now(), 0)$$);
SELECT pg_temp.err($$SELECT workflow.enqueue('t', '{}', 0, now(), 3, 0)$$);
SET workflow.max_payload_bytes = 100;
SELECT pg_temp.err($$SELECT workflow.enqueue('t', jsonb_build_object('big', repeat('x', 200)))$$);
RESET workflow.max_payload_bytes;
SELECT count(*) AS jobs_after_bad_input FROM workflow.job_queue;

-- claim order: priority DESC, run_at, id; future jobs are not due
TRUNCATE workflow.job_queue;
SELECT workflow.enqueue('order', '{"n": 1}', 0, now() - interval '3 min') \gset
SELECT workflow.enqueue('order', '{"n": 2}', 5, now() - interval '1 min') \gset
SELECT workflow.enqueue('order', '{"n": 3}', 5, now() - interval '2 min') \gset
SELECT workflow.enqueue('order', '{"n": 4}', 0, now() + interval '1 hour') \gset
SELECT payload->>'n' AS n, status, attempt, worker_id,
       leased_until > now() + interval '299 s' AS leased,
       lease_token IS NOT NULL AS has_token, started_at IS NOT NULL AS started
  FROM workflow.claim('w1', ARRAY['order'], 10);
SELECT count(*) AS nothing_due FROM workflow.claim('w1', ARRAY['order'], 10);

-- claim filters: type, several types, organization, stage
TRUNCATE workflow.job_queue;
SELECT workflow.enqueue('a', '{"n": "a"}') \gset
SELECT workflow.enqueue('b', '{"n": "b"}') \gset
SELECT workflow.enqueue('c', '{"n": "c-org"}', 0, now(), 3, 300,
                        '00000000-0000-0000-0000-00000000000a') \gset
SELECT workflow.enqueue('c', '{"n": "c-stage"}', 0, now(), 3, 300, NULL, 'gpu') \gset
SELECT payload->>'n' AS n FROM workflow.claim('w', ARRAY['b']);
SELECT payload->>'n' AS n FROM workflow.claim('w', NULL, 5,
                                              '00000000-0000-0000-0000-00000000000a');
SELECT payload->>'n' AS n FROM workflow.claim('w', NULL, 5, NULL, 'gpu');
SELECT payload->>'n' AS n FROM workflow.claim('w', ARRAY['a', 'zzz'], 5);
SELECT count(*) AS none_left FROM workflow.claim('w', NULL, 5);

-- claim: bad input
SELECT pg_temp.err($$SELECT * FROM workflow.claim('w', ARRAY[]::text[])$$);
SELECT pg_temp.err($$SELECT * FROM workflow.claim('w', ARRAY[NULL]::text[])$$);
SELECT pg_temp.err($$SELECT * FROM workflow.claim('w', NULL, 0)$$);
SELECT pg_temp.err($$SELECT * FROM workflow.claim('w', NULL, 1001)$$);
SELECT pg_temp.err($$SELECT * FROM workflow.claim('w', NULL, NULL)$$);
SELECT pg_temp.err($$SELECT * FROM workflow.claim(NULL)$$);

-- heartbeat extends the lease; stale tokens are fenced
TRUNCATE workflow.job_queue;
SELECT workflow.enqueue('hb', '{}', 0, now(), 3, 60) \gset
SELECT id AS job, lease_token AS token FROM workflow.claim('w1', ARRAY['hb']) \gset
UPDATE workflow.job_queue SET leased_until = now() WHERE id = :'job';
SELECT workflow.heartbeat(:'job', :'token') > now() + interval '59 s' AS extended;
SELECT pg_temp.err(format('SELECT workflow.heartbeat(%L, gen_random_uuid())', :'job'));
SELECT pg_temp.err($$SELECT workflow.heartbeat('00000000-0000-0000-0000-000000000001', gen_random_uuid())$$);
SELECT pg_temp.err(format('SELECT workflow.heartbeat(%L, NULL)', :'job'));

-- complete_job: success, quiet identical repeat, different repeat refused
SELECT workflow.complete_job(:'job', :'token', '{"ok": true}');
SELECT status, output, finished_at IS NOT NULL AS finished,
       lease_token = :'token' AS token_kept FROM workflow.job_queue WHERE id = :'job';
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L, %L)', :'job', :'token', '{"ok": true}'));
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L, %L)', :'job', :'token', '{"ok": false}'));
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, gen_random_uuid())', :'job'));
SELECT pg_temp.err(format('SELECT workflow.heartbeat(%L, %L)', :'job', :'token'));
SELECT pg_temp.err(format('SELECT workflow.fail_job(%L, %L, %L, %L)', :'job', :'token', 'x', 'y'));
SELECT pg_temp.err($$SELECT workflow.complete_job('00000000-0000-0000-0000-000000000001', gen_random_uuid())$$);
SELECT pg_temp.err($$SELECT workflow.complete_job(NULL, gen_random_uuid())$$);
-- a job that moved out of RUNNING is refused for the token it had
SELECT pg_temp.err(format('UPDATE workflow.job_queue SET status = %L WHERE id = %L', 'QUEUED', :'job'));

-- fail_job: retry with backoff, then FAILED on the last attempt
TRUNCATE workflow.job_queue;
SELECT workflow.enqueue('flaky', '{}', 0, now(), 2) AS job \gset
SELECT id AS job, lease_token AS token FROM workflow.claim('w1', ARRAY['flaky']) \gset
SET workflow.retry_base_delay_ms = 60000;
SELECT workflow.fail_job(:'job', :'token', 'io.timeout', 'took too long');
SELECT status, attempt, lease_token IS NULL AS token_cleared, worker_id,
       run_at >= now() + interval '30 s' AND run_at <= now() + interval '60 s' AS backoff,
       last_error_code, last_error_message FROM workflow.job_queue WHERE id = :'job';
SELECT count(*) AS not_due_during_backoff FROM workflow.claim('w1', ARRAY['flaky']);
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'job', :'token'));
UPDATE workflow.job_queue SET run_at = now() WHERE id = :'job';
SELECT id AS job, lease_token AS token FROM workflow.claim('w2', ARRAY['flaky']) \gset
SELECT workflow.fail_job(:'job', :'token', 'io.timeout', 'took too long again');
SELECT status, attempt, lease_token = :'token' AS token_kept,
       finished_at IS NOT NULL AS finished, last_error_message
  FROM workflow.job_queue WHERE id = :'job';
-- identical repeat is quiet; a different one is refused
SELECT pg_temp.err(format('SELECT workflow.fail_job(%L, %L, %L, %L)', :'job', :'token', 'io.timeout', 'took too long again'));
SELECT pg_temp.err(format('SELECT workflow.fail_job(%L, %L, %L, %L)', :'job', :'token', 'io.other', 'x'));
SELECT pg_temp.err(format('SELECT workflow.fail_job(%L, %L, NULL, %L)', :'job', :'token', 'x'));
SELECT pg_temp.err(format('SELECT workflow.fail_job(%L, %L, %L, %L, NULL)', :'job', :'token', 'c', 'x'));

-- the backoff doubles per attempt, capped by workflow.retry_max_delay_ms
TRUNCATE workflow.job_queue;
SET workflow.retry_base_delay_ms = 10000;
SET workflow.retry_max_delay_ms = 15000;
SELECT workflow.enqueue('backoff', '{}', 0, now(), 10) AS job \gset
UPDATE workflow.job_queue SET attempt = 3 WHERE id = :'job';
SELECT id AS job, lease_token AS token FROM workflow.claim('w1', ARRAY['backoff']) \gset
SELECT workflow.fail_job(:'job', :'token', 'e', NULL);
SELECT run_at >= now() + interval '7.5 s' AND run_at <= now() + interval '15 s' AS capped
  FROM workflow.job_queue WHERE id = :'job';
RESET workflow.retry_max_delay_ms;
SET workflow.retry_base_delay_ms = 0;

-- fail_job not retryable fails at once; long messages are truncated
TRUNCATE workflow.job_queue;
SELECT workflow.enqueue('fatal') AS job \gset
SELECT id AS job, lease_token AS token FROM workflow.claim('w1', ARRAY['fatal']) \gset
SELECT workflow.fail_job(:'job', :'token', 'bad.input', repeat('é', 3000), false);
SELECT status, attempt, octet_length(last_error_message) AS message_bytes
  FROM workflow.job_queue WHERE id = :'job';

-- release_job gives the claim back without using an attempt
TRUNCATE workflow.job_queue;
SELECT workflow.enqueue('rel', '{}', 0, now() - interval '1 min') AS job \gset
SELECT run_at AS run_at_before FROM workflow.job_queue WHERE id = :'job' \gset
SELECT id AS job, lease_token AS token FROM workflow.claim('w1', ARRAY['rel']) \gset
SELECT workflow.release_job(:'job', :'token');
SELECT status, attempt, lease_token IS NULL AS token_cleared, worker_id,
       run_at = :'run_at_before' AS run_at_kept FROM workflow.job_queue WHERE id = :'job';
SELECT pg_temp.err(format('SELECT workflow.release_job(%L, %L)', :'job', :'token'));
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'job', :'token'));

-- cancel_job
SELECT workflow.cancel_job(:'job', 'no longer needed');
SELECT status, last_error_code, last_error_message FROM workflow.job_queue WHERE id = :'job';
SELECT pg_temp.err(format('SELECT workflow.cancel_job(%L)', :'job'));
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'job', :'token'));
SELECT count(*) AS canceled_not_claimed FROM workflow.claim('w1', ARRAY['rel']);
SELECT workflow.enqueue('done') AS job \gset
SELECT id AS job, lease_token AS token FROM workflow.claim('w1', ARRAY['done']) \gset
SELECT workflow.cancel_job(:'job');
SELECT status FROM workflow.job_queue WHERE id = :'job';
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'job', :'token'));
SELECT workflow.enqueue('done2') AS job \gset
SELECT id AS job, lease_token AS token FROM workflow.claim('w1', ARRAY['done2']) \gset
SELECT workflow.complete_job(:'job', :'token');
SELECT pg_temp.err(format('SELECT workflow.cancel_job(%L)', :'job'));
SELECT pg_temp.err($$SELECT workflow.cancel_job('00000000-0000-0000-0000-000000000001')$$);
SELECT pg_temp.err($$SELECT workflow.cancel_job(NULL)$$);

-- reap_expired: back to QUEUED at leased_until, or FAILED on the last attempt
TRUNCATE workflow.job_queue;
SELECT workflow.enqueue('reap', '{"n": 1}', 0, now(), 2) AS r1 \gset
SELECT workflow.enqueue('reap', '{"n": 2}', 0, now(), 1) AS r2 \gset
SELECT workflow.enqueue('reap', '{"n": 3}', 0, now(), 1) AS r3 \gset
SELECT count(*) FROM workflow.claim('w1', ARRAY['reap'], 3);
SELECT lease_token AS token1 FROM workflow.job_queue WHERE id = :'r1' \gset
UPDATE workflow.job_queue SET leased_until = now() - interval '1 min'
 WHERE id IN (:'r1', :'r2');
-- until it is reaped, the holder may still heartbeat
SELECT workflow.heartbeat(:'r1', :'token1') > now() AS still_held;
UPDATE workflow.job_queue SET leased_until = now() - interval '1 min' WHERE id = :'r1';
SELECT workflow.reap_expired() AS expired;
SELECT payload->>'n' AS n, status, attempt, lease_token IS NULL AS token_cleared,
       last_error_code, run_at < now() AS due_again
  FROM workflow.job_queue ORDER BY payload->>'n';
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'r1', :'token1'));
SELECT workflow.reap_expired() AS expired_again;

-- batch forms
TRUNCATE workflow.job_queue;
SELECT count(workflow.enqueue('batch', jsonb_build_object('n', g))) FROM generate_series(1, 4) g;
CREATE TEMP TABLE claimed AS SELECT id, lease_token, payload->>'n' AS n
  FROM workflow.claim('w1', ARRAY['batch'], 4);
SELECT count(*) AS finished FROM workflow.complete_jobs(
    ARRAY(SELECT id FROM claimed WHERE n IN ('1', '2') ORDER BY n),
    ARRAY(SELECT lease_token FROM claimed WHERE n IN ('1', '2') ORDER BY n),
    ARRAY['{"r": 1}', '{"r": 2}']::jsonb[]);
SELECT n, status, output FROM workflow.job_queue JOIN claimed USING (id) ORDER BY n;
-- an identical repeat is returned again; a stale token is skipped
SELECT count(*) AS returned FROM workflow.complete_jobs(
    ARRAY(SELECT id FROM claimed WHERE n IN ('1', '3') ORDER BY n),
    ARRAY[(SELECT lease_token FROM claimed WHERE n = '1'), gen_random_uuid()],
    ARRAY['{"r": 1}', '{"r": 3}']::jsonb[]);
SELECT n, status FROM workflow.job_queue JOIN claimed USING (id) WHERE n = '3';
-- a canceled job is skipped
SELECT workflow.cancel_job((SELECT id FROM claimed WHERE n = '3'));
SELECT count(*) AS returned FROM workflow.fail_jobs(
    ARRAY(SELECT id FROM claimed WHERE n IN ('3', '4') ORDER BY n),
    ARRAY(SELECT lease_token FROM claimed WHERE n IN ('3', '4') ORDER BY n),
    ARRAY['e3', 'e4'], ARRAY['m3', 'm4'], false);
SELECT n, status, last_error_code FROM workflow.job_queue JOIN claimed USING (id) ORDER BY n;
-- batch errors
SELECT pg_temp.err(format('SELECT workflow.complete_jobs(ARRAY[%L, %L]::uuid[], ARRAY[%L, %L]::uuid[])',
    (SELECT id FROM claimed WHERE n = '1'), (SELECT id FROM claimed WHERE n = '1'),
    (SELECT lease_token FROM claimed WHERE n = '1'), (SELECT lease_token FROM claimed WHERE n = '1')));
SELECT pg_temp.err($$SELECT workflow.complete_jobs(ARRAY[gen_random_uuid()], ARRAY[gen_random_uuid()])$$);
SELECT pg_temp.err($$SELECT workflow.complete_jobs(ARRAY[gen_random_uuid()], ARRAY[]::uuid[])$$);
SELECT pg_temp.err($$SELECT workflow.complete_jobs(ARRAY[gen_random_uuid()], ARRAY[gen_random_uuid()], ARRAY[]::jsonb[])$$);
SELECT pg_temp.err($$SELECT workflow.complete_jobs(NULL, ARRAY[]::uuid[])$$);
SELECT pg_temp.err($$SELECT workflow.fail_jobs(ARRAY[gen_random_uuid()], ARRAY[gen_random_uuid()], ARRAY['a'], ARRAY[]::text[])$$);
SELECT pg_temp.err(format('SELECT workflow.complete_jobs(ARRAY[%L]::uuid[], ARRAY[%L]::uuid[], ARRAY[%L]::jsonb[])',
    (SELECT id FROM claimed WHERE n = '4'), (SELECT lease_token FROM claimed WHERE n = '4'), '{}'));
SELECT count(*) AS empty_batch FROM workflow.complete_jobs(ARRAY[]::uuid[], ARRAY[]::uuid[]);

-- a batch is written by one statement: each job gets its own output,
-- error and outcome whatever order the caller's arrays are in
TRUNCATE workflow.job_queue;
SELECT count(workflow.enqueue('order2', jsonb_build_object('n', g), max_attempts => CASE WHEN g = 3 THEN 1 ELSE 3 END))
  FROM generate_series(1, 6) g;
CREATE TEMP TABLE claimed2 AS SELECT id, lease_token, payload->>'n' AS n
  FROM workflow.claim('w1', ARRAY['order2'], 6);
SELECT count(*) AS finished FROM workflow.complete_jobs(
    ARRAY(SELECT id FROM claimed2 WHERE n IN ('1', '2', '4') ORDER BY id DESC),
    ARRAY(SELECT lease_token FROM claimed2 WHERE n IN ('1', '2', '4') ORDER BY id DESC),
    ARRAY(SELECT CASE n WHEN '2' THEN NULL ELSE jsonb_build_object('r', n) END
            FROM claimed2 WHERE n IN ('1', '2', '4') ORDER BY id DESC));
SET workflow.retry_base_delay_ms = 60000;
SELECT count(*) AS failed FROM workflow.fail_jobs(
    ARRAY(SELECT id FROM claimed2 WHERE n IN ('3', '5', '6') ORDER BY id DESC),
    ARRAY(SELECT lease_token FROM claimed2 WHERE n IN ('3', '5', '6') ORDER BY id DESC),
    ARRAY(SELECT 'e' || n FROM claimed2 WHERE n IN ('3', '5', '6') ORDER BY id DESC),
    ARRAY(SELECT CASE n WHEN '5' THEN NULL ELSE 'm' || n END
            FROM claimed2 WHERE n IN ('3', '5', '6') ORDER BY id DESC),
    true);
SET workflow.retry_base_delay_ms = 0;
SELECT n, j.status, j.output, j.last_error_code, j.last_error_message,
       j.lease_token IS NULL AS token_cleared, j.finished_at IS NOT NULL AS finished,
       j.run_at > now() AS backed_off
  FROM workflow.job_queue j JOIN claimed2 USING (id) ORDER BY n;

-- claims of many batch sizes in one session: each size has its own plan,
-- a backend keeps a few, and sizes beyond them replace the oldest
TRUNCATE workflow.job_queue;
SELECT count(workflow.enqueue('sizes', jsonb_build_object('n', g))) FROM generate_series(1, 40) g;
SELECT size, (SELECT array_agg((payload->>'n')::int) FROM workflow.claim('w1', ARRAY['sizes'], size)) AS claimed
  FROM unnest(ARRAY[1, 2, 3, 4, 5, 6, 1, 2, 7]) WITH ORDINALITY AS x(size, k) ORDER BY k;

-- size bounds hold for values read from a table (stored compressed)
CREATE TEMP TABLE big AS SELECT jsonb_build_object('x', repeat('ab', 600000)) AS p;
SELECT pg_column_size(p) < 1048576 AS stored_small, octet_length(p::text) > 1048576 AS large
  FROM big;
SELECT pg_temp.err($$SELECT workflow.enqueue('big', p) FROM big$$);

-- every invariant holds at the end
SELECT * FROM workflow.verify();
