-- workflow 1.6 -> 1.7: run input, step inputs, the workflow registry,
-- blocked runs, and the operator's resume, retire and retry
\echo Use "ALTER EXTENSION workflow UPDATE TO '1.7'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- New run statuses
--
-- A run pinned to a registered workflow version is held when its pin no
-- longer holds (BLOCKED_*), and an operator may end it RETIRED_UNRESUMABLE.
-- A label added here cannot be used in this script (PostgreSQL 15): verify()
-- below compares text, never the new labels.

ALTER TYPE workflow.run_status ADD VALUE 'BLOCKED_MISSING_HANDLER';
ALTER TYPE workflow.run_status ADD VALUE 'BLOCKED_MISSING_VERSION';
ALTER TYPE workflow.run_status ADD VALUE 'BLOCKED_SIGNATURE_MISMATCH';
ALTER TYPE workflow.run_status ADD VALUE 'RETIRED_UNRESUMABLE';

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
CREATE POLICY every_row ON workflow.workflow_definitions USING (true);

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
    workflow.retry_run(uuid, uuid)
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
    workflow.retry_run(uuid, uuid)
    TO workflow_admin;
