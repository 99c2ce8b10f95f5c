/* workflow--1.12.sql: install script for the workflow extension, version 1.12 */

\echo Use "CREATE EXTENSION workflow" to load this file. \quit

-- CREATE EXTENSION workflow installs 1.12 from this one script.  It is
-- workflow--1.0.sql followed by the twelve update scripts, section by
-- section, except that the enum types are created with every label of
-- 1.12: a label that ALTER TYPE ... ADD VALUE adds cannot be used in the
-- transaction that adds it, so a fresh install that went through the
-- update scripts could not use it in its own transaction, nor restore a
-- dump that holds one in a single transaction.  The test suite checks
-- that this install and 1.0 updated to 1.12 have the same objects.

-- ===========================================================================
-- From workflow--1.0.sql
-- ===========================================================================

-- The control file names schema workflow, which CREATE EXTENSION creates
-- when it does not exist.  A schema of that name that someone else owns
-- could hold objects that shadow ours: refuse to install into it.
DO $$
BEGIN
    IF (SELECT n.nspowner FROM pg_catalog.pg_namespace n
         WHERE n.nspname OPERATOR(pg_catalog.=) 'workflow')
       OPERATOR(pg_catalog.<>)
       (SELECT r.oid FROM pg_catalog.pg_roles r
         WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) THEN
        RAISE EXCEPTION 'workflow.internal_state: schema workflow is owned by another role'
            USING ERRCODE = 'XX000',
                  DETAIL = 'The extension installs only into a schema that the installing role owns.';
    END IF;
END
$$;

CREATE TYPE workflow.job_status AS ENUM
    ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELED');
CREATE TYPE workflow.step_status AS ENUM
    ('BLOCKED', 'ENQUEUED', 'RUNNING', 'SLEEPING', 'WAITING_FOR_EXTERNAL',
     'SUCCEEDED', 'FAILED', 'CANCELED', 'COMPENSATING', 'COMPENSATED',
     'COMPENSATION_FAILED', 'PARKED');
CREATE TYPE workflow.run_status AS ENUM
    ('RUNNING', 'WAITING_FOR_EXTERNAL', 'SUCCEEDED',
     'COMPLETED_WITH_ERRORS', 'CANCELED', 'BLOCKED_MISSING_HANDLER',
     'BLOCKED_MISSING_VERSION', 'BLOCKED_SIGNATURE_MISMATCH',
     'RETIRED_UNRESUMABLE', 'COMPENSATING', 'COMPENSATED',
     'COMPENSATION_FAILED', 'WAITING_FOR_ALLOWANCE');
CREATE TYPE workflow.release_mode AS ENUM ('ON_SUCCESS', 'ON_TERMINAL');
CREATE TYPE workflow.execution_kind AS ENUM ('JOB', 'EXTERNAL', 'SLEEP', 'EVENT', 'REPEAT');

CREATE FUNCTION workflow.uuid_v7() RETURNS uuid
    AS 'MODULE_PATHNAME', 'workflow_uuid_v7'
    LANGUAGE C VOLATILE PARALLEL SAFE;

-- Jobs: plain jobs and the jobs of released workflow steps.  Few indexes on
-- purpose: every status change rewrites the index entries (status is in the
-- claim index predicate), while heartbeats touch only leased_until and stay
-- HOT thanks to the fillfactor.
CREATE TABLE workflow.job_queue (
    id                  uuid PRIMARY KEY DEFAULT workflow.uuid_v7(),
    job_type            text NOT NULL,
    organization_id     uuid,
    payload             jsonb NOT NULL DEFAULT '{}',
    priority            integer NOT NULL DEFAULT 0,
    stage               text,
    status              workflow.job_status NOT NULL DEFAULT 'QUEUED',
    attempt             integer NOT NULL DEFAULT 0,
    max_attempts        integer NOT NULL DEFAULT 3,
    timeout_seconds     integer NOT NULL DEFAULT 300,
    run_at              timestamptz NOT NULL DEFAULT now(),
    leased_until        timestamptz,
    worker_id           text,
    lease_token         uuid,
    last_error_code     text,
    last_error_message  text,
    output              jsonb,
    workflow_run_id     uuid,
    workflow_step_id    uuid,
    generation          integer NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,
    CONSTRAINT job_queue_step_generation_key
        UNIQUE (workflow_step_id, generation),
    CONSTRAINT job_queue_attempts_check
        CHECK (max_attempts >= 1 AND attempt >= 0),
    CONSTRAINT job_queue_timeout_check CHECK (timeout_seconds >= 1)
) WITH (fillfactor = 80);

-- Claim order within one job type, and over all types.
CREATE INDEX job_queue_claim_type_idx ON workflow.job_queue
    (job_type, priority DESC, run_at, id) WHERE status = 'QUEUED';
CREATE INDEX job_queue_claim_idx ON workflow.job_queue
    (priority DESC, run_at, id) WHERE status = 'QUEUED';
-- The lease expiry sweep.
CREATE INDEX job_queue_running_idx ON workflow.job_queue (id)
    WHERE status = 'RUNNING';

CREATE TABLE workflow.workflow_runs (
    id                      uuid PRIMARY KEY,
    organization_id         uuid,
    name                    text,
    definition              jsonb NOT NULL,
    status                  workflow.run_status NOT NULL,
    result_step_key         text,
    result                  jsonb,
    idempotency_key         text,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    finished_at             timestamptz,
    -- Step counts by status, kept by the engine so that the run status is
    -- recomputed in O(1).  ENQUEUED and RUNNING share one counter so that
    -- claims, retries and releases never touch the run row.
    steps_total             integer NOT NULL,
    steps_active            integer NOT NULL,
    steps_waiting           integer NOT NULL,
    steps_blocked           integer NOT NULL,
    steps_succeeded         integer NOT NULL DEFAULT 0,
    steps_failed            integer NOT NULL DEFAULT 0,
    steps_canceled          integer NOT NULL DEFAULT 0
) WITH (fillfactor = 80);

CREATE UNIQUE INDEX workflow_runs_idempotency_key_idx ON workflow.workflow_runs
    (organization_id, idempotency_key) NULLS NOT DISTINCT
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE workflow.workflow_steps (
    id                              uuid PRIMARY KEY,
    workflow_run_id                 uuid NOT NULL,
    step_key                        text NOT NULL,
    execution_kind                  workflow.execution_kind NOT NULL,
    job_type                        text,
    organization_id                 uuid,
    payload                         jsonb NOT NULL DEFAULT '{}',
    priority                        integer NOT NULL DEFAULT 0,
    max_attempts                    integer NOT NULL DEFAULT 3,
    timeout_seconds                 integer NOT NULL DEFAULT 300,
    stage                           text,
    status                          workflow.step_status NOT NULL,
    job_id                          uuid,
    released_at                     timestamptz,
    started_at                      timestamptz,
    finished_at                     timestamptz,
    dependency_count_total          integer NOT NULL,
    dependency_count_pending        integer NOT NULL,
    dependency_count_unsatisfied    integer NOT NULL DEFAULT 0,
    status_reason                   text,
    last_error_code                 text,
    last_error_message              text,
    output                          jsonb,
    -- true once complete_external_step finished this step, so that an
    -- identical repeat is told apart from an engine cancellation
    completed_externally            boolean NOT NULL DEFAULT false,
    created_at                      timestamptz NOT NULL DEFAULT now(),
    updated_at                      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workflow_steps_run_key_key UNIQUE (workflow_run_id, step_key)
) WITH (fillfactor = 80);

