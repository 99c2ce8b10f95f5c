-- workflow 1.11 -> 1.12: bounded repeat loops and continuation runs
\echo Use "ALTER EXTENSION workflow UPDATE TO '1.12'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Repeat steps
--
-- A step of kind repeat settles when its one prerequisite succeeds: while
-- its predicate holds over that output, the loop's body (the steps from its
-- back_to steps to the repeat) runs again at the next generation, up to a
-- bound.  The step keeps its loop in its payload (it has no job); the body
-- steps keep their generation, whose jobs are one per (step, generation)
-- as before.  This script does not use the new label: a value added to an
-- enum cannot be used in the transaction that adds it.

ALTER TYPE workflow.execution_kind ADD VALUE 'REPEAT';

-- A missing output (SQL NULL) is checksummed as JSON null: a step's output
-- may be either, and a client comparing checksums must get one either way.
CREATE FUNCTION workflow.output_checksum(value jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(
          COALESCE(value::pg_catalog.text, 'null'), 'UTF8')), 'hex') $$;
COMMENT ON FUNCTION workflow.output_checksum(jsonb) IS
'Hex SHA-256 of a jsonb value''s text form (NULL as JSON null): the checksum of a repeat step''s last output.';
REVOKE ALL ON FUNCTION workflow.output_checksum(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workflow.output_checksum(jsonb)
    TO workflow_worker, workflow_client, workflow_reader, workflow_admin;

-- ---------------------------------------------------------------------------
-- Continuations
--
-- A run that ended COMPLETED_WITH_ERRORS only because a repeat step was
-- exhausted may be continued once, by continue_run, in one successor run:
-- the source's definition with a new bound, its finished work copied (the
-- steps it copies are marked continued and have no job), the loop's body
-- starting again from the exhausted output.  The lineage is one row per
-- successor.  The source is never changed.

ALTER TABLE workflow.workflow_steps
    ADD COLUMN continued boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN workflow.workflow_steps.continued IS
    'True for a step a continuation copied as SUCCEEDED from its source run: it has no job of its own.';

