-- bench/enqueue_claim_complete.sql: the whole life of a plain job, each call
-- its own transaction (autocommit): enqueue one job, claim one, complete it.
-- The workers feed their own queue, so it never runs dry.  A claim that
-- finds nothing (another worker took the job) skips the complete and sleeps
-- :idle_us microseconds.  Variables: jt (job type), idle_us.
SELECT workflow.enqueue(':jt', '{"n": 1}');
SELECT count(*) AS got, max(id::text) AS job_id, max(lease_token::text) AS job_token FROM workflow.claim('bench-:client_id', ARRAY[':jt']) \gset
\if :got
SELECT workflow.complete_job(':job_id', ':job_token');
\else
\sleep :idle_us us
\endif
