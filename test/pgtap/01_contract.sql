-- 01_contract.sql: the shape of the public contract (docs/reference.md,
-- sections 3 to 7): enum labels in order, tables and their column types,
-- the operator views and their columns, API signatures, argument names and
-- defaults, return types and languages, no STRICT function,
-- pg_extension_config_dump registration, the indexes the schema rules
-- require, and the control file's properties.  Roles, grants and row-level
-- security are in 06_privileges.sql.

CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS workflow;

\set ON_ERROR_STOP 1
SET client_min_messages = warning;

BEGIN;
SELECT plan(470);

CREATE SCHEMA wf_tap;

-- Key columns, uniqueness and predicate of every index on a table.
CREATE FUNCTION wf_tap.indexes(tbl regclass)
RETURNS TABLE (index_name text, is_unique boolean, nulls_not_distinct boolean,
               keys text[], predicate text)
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text, i.indisunique, i.indnullsnotdistinct,
           ARRAY(SELECT a.attname::text
                   FROM generate_series(0, i.indnkeyatts - 1) AS g(n)
                   JOIN pg_catalog.pg_attribute a
                     ON a.attrelid = i.indrelid AND a.attnum = i.indkey[g.n]
                  ORDER BY g.n),
           pg_catalog.pg_get_expr(i.indpred, i.indrelid)
      FROM pg_catalog.pg_index i
      JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
     WHERE i.indrelid = tbl
$$;

-- ---------------------------------------------------------------------------
-- Schema and enum types

SELECT has_schema('workflow', 'schema workflow exists');

SELECT has_enum('workflow', 'job_status', 'enum workflow.job_status exists');
SELECT enum_has_labels('workflow', 'job_status',
    ARRAY['QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELED'],
    'workflow.job_status has the contract labels in order');

SELECT has_enum('workflow', 'step_status', 'enum workflow.step_status exists');
SELECT enum_has_labels('workflow', 'step_status',
    ARRAY['BLOCKED', 'ENQUEUED', 'RUNNING', 'SLEEPING', 'WAITING_FOR_EXTERNAL',
          'SUCCEEDED', 'FAILED', 'CANCELED', 'COMPENSATING', 'COMPENSATED',
          'COMPENSATION_FAILED', 'PARKED'],
    'workflow.step_status has the contract labels in order');

SELECT has_enum('workflow', 'run_status', 'enum workflow.run_status exists');
SELECT enum_has_labels('workflow', 'run_status',
    ARRAY['RUNNING', 'WAITING_FOR_EXTERNAL', 'SUCCEEDED',
          'COMPLETED_WITH_ERRORS', 'CANCELED', 'BLOCKED_MISSING_HANDLER',
          'BLOCKED_MISSING_VERSION', 'BLOCKED_SIGNATURE_MISMATCH',
          'RETIRED_UNRESUMABLE', 'COMPENSATING', 'COMPENSATED', 'COMPENSATION_FAILED',
          'WAITING_FOR_ALLOWANCE'],
    'workflow.run_status has the contract labels in order');

SELECT has_enum('workflow', 'release_mode', 'enum workflow.release_mode exists');
SELECT enum_has_labels('workflow', 'release_mode',
    ARRAY['ON_SUCCESS', 'ON_TERMINAL'],
    'workflow.release_mode has the contract labels in order');

SELECT has_enum('workflow', 'execution_kind', 'enum workflow.execution_kind exists');
SELECT enum_has_labels('workflow', 'execution_kind',
    ARRAY['JOB', 'EXTERNAL', 'SLEEP', 'EVENT', 'REPEAT'],
    'workflow.execution_kind has the contract labels in order');

-- ---------------------------------------------------------------------------
-- Tables and columns

SELECT has_table('workflow', 'job_queue', 'table workflow.job_queue exists');
SELECT has_table('workflow', 'workflow_runs', 'table workflow.workflow_runs exists');
SELECT has_table('workflow', 'workflow_steps', 'table workflow.workflow_steps exists');
SELECT has_table('workflow', 'workflow_step_dependencies',
    'table workflow.workflow_step_dependencies exists');
SELECT has_table('workflow', 'organization_members',
    'table workflow.organization_members exists');
SELECT has_table('workflow', 'workflow_events', 'table workflow.workflow_events exists');
SELECT has_table('workflow', 'event_inbox', 'table workflow.event_inbox exists');
SELECT has_table('workflow', 'workflow_definitions',
    'table workflow.workflow_definitions exists');
SELECT has_table('workflow', 'parked_steps', 'table workflow.parked_steps exists');

CREATE TABLE wf_tap.contract_columns (
    n           serial PRIMARY KEY,
    table_name  name NOT NULL,
    column_name name NOT NULL,
    type_schema name NOT NULL,
    type_name   text NOT NULL
);