CREATE TABLE workflow.workflow_continuations (
    successor_run_id      uuid        PRIMARY KEY,
    predecessor_run_id    uuid        NOT NULL UNIQUE,
    document_scope_id     uuid        NOT NULL,
    prior_iterations      integer     NOT NULL,
    additional_iterations integer     NOT NULL,
    request               jsonb       NOT NULL,
    created_at            timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE workflow.workflow_continuations IS
    'The lineage of continuation runs: one row per successor, naming the run it continued; written only by continue_run, deleted with the successor by purge.';
SELECT pg_catalog.pg_extension_config_dump('workflow.workflow_continuations', '');

ALTER TABLE workflow.workflow_continuations ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow.workflow_continuations FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON workflow.workflow_continuations
    USING ((SELECT workflow.my_organizations()) IS NULL
           OR successor_run_id IN (SELECT r.id FROM workflow.workflow_runs r));

REVOKE ALL ON TABLE workflow.workflow_continuations FROM PUBLIC;
GRANT SELECT ON TABLE workflow.workflow_continuations TO workflow_reader;

CREATE FUNCTION workflow.continuation_source(workflow_run_id uuid,
                                             organization_id uuid DEFAULT NULL)
RETURNS TABLE (repeat_step_key text, generation integer, iterations_completed integer,
               total_iterations_completed integer, document_scope_id uuid,
               output jsonb, output_checksum text)
AS 'MODULE_PATHNAME', 'workflow_continuation_source'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION workflow.continuation_source(uuid, uuid) IS
'The exhausted loop a run could be continued from: its repeat step, generation, iterations, the chain''s first run, and the last output with its checksum; workflow.continuation_ineligible otherwise.';

CREATE FUNCTION workflow.continue_run(source_run_id uuid, additional_iterations integer,
                                      expected_output_checksum text,
                                      node_execution_cap integer DEFAULT NULL,
                                      organization_id uuid DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'workflow_continue_run'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION workflow.continue_run(uuid, integer, text, integer, uuid) IS
'Starts the one successor of a run whose loop was exhausted: the same request again returns it, another one conflicts.';

REVOKE ALL ON FUNCTION workflow.continuation_source(uuid, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION workflow.continue_run(uuid, integer, text, integer, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workflow.continuation_source(uuid, uuid)
    TO workflow_client, workflow_reader;
GRANT EXECUTE ON FUNCTION workflow.continue_run(uuid, integer, text, integer, uuid)
    TO workflow_client;

-- ---------------------------------------------------------------------------
-- verify(), now with loops: a body step is at its repeat's generation, a
-- repeat stays below its bound, and a settled repeat has its evidence; and
-- with continuations: a copied step is SUCCEEDED with no job, and lineage
-- totals add up along a chain.

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
           (s.status = 'CANCELED'
            AND s.status_reason IN ('workflow.run_canceled', 'workflow.run_retired',
                                    'workflow.run_compensating',
                                    'workflow.run_deadline_elapsed'))
               AS run_canceled,
           count(e.prerequisite_step_id)::int AS deps_total,
           (count(e.prerequisite_step_id) FILTER (
               WHERE p.status::text NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED',
                                            'COMPENSATING', 'COMPENSATED', 'COMPENSATION_FAILED')))::int AS deps_pending,
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
           (count(*) FILTER (WHERE s.status::text IN ('SUCCEEDED', 'COMPENSATING', 'COMPENSATED', 'COMPENSATION_FAILED')))::int AS n_succeeded,
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
           c.steps_succeeded, c.steps_failed, c.steps_canceled, c.executions_used
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
                WHEN c.n_parked > 0 THEN 'WAITING_FOR_ALLOWANCE'
                WHEN c.n_blocked > 0 THEN 'RUNNING'
                WHEN c.n_failed > 0 OR c.n_canceled > 0
                  -- a run its deadline ended has not succeeded
                  OR c.status_reason IS NOT DISTINCT FROM 'workflow.run_deadline_elapsed'
                  THEN 'COMPLETED_WITH_ERRORS'
                ELSE 'SUCCEEDED' END AS derived_status,
           (SELECT s.output FROM workflow.workflow_steps s
             WHERE c.status = 'SUCCEEDED' AND s.workflow_run_id = c.id
               AND s.step_key = c.result_step_key) AS derived_result
      FROM (SELECT r.*,
                   count(s.id)::int AS n_total,
                   (count(s.id) FILTER (WHERE s.status::text IN ('ENQUEUED', 'RUNNING', 'SLEEPING')))::int AS n_active,
                   (count(s.id) FILTER (WHERE s.status = 'WAITING_FOR_EXTERNAL'))::int AS n_waiting,
                   (count(s.id) FILTER (WHERE s.status = 'BLOCKED'))::int AS n_blocked,
                   (count(s.id) FILTER (WHERE s.status::text = 'PARKED'))::int AS n_parked,
                   (count(s.id) FILTER (WHERE s.status IN ('ENQUEUED', 'RUNNING')))::int
                       AS n_active_jobs,
                   (count(s.id) FILTER (WHERE s.status::text IN ('SUCCEEDED', 'COMPENSATING', 'COMPENSATED', 'COMPENSATION_FAILED')))::int AS n_succeeded,
                   (count(s.id) FILTER (WHERE s.status::text = 'COMPENSATING'))::int AS n_compensating,
                   (count(s.id) FILTER (WHERE s.status::text = 'COMPENSATION_FAILED'))::int
                       AS n_compensation_failed,
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
    SELECT j.id, j.status, j.workflow_run_id, j.workflow_step_id, j.generation,
           s.generation AS step_generation,
           s.id AS step_id, s.step_key, s.job_id AS step_job_id,
           s.workflow_run_id AS step_run_id, s.status AS step_status,
           (s.status = 'CANCELED'
            AND s.status_reason IN ('workflow.run_canceled', 'workflow.run_retired',
                                    'workflow.run_compensating',
                                    'workflow.run_deadline_elapsed'))
               AS run_canceled,
           r.status AS run_status, j.compensation
      FROM workflow.job_queue j
      LEFT JOIN workflow.workflow_steps s ON s.id = j.workflow_step_id
      LEFT JOIN workflow.workflow_runs r ON r.id = j.workflow_run_id
     WHERE j.workflow_step_id IS NOT NULL
       AND ($1 IS NULL OR j.workflow_run_id = $1)
),
-- each run's executions: the jobs of its steps, compensations aside
executions AS (
    SELECT j.workflow_run_id, (count(*) FILTER (WHERE NOT j.compensation))::int AS n
      FROM jobs j
     GROUP BY j.workflow_run_id
),
-- each step's recorded events, counted by kind, beside the step, for the
-- steps of finished runs whose every change was recorded (history_gap)
step_history AS (
    SELECT s.workflow_run_id, s.step_key, s.status, s.completed_externally,
           j.attempt,
           -- a job step parked and never let run has no job and no step_released
           s.released_at IS NOT NULL AND NOT s.continued
               AND (s.execution_kind::text <> 'JOB' OR s.job_id IS NOT NULL) AS released,
           (SELECT count(*) FROM workflow.workflow_events e
             WHERE e.workflow_run_id = s.workflow_run_id AND e.step_key = s.step_key
               AND e.id > reset.id
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
               AND e.id > reset.id
               AND e.event_type IN ('step_succeeded', 'step_failed', 'step_canceled',
                                    'external_completed', 'step_woken',
                                    'event_consumed', 'step_event_timeout'))
               AS terminal_statuses,
           used.n_attempts, used.last_attempt
      FROM steps s
      LEFT JOIN workflow.job_queue j ON j.id = s.job_id
      -- the step's last reset by retry_run: only what followed it counts
      CROSS JOIN LATERAL (
          SELECT coalesce(max(e.id), 0) AS id FROM workflow.workflow_events e
           WHERE e.workflow_run_id = s.workflow_run_id AND e.step_key = s.step_key
             AND e.event_type = 'step_reset') reset
      -- the attempts used: numbers started more often than given back
      -- (release_job returns an attempt, and the next start repeats its
      -- number; a direct UPDATE to RUNNING starts attempt 0, which uses
      -- none)
      CROSS JOIN LATERAL (
          SELECT count(*)::int AS n_attempts, max(a.attempt) AS last_attempt
            FROM (SELECT (e.detail ->> 'attempt')::int AS attempt
                    FROM workflow.workflow_events e
                   WHERE e.workflow_run_id = s.workflow_run_id
                     AND e.step_key = s.step_key AND e.id > reset.id
                     AND e.event_type IN ('step_started', 'step_returned')
                   GROUP BY 1
                  HAVING count(*) FILTER (WHERE e.event_type = 'step_started')
                         > count(*) FILTER (WHERE e.event_type = 'step_returned')
                     AND (e.detail ->> 'attempt')::int > 0) a) used
     WHERE s.run_status::text IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED', 'RETIRED_UNRESUMABLE',
                         'COMPENSATED', 'COMPENSATION_FAILED')
       AND s.status::text NOT IN ('COMPENSATING', 'COMPENSATED', 'COMPENSATION_FAILED')
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
                    WHEN 'run_retired' THEN 'RETIRED_UNRESUMABLE'
                    ELSE e.detail ->> 'to' END)
               OVER (PARTITION BY e.workflow_run_id ORDER BY e.id) AS previous_status
      FROM workflow.workflow_events e
      JOIN workflow.workflow_runs r ON r.id = e.workflow_run_id
     WHERE ($1 IS NULL OR e.workflow_run_id = $1) AND e.step_key IS NULL
       AND e.event_type IN ('run_started', 'run_status_changed', 'run_canceled',
                            'run_blocked', 'run_retired')
       AND NOT r.history_gap
       AND r.status::text IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED', 'RETIRED_UNRESUMABLE',
                         'COMPENSATED', 'COMPENSATION_FAILED')
),
-- each finished run whose every change was recorded, with its run events
run_history AS (
    SELECT r.id, r.status,
           (SELECT count(*) FROM workflow.workflow_events e
             WHERE e.workflow_run_id = r.id AND e.step_key IS NULL
               AND e.event_type = 'run_started')::int AS n_started,
           (SELECT string_agg(CASE e.event_type WHEN 'run_canceled' THEN 'CANCELED'
                                  WHEN 'run_retired' THEN 'RETIRED_UNRESUMABLE'
                                  ELSE e.detail ->> 'to' END, ',' ORDER BY e.id)
              FROM workflow.workflow_events e
             WHERE e.workflow_run_id = r.id AND e.step_key IS NULL
               -- a run retried by retry_run finished again after its last retry
               -- and a compensated run ended again after its compensation started
               AND e.id > (SELECT coalesce(max(x.id), 0) FROM workflow.workflow_events x
                            WHERE x.workflow_run_id = r.id AND x.step_key IS NULL
                              AND x.event_type IN ('run_retried', 'compensation_started'))
               AND (e.event_type IN ('run_canceled', 'run_retired')
                    OR (e.event_type = 'run_status_changed'
                        AND e.detail ->> 'to' IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS',
                                                  'COMPENSATED', 'COMPENSATION_FAILED'))))
               AS terminal_statuses
      FROM workflow.workflow_runs r
     WHERE ($1 IS NULL OR r.id = $1) AND NOT r.history_gap
       AND r.status::text IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED', 'RETIRED_UNRESUMABLE',
                         'COMPENSATED', 'COMPENSATION_FAILED')
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
 WHERE s.status = 'BLOCKED' AND s.deps_pending = 0 AND NOT s.held
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'step released before its prerequisites finished',
       'BLOCKED', s.status::text
  FROM steps s
 WHERE s.status <> 'BLOCKED' AND NOT s.run_canceled AND s.deps_pending > 0
   -- a prerequisite that retry_run reset after the step was released does
   -- not count: the step keeps what it did with the outcome it had (any
   -- reset step has a later step_reset event; a job step reset without
   -- history a later generation, and no release before the step's)
   AND EXISTS (
       SELECT 1 FROM workflow.workflow_step_dependencies e
         JOIN workflow.workflow_steps p ON p.id = e.prerequisite_step_id
        WHERE e.workflow_run_id = s.workflow_run_id AND e.dependent_step_id = s.id
          AND p.status::text NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'COMPENSATING',
                                     'COMPENSATED', 'COMPENSATION_FAILED')
          AND NOT (p.generation > 0
                   AND (p.released_at IS NULL OR p.released_at > s.released_at))
          AND NOT EXISTS (
              SELECT 1 FROM workflow.workflow_events x
               WHERE x.workflow_run_id = p.workflow_run_id AND x.step_key = p.step_key
                 AND x.event_type = 'step_reset' AND x.created_at >= s.released_at))
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
 WHERE s.status = 'BLOCKED' AND s.deps_pending = 0 AND NOT s.held
   AND s.run_status::text NOT IN ('CANCELED', 'RETIRED_UNRESUMABLE')
