-- workflow 1.5 -> 1.6: durable timers, wait-for-event, the run state machine
\echo Use "ALTER EXTENSION workflow UPDATE TO '1.6'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- New step kinds and status
--
-- A label added here cannot be used in this script (PostgreSQL 15): the
-- indexes and verify() below compare text, never the new labels.

ALTER TYPE workflow.execution_kind ADD VALUE 'SLEEP';
ALTER TYPE workflow.execution_kind ADD VALUE 'EVENT';
ALTER TYPE workflow.step_status ADD VALUE 'SLEEPING' AFTER 'RUNNING';

-- What a sleep, event or delayed job step was defined with, and its wake
-- time: when a SLEEPING step wakes, or when a waiting event step times
-- out.  Only sleep and event steps ever change wake_at, so the updates of
-- job steps stay HOT.
ALTER TABLE workflow.workflow_steps
    ADD COLUMN event_name text,
    ADD COLUMN sleep_seconds integer,
    ADD COLUMN sleep_until timestamptz,
    ADD COLUMN wait_timeout_seconds integer,
    ADD COLUMN start_after_seconds integer,
    ADD COLUMN wake_at timestamptz;

-- fire_timers: the due timers, oldest first, over all runs.
CREATE INDEX workflow_steps_wake_idx ON workflow.workflow_steps (wake_at, id)
    WHERE wake_at IS NOT NULL;
-- send_event: the event steps of one name in one run.
CREATE INDEX workflow_steps_event_idx ON workflow.workflow_steps
    (workflow_run_id, event_name) WHERE event_name IS NOT NULL;

-- ---------------------------------------------------------------------------
-- The event inbox

-- Every event sent to a run, consumed or not.  An event is consumed by at
-- most one event step (consumed_at, consumed_by_step_key); one that no step
-- took stays here, visibly, until its run is purged.
CREATE TABLE workflow.event_inbox (
    id                    uuid PRIMARY KEY,
    workflow_run_id       uuid NOT NULL,
    organization_id       uuid,
    event_name            text NOT NULL,
    payload               jsonb,
    dedupe_key            text,
    created_at            timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    consumed_at           timestamptz,
    consumed_by_step_key  text,
    CONSTRAINT event_inbox_dedupe_key UNIQUE (workflow_run_id, dedupe_key)
);
-- The oldest unconsumed event of a name, for the release of an event step.
CREATE INDEX event_inbox_unconsumed_idx ON workflow.event_inbox
    (workflow_run_id, event_name, id) WHERE consumed_at IS NULL;

SELECT pg_catalog.pg_extension_config_dump('workflow.event_inbox', '');

ALTER TABLE workflow.event_inbox ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow.event_inbox FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON workflow.event_inbox
    USING ((SELECT workflow.my_organizations()) IS NULL
           OR organization_id OPERATOR(pg_catalog.=) ANY ((SELECT workflow.my_organizations())::pg_catalog.uuid[]));

REVOKE ALL ON TABLE workflow.event_inbox FROM PUBLIC;
GRANT SELECT ON TABLE workflow.event_inbox TO workflow_reader;

COMMENT ON TABLE workflow.event_inbox IS
'Events sent to runs by send_event: consumed by at most one waiting event '
'step each (consumed_at, consumed_by_step_key), or kept unconsumed.';

-- A sleeping step counts as active, like an enqueued or running one.
COMMENT ON VIEW workflow.run_overview IS
'One row per run: status, steps by status (active = ENQUEUED, RUNNING or '
'SLEEPING), progress (finished steps / steps, truncated to 4 places), '
'creation and finish time, and duration (so far, while the run is live).';

-- ---------------------------------------------------------------------------
-- send_event, fire_timers, the run state machine

CREATE FUNCTION workflow.send_event(
    workflow_run_id uuid,
    event_name text,
    payload jsonb DEFAULT NULL,
    dedupe_key text DEFAULT NULL,
    organization_id uuid DEFAULT NULL)
