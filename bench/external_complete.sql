-- bench/external_complete.sql: complete external steps in order.  Client c
-- owns runs c, c + nclients, ... of tag :tag (bench.runs); its i-th call
-- completes step e(i % steps) of its (i / steps)-th run, so every call
-- finds its step WAITING_FOR_EXTERNAL.  A retried call (40001) repeats
-- the same step, as the variables are rolled back with the transaction.
-- Variables: tag, nclients, steps, i (start at 0).
\set k :i % :steps
\set r :client_id + :nclients * (:i / :steps)
\set i :i + 1
SELECT (workflow.complete_external_step((SELECT run_id FROM bench.runs WHERE tag = ':tag' AND n = :r), 'e:k', 'SUCCEEDED', '{"ok": true}')).status;