UNION ALL
-- run counters against the steps: exact, except that a live sharded run's
-- row counts the shards where a counter is not zero, and its outcome
-- counters are summed into the row when it finishes
SELECT r.id, NULL, 'run counter ' || v.name, v.expected::text, v.actual::text
  FROM (SELECT r.*,
               r.counter_shards > 0
                   AND r.status::text NOT IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED', 'RETIRED_UNRESUMABLE',
                         'COMPENSATED', 'COMPENSATION_FAILED')
                   AND r.status::text <> 'COMPENSATING'
                   AS live_sharded,
               (SELECT count(*) FILTER (WHERE sh.n_active > 0)::int FROM shards sh
                 WHERE sh.workflow_run_id = r.id) AS shards_active,
               (SELECT count(*) FILTER (WHERE sh.n_waiting > 0)::int FROM shards sh
                 WHERE sh.workflow_run_id = r.id) AS shards_waiting,
               (SELECT count(*) FILTER (WHERE sh.n_blocked > 0)::int FROM shards sh
                 WHERE sh.workflow_run_id = r.id) AS shards_blocked,
               (SELECT coalesce(sum(sh.executions_used), 0)::int FROM shards sh
                 WHERE sh.workflow_run_id = r.id) AS shards_executions
          FROM runs r) r
  LEFT JOIN executions x ON x.workflow_run_id = r.id,
       LATERAL (VALUES ('steps_total', r.n_total, r.steps_total),
                       ('steps_active', CASE WHEN r.live_sharded THEN r.shards_active
                                             ELSE r.n_active END, r.steps_active),
                       ('steps_waiting', CASE WHEN r.live_sharded THEN r.shards_waiting
                                              ELSE r.n_waiting END, r.steps_waiting),
                       ('steps_blocked', CASE WHEN r.live_sharded THEN r.shards_blocked
                                              ELSE r.n_blocked END, r.steps_blocked),
                       ('steps_parked', r.n_parked, r.steps_parked),
                       ('executions_used', coalesce(x.n, 0),
                        CASE WHEN r.live_sharded THEN r.shards_executions
                             ELSE r.executions_used END),
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
 WHERE r.status::text NOT IN ('CANCELED', 'RETIRED_UNRESUMABLE', 'COMPENSATING', 'COMPENSATED', 'COMPENSATION_FAILED')
   AND r.status::text NOT LIKE 'BLOCKED\_%'
   AND r.status::text <> r.derived_status
UNION ALL
SELECT r.id, NULL, 'blocked run that is finished', 'RUNNING, WAITING_FOR_EXTERNAL or WAITING_FOR_ALLOWANCE',
       r.derived_status
  FROM runs r
 WHERE r.status::text LIKE 'BLOCKED\_%'
   AND r.derived_status NOT IN ('RUNNING', 'WAITING_FOR_EXTERNAL', 'WAITING_FOR_ALLOWANCE')
UNION ALL
SELECT r.id, NULL, 'ended run with a live step', '0',
       (r.n_active + r.n_waiting + r.n_blocked + r.n_parked)::text
  FROM runs r
 WHERE r.status::text IN ('CANCELED', 'RETIRED_UNRESUMABLE')
   AND r.n_active + r.n_waiting + r.n_blocked + r.n_parked > 0
UNION ALL
SELECT r.id, NULL, 'run finished_at',
       CASE WHEN r.status::text IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED', 'RETIRED_UNRESUMABLE',
                         'COMPENSATED', 'COMPENSATION_FAILED')
            THEN 'set' ELSE 'null' END,
       CASE WHEN r.finished_at IS NULL THEN 'null' ELSE 'set' END
  FROM runs r
 WHERE (r.status::text IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED', 'RETIRED_UNRESUMABLE',
                         'COMPENSATED', 'COMPENSATION_FAILED'))
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
 WHERE s.execution_kind = 'JOB' AND s.released_at IS NOT NULL AND NOT s.continued
   -- parked, or canceled while parked: released into the wait for room
   AND NOT (s.capped AND s.job_id IS NULL AND s.status::text IN ('PARKED', 'CANCELED'))
   AND NOT EXISTS (SELECT 1 FROM workflow.job_queue j
                    WHERE j.id = s.job_id AND j.workflow_step_id = s.id
                      AND j.workflow_run_id = s.workflow_run_id)