CREATE TABLE workflow.workflow_step_dependencies (
    workflow_run_id         uuid NOT NULL,
    prerequisite_step_id    uuid NOT NULL,
    dependent_step_id       uuid NOT NULL,
    release_mode            workflow.release_mode NOT NULL,
    PRIMARY KEY (prerequisite_step_id, dependent_step_id)
);
CREATE INDEX workflow_step_dependencies_dependent_idx
    ON workflow.workflow_step_dependencies (workflow_run_id, dependent_step_id);

SELECT pg_catalog.pg_extension_config_dump('workflow.job_queue', '');
SELECT pg_catalog.pg_extension_config_dump('workflow.workflow_runs', '');
SELECT pg_catalog.pg_extension_config_dump('workflow.workflow_steps', '');
SELECT pg_catalog.pg_extension_config_dump('workflow.workflow_step_dependencies', '');

-- Queue API

CREATE FUNCTION workflow.enqueue(
    job_type text,
    payload jsonb DEFAULT '{}',
    priority integer DEFAULT 0,
    run_at timestamptz DEFAULT now(),
    max_attempts integer DEFAULT 3,
    timeout_seconds integer DEFAULT 300,
    organization_id uuid DEFAULT NULL,
    stage text DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'workflow_enqueue'
LANGUAGE C VOLATILE;

CREATE FUNCTION workflow.claim(
    worker_id text,
    job_types text[] DEFAULT NULL,
    batch_size integer DEFAULT 1,
    organization_id uuid DEFAULT NULL,
    stage text DEFAULT NULL)
RETURNS SETOF workflow.job_queue
AS 'MODULE_PATHNAME', 'workflow_claim'
LANGUAGE C VOLATILE ROWS 1;

CREATE FUNCTION workflow.heartbeat(job_id uuid, lease_token uuid)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'workflow_heartbeat'
LANGUAGE C VOLATILE;

CREATE FUNCTION workflow.complete_job(
    job_id uuid, lease_token uuid, output jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'workflow_complete_job'
LANGUAGE C VOLATILE;

CREATE FUNCTION workflow.fail_job(
    job_id uuid, lease_token uuid, error_code text, error_message text,
    retryable boolean DEFAULT true)
RETURNS void
AS 'MODULE_PATHNAME', 'workflow_fail_job'
LANGUAGE C VOLATILE;

CREATE FUNCTION workflow.release_job(job_id uuid, lease_token uuid)
RETURNS void
AS 'MODULE_PATHNAME', 'workflow_release_job'
LANGUAGE C VOLATILE;

CREATE FUNCTION workflow.cancel_job(job_id uuid, reason text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'workflow_cancel_job'
LANGUAGE C VOLATILE;

CREATE FUNCTION workflow.reap_expired()
RETURNS integer
AS 'MODULE_PATHNAME', 'workflow_reap_expired'
LANGUAGE C VOLATILE;

CREATE FUNCTION workflow.complete_jobs(
    job_ids uuid[], lease_tokens uuid[], outputs jsonb[] DEFAULT NULL)
RETURNS SETOF uuid
AS 'MODULE_PATHNAME', 'workflow_complete_jobs'
LANGUAGE C VOLATILE;

CREATE FUNCTION workflow.fail_jobs(
    job_ids uuid[], lease_tokens uuid[], error_codes text[],
    error_messages text[], retryable boolean DEFAULT true)
RETURNS SETOF uuid
AS 'MODULE_PATHNAME', 'workflow_fail_jobs'
LANGUAGE C VOLATILE;

-- Workflow API

CREATE FUNCTION workflow.start_run(
    definition jsonb,
    organization_id uuid DEFAULT NULL,
    idempotency_key text DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'workflow_start_run'
LANGUAGE C VOLATILE;

CREATE FUNCTION workflow.complete_external_step(
    workflow_run_id uuid,
    step_key text,
    status workflow.step_status,
    output jsonb DEFAULT NULL,
    status_reason text DEFAULT NULL,
    error_code text DEFAULT NULL,
    error_message text DEFAULT NULL,
    organization_id uuid DEFAULT NULL)
RETURNS workflow.workflow_steps
AS 'MODULE_PATHNAME', 'workflow_complete_external_step'
LANGUAGE C VOLATILE;

CREATE FUNCTION workflow.cancel_run(
    workflow_run_id uuid,
    reason text DEFAULT NULL,
    organization_id uuid DEFAULT NULL)
RETURNS workflow.run_status
AS 'MODULE_PATHNAME', 'workflow_cancel_run'
LANGUAGE C VOLATILE;

-- Triggers that keep steps in step with their jobs and guard the state.

CREATE FUNCTION workflow.job_queue_sync_step() RETURNS trigger
AS 'MODULE_PATHNAME', 'workflow_job_queue_sync_step'
LANGUAGE C;

CREATE FUNCTION workflow.job_queue_finish_statement() RETURNS trigger
AS 'MODULE_PATHNAME', 'workflow_job_queue_finish_statement'
LANGUAGE C;

CREATE FUNCTION workflow.job_queue_guard() RETURNS trigger
AS 'MODULE_PATHNAME', 'workflow_job_queue_guard'
LANGUAGE C;

CREATE FUNCTION workflow.workflow_steps_guard() RETURNS trigger
AS 'MODULE_PATHNAME', 'workflow_workflow_steps_guard'
LANGUAGE C;

CREATE TRIGGER job_queue_guard_update
    BEFORE UPDATE ON workflow.job_queue
    FOR EACH ROW
    WHEN (OLD.status IN ('SUCCEEDED', 'FAILED', 'CANCELED')
          AND NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION workflow.job_queue_guard();

CREATE TRIGGER job_queue_guard_delete
    BEFORE DELETE ON workflow.job_queue
    FOR EACH ROW
    WHEN (OLD.workflow_step_id IS NOT NULL)
    EXECUTE FUNCTION workflow.job_queue_guard();

CREATE TRIGGER job_queue_sync_step
    AFTER UPDATE ON workflow.job_queue
    FOR EACH ROW
    WHEN (NEW.workflow_step_id IS NOT NULL
          AND NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION workflow.job_queue_sync_step();

CREATE TRIGGER job_queue_finish_statement
    AFTER UPDATE ON workflow.job_queue
    FOR EACH STATEMENT
    EXECUTE FUNCTION workflow.job_queue_finish_statement();

CREATE TRIGGER workflow_steps_guard
    BEFORE UPDATE ON workflow.workflow_steps
    FOR EACH ROW
    WHEN (NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION workflow.workflow_steps_guard();

-- verify(): one row per broken invariant, nothing on a healthy database.
-- It recomputes everything from the steps, edges and jobs themselves, never
-- from the counters it checks.  Read-only; it scans whole runs, so it is a
-- check to run on demand, not on an event path.
CREATE FUNCTION workflow.verify(workflow_run_id uuid DEFAULT NULL)
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
                   (count(s.id) FILTER (WHERE s.status = 'CANCELED'))::int AS n_canceled
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
-- run counters against the steps
SELECT r.id, NULL, 'run counter ' || v.name, v.expected::text, v.actual::text
  FROM runs r,
       LATERAL (VALUES ('steps_total', r.n_total, r.steps_total),
                       ('steps_active', r.n_active, r.steps_active),
                       ('steps_waiting', r.n_waiting, r.steps_waiting),
                       ('steps_blocked', r.n_blocked, r.steps_blocked),
                       ('steps_succeeded', r.n_succeeded, r.steps_succeeded),
                       ('steps_failed', r.n_failed, r.steps_failed),
                       ('steps_canceled', r.n_canceled, r.steps_canceled))
               AS v(name, expected, actual)
 WHERE v.expected <> v.actual
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


-- ===========================================================================
-- From workflow--1.0--1.1.sql
-- ===========================================================================

-- workflow 1.0 -> 1.1: counter shards for wide runs, purge, claim indexes
-- for organization and stage filters.

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


-- ===========================================================================
-- From workflow--1.1--1.2.sql
-- ===========================================================================

-- workflow 1.1 -> 1.2: the unique (workflow_step_id, generation) of
-- job_queue indexes step jobs only

-- A plain job has no step, and its (NULL, generation) key was never
-- checked for uniqueness, yet every status change of the job (none can be
-- HOT) wrote an entry for it.  The index keeps the same name; it takes an
-- ACCESS EXCLUSIVE lock on job_queue while it is built.
ALTER TABLE workflow.job_queue DROP CONSTRAINT job_queue_step_generation_key;
CREATE UNIQUE INDEX job_queue_step_generation_key
    ON workflow.job_queue (workflow_step_id, generation)
    WHERE workflow_step_id IS NOT NULL;


-- ===========================================================================
-- From workflow--1.2--1.3.sql
-- ===========================================================================

-- workflow 1.2 -> 1.3: least privilege and tenants

-- The four roles the privileges below are granted to.  Roles belong to the
-- cluster, not to the database or the extension: a second database reuses
-- them, and DROP EXTENSION leaves them.  workflow_admin is a member of the
-- other three.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['workflow_admin', 'workflow_worker',
                             'workflow_client', 'workflow_reader'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                        WHERE rolname OPERATOR(pg_catalog.=) r) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;
GRANT workflow_worker, workflow_client, workflow_reader TO workflow_admin;

-- Tenants: a role granted an organization here, and every role that is a
-- member of it, is confined to its organizations in every call, claim and
-- read.  Superusers and the extension's owner never are.
CREATE TABLE workflow.organization_members (
    role             regrole NOT NULL,
    organization_id  uuid NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (role, organization_id)
);
SELECT pg_catalog.pg_extension_config_dump('workflow.organization_members', '');

-- Every backend caches the organizations of the roles it serves; a change
-- of this table makes them all forget at commit.
CREATE FUNCTION workflow._organization_members_changed() RETURNS trigger
AS 'MODULE_PATHNAME', 'workflow_organization_members_changed'
LANGUAGE C;

CREATE TRIGGER organization_members_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON workflow.organization_members
    FOR EACH STATEMENT
    EXECUTE FUNCTION workflow._organization_members_changed();

CREATE FUNCTION workflow.grant_organization(role regrole, organization_id uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'workflow_grant_organization'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.grant_organization(regrole, uuid) IS
'Confines role, and every role that is a member of it, to its organizations, '
'and adds organization_id to them. Returns false when the grant was there.';

CREATE FUNCTION workflow.revoke_organization(role regrole, organization_id uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'workflow_revoke_organization'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.revoke_organization(regrole, uuid) IS
'Takes back a grant_organization. A role left with no organization is '
'unconfined again. Returns false when there was no such grant.';

CREATE FUNCTION workflow.my_organizations()
RETURNS uuid[]
AS 'MODULE_PATHNAME', 'workflow_my_organizations'
LANGUAGE C STABLE;

COMMENT ON FUNCTION workflow.my_organizations() IS
'The organizations the current role is confined to, or NULL when it is not '
'confined. The row-level security policies call it once per query.';

-- run_counters(): the same counts as before, now read with the owner's
-- rights (a client has no table rights) and confined like every call.
CREATE OR REPLACE FUNCTION workflow.run_counters(workflow_run_id uuid)
RETURNS TABLE (steps_total integer, steps_active integer,
               steps_waiting integer, steps_blocked integer,
               steps_succeeded integer, steps_failed integer,
               steps_canceled integer)
AS 'MODULE_PATHNAME', 'workflow_run_counters'
LANGUAGE C STABLE;

-- Row-level security, enabled and forced on every table: a confined role
-- sees only its organizations' rows; everyone else sees every row.  The
-- engine writes as the owner, exempt from forcing like the referential
-- integrity triggers; nobody else has a table right but SELECT.
ALTER TABLE workflow.job_queue ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow.job_queue FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON workflow.job_queue
    USING ((SELECT workflow.my_organizations()) IS NULL
           OR organization_id OPERATOR(pg_catalog.=) ANY ((SELECT workflow.my_organizations())::pg_catalog.uuid[]));

ALTER TABLE workflow.workflow_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow.workflow_runs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON workflow.workflow_runs
    USING ((SELECT workflow.my_organizations()) IS NULL
           OR organization_id OPERATOR(pg_catalog.=) ANY ((SELECT workflow.my_organizations())::pg_catalog.uuid[]));

ALTER TABLE workflow.workflow_steps ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow.workflow_steps FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON workflow.workflow_steps
    USING ((SELECT workflow.my_organizations()) IS NULL
           OR organization_id OPERATOR(pg_catalog.=) ANY ((SELECT workflow.my_organizations())::pg_catalog.uuid[]));

ALTER TABLE workflow.workflow_step_dependencies ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow.workflow_step_dependencies FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON workflow.workflow_step_dependencies
    USING ((SELECT workflow.my_organizations()) IS NULL
           OR workflow_run_id IN (SELECT r.id FROM workflow.workflow_runs r));

ALTER TABLE workflow.workflow_run_counters ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow.workflow_run_counters FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON workflow.workflow_run_counters
    USING ((SELECT workflow.my_organizations()) IS NULL
           OR workflow_run_id IN (SELECT r.id FROM workflow.workflow_runs r));

ALTER TABLE workflow.organization_members ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow.organization_members FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON workflow.organization_members
    USING ((SELECT workflow.my_organizations()) IS NULL
           OR organization_id OPERATOR(pg_catalog.=) ANY ((SELECT workflow.my_organizations())::pg_catalog.uuid[]));

-- Privileges: nothing for PUBLIC, EXECUTE per role, SELECT for readers.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA workflow FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA workflow FROM PUBLIC;
GRANT USAGE ON SCHEMA workflow
    TO workflow_worker, workflow_client, workflow_reader, workflow_admin;

GRANT EXECUTE ON FUNCTION
    workflow.claim(text, text[], integer, uuid, text),
    workflow.heartbeat(uuid, uuid),
    workflow.complete_job(uuid, uuid, jsonb),
    workflow.complete_jobs(uuid[], uuid[], jsonb[]),
    workflow.fail_job(uuid, uuid, text, text, boolean),
    workflow.fail_jobs(uuid[], uuid[], text[], text[], boolean),
    workflow.release_job(uuid, uuid),
    workflow.reap_expired()
    TO workflow_worker;

GRANT EXECUTE ON FUNCTION
    workflow.enqueue(text, jsonb, integer, timestamptz, integer, integer, uuid, text),
    workflow.start_run(jsonb, uuid, text),
    workflow.complete_external_step(uuid, text, workflow.step_status, jsonb,
                                    text, text, text, uuid),
    workflow.cancel_job(uuid, text),
    workflow.cancel_run(uuid, text, uuid),
    workflow.run_counters(uuid)
    TO workflow_client;

GRANT SELECT ON ALL TABLES IN SCHEMA workflow TO workflow_reader;
GRANT EXECUTE ON FUNCTION
    workflow.run_counters(uuid),
    workflow.verify(uuid)
    TO workflow_reader;

GRANT EXECUTE ON FUNCTION
    workflow.purge(interval, integer),
    workflow.grant_organization(regrole, uuid),
    workflow.revoke_organization(regrole, uuid)
    TO workflow_admin;

GRANT EXECUTE ON FUNCTION workflow.uuid_v7(), workflow.my_organizations()
    TO workflow_worker, workflow_client, workflow_reader, workflow_admin;


-- ===========================================================================
-- From workflow--1.3--1.4.sql
-- ===========================================================================

-- workflow 1.3 -> 1.4: event history, operator views, DAG pictures

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
           j.attempt, s.released_at IS NOT NULL AS released,
           (SELECT count(*) FROM workflow.workflow_events e
             WHERE e.workflow_run_id = s.workflow_run_id AND e.step_key = s.step_key
               AND e.event_type = 'step_released')::int AS n_released,
           (SELECT string_agg(CASE e.event_type
                                  WHEN 'step_succeeded' THEN 'SUCCEEDED'
                                  WHEN 'step_failed' THEN 'FAILED'
                                  WHEN 'step_canceled' THEN 'CANCELED'
                                  ELSE e.detail ->> 'status' END, ',' ORDER BY e.id)
              FROM workflow.workflow_events e
             WHERE e.workflow_run_id = s.workflow_run_id AND e.step_key = s.step_key
               AND e.event_type IN ('step_succeeded', 'step_failed', 'step_canceled',
                                    'external_completed')) AS terminal_statuses,
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

-- Each view reads the tables with the rights of the role that reads it
-- (security_invoker), so the tables' row-level security confines a tenant
-- role to its organizations' rows here too.  Filtered by workflow_run_id,
-- run_overview and step_timeline read one run's rows through the primary
-- key of workflow_runs and the (workflow_run_id, ...) keys of
-- workflow_run_counters and workflow_steps; queue_stats counts the whole
-- queue and is meant to be run on demand.

-- One row per run: its status, its steps by status, how far it got.  A
-- live run with counter shards counts its steps in workflow_run_counters
-- (its run row then counts shards): the shards are summed for it, as
-- run_counters() does; every other run's row is exact.
CREATE VIEW workflow.run_overview WITH (security_invoker = true) AS
SELECT r.id AS workflow_run_id,
       r.organization_id,
       r.name,
       r.status,
       r.steps_total,
       CASE WHEN x.live THEN x.active ELSE r.steps_active END AS steps_active,
       CASE WHEN x.live THEN x.waiting ELSE r.steps_waiting END AS steps_waiting,
       CASE WHEN x.live THEN x.blocked ELSE r.steps_blocked END AS steps_blocked,
       CASE WHEN x.live THEN x.succeeded ELSE r.steps_succeeded END AS steps_succeeded,
       CASE WHEN x.live THEN x.failed ELSE r.steps_failed END AS steps_failed,
       CASE WHEN x.live THEN x.canceled ELSE r.steps_canceled END AS steps_canceled,
       pg_catalog.trunc(
           (CASE WHEN x.live THEN x.succeeded OPERATOR(pg_catalog.+) x.failed
                                  OPERATOR(pg_catalog.+) x.canceled
                 ELSE r.steps_succeeded OPERATOR(pg_catalog.+) r.steps_failed
                      OPERATOR(pg_catalog.+) r.steps_canceled END)::pg_catalog.numeric
           OPERATOR(pg_catalog./) GREATEST(r.steps_total, 1), 4) AS progress,
       r.created_at,
       r.finished_at,
       COALESCE(r.finished_at, pg_catalog.statement_timestamp())
           OPERATOR(pg_catalog.-) r.created_at AS duration
  FROM workflow.workflow_runs r
  LEFT JOIN LATERAL (
        SELECT true AS live,
               COALESCE(pg_catalog.sum(c.steps_active), 0)::pg_catalog.int4 AS active,
               COALESCE(pg_catalog.sum(c.steps_waiting), 0)::pg_catalog.int4 AS waiting,
               COALESCE(pg_catalog.sum(c.steps_blocked), 0)::pg_catalog.int4 AS blocked,
               COALESCE(pg_catalog.sum(c.steps_succeeded), 0)::pg_catalog.int4 AS succeeded,
               COALESCE(pg_catalog.sum(c.steps_failed), 0)::pg_catalog.int4 AS failed,
               COALESCE(pg_catalog.sum(c.steps_canceled), 0)::pg_catalog.int4 AS canceled
          FROM workflow.workflow_run_counters c
         WHERE c.workflow_run_id OPERATOR(pg_catalog.=) r.id) x
       ON r.counter_shards OPERATOR(pg_catalog.>) 0
      AND r.status OPERATOR(pg_catalog.<>) ALL
          ('{SUCCEEDED,COMPLETED_WITH_ERRORS,CANCELED}'::workflow.run_status[]);

COMMENT ON VIEW workflow.run_overview IS
'One row per run: status, steps by status (active = ENQUEUED or RUNNING), '
'progress (finished steps / steps, truncated to 4 places), creation and '
'finish time, and duration (so far, while the run is live).';

-- One row per job type and status: how many jobs, how many of the queued
-- ones are due and for how long the oldest has been, and how many running
-- ones hold a lease that ran out (reap_expired() expires those).
CREATE VIEW workflow.queue_stats WITH (security_invoker = true) AS
SELECT j.job_type,
       j.status,
       pg_catalog.count(*) AS jobs,
       pg_catalog.count(*) FILTER (
           WHERE j.status OPERATOR(pg_catalog.=) 'QUEUED'::workflow.job_status
             AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp()) AS due,
       pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) pg_catalog.min(j.run_at) FILTER (
           WHERE j.status OPERATOR(pg_catalog.=) 'QUEUED'::workflow.job_status
             AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp()) AS oldest_due_age,
       pg_catalog.count(*) FILTER (
           WHERE j.status OPERATOR(pg_catalog.=) 'RUNNING'::workflow.job_status
             AND j.leased_until OPERATOR(pg_catalog.<) pg_catalog.statement_timestamp()) AS expired_leases
  FROM workflow.job_queue j
 GROUP BY j.job_type, j.status;

COMMENT ON VIEW workflow.queue_stats IS
'One row per job type and status: jobs, those due now (QUEUED), the age of '
'the oldest due job, and RUNNING jobs whose lease has run out. Reads the '
'whole queue: run it on demand.';

-- One row per step: when it was released, started and finished, how long
-- it waited for a worker and how long it ran, and its job's attempts.
CREATE VIEW workflow.step_timeline WITH (security_invoker = true) AS
SELECT s.workflow_run_id,
       s.step_key,
       s.execution_kind AS kind,
       s.status,
       COALESCE(j.attempt, 0) AS attempts,
       s.released_at,
       s.started_at,
       s.finished_at,
       s.started_at OPERATOR(pg_catalog.-) s.released_at AS waited,
       s.finished_at OPERATOR(pg_catalog.-) s.started_at AS ran
  FROM workflow.workflow_steps s
  LEFT JOIN workflow.job_queue j
         ON j.id OPERATOR(pg_catalog.=) s.job_id
        AND j.workflow_run_id OPERATOR(pg_catalog.=) s.workflow_run_id;

COMMENT ON VIEW workflow.step_timeline IS
'One row per step: kind, status, its job''s attempts (0 without a job), '
'released, started and finished times, waited (started - released) and ran '
'(finished - started).';

-- Readers (and the admin, through workflow_reader) read the views; nobody
-- else.
REVOKE ALL ON workflow.run_overview, workflow.queue_stats, workflow.step_timeline
    FROM PUBLIC;
GRANT SELECT ON workflow.run_overview, workflow.queue_stats, workflow.step_timeline
    TO workflow_reader;

-- ---------------------------------------------------------------------------
-- Pictures: run_graph

-- The run's DAG as Graphviz DOT or a Mermaid flowchart, read as the owner
-- and confined like every engine call.
CREATE FUNCTION workflow.run_graph(workflow_run_id uuid, format text DEFAULT 'dot',
                                   organization_id uuid DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'workflow_run_graph'
LANGUAGE C STABLE;

COMMENT ON FUNCTION workflow.run_graph(uuid, text, uuid) IS
'The run''s DAG as Graphviz DOT (format ''dot'') or a Mermaid flowchart '
'(''mermaid''): one node per step labelled with its key, kind, status and '
'attempts and coloured by status, one edge per dependency, ON_TERMINAL edges '
'dashed.';

-- A new function is executable by PUBLIC until revoked, as every function
-- of 1.3 was.
REVOKE ALL ON FUNCTION workflow.run_graph(uuid, text, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workflow.run_graph(uuid, text, uuid)
    TO workflow_client, workflow_reader;


-- ===========================================================================
-- From workflow--1.4--1.5.sql
-- ===========================================================================

-- workflow 1.4 -> 1.5: one commit per job, wake-ups

-- ---------------------------------------------------------------------------
-- complete_and_claim: complete one job and claim the next in one transaction

CREATE FUNCTION workflow.complete_and_claim(
    job_id uuid,
    lease_token uuid,
    output jsonb,
    worker_id text,
    job_types text[] DEFAULT NULL,
    batch_size integer DEFAULT 1,
    organization_id uuid DEFAULT NULL,
    stage text DEFAULT NULL)
RETURNS SETOF workflow.job_queue
AS 'MODULE_PATHNAME', 'workflow_complete_and_claim'
LANGUAGE C VOLATILE ROWS 1;

COMMENT ON FUNCTION workflow.complete_and_claim(uuid, uuid, jsonb, text, text[],
                                                integer, uuid, text) IS
'Completes a job as complete_job does, then claims up to batch_size due jobs '
'as claim does, in one transaction: a worker in steady state commits once per '
'job. Every argument is checked before anything is written; if anything '
'fails, the completion and the claim roll back together.';

REVOKE ALL ON FUNCTION workflow.complete_and_claim(uuid, uuid, jsonb, text, text[],
                                                   integer, uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workflow.complete_and_claim(uuid, uuid, jsonb, text, text[],
                                                      integer, uuid, text)
    TO workflow_worker;

-- ---------------------------------------------------------------------------
-- The server CPU of a job: no BEFORE UPDATE row trigger on job_queue
--
-- The refusal to move a finished job out of its status was a BEFORE UPDATE
-- row trigger.  Any such trigger makes every UPDATE of job_queue lock each
-- row a second time before writing it and read the trigger's WHEN clause
-- back in every statement, though in the normal course no row is refused.
-- The step trigger, AFTER UPDATE, refuses it now; its WHEN clause adds the
-- finished jobs to the step jobs it already let through, so the claim and
-- completion of a plain job still fire nothing.  The error rolls the
-- statement back as before.

DROP TRIGGER job_queue_guard_update ON workflow.job_queue;
DROP TRIGGER job_queue_sync_step ON workflow.job_queue;
CREATE TRIGGER job_queue_sync_step
    AFTER UPDATE ON workflow.job_queue
    FOR EACH ROW
    WHEN (NEW.status IS DISTINCT FROM OLD.status
          AND (NEW.workflow_step_id IS NOT NULL
               OR OLD.status IN ('SUCCEEDED', 'FAILED', 'CANCELED')))
    EXECUTE FUNCTION workflow.job_queue_sync_step();


-- ===========================================================================
-- From workflow--1.5--1.6.sql
-- ===========================================================================

-- workflow 1.5 -> 1.6: durable timers, wait-for-event, the run state machine

-- ---------------------------------------------------------------------------
-- New step kinds and status: the labels are in the enum types above.


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


-- ===========================================================================
-- From workflow--1.6--1.7.sql
-- ===========================================================================


-- ---------------------------------------------------------------------------
-- New run statuses
--
-- A run pinned to a registered workflow version is held when its pin no
-- longer holds (BLOCKED_*), and an operator may end it RETIRED_UNRESUMABLE.
-- A label added here cannot be used in this script (PostgreSQL 15): verify()
-- below compares text, never the new labels.


-- Sagas: a run being undone is COMPENSATING, and ends COMPENSATED only if
-- every compensation succeeded, else COMPENSATION_FAILED; its steps pass
-- through the same three statuses.

-- ---------------------------------------------------------------------------
-- Run input and pins

-- input: what start_run or start_workflow was given, handed to every job by
-- job_inputs.  workflow_name, workflow_version, workflow_signature: the
-- registered version a run started by start_workflow is pinned to (all
-- three, or none for a run started from a definition).
ALTER TABLE workflow.workflow_runs
    ADD COLUMN input jsonb,
    ADD COLUMN workflow_name text,
    ADD COLUMN workflow_version text,
    ADD COLUMN workflow_signature text;

-- generation: the step's job generation (its job is the job_queue row of
-- (step, generation)); retry_run gives a failed step the next one.
-- pinned: the step's run is pinned, so its release checks the pin first;
-- steps of other runs never look at the registry.  held: a BLOCKED step
-- whose prerequisites have all finished but whose release the pin
-- refused; resume_run releases it.  None of these changes when a job step
-- is claimed or finished, so those updates stay HOT.
ALTER TABLE workflow.workflow_steps
    ADD COLUMN generation integer NOT NULL DEFAULT 0,
    ADD COLUMN pinned boolean NOT NULL DEFAULT false,
    ADD COLUMN held boolean NOT NULL DEFAULT false;

-- resume_run, retire_run, cancel_run: the held steps of one run.
CREATE INDEX workflow_steps_held_idx ON workflow.workflow_steps
    (workflow_run_id, id) WHERE held;

-- ---------------------------------------------------------------------------
-- Compensation

-- compensate: the job that undoes a job or external step, as its
-- definition gave it.  completion_seq: for a step with compensate, its
-- place in the order steps succeeded (from step_completion_seq, drawn in
-- the transaction that finished it), until its compensation starts;
-- compensate_run undoes steps from the highest down.  Steps without
-- compensate never draw one, so their updates stay HOT.
ALTER TABLE workflow.workflow_steps
    ADD COLUMN compensate jsonb,
    ADD COLUMN completion_seq bigint;
CREATE SEQUENCE workflow.step_completion_seq;
SELECT pg_catalog.pg_extension_config_dump('workflow.step_completion_seq', '');
REVOKE ALL ON SEQUENCE workflow.step_completion_seq FROM PUBLIC;

-- compensate_run: the next step to undo of one run.
CREATE INDEX workflow_steps_compensation_idx ON workflow.workflow_steps
    (workflow_run_id, completion_seq) WHERE completion_seq IS NOT NULL;

-- compensate_on_failure: the definition said "compensate_on": "failure".
-- compensations_failed: the run's compensations that failed so far.
ALTER TABLE workflow.workflow_runs
    ADD COLUMN compensate_on_failure boolean NOT NULL DEFAULT false,
    ADD COLUMN compensations_failed integer NOT NULL DEFAULT 0;

-- compensation: the job undoes its step (its step is COMPENSATING).
ALTER TABLE workflow.job_queue
    ADD COLUMN compensation boolean NOT NULL DEFAULT false;

-- ---------------------------------------------------------------------------
-- The workflow registry

-- One row per registered version of a named workflow; at most one version
-- per name is active (the one start_workflow starts).  signature is the hex
-- sha256 of the definition's canonical contract.  The registry belongs to
-- no organization: every reader sees it, only the owner writes it.
CREATE TABLE workflow.workflow_definitions (
    name        text NOT NULL,
    version     text NOT NULL,
    definition  jsonb NOT NULL,
    signature   text NOT NULL,
    active      boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    PRIMARY KEY (name, version)
);
CREATE UNIQUE INDEX workflow_definitions_active_idx
    ON workflow.workflow_definitions (name) WHERE active;

SELECT pg_catalog.pg_extension_config_dump('workflow.workflow_definitions', '');

ALTER TABLE workflow.workflow_definitions ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow.workflow_definitions FORCE ROW LEVEL SECURITY;
-- A tenant role sees every registered version: the registry is shared.
CREATE POLICY tenant_rows ON workflow.workflow_definitions USING (true);

REVOKE ALL ON TABLE workflow.workflow_definitions FROM PUBLIC;
GRANT SELECT ON TABLE workflow.workflow_definitions TO workflow_reader;

COMMENT ON TABLE workflow.workflow_definitions IS
'Registered workflow versions: definition, signature (hex sha256 of the '
'canonical contract), and whether it is the active version of its name.';

-- ---------------------------------------------------------------------------
-- start_run takes the run's input (a new trailing argument)

DROP FUNCTION workflow.start_run(jsonb, uuid, text);
CREATE FUNCTION workflow.start_run(
    definition jsonb,
    organization_id uuid DEFAULT NULL,
    idempotency_key text DEFAULT NULL,
    input jsonb DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'workflow_start_run'
LANGUAGE C VOLATILE;

CREATE FUNCTION workflow.job_inputs(job_id uuid, lease_token uuid)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'workflow_job_inputs'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.job_inputs(uuid, uuid) IS
'For the job a worker holds: {"input": the run''s input, "steps": '
'{prerequisite key: its output, ...}}.';

CREATE FUNCTION workflow.register_workflow(
    name text,
    version text,
    definition jsonb,
    activate boolean DEFAULT true)
RETURNS text
AS 'MODULE_PATHNAME', 'workflow_register_workflow'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.register_workflow(text, text, jsonb, boolean) IS
'Registers a version of a named workflow (and makes it the active one '
'unless activate is false); returns its signature.';

CREATE FUNCTION workflow.unregister_workflow(name text, version text)
RETURNS void
AS 'MODULE_PATHNAME', 'workflow_unregister_workflow'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.unregister_workflow(text, text) IS
'Removes a registered version; runs pinned to it are held at their next '
'release (BLOCKED_MISSING_VERSION or BLOCKED_MISSING_HANDLER).';

CREATE FUNCTION workflow.start_workflow(
    name text,
    input jsonb DEFAULT NULL,
    organization_id uuid DEFAULT NULL,
    idempotency_key text DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'workflow_start_workflow'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.start_workflow(text, jsonb, uuid, text) IS
'Starts the active version of a registered workflow, pinned to that '
'version and its signature; returns the run id.';

-- ---------------------------------------------------------------------------
-- The operator's actions on a run

CREATE FUNCTION workflow.resume_run(
    workflow_run_id uuid,
    organization_id uuid DEFAULT NULL)
RETURNS workflow.run_status
AS 'MODULE_PATHNAME', 'workflow_resume_run'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.resume_run(uuid, uuid) IS
'Checks a blocked run''s pin again and, if it holds, releases the steps it '
'held; returns the run''s status.';

CREATE FUNCTION workflow.retire_run(
    workflow_run_id uuid,
    reason text,
    organization_id uuid DEFAULT NULL)
RETURNS workflow.run_status
AS 'MODULE_PATHNAME', 'workflow_retire_run'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.retire_run(uuid, text, uuid) IS
'Ends a live or blocked run RETIRED_UNRESUMABLE, canceling what is left '
'of it, as cancel_run does.';

CREATE FUNCTION workflow.compensate_run(
    workflow_run_id uuid,
    reason text DEFAULT NULL,
    organization_id uuid DEFAULT NULL)
RETURNS workflow.run_status
AS 'MODULE_PATHNAME', 'workflow_compensate_run'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.compensate_run(uuid, text, uuid) IS
'Cancels what is left of a run and undoes its succeeded steps one at a '
'time, in reverse completion order, with their compensate jobs.';

CREATE FUNCTION workflow.retry_run(
    workflow_run_id uuid,
    organization_id uuid DEFAULT NULL)
RETURNS workflow.run_status
AS 'MODULE_PATHNAME', 'workflow_retry_run'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.retry_run(uuid, uuid) IS
'Runs the failed part of a COMPLETED_WITH_ERRORS run again: a new job '
'generation for each FAILED step, the dependents it canceled back to '
'BLOCKED, succeeded steps kept.';

REVOKE ALL ON FUNCTION
    workflow.start_run(jsonb, uuid, text, jsonb),
    workflow.job_inputs(uuid, uuid),
    workflow.register_workflow(text, text, jsonb, boolean),
    workflow.unregister_workflow(text, text),
    workflow.start_workflow(text, jsonb, uuid, text),
    workflow.resume_run(uuid, uuid),
    workflow.retire_run(uuid, text, uuid),
    workflow.retry_run(uuid, uuid),
    workflow.compensate_run(uuid, text, uuid)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workflow.job_inputs(uuid, uuid) TO workflow_worker;
GRANT EXECUTE ON FUNCTION
    workflow.start_run(jsonb, uuid, text, jsonb),
    workflow.start_workflow(text, jsonb, uuid, text)
    TO workflow_client;
GRANT EXECUTE ON FUNCTION
    workflow.register_workflow(text, text, jsonb, boolean),
    workflow.unregister_workflow(text, text),
    workflow.resume_run(uuid, uuid),
    workflow.retire_run(uuid, text, uuid),
    workflow.retry_run(uuid, uuid),
    workflow.compensate_run(uuid, text, uuid)
    TO workflow_admin;

-- ---------------------------------------------------------------------------
-- verify(), now with pins, held steps, retries, retired runs and sagas: a
-- held step is a ready BLOCKED step of a BLOCKED_* run, and such a run
-- is pinned and holds one; a run is pinned whole; a step has one
-- job per generation and only its current one may be live; a retried
-- step's and run's history is checked from its last step_reset or
-- run_retired on; a retired run is an ended run like a canceled one.  A
-- step being or having been undone counts as the SUCCEEDED step it was; a
-- run has at most one COMPENSATING step, exactly one while it is
-- COMPENSATING and none after; a COMPENSATED run has no failed
-- compensation and a COMPENSATION_FAILED run at least one, each counted
-- on its row; a finished compensation left no step SUCCEEDED.  The new
-- labels are compared as text: this script cannot use a label it adds.
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
                                    'workflow.run_compensating'))
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
                                    'workflow.run_compensating'))
               AS run_canceled,
           r.status AS run_status, j.compensation
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
 WHERE r.status::text NOT IN ('CANCELED', 'RETIRED_UNRESUMABLE', 'COMPENSATING', 'COMPENSATED', 'COMPENSATION_FAILED')
   AND r.status::text NOT LIKE 'BLOCKED\_%'
   AND r.status::text <> r.derived_status
UNION ALL
SELECT r.id, NULL, 'blocked run that is finished', 'RUNNING or WAITING_FOR_EXTERNAL',
       r.derived_status
  FROM runs r
 WHERE r.status::text LIKE 'BLOCKED\_%'
   AND r.derived_status NOT IN ('RUNNING', 'WAITING_FOR_EXTERNAL')
UNION ALL
SELECT r.id, NULL, 'ended run with a live step', '0',
       (r.n_active + r.n_waiting + r.n_blocked)::text
  FROM runs r
 WHERE r.status::text IN ('CANCELED', 'RETIRED_UNRESUMABLE')
   AND r.n_active + r.n_waiting + r.n_blocked > 0
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
 WHERE s.execution_kind = 'JOB' AND s.released_at IS NOT NULL
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
$verify$;


-- ===========================================================================
-- From workflow--1.7--1.8.sql
-- ===========================================================================


-- ---------------------------------------------------------------------------
-- job_step_key: the key of the step of the job a worker holds.  A worker
-- cannot read workflow_steps; workflow-worker passes the key to its
-- command as WORKFLOW_STEP_KEY.

CREATE FUNCTION workflow.job_step_key(job_id uuid, lease_token uuid)
RETURNS text
AS 'MODULE_PATHNAME', 'workflow_job_step_key'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.job_step_key(uuid, uuid) IS
'For the job a worker holds: the key of its step, or NULL for a plain job.';

REVOKE ALL ON FUNCTION workflow.job_step_key(uuid, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workflow.job_step_key(uuid, uuid) TO workflow_worker;

-- ---------------------------------------------------------------------------
-- The maintenance background worker's view.  With workflow in
-- shared_preload_libraries and databases in
-- workflow.maintenance_databases, a worker per database reaps, fires
-- timers, purges and vacuums every workflow.maintenance_interval; this
-- view shows, from shared memory, what each did (figures since the server
-- started).  Without the preload it is empty.

CREATE FUNCTION workflow.maintenance_passes(
    OUT database text,
    OUT pid integer,
    OUT state text,
    OUT last_pass_at timestamptz,
    OUT last_pass_ms double precision,
    OUT passes bigint,
    OUT last_reaped bigint,
    OUT last_fired bigint,
    OUT last_purged bigint,
    OUT last_vacuumed text,
    OUT reaped bigint,
    OUT fired bigint,
    OUT purged bigint,
    OUT vacuums bigint,
    OUT last_vacuum_at timestamptz,
    OUT errors bigint,
    OUT last_error_at timestamptz,
    OUT last_error text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'workflow_maintenance_passes'
LANGUAGE C VOLATILE;

CREATE VIEW workflow.maintenance_status WITH (security_invoker = true) AS
SELECT m.database, m.pid, m.state, m.last_pass_at, m.last_pass_ms, m.passes,
       m.last_reaped, m.last_fired, m.last_purged, m.last_vacuumed,
       m.reaped, m.fired, m.purged, m.vacuums, m.last_vacuum_at,
       m.errors, m.last_error_at, m.last_error
  FROM workflow.maintenance_passes() m;

COMMENT ON VIEW workflow.maintenance_status IS
'One row per database of workflow.maintenance_databases: its maintenance '
'worker, when it last passed and what its passes did since the server '
'started.';

COMMENT ON FUNCTION workflow.maintenance_passes() IS
'The rows of workflow.maintenance_status, from the maintenance workers'' '
'shared memory.';

REVOKE ALL ON FUNCTION workflow.maintenance_passes() FROM PUBLIC;
REVOKE ALL ON workflow.maintenance_status FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workflow.maintenance_passes() TO workflow_reader;
GRANT SELECT ON workflow.maintenance_status TO workflow_reader;


-- ===========================================================================
-- From workflow--1.8--1.9.sql
-- ===========================================================================


-- ---------------------------------------------------------------------------
-- New statuses
--
-- A label added here cannot be used in this script (PostgreSQL 15): the
-- index and verify() below compare text, never the new labels.


-- ---------------------------------------------------------------------------
-- A run's limits, from its definition's "limits", and what it used.
--
-- node_execution_cap bounds executions_used, the jobs of its job steps
-- (retries of a job are not new executions); concurrency_cap bounds its
-- active steps; retry_cap has already lowered its steps' max_attempts;
-- cycle_cap is kept for the steps that repeat; past deadline_at no job of
-- the run is claimed, and fire_timers ends the run (deadline_swept: it did,
-- or found the run finished; status_reason says why the run ended so).
-- increase_execution_allowance
-- raises node_execution_cap, leaving evidence in workflow_events.
-- steps_parked counts the steps waiting for room (status PARKED); a capped
-- run keeps every counter on its row, never in shards.
-- allowance_exhausted_cap is the cap whose exhaustion was last recorded,
-- so that execution_allowance_exhausted is written once per cap.

ALTER TABLE workflow.workflow_runs
    ADD COLUMN deadline_at timestamptz,
    ADD COLUMN deadline_swept boolean NOT NULL DEFAULT false,
    ADD COLUMN status_reason text,
    ADD COLUMN node_execution_cap integer,
    ADD COLUMN concurrency_cap integer,
    ADD COLUMN cycle_cap integer,
    ADD COLUMN retry_cap integer,
    ADD COLUMN executions_used integer NOT NULL DEFAULT 0,
    ADD COLUMN steps_parked integer NOT NULL DEFAULT 0,
    ADD COLUMN allowance_exhausted_cap integer,
    ADD CONSTRAINT workflow_runs_limits_check CHECK (
        node_execution_cap >= 1 AND concurrency_cap >= 1 AND cycle_cap >= 1
        AND retry_cap >= 0 AND concurrency_cap <= node_execution_cap
        AND executions_used >= 0 AND steps_parked >= 0);

-- A sharded run counts executions per shard; its row gets their sum when
-- it finishes, as with its outcome counters.
ALTER TABLE workflow.workflow_run_counters
    ADD COLUMN executions_used integer NOT NULL DEFAULT 0;

-- The runs and shards of before count the jobs they already have.
UPDATE workflow.workflow_run_counters c SET executions_used = x.n
  FROM (SELECT s.workflow_run_id, s.counter_shard, count(*)::int AS n
          FROM workflow.job_queue j
          JOIN workflow.workflow_steps s ON s.id = j.workflow_step_id
         WHERE NOT j.compensation AND s.counter_shard <> 0
         GROUP BY 1, 2) x
 WHERE c.workflow_run_id = x.workflow_run_id AND c.shard = x.counter_shard;
UPDATE workflow.workflow_runs r SET executions_used = x.n
  FROM (SELECT j.workflow_run_id, count(*)::int AS n
          FROM workflow.job_queue j
         WHERE j.workflow_step_id IS NOT NULL AND NOT j.compensation
         GROUP BY 1) x
 WHERE r.id = x.workflow_run_id
   AND (r.counter_shards = 0
        OR r.status::text IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED',
                              'RETIRED_UNRESUMABLE', 'COMPENSATING', 'COMPENSATED',
                              'COMPENSATION_FAILED'));

-- capped: a job step of a run with node_execution_cap or concurrency_cap,
-- which the cascade parks instead of releasing (like pinned, so that the
-- cascade need not read the run).  parked_at: while the step is PARKED,
-- when it was parked (its released_at); parked steps are let run oldest
-- first.  Only parking and its end change parked_at, so the updates of
-- other steps stay HOT.
ALTER TABLE workflow.workflow_steps
    ADD COLUMN capped boolean NOT NULL DEFAULT false,
    ADD COLUMN parked_at timestamptz;
CREATE INDEX workflow_steps_parked_idx ON workflow.workflow_steps
    (workflow_run_id, parked_at, id) WHERE parked_at IS NOT NULL;

-- fire_timers: the runs whose deadline passed and that it has not ended
-- yet, oldest deadline first.  Only the runs with a deadline are in it, and
-- only their sweep changes deadline_swept, so the updates of other runs
-- stay HOT.
CREATE INDEX workflow_runs_deadline_idx ON workflow.workflow_runs (deadline_at, id)
    WHERE deadline_at IS NOT NULL AND NOT deadline_swept;

-- The deadline of the run, on its steps and their jobs, so that a release
-- copies it without reading the run, and a claim skips a job whose run is
-- past its deadline without reading the run: NULL for the runs without
-- one.  Compensation jobs carry none: undoing a run is not bound by it.
ALTER TABLE workflow.workflow_steps ADD COLUMN deadline_at timestamptz;
ALTER TABLE workflow.job_queue ADD COLUMN deadline_at timestamptz;

-- The allowance evidence of a run, newest first, without reading its
-- whole history.
CREATE INDEX workflow_events_evidence_idx ON workflow.workflow_events
    (workflow_run_id, event_type, id)
    WHERE event_type IN ('execution_allowance_increased',
                         'execution_allowance_exhausted');

-- ---------------------------------------------------------------------------
-- increase_execution_allowance: a compare-and-set of node_execution_cap.

CREATE FUNCTION workflow.increase_execution_allowance(
    workflow_run_id uuid,
    expected_cap integer,
    target_cap integer,
    organization_id uuid DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'workflow_increase_execution_allowance'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION workflow.increase_execution_allowance(uuid, integer, integer, uuid) IS
'Raises a run''s node_execution_cap from expected_cap to target_cap, with '
'evidence in its history, and lets run the parked steps that now fit; '
'an identical repeat changes nothing.  Returns the cap in force.';

REVOKE ALL ON FUNCTION workflow.increase_execution_allowance(uuid, integer, integer, uuid)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION workflow.increase_execution_allowance(uuid, integer, integer, uuid)
    TO workflow_admin;

-- ---------------------------------------------------------------------------
-- verify(), now with limits: parked steps and their counter, executions
-- against the jobs, the caps kept, and the allowance evidence chain.
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
           s.released_at IS NOT NULL
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
 WHERE s.execution_kind = 'JOB' AND s.released_at IS NOT NULL
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
$verify$;


-- ===========================================================================
-- From workflow--1.9--1.10.sql
-- ===========================================================================


-- ---------------------------------------------------------------------------
-- No CHECK constraint on the rows every step writes
--
-- PostgreSQL builds the expression of each CHECK constraint of a table anew
-- in every statement that writes it (from its stored text: parsed, planned,
-- compiled), and the engine writes a job row three times and its run row
-- once for each step.  The values these constraints kept are the engine's
-- own (a run's limits and counters, a job's attempts and timeout), checked
-- with a message naming the value where they enter, from a definition or a
-- call, and written only by the engine (callers have no rights on the
-- tables): verify() below checks them instead.  workflow_run_counters keeps
-- its shard check.

ALTER TABLE workflow.workflow_runs DROP CONSTRAINT workflow_runs_limits_check;
ALTER TABLE workflow.job_queue DROP CONSTRAINT job_queue_attempts_check,
    DROP CONSTRAINT job_queue_timeout_check;

-- ---------------------------------------------------------------------------
-- verify(), now with the values the constraints kept: a run's limits and
-- counters, and each job's attempts and timeout.
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
           s.released_at IS NOT NULL
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
 WHERE s.execution_kind = 'JOB' AND s.released_at IS NOT NULL
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
$verify$;


-- ===========================================================================
-- From workflow--1.10--1.11.sql
-- ===========================================================================


-- ---------------------------------------------------------------------------
-- The parking queue
--
-- One row per PARKED step, in the order parked steps are let run
-- (parked_at, then step id).  Letting a step run deletes its row, taken
-- FOR UPDATE SKIP LOCKED: a row another transaction took and committed is
-- gone, so a transaction that read it before that commit skips it and
-- holds no lock on the step the other one started (a step's own row would
-- have a newer version to lock).  That lets a finished job step of a run
-- whose only cap is concurrency_cap hand its place to the oldest parked
-- step before the cascade and the run row, outside the section the run row
-- serializes.  The steps keep parked_at; their partial index goes.
CREATE TABLE workflow.parked_steps (
    workflow_run_id  uuid        NOT NULL,
    parked_at        timestamptz NOT NULL,
    workflow_step_id uuid        NOT NULL,
    PRIMARY KEY (workflow_run_id, parked_at, workflow_step_id)
);
COMMENT ON TABLE workflow.parked_steps IS
    'The parking queue: one row per PARKED step of a capped run, let run in (parked_at, workflow_step_id) order; written only by the engine.';
SELECT pg_catalog.pg_extension_config_dump('workflow.parked_steps', '');

INSERT INTO workflow.parked_steps (workflow_run_id, parked_at, workflow_step_id)
SELECT s.workflow_run_id, s.parked_at, s.id
  FROM workflow.workflow_steps s
 WHERE s.status::text = 'PARKED';

DROP INDEX workflow.workflow_steps_parked_idx;

ALTER TABLE workflow.parked_steps ENABLE ROW LEVEL SECURITY;
ALTER TABLE workflow.parked_steps FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON workflow.parked_steps
    USING ((SELECT workflow.my_organizations()) IS NULL
           OR workflow_run_id IN (SELECT r.id FROM workflow.workflow_runs r));

REVOKE ALL ON TABLE workflow.parked_steps FROM PUBLIC;
GRANT SELECT ON TABLE workflow.parked_steps TO workflow_reader;

-- ---------------------------------------------------------------------------
-- verify(), now with the parking queue: each parked step has its row and
-- each row its parked step; and in a run whose only cap is concurrency_cap,
-- a parked step with room is a fault only when no job step is active.
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
           s.released_at IS NOT NULL
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
 WHERE s.execution_kind = 'JOB' AND s.released_at IS NOT NULL
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
$verify$;


-- ===========================================================================
-- From workflow--1.11--1.12.sql
-- ===========================================================================


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
