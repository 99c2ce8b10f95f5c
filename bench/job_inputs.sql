-- bench/job_inputs.sql: job_inputs of one held job, one call per
-- transaction.  Variables: job_id, job_token.
SELECT workflow.job_inputs(':job_id', ':job_token');
