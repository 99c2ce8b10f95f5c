-- The run state machine: a run in each of the thirteen statuses, each
-- operation applied to a fresh one (cancel_run, send_event,
-- complete_external_step, fire_timers, complete_job, retire_run,
-- resume_run, retry_run, compensate_run, increase_execution_allowance),
-- and the resulting status or
-- error; the moves that finish a run, cross between RUNNING and
-- WAITING_FOR_EXTERNAL, block, resume, retry or compensate it, one
-- operation each; every move seen is one the engine's table,
-- workflow._run_moves(), allows, and every move of the table is seen.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox, workflow.workflow_definitions;

-- pin(run, how) changes the registry under a run pinned to version 1 of
-- its name: every version of the name is unregistered, then
--   BLOCKED_MISSING_HANDLER: nothing more;
--   BLOCKED_MISSING_VERSION: version 2 registered (the same contract);
--   BLOCKED_SIGNATURE_MISMATCH: version 1 registered with a step more;
--   mend: version 1 registered as it was.
CREATE FUNCTION pg_temp.pin(run uuid, how text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    n text;
    d jsonb;
    v text;
BEGIN
    SELECT workflow_name, definition INTO n, d FROM workflow.workflow_runs WHERE id = run;
    FOR v IN SELECT version FROM workflow.workflow_definitions WHERE name = n LOOP
        PERFORM workflow.unregister_workflow(n, v);
    END LOOP;
    IF how = 'BLOCKED_MISSING_VERSION' THEN
        PERFORM workflow.register_workflow(n, '2', d);
    ELSIF how = 'BLOCKED_SIGNATURE_MISMATCH' THEN
        PERFORM workflow.register_workflow(n, '1', jsonb_set(d, '{steps}',
            (d -> 'steps') || '[{"key": "extra", "kind": "external"}]'));
    ELSIF how = 'mend' THEN
        PERFORM workflow.register_workflow(n, '1', d);
    END IF;
END $$;
-- pinned(name, definition) registers version 1 of a name and starts it
CREATE FUNCTION pg_temp.pinned(n text, d jsonb) RETURNS uuid LANGUAGE plpgsql AS $$
BEGIN
    PERFORM workflow.register_workflow(n, '1', d);
    RETURN workflow.start_workflow(n);
END $$;

-- mk(status, tag) starts a run and drives it into that status.  Its steps:
-- j (a job of type rm.<tag>, undone by a job of the same type), x
-- (external), e (event "go", timeout 600 s), z (sleep 600 s).
--   RUNNING: all four released (j ENQUEUED, z SLEEPING);
--   WAITING_FOR_EXTERNAL: x and e waiting, j and z behind x;
--   SUCCEEDED: j completed, x completed, e given its event, z of 0 s;
--   COMPLETED_WITH_ERRORS: the same with x completed as FAILED;
--   CANCELED: the RUNNING run, canceled;
--   BLOCKED_*: j behind x, pinned by start_workflow; the pin broken (pin()
--   above), then x completed: j is held;
--   RETIRED_UNRESUMABLE: the RUNNING run, retired;
--   COMPENSATING: the RUNNING run with j completed, then compensate_run: x,
--   e and z canceled, j's compensation job queued;
--   COMPENSATED / COMPENSATION_FAILED: that job then claimed and completed,
--   or failed for good.
CREATE FUNCTION pg_temp.mk(want text, tag text) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    run uuid;
    j record;
    steps jsonb;
    jstep jsonb := jsonb_build_object('key', 'j', 'job_type', 'rm.' || tag,
                                      'compensate', jsonb_build_object('job_type', 'rm.' || tag));
BEGIN
    IF want = 'WAITING_FOR_ALLOWANCE' THEN
        -- an allowance of one execution, used by a; j waits for more
        steps := jsonb_build_array(
            jsonb_build_object('key', 'a', 'job_type', 'rm.' || tag),
            jstep || jsonb_build_object('depends_on', jsonb_build_array('a')),
            jsonb_build_object('key', 'x', 'kind', 'external', 'depends_on', jsonb_build_array('j')),
            jsonb_build_object('key', 'e', 'kind', 'event', 'event', 'go', 'wait_timeout_seconds', 600,
                               'depends_on', jsonb_build_array('j')),
            jsonb_build_object('key', 'z', 'kind', 'sleep', 'seconds', 600, 'depends_on', jsonb_build_array('j')));
    ELSIF want = 'WAITING_FOR_EXTERNAL' OR want LIKE 'BLOCKED%' THEN
        steps := jsonb_build_array(
            jsonb_build_object('key', 'x', 'kind', 'external'),
            jsonb_build_object('key', 'e', 'kind', 'event', 'event', 'go', 'wait_timeout_seconds', 600),
            jstep || jsonb_build_object('depends_on', jsonb_build_array('x')),
            jsonb_build_object('key', 'z', 'kind', 'sleep', 'seconds', 600, 'depends_on',
                               CASE WHEN want LIKE 'BLOCKED%' THEN '[]'::jsonb ELSE jsonb_build_array('x') END));
    ELSE
        steps := jsonb_build_array(
            jstep,
            jsonb_build_object('key', 'x', 'kind', 'external'),
            jsonb_build_object('key', 'e', 'kind', 'event', 'event', 'go', 'wait_timeout_seconds', 600),
            jsonb_build_object('key', 'z', 'kind', 'sleep', 'seconds',
                               CASE WHEN want IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS') THEN 0 ELSE 600 END));
    END IF;
    IF want LIKE 'BLOCKED%' THEN
        run := pg_temp.pinned('rm.' || tag, jsonb_build_object('steps', steps));
        PERFORM pg_temp.pin(run, want);
        PERFORM workflow.complete_external_step(run, 'x', 'SUCCEEDED');
    ELSIF want = 'WAITING_FOR_ALLOWANCE' THEN
        run := workflow.start_run(jsonb_build_object('name', 'rm.' || tag, 'steps', steps,
                                                     'limits', '{"node_execution_cap": 1}'::jsonb));
        SELECT * INTO j FROM workflow.claim('rm-worker', ARRAY['rm.' || tag]);
        PERFORM workflow.complete_job(j.id, j.lease_token);
    ELSE
        run := workflow.start_run(jsonb_build_object('name', 'rm.' || tag, 'steps', steps));
    END IF;
    IF want IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS') THEN
        SELECT * INTO j FROM workflow.claim('rm-worker', ARRAY['rm.' || tag]);
        PERFORM workflow.complete_job(j.id, j.lease_token);
        PERFORM workflow.complete_external_step(run, 'x',
            CASE want WHEN 'SUCCEEDED' THEN 'SUCCEEDED' ELSE 'FAILED' END::workflow.step_status);
        PERFORM workflow.send_event(run, 'go', '{"made": true}');
    ELSIF want = 'CANCELED' THEN
        PERFORM workflow.cancel_run(run, 'made canceled');
    ELSIF want = 'RETIRED_UNRESUMABLE' THEN
        PERFORM workflow.retire_run(run, 'made retired');
    ELSIF want IN ('COMPENSATING', 'COMPENSATED', 'COMPENSATION_FAILED') THEN
        SELECT * INTO j FROM workflow.claim('rm-worker', ARRAY['rm.' || tag]);
        PERFORM workflow.complete_job(j.id, j.lease_token);
        PERFORM workflow.compensate_run(run, 'made compensating');
        IF want <> 'COMPENSATING' THEN
            SELECT * INTO j FROM workflow.claim('rm-worker', ARRAY['rm.' || tag]);
            IF want = 'COMPENSATED' THEN
                PERFORM workflow.complete_job(j.id, j.lease_token);
            ELSE
                PERFORM workflow.fail_job(j.id, j.lease_token, 'rm.undo', 'cannot undo', false);
            END IF;
        END IF;
    END IF;
    IF (SELECT status::text FROM workflow.workflow_runs WHERE id = run) IS DISTINCT FROM want THEN
        RAISE EXCEPTION 'mk(%): the run is %', want,
            (SELECT status FROM workflow.workflow_runs WHERE id = run);
    END IF;
    RETURN run;
END $$;

-- apply(run, op, tag) applies one operation to a run and returns the run's
-- status after it (with what the operation reported), or the error's
-- SQLSTATE and code.
--   cancel_run: cancel_run(run)
--   send_event: send_event(run, 'go', ...)
--   complete_external_step: complete_external_step(run, 'x', 'SUCCEEDED')
--   fire_timers: the run's timers moved into the past, then fire_timers()
--   complete_job: j's job claimed (if queued) and completed with its token
--   (the token of its last claim for a job no longer queued)
--   retire_run, resume_run, retry_run, compensate_run: the call on the run
--   fail_job: a job of type rm.<tag> claimed and failed for good
--   fail_external: complete_external_step(run, 'x', 'FAILED')
--   increase_execution_allowance: from 1 to 2
--   claim_job: a job of type rm.<tag> claimed, left running
--   deadline: the run's deadline moved into the past, then fire_timers()
CREATE FUNCTION pg_temp.apply(run uuid, op text, tag text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    j record;
    n integer;
    note text := '';
    ev workflow.event_inbox;
BEGIN
    CASE op
    WHEN 'cancel_run' THEN
        PERFORM workflow.cancel_run(run, 'matrix');
    WHEN 'send_event' THEN
        ev := workflow.send_event(run, 'go', '{"matrix": true}');
        note := CASE WHEN ev.consumed_by_step_key IS NULL THEN ' (stored)'
                     ELSE ' (consumed by ' || ev.consumed_by_step_key || ')' END;
    WHEN 'complete_external_step' THEN
        PERFORM workflow.complete_external_step(run, 'x', 'SUCCEEDED');
    WHEN 'fire_timers' THEN
        UPDATE workflow.workflow_steps SET wake_at = now() - interval '1 second'
         WHERE workflow_run_id = run AND wake_at IS NOT NULL;
        n := workflow.fire_timers();
        note := ' (fired ' || n || ')';
    WHEN 'complete_job' THEN
        SELECT q.id, q.lease_token INTO j FROM workflow.claim('rm-worker', ARRAY['rm.' || tag]) q;
        IF j.id IS NULL THEN
            SELECT q.id, q.lease_token INTO j FROM workflow.job_queue q
              JOIN workflow.workflow_steps s ON s.job_id = q.id
             WHERE s.workflow_run_id = run AND s.step_key = 'j';
        END IF;
        IF j.id IS NULL THEN
            RETURN 'no job';
        END IF;
        -- a job that was never claimed has no token: any token will do
        PERFORM workflow.complete_job(j.id, coalesce(j.lease_token, workflow.uuid_v7()));
    WHEN 'retire_run' THEN
        PERFORM workflow.retire_run(run, 'matrix');
    WHEN 'resume_run' THEN
        PERFORM workflow.resume_run(run);
    WHEN 'retry_run' THEN
        PERFORM workflow.retry_run(run);
    WHEN 'compensate_run' THEN
        PERFORM workflow.compensate_run(run, 'matrix');
    WHEN 'fail_job' THEN
        SELECT q.id, q.lease_token INTO j FROM workflow.claim('rm-worker', ARRAY['rm.' || tag]) q;
        IF j.id IS NULL THEN
            RETURN 'no job';
        END IF;
        PERFORM workflow.fail_job(j.id, j.lease_token, 'rm.failed', 'failed', false);
    WHEN 'fail_external' THEN
        PERFORM workflow.complete_external_step(run, 'x', 'FAILED');
    WHEN 'increase_execution_allowance' THEN
        n := workflow.increase_execution_allowance(run, 1, 2);
        note := ' (cap ' || n || ')';
    WHEN 'claim_job' THEN
        PERFORM workflow.claim('rm-worker', ARRAY['rm.' || tag]);
    WHEN 'deadline' THEN
        UPDATE workflow.workflow_runs SET deadline_at = now() - interval '1 second' WHERE id = run;
        UPDATE workflow.workflow_steps SET deadline_at = now() - interval '1 second'
         WHERE workflow_run_id = run;
        UPDATE workflow.job_queue SET deadline_at = now() - interval '1 second'
         WHERE workflow_run_id = run AND NOT compensation;
        n := workflow.fire_timers();
        note := ' (swept ' || n || ')';
    END CASE;
    RETURN (SELECT status::text FROM workflow.workflow_runs WHERE id = run) || note;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END $$;

CREATE TEMP TABLE matrix (from_status text, op text, tag text, run uuid, result text,
                          to_status text, steps text, n serial);
CREATE TEMP TABLE ops (op text, o integer);
INSERT INTO ops VALUES ('cancel_run', 1), ('send_event', 2), ('complete_external_step', 3),
                       ('fire_timers', 4), ('complete_job', 5), ('retire_run', 6), ('resume_run', 7),
                       ('retry_run', 8), ('compensate_run', 9), ('increase_execution_allowance', 10);

-- 1. Every status against every operation, one fresh run per cell; each
-- run made, and each operation applied, in a transaction of its own.
INSERT INTO matrix (from_status, op, tag)
SELECT s.status::text, o.op, 's' || s.so || '.' || o.o
  FROM unnest(enum_range(NULL::workflow.run_status)) WITH ORDINALITY AS s(status, so)
 CROSS JOIN ops o
 ORDER BY s.so, o.o;
SELECT format('UPDATE matrix SET run = pg_temp.mk(%L, %L) WHERE n = %s', from_status, tag, n)
  FROM matrix ORDER BY n \gexec
-- the timers of the runs stay in the future until an operation moves them
SELECT count(*) AS due_timers FROM workflow.workflow_steps WHERE wake_at <= now();
SELECT format('UPDATE matrix SET result = pg_temp.apply(run, op, tag) WHERE n = %s', n)
  FROM matrix ORDER BY n \gexec
UPDATE matrix m SET to_status = r.status::text,
       steps = (SELECT string_agg(s.step_key || '=' || s.status, ' ' ORDER BY s.step_key)
                  FROM workflow.workflow_steps s WHERE s.workflow_run_id = m.run)
  FROM workflow.workflow_runs r WHERE r.id = m.run;
SELECT from_status, op, result, steps FROM matrix ORDER BY n;

-- 2. The moves that cross or finish, each by one operation on a run
-- whose other steps make it the deciding one.
CREATE TEMP TABLE moves (label text, def jsonb, prepare text, op text, run uuid,
                         from_status text, result text, n serial, pinned boolean DEFAULT false);
INSERT INTO moves (label, def, op) VALUES
  ('last job', '{"steps": [{"key": "j", "job_type": "rm.mv1"}]}', 'complete_job'),
  ('job, then a wait', '{"steps": [{"key": "j", "job_type": "rm.mv2"}, {"key": "x", "kind": "external"}]}', 'complete_job'),
  ('last sleep', '{"steps": [{"key": "z", "kind": "sleep", "seconds": 600}]}', 'fire_timers'),
  ('sleep, then a wait', '{"steps": [{"key": "z", "kind": "sleep", "seconds": 600},
                                     {"key": "e", "kind": "event", "event": "go"}]}', 'fire_timers'),
  ('sleep releases a job', '{"steps": [{"key": "z", "kind": "sleep", "seconds": 600},
                                       {"key": "j", "job_type": "rm.mv5", "depends_on": ["z"]}]}', 'fire_timers'),
  ('last wait timed out', '{"steps": [{"key": "e", "kind": "event", "event": "go", "wait_timeout_seconds": 60}]}', 'fire_timers'),
  ('timeout releases a job', '{"steps": [{"key": "e", "kind": "event", "event": "go", "wait_timeout_seconds": 60},
                                         {"key": "j", "job_type": "rm.mv7", "depends_on": [{"step": "e", "release": "on_terminal"}]}]}', 'fire_timers'),
  ('a wait times out as the last sleep wakes', '{"steps": [{"key": "z", "kind": "sleep", "seconds": 600},
                                                         {"key": "e", "kind": "event", "event": "go", "wait_timeout_seconds": 60}]}', 'fire_timers'),
  ('last wait given its event', '{"steps": [{"key": "e", "kind": "event", "event": "go"}]}', 'send_event'),
  ('event releases a sleep', '{"steps": [{"key": "e", "kind": "event", "event": "go"},
                                         {"key": "z", "kind": "sleep", "seconds": 600, "depends_on": ["e"]}]}', 'send_event'),
  ('event, another wait left', '{"steps": [{"key": "e", "kind": "event", "event": "go"},
                                           {"key": "x", "kind": "external"}]}', 'send_event'),
  ('last external', '{"steps": [{"key": "x", "kind": "external"}]}', 'complete_external_step'),
  ('external releases an event wait', '{"steps": [{"key": "x", "kind": "external"},
                                                  {"key": "e", "kind": "event", "event": "go", "depends_on": ["x"]}]}', 'complete_external_step'),
  ('external releases a job', '{"steps": [{"key": "x", "kind": "external"},
                                          {"key": "j", "job_type": "rm.mv14", "depends_on": ["x"]}]}', 'complete_external_step'),
  ('cancel a sleeping run', '{"steps": [{"key": "z", "kind": "sleep", "seconds": 600}]}', 'cancel_run'),
  ('cancel a waiting run', '{"steps": [{"key": "e", "kind": "event", "event": "go"}]}', 'cancel_run'),
  ('the last job leaves a job parked', '{"limits": {"node_execution_cap": 1},
       "steps": [{"key": "j", "job_type": "rm.mv17"}, {"key": "k", "job_type": "rm.mv17", "depends_on": ["j"]}]}',
   'complete_job');
