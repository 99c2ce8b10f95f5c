-- bench/bare_claim_batch.sql: claim_batch.sql on the bare SQL queue: claim
-- up to :batch jobs in one statement, then complete them all in one
-- statement; two transactions per script.  Variables: jt, batch, idle_us.
WITH c AS (SELECT id FROM bench.bare_jobs WHERE status = 'QUEUED' AND job_type = ':jt' AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT :batch FOR NO KEY UPDATE SKIP LOCKED), u AS (UPDATE bench.bare_jobs j SET status = 'RUNNING', attempt = j.attempt + 1, worker_id = 'bench-:client_id', lease_token = gen_random_uuid(), leased_until = now() + make_interval(secs => j.timeout_seconds), updated_at = now() FROM c WHERE j.id = c.id RETURNING j.id, j.lease_token) SELECT count(*) AS got, array_agg(id)::text AS job_ids, array_agg(lease_token)::text AS job_tokens FROM u \gset
\if :got
UPDATE bench.bare_jobs j SET status = 'SUCCEEDED', output = NULL, finished_at = now(), updated_at = now() FROM unnest(':job_ids'::uuid[], ':job_tokens'::uuid[]) AS x(id, token) WHERE j.id = x.id AND j.lease_token = x.token AND j.status = 'RUNNING';
\else
\sleep :idle_us us
\endif
