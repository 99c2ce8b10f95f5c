-- bench/enqueue_bulk.sql: :batch enqueues in one statement (one transaction).
-- Variables: jt, batch.
SELECT count(workflow.enqueue(':jt', '{"n": 1}')) FROM generate_series(1, :batch);
