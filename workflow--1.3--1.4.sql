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
ALTER TABLE workflow.workflow_steps
    ADD COLUMN history_gap boolean NOT NULL DEFAULT false;
ALTER TABLE workflow.workflow_runs
    ADD COLUMN history_gap boolean NOT NULL DEFAULT false;

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