UNION ALL
SELECT j.workflow_run_id, j.step_key, 'step with more than one job of a generation', '1',
       count(*)::text
  FROM jobs j
 GROUP BY j.workflow_run_id, j.step_key, j.workflow_step_id, j.generation
HAVING count(*) > 1
UNION ALL
SELECT j.workflow_run_id, j.step_key, 'live job of an earlier generation',
       'finished', j.status::text
  FROM jobs j
 WHERE j.step_job_id IS DISTINCT FROM j.id AND j.step_id IS NOT NULL
   AND j.generation < j.step_generation AND j.status IN ('QUEUED', 'RUNNING')
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'step has a job it should not have', 'none',
       s.job_id::text
  FROM steps s
 WHERE s.job_id IS NOT NULL
   AND (s.execution_kind::text <> 'JOB' OR s.released_at IS NULL)
   AND s.status::text NOT IN ('COMPENSATING', 'COMPENSATED', 'COMPENSATION_FAILED')
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
 WHERE j.step_id IS NULL
    OR (j.step_job_id IS DISTINCT FROM j.id AND j.generation >= j.step_generation)
    OR j.step_run_id IS DISTINCT FROM j.workflow_run_id
UNION ALL
SELECT j.workflow_run_id, j.step_key, 'job status against step status',
       j.expected_step_status, j.step_status::text
  FROM (SELECT j.*,
               CASE WHEN j.compensation THEN
                        CASE WHEN j.status IN ('QUEUED', 'RUNNING') THEN 'COMPENSATING'
                             WHEN j.status = 'SUCCEEDED' THEN 'COMPENSATED'
                             ELSE 'COMPENSATION_FAILED' END
                    -- a succeeded step with nothing to undo keeps its job
                    WHEN j.status = 'SUCCEEDED' AND j.step_status::text = 'COMPENSATED'
                        THEN 'COMPENSATED'
                    WHEN j.status = 'QUEUED' THEN 'ENQUEUED'
                    ELSE j.status::text END AS expected_step_status
          FROM jobs j) j
 WHERE j.step_job_id = j.id AND NOT j.run_canceled
   AND j.step_status::text <> j.expected_step_status
