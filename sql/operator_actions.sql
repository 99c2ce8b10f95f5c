-- The operator's actions (1.7): runs pinned by start_workflow held at a
-- release when their pin fails (BLOCKED_MISSING_HANDLER,
-- BLOCKED_MISSING_VERSION, BLOCKED_SIGNATURE_MISMATCH), resume_run,
-- retire_run and retry_run, and the moves each refuses.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox, workflow.workflow_definitions;

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
-- try() shows a statement's result, or its SQLSTATE and stable code
CREATE FUNCTION pg_temp.try(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    EXECUTE stmt INTO v;
    RETURN v;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END $$;
CREATE FUNCTION pg_temp.steps(run uuid)
RETURNS TABLE (step_key text, status text, status_reason text, held boolean, generation integer,
               job_status text)
LANGUAGE sql AS $$
    SELECT s.step_key, s.status::text, s.status_reason, s.held, s.generation, j.status::text
      FROM workflow.workflow_steps s LEFT JOIN workflow.job_queue j ON j.id = s.job_id
     WHERE s.workflow_run_id = run ORDER BY s.step_key
$$;
CREATE FUNCTION pg_temp.status(run uuid) RETURNS text LANGUAGE sql AS $$
    SELECT status::text FROM workflow.workflow_runs WHERE id = run
$$;
-- the run's history from the first event of the given types on, uuids
-- and times left out
CREATE FUNCTION pg_temp.events(run uuid, VARIADIC types text[])
RETURNS TABLE (event_type text, step_key text, detail jsonb) LANGUAGE sql AS $$
    SELECT event_type, step_key, detail - 'job_id'
      FROM workflow.run_history(run) WHERE event_type = ANY (types) ORDER BY id
$$;
-- work(type, output) claims one job of the type and completes it
CREATE FUNCTION pg_temp.work(jt text, out_ jsonb DEFAULT NULL) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    j workflow.job_queue;
BEGIN
    SELECT * INTO j FROM workflow.claim('op-worker', ARRAY[jt]);
    IF j.id IS NULL THEN
        RETURN 'no job';
    END IF;
    PERFORM workflow.complete_job(j.id, j.lease_token, out_);
    RETURN (SELECT step_key FROM workflow.workflow_steps WHERE id = j.workflow_step_id);
END $$;
-- flunk(type) claims one job of the type and fails it for good
CREATE FUNCTION pg_temp.flunk(jt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    j workflow.job_queue;
BEGIN
    SELECT * INTO j FROM workflow.claim('op-worker', ARRAY[jt]);
    IF j.id IS NULL THEN
        RETURN 'no job';
    END IF;
    PERFORM workflow.fail_job(j.id, j.lease_token, 'op.broke', 'broke', false);
    RETURN (SELECT step_key FROM workflow.workflow_steps WHERE id = j.workflow_step_id);
END $$;

-- The definition of the pinned runs below: a, then b; c alongside.
\set def '{"steps": [{"key": "a", "job_type": "h.a"}, {"key": "b", "job_type": "h.b", "depends_on": ["a"]}, {"key": "c", "job_type": "h.c"}]}'
\set def2 '{"steps": [{"key": "a", "job_type": "h.a"}, {"key": "b", "job_type": "h.b2", "depends_on": ["a"]}, {"key": "c", "job_type": "h.c"}]}'

-- 1. BLOCKED_MISSING_HANDLER: every version of the name unregistered.  a
-- and c are claimed; a finishes after the unregister: b is held, the run
-- blocked; c, in flight, still finishes.
SELECT length(workflow.register_workflow('op.h', '1', :'def')) AS sig;
SELECT length(workflow.register_workflow('op.h', '2', :'def', false)) AS sig;
SELECT workflow.start_workflow('op.h', '{"in": 1}') AS h \gset
SELECT workflow_name, workflow_version, workflow_signature IS NOT NULL AS signed
  FROM workflow.workflow_runs WHERE id = :'h';
SELECT id AS ha, lease_token AS hat FROM workflow.claim('w', ARRAY['h.a']) \gset
SELECT id AS hc, lease_token AS hct FROM workflow.claim('w', ARRAY['h.c']) \gset
SELECT workflow.unregister_workflow('op.h', '1');
-- version 2 is left: the pin's name still holds, its version not
SELECT workflow.unregister_workflow('op.h', '2');
SELECT workflow.complete_job(:'ha', :'hat', '{"a": "done"}');
SELECT pg_temp.status(:'h');
SELECT * FROM pg_temp.steps(:'h');
SELECT * FROM pg_temp.events(:'h', 'step_held', 'run_blocked');
SELECT workflow.complete_job(:'hc', :'hct');
SELECT pg_temp.status(:'h');
SELECT * FROM pg_temp.steps(:'h');
-- resume_run while the pin still fails: still blocked, nothing released
SELECT workflow.resume_run(:'h') AS resumed;
SELECT * FROM pg_temp.steps(:'h') WHERE step_key = 'b';
-- the version back with another contract: resume_run finds the signature
-- changed, and the run takes that status
SELECT length(workflow.register_workflow('op.h', '1', :'def2')) AS sig;
SELECT workflow.resume_run(:'h') AS resumed;
SELECT * FROM pg_temp.events(:'h', 'run_blocked', 'run_resumed');
-- the version back as it was: resume_run releases b and the run goes on
SELECT workflow.unregister_workflow('op.h', '1');
SELECT length(workflow.register_workflow('op.h', '1', :'def')) AS sig;
SELECT workflow.resume_run(:'h') AS resumed;
SELECT * FROM pg_temp.steps(:'h');
SELECT * FROM pg_temp.events(:'h', 'run_blocked', 'run_resumed', 'run_status_changed');
SELECT workflow.resume_run(:'h') AS resumed_again;
SELECT pg_temp.work('h.b') AS ran;
SELECT pg_temp.status(:'h');

-- 2. BLOCKED_MISSING_VERSION: the pinned version unregistered while
-- another of the name stays; then retired.
SELECT length(workflow.register_workflow('op.v', '1', :'def')) AS sig;
SELECT workflow.start_workflow('op.v') AS v \gset
SELECT length(workflow.register_workflow('op.v', '2', :'def2')) AS sig;
SELECT workflow.unregister_workflow('op.v', '1');
SELECT pg_temp.work('h.a') AS ran;
SELECT pg_temp.status(:'v');
SELECT * FROM pg_temp.steps(:'v');
SELECT workflow.resume_run(:'v') AS resumed;
LISTEN workflow_run_terminal;
\o results/operator_actions.notifications
SELECT workflow.retire_run(:'v', 'version withdrawn') AS retired;
\o
UNLISTEN *;
SELECT pg_temp.status(:'v'), finished_at IS NOT NULL AS finished FROM workflow.workflow_runs WHERE id = :'v';
SELECT * FROM pg_temp.steps(:'v');
SELECT * FROM pg_temp.events(:'v', 'run_retired', 'run_status_changed');
-- again: the same status; resume_run and retry_run refuse it
SELECT workflow.retire_run(:'v', 'again') AS retired_again;
SELECT pg_temp.errm(format('SELECT workflow.resume_run(%L)', :'v')) AS resume;
SELECT pg_temp.errm(format('SELECT workflow.retry_run(%L)', :'v')) AS retry;
SELECT pg_temp.errm(format('SELECT workflow.retire_run(%L, NULL)', :'v')) AS null_reason;

-- 3. BLOCKED_SIGNATURE_MISMATCH: the version unregistered and registered
-- again with another contract; resumed once it is registered as it was.
SELECT length(workflow.register_workflow('op.s', '1', :'def')) AS sig;
SELECT workflow.start_workflow('op.s') AS s \gset
SELECT workflow.unregister_workflow('op.s', '1');
SELECT length(workflow.register_workflow('op.s', '1', :'def2')) AS sig;
SELECT pg_temp.work('h.a') AS ran;
SELECT pg_temp.status(:'s');
SELECT * FROM pg_temp.steps(:'s');
SELECT workflow.unregister_workflow('op.s', '1');
SELECT length(workflow.register_workflow('op.s', '1', :'def')) AS sig;
SELECT workflow.resume_run(:'s') AS resumed;
SELECT pg_temp.work('h.b') AS ran;
SELECT pg_temp.work('h.c') AS ran;
SELECT pg_temp.status(:'s');

-- 4. An unpinned run never blocks, whatever the registry does: the same
-- definition by start_run, its name unregistered.
SELECT length(workflow.register_workflow('op.u', '1', :'def')) AS sig;
SELECT workflow.start_run(jsonb_set(:'def'::jsonb, '{name}', '"op.u"')) AS u \gset
SELECT workflow.unregister_workflow('op.u', '1');
SELECT pg_temp.work('h.a') AS ran, pg_temp.work('h.b') AS ran, pg_temp.work('h.c') AS ran;
SELECT pg_temp.status(:'u'), workflow_name IS NULL AS unpinned FROM workflow.workflow_runs WHERE id = :'u';

-- 5. retire_run of a running run; refused on a finished one.
SELECT workflow.start_run('{"steps": [{"key": "j", "job_type": "r.j"}, {"key": "x", "kind": "external"}]}') AS rr \gset
SELECT id AS rrj, lease_token AS rrt FROM workflow.claim('w', ARRAY['r.j']) \gset
LISTEN workflow_run_terminal;
\o results/operator_actions.notifications2
SELECT workflow.retire_run(:'rr', 'no longer wanted') AS retired;
\o
UNLISTEN *;
SELECT * FROM pg_temp.steps(:'rr');
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'rrj', :'rrt')) AS worker;
SELECT pg_temp.errm(format('SELECT workflow.retire_run(%L, %L)', :'s', 'late')) AS succeeded;
SELECT workflow.start_run('{"steps": [{"key": "x", "kind": "external"}]}') AS canc \gset
SELECT workflow.cancel_run(:'canc') AS canceled;
SELECT pg_temp.errm(format('SELECT workflow.retire_run(%L, %L)', :'canc', 'late')) AS canceled;

