-- bench/claim_complete_any.sql: claim_complete.sql without a job_type
-- filter (job_types NULL walks the claim index over all types).
-- Variables: idle_us.
SELECT count(*) AS got, max(id::text) AS job_id, max(lease_token::text) AS job_token FROM workflow.claim('bench-:client_id') \gset
\if :got
SELECT workflow.complete_job(':job_id', ':job_token');
\else
\sleep :idle_us us
\endif
