-- The workflow registry: register_workflow (the signature of the canonical
-- contract, idempotent re-registration, definition_conflict, one active
-- version per name), unregister_workflow, and start_workflow, which starts
-- the active version pinned to it.
\set VERBOSITY terse
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.workflow_definitions;

\set org_a 'a0000000-0000-4000-8000-00000000000a'

-- err() shows a statement's SQLSTATE and stable code; errm() its SQLSTATE
-- and whole message with every uuid written <id>
CREATE FUNCTION pg_temp.err(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END $$;
CREATE FUNCTION pg_temp.errm(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || regexp_replace(SQLERRM,
        '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<id>', 'g');
END $$;
-- registry() shows the registered versions
CREATE FUNCTION pg_temp.registry()
RETURNS TABLE (name text, version text, active boolean, signature text)
LANGUAGE sql AS $$
    SELECT name, version, active, left(signature, 12) FROM workflow.workflow_definitions
     ORDER BY name, version
$$;

-- 1. Registering returns the signature: the hex sha256 of the canonical
-- contract, written out here by hand.
SELECT workflow.register_workflow('order', '1', '{"name": "order v1",
    "result_step": "ship",
    "steps": [
      {"key": "ship", "job_type": "order.ship", "payload": {"carrier": "x"},
       "depends_on": ["pay", {"step": "paid", "release": "on_terminal"}, "approve"]},
      {"key": "pay", "job_type": "order.pay", "priority": 5, "max_attempts": 2},
      {"key": "paid", "kind": "event", "event": "order.paid", "wait_timeout_seconds": 60},
      {"key": "approve", "kind": "external"},
      {"key": "Cool", "kind": "sleep", "seconds": 5},
      {"key": "note", "job_type": "say \"hi\"", "stage": "s", "depends_on": ["Cool"]}]}') AS sig1 \gset
SELECT :'sig1' ~ '^[0-9a-f]{64}$' AS hex64;
SELECT :'sig1' = encode(sha256(convert_to(
    '{"steps":['
    '{"key":"Cool","kind":"sleep"},'
    '{"key":"approve","kind":"external"},'
    '{"key":"note","kind":"job","job_type":"say \"hi\""},'
    '{"key":"paid","kind":"event","event":"order.paid"},'
    '{"key":"pay","kind":"job","job_type":"order.pay"},'
    '{"key":"ship","kind":"job","job_type":"order.ship"}],'
    '"edges":['
    '{"prerequisite":"Cool","dependent":"note","release":"on_success"},'
    '{"prerequisite":"approve","dependent":"ship","release":"on_success"},'
    '{"prerequisite":"paid","dependent":"ship","release":"on_terminal"},'
    '{"prerequisite":"pay","dependent":"ship","release":"on_success"}],'
    '"result_step":"ship"}', 'UTF8')), 'hex') AS canonical;
-- without a result step, "result_step" is null
SELECT workflow.register_workflow('tiny', '1', '{"steps": [{"key": "a", "job_type": "t"}]}')
     = encode(sha256(convert_to(
    '{"steps":[{"key":"a","kind":"job","job_type":"t"}],"edges":[],"result_step":null}',
    'UTF8')), 'hex') AS canonical_tiny;
SELECT * FROM pg_temp.registry();
SELECT xmin::text AS order_xmin FROM workflow.workflow_definitions WHERE name = 'order' \gset

-- 2. What the contract leaves out: payloads, tuning, stages, waits, the
-- definition's name, the order of steps and of depends_on, an event's
-- name given as its default.
SELECT workflow.register_workflow('order', '1', '{"name": "renamed",
    "result_step": "ship",
    "steps": [
      {"key": "Cool", "kind": "sleep", "until": "2030-01-01T00:00:00Z"},
      {"key": "note", "job_type": "say \"hi\"", "depends_on": ["Cool"], "timeout_seconds": 9},
      {"key": "approve", "kind": "external"},
      {"key": "paid", "kind": "event", "event": "order.paid"},
      {"key": "pay", "job_type": "order.pay", "payload": {"amount": 10}, "start_after_seconds": 3},
      {"key": "ship", "job_type": "order.ship",
       "depends_on": ["approve", "pay", {"step": "paid", "release": "on_terminal"}]}]}') = :'sig1'
    AS same_signature;
-- the same version again with the same signature writes nothing
SELECT xmin::text = :'order_xmin' AS row_untouched,
       definition->>'name' AS stored_name
  FROM workflow.workflow_definitions WHERE name = 'order';
SELECT workflow.register_workflow('tiny', '1', '{"steps": [{"key": "a", "job_type": "t"}]}')
     = workflow.register_workflow('tiny', '1', '{"steps": [{"key": "a", "kind": "job", "job_type": "t", "payload": {"p": 1}}]}')
    AS payload_only;
SELECT workflow.register_workflow('ev', '1', '{"steps": [{"key": "e", "kind": "event"}]}')
     = workflow.register_workflow('ev', '1', '{"steps": [{"key": "e", "kind": "event", "event": "e"}]}')
    AS default_event_name;

-- 3. What the contract holds: another signature for the same version is a
-- conflict, and nothing changes.
SELECT pg_temp.errm($$SELECT workflow.register_workflow('tiny', '1',
    '{"steps": [{"key": "a", "job_type": "t2"}]}')$$) AS other_job_type;
SELECT pg_temp.err($$SELECT workflow.register_workflow('tiny', '1',
    '{"steps": [{"key": "a", "kind": "external"}]}')$$) AS other_kind;
SELECT pg_temp.err($$SELECT workflow.register_workflow('tiny', '1',
    '{"steps": [{"key": "b", "job_type": "t"}]}')$$) AS other_key;
SELECT pg_temp.err($$SELECT workflow.register_workflow('tiny', '1',
    '{"result_step": "a", "steps": [{"key": "a", "job_type": "t"}]}')$$) AS result_step;
SELECT pg_temp.err($$SELECT workflow.register_workflow('ev', '1',
    '{"steps": [{"key": "e", "kind": "event", "event": "other"}]}')$$) AS other_event;
SELECT pg_temp.err($$SELECT workflow.register_workflow('order', '1',
    '{"result_step": "ship", "steps": [
      {"key": "ship", "job_type": "order.ship",
       "depends_on": ["pay", "paid", "approve"]},
      {"key": "pay", "job_type": "order.pay"},
      {"key": "paid", "kind": "event", "event": "order.paid"},
      {"key": "approve", "kind": "external"},
      {"key": "Cool", "kind": "sleep", "seconds": 5},
      {"key": "note", "job_type": "say \"hi\"", "depends_on": ["Cool"]}]}')$$) AS other_release;
SELECT xmin::text = :'order_xmin' AS row_untouched FROM workflow.workflow_definitions WHERE name = 'order';

-- 4. One active version per name: a new version is active and the old one
-- not; activate => false registers without activating; registering an
-- inactive version again with activate activates it.
SELECT workflow.register_workflow('tiny', '2', '{"steps": [{"key": "a", "job_type": "t"},
    {"key": "b", "job_type": "t", "depends_on": ["a"]}]}') AS tiny2 \gset
SELECT workflow.register_workflow('tiny', '3', '{"steps": [{"key": "c", "job_type": "t"}]}',
    activate => false) AS tiny3 \gset
SELECT * FROM pg_temp.registry() WHERE name = 'tiny';
SELECT workflow.register_workflow('tiny', '3', '{"steps": [{"key": "c", "job_type": "t"}]}') = :'tiny3'
    AS same;
SELECT * FROM pg_temp.registry() WHERE name = 'tiny';
SELECT version, updated_at > created_at AS activation_changed FROM workflow.workflow_definitions
 WHERE name = 'tiny' ORDER BY version;
-- the active version again with activate => false: still active
SELECT workflow.register_workflow('tiny', '3', '{"steps": [{"key": "c", "job_type": "t"}]}',
    false) = :'tiny3' AS same;
SELECT * FROM pg_temp.registry() WHERE name = 'tiny';
SELECT workflow.register_workflow('tiny', '2', '{"steps": [{"key": "a", "job_type": "t"},
    {"key": "b", "job_type": "t", "depends_on": ["a"]}]}') = :'tiny2' AS back_to_2;
