-- complete_and_claim: complete one job and claim the next in one
-- transaction, with complete_job's and claim's checks; and the wake-ups
-- of workflow.notify_jobs (their delivery is in specs/notify_jobs.spec).
\set VERBOSITY terse
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;

CREATE FUNCTION pg_temp.err(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END $$;

-- plain jobs: each call finishes one job and hands out the next, in claim order
SELECT count(workflow.enqueue('cc.plain', jsonb_build_object('n', n), 0,
                              now() - make_interval(secs => 10 - n))) AS enqueued
  FROM generate_series(1, 4) AS n;
SELECT id AS j, lease_token AS t FROM workflow.claim('w1', ARRAY['cc.plain']) \gset
SELECT id AS j2, lease_token AS t2, payload, status, attempt, worker_id,
       leased_until > now() AS leased
  FROM workflow.complete_and_claim(:'j', :'t', '{"done": 1}', 'w1', ARRAY['cc.plain']) \gset
SELECT :'payload' AS payload, :'status' AS status, :'attempt' AS attempt,
       :'worker_id' AS worker, :'leased' AS leased;
SELECT payload, status, output, finished_at IS NOT NULL AS finished, lease_token = :'t' AS kept_token
  FROM workflow.job_queue WHERE id = :'j';
-- batch_size: the last two at once; then nothing left, and the job is still completed
SELECT payload, status FROM workflow.complete_and_claim(:'j2', :'t2', NULL, 'w1', ARRAY['cc.plain'], 2)
 ORDER BY payload->>'n';
SELECT id AS j3, lease_token AS t3 FROM workflow.job_queue
 WHERE job_type = 'cc.plain' AND payload->>'n' = '3' \gset
SELECT count(*) AS claimed FROM workflow.complete_and_claim(:'j3', :'t3', NULL, 'w1', ARRAY['cc.plain']);
SELECT payload->>'n' AS n, status FROM workflow.job_queue WHERE job_type = 'cc.plain' ORDER BY 1;

-- an identical repeat of the completion returns quietly and claims again;
-- a repeat with another output is job.not_running and claims nothing
SELECT workflow.enqueue('cc.more') AS m1 \gset
SELECT count(*) AS claimed FROM workflow.complete_and_claim(:'j3', :'t3', NULL, 'w1', ARRAY['cc.more']);
SELECT status, worker_id FROM workflow.job_queue WHERE id = :'m1';
SELECT pg_temp.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, '{"x": 1}', 'w1')$$, :'j', :'t'));

-- the errors of complete_job, in its order, and nothing claimed with them
SELECT workflow.enqueue('cc.bait') AS bait \gset
SELECT pg_temp.err($$SELECT * FROM workflow.complete_and_claim('00000000-0000-7000-8000-0000000000f1',
    '00000000-0000-4000-8000-0000000000f2', NULL, 'w1')$$);
SELECT pg_temp.err(format($$SELECT * FROM workflow.complete_and_claim(%L, gen_random_uuid(), NULL, 'w1')$$, :'m1'));
SELECT workflow.cancel_job(:'m1');
SELECT pg_temp.err(format($$SELECT * FROM workflow.complete_and_claim(%L, gen_random_uuid(), NULL, 'w1')$$, :'m1'));
SELECT status FROM workflow.job_queue WHERE id = :'bait';

-- bad arguments: refused before anything is written
SELECT id AS b, lease_token AS bt FROM workflow.claim('w1', ARRAY['cc.bait']) \gset
SELECT workflow.enqueue('cc.bait') AS bait2 \gset
SELECT pg_temp.err(format($$SELECT * FROM workflow.complete_and_claim(NULL, %L, NULL, 'w1')$$, :'bt'));
SELECT pg_temp.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, NULL, NULL)$$, :'b', :'bt'));
SELECT pg_temp.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, NULL, 'w1', ARRAY[]::text[])$$, :'b', :'bt'));
SELECT pg_temp.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, NULL, 'w1', ARRAY[NULL]::text[])$$, :'b', :'bt'));
SELECT pg_temp.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, NULL, 'w1', NULL, 0)$$, :'b', :'bt'));
SELECT pg_temp.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, NULL, 'w1', NULL, NULL)$$, :'b', :'bt'));
SET workflow.max_payload_bytes = 100;
SELECT pg_temp.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, jsonb_build_object('big', repeat('x', 200)), 'w1')$$, :'b', :'bt'));
RESET workflow.max_payload_bytes;
SELECT CASE id WHEN :'b' THEN 'claimed' ELSE 'queued' END AS job, status
  FROM workflow.job_queue WHERE id IN (:'b', :'bait2') ORDER BY 1;

-- the claim fails after the completion: both roll back together
CREATE FUNCTION pg_temp.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.job_type = 'cc.poison' AND NEW.status = 'RUNNING' THEN
        RAISE EXCEPTION 'poisoned claim';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER refuse_poison BEFORE UPDATE ON workflow.job_queue
    FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse_poison();