-- 6. retry_run of a run with a failed branch: a, then b (fails), then c;
-- d alongside.  b and c, canceled under it, are reset; a and d kept.
SELECT workflow.start_run('{"name": "op.retry", "steps": [
    {"key": "a", "job_type": "t.a"},
    {"key": "b", "job_type": "t.b", "depends_on": ["a"], "max_attempts": 1},
    {"key": "c", "job_type": "t.c", "depends_on": ["b"]},
    {"key": "d", "job_type": "t.d"}]}', NULL, NULL, '{"order": 7}') AS t \gset
SELECT pg_temp.work('t.a', '{"a": 1}') AS ran, pg_temp.work('t.d') AS ran;
-- retry_run of a live run returns its status
SELECT workflow.retry_run(:'t') AS running;
LISTEN workflow_run_terminal;
\o results/operator_actions.notifications3
SELECT pg_temp.flunk('t.b') AS failed;
\o
UNLISTEN *;
SELECT pg_temp.status(:'t');
SELECT * FROM pg_temp.steps(:'t');
SELECT workflow.retry_run(:'t') AS retried;
SELECT * FROM pg_temp.steps(:'t');
SELECT steps_active, steps_blocked, steps_succeeded, steps_failed, steps_canceled, finished_at IS NULL AS unfinished
  FROM workflow.run_overview WHERE workflow_run_id = :'t';
