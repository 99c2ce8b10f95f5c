-- workflow 1.7 -> 1.8: the worker program's step key, and the view of the
-- maintenance background worker
\echo Use "ALTER EXTENSION workflow UPDATE TO '1.8'" to load this file. \quit

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
