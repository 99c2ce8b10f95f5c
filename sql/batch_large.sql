-- complete_jobs and fail_jobs at their bound, 10,000 jobs in one call: the
-- call returns every id it finished, once each, in ascending order, and no
-- other; an identical repeat returns them all again; one id more than the
-- bound raises job.invalid_argument and writes nothing.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;

-- err() shows the SQLSTATE and stable code of an error; msg() the whole
-- message, for errors whose messages name no id.
CREATE FUNCTION pg_temp.err(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END $$;
CREATE FUNCTION pg_temp.msg(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END $$;

-- claims 10,000 jobs of one type, 1,000 per claim (claim's largest batch)
CREATE FUNCTION pg_temp.claim_all(job_type text)
RETURNS TABLE (id uuid, lease_token uuid) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..10 LOOP
        RETURN QUERY SELECT c.id, c.lease_token
                       FROM workflow.claim('w1', ARRAY[job_type], 1000) c;
    END LOOP;
END $$;

-- compares what a batch call returned with what it was given: how many
-- rows, how many distinct, ids it was not given, ids it did not return,
-- and whether they came back in ascending order
CREATE FUNCTION pg_temp.compare(returned uuid[], given uuid[])
RETURNS TABLE (returned bigint, distinct_ids bigint, not_given bigint,
               not_returned bigint, ascending boolean)
LANGUAGE sql AS $$
    SELECT (SELECT count(*) FROM unnest(returned)),
           (SELECT count(DISTINCT r) FROM unnest(returned) r),
           (SELECT count(*) FROM unnest(returned) r
             WHERE NOT EXISTS (SELECT FROM unnest(given) g WHERE g = r)),
           (SELECT count(*) FROM unnest(given) g
             WHERE NOT EXISTS (SELECT FROM unnest(returned) r WHERE r = g)),
           returned = ARRAY(SELECT r FROM unnest(returned) r ORDER BY r)
$$;

SELECT count(workflow.enqueue('big.complete', jsonb_build_object('n', g)))
  FROM generate_series(1, 10000) g;
SELECT count(workflow.enqueue('big.fail', jsonb_build_object('n', g)))
  FROM generate_series(1, 10000) g;

-- complete_jobs: 10,000 claimed jobs, passed in claim order (not id order)
CREATE TEMP TABLE to_complete AS
    SELECT row_number() OVER () AS k, c.* FROM pg_temp.claim_all('big.complete') c;
SELECT count(*) AS claimed, count(DISTINCT id) AS distinct_claimed FROM to_complete;
CREATE TEMP TABLE completed AS
    SELECT ARRAY(SELECT workflow.complete_jobs(
                            ARRAY(SELECT id FROM to_complete ORDER BY k),
                            ARRAY(SELECT lease_token FROM to_complete ORDER BY k),
                            ARRAY(SELECT jsonb_build_object('k', k) FROM to_complete ORDER BY k)))
           AS ids;
SELECT c.* FROM completed, pg_temp.compare(completed.ids, ARRAY(SELECT id FROM to_complete)) c;
SELECT j.status, count(*), bool_and(j.output = jsonb_build_object('k', t.k)) AS outputs_kept
  FROM workflow.job_queue j JOIN to_complete t USING (id) GROUP BY j.status;

-- an identical repeat returns every id again and changes nothing
SELECT c.* FROM pg_temp.compare(
    ARRAY(SELECT workflow.complete_jobs(
              ARRAY(SELECT id FROM to_complete ORDER BY k),
              ARRAY(SELECT lease_token FROM to_complete ORDER BY k),
              ARRAY(SELECT jsonb_build_object('k', k) FROM to_complete ORDER BY k))),
    ARRAY(SELECT id FROM to_complete)) c;

-- fail_jobs: 10,000 claimed jobs, final failures
CREATE TEMP TABLE to_fail AS
    SELECT row_number() OVER () AS k, c.* FROM pg_temp.claim_all('big.fail') c;
SELECT count(*) AS claimed, count(DISTINCT id) AS distinct_claimed FROM to_fail;
CREATE TEMP TABLE failed AS
    SELECT ARRAY(SELECT workflow.fail_jobs(
                            ARRAY(SELECT id FROM to_fail ORDER BY k),
                            ARRAY(SELECT lease_token FROM to_fail ORDER BY k),
                            ARRAY(SELECT 'e.' || k FROM to_fail ORDER BY k),
                            ARRAY(SELECT 'failed ' || k FROM to_fail ORDER BY k),
                            false))
           AS ids;
SELECT c.* FROM failed, pg_temp.compare(failed.ids, ARRAY(SELECT id FROM to_fail)) c;
SELECT j.status, count(*), bool_and(j.last_error_code = 'e.' || t.k) AS codes_kept
  FROM workflow.job_queue j JOIN to_fail t USING (id) GROUP BY j.status;

-- an identical repeat returns every id again
SELECT c.* FROM pg_temp.compare(
    ARRAY(SELECT workflow.fail_jobs(
              ARRAY(SELECT id FROM to_fail ORDER BY k),
              ARRAY(SELECT lease_token FROM to_fail ORDER BY k),
              ARRAY(SELECT 'e.' || k FROM to_fail ORDER BY k),
              ARRAY(SELECT 'failed ' || k FROM to_fail ORDER BY k),
              false)),
    ARRAY(SELECT id FROM to_fail)) c;

-- fail_jobs with retries: 10,000 jobs go back to QUEUED, every id returned
SELECT count(workflow.enqueue('big.retry')) FROM generate_series(1, 10000);
CREATE TEMP TABLE to_retry AS
    SELECT row_number() OVER () AS k, c.* FROM pg_temp.claim_all('big.retry') c;
SELECT c.* FROM pg_temp.compare(
    ARRAY(SELECT workflow.fail_jobs(
              ARRAY(SELECT id FROM to_retry ORDER BY k),
              ARRAY(SELECT lease_token FROM to_retry ORDER BY k),
              array_fill('e.retry'::text, ARRAY[10000]),
              array_fill(NULL::text, ARRAY[10000]))),
    ARRAY(SELECT id FROM to_retry)) c;
SELECT j.status, count(*), bool_and(j.lease_token IS NULL) AS tokens_cleared
  FROM workflow.job_queue j JOIN to_retry t USING (id) GROUP BY j.status;

-- one id more than the bound: job.invalid_argument, before any job is read
SELECT workflow.enqueue('big.bound') AS b \gset
SELECT id AS b_id, lease_token AS b_token FROM workflow.claim('w1', ARRAY['big.bound']) \gset
SELECT pg_temp.msg($$SELECT workflow.complete_jobs(
    ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10001)),
    ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10001)))$$);
SELECT pg_temp.err(format($$SELECT workflow.complete_jobs(
    ARRAY[%L::uuid] || ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10000)),
    ARRAY[%L::uuid] || ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10000)))$$,
    :'b_id', :'b_token'));
SELECT pg_temp.msg($$SELECT workflow.fail_jobs(
    ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10001)),
    ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10001)),
    array_fill('e'::text, ARRAY[10001]), array_fill('m'::text, ARRAY[10001]))$$);
SELECT pg_temp.err(format($$SELECT workflow.fail_jobs(
    ARRAY[%L::uuid] || ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10000)),
    ARRAY[%L::uuid] || ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10000)),
    array_fill('e'::text, ARRAY[10001]), array_fill('m'::text, ARRAY[10001]))$$,
    :'b_id', :'b_token'));
SELECT status, attempt FROM workflow.job_queue WHERE id = :'b_id';

-- every invariant holds at the end
SELECT * FROM workflow.verify();
