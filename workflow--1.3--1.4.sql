-- workflow 1.3 -> 1.4: event history, operator views, DAG pictures
\echo Use "ALTER EXTENSION workflow UPDATE TO '1.4'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- History: workflow_events, run_history

-- One row per state change, written by the engine in the transaction of the
-- change (docs/reference.md, "History").  Append-only: the engine deletes a
-- run's events with the run (purge); any other UPDATE, DELETE or TRUNCATE
-- raises workflow.internal_state.
CREATE SEQUENCE workflow.workflow_events_id_seq AS bigint;

CREATE TABLE workflow.workflow_events (
    id               bigint NOT NULL
        DEFAULT pg_catalog.nextval('workflow.workflow_events_id_seq'::pg_catalog.regclass),
    workflow_run_id  uuid NOT NULL,
    step_key         text,
    event_type       text NOT NULL,
    detail           jsonb NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    PRIMARY KEY (id)
);
ALTER SEQUENCE workflow.workflow_events_id_seq OWNED BY workflow.workflow_events.id;
CREATE INDEX workflow_events_run_idx
    ON workflow.workflow_events (workflow_run_id, id);

SELECT pg_catalog.pg_extension_config_dump('workflow.workflow_events', '');
SELECT pg_catalog.pg_extension_config_dump('workflow.workflow_events_id_seq', '');

-- true once a change of the step (or run) was made while workflow.history
-- did not record it: verify() checks the history only where this is false.
-- Steps and runs from before this version have no history: they start
-- true (without rewriting the tables), new ones false.
ALTER TABLE workflow.workflow_steps
    ADD COLUMN history_gap boolean NOT NULL DEFAULT true;
ALTER TABLE workflow.workflow_steps ALTER COLUMN history_gap SET DEFAULT false;
ALTER TABLE workflow.workflow_runs
    ADD COLUMN history_gap boolean NOT NULL DEFAULT true;
ALTER TABLE workflow.workflow_runs ALTER COLUMN history_gap SET DEFAULT false;

CREATE FUNCTION workflow._workflow_events_guard() RETURNS trigger
AS 'MODULE_PATHNAME', 'workflow_workflow_events_guard'
LANGUAGE C;

CREATE TRIGGER workflow_events_guard
    BEFORE UPDATE OR DELETE OR TRUNCATE ON workflow.workflow_events
    FOR EACH STATEMENT
    EXECUTE FUNCTION workflow._workflow_events_guard();

ALTER TABLE workflow.workflow_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow.workflow_events FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON workflow.workflow_events
    USING ((SELECT workflow.my_organizations()) IS NULL
           OR workflow_run_id IN (SELECT r.id FROM workflow.workflow_runs r));

CREATE FUNCTION workflow.run_history(workflow_run_id uuid,
                                     organization_id uuid DEFAULT NULL)
RETURNS SETOF workflow.workflow_events
AS 'MODULE_PATHNAME', 'workflow_run_history'
LANGUAGE C STABLE ROWS 100;

-- verify(), now with the history: for a finished run, and each of its
-- steps, whose every change was recorded (history_gap false), the events
-- agree with the final statuses and the attempts.  One row per broken
-- invariant, nothing on a healthy database; read-only, a check to run on
-- demand.
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
           (count(*) FILTER (WHERE s.status IN ('ENQUEUED', 'RUNNING')))::int AS n_active,
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
                   (count(s.id) FILTER (WHERE s.status IN ('ENQUEUED', 'RUNNING')))::int AS n_active,
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
           j.attempt,
           (SELECT count(*) FROM workflow.workflow_events e
             WHERE e.workflow_run_id = s.workflow_run_id AND e.step_key = s.step_key
               AND e.event_type IN ('step_succeeded', 'step_failed', 'step_canceled',
                                    'external_completed'))::int AS n_terminal,
           (SELECT string_agg(CASE e.event_type
                                  WHEN 'step_succeeded' THEN 'SUCCEEDED'
                                  WHEN 'step_failed' THEN 'FAILED'
                                  WHEN 'step_canceled' THEN 'CANCELED'
                                  ELSE e.detail ->> 'status' END, ',' ORDER BY e.id)
              FROM workflow.workflow_events e
             WHERE e.workflow_run_id = s.workflow_run_id AND e.step_key = s.step_key
               AND e.event_type IN ('step_succeeded', 'step_failed', 'step_canceled',
                                    'external_completed')) AS terminal_statuses,
           -- the attempts that started (release_job gives an attempt
           -- back, so its next start repeats the number; a direct UPDATE
           -- to RUNNING starts none)
           (SELECT count(DISTINCT (e.detail ->> 'attempt')::int)
                       FILTER (WHERE (e.detail ->> 'attempt')::int > 0)
              FROM workflow.workflow_events e
             WHERE e.workflow_run_id = s.workflow_run_id AND e.step_key = s.step_key
               AND e.event_type = 'step_started')::int AS n_attempts,
           (SELECT max((e.detail ->> 'attempt')::int)
              FROM workflow.workflow_events e
             WHERE e.workflow_run_id = s.workflow_run_id AND e.step_key = s.step_key
               AND e.event_type = 'step_started') AS last_attempt
      FROM steps s
      LEFT JOIN workflow.job_queue j ON j.id = s.job_id
     WHERE s.run_status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
       AND NOT s.history_gap
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
   AND (s.execution_kind = 'EXTERNAL' OR s.released_at IS NULL)
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
-- per step, of its final status, and a step_started for each attempt,
-- numbered 1 to the job's attempt
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
SELECT h.id, NULL, 'run_started events of a finished run', '1', h.n_started::text
  FROM run_history h
 WHERE h.n_started <> 1
UNION ALL
SELECT h.id, NULL, 'terminal events of a finished run', h.status::text,
       coalesce(h.terminal_statuses, 'none')
  FROM run_history h
 WHERE h.terminal_statuses IS DISTINCT FROM h.status::text
$verify$;

REVOKE ALL ON TABLE workflow.workflow_events FROM PUBLIC;
REVOKE ALL ON SEQUENCE workflow.workflow_events_id_seq FROM PUBLIC;
GRANT SELECT ON TABLE workflow.workflow_events TO workflow_reader;
REVOKE ALL ON FUNCTION workflow._workflow_events_guard() FROM PUBLIC;
REVOKE ALL ON FUNCTION workflow.run_history(uuid, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workflow.run_history(uuid, uuid)
    TO workflow_client, workflow_reader;

-- ---------------------------------------------------------------------------
-- Operator views: run_overview, queue_stats, step_timeline

-- ---------------------------------------------------------------------------
-- Pictures: run_graph
