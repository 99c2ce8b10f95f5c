-- bench/bare_claim_complete.sql: claim_complete.sql on the bare SQL queue
-- (bench.bare_jobs, see setup.sql): claim one job, then complete it, each
-- statement its own transaction.  Variables: jt, idle_us.
WITH c AS (SELECT id FROM bench.bare_jobs WHERE status = 'QUEUED' AND job_type = ':jt' AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED), u AS (UPDATE bench.bare_jobs j SET status = 'RUNNING', attempt = j.attempt + 1, worker_id = 'bench-:client_id', lease_token = gen_random_uuid(), leased_until = now() + make_interval(secs => j.timeout_seconds), updated_at = now() FROM c WHERE j.id = c.id RETURNING j.id, j.lease_token) SELECT count(*) AS got, max(id::text) AS job_id, max(lease_token::text) AS job_token FROM u \gset
\if :got
UPDATE bench.bare_jobs SET status = 'SUCCEEDED', output = NULL, finished_at = now(), updated_at = now() WHERE id = ':job_id' AND lease_token = ':job_token' AND status = 'RUNNING';
\else
\sleep :idle_us us
\endif
