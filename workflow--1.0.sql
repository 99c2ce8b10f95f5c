/* workflow--1.0.sql: install script for the workflow extension */

\echo Use "CREATE EXTENSION workflow" to load this file. \quit

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
    ('BLOCKED', 'ENQUEUED', 'RUNNING', 'WAITING_FOR_EXTERNAL',
     'SUCCEEDED', 'FAILED', 'CANCELED');
CREATE TYPE workflow.run_status AS ENUM
    ('RUNNING', 'WAITING_FOR_EXTERNAL', 'SUCCEEDED',
     'COMPLETED_WITH_ERRORS', 'CANCELED');
CREATE TYPE workflow.release_mode AS ENUM ('ON_SUCCESS', 'ON_TERMINAL');
CREATE TYPE workflow.execution_kind AS ENUM ('JOB', 'EXTERNAL');

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