-- Blocking, resuming, retrying and compensating: the run (pinned by
-- start_workflow where pinned) is first prepared, by the statements of
-- prepare, each given the run as $1, in a transaction of its own; in a
-- definition and in prepare, @ is the row's tag (its jobs' type rm.@).
--   pin(kind) breaks the run's pin that way, pin(mend) mends it (pin()
--   above); a BLOCKED_* run is made by breaking the pin, then completing
--   the step before the one it holds.
CREATE TEMP TABLE kinds (kind text, k integer);
INSERT INTO kinds VALUES ('BLOCKED_MISSING_HANDLER', 1), ('BLOCKED_MISSING_VERSION', 2),
                         ('BLOCKED_SIGNATURE_MISMATCH', 3);
INSERT INTO moves (label, def, prepare, op, pinned)
SELECT format(v.label, kinds.kind), v.def::jsonb, replace(v.prepare, '%s', kinds.kind), v.op, true
  FROM kinds CROSS JOIN (VALUES
  (1, 'running, then blocked (%s)',
   '{"steps": [{"key": "j", "job_type": "rm.@"}, {"key": "k", "job_type": "rm.@", "depends_on": ["j"]}]}',
   'SELECT pg_temp.pin($1, ''%s'')', 'complete_job'),
  (2, 'waiting, then blocked (%s)',
   '{"steps": [{"key": "x", "kind": "external"}, {"key": "k", "job_type": "rm.@", "depends_on": ["x"]}]}',
   'SELECT pg_temp.pin($1, ''%s'')', 'complete_external_step'),
  (3, 'resumed, a job released (%s)',
   '{"steps": [{"key": "x", "kind": "external"}, {"key": "k", "job_type": "rm.@", "depends_on": ["x"]}]}',
   'SELECT pg_temp.pin($1, ''%s''); SELECT workflow.complete_external_step($1, ''x'', ''SUCCEEDED'');
    SELECT pg_temp.pin($1, ''mend'')', 'resume_run'),
  (4, 'resumed, an external step released (%s)',
   '{"steps": [{"key": "x", "kind": "external"}, {"key": "y", "kind": "external", "depends_on": ["x"]}]}',
   'SELECT pg_temp.pin($1, ''%s''); SELECT workflow.complete_external_step($1, ''x'', ''SUCCEEDED'');
    SELECT pg_temp.pin($1, ''mend'')', 'resume_run'),
  (5, 'resumed, a sleep already due (%s)',
   '{"steps": [{"key": "x", "kind": "external"}, {"key": "z", "kind": "sleep", "seconds": 0, "depends_on": ["x"]}]}',
   'SELECT pg_temp.pin($1, ''%s''); SELECT workflow.complete_external_step($1, ''x'', ''SUCCEEDED'');
    SELECT pg_temp.pin($1, ''mend'')', 'resume_run'),
  (6, 'resumed, a sleep already due, a step failed (%s)',
   '{"steps": [{"key": "f", "kind": "external"}, {"key": "x", "kind": "external"},
               {"key": "z", "kind": "sleep", "seconds": 0, "depends_on": ["x"]}]}',
   'SELECT workflow.complete_external_step($1, ''f'', ''FAILED''); SELECT pg_temp.pin($1, ''%s'');
    SELECT workflow.complete_external_step($1, ''x'', ''SUCCEEDED''); SELECT pg_temp.pin($1, ''mend'')', 'resume_run'),
  (7, 'retried, the step held (%s)',
   '{"steps": [{"key": "j", "job_type": "rm.@", "max_attempts": 1}]}',
   'SELECT pg_temp.apply($1, ''fail_job'', ''@''); SELECT pg_temp.pin($1, ''%s'')', 'retry_run'),
  (8, 'a failed job in flight compensates a blocked run (%s)',
   '{"compensate_on": "failure",
     "steps": [{"key": "x", "kind": "external", "compensate": {"job_type": "rm.@"}},
               {"key": "k", "job_type": "rm.@", "depends_on": ["x"]},
               {"key": "f", "job_type": "rm.@", "max_attempts": 1}]}',
   'SELECT pg_temp.pin($1, ''%s''); SELECT workflow.complete_external_step($1, ''x'', ''SUCCEEDED'')',
   'fail_job')
  ) v(o, label, def, prepare, op)
 ORDER BY v.o, kinds.k;
-- resumed with the pin broken another way
INSERT INTO moves (label, def, prepare, op, pinned)
SELECT format('resumed, blocked otherwise (%s, then %s)', a.kind, b.kind),
       '{"steps": [{"key": "x", "kind": "external"}, {"key": "k", "job_type": "rm.@", "depends_on": ["x"]}]}',
       format('SELECT pg_temp.pin($1, %L); SELECT workflow.complete_external_step($1, ''x'', ''SUCCEEDED'');
               SELECT pg_temp.pin($1, %L)', a.kind, b.kind), 'resume_run', true
  FROM kinds a CROSS JOIN kinds b WHERE a.kind <> b.kind ORDER BY a.k, b.k;
INSERT INTO moves (label, def, prepare, op) VALUES
  ('retried, a job released', '{"steps": [{"key": "j", "job_type": "rm.@", "max_attempts": 1}]}',
   'SELECT pg_temp.apply($1, ''fail_job'', ''@'')', 'retry_run'),
  ('retried, an external step released', '{"steps": [{"key": "x", "kind": "external"}]}',
   'SELECT pg_temp.apply($1, ''fail_external'', ''@'')', 'retry_run'),
  ('retried, the event wait finds its event', '{"steps": [{"key": "e", "kind": "event", "event": "go", "wait_timeout_seconds": 60},
                                                          {"key": "x", "kind": "external"}]}',
   'SELECT pg_temp.apply($1, ''fire_timers'', ''@''); SELECT pg_temp.apply($1, ''send_event'', ''@'');
    SELECT workflow.complete_external_step($1, ''x'', ''SUCCEEDED'')', 'retry_run'),
  ('compensate a running run', '{"steps": [{"key": "j", "job_type": "rm.@", "compensate": {"job_type": "rm.@"}},
                                           {"key": "k", "job_type": "rm.@", "depends_on": ["j"]}]}',
   'SELECT pg_temp.apply($1, ''complete_job'', ''@'')', 'compensate_run'),
  ('compensate a waiting run', '{"steps": [{"key": "j", "job_type": "rm.@", "compensate": {"job_type": "rm.@"}},
                                           {"key": "x", "kind": "external"}]}',
   'SELECT pg_temp.apply($1, ''complete_job'', ''@'')', 'compensate_run'),
  ('compensate a run with errors', '{"steps": [{"key": "j", "job_type": "rm.@", "compensate": {"job_type": "rm.@"}},
                                               {"key": "x", "kind": "external"}]}',
   'SELECT pg_temp.apply($1, ''complete_job'', ''@''); SELECT pg_temp.apply($1, ''fail_external'', ''@'')', 'compensate_run'),
  ('a failed job compensates a running run', '{"compensate_on": "failure",
       "steps": [{"key": "j", "job_type": "rm.@", "compensate": {"job_type": "rm.@"}},
                 {"key": "f", "job_type": "rm.@", "max_attempts": 1, "depends_on": ["j"]}]}',
   'SELECT pg_temp.apply($1, ''complete_job'', ''@'')', 'fail_job'),
  ('a failed external step compensates a waiting run', '{"compensate_on": "failure",
       "steps": [{"key": "j", "job_type": "rm.@", "compensate": {"job_type": "rm.@"}}, {"key": "x", "kind": "external"}]}',
   'SELECT pg_temp.apply($1, ''complete_job'', ''@'')', 'fail_external'),
  ('a wait timing out compensates a waiting run', '{"compensate_on": "failure",
       "steps": [{"key": "j", "job_type": "rm.@", "compensate": {"job_type": "rm.@"}},
                 {"key": "e", "kind": "event", "event": "go", "wait_timeout_seconds": 60}]}',
   'SELECT pg_temp.apply($1, ''complete_job'', ''@'')', 'fire_timers'),
  ('the last compensation fails', '{"steps": [{"key": "j", "job_type": "rm.@", "compensate": {"job_type": "rm.@"}},
                                              {"key": "x", "kind": "external"}]}',
   'SELECT pg_temp.apply($1, ''complete_job'', ''@''); SELECT workflow.compensate_run($1)', 'fail_job'),
  ('the last wait leaves a job parked', '{"limits": {"node_execution_cap": 1},
       "steps": [{"key": "j", "job_type": "rm.@"}, {"key": "x", "kind": "external"},
                 {"key": "k", "job_type": "rm.@", "depends_on": ["j"]}]}',
   'SELECT pg_temp.apply($1, ''complete_job'', ''@'')', 'complete_external_step'),
  ('an increase lets a waiting run''s parked job run', '{"limits": {"node_execution_cap": 1},
       "steps": [{"key": "j", "job_type": "rm.@"}, {"key": "x", "kind": "external"},
                 {"key": "k", "job_type": "rm.@", "depends_on": ["j"]}]}',
   'SELECT pg_temp.apply($1, ''complete_job'', ''@'')', 'increase_execution_allowance'),
  ('retried, the job parked', '{"limits": {"node_execution_cap": 1},
       "steps": [{"key": "j", "job_type": "rm.@", "max_attempts": 1}]}',
   'SELECT pg_temp.apply($1, ''fail_job'', ''@'')', 'retry_run');
