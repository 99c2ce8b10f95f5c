-- workflow 1.4 -> 1.5: one commit per job, wake-ups
\echo Use "ALTER EXTENSION workflow UPDATE TO '1.5'" to load this file. \quit

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
