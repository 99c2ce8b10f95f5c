-- workflow 1.0 -> 1.1: counter shards for wide runs, purge, claim indexes
-- for organization and stage filters.
\echo Use "ALTER EXTENSION workflow UPDATE TO '1.1'" to load this file. \quit

-- Counter shards.  A run whose widest level has at least
-- workflow.counter_shard_min_width steps keeps its step counters in
-- counter_shards rows here (shards 1..counter_shards, each step counted in
-- its counter_shard), so that concurrent completions of one run do not all
-- wait for the run row; the run row is written only when a shard's
-- counter crosses zero.  Runs started before this version keep shard 0:
-- counters on the run row, as before.
ALTER TABLE workflow.workflow_runs
    ADD COLUMN counter_shards smallint NOT NULL DEFAULT 0;
ALTER TABLE workflow.workflow_steps
    ADD COLUMN counter_shard smallint NOT NULL DEFAULT 0;

-- Every update here changes only counters, so all of them are HOT.
CREATE TABLE workflow.workflow_run_counters (
    workflow_run_id         uuid NOT NULL,
    shard                   smallint NOT NULL,
    steps_active            integer NOT NULL,
    steps_waiting           integer NOT NULL,
    steps_blocked           integer NOT NULL,
    steps_succeeded         integer NOT NULL DEFAULT 0,
    steps_failed            integer NOT NULL DEFAULT 0,
    steps_canceled          integer NOT NULL DEFAULT 0,
    PRIMARY KEY (workflow_run_id, shard),
    CONSTRAINT workflow_run_counters_shard_check CHECK (shard >= 1)
) WITH (fillfactor = 50);

SELECT pg_catalog.pg_extension_config_dump('workflow.workflow_run_counters', '');

-- verify(), now with the counter shards: one row per broken invariant, nothing on a healthy database.
-- It recomputes everything from the steps, edges and jobs themselves, never
-- from the counters it checks.  Read-only; it scans whole runs, so it is a
-- check to run on demand, not on an event path.
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
$verify$;

-- run_counters(): a run's step counts by status group, whichever way the
-- run keeps them (summed over its counter shards while a sharded run is
-- live).  One snapshot, no locks: exact for that snapshot.
CREATE FUNCTION workflow.run_counters(workflow_run_id uuid)
RETURNS TABLE (steps_total integer, steps_active integer,
               steps_waiting integer, steps_blocked integer,
               steps_succeeded integer, steps_failed integer,
               steps_canceled integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $run_counters$
SELECT r.steps_total,
       CASE WHEN x.live THEN x.active ELSE r.steps_active END,
       CASE WHEN x.live THEN x.waiting ELSE r.steps_waiting END,
       CASE WHEN x.live THEN x.blocked ELSE r.steps_blocked END,
       CASE WHEN x.live THEN x.succeeded ELSE r.steps_succeeded END,
       CASE WHEN x.live THEN x.failed ELSE r.steps_failed END,
       CASE WHEN x.live THEN x.canceled ELSE r.steps_canceled END
  FROM workflow.workflow_runs r
  LEFT JOIN LATERAL (
        SELECT true AS live,
               coalesce(sum(c.steps_active), 0)::int AS active,
               coalesce(sum(c.steps_waiting), 0)::int AS waiting,
               coalesce(sum(c.steps_blocked), 0)::int AS blocked,
               coalesce(sum(c.steps_succeeded), 0)::int AS succeeded,
               coalesce(sum(c.steps_failed), 0)::int AS failed,
               coalesce(sum(c.steps_canceled), 0)::int AS canceled
          FROM workflow.workflow_run_counters c
         WHERE c.workflow_run_id = r.id) x
       ON r.counter_shards > 0
      AND r.status NOT IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
 WHERE r.id = $1
$run_counters$;

-- purge(): deletes finished runs (with their steps, edges and jobs) and
-- finished plain jobs in bounded batches, oldest first.

-- Finished plain jobs in purge order.  A plain job enters this index once,
-- when it finishes (a status change, which is never HOT on job_queue
-- anyway); live jobs and the jobs of steps never do, and heartbeats stay
-- HOT.  Building it scans job_queue under a SHARE lock, which blocks
-- writers while ALTER EXTENSION ... UPDATE runs.
CREATE INDEX job_queue_finished_plain_idx ON workflow.job_queue
    (finished_at, id)
    WHERE workflow_run_id IS NULL AND status IN ('SUCCEEDED', 'FAILED', 'CANCELED');

-- Finished runs in purge order.  finished_at is set once, when the run
-- becomes terminal, so the counter updates of live runs stay HOT.
CREATE INDEX workflow_runs_finished_idx ON workflow.workflow_runs
    (finished_at, id)
    WHERE finished_at IS NOT NULL;

CREATE FUNCTION workflow.purge(older_than interval, batch_size integer)
RETURNS bigint
AS 'MODULE_PATHNAME', 'workflow_purge'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.purge(interval, integer) IS
'Deletes up to batch_size finished runs (SUCCEEDED, COMPLETED_WITH_ERRORS or '
'CANCELED), with their steps, edges and jobs, and up to batch_size finished '
'plain jobs, that finished more than older_than before the statement started, '
'oldest first. Rows another transaction holds are skipped, never waited for. '
'Returns the number of runs plus plain jobs deleted: call it, one transaction '
'per call, until it returns 0.';

-- Claim order within one organization or one stage, by job type, so that
-- a claim filtered by organization or stage does not walk the due jobs of
-- other organizations or stages.  Both are partial on the filter column,
-- so jobs without an organization or a stage cost nothing here.  Stages
-- have no length bound, so that index keys a stage by its hash (claim
-- compares the stage itself too).
CREATE INDEX job_queue_claim_org_idx ON workflow.job_queue
    (organization_id, job_type, priority DESC, run_at, id)
    WHERE status = 'QUEUED' AND organization_id IS NOT NULL;
CREATE INDEX job_queue_claim_stage_idx ON workflow.job_queue
    (pg_catalog.hashtextextended(stage, 0), job_type, priority DESC, run_at, id)
    WHERE status = 'QUEUED' AND stage IS NOT NULL;

-- The claim index over all types is for claims without a filter only.  A
-- filtered claim that read it would filter its way through every due job
-- of other types, organizations or stages in front, which the statistics
-- cannot foresee; partial on a condition that always holds and that only
-- the unfiltered claim states, it is no candidate for the others.
DROP INDEX workflow.job_queue_claim_idx;
CREATE INDEX job_queue_claim_idx ON workflow.job_queue
    (priority DESC, run_at, id)
    WHERE status = 'QUEUED' AND priority >= '-2147483648'::integer;