SELECT * FROM pg_temp.registry() WHERE name = 'tiny';

-- 5. Bad arguments: job.invalid_argument for the name, version and
-- activate, workflow.invalid_definition for the definition; nothing is
-- written.
SELECT pg_temp.errm($$SELECT workflow.register_workflow(NULL, '1', '{"steps": [{"key": "a", "job_type": "t"}]}')$$) AS null_name;
SELECT pg_temp.errm($$SELECT workflow.register_workflow('', '1', '{"steps": [{"key": "a", "job_type": "t"}]}')$$) AS empty_name;
SELECT pg_temp.errm(format('SELECT workflow.register_workflow(%L, %L, %L)', repeat('n', 129), '1',
    '{"steps": [{"key": "a", "job_type": "t"}]}')) AS long_name;
SELECT pg_temp.errm($$SELECT workflow.register_workflow('bad', NULL, '{"steps": [{"key": "a", "job_type": "t"}]}')$$) AS null_version;
SELECT pg_temp.errm($$SELECT workflow.register_workflow('bad', '', '{"steps": [{"key": "a", "job_type": "t"}]}')$$) AS empty_version;
SELECT pg_temp.errm(format('SELECT workflow.register_workflow(%L, %L, %L)', 'bad', repeat('v', 129),
    '{"steps": [{"key": "a", "job_type": "t"}]}')) AS long_version;