SELECT workflow.enqueue('cc.poison') AS poison \gset
SELECT pg_temp.err(format($$SELECT * FROM workflow.complete_and_claim(%L, %L, '{}', 'w1', ARRAY['cc.poison'])$$, :'b', :'bt'));
SELECT job_type, status, output FROM workflow.job_queue WHERE id IN (:'b', :'poison') ORDER BY 1;
DROP TRIGGER refuse_poison ON workflow.job_queue;
-- a transaction rolled back by its caller: the completion and the claim go too
BEGIN;
SELECT count(*) AS claimed FROM workflow.complete_and_claim(:'b', :'bt', '{}', 'w1', ARRAY['cc.poison']);
ROLLBACK;
SELECT job_type, status FROM workflow.job_queue WHERE id IN (:'b', :'poison') ORDER BY 1;

-- steps: the completion releases the next step, and the same call claims
-- its job; a chain of three runs with one call per step
SELECT workflow.start_run('{"name": "cc.chain", "steps": [
    {"key": "a", "job_type": "cc.step"},
    {"key": "b", "job_type": "cc.step", "depends_on": ["a"]},
    {"key": "c", "job_type": "cc.step", "depends_on": ["b"]}]}') AS run \gset
SELECT id AS sj, lease_token AS st FROM workflow.claim('w2', ARRAY['cc.step']) \gset
SELECT s.step_key, c.status, c.attempt, c.id AS sj2, c.lease_token AS st2
  FROM workflow.complete_and_claim(:'sj', :'st', '{"a": 1}', 'w2', ARRAY['cc.step']) c
  JOIN workflow.workflow_steps s ON s.id = c.workflow_step_id \gset
SELECT :'step_key' AS claimed_step, :'status' AS status;
SELECT s.step_key, c.id AS sj3, c.lease_token AS st3
  FROM workflow.complete_and_claim(:'sj2', :'st2', '{"b": 1}', 'w2', ARRAY['cc.step']) c
  JOIN workflow.workflow_steps s ON s.id = c.workflow_step_id \gset
SELECT :'step_key' AS claimed_step;
SELECT count(*) AS claimed FROM workflow.complete_and_claim(:'sj3', :'st3', '{"c": 1}', 'w2', ARRAY['cc.step']);
SELECT status, result FROM workflow.workflow_runs WHERE id = :'run';
SELECT step_key, status FROM workflow.workflow_steps WHERE workflow_run_id = :'run' ORDER BY step_key;
SELECT step_key, event_type FROM workflow.run_history(:'run');
SELECT * FROM workflow.verify(:'run');

-- a tenant of one organization completes its job and claims only its own
CREATE ROLE cc_tenant LOGIN;
GRANT workflow_worker TO cc_tenant;
SELECT workflow.grant_organization('cc_tenant', '00000000-0000-0000-0000-0000000000aa');
SELECT workflow.enqueue('cc.org', '{"org": "aa"}', 0, now(), 3, 300, '00000000-0000-0000-0000-0000000000aa') AS oa \gset
SELECT workflow.enqueue('cc.org', '{"org": "aa"}', 0, now(), 3, 300, '00000000-0000-0000-0000-0000000000aa') AS oa2 \gset
SELECT workflow.enqueue('cc.org', '{"org": "bb"}', 1, now(), 3, 300, '00000000-0000-0000-0000-0000000000bb') AS ob \gset
SET ROLE cc_tenant;
SELECT id AS tj, lease_token AS tt FROM workflow.claim('tw', ARRAY['cc.org']) \gset
SELECT payload FROM workflow.complete_and_claim(:'tj', :'tt', NULL, 'tw', ARRAY['cc.org']);
SELECT count(*) AS claimed FROM workflow.complete_and_claim(:'tj', :'tt', NULL, 'tw', ARRAY['cc.org'], 1,
    '00000000-0000-0000-0000-0000000000bb');
RESET ROLE;
SELECT payload->>'org' AS org, status FROM workflow.job_queue WHERE job_type = 'cc.org' ORDER BY 1, 2;
-- a role without workflow_worker may not call it
CREATE ROLE cc_client;
GRANT workflow_client TO cc_client;
SET ROLE cc_client;
SELECT pg_temp.err($$SELECT * FROM workflow.complete_and_claim(gen_random_uuid(), gen_random_uuid(), NULL, 'x')$$);
RESET ROLE;
SELECT workflow.revoke_organization('cc_tenant', '00000000-0000-0000-0000-0000000000aa');
DROP ROLE cc_tenant;
DROP ROLE cc_client;

-- workflow.notify_jobs: off by default, and a superuser is not needed to set it
SHOW workflow.notify_jobs;
SELECT setting, context FROM pg_catalog.pg_settings WHERE name = 'workflow.notify_jobs';
