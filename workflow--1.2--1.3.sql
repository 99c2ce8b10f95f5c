-- workflow 1.2 -> 1.3: least privilege and tenants
\echo Use "ALTER EXTENSION workflow UPDATE TO '1.3'" to load this file. \quit

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
