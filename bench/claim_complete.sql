-- bench/claim_complete.sql: one worker step, claim + complete, each call its
-- own transaction (autocommit).  A claim that finds nothing skips the
-- complete and sleeps :idle_us microseconds, as a polling worker would.
-- Variables: jt (job type), idle_us.
SELECT count(*) AS got, max(id::text) AS job_id, max(lease_token::text) AS job_token FROM workflow.claim('bench-:client_id', ARRAY[':jt']) \gset
\if :got
SELECT workflow.complete_job(':job_id', ':job_token');
\else
\sleep :idle_us us
\endif