SELECT * FROM pg_temp.events(:'t', 'run_retried', 'step_reset', 'run_status_changed');
-- the new job: generation 1, and job_inputs of the retried step works
SELECT id AS tb, lease_token AS tbt, generation FROM workflow.claim('w', ARRAY['t.b']) \gset
SELECT :generation AS generation;
SELECT workflow.job_inputs(:'tb', :'tbt') AS inputs;
-- it fails again, and is retried again: generation 2
LISTEN workflow_run_terminal;
\o results/operator_actions.notifications4
SELECT workflow.fail_job(:'tb', :'tbt', 'op.broke', 'again', false);
\o
UNLISTEN *;
SELECT pg_temp.status(:'t');
SELECT workflow.retry_run(:'t') AS retried;
SELECT q.generation FROM workflow.job_queue q
  JOIN workflow.workflow_steps s ON s.job_id = q.id WHERE s.workflow_run_id = :'t' AND s.step_key = 'b';
SELECT q.generation, q.status, q.attempt FROM workflow.job_queue q
  JOIN workflow.workflow_steps s ON s.id = q.workflow_step_id
 WHERE s.workflow_run_id = :'t' AND s.step_key = 'b' ORDER BY q.generation;
-- this time it goes through: the run SUCCEEDED, and its end notified
-- again
SELECT pg_temp.work('t.b') AS ran;
LISTEN workflow_run_terminal;
\o results/operator_actions.notifications5
SELECT pg_temp.work('t.c') AS ran;
\o
UNLISTEN *;
SELECT pg_temp.status(:'t');
SELECT * FROM pg_temp.steps(:'t');
SELECT * FROM pg_temp.events(:'t', 'run_retried', 'run_status_changed');
-- retry_run of a SUCCEEDED run
SELECT pg_temp.errm(format('SELECT workflow.retry_run(%L)', :'t')) AS succeeded;