-- ended by the deadline, from each live status; a blocked run with a job
-- still running goes on RUNNING until it ends
INSERT INTO moves (label, def, prepare, op) VALUES
  ('the deadline ends a running run', '{"limits": {"deadline_seconds": 3600},
       "steps": [{"key": "j", "job_type": "rm.@"}]}', NULL, 'deadline'),
  ('the deadline ends a waiting run', '{"limits": {"deadline_seconds": 3600},
       "steps": [{"key": "x", "kind": "external"}]}', NULL, 'deadline'),
  ('the deadline ends a run waiting for allowance', '{"limits": {"deadline_seconds": 3600, "node_execution_cap": 1},
       "steps": [{"key": "j", "job_type": "rm.@"}, {"key": "k", "job_type": "rm.@", "depends_on": ["j"]}]}',
   'SELECT pg_temp.apply($1, ''complete_job'', ''@'')', 'deadline');
INSERT INTO moves (label, def, prepare, op, pinned)
SELECT format(v.label, kinds.kind), v.def::jsonb, replace(v.prepare, '%s', kinds.kind), 'deadline', true
  FROM kinds CROSS JOIN (VALUES
  (1, 'the deadline ends a blocked run (%s)',
   '{"limits": {"deadline_seconds": 3600},
     "steps": [{"key": "x", "kind": "external"}, {"key": "k", "job_type": "rm.@", "depends_on": ["x"]}]}',
   'SELECT pg_temp.pin($1, ''%s''); SELECT workflow.complete_external_step($1, ''x'', ''SUCCEEDED'')'),
  (2, 'the deadline leaves a blocked run a running job (%s)',
   '{"limits": {"deadline_seconds": 3600},
     "steps": [{"key": "r", "job_type": "rm.@"}, {"key": "x", "kind": "external"},
               {"key": "k", "job_type": "rm.@", "depends_on": ["x"]}]}',
   'SELECT pg_temp.apply($1, ''claim_job'', ''@''); SELECT pg_temp.pin($1, ''%s'');
    SELECT workflow.complete_external_step($1, ''x'', ''SUCCEEDED'')')) v(o, label, def, prepare)
 ORDER BY v.o, kinds.k;
