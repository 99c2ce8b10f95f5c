-- A claim filtered by organization or stage reads the claim index of that
-- organization or stage, not the due jobs of the others.
\set VERBOSITY terse
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;
SELECT count(workflow.enqueue('cf', organization_id => '00000000-0000-0000-0000-00000000000a',
                              stage => 'busy'))
  FROM generate_series(1, 3000);
SELECT workflow.enqueue('cf', '{"n": 1}', organization_id => '00000000-0000-0000-0000-00000000000b') AS b \gset
SELECT workflow.enqueue('cf', '{"n": 2}', stage => 'quiet') AS q \gset
ANALYZE workflow.job_queue;

SELECT id = :'b' AS got_b FROM workflow.claim('w', ARRAY['cf'], 1, '00000000-0000-0000-0000-00000000000b');
SELECT id = :'q' AS got_q FROM workflow.claim('w', ARRAY['cf'], 1, NULL, 'quiet');
SELECT count(*) AS none_left FROM workflow.claim('w', ARRAY['cf'], 1, '00000000-0000-0000-0000-00000000000b');

-- the plans of the claim's locking scan, as claim() words it
EXPLAIN (COSTS OFF)
SELECT j.id FROM workflow.job_queue j
 WHERE j.status = 'QUEUED' AND j.run_at <= statement_timestamp()
   AND j.job_type = 'cf' AND j.organization_id = '00000000-0000-0000-0000-00000000000b'
 ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
EXPLAIN (COSTS OFF)
SELECT j.id FROM workflow.job_queue j
 WHERE j.status = 'QUEUED' AND j.run_at <= statement_timestamp()
   AND j.job_type = 'cf' AND j.stage = 'quiet'
   AND pg_catalog.hashtextextended(j.stage, 0) = pg_catalog.hashtextextended('quiet', 0)
 ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
EXPLAIN (COSTS OFF)
SELECT j.id FROM workflow.job_queue j
 WHERE j.status = 'QUEUED' AND j.run_at <= statement_timestamp()
   AND j.organization_id = '00000000-0000-0000-0000-00000000000b'
 ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;

-- the claim index over all types serves only the unfiltered claim: even
-- with the type's own index gone, a claim by type cannot use it (it would
-- filter its way through every other type's due jobs in front)
BEGIN;
DROP INDEX workflow.job_queue_claim_type_idx;
EXPLAIN (COSTS OFF)
SELECT j.id FROM workflow.job_queue j
 WHERE j.status = 'QUEUED' AND j.run_at <= statement_timestamp()
   AND j.job_type = 'cf'
 ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
ROLLBACK;
EXPLAIN (COSTS OFF)
SELECT j.id FROM workflow.job_queue j
 WHERE j.status = 'QUEUED' AND j.run_at <= statement_timestamp()
   AND j.priority >= '-2147483648'::integer
 ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
-- claims of several types take each type in claim order, once
SELECT count(workflow.enqueue('cf2', priority => 5)) FROM generate_series(1, 2);
SELECT job_type, priority FROM workflow.claim('w', ARRAY['cf', 'cf2', 'cf2'], 3);

TRUNCATE workflow.job_queue;
SELECT * FROM workflow.verify();