-- 7. A COMPLETED_WITH_ERRORS run whose errors are only canceled steps has
-- nothing to retry.
SELECT workflow.start_run('{"steps": [{"key": "x", "kind": "external"}, {"key": "y", "kind": "external"}]}') AS only_canceled \gset
SELECT status FROM workflow.complete_external_step(:'only_canceled', 'x', 'CANCELED');
SELECT status FROM workflow.complete_external_step(:'only_canceled', 'y', 'SUCCEEDED');
SELECT pg_temp.status(:'only_canceled');
SELECT pg_temp.errm(format('SELECT workflow.retry_run(%L)', :'only_canceled')) AS nothing_failed;
SELECT pg_temp.status(:'only_canceled');

-- 8. retry_run of a pinned run whose pin fails: the reset step is held,
-- the run blocked.
SELECT length(workflow.register_workflow('op.r', '1', '{"steps": [{"key": "a", "job_type": "p.a", "max_attempts": 1},
    {"key": "b", "job_type": "p.b", "depends_on": ["a"]}]}')) AS sig;
SELECT workflow.start_workflow('op.r') AS p \gset
SELECT pg_temp.flunk('p.a') AS failed;
SELECT pg_temp.status(:'p');
SELECT workflow.unregister_workflow('op.r', '1');
SELECT workflow.retry_run(:'p') AS retried;
SELECT * FROM pg_temp.steps(:'p');
SELECT * FROM pg_temp.events(:'p', 'run_retried', 'step_reset', 'step_held', 'run_blocked');
-- retry_run of a blocked run returns its status
SELECT workflow.retry_run(:'p') AS blocked;
SELECT workflow.retire_run(:'p', 'gone') AS retired;
SELECT * FROM pg_temp.steps(:'p');