INSERT INTO wf_tap.contract_columns (table_name, column_name, type_schema, type_name)
VALUES
    ('job_queue', 'id', 'pg_catalog', 'uuid'),
    ('job_queue', 'job_type', 'pg_catalog', 'text'),
    ('job_queue', 'organization_id', 'pg_catalog', 'uuid'),
    ('job_queue', 'payload', 'pg_catalog', 'jsonb'),
    ('job_queue', 'priority', 'pg_catalog', 'integer'),
    ('job_queue', 'stage', 'pg_catalog', 'text'),
    ('job_queue', 'status', 'workflow', 'job_status'),
    ('job_queue', 'attempt', 'pg_catalog', 'integer'),
    ('job_queue', 'max_attempts', 'pg_catalog', 'integer'),
    ('job_queue', 'timeout_seconds', 'pg_catalog', 'integer'),
    ('job_queue', 'run_at', 'pg_catalog', 'timestamp with time zone'),
    ('job_queue', 'leased_until', 'pg_catalog', 'timestamp with time zone'),
    ('job_queue', 'worker_id', 'pg_catalog', 'text'),
    ('job_queue', 'lease_token', 'pg_catalog', 'uuid'),
    ('job_queue', 'last_error_code', 'pg_catalog', 'text'),
    ('job_queue', 'last_error_message', 'pg_catalog', 'text'),
    ('job_queue', 'output', 'pg_catalog', 'jsonb'),
    ('job_queue', 'workflow_run_id', 'pg_catalog', 'uuid'),
    ('job_queue', 'workflow_step_id', 'pg_catalog', 'uuid'),
    ('job_queue', 'generation', 'pg_catalog', 'integer'),
    ('job_queue', 'created_at', 'pg_catalog', 'timestamp with time zone'),
    ('job_queue', 'updated_at', 'pg_catalog', 'timestamp with time zone'),
    ('job_queue', 'started_at', 'pg_catalog', 'timestamp with time zone'),
    ('job_queue', 'finished_at', 'pg_catalog', 'timestamp with time zone'),

    ('workflow_runs', 'id', 'pg_catalog', 'uuid'),
    ('workflow_runs', 'organization_id', 'pg_catalog', 'uuid'),
    ('workflow_runs', 'name', 'pg_catalog', 'text'),
    ('workflow_runs', 'definition', 'pg_catalog', 'jsonb'),
    ('workflow_runs', 'status', 'workflow', 'run_status'),
    ('workflow_runs', 'result_step_key', 'pg_catalog', 'text'),
    ('workflow_runs', 'result', 'pg_catalog', 'jsonb'),
    ('workflow_runs', 'idempotency_key', 'pg_catalog', 'text'),
    ('workflow_runs', 'created_at', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_runs', 'updated_at', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_runs', 'finished_at', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_runs', 'input', 'pg_catalog', 'jsonb'),
    ('workflow_runs', 'workflow_name', 'pg_catalog', 'text'),
    ('workflow_runs', 'workflow_version', 'pg_catalog', 'text'),
    ('workflow_runs', 'workflow_signature', 'pg_catalog', 'text'),
    ('workflow_definitions', 'name', 'pg_catalog', 'text'),
    ('workflow_definitions', 'version', 'pg_catalog', 'text'),
    ('workflow_definitions', 'definition', 'pg_catalog', 'jsonb'),
    ('workflow_definitions', 'signature', 'pg_catalog', 'text'),
    ('workflow_definitions', 'active', 'pg_catalog', 'boolean'),

    ('workflow_steps', 'id', 'pg_catalog', 'uuid'),
    ('workflow_steps', 'workflow_run_id', 'pg_catalog', 'uuid'),
    ('workflow_steps', 'step_key', 'pg_catalog', 'text'),
    ('workflow_steps', 'execution_kind', 'workflow', 'execution_kind'),
    ('workflow_steps', 'job_type', 'pg_catalog', 'text'),
    ('workflow_steps', 'organization_id', 'pg_catalog', 'uuid'),
    ('workflow_steps', 'payload', 'pg_catalog', 'jsonb'),
    ('workflow_steps', 'priority', 'pg_catalog', 'integer'),
    ('workflow_steps', 'max_attempts', 'pg_catalog', 'integer'),
    ('workflow_steps', 'timeout_seconds', 'pg_catalog', 'integer'),
    ('workflow_steps', 'stage', 'pg_catalog', 'text'),
    ('workflow_steps', 'status', 'workflow', 'step_status'),
    ('workflow_steps', 'job_id', 'pg_catalog', 'uuid'),
    ('workflow_steps', 'released_at', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_steps', 'started_at', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_steps', 'finished_at', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_steps', 'dependency_count_total', 'pg_catalog', 'integer'),
    ('workflow_steps', 'dependency_count_pending', 'pg_catalog', 'integer'),
    ('workflow_steps', 'dependency_count_unsatisfied', 'pg_catalog', 'integer'),
    ('workflow_steps', 'status_reason', 'pg_catalog', 'text'),
    ('workflow_steps', 'last_error_code', 'pg_catalog', 'text'),
    ('workflow_steps', 'last_error_message', 'pg_catalog', 'text'),
    ('workflow_steps', 'output', 'pg_catalog', 'jsonb'),
    ('workflow_steps', 'created_at', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_steps', 'updated_at', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_steps', 'event_name', 'pg_catalog', 'text'),
    ('workflow_steps', 'sleep_seconds', 'pg_catalog', 'integer'),
    ('workflow_steps', 'sleep_until', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_steps', 'wait_timeout_seconds', 'pg_catalog', 'integer'),
    ('workflow_steps', 'start_after_seconds', 'pg_catalog', 'integer'),
    ('workflow_steps', 'wake_at', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_steps', 'parked_at', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_runs', 'node_execution_cap', 'pg_catalog', 'integer'),
    ('workflow_runs', 'concurrency_cap', 'pg_catalog', 'integer'),
    ('workflow_runs', 'cycle_cap', 'pg_catalog', 'integer'),
    ('workflow_runs', 'retry_cap', 'pg_catalog', 'integer'),
    ('workflow_runs', 'executions_used', 'pg_catalog', 'integer'),
    ('workflow_runs', 'steps_parked', 'pg_catalog', 'integer'),
    ('workflow_runs', 'deadline_at', 'pg_catalog', 'timestamp with time zone'),
    ('workflow_runs', 'status_reason', 'pg_catalog', 'text'),
    ('workflow_steps', 'deadline_at', 'pg_catalog', 'timestamp with time zone'),
    ('job_queue', 'deadline_at', 'pg_catalog', 'timestamp with time zone'),

    ('workflow_step_dependencies', 'workflow_run_id', 'pg_catalog', 'uuid'),
    ('workflow_step_dependencies', 'prerequisite_step_id', 'pg_catalog', 'uuid'),
    ('workflow_step_dependencies', 'dependent_step_id', 'pg_catalog', 'uuid'),
    ('workflow_step_dependencies', 'release_mode', 'workflow', 'release_mode'),

    ('organization_members', 'role', 'pg_catalog', 'regrole'),
    ('organization_members', 'organization_id', 'pg_catalog', 'uuid'),
    ('organization_members', 'created_at', 'pg_catalog', 'timestamp with time zone'),

    ('workflow_events', 'id', 'pg_catalog', 'bigint'),
    ('workflow_events', 'workflow_run_id', 'pg_catalog', 'uuid'),
    ('workflow_events', 'step_key', 'pg_catalog', 'text'),
    ('workflow_events', 'event_type', 'pg_catalog', 'text'),
    ('workflow_events', 'detail', 'pg_catalog', 'jsonb'),
    ('workflow_events', 'created_at', 'pg_catalog', 'timestamp with time zone'),

    ('event_inbox', 'id', 'pg_catalog', 'uuid'),
    ('event_inbox', 'workflow_run_id', 'pg_catalog', 'uuid'),
    ('event_inbox', 'organization_id', 'pg_catalog', 'uuid'),
    ('event_inbox', 'event_name', 'pg_catalog', 'text'),
    ('event_inbox', 'payload', 'pg_catalog', 'jsonb'),
    ('event_inbox', 'dedupe_key', 'pg_catalog', 'text'),
    ('event_inbox', 'created_at', 'pg_catalog', 'timestamp with time zone'),
    ('event_inbox', 'consumed_at', 'pg_catalog', 'timestamp with time zone'),
    ('event_inbox', 'consumed_by_step_key', 'pg_catalog', 'text');

-- 108 columns: has_column for each, then col_type_is for each.
SELECT has_column('workflow', c.table_name, c.column_name,
                  format('workflow.%s has column %s', c.table_name, c.column_name))
  FROM (SELECT * FROM wf_tap.contract_columns ORDER BY n) c;

SELECT col_type_is('workflow', c.table_name, c.column_name, c.type_schema, c.type_name,
                   format('workflow.%s.%s is %s.%s', c.table_name, c.column_name,
                          c.type_schema, c.type_name))
  FROM (SELECT * FROM wf_tap.contract_columns ORDER BY n) c;

-- Every table of runs and jobs carries workflow_run_id (job_queue too, NULL
-- for plain jobs); workflow_runs is keyed by the run id itself, and
-- organization_members (roles and their organizations) and
-- workflow_definitions (the registry, shared by every run) hold no run data;
-- workflow_continuations links two runs, successor_run_id and
-- predecessor_run_id.
SELECT is_empty($$
    SELECT c.relname FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'workflow'::regnamespace AND c.relkind IN ('r', 'p')
       AND c.oid NOT IN ('workflow.workflow_runs'::regclass,
                         'workflow.organization_members'::regclass,
                         'workflow.workflow_definitions'::regclass,
                         'workflow.workflow_continuations'::regclass)
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                        WHERE a.attrelid = c.oid AND a.attname = 'workflow_run_id'
                          AND NOT a.attisdropped)
$$, 'every table of schema workflow but the membership table and the registry carries workflow_run_id');
SELECT col_is_pk('workflow', 'workflow_definitions', ARRAY['name', 'version'],
    'workflow.workflow_definitions is keyed by (name, version)');

SELECT col_is_pk('workflow', 'job_queue', 'id', 'workflow.job_queue.id is the primary key');
SELECT col_is_pk('workflow', 'workflow_runs', 'id', 'workflow.workflow_runs.id is the primary key');
SELECT col_is_pk('workflow', 'workflow_steps', 'id', 'workflow.workflow_steps.id is the primary key');
SELECT col_is_pk('workflow', 'organization_members', ARRAY['role', 'organization_id'],
    'workflow.organization_members is keyed by (role, organization_id)');
SELECT col_default_is('workflow', 'organization_members', 'created_at', 'now()',
    'organization_members.created_at defaults to now()');
SELECT col_is_pk('workflow', 'workflow_events', 'id',
    'workflow.workflow_events.id is the primary key');
SELECT is((SELECT s.seqtypid::regtype::text || ' owned by ' || d.refobjid::regclass::text
                  || '.' || a.attname
             FROM pg_catalog.pg_sequence s
             JOIN pg_catalog.pg_depend d ON d.classid = 'pg_class'::regclass
                  AND d.objid = s.seqrelid AND d.deptype = 'a'
             JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
            WHERE s.seqrelid = 'workflow.workflow_events_id_seq'::regclass),
          'bigint owned by workflow.workflow_events.id',
          'workflow_events.id comes from one global bigint sequence');
SELECT is((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = 'workflow.workflow_events'::regclass
              AND a.attnum > 0 AND NOT a.attisdropped AND NOT a.attnotnull),
          ARRAY['step_key'],
          'every column of workflow_events but step_key is NOT NULL');
SELECT is((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = 'workflow.organization_members'::regclass
              AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull),
          ARRAY['role', 'organization_id', 'created_at'],
          'every column of organization_members is NOT NULL');

-- ---------------------------------------------------------------------------
-- The operator views (1.4): their columns and types in order, read with the
-- rights of the role that reads them, so that row-level security applies.

CREATE TABLE wf_tap.views (n int PRIMARY KEY, vname name NOT NULL, columns text[] NOT NULL);
INSERT INTO wf_tap.views VALUES
    (1, 'run_overview', ARRAY[
        'workflow_run_id uuid', 'organization_id uuid', 'name text',
        'status workflow.run_status', 'steps_total integer', 'steps_active integer',
        'steps_waiting integer', 'steps_blocked integer', 'steps_succeeded integer',
        'steps_failed integer', 'steps_canceled integer', 'progress numeric',
        'created_at timestamp with time zone', 'finished_at timestamp with time zone',
        'duration interval']),
    (2, 'queue_stats', ARRAY[
        'job_type text', 'status workflow.job_status', 'jobs bigint', 'due bigint',
        'oldest_due_age interval', 'expired_leases bigint']),
    (3, 'step_timeline', ARRAY[
        'workflow_run_id uuid', 'step_key text', 'kind workflow.execution_kind',
        'status workflow.step_status', 'attempts integer',
        'released_at timestamp with time zone', 'started_at timestamp with time zone',
        'finished_at timestamp with time zone', 'waited interval', 'ran interval']),
    (4, 'maintenance_status', ARRAY[
        'database text', 'pid integer', 'state text', 'last_pass_at timestamp with time zone',
        'last_pass_ms double precision', 'passes bigint', 'last_reaped bigint',
        'last_fired bigint', 'last_purged bigint', 'last_vacuumed text', 'reaped bigint',
        'fired bigint', 'purged bigint', 'vacuums bigint',
        'last_vacuum_at timestamp with time zone', 'errors bigint',
        'last_error_at timestamp with time zone', 'last_error text']);

-- 4 views: has_view, the columns, security_invoker.
SELECT has_view('workflow', v.vname, format('view workflow.%s exists', v.vname))
  FROM wf_tap.views v ORDER BY v.n;

SELECT is((SELECT array_agg(a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
                            ORDER BY a.attnum)
             FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = to_regclass('workflow.' || v.vname)
              AND a.attnum > 0 AND NOT a.attisdropped),
          v.columns,
          format('workflow.%s has the documented columns and types, in order', v.vname))
  FROM wf_tap.views v ORDER BY v.n;

SELECT is((SELECT c.reloptions FROM pg_catalog.pg_class c
            WHERE c.oid = to_regclass('workflow.' || v.vname)),
          ARRAY['security_invoker=true'],
          format('workflow.%s reads the tables with its reader''s rights (security_invoker)',
                 v.vname))
  FROM wf_tap.views v ORDER BY v.n;

-- ---------------------------------------------------------------------------
-- API functions: existence with exact argument types, return type, and the
-- documented argument names and defaults.

CREATE TABLE wf_tap.api (
    n         serial PRIMARY KEY,
    fname     name NOT NULL,
    args      name[] NOT NULL,
    returns   text NOT NULL,
    arguments text NOT NULL
);

INSERT INTO wf_tap.api (fname, args, returns, arguments) VALUES
    ('enqueue',
     ARRAY['text', 'jsonb', 'integer', 'timestamp with time zone', 'integer',
           'integer', 'uuid', 'text'],
     'uuid',
     'job_type text, payload jsonb DEFAULT ''{}''::jsonb, priority integer DEFAULT 0, '
     'run_at timestamp with time zone DEFAULT now(), max_attempts integer DEFAULT 3, '
     'timeout_seconds integer DEFAULT 300, organization_id uuid DEFAULT NULL::uuid, '
     'stage text DEFAULT NULL::text'),
    ('claim',
     ARRAY['text', 'text[]', 'integer', 'uuid', 'text'],
     'setof workflow.job_queue',
     'worker_id text, job_types text[] DEFAULT NULL::text[], batch_size integer DEFAULT 1, '
     'organization_id uuid DEFAULT NULL::uuid, stage text DEFAULT NULL::text'),
    ('reap_expired', ARRAY[]::name[], 'integer', ''),
    ('heartbeat', ARRAY['uuid', 'uuid'], 'timestamp with time zone',
     'job_id uuid, lease_token uuid'),
    ('complete_job', ARRAY['uuid', 'uuid', 'jsonb'], 'void',
     'job_id uuid, lease_token uuid, output jsonb DEFAULT NULL::jsonb'),
    ('complete_and_claim',
     ARRAY['uuid', 'uuid', 'jsonb', 'text', 'text[]', 'integer', 'uuid', 'text'],
     'setof workflow.job_queue',
     'job_id uuid, lease_token uuid, output jsonb, worker_id text, '
     'job_types text[] DEFAULT NULL::text[], batch_size integer DEFAULT 1, '
     'organization_id uuid DEFAULT NULL::uuid, stage text DEFAULT NULL::text'),
    ('fail_job', ARRAY['uuid', 'uuid', 'text', 'text', 'boolean'], 'void',
     'job_id uuid, lease_token uuid, error_code text, error_message text, '
     'retryable boolean DEFAULT true'),
    ('release_job', ARRAY['uuid', 'uuid'], 'void', 'job_id uuid, lease_token uuid'),
    ('cancel_job', ARRAY['uuid', 'text'], 'void',
     'job_id uuid, reason text DEFAULT NULL::text'),
    ('complete_jobs', ARRAY['uuid[]', 'uuid[]', 'jsonb[]'], 'setof uuid',
     'job_ids uuid[], lease_tokens uuid[], outputs jsonb[] DEFAULT NULL::jsonb[]'),
    ('fail_jobs', ARRAY['uuid[]', 'uuid[]', 'text[]', 'text[]', 'boolean'], 'setof uuid',
     'job_ids uuid[], lease_tokens uuid[], error_codes text[], error_messages text[], '
     'retryable boolean DEFAULT true'),
    ('start_run', ARRAY['jsonb', 'uuid', 'text', 'jsonb'], 'uuid',
     'definition jsonb, organization_id uuid DEFAULT NULL::uuid, '
     'idempotency_key text DEFAULT NULL::text, input jsonb DEFAULT NULL::jsonb'),
    ('complete_external_step',
     ARRAY['uuid', 'text', 'workflow.step_status', 'jsonb', 'text', 'text', 'text', 'uuid'],
     'workflow.workflow_steps',
     'workflow_run_id uuid, step_key text, status workflow.step_status, '
     'output jsonb DEFAULT NULL::jsonb, status_reason text DEFAULT NULL::text, '
     'error_code text DEFAULT NULL::text, error_message text DEFAULT NULL::text, '
     'organization_id uuid DEFAULT NULL::uuid'),
    ('cancel_run', ARRAY['uuid', 'text', 'uuid'], 'workflow.run_status',
     'workflow_run_id uuid, reason text DEFAULT NULL::text, '
     'organization_id uuid DEFAULT NULL::uuid'),
    ('uuid_v7', ARRAY[]::name[], 'uuid', ''),
    ('verify', ARRAY['uuid'], 'setof record', 'workflow_run_id uuid DEFAULT NULL::uuid'),
    ('run_counters', ARRAY['uuid'], 'setof record', 'workflow_run_id uuid'),
    ('purge', ARRAY['interval', 'integer'], 'bigint', 'older_than interval, batch_size integer'),
    ('grant_organization', ARRAY['regrole', 'uuid'], 'boolean',
     'role regrole, organization_id uuid'),
    ('revoke_organization', ARRAY['regrole', 'uuid'], 'boolean',
     'role regrole, organization_id uuid'),
    ('my_organizations', ARRAY[]::name[], 'uuid[]', ''),
    ('run_history', ARRAY['uuid', 'uuid'], 'setof workflow.workflow_events',
     'workflow_run_id uuid, organization_id uuid DEFAULT NULL::uuid'),
    ('run_graph', ARRAY['uuid', 'text', 'uuid'], 'text',
     'workflow_run_id uuid, format text DEFAULT ''dot''::text, '
     'organization_id uuid DEFAULT NULL::uuid'),
    ('send_event', ARRAY['uuid', 'text', 'jsonb', 'text', 'uuid'], 'workflow.event_inbox',
     'workflow_run_id uuid, event_name text, payload jsonb DEFAULT NULL::jsonb, '
     'dedupe_key text DEFAULT NULL::text, organization_id uuid DEFAULT NULL::uuid'),
    ('fire_timers', ARRAY['integer'], 'integer', 'batch_size integer DEFAULT 1000'),
    ('job_inputs', ARRAY['uuid', 'uuid'], 'jsonb', 'job_id uuid, lease_token uuid'),
    ('register_workflow', ARRAY['text', 'text', 'jsonb', 'boolean'], 'text',
     'name text, version text, definition jsonb, activate boolean DEFAULT true'),
    ('unregister_workflow', ARRAY['text', 'text'], 'void', 'name text, version text'),
    ('start_workflow', ARRAY['text', 'jsonb', 'uuid', 'text'], 'uuid',
     'name text, input jsonb DEFAULT NULL::jsonb, organization_id uuid DEFAULT NULL::uuid, '
     'idempotency_key text DEFAULT NULL::text'),
    ('compensate_run', ARRAY['uuid', 'text', 'uuid'], 'workflow.run_status',
     'workflow_run_id uuid, reason text DEFAULT NULL::text, '
     'organization_id uuid DEFAULT NULL::uuid'),
    ('resume_run', ARRAY['uuid', 'uuid'], 'workflow.run_status',
     'workflow_run_id uuid, organization_id uuid DEFAULT NULL::uuid'),
    ('retire_run', ARRAY['uuid', 'text', 'uuid'], 'workflow.run_status',
     'workflow_run_id uuid, reason text, organization_id uuid DEFAULT NULL::uuid'),
    ('retry_run', ARRAY['uuid', 'uuid'], 'workflow.run_status',
     'workflow_run_id uuid, organization_id uuid DEFAULT NULL::uuid'),
    ('job_step_key', ARRAY['uuid', 'uuid'], 'text', 'job_id uuid, lease_token uuid'),
    ('maintenance_passes', ARRAY[]::name[], 'setof record',
     'OUT database text, OUT pid integer, OUT state text, '
     'OUT last_pass_at timestamp with time zone, OUT last_pass_ms double precision, '
     'OUT passes bigint, OUT last_reaped bigint, OUT last_fired bigint, '
     'OUT last_purged bigint, OUT last_vacuumed text, OUT reaped bigint, OUT fired bigint, '
     'OUT purged bigint, OUT vacuums bigint, OUT last_vacuum_at timestamp with time zone, '
     'OUT errors bigint, OUT last_error_at timestamp with time zone, OUT last_error text'),
    ('increase_execution_allowance', ARRAY['uuid', 'integer', 'integer', 'uuid'], 'integer',
     'workflow_run_id uuid, expected_cap integer, target_cap integer, '
     'organization_id uuid DEFAULT NULL::uuid');

-- 36 functions: has_function, function_returns, then the argument list.
SELECT has_function('workflow', a.fname, a.args,
                    format('function workflow.%s(%s) exists', a.fname,
                           array_to_string(a.args, ', ')))
  FROM (SELECT * FROM wf_tap.api ORDER BY n) a;

SELECT function_returns('workflow', a.fname, a.args, a.returns,
                        format('workflow.%s(%s) returns %s', a.fname,
                               array_to_string(a.args, ', '), a.returns))
  FROM (SELECT * FROM wf_tap.api ORDER BY n) a;

SELECT is(pg_catalog.pg_get_function_arguments(
              to_regprocedure(format('workflow.%s(%s)', a.fname, array_to_string(a.args, ',')))),
          a.arguments,
          format('workflow.%s has the documented argument names and defaults', a.fname))
  FROM (SELECT * FROM wf_tap.api ORDER BY n) a;

-- Each API name has exactly one overload, so named-argument calls resolve.
SELECT is_empty($$
    SELECT p.proname FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'workflow'::regnamespace
       AND p.proname IN (SELECT fname FROM wf_tap.api)
     GROUP BY p.proname HAVING count(*) > 1
$$, 'no API function is overloaded');

-- No function is STRICT (a NULL argument must raise, not return NULL).
SELECT is_empty($$
    SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'workflow'::regnamespace AND p.proisstrict
$$, 'no function in schema workflow is STRICT');

SELECT is((SELECT count(*)::int FROM wf_tap.api a
             JOIN pg_catalog.pg_proc p
               ON p.oid = to_regprocedure(format('workflow.%s(%s)', a.fname,
                                                 array_to_string(a.args, ',')))
            WHERE NOT p.proisstrict),
          36, 'all 36 API functions are present and not STRICT');

-- verify() reads only: it is STABLE and returns the documented columns.
SELECT is((SELECT p.provolatile::text || ':' ||
                  pg_catalog.pg_get_function_result(p.oid)
             FROM pg_catalog.pg_proc p
            WHERE p.oid = 'workflow.verify(uuid)'::regprocedure),
          's:TABLE(workflow_run_id uuid, step_key text, problem text, expected text, actual text)',
          'verify() is STABLE and returns (workflow_run_id, step_key, problem, expected, actual)');

-- Language and volatility of every API function: C, except verify() (SQL);
-- run_counters() is C since 1.3 (it reads as the owner, for callers with
-- no table rights); run_graph() (1.4) reads only, and is STABLE.
CREATE TABLE wf_tap.api_kind (fname name PRIMARY KEY, lang name NOT NULL,
                              volatility "char" NOT NULL);
INSERT INTO wf_tap.api_kind VALUES
    ('enqueue', 'c', 'v'), ('claim', 'c', 'v'), ('reap_expired', 'c', 'v'),
    ('heartbeat', 'c', 'v'), ('complete_job', 'c', 'v'), ('fail_job', 'c', 'v'),
    ('release_job', 'c', 'v'), ('cancel_job', 'c', 'v'), ('complete_jobs', 'c', 'v'),
    ('fail_jobs', 'c', 'v'), ('start_run', 'c', 'v'), ('complete_external_step', 'c', 'v'),
    ('cancel_run', 'c', 'v'), ('uuid_v7', 'c', 'v'), ('verify', 'sql', 's'),
    ('run_counters', 'c', 's'), ('purge', 'c', 'v'), ('grant_organization', 'c', 'v'),
    ('revoke_organization', 'c', 'v'), ('my_organizations', 'c', 's'),
    ('run_history', 'c', 's'),
    ('run_graph', 'c', 's'),
    ('complete_and_claim', 'c', 'v'),
    ('send_event', 'c', 'v'),
    ('fire_timers', 'c', 'v'),
    ('job_inputs', 'c', 'v'), ('register_workflow', 'c', 'v'),
    ('unregister_workflow', 'c', 'v'), ('start_workflow', 'c', 'v'),
    ('compensate_run', 'c', 'v'), ('resume_run', 'c', 'v'), ('retire_run', 'c', 'v'),
    ('retry_run', 'c', 'v'), ('job_step_key', 'c', 'v'), ('maintenance_passes', 'c', 'v'),
    ('increase_execution_allowance', 'c', 'v');

SELECT is((SELECT l.lanname::text || ':' || p.provolatile::text
             FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
            WHERE p.oid = to_regprocedure(format('workflow.%s(%s)', a.fname,
                                                 array_to_string(a.args, ',')))),
          k.lang::text || ':' || k.volatility::text,
          format('workflow.%s is LANGUAGE %s, %s', a.fname, k.lang,
                 CASE k.volatility WHEN 'v' THEN 'VOLATILE' WHEN 's' THEN 'STABLE'
                                   ELSE 'IMMUTABLE' END))
  FROM (SELECT * FROM wf_tap.api ORDER BY n) a JOIN wf_tap.api_kind k USING (fname)
 ORDER BY a.n;

SELECT is((SELECT pg_catalog.pg_get_function_result(p.oid) FROM pg_catalog.pg_proc p
            WHERE p.oid = 'workflow.run_counters(uuid)'::regprocedure),
          'TABLE(steps_total integer, steps_active integer, steps_waiting integer, '
          'steps_blocked integer, steps_succeeded integer, steps_failed integer, '
          'steps_canceled integer)',
          'run_counters() returns the seven step counts');

-- A NULL argument raises instead of returning NULL (what STRICT would do).
SELECT throws_ok($$SELECT workflow.heartbeat(NULL, NULL)$$, '22023', NULL,
    'heartbeat(NULL, NULL) raises instead of returning NULL');
SELECT throws_ok($$SELECT workflow.start_run(NULL)$$, '22023', NULL,
    'start_run(NULL) raises instead of returning NULL');
SELECT throws_ok($$SELECT workflow.cancel_run(NULL)$$, '22023', NULL,
    'cancel_run(NULL) raises instead of returning NULL');
SELECT throws_ok($$SELECT workflow.run_graph(NULL)$$, '22023', NULL,
    'run_graph(NULL) raises instead of returning NULL');

-- ---------------------------------------------------------------------------
-- pg_extension_config_dump: pg_dump keeps every table's data.

SELECT ok((SELECT 'workflow.job_queue'::regclass::oid = ANY (e.extconfig)
             FROM pg_catalog.pg_extension e WHERE e.extname = 'workflow'),
          'workflow.job_queue is registered with pg_extension_config_dump');
SELECT ok((SELECT 'workflow.workflow_runs'::regclass::oid = ANY (e.extconfig)
             FROM pg_catalog.pg_extension e WHERE e.extname = 'workflow'),
          'workflow.workflow_runs is registered with pg_extension_config_dump');
SELECT ok((SELECT 'workflow.workflow_steps'::regclass::oid = ANY (e.extconfig)
             FROM pg_catalog.pg_extension e WHERE e.extname = 'workflow'),
          'workflow.workflow_steps is registered with pg_extension_config_dump');
SELECT ok((SELECT 'workflow.workflow_step_dependencies'::regclass::oid = ANY (e.extconfig)
             FROM pg_catalog.pg_extension e WHERE e.extname = 'workflow'),
          'workflow.workflow_step_dependencies is registered with pg_extension_config_dump');
SELECT ok((SELECT 'workflow.organization_members'::regclass::oid = ANY (e.extconfig)
             FROM pg_catalog.pg_extension e WHERE e.extname = 'workflow'),
          'workflow.organization_members is registered with pg_extension_config_dump');
SELECT is((SELECT array_agg(c::regclass::text ORDER BY c::regclass::text)
             FROM pg_catalog.pg_extension e, unnest(e.extconfig) AS c
            WHERE e.extname = 'workflow'),
          ARRAY['workflow.event_inbox', 'workflow.job_queue', 'workflow.organization_members',
                'workflow.parked_steps', 'workflow.step_completion_seq',
                'workflow.workflow_continuations', 'workflow.workflow_definitions',
                'workflow.workflow_events', 'workflow.workflow_events_id_seq',
                'workflow.workflow_run_counters', 'workflow.workflow_runs',
                'workflow.workflow_step_dependencies', 'workflow.workflow_steps'],
          'the eleven tables, the event id sequence and the completion sequence, and only they, are registered with pg_extension_config_dump');
SELECT is_empty($$
    SELECT c.oid::regclass::text FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'workflow'::regnamespace AND c.relkind IN ('r', 'p')
       AND c.oid <> ALL (SELECT unnest(e.extconfig) FROM pg_catalog.pg_extension e
                          WHERE e.extname = 'workflow')
$$, 'every table of schema workflow is registered with pg_extension_config_dump');
SELECT is((SELECT array_agg(x ORDER BY x) FROM unnest(
              (SELECT e.extcondition FROM pg_catalog.pg_extension e
                WHERE e.extname = 'workflow')) AS x),
          ARRAY['', '', '', '', '', '', '', '', '', '', '', '', ''],
          'all eleven tables and the two sequences are dumped whole (no filter condition)');

-- ---------------------------------------------------------------------------
-- Indexes and constraints the schema rules require.

-- (partial on step jobs since 1.2: a plain job's NULL key is never checked)
SELECT ok(EXISTS (SELECT 1 FROM wf_tap.indexes('workflow.job_queue')
                   WHERE is_unique AND predicate = '(workflow_step_id IS NOT NULL)'
                     AND keys = ARRAY['workflow_step_id', 'generation']),
          'job_queue has a unique index on (workflow_step_id, generation) of step jobs');

-- The unique index really rejects a second job for one step release.
INSERT INTO workflow.job_queue (job_type, workflow_step_id, generation)
VALUES ('contract.dup', '00000000-0000-7000-8000-0000000000aa', 0);
SELECT throws_ok($$
    INSERT INTO workflow.job_queue (job_type, workflow_step_id, generation)
    VALUES ('contract.dup', '00000000-0000-7000-8000-0000000000aa', 0)
$$, '23505', NULL, 'a second job for the same (workflow_step_id, generation) is rejected');
SELECT lives_ok($$
    INSERT INTO workflow.job_queue (job_type, workflow_step_id, generation)
    VALUES ('contract.dup', '00000000-0000-7000-8000-0000000000aa', 1)
$$, 'the same step with another generation is accepted');
SELECT lives_ok($$
    SELECT workflow.enqueue('contract.plain'), workflow.enqueue('contract.plain')
$$, 'plain jobs (no step) do not collide on the step-release index');

SELECT ok(EXISTS (SELECT 1 FROM wf_tap.indexes('workflow.workflow_step_dependencies')
                   WHERE keys[1] = 'prerequisite_step_id' AND predicate IS NULL),
          'edges are indexed by prerequisite_step_id (the cascade)');
SELECT ok(EXISTS (SELECT 1 FROM wf_tap.indexes('workflow.workflow_step_dependencies')
                   WHERE keys[1:2] = ARRAY['workflow_run_id', 'dependent_step_id']
                     AND predicate IS NULL),
          'edges are indexed by (workflow_run_id, dependent_step_id)');

SELECT ok(EXISTS (SELECT 1 FROM wf_tap.indexes('workflow.workflow_runs')
                   WHERE is_unique AND nulls_not_distinct
                     AND keys = ARRAY['organization_id', 'idempotency_key']
                     AND predicate = '(idempotency_key IS NOT NULL)'),
          'workflow_runs has a unique (organization_id, idempotency_key) NULLS NOT DISTINCT '
          'index WHERE idempotency_key IS NOT NULL');

SELECT ok(EXISTS (SELECT 1 FROM wf_tap.indexes('workflow.job_queue')
                   WHERE keys = ARRAY['id']
                     AND predicate = '(status = ''RUNNING''::workflow.job_status)'),
          'job_queue has a partial index on id WHERE status = RUNNING (expiry sweep)');

SELECT is_empty($$
    SELECT i.indexrelid::regclass::text FROM pg_catalog.pg_index i
     WHERE i.indrelid = 'workflow.job_queue'::regclass
       AND ((SELECT a.attnum FROM pg_catalog.pg_attribute a
              WHERE a.attrelid = i.indrelid AND a.attname = 'leased_until') = ANY (i.indkey)
            OR pg_catalog.pg_get_expr(i.indexprs, i.indrelid) LIKE '%leased_until%'
            OR pg_catalog.pg_get_expr(i.indpred, i.indrelid) LIKE '%leased_until%')
$$, 'leased_until is in no index, key, INCLUDE, expression or predicate (heartbeats stay HOT)');

SELECT ok(EXISTS (SELECT 1 FROM pg_catalog.pg_class c, unnest(c.reloptions) AS o
                   WHERE c.oid = 'workflow.job_queue'::regclass
                     AND o LIKE 'fillfactor=%'
                     AND split_part(o, '=', 2)::int < 100),
          'job_queue has a fillfactor below 100 (room for HOT heartbeats)');

SELECT is_empty($$
    SELECT index_name FROM wf_tap.indexes('workflow.workflow_steps')
     WHERE 'status' = ANY (keys)
$$, 'workflow_steps has no index on status');

SELECT is_empty($$
    SELECT c.conname FROM pg_catalog.pg_constraint c
     WHERE c.contype = 'f'
       AND (c.conrelid = 'workflow.job_queue'::regclass
            OR c.confrelid = 'workflow.workflow_runs'::regclass)
$$, 'no foreign key from job_queue, and none to workflow_runs');

-- ---------------------------------------------------------------------------
-- Ids: time-ordered version 7 uuids from workflow.uuid_v7().

SELECT col_default_is('workflow', 'job_queue', 'id', 'workflow.uuid_v7()',
    'job_queue.id defaults to workflow.uuid_v7()');

SELECT is((SELECT count(*)::int FROM (
              SELECT u FROM (SELECT workflow.uuid_v7() AS u FROM generate_series(1, 500)) s
           ) t
           WHERE substr(u::text, 15, 1) = '7' AND substr(u::text, 20, 1) IN ('8', '9', 'a', 'b')),
          500, 'uuid_v7() returns version 7, RFC variant uuids');

SELECT ok((SELECT bool_and(prev < u) FROM (
              SELECT u, lag(u) OVER (ORDER BY n) AS prev
                FROM (SELECT n, workflow.uuid_v7() AS u
                        FROM generate_series(1, 1000) AS g(n)) s
           ) t WHERE prev IS NOT NULL),
          'consecutive uuid_v7() values in a backend are strictly increasing');

SELECT ok((SELECT abs(('x' || lpad(replace(substr(u::text, 1, 13), '-', ''), 16, '0'))::bit(64)::bigint
                      - (extract(epoch FROM clock_timestamp()) * 1000)::bigint) < 60000
             FROM (SELECT workflow.uuid_v7() AS u) s),
          'the first 48 bits of uuid_v7() are the current Unix time in milliseconds');

SELECT ok((SELECT substr(workflow.enqueue('contract.v7')::text, 15, 1) = '7'),
          'enqueue returns a version 7 id');

SELECT ok((SELECT substr(workflow.start_run('{"steps": [{"key": "a", "job_type": "contract.v7"}]}')::text,
                         15, 1) = '7'),
          'start_run returns a version 7 id');

SELECT is((SELECT count(*)::int FROM workflow.workflow_steps s
            WHERE s.job_type = 'contract.v7' AND substr(s.id::text, 15, 1) = '7'
              AND substr(s.job_id::text, 15, 1) = '7'),
          1, 'step ids and their job ids are version 7');

-- Plain jobs carry a NULL workflow_run_id and generation 0; step jobs carry the run.
SELECT is((SELECT row(j.workflow_run_id, j.workflow_step_id, j.generation)::text
             FROM workflow.job_queue j WHERE j.job_type = 'contract.v7'
              AND j.workflow_step_id IS NULL),
          row(NULL::uuid, NULL::uuid, 0)::text,
          'a plain job has no run, no step and generation 0');
SELECT is((SELECT count(*)::int FROM workflow.job_queue j
             JOIN workflow.workflow_steps s ON s.job_id = j.id
            WHERE j.job_type = 'contract.v7' AND j.workflow_step_id = s.id
              AND j.workflow_run_id = s.workflow_run_id AND j.generation = 0),
          1, 'a step job carries its run id, its step id and generation 0');

-- ---------------------------------------------------------------------------
-- Control file and installation.

SELECT is((SELECT default_version FROM pg_catalog.pg_available_extensions
            WHERE name = 'workflow'),
          '1.12', 'workflow is available with default version 1.12');
SELECT is((SELECT row(v.superuser, v.trusted, v.relocatable, v.schema::text)::text
             FROM pg_catalog.pg_available_extension_versions v
            WHERE v.name = 'workflow' AND v.version = '1.12'),
          row(true, false, false, 'workflow')::text,
          'control file: superuser = true, trusted = false, relocatable = false, schema = workflow');
SELECT is((SELECT e.extrelocatable FROM pg_catalog.pg_extension e WHERE e.extname = 'workflow'),
          false, 'the installed extension is not relocatable');
SELECT is((SELECT e.extnamespace::regnamespace::text FROM pg_catalog.pg_extension e
            WHERE e.extname = 'workflow'),
          'workflow', 'the installed extension lives in schema workflow');
SELECT is((SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'workflow'),
          '1.12', 'the installed version is 1.12');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.0' AND p.target = '1.2'),
          '1.0--1.1--1.2', 'an installed 1.0 updates to 1.2 through 1.1');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.1' AND p.target = '1.2'),
          '1.1--1.2', 'an installed 1.1 updates to 1.2 in one step');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.0' AND p.target = '1.3'),
          '1.0--1.1--1.2--1.3', 'an installed 1.0 updates to 1.3 through 1.1 and 1.2');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.2' AND p.target = '1.3'),
          '1.2--1.3', 'an installed 1.2 updates to 1.3 in one step');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.0' AND p.target = '1.4'),
          '1.0--1.1--1.2--1.3--1.4', 'an installed 1.0 updates to 1.4 through 1.1, 1.2 and 1.3');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.3' AND p.target = '1.4'),
          '1.3--1.4', 'an installed 1.3 updates to 1.4 in one step');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.0' AND p.target = '1.5'),
          '1.0--1.1--1.2--1.3--1.4--1.5', 'an installed 1.0 updates to 1.5 through 1.1, 1.2, 1.3 and 1.4');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.4' AND p.target = '1.5'),
          '1.4--1.5', 'an installed 1.4 updates to 1.5 in one step');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.0' AND p.target = '1.6'),
          '1.0--1.1--1.2--1.3--1.4--1.5--1.6',
          'an installed 1.0 updates to 1.6 through 1.1, 1.2, 1.3, 1.4 and 1.5');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.5' AND p.target = '1.6'),
          '1.5--1.6', 'an installed 1.5 updates to 1.6 in one step');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.0' AND p.target = '1.7'),
          '1.0--1.1--1.2--1.3--1.4--1.5--1.6--1.7',
          'an installed 1.0 updates to 1.7 through 1.1, 1.2, 1.3, 1.4, 1.5 and 1.6');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.6' AND p.target = '1.7'),
          '1.6--1.7', 'an installed 1.6 updates to 1.7 in one step');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.0' AND p.target = '1.8'),
          '1.0--1.1--1.2--1.3--1.4--1.5--1.6--1.7--1.8',
          'an installed 1.0 updates to 1.8 through 1.1, 1.2, 1.3, 1.4, 1.5, 1.6 and 1.7');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.7' AND p.target = '1.8'),
          '1.7--1.8', 'an installed 1.7 updates to 1.8 in one step');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.0' AND p.target = '1.9'),
          '1.0--1.1--1.2--1.3--1.4--1.5--1.6--1.7--1.8--1.9',
          'an installed 1.0 updates to 1.9 through 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7 and 1.8');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.8' AND p.target = '1.9'),
          '1.8--1.9', 'an installed 1.8 updates to 1.9 in one step');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.0' AND p.target = '1.10'),
          '1.0--1.1--1.2--1.3--1.4--1.5--1.6--1.7--1.8--1.9--1.10',
          'an installed 1.0 updates to 1.10 through 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8 and 1.9');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.9' AND p.target = '1.10'),
          '1.9--1.10', 'an installed 1.9 updates to 1.10 in one step');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.0' AND p.target = '1.11'),
          '1.0--1.1--1.2--1.3--1.4--1.5--1.6--1.7--1.8--1.9--1.10--1.11',
          'an installed 1.0 updates to 1.11 through 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9 and 1.10');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.10' AND p.target = '1.11'),
          '1.10--1.11', 'an installed 1.10 updates to 1.11 in one step');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.0' AND p.target = '1.12'),
          '1.0--1.1--1.2--1.3--1.4--1.5--1.6--1.7--1.8--1.9--1.10--1.11--1.12',
          'an installed 1.0 updates to 1.12 through 1.1 to 1.11');
SELECT is((SELECT p.path FROM pg_catalog.pg_extension_update_paths('workflow') p
            WHERE p.source = '1.11' AND p.target = '1.12'),
          '1.11--1.12', 'an installed 1.11 updates to 1.12 in one step');
SELECT is((SELECT array_agg(v.version::text
                            ORDER BY pg_catalog.string_to_array(v.version::text, '.')::int[])
             FROM pg_catalog.pg_available_extension_versions v WHERE v.name = 'workflow'),
          ARRAY['1.0', '1.1', '1.2', '1.3', '1.4', '1.5', '1.6', '1.7', '1.8', '1.9', '1.10', '1.11',
                '1.12'],
          'the versions 1.0 to 1.12 are available');
SELECT throws_ok($$ALTER EXTENSION workflow SET SCHEMA public$$, '0A000', NULL,
    'ALTER EXTENSION workflow SET SCHEMA is refused');

SELECT * FROM finish();
ROLLBACK;
