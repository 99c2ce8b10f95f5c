-- workflow 1.1 -> 1.2: the unique (workflow_step_id, generation) of
-- job_queue indexes step jobs only
\echo Use "ALTER EXTENSION workflow UPDATE TO '1.2'" to load this file. \quit

-- A plain job has no step, and its (NULL, generation) key was never
-- checked for uniqueness, yet every status change of the job (none can be
-- HOT) wrote an entry for it.  The index keeps the same name; it takes an
-- ACCESS EXCLUSIVE lock on job_queue while it is built.
ALTER TABLE workflow.job_queue DROP CONSTRAINT job_queue_step_generation_key;
CREATE UNIQUE INDEX job_queue_step_generation_key
    ON workflow.job_queue (workflow_step_id, generation)
    WHERE workflow_step_id IS NOT NULL;