-- 9. Every illegal move refused with workflow.invalid_run_transition; a
-- compensating run, live, is returned as it is by resume_run and
-- retry_run, and refused by retire_run.
SELECT workflow.start_run('{"steps": [{"key": "x", "kind": "external"}]}') AS cwe \gset
SELECT status FROM workflow.complete_external_step(:'cwe', 'x', 'FAILED');
SELECT workflow.start_run('{"steps": [{"key": "j", "job_type": "comp.j", "compensate": {"job_type": "comp.undo"}}, {"key": "x", "kind": "external"}]}') AS comp \gset
SELECT pg_temp.work('comp.j') AS ran;
SELECT workflow.compensate_run(:'comp') AS compensating;
SELECT r.label, pg_temp.status(r.id) AS status, c.call,
       pg_temp.try(CASE c.call WHEN 'resume_run' THEN format('SELECT workflow.resume_run(%L)', r.id)
                               WHEN 'retire_run' THEN format('SELECT workflow.retire_run(%L, %L)', r.id, 'x')
                               ELSE format('SELECT workflow.retry_run(%L)', r.id) END) AS result
  FROM (VALUES ('succeeded', :'s'::uuid), ('canceled', :'canc'), ('completed with errors', :'cwe'),
               ('retired', :'v'), ('compensating', :'comp')) r(label, id)
 CROSS JOIN (VALUES ('resume_run'), ('retire_run'), ('retry_run')) c(call)
 WHERE NOT (r.label = 'completed with errors' AND c.call = 'retry_run')
 ORDER BY r.label, c.call;
-- the unknown run
SELECT pg_temp.err(format('SELECT workflow.resume_run(%L)', workflow.uuid_v7())) AS resume,
       pg_temp.err(format('SELECT workflow.retire_run(%L, %L)', workflow.uuid_v7(), 'x')) AS retire,
       pg_temp.err(format('SELECT workflow.retry_run(%L)', workflow.uuid_v7())) AS retry;

-- 10. The notifications: the retired runs', and the retried run's each
-- time it finished.
CREATE TEMP TABLE runs (id uuid, name text);
INSERT INTO runs VALUES (:'v', 'v'), (:'rr', 'rr'), (:'t', 't');
CREATE TEMP TABLE received (n serial, line text);
\copy received (line) FROM 'results/operator_actions.notifications'
\copy received (line) FROM 'results/operator_actions.notifications2'
\copy received (line) FROM 'results/operator_actions.notifications3'
\copy received (line) FROM 'results/operator_actions.notifications4'
\copy received (line) FROM 'results/operator_actions.notifications5'
SELECT m[1] AS channel, replace(m[2], runs.id::text, runs.name) AS payload
  FROM received r
 CROSS JOIN LATERAL regexp_match(r.line,
       '^Asynchronous notification "([^"]*)" with payload "(.*)" received from server process with PID ([0-9]+)\.$') m
  LEFT JOIN runs ON strpos(m[2], runs.id::text) > 0
 WHERE m IS NOT NULL ORDER BY r.n;

SELECT * FROM workflow.verify();

-- A retry that finishes in its own call: the reset event step consumes
-- the event stored while it was finished, and the run, still with a
-- canceled step, ends as before; it moves to RUNNING and back, so its
-- history shows it ran and ended again (and it notifies again).
SELECT workflow.start_run('{"steps": [{"key": "e", "kind": "event", "event": "x", "wait_timeout_seconds": 60},
    {"key": "w", "kind": "external"}, {"key": "c", "job_type": "oa.instant"}]}') AS instant \gset
SELECT id AS instant_job FROM workflow.job_queue WHERE workflow_run_id = :'instant' \gset
SELECT workflow.cancel_job(:'instant_job');
UPDATE workflow.workflow_steps SET wake_at = now() - interval '1 second'
 WHERE workflow_run_id = :'instant' AND step_key = 'e';
SELECT workflow.fire_timers() AS fired;
SELECT (workflow.send_event(:'instant', 'x', '{"late": 1}')).consumed_at IS NULL AS stored;
SELECT status FROM workflow.complete_external_step(:'instant', 'w', 'SUCCEEDED');
SELECT workflow.retry_run(:'instant');
SELECT event_type, detail - 'event_id' AS detail FROM workflow.run_history(:'instant')
 WHERE step_key IS NULL ORDER BY id;
SELECT * FROM workflow.verify(:'instant');
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox, workflow.workflow_definitions;
