-- bench/peers_gw_add_job.sql: the warm-up producer of the peers group, one
-- graphile-worker job per transaction (graphile_worker.add_job).
SELECT (graphile_worker.add_job('noop')).id;