SELECT workflow.register_workflow(repeat('n', 128), repeat('v', 128),
    '{"steps": [{"key": "a", "job_type": "t"}]}') ~ '^[0-9a-f]{64}$' AS longest_allowed;
SELECT workflow.unregister_workflow(repeat('n', 128), repeat('v', 128));
SELECT pg_temp.errm($$SELECT workflow.register_workflow('bad', '1', NULL)$$) AS null_definition;
SELECT pg_temp.errm($$SELECT workflow.register_workflow('bad', '1', '{"steps": []}')$$) AS empty_steps;
SELECT pg_temp.errm($$SELECT workflow.register_workflow('bad', '1', '{"steps": [
    {"key": "a", "job_type": "t", "depends_on": ["b"]},
    {"key": "b", "job_type": "t", "depends_on": ["a"]}]}')$$) AS cycle;
SELECT pg_temp.errm($$SELECT workflow.register_workflow('bad', '1',
    '{"steps": [{"key": "a", "job_type": "t"}]}', NULL)$$) AS null_activate;
SELECT count(*) AS bad_rows FROM workflow.workflow_definitions WHERE name = 'bad';
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.err($$SELECT workflow.register_workflow('bad', '1',
    '{"steps": [{"key": "a", "job_type": "t"}]}')$$) AS repeatable_read;
ROLLBACK;

-- 6. start_workflow starts the active version, pinned to it; its steps
-- are pinned, a start_run's are not.
SELECT workflow.start_workflow('order', '{"customer": 7}') AS r1 \gset
SELECT workflow_name, workflow_version, workflow_signature = :'sig1' AS signature_pinned,
       input, name, status, steps_total
  FROM workflow.workflow_runs WHERE id = :'r1';
SELECT count(*) AS steps, count(*) FILTER (WHERE pinned) AS pinned
  FROM workflow.workflow_steps WHERE workflow_run_id = :'r1';
SELECT step_key, status FROM workflow.workflow_steps WHERE workflow_run_id = :'r1' ORDER BY step_key;
SELECT j.job_type FROM workflow.job_queue j WHERE j.workflow_run_id = :'r1' ORDER BY 1;
-- the version's definition, as registered first
SELECT definition = (SELECT definition FROM workflow.workflow_definitions
                      WHERE name = 'order' AND version = '1') AS registered_definition
  FROM workflow.workflow_runs WHERE id = :'r1';
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}]}') AS plain \gset
SELECT workflow_name IS NULL AND workflow_version IS NULL AND workflow_signature IS NULL AS unpinned_run,
       (SELECT bool_or(pinned) FROM workflow.workflow_steps WHERE workflow_run_id = :'plain') AS any_pinned
  FROM workflow.workflow_runs WHERE id = :'plain';
