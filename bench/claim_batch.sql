-- bench/claim_batch.sql: claim up to :batch jobs in one call, then finish
-- them all with one complete_jobs call; two transactions per script.
-- Variables: jt, batch, idle_us.
SELECT count(*) AS got, array_agg(id)::text AS job_ids, array_agg(lease_token)::text AS job_tokens FROM workflow.claim('bench-:client_id', ARRAY[':jt'], :batch) \gset
\if :got
SELECT count(*) AS done FROM workflow.complete_jobs(':job_ids', ':job_tokens') \gset
\else
\sleep :idle_us us
\endif
