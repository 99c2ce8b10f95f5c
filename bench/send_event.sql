-- bench/send_event.sql: one send_event per transaction (autocommit) to a
-- run of event steps e0 .. e(N-1), each waiting for the event of its own
-- name.  Client c sends e(c), e(c + nclients), e(c + 2 * nclients), ..., so
-- that every event finds its step waiting and no two clients send the same
-- name; pgbench -t N / nclients sends each event once.  A retried call
-- (40001) repeats the same event, as the variables are rolled back with it.
-- Variables: run, nclients, i (start at 0).
\set n :client_id + :nclients * :i
\set i :i + 1
SELECT (workflow.send_event(':run', 'e:n', '{"n": :n}')).consumed_by_step_key;