-- resumed into a wait for allowance: the held step parks
INSERT INTO moves (label, def, prepare, op, pinned)
SELECT format('resumed, the job parked (%s)', kinds.kind),
       '{"limits": {"node_execution_cap": 1},
         "steps": [{"key": "a", "job_type": "rm.@"}, {"key": "x", "kind": "external"},
                   {"key": "k", "job_type": "rm.@", "depends_on": ["x"]}]}',
       format('SELECT pg_temp.apply($1, ''complete_job'', ''@''); SELECT pg_temp.pin($1, %L);
               SELECT workflow.complete_external_step($1, ''x'', ''SUCCEEDED'');
               SELECT pg_temp.pin($1, ''mend'')', kinds.kind), 'resume_run', true
  FROM kinds ORDER BY kinds.k;
UPDATE moves SET def = replace(def::text, 'rm.@', 'rm.mv' || n)::jsonb,
                 prepare = replace(prepare, '''@''', quote_literal('mv' || n));
UPDATE moves SET run = CASE WHEN pinned THEN pg_temp.pinned('rm.' || label, def)
                            ELSE workflow.start_run(def || jsonb_build_object('name', 'rm.' || label)) END;
CREATE FUNCTION pg_temp.prep(run uuid, stmts text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    stmt text;
BEGIN
    FOREACH stmt IN ARRAY string_to_array(stmts, ';') LOOP
        EXECUTE stmt USING run;
    END LOOP;
END $$;
SELECT format('SELECT pg_temp.prep(run, prepare) FROM moves WHERE n = %s', n)
  FROM moves WHERE prepare IS NOT NULL ORDER BY n \gexec
UPDATE moves m SET from_status = r.status::text FROM workflow.workflow_runs r WHERE r.id = m.run;
SELECT format('UPDATE moves SET result = pg_temp.apply(run, op, ''mv'' || n) WHERE n = %s', n)
  FROM moves ORDER BY n \gexec
SELECT label, op, from_status, result,
       (SELECT string_agg(s.step_key || '=' || s.status, ' ' ORDER BY s.step_key)
          FROM workflow.workflow_steps s WHERE s.workflow_run_id = m.run) AS steps
  FROM moves m ORDER BY n;

-- 3. A run whose steps all finish inside start_run: it enters RUNNING and
-- leaves it for SUCCEEDED in the same call (its history shows both).
SELECT workflow.start_run('{"name": "rm.instant", "steps": [
    {"key": "z", "kind": "sleep", "seconds": 0},
    {"key": "y", "kind": "sleep", "until": "2000-01-01T00:00:00Z", "depends_on": ["z"]}]}') AS instant \gset
SELECT status, finished_at IS NOT NULL AS finished FROM workflow.workflow_runs WHERE id = :'instant';
SELECT event_type, detail FROM workflow.run_history(:'instant') WHERE step_key IS NULL ORDER BY id;

-- 4. The engine's table of moves.
SELECT * FROM workflow._run_moves() ORDER BY 1, 2, 3;
-- The moves seen above: each run's status before and after its operation
-- (a start_run's from its run_started event, the instant run's from its
-- history), under the call that made it: cancel_run, start_run and the
-- operator's calls under their own name, the calls that change steps
-- under "step change", or, where such a call moved the run into a
-- compensation, "compensate_on failure".  A call that starts a
-- compensation with nothing left to undo ends it at once: that is two
-- moves, into COMPENSATING by the call and out of it by the chain's end, a
-- step change.
CREATE TEMP VIEW seen AS
WITH raw AS (
    SELECT from_status, to_status, op FROM matrix
    UNION ALL
    SELECT m.from_status, r.status::text, m.op FROM moves m JOIN workflow.workflow_runs r ON r.id = m.run
    UNION ALL
    SELECT detail ->> 'from', detail ->> 'to', 'step change'
      FROM workflow.run_history(:'instant') WHERE event_type = 'run_status_changed'
    UNION ALL
    SELECT NULL, detail ->> 'status', 'start_run'
      FROM workflow.workflow_events
     WHERE event_type = 'run_started'
       AND workflow_run_id IN (SELECT id FROM workflow.workflow_runs)
), called AS (
    SELECT from_status, to_status,
           CASE WHEN op IN ('cancel_run', 'start_run', 'retire_run', 'resume_run', 'retry_run', 'compensate_run',
                            'increase_execution_allowance')
                THEN op
                WHEN op = 'deadline' THEN 'run deadline'
                WHEN coalesce(from_status, '') <> 'COMPENSATING'
                 AND to_status IN ('COMPENSATING', 'COMPENSATED', 'COMPENSATION_FAILED')
                THEN 'compensate_on failure'
                ELSE 'step change' END AS call
      FROM raw
     WHERE from_status IS DISTINCT FROM to_status
)
SELECT from_status, to_status, call FROM called
 WHERE NOT (call IN ('compensate_run', 'compensate_on failure')
            AND to_status IN ('COMPENSATED', 'COMPENSATION_FAILED'))
UNION ALL
SELECT from_status, 'COMPENSATING', call FROM called
 WHERE call IN ('compensate_run', 'compensate_on failure')
   AND to_status IN ('COMPENSATED', 'COMPENSATION_FAILED')
UNION ALL
SELECT 'COMPENSATING', to_status, 'step change' FROM called
 WHERE call IN ('compensate_run', 'compensate_on failure')
   AND to_status IN ('COMPENSATED', 'COMPENSATION_FAILED');
-- every move seen is in the table (no rows: none missing)
SELECT DISTINCT seen.* FROM seen
 WHERE NOT EXISTS (SELECT FROM workflow._run_moves() t
                    WHERE t.from_status IS NOT DISTINCT FROM seen.from_status
                      AND t.to_status = seen.to_status AND t.call = seen.call)
 ORDER BY 1, 2, 3;
-- and every move of the table was seen (the rows: the moves not seen)
SELECT t.* FROM workflow._run_moves() t
 WHERE NOT EXISTS (SELECT FROM seen
                    WHERE t.from_status IS NOT DISTINCT FROM seen.from_status
                      AND t.to_status = seen.to_status AND t.call = seen.call)
 ORDER BY 1, 2, 3;
-- no move out of a finished status but COMPLETED_WITH_ERRORS's, by
-- retry_run and compensate_run; none into RUNNING or WAITING_FOR_EXTERNAL
-- but between the two, from start_run, resume_run, retry_run,
-- increase_execution_allowance and (out of a blocked status, with a job
-- still running) the run deadline
SELECT * FROM workflow._run_moves()
 WHERE (from_status IN ('SUCCEEDED', 'CANCELED', 'RETIRED_UNRESUMABLE', 'COMPENSATED', 'COMPENSATION_FAILED')
        OR (from_status = 'COMPLETED_WITH_ERRORS' AND call NOT IN ('retry_run', 'compensate_run'))
        OR (to_status IN ('RUNNING', 'WAITING_FOR_EXTERNAL')
            AND call NOT IN ('start_run', 'resume_run', 'retry_run', 'increase_execution_allowance',
                             'run deadline')
            AND from_status NOT IN ('RUNNING', 'WAITING_FOR_EXTERNAL')))
   AND to_status <> from_status
 ORDER BY 1, 2, 3;
-- the table is the superuser's alone
SELECT has_function_privilege(r, 'workflow._run_moves()', 'EXECUTE') AS may_execute, r AS role
  FROM unnest(ARRAY['workflow_worker', 'workflow_client', 'workflow_reader', 'workflow_admin']) r
 ORDER BY r;

SELECT * FROM workflow.verify();

-- No call can ask for a move the table does not hold; the check stands
-- guard against the engine's own counters.  A run row set to SUCCEEDED by
-- hand while two of its steps still run: completing one of them would move
-- the run from SUCCEEDED back to RUNNING, and the check refuses it, under
-- the run row's lock, before anything is written.
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "moves.forced"},
                                      {"key": "b", "job_type": "moves.forced"}]}') AS forced \gset
SELECT id AS forced_job, lease_token AS forced_token
  FROM workflow.claim('w', ARRAY['moves.forced']) \gset
UPDATE workflow.workflow_runs SET status = 'SUCCEEDED' WHERE id = :'forced';
CREATE FUNCTION pg_temp.try_masked(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || regexp_replace(SQLERRM, '[0-9a-f]{8}-[0-9a-f-]{27}', '<run>', 'g');
END $$;
SELECT pg_temp.try_masked(format('SELECT workflow.complete_job(%L, %L)',
                                 :'forced_job', :'forced_token')) AS refused;
SELECT s.step_key, s.status, j.status AS job_status
  FROM workflow.workflow_steps s JOIN workflow.job_queue j ON j.id = s.job_id
 WHERE s.workflow_run_id = :'forced' ORDER BY s.step_key;

-- the files that follow truncate the runs but not the inbox: leave none of
-- this file's rows behind
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox, workflow.workflow_definitions;