RETURNS workflow.event_inbox
AS 'MODULE_PATHNAME', 'workflow_send_event'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.send_event(uuid, text, jsonb, text, uuid) IS
'Stores an event for a run and, if an event step of that name waits, '
'completes the first one by (released_at, id) with the payload as its '
'output. Returns the inbox row as it stands at the end of the call.';

CREATE FUNCTION workflow.fire_timers(batch_size integer DEFAULT 1000)
RETURNS integer
AS 'MODULE_PATHNAME', 'workflow_fire_timers'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.fire_timers(integer) IS
'Wakes up to batch_size due sleep steps and times out due event waits, '
'skipping runs whose release lock is busy; returns how many it fired.';

-- The run state machine as the code applies it: one row per allowed move.
CREATE FUNCTION workflow._run_moves()
RETURNS TABLE (from_status text, to_status text, call text)
AS 'MODULE_PATHNAME', 'workflow_run_moves'
LANGUAGE C IMMUTABLE;

REVOKE ALL ON FUNCTION workflow.send_event(uuid, text, jsonb, text, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION workflow.fire_timers(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION workflow._run_moves() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workflow.send_event(uuid, text, jsonb, text, uuid)
    TO workflow_client;
GRANT EXECUTE ON FUNCTION workflow.fire_timers(integer) TO workflow_worker;

-- ---------------------------------------------------------------------------
-- verify(), now with timers and events: a sleeping step has a wake time, no
-- event step waits while an event of its name lies unconsumed, an event is
-- consumed once by one step; sleep and event steps count like the steps
-- whose counters they share (SLEEPING is active), have no job, and their
-- history events (step_woken, event_consumed, step_event_timeout) are
-- their terminal events.  The new labels are compared as text: this
-- script cannot use a label it adds.
CREATE OR REPLACE FUNCTION workflow.verify(workflow_run_id uuid DEFAULT NULL)
RETURNS TABLE (workflow_run_id uuid, step_key text, problem text,
               expected text, actual text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $verify$
WITH
-- each step with its dependency counters recomputed from the edges and the
-- prerequisites' statuses (grouped by the step's primary key, so every
-- check below reads one row per step and no two derived sets are joined)
steps AS (
    SELECT s.*, r.status AS run_status,
           (s.status = 'CANCELED' AND s.status_reason = 'workflow.run_canceled')
               AS run_canceled,
           count(e.prerequisite_step_id)::int AS deps_total,
           (count(e.prerequisite_step_id) FILTER (
               WHERE p.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')))::int AS deps_pending,
           (count(e.prerequisite_step_id) FILTER (
               WHERE e.release_mode = 'ON_SUCCESS'
                 AND p.status IN ('FAILED', 'CANCELED')))::int AS deps_unsatisfied
      FROM workflow.workflow_steps s
      JOIN workflow.workflow_runs r ON r.id = s.workflow_run_id
      LEFT JOIN workflow.workflow_step_dependencies e
             ON e.workflow_run_id = s.workflow_run_id AND e.dependent_step_id = s.id
      LEFT JOIN workflow.workflow_steps p ON p.id = e.prerequisite_step_id
     WHERE $1 IS NULL OR s.workflow_run_id = $1
     GROUP BY s.id, r.status
),
-- each counter shard's step counts, from the steps, beside the shard row
shard_steps AS (
    SELECT s.workflow_run_id, s.counter_shard AS shard,
           (count(*) FILTER (WHERE s.status::text IN ('ENQUEUED', 'RUNNING', 'SLEEPING')))::int AS n_active,
           (count(*) FILTER (WHERE s.status = 'WAITING_FOR_EXTERNAL'))::int AS n_waiting,
           (count(*) FILTER (WHERE s.status = 'BLOCKED'))::int AS n_blocked,
           (count(*) FILTER (WHERE s.status = 'SUCCEEDED'))::int AS n_succeeded,
           (count(*) FILTER (WHERE s.status = 'FAILED'))::int AS n_failed,
           (count(*) FILTER (WHERE s.status = 'CANCELED'))::int AS n_canceled
      FROM workflow.workflow_steps s
     WHERE s.counter_shard <> 0 AND ($1 IS NULL OR s.workflow_run_id = $1)
     GROUP BY s.workflow_run_id, s.counter_shard
),
shards AS (
    SELECT coalesce(c.workflow_run_id, x.workflow_run_id) AS workflow_run_id,
           coalesce(c.shard, x.shard) AS shard,
           c.workflow_run_id IS NOT NULL AS has_row,
           coalesce(x.n_active, 0) AS n_active, coalesce(x.n_waiting, 0) AS n_waiting,
           coalesce(x.n_blocked, 0) AS n_blocked, coalesce(x.n_succeeded, 0) AS n_succeeded,
           coalesce(x.n_failed, 0) AS n_failed, coalesce(x.n_canceled, 0) AS n_canceled,
           c.steps_active, c.steps_waiting, c.steps_blocked,
           c.steps_succeeded, c.steps_failed, c.steps_canceled
      FROM (SELECT * FROM workflow.workflow_run_counters c
             WHERE $1 IS NULL OR c.workflow_run_id = $1) c
      FULL JOIN shard_steps x
             ON x.workflow_run_id = c.workflow_run_id AND x.shard = c.shard
),
-- each run with its step counts and the status they imply
runs AS (
    SELECT c.*,
           CASE WHEN c.n_active > 0 THEN 'RUNNING'
                WHEN c.n_waiting > 0 THEN 'WAITING_FOR_EXTERNAL'
                WHEN c.n_blocked > 0 THEN 'RUNNING'
                WHEN c.n_failed > 0 OR c.n_canceled > 0 THEN 'COMPLETED_WITH_ERRORS'
                ELSE 'SUCCEEDED' END AS derived_status,
           (SELECT s.output FROM workflow.workflow_steps s
             WHERE c.status = 'SUCCEEDED' AND s.workflow_run_id = c.id
               AND s.step_key = c.result_step_key) AS derived_result
      FROM (SELECT r.*,
                   count(s.id)::int AS n_total,
                   (count(s.id) FILTER (WHERE s.status::text IN ('ENQUEUED', 'RUNNING', 'SLEEPING')))::int AS n_active,
                   (count(s.id) FILTER (WHERE s.status = 'WAITING_FOR_EXTERNAL'))::int AS n_waiting,
                   (count(s.id) FILTER (WHERE s.status = 'BLOCKED'))::int AS n_blocked,
                   (count(s.id) FILTER (WHERE s.status = 'SUCCEEDED'))::int AS n_succeeded,
                   (count(s.id) FILTER (WHERE s.status = 'FAILED'))::int AS n_failed,
                   (count(s.id) FILTER (WHERE s.status = 'CANCELED'))::int AS n_canceled,
                   (count(s.id) FILTER (WHERE s.counter_shard <> 0
                       AND s.counter_shard NOT BETWEEN 1 AND r.counter_shards))::int AS n_bad_shard
              FROM workflow.workflow_runs r
              LEFT JOIN workflow.workflow_steps s ON s.workflow_run_id = r.id
             WHERE $1 IS NULL OR r.id = $1
             GROUP BY r.id) c
),
-- each step's job with the step it names (if any)
jobs AS (
    SELECT j.id, j.status, j.workflow_run_id, j.workflow_step_id,
           s.id AS step_id, s.step_key, s.job_id AS step_job_id,
           s.workflow_run_id AS step_run_id, s.status AS step_status,
           (s.status = 'CANCELED' AND s.status_reason = 'workflow.run_canceled')
               AS run_canceled,
           r.status AS run_status
      FROM workflow.job_queue j
      LEFT JOIN workflow.workflow_steps s ON s.id = j.workflow_step_id
      LEFT JOIN workflow.workflow_runs r ON r.id = j.workflow_run_id
     WHERE j.workflow_step_id IS NOT NULL
       AND ($1 IS NULL OR j.workflow_run_id = $1)
),
-- each step's recorded events, counted by kind, beside the step, for the
-- steps of finished runs whose every change was recorded (history_gap)
step_history AS (
    SELECT s.workflow_run_id, s.step_key, s.status, s.completed_externally,
           j.attempt, s.released_at IS NOT NULL AS released,
           (SELECT count(*) FROM workflow.workflow_events e
             WHERE e.workflow_run_id = s.workflow_run_id AND e.step_key = s.step_key
               AND e.event_type = 'step_released')::int AS n_released,
           (SELECT string_agg(CASE e.event_type
                                  WHEN 'step_succeeded' THEN 'SUCCEEDED'
                                  WHEN 'step_failed' THEN 'FAILED'
                                  WHEN 'step_canceled' THEN 'CANCELED'
                                  WHEN 'step_woken' THEN 'SUCCEEDED'
                                  WHEN 'event_consumed' THEN 'SUCCEEDED'
                                  WHEN 'step_event_timeout' THEN 'FAILED'
                                  ELSE e.detail ->> 'status' END, ',' ORDER BY e.id)
              FROM workflow.workflow_events e
             WHERE e.workflow_run_id = s.workflow_run_id AND e.step_key = s.step_key
               AND e.event_type IN ('step_succeeded', 'step_failed', 'step_canceled',
                                    'external_completed', 'step_woken',
                                    'event_consumed', 'step_event_timeout'))
               AS terminal_statuses,
           used.n_attempts, used.last_attempt
      FROM steps s
      LEFT JOIN workflow.job_queue j ON j.id = s.job_id
      -- the attempts used: numbers started more often than given back
      -- (release_job returns an attempt, and the next start repeats its
      -- number; a direct UPDATE to RUNNING starts attempt 0, which uses
      -- none)
      CROSS JOIN LATERAL (
          SELECT count(*)::int AS n_attempts, max(a.attempt) AS last_attempt
            FROM (SELECT (e.detail ->> 'attempt')::int AS attempt
                    FROM workflow.workflow_events e
                   WHERE e.workflow_run_id = s.workflow_run_id
                     AND e.step_key = s.step_key
                     AND e.event_type IN ('step_started', 'step_returned')
                   GROUP BY 1
                  HAVING count(*) FILTER (WHERE e.event_type = 'step_started')
                         > count(*) FILTER (WHERE e.event_type = 'step_returned')
                     AND (e.detail ->> 'attempt')::int > 0) a) used
     WHERE s.run_status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
       AND NOT s.history_gap
),
-- the run events of those runs, each with the status the one before it
-- left the run in
run_moves AS (
    SELECT e.workflow_run_id, e.id, e.event_type,
           CASE e.event_type WHEN 'run_started' THEN NULL
                ELSE e.detail ->> 'from' END AS from_status,
           lag(CASE e.event_type WHEN 'run_started' THEN e.detail ->> 'status'
                    WHEN 'run_canceled' THEN 'CANCELED'
                    ELSE e.detail ->> 'to' END)
               OVER (PARTITION BY e.workflow_run_id ORDER BY e.id) AS previous_status
      FROM workflow.workflow_events e
      JOIN workflow.workflow_runs r ON r.id = e.workflow_run_id
     WHERE ($1 IS NULL OR e.workflow_run_id = $1) AND e.step_key IS NULL
       AND e.event_type IN ('run_started', 'run_status_changed', 'run_canceled')
       AND NOT r.history_gap
       AND r.status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
),
-- each finished run whose every change was recorded, with its run events
run_history AS (
    SELECT r.id, r.status,
           (SELECT count(*) FROM workflow.workflow_events e
             WHERE e.workflow_run_id = r.id AND e.step_key IS NULL
               AND e.event_type = 'run_started')::int AS n_started,
           (SELECT string_agg(CASE e.event_type WHEN 'run_canceled' THEN 'CANCELED'
                                  ELSE e.detail ->> 'to' END, ',' ORDER BY e.id)
              FROM workflow.workflow_events e
             WHERE e.workflow_run_id = r.id AND e.step_key IS NULL
               AND (e.event_type = 'run_canceled'
                    OR (e.event_type = 'run_status_changed'
                        AND e.detail ->> 'to' IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS'))))
               AS terminal_statuses
      FROM workflow.workflow_runs r
     WHERE ($1 IS NULL OR r.id = $1) AND NOT r.history_gap
       AND r.status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
)
-- step dependency counters
SELECT s.workflow_run_id, s.step_key, 'dependency_count_total', s.deps_total::text,
       s.dependency_count_total::text
  FROM steps s
 WHERE s.dependency_count_total <> s.deps_total
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'dependency_count_pending',
       CASE WHEN s.status = 'BLOCKED' THEN s.deps_pending ELSE 0 END::text,
       s.dependency_count_pending::text
  FROM steps s
 WHERE NOT s.run_canceled
   AND s.dependency_count_pending <> CASE WHEN s.status = 'BLOCKED' THEN s.deps_pending ELSE 0 END
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'dependency_count_unsatisfied', s.deps_unsatisfied::text,
       s.dependency_count_unsatisfied::text
  FROM steps s
 WHERE NOT s.run_canceled AND s.dependency_count_unsatisfied <> s.deps_unsatisfied
UNION ALL
-- a step's status agrees with its prerequisites
SELECT s.workflow_run_id, s.step_key, 'blocked step with no pending prerequisite',
       'a pending prerequisite', 'none'
  FROM steps s
 WHERE s.status = 'BLOCKED' AND s.deps_pending = 0
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'step released before its prerequisites finished',
       'BLOCKED', s.status::text
  FROM steps s
 WHERE s.status <> 'BLOCKED' AND NOT s.run_canceled AND s.deps_pending > 0
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'step released although a prerequisite did not succeed',
       'CANCELED', s.status::text
  FROM steps s
 WHERE s.released_at IS NOT NULL AND s.deps_unsatisfied > 0
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'step canceled for an unsatisfied dependency that is satisfied',
       'released', s.status::text
  FROM steps s
 WHERE s.status_reason = 'workflow.dependency_unsatisfied' AND s.deps_unsatisfied = 0
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'finished prerequisites left the step unreleased',
       'released or canceled', s.status::text
  FROM steps s
 WHERE s.status = 'BLOCKED' AND s.deps_pending = 0 AND s.run_status <> 'CANCELED'
UNION ALL
-- run counters against the steps: exact, except that a live sharded run's
-- row counts the shards where a counter is not zero, and its outcome
-- counters are summed into the row when it finishes
SELECT r.id, NULL, 'run counter ' || v.name, v.expected::text, v.actual::text
  FROM (SELECT r.*,
               r.counter_shards > 0
                   AND r.status NOT IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
                   AS live_sharded,
               (SELECT count(*) FILTER (WHERE sh.n_active > 0)::int FROM shards sh
                 WHERE sh.workflow_run_id = r.id) AS shards_active,
               (SELECT count(*) FILTER (WHERE sh.n_waiting > 0)::int FROM shards sh
                 WHERE sh.workflow_run_id = r.id) AS shards_waiting,
               (SELECT count(*) FILTER (WHERE sh.n_blocked > 0)::int FROM shards sh
                 WHERE sh.workflow_run_id = r.id) AS shards_blocked
          FROM runs r) r,
       LATERAL (VALUES ('steps_total', r.n_total, r.steps_total),
                       ('steps_active', CASE WHEN r.live_sharded THEN r.shards_active
                                             ELSE r.n_active END, r.steps_active),
                       ('steps_waiting', CASE WHEN r.live_sharded THEN r.shards_waiting
                                              ELSE r.n_waiting END, r.steps_waiting),
                       ('steps_blocked', CASE WHEN r.live_sharded THEN r.shards_blocked
                                              ELSE r.n_blocked END, r.steps_blocked),
                       ('steps_succeeded', CASE WHEN r.live_sharded THEN 0
                                                ELSE r.n_succeeded END, r.steps_succeeded),
                       ('steps_failed', CASE WHEN r.live_sharded THEN 0
                                             ELSE r.n_failed END, r.steps_failed),
                       ('steps_canceled', CASE WHEN r.live_sharded THEN 0
                                               ELSE r.n_canceled END, r.steps_canceled))
               AS v(name, expected, actual)
 WHERE v.expected <> v.actual
UNION ALL
-- counter shards against their steps
SELECT r.id, NULL, 'step counter_shard outside 1..' || r.counter_shards,
       '0', r.n_bad_shard::text
  FROM runs r
 WHERE r.n_bad_shard > 0
UNION ALL
SELECT sh.workflow_run_id, NULL, 'counter shard ' || sh.shard || ' has no row',
       'a row', 'none'
  FROM shards sh
 WHERE NOT sh.has_row
UNION ALL
SELECT sh.workflow_run_id, NULL, 'counter shard ' || sh.shard || ' of a run without shards',
       'no row', 'a row'
  FROM shards sh
  JOIN workflow.workflow_runs r ON r.id = sh.workflow_run_id
 WHERE sh.has_row AND sh.shard NOT BETWEEN 1 AND r.counter_shards
UNION ALL
SELECT sh.workflow_run_id, NULL, 'counter shard ' || sh.shard || ' ' || v.name,
       v.expected::text, v.actual::text
  FROM shards sh,
       LATERAL (VALUES ('steps_active', sh.n_active, sh.steps_active),
                       ('steps_waiting', sh.n_waiting, sh.steps_waiting),
                       ('steps_blocked', sh.n_blocked, sh.steps_blocked),
                       ('steps_succeeded', sh.n_succeeded, sh.steps_succeeded),
                       ('steps_failed', sh.n_failed, sh.steps_failed),
                       ('steps_canceled', sh.n_canceled, sh.steps_canceled))
               AS v(name, expected, actual)
 WHERE sh.has_row AND v.expected <> v.actual
UNION ALL
SELECT r.id, NULL, 'counter shard row of a missing run', 'no row', 'a row'
  FROM (SELECT DISTINCT c.workflow_run_id AS id FROM workflow.workflow_run_counters c
         WHERE $1 IS NULL OR c.workflow_run_id = $1) r
 WHERE NOT EXISTS (SELECT 1 FROM workflow.workflow_runs x WHERE x.id = r.id)
UNION ALL
-- run status, result and finished_at against the steps
SELECT r.id, NULL, 'run status', r.derived_status, r.status::text
  FROM runs r
 WHERE r.status <> 'CANCELED' AND r.status::text <> r.derived_status
UNION ALL
SELECT r.id, NULL, 'canceled run with a live step', '0',
       (r.n_active + r.n_waiting + r.n_blocked)::text
  FROM runs r
 WHERE r.status = 'CANCELED' AND r.n_active + r.n_waiting + r.n_blocked > 0
UNION ALL
SELECT r.id, NULL, 'run finished_at',
       CASE WHEN r.status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
            THEN 'set' ELSE 'null' END,
       CASE WHEN r.finished_at IS NULL THEN 'null' ELSE 'set' END
  FROM runs r
 WHERE (r.status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED'))
       <> (r.finished_at IS NOT NULL)
UNION ALL
SELECT r.id, r.result_step_key, 'run result',
       coalesce(r.derived_result::text, 'null'), coalesce(r.result::text, 'null')
  FROM runs r
 WHERE r.result IS DISTINCT FROM r.derived_result
UNION ALL
-- step -> job linkage
SELECT s.workflow_run_id, s.step_key, 'released job step without its job', 'one job', 'none'
  FROM steps s
 WHERE s.execution_kind = 'JOB' AND s.released_at IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM workflow.job_queue j
                    WHERE j.id = s.job_id AND j.workflow_step_id = s.id
                      AND j.workflow_run_id = s.workflow_run_id)
UNION ALL
SELECT j.workflow_run_id, j.step_key, 'step with more than one job', '1', count(*)::text
  FROM jobs j
 GROUP BY j.workflow_run_id, j.step_key, j.workflow_step_id
HAVING count(*) > 1
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'step has a job it should not have', 'none',
       s.job_id::text
  FROM steps s
 WHERE s.job_id IS NOT NULL
   AND (s.execution_kind::text <> 'JOB' OR s.released_at IS NULL)
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'released step without released_at', 'set', 'null'
  FROM steps s
 WHERE s.released_at IS NULL AND s.status NOT IN ('BLOCKED', 'CANCELED')
UNION ALL
-- job -> step linkage and status
SELECT j.workflow_run_id, j.step_key, 'job not linked from its step',
       'step.job_id = the job', CASE WHEN j.step_id IS NULL THEN 'no such step'
                                     ELSE 'another job or none' END
  FROM jobs j
 WHERE j.step_id IS NULL OR j.step_job_id IS DISTINCT FROM j.id
    OR j.step_run_id IS DISTINCT FROM j.workflow_run_id
UNION ALL
SELECT j.workflow_run_id, j.step_key, 'job status against step status',
       CASE j.status WHEN 'QUEUED' THEN 'ENQUEUED' ELSE j.status::text END,
       j.step_status::text
  FROM jobs j
 WHERE j.step_job_id = j.id AND NOT j.run_canceled
   AND j.step_status::text <> CASE j.status WHEN 'QUEUED' THEN 'ENQUEUED' ELSE j.status::text END
UNION ALL
SELECT j.workflow_run_id, j.step_key, 'live job in a canceled step', 'CANCELED', j.status::text
  FROM jobs j
 WHERE j.run_canceled AND j.status IN ('QUEUED', 'RUNNING')
UNION ALL
SELECT j.workflow_run_id, j.step_key, 'live job in a finished run', 'no live job', j.status::text
  FROM jobs j
 WHERE j.run_status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
   AND j.status IN ('QUEUED', 'RUNNING')
UNION ALL
-- the history of a finished run agrees with its steps: one terminal event
-- per step, of its final status, a step_started for each attempt used,
-- numbered 1 to the job's attempt, and one step_released per released step;
-- the run's events follow one another
SELECT h.workflow_run_id, h.step_key, 'terminal events of a finished step',
       h.status::text, coalesce(h.terminal_statuses, 'none')
  FROM step_history h
 WHERE h.status IN ('SUCCEEDED', 'FAILED', 'CANCELED')
   AND h.terminal_statuses IS DISTINCT FROM h.status::text
UNION ALL
SELECT h.workflow_run_id, h.step_key, 'step_started events against attempts',
       coalesce(h.attempt, 0)::text, h.n_attempts::text
  FROM step_history h
 WHERE h.n_attempts <> coalesce(h.attempt, 0)
    OR h.last_attempt > coalesce(h.attempt, 0)
UNION ALL
SELECT h.workflow_run_id, h.step_key, 'step_released events',
       h.released::int::text, h.n_released::text
  FROM step_history h
 WHERE h.n_released <> h.released::int
UNION ALL
SELECT h.id, NULL, 'run_started events of a finished run', '1', h.n_started::text
  FROM run_history h
 WHERE h.n_started <> 1
UNION ALL
SELECT m.workflow_run_id, NULL, 'run event that does not follow the one before',
       coalesce(m.previous_status, 'run_started first'),
       m.event_type || coalesce(' from ' || m.from_status, '')
  FROM run_moves m
 WHERE (m.event_type = 'run_started') <> (m.previous_status IS NULL)
    OR m.from_status IS DISTINCT FROM m.previous_status
UNION ALL
SELECT h.id, NULL, 'terminal events of a finished run', h.status::text,
       coalesce(h.terminal_statuses, 'none')
  FROM run_history h
 WHERE h.terminal_statuses IS DISTINCT FROM h.status::text
UNION ALL
-- timers: a sleeping step has a wake time; only sleeping steps and event
-- steps that wait have one
SELECT s.workflow_run_id, s.step_key, 'sleeping step without a wake time', 'set', 'null'
  FROM steps s
 WHERE s.status::text = 'SLEEPING' AND s.wake_at IS NULL
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'wake time on a step that neither sleeps nor waits for an event',
       'null', s.wake_at::text
  FROM steps s
 WHERE s.wake_at IS NOT NULL
   AND NOT (s.status::text = 'SLEEPING'
            OR (s.execution_kind::text = 'EVENT' AND s.status::text = 'WAITING_FOR_EXTERNAL'))
UNION ALL
-- events: no event step waits while an event of its name lies unconsumed
-- in its run's inbox; an event is consumed once, by one step, which
-- consumed no other and succeeded
SELECT s.workflow_run_id, s.step_key, 'waiting event step with an unconsumed event of its name',
       'consumed', (SELECT count(*) FROM workflow.event_inbox i
                     WHERE i.workflow_run_id = s.workflow_run_id
                       AND i.event_name = s.event_name AND i.consumed_at IS NULL)::text
  FROM steps s
 WHERE s.execution_kind::text = 'EVENT' AND s.status::text = 'WAITING_FOR_EXTERNAL'
   AND EXISTS (SELECT 1 FROM workflow.event_inbox i
                WHERE i.workflow_run_id = s.workflow_run_id
                  AND i.event_name = s.event_name AND i.consumed_at IS NULL)
UNION ALL
SELECT i.workflow_run_id, i.consumed_by_step_key, 'step consumed more than one event',
       '1', count(*)::text
  FROM workflow.event_inbox i
 WHERE i.consumed_by_step_key IS NOT NULL AND ($1 IS NULL OR i.workflow_run_id = $1)
 GROUP BY i.workflow_run_id, i.consumed_by_step_key
HAVING count(*) > 1
UNION ALL
SELECT i.workflow_run_id, i.consumed_by_step_key, 'event consumed by a step that did not take it',
       'a SUCCEEDED event step of that name', coalesce(s.status::text, 'no such step')
  FROM workflow.event_inbox i
  LEFT JOIN workflow.workflow_steps s
         ON s.workflow_run_id = i.workflow_run_id AND s.step_key = i.consumed_by_step_key
 WHERE ($1 IS NULL OR i.workflow_run_id = $1)
   AND ((i.consumed_at IS NULL) <> (i.consumed_by_step_key IS NULL)
        OR (i.consumed_by_step_key IS NOT NULL
            AND (s.id IS NULL OR s.execution_kind::text <> 'EVENT'
                 OR s.status <> 'SUCCEEDED'
                 OR s.event_name IS DISTINCT FROM i.event_name)))
UNION ALL
SELECT e.workflow_run_id, NULL, 'event consumed more than once', '1', count(*)::text
  FROM workflow.workflow_events e
 WHERE e.event_type = 'event_consumed' AND ($1 IS NULL OR e.workflow_run_id = $1)
 GROUP BY e.workflow_run_id, e.detail ->> 'event_id'
HAVING count(*) > 1
UNION ALL
SELECT i.workflow_run_id, NULL, 'inbox event of a missing run', 'no row', 'a row'
  FROM workflow.event_inbox i
 WHERE ($1 IS NULL OR i.workflow_run_id = $1)
   AND NOT EXISTS (SELECT 1 FROM workflow.workflow_runs r WHERE r.id = i.workflow_run_id)
$verify$;
