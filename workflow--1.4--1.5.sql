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