-- the version active now, the organization given, no input
SELECT workflow.start_workflow('tiny', organization_id => :'org_a') AS r2 \gset
SELECT workflow_name, workflow_version, workflow_signature = :'tiny2' AS signature_pinned,
       input IS NULL AS no_input, organization_id = :'org_a' AS organization
  FROM workflow.workflow_runs WHERE id = :'r2';
SELECT step_key, pinned, organization_id = :'org_a' AS organization
  FROM workflow.workflow_steps WHERE workflow_run_id = :'r2' ORDER BY step_key;

-- 7. start_workflow's idempotency is start_run's.
SELECT workflow.start_workflow('tiny', '{"n": 1}', NULL, 'reg-key') AS k1 \gset
SELECT workflow.start_workflow('tiny', '{"n": 1}', NULL, 'reg-key') = :'k1' AS same_run;
SELECT pg_temp.errm($$SELECT workflow.start_workflow('tiny', '{"n": 2}', NULL, 'reg-key')$$) AS other_input;
-- another active version is another definition
SELECT workflow.register_workflow('tiny', '3', '{"steps": [{"key": "c", "job_type": "t"}]}') = :'tiny3' AS v3;
SELECT pg_temp.errm($$SELECT workflow.start_workflow('tiny', '{"n": 1}', NULL, 'reg-key')$$) AS other_version;
SELECT count(*) AS runs_with_key FROM workflow.workflow_runs WHERE idempotency_key = 'reg-key';
SELECT pg_temp.err($$SELECT workflow.start_workflow('tiny', '{"n": 1}', NULL, '')$$) AS empty_key;
SET workflow.max_payload_bytes = 64;
SELECT pg_temp.errm($$SELECT workflow.start_workflow('tiny', jsonb_build_object('x', repeat('x', 100)))$$) AS too_big;
RESET workflow.max_payload_bytes;

-- 8. No active version, or no such name: workflow.workflow_not_found.
SELECT workflow.register_workflow('dormant', '1', '{"steps": [{"key": "a", "job_type": "t"}]}', false) IS NOT NULL AS registered;
SELECT pg_temp.errm($$SELECT workflow.start_workflow('dormant')$$) AS inactive;
SELECT pg_temp.errm($$SELECT workflow.start_workflow('nobody')$$) AS unknown;
SELECT pg_temp.errm($$SELECT workflow.start_workflow(NULL)$$) AS null_name;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.err($$SELECT workflow.start_workflow('tiny')$$) AS repeatable_read;
ROLLBACK;

-- 9. unregister_workflow removes one version; runs pinned to it keep
-- their pins.  An unknown version is workflow.workflow_not_found.
SELECT workflow.unregister_workflow('order', '1');
SELECT * FROM pg_temp.registry() WHERE name = 'order';
SELECT pg_temp.errm($$SELECT workflow.start_workflow('order')$$) AS order_gone;
SELECT workflow_name, workflow_version, status FROM workflow.workflow_runs WHERE id = :'r1';
SELECT pg_temp.errm($$SELECT workflow.unregister_workflow('order', '1')$$) AS again;
SELECT pg_temp.errm($$SELECT workflow.unregister_workflow('tiny', '9')$$) AS unknown_version;
SELECT pg_temp.err($$SELECT workflow.unregister_workflow(NULL, '1')$$) AS null_name,
       pg_temp.err($$SELECT workflow.unregister_workflow('tiny', NULL)$$) AS null_version,
       pg_temp.err($$SELECT workflow.unregister_workflow('tiny', '')$$) AS empty_version;
-- the active version unregistered: the name has none until one is activated
SELECT workflow.unregister_workflow('tiny', '3');
SELECT * FROM pg_temp.registry() WHERE name = 'tiny';
SELECT pg_temp.err($$SELECT workflow.start_workflow('tiny')$$) AS no_active;
SELECT workflow.register_workflow('tiny', '1', '{"steps": [{"key": "a", "job_type": "t"}]}') IS NOT NULL AS reactivated;
SELECT workflow.start_workflow('tiny') AS r3 \gset
SELECT workflow_version FROM workflow.workflow_runs WHERE id = :'r3';
-- a version registered again after it was removed is a new registration
SELECT workflow.register_workflow('order', '1', '{"steps": [{"key": "x", "job_type": "t"}]}') <> :'sig1' AS new_contract;
SELECT * FROM pg_temp.registry();
