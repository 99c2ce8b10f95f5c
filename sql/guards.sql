-- Guard triggers, READ COMMITTED enforcement and search_path safety.
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

SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "g.a"},
    {"key": "b", "job_type": "g.b", "depends_on": ["a"]}]}') AS run \gset

-- a direct status change of a step is refused; other columns may change
SELECT pg_temp.err(format($$UPDATE workflow.workflow_steps SET status = 'SUCCEEDED'
    WHERE workflow_run_id = %L AND step_key = 'a'$$, :'run'));
UPDATE workflow.workflow_steps SET updated_at = now() WHERE workflow_run_id = :'run';
-- the job of a live step cannot be deleted
SELECT pg_temp.err(format('DELETE FROM workflow.job_queue WHERE workflow_run_id = %L', :'run'));
-- a finished job cannot move back
SELECT * FROM workflow.claim('w', ARRAY['g.a']) \gset c_
SELECT workflow.complete_job(:'c_id', :'c_lease_token');
SELECT pg_temp.err(format($$UPDATE workflow.job_queue SET status = 'QUEUED' WHERE id = %L$$, :'c_id'));
SELECT pg_temp.err(format($$UPDATE workflow.job_queue SET status = 'FAILED' WHERE id = %L$$, :'c_id'));
-- but a finished step's job may go, and plain jobs may be deleted freely
DELETE FROM workflow.job_queue WHERE id = :'c_id';
SELECT workflow.enqueue('plain') AS plain \gset
DELETE FROM workflow.job_queue WHERE id = :'plain';
SELECT step_key, status FROM workflow.workflow_steps WHERE workflow_run_id = :'run' ORDER BY 1;

-- every function but enqueue needs READ COMMITTED
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.err($$SELECT * FROM workflow.claim('w')$$);
SELECT pg_temp.err($$SELECT workflow.heartbeat(gen_random_uuid(), gen_random_uuid())$$);
SELECT pg_temp.err($$SELECT workflow.complete_job(gen_random_uuid(), gen_random_uuid())$$);
SELECT pg_temp.err($$SELECT workflow.fail_job(gen_random_uuid(), gen_random_uuid(), 'e', 'm')$$);
SELECT pg_temp.err($$SELECT workflow.release_job(gen_random_uuid(), gen_random_uuid())$$);
SELECT pg_temp.err($$SELECT workflow.cancel_job(gen_random_uuid())$$);
SELECT pg_temp.err($$SELECT workflow.reap_expired()$$);
SELECT pg_temp.err($$SELECT workflow.complete_jobs(ARRAY[]::uuid[], ARRAY[]::uuid[])$$);
SELECT pg_temp.err($$SELECT workflow.fail_jobs(ARRAY[]::uuid[], ARRAY[]::uuid[], ARRAY[]::text[], ARRAY[]::text[])$$);
SELECT pg_temp.err($$SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}]}')$$);
SELECT pg_temp.err($$SELECT workflow.complete_external_step(gen_random_uuid(), 'a', 'SUCCEEDED')$$);
SELECT pg_temp.err($$SELECT workflow.cancel_run(gen_random_uuid())$$);
SELECT pg_temp.err($$SELECT workflow.enqueue('rr')$$);
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT pg_temp.err($$SELECT * FROM workflow.claim('w')$$);
ROLLBACK;

-- look-alike objects on the search_path are not used
CREATE TABLE public.job_queue (id uuid);
CREATE FUNCTION public.statement_timestamp() RETURNS timestamptz
    LANGUAGE sql AS $$ SELECT '2000-01-01'::timestamptz $$;
CREATE FUNCTION public.uuid_eq_always(uuid, uuid) RETURNS boolean
    LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR public.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = public.uuid_eq_always);
SET search_path = public, pg_temp, pg_catalog;
SELECT workflow.enqueue('sp') AS sp \gset
SELECT id AS sp_id, lease_token AS sp_token, leased_until > now() AS lease_in_future
  FROM workflow.claim('w', ARRAY['sp']) \gset
SELECT :'lease_in_future' AS lease_in_future;
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, gen_random_uuid())', :'sp_id'));
SELECT workflow.complete_job(:'sp_id', :'sp_token');
SELECT count(*) AS planted_table_untouched FROM public.job_queue;
RESET search_path;
SELECT status FROM workflow.job_queue WHERE id = :'sp';
DROP OPERATOR public.= (uuid, uuid);
DROP FUNCTION public.uuid_eq_always(uuid, uuid);
DROP FUNCTION public.statement_timestamp();
DROP TABLE public.job_queue;

-- the deleted job of a finished step shows up in verify()
SELECT step_key, problem, expected, actual FROM workflow.verify();