UNION ALL
SELECT j.workflow_run_id, j.step_key, 'live job in a canceled step', 'CANCELED', j.status::text
  FROM jobs j
 WHERE j.run_canceled AND j.status IN ('QUEUED', 'RUNNING')
UNION ALL
SELECT j.workflow_run_id, j.step_key, 'live job in a finished run', 'no live job', j.status::text
  FROM jobs j
 WHERE j.run_status::text IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED', 'RETIRED_UNRESUMABLE',
                         'COMPENSATED', 'COMPENSATION_FAILED')
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
       'a SUCCEEDED (or since COMPENSATED) event step of that name',
       coalesce(s.status::text, 'no such step')
  FROM workflow.event_inbox i
  LEFT JOIN workflow.workflow_steps s
         ON s.workflow_run_id = i.workflow_run_id AND s.step_key = i.consumed_by_step_key
 WHERE ($1 IS NULL OR i.workflow_run_id = $1)
   AND ((i.consumed_at IS NULL) <> (i.consumed_by_step_key IS NULL)
        OR (i.consumed_by_step_key IS NOT NULL
            AND (s.id IS NULL OR s.execution_kind::text <> 'EVENT'
                 -- a compensation marks an event step COMPENSATED
                 -- (workflow.no_compensation): it took its event all the same
                 OR s.status::text NOT IN ('SUCCEEDED', 'COMPENSATED')
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
UNION ALL
-- pins: a run is pinned by name, version and signature together, and its
-- steps are marked pinned exactly when it is
SELECT r.id, NULL, 'partial pin', 'name, version and signature, or none',
       concat_ws(',', r.workflow_name, r.workflow_version, r.workflow_signature)
  FROM runs r
 WHERE (r.workflow_name IS NULL) <> (r.workflow_version IS NULL)
    OR (r.workflow_name IS NULL) <> (r.workflow_signature IS NULL)
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'step pinned unlike its run',
       (r.workflow_name IS NOT NULL)::text, s.pinned::text
  FROM steps s
  JOIN workflow.workflow_runs r ON r.id = s.workflow_run_id
 WHERE s.pinned <> (r.workflow_name IS NOT NULL)
UNION ALL
-- held steps: ready BLOCKED steps of a blocked run, and a blocked run
-- holds at least one
SELECT s.workflow_run_id, s.step_key, 'held step outside a blocked run',
       'a BLOCKED_* run', s.run_status::text
  FROM steps s
 WHERE s.held AND s.run_status::text NOT LIKE 'BLOCKED\_%'
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'held step that is not ready',
       'BLOCKED, nothing pending or unsatisfied',
       s.status || ' ' || s.deps_pending || ' ' || s.deps_unsatisfied
  FROM steps s
 WHERE s.held AND (s.status <> 'BLOCKED' OR s.deps_pending > 0 OR s.deps_unsatisfied > 0)
UNION ALL
SELECT r.id, NULL, 'blocked run without a held step', 'a held step', 'none'
  FROM runs r
 WHERE r.status::text LIKE 'BLOCKED\_%'
   AND NOT EXISTS (SELECT 1 FROM workflow.workflow_steps s
                    WHERE s.workflow_run_id = r.id AND s.held)
UNION ALL
-- only a pinned run is ever blocked (its pin may hold again by now: the
-- version registered again waits for resume_run)
SELECT r.id, NULL, 'blocked run without a pin', 'a pinned run', r.status::text
  FROM runs r
 WHERE r.status::text LIKE 'BLOCKED\_%' AND r.workflow_name IS NULL
UNION ALL
-- sagas: one compensation at a time, and a run ends compensated only if
-- every compensation succeeded
SELECT r.id, NULL, 'compensating steps', CASE WHEN r.status::text = 'COMPENSATING'
                                              THEN '1' ELSE '0' END,
       r.n_compensating::text
  FROM runs r
 WHERE r.n_compensating <> CASE WHEN r.status::text = 'COMPENSATING' THEN 1 ELSE 0 END
UNION ALL
SELECT j.workflow_run_id, NULL, 'live compensation jobs', 'at most 1', count(*)::text
  FROM jobs j
 WHERE j.compensation AND j.status IN ('QUEUED', 'RUNNING')
 GROUP BY j.workflow_run_id
HAVING count(*) > 1
UNION ALL
SELECT r.id, NULL, 'compensated run with a failed compensation', '0',
       r.n_compensation_failed::text
  FROM runs r
 WHERE r.status::text = 'COMPENSATED' AND r.n_compensation_failed > 0
UNION ALL
SELECT r.id, NULL, 'compensations_failed', r.n_compensation_failed::text,
       r.compensations_failed::text
  FROM runs r
 WHERE r.compensations_failed <> r.n_compensation_failed
UNION ALL
SELECT r.id, NULL, 'compensation failed with nothing failed', 'a failed compensation', 'none'
  FROM runs r
 WHERE r.status::text = 'COMPENSATION_FAILED' AND r.n_compensation_failed = 0
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'step left undone by a finished compensation',
       'COMPENSATED or COMPENSATION_FAILED', s.status::text
  FROM steps s
 WHERE s.run_status::text IN ('COMPENSATED', 'COMPENSATION_FAILED') AND s.status = 'SUCCEEDED'
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'completion_seq on a step that is not to be undone',
       'a SUCCEEDED step with compensate', s.status::text
  FROM steps s
 WHERE s.completion_seq IS NOT NULL AND (s.status <> 'SUCCEEDED' OR s.compensate IS NULL)
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'succeeded step with compensate and no completion_seq',
       'a completion_seq', 'null'
  FROM steps s
 WHERE s.compensate IS NOT NULL AND s.status = 'SUCCEEDED' AND s.completion_seq IS NULL
UNION ALL
-- limits: parked steps are job steps of a run with a cap, waiting for
-- room that is not there; a capped run's steps say so; a run stays within
-- its caps
SELECT s.workflow_run_id, s.step_key, 'step capped unlike its run',
       (s.execution_kind::text = 'JOB'
        AND (r.node_execution_cap IS NOT NULL OR r.concurrency_cap IS NOT NULL))::text,
       s.capped::text
  FROM steps s
  JOIN workflow.workflow_runs r ON r.id = s.workflow_run_id
 WHERE s.capped <> (s.execution_kind::text = 'JOB'
                    AND (r.node_execution_cap IS NOT NULL OR r.concurrency_cap IS NOT NULL))
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'parked step of an uncapped run', 'a capped job step',
       s.execution_kind::text
  FROM steps s
 WHERE s.status::text = 'PARKED' AND NOT s.capped
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'parked_at unlike the step status',
       (s.status::text = 'PARKED')::text, (s.parked_at IS NOT NULL)::text
  FROM steps s
 WHERE (s.status::text = 'PARKED') <> (s.parked_at IS NOT NULL)
UNION ALL
-- the parking queue (1.11): one row per parked step, with its parked_at,
-- and none for any other step
SELECT s.workflow_run_id, s.step_key, 'parked step not in the parking queue',
       'a parked_steps row', 'none'
  FROM steps s
 WHERE s.status::text = 'PARKED'
   AND NOT EXISTS (SELECT FROM workflow.parked_steps p
                    WHERE p.workflow_run_id = s.workflow_run_id
                      AND p.parked_at = s.parked_at
                      AND p.workflow_step_id = s.id)
UNION ALL
SELECT p.workflow_run_id, s.step_key, 'parking queue row of a step not parked',
       'a PARKED step of the run, parked at ' || p.parked_at,
       coalesce(s.status::text || ', parked at ' || coalesce(s.parked_at::text, 'null'),
                'no step ' || p.workflow_step_id)
  FROM workflow.parked_steps p
  LEFT JOIN workflow.workflow_steps s ON s.id = p.workflow_step_id
 WHERE ($1 IS NULL OR p.workflow_run_id = $1)
   AND (s.id IS NULL OR s.status::text <> 'PARKED'
        OR s.workflow_run_id <> p.workflow_run_id
        OR s.parked_at IS DISTINCT FROM p.parked_at)
UNION ALL
SELECT s.workflow_run_id, s.step_key, 'parked step with a job or not ready',
       'no job, nothing pending', coalesce(s.job_id::text, '') || ' ' || s.deps_pending
  FROM steps s
 WHERE s.status::text = 'PARKED'
   AND (s.job_id IS NOT NULL OR s.deps_pending > 0 OR s.deps_unsatisfied > 0
        OR s.released_at IS NULL)
UNION ALL
-- (a sleeping step is never parked: it takes a place, but may go beyond)
SELECT r.id, NULL, 'active job steps above concurrency_cap', r.concurrency_cap::text,
       r.n_active_jobs::text
  FROM runs r
 WHERE r.n_active_jobs > r.concurrency_cap
UNION ALL
SELECT r.id, NULL, 'executions above node_execution_cap', r.node_execution_cap::text,
       r.executions_used::text
  FROM runs r
 WHERE r.executions_used > r.node_execution_cap
UNION ALL
SELECT r.id, NULL, 'parked step with room to run', 'no parked step',
       r.n_parked::text
  FROM runs r
 WHERE r.n_parked > 0
   AND r.status::text IN ('RUNNING', 'WAITING_FOR_EXTERNAL', 'WAITING_FOR_ALLOWANCE')
   AND (r.concurrency_cap IS NULL OR r.n_active < r.concurrency_cap)
   AND (r.node_execution_cap IS NULL OR r.executions_used < r.node_execution_cap)
   -- (1.11) a run whose only cap is concurrency_cap and that has an active
   -- job step is not stuck: a place freed by a completion whose hand-off
   -- rolled back goes at that run's next completion
   AND (r.n_active_jobs = 0 OR r.node_execution_cap IS NOT NULL)
UNION ALL
SELECT r.id, NULL, 'capped run with counter shards', '0', r.counter_shards::text
  FROM runs r
 WHERE r.counter_shards > 0
   AND (r.node_execution_cap IS NOT NULL OR r.concurrency_cap IS NOT NULL)
UNION ALL
-- allowance evidence: each increase starts from the cap before it, the
-- first from the definition's, the last ends at the cap in force; each
-- detail is the bounded form increase_execution_allowance writes; the
-- exhaustion of a cap is written once
SELECT c.workflow_run_id, NULL, 'allowance evidence', c.expected, c.actual
  FROM (SELECT e.workflow_run_id, e.id,
               CASE WHEN pg_catalog.octet_length(e.detail::text) > 1024
                         OR e.detail IS DISTINCT FROM pg_catalog.jsonb_build_object(
                                'version', 1,
                                'previous_cap', e.detail -> 'previous_cap',
                                'target_cap', e.detail -> 'target_cap')
                         OR pg_catalog.jsonb_typeof(e.detail -> 'previous_cap') IS DISTINCT FROM 'number'
                         OR pg_catalog.jsonb_typeof(e.detail -> 'target_cap') IS DISTINCT FROM 'number'
                    THEN 'malformed' END AS malformed,
               e.detail ->> 'previous_cap' AS previous_cap,
               e.detail ->> 'target_cap' AS target_cap,
               coalesce(lag(e.detail ->> 'target_cap') OVER w,
                        r.definition -> 'limits' ->> 'node_execution_cap') AS expected_previous,
               lead(e.id) OVER w IS NULL AS last,
               r.node_execution_cap
          FROM workflow.workflow_events e
          JOIN workflow.workflow_runs r ON r.id = e.workflow_run_id
         WHERE e.event_type = 'execution_allowance_increased' AND e.step_key IS NULL
           AND ($1 IS NULL OR e.workflow_run_id = $1)
        WINDOW w AS (PARTITION BY e.workflow_run_id ORDER BY e.id)) x,
       LATERAL (VALUES
           (x.malformed IS NOT NULL, x.workflow_run_id,
            'an increase event of at most 1024 bytes with version, previous_cap and target_cap',
            'event ' || x.id || ' malformed'),
           (x.malformed IS NULL AND x.previous_cap IS DISTINCT FROM x.expected_previous,
            x.workflow_run_id, 'previous_cap ' || coalesce(x.expected_previous, 'none'),
            'event ' || x.id || ' previous_cap ' || x.previous_cap),
           (CASE WHEN x.malformed IS NULL
                 THEN x.target_cap::numeric <= x.previous_cap::numeric ELSE false END,
            x.workflow_run_id, 'target_cap above previous_cap',
            'event ' || x.id || ' ' || x.previous_cap || ' -> ' || x.target_cap),
           (x.malformed IS NULL AND x.last
            AND x.target_cap IS DISTINCT FROM x.node_execution_cap::text,
            x.workflow_run_id, 'the last target_cap is the cap in force ' || coalesce(x.node_execution_cap::text, 'none'),
            'event ' || x.id || ' target_cap ' || x.target_cap))
           AS c(broken, workflow_run_id, expected, actual)
 WHERE c.broken
UNION ALL
SELECT r.id, NULL, 'node_execution_cap without increase evidence',
       coalesce(r.definition -> 'limits' ->> 'node_execution_cap', 'none'),
       coalesce(r.node_execution_cap::text, 'none')
  FROM runs r
 WHERE r.node_execution_cap IS DISTINCT FROM (r.definition -> 'limits' ->> 'node_execution_cap')::int
   AND NOT EXISTS (SELECT 1 FROM workflow.workflow_events e
                    WHERE e.workflow_run_id = r.id
                      AND e.event_type = 'execution_allowance_increased')
UNION ALL
SELECT e.workflow_run_id, NULL, 'execution_allowance_exhausted events of cap ' || (e.detail ->> 'cap'),
       '1', count(*)::text
  FROM workflow.workflow_events e
 WHERE e.event_type = 'execution_allowance_exhausted' AND ($1 IS NULL OR e.workflow_run_id = $1)
 GROUP BY e.workflow_run_id, e.detail ->> 'cap'
HAVING count(*) > 1
UNION ALL
-- deadlines: a run's steps and step jobs carry its deadline (compensation
-- jobs none); a run the sweep is done with has nothing left to start
SELECT s.workflow_run_id, s.step_key, 'step deadline unlike its run',
       coalesce(r.deadline_at::text, 'null'), coalesce(s.deadline_at::text, 'null')
  FROM steps s
  JOIN workflow.workflow_runs r ON r.id = s.workflow_run_id
 WHERE s.deadline_at IS DISTINCT FROM r.deadline_at
UNION ALL
SELECT j.workflow_run_id, j.step_key, 'job deadline unlike its run',
       CASE WHEN j.compensation THEN 'null' ELSE coalesce(r.deadline_at::text, 'null') END,
       coalesce(q.deadline_at::text, 'null')
  FROM jobs j
  JOIN workflow.job_queue q ON q.id = j.id
  JOIN workflow.workflow_runs r ON r.id = j.workflow_run_id
 WHERE q.deadline_at IS DISTINCT FROM CASE WHEN j.compensation THEN NULL ELSE r.deadline_at END
UNION ALL
SELECT r.id, NULL, 'run past its deadline with steps to start', '0',
       (r.n_waiting + r.n_blocked + r.n_parked)::text
  FROM runs r
 WHERE r.deadline_swept AND r.status_reason = 'workflow.run_deadline_elapsed'
   AND r.n_waiting + r.n_blocked + r.n_parked > 0
   AND r.status::text NOT LIKE 'COMPENSAT%'
UNION ALL
SELECT r.id, NULL, 'run ended by a deadline it does not have', 'a deadline_at', 'null'
  FROM runs r
 WHERE r.status_reason = 'workflow.run_deadline_elapsed' AND r.deadline_at IS NULL
UNION ALL
-- the values no constraint keeps (1.10): a run's limits and counters, and
-- each job's attempts and timeout (plain jobs too, when all runs are checked)
SELECT r.id, NULL, 'limits or counters out of range',
       'caps >= 1, retry_cap >= 0, concurrency_cap <= node_execution_cap, counters >= 0',
       pg_catalog.concat_ws(' ', 'node_execution_cap ' || r.node_execution_cap,
                            'concurrency_cap ' || r.concurrency_cap,
                            'cycle_cap ' || r.cycle_cap, 'retry_cap ' || r.retry_cap,
                            'executions_used ' || r.executions_used,
                            'steps_parked ' || r.steps_parked)
  FROM workflow.workflow_runs r
 WHERE ($1 IS NULL OR r.id = $1)
   AND (r.node_execution_cap < 1 OR r.concurrency_cap < 1 OR r.cycle_cap < 1
        OR r.retry_cap < 0 OR r.concurrency_cap > r.node_execution_cap
        OR r.executions_used < 0 OR r.steps_parked < 0)
UNION ALL
SELECT q.workflow_run_id, s.step_key, 'job attempts or timeout out of range',
       'max_attempts >= 1, attempt >= 0, timeout_seconds >= 1',
       'job ' || q.id || ': max_attempts ' || q.max_attempts || ', attempt ' || q.attempt
       || ', timeout_seconds ' || q.timeout_seconds
  FROM workflow.job_queue q
  LEFT JOIN workflow.workflow_steps s ON s.id = q.workflow_step_id
 WHERE ($1 IS NULL OR q.workflow_run_id = $1)
   AND (q.max_attempts < 1 OR q.attempt < 0 OR q.timeout_seconds < 1)
UNION ALL
-- loops: a body's steps are at their repeat's generation (until undone), a repeat never
-- passes its bound, and a settled repeat has the evidence of its settling
SELECT b.workflow_run_id, b.step_key, 'body step generation unlike its repeat''s',
       r.generation::text, b.generation::text
  FROM steps r
  JOIN workflow.workflow_steps b ON b.workflow_run_id = r.workflow_run_id
   AND b.step_key IN (SELECT jsonb_array_elements_text(r.payload -> 'body'))
 WHERE r.execution_kind::text = 'REPEAT' AND b.generation <> r.generation
   -- a compensation job takes the step's next generation
   AND b.status::text NOT IN ('COMPENSATING', 'COMPENSATED', 'COMPENSATION_FAILED')
UNION ALL
SELECT r.workflow_run_id, r.step_key, 'repeat generation past its bound',
       'below ' || least((r.payload ->> 'max_iterations')::int,
                         coalesce(w.cycle_cap, 2147483647)),
       r.generation::text
  FROM steps r
  JOIN workflow.workflow_runs w ON w.id = r.workflow_run_id
 WHERE r.execution_kind::text = 'REPEAT'
   AND r.generation >= least((r.payload ->> 'max_iterations')::int,
                             coalesce(w.cycle_cap, 2147483647))
UNION ALL
SELECT r.workflow_run_id, r.step_key, 'settled repeat without its control_node_settled event',
       'generation ' || r.generation, 'none'
  FROM steps r
 WHERE r.execution_kind::text = 'REPEAT' AND r.status IN ('SUCCEEDED', 'FAILED')
   AND NOT r.continued
   AND NOT EXISTS (
       SELECT 1 FROM workflow.workflow_events e
        WHERE e.workflow_run_id = r.workflow_run_id AND e.step_key = r.step_key
          AND e.event_type = 'control_node_settled'
          AND e.detail ->> 'decision' <> 'iterate'
          AND (e.detail ->> 'generation')::int = r.generation)
UNION ALL
-- continuations: a copied step is SUCCEEDED, without a job; a successor's
-- lineage starts where its predecessor's ended
SELECT s.workflow_run_id, s.step_key, 'continued step that is not a finished copy',
       'SUCCEEDED without a job', s.status::text || coalesce(' job ' || s.job_id, '')
  FROM steps s
 WHERE s.continued
   AND (s.status::text NOT IN ('SUCCEEDED', 'COMPENSATED') OR s.job_id IS NOT NULL)
UNION ALL
SELECT c.successor_run_id, NULL, 'continuation lineage',
       'prior_iterations ' || (coalesce(p.prior_iterations, 0) + x.iterations)
       || ', document_scope_id ' || coalesce(p.document_scope_id, c.predecessor_run_id),
       'prior_iterations ' || c.prior_iterations || ', document_scope_id ' || c.document_scope_id
  FROM workflow.workflow_continuations c
  LEFT JOIN workflow.workflow_continuations p ON p.successor_run_id = c.predecessor_run_id
  CROSS JOIN LATERAL (
      SELECT (e.detail ->> 'iterations_completed')::int AS iterations
        FROM workflow.workflow_events k
        JOIN workflow.workflow_events e
          ON e.workflow_run_id = c.predecessor_run_id
         AND e.step_key = k.detail ->> 'repeat_step_key'
         AND e.event_type = 'control_node_settled'
         AND e.detail ->> 'decision' = 'iteration_limit_reached'
       WHERE k.workflow_run_id = c.successor_run_id AND k.event_type = 'run_continued'
       ORDER BY e.id DESC LIMIT 1) x
 WHERE ($1 IS NULL OR c.successor_run_id = $1)
   AND (c.prior_iterations <> coalesce(p.prior_iterations, 0) + x.iterations
        OR c.document_scope_id <> coalesce(p.document_scope_id, c.predecessor_run_id))
$verify$;
