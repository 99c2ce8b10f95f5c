-- bench/complete_and_claim.sql: one commit per job.  A worker that holds a
-- job completes it and claims the next one in the same call
-- (workflow.complete_and_claim); one that holds none claims (workflow.claim)
-- and, when that finds nothing, sleeps :idle_us microseconds.  The job held
-- is carried from one run of the script to the next in the client's
-- variables.  Variables: jt (job type), idle_us, and got = 0 to start.
\if :got
SELECT count(*) AS got, max(id::text) AS job_id, max(lease_token::text) AS job_token FROM workflow.complete_and_claim(':job_id', ':job_token', NULL, 'bench-:client_id', ARRAY[':jt']) \gset
\else
SELECT count(*) AS got, max(id::text) AS job_id, max(lease_token::text) AS job_token FROM workflow.claim('bench-:client_id', ARRAY[':jt']) \gset
\if :got
\else
\sleep :idle_us us
\endif
\endif
