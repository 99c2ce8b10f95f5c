-- bench/enqueue_one.sql: one enqueue per transaction.
-- Variables: jt.
SELECT workflow.enqueue(':jt', '{"n": 1}');
