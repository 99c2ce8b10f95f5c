-- bench/bare_enqueue_bulk.sql: fills the bare SQL queue, :batch jobs per
-- statement.  Variables: jt, batch.
INSERT INTO bench.bare_jobs (job_type, payload) SELECT ':jt', '{"n": 1}' FROM generate_series(1, :batch);
