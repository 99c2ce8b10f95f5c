-- Sagas (1.7): compensate jobs on job and external steps, compensate_run,
-- "compensate_on": "failure", the chain in exact reverse completion order,
-- failed compensations, cancel_run of a compensating run, and the
-- definitions refused.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox;

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
-- steps(run): each step's status, reason, and whether it has a place in
-- the completion order
CREATE FUNCTION pg_temp.steps(run uuid)
RETURNS TABLE (step_key text, status text, status_reason text, seq boolean, held boolean)
LANGUAGE sql AS $$
    SELECT step_key, status::text, status_reason, completion_seq IS NOT NULL, held
      FROM workflow.workflow_steps WHERE workflow_run_id = run ORDER BY step_key
$$;
CREATE FUNCTION pg_temp.run(r uuid)
RETURNS TABLE (status text, compensations_failed integer, finished boolean)
LANGUAGE sql AS $$
    SELECT status::text, compensations_failed, finished_at IS NOT NULL
      FROM workflow.workflow_runs WHERE id = r
$$;
-- work(type, output): claims one job of the type and completes it; returns
-- the step it ran
CREATE FUNCTION pg_temp.work(jt text, out_ jsonb DEFAULT NULL) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    j workflow.job_queue;
BEGIN
    SELECT * INTO j FROM workflow.claim('saga-worker', ARRAY[jt]);
    IF j.id IS NULL THEN
        RETURN 'no job';
    END IF;
    PERFORM workflow.complete_job(j.id, j.lease_token, out_);
    RETURN (SELECT step_key FROM workflow.workflow_steps WHERE id = j.workflow_step_id);
END $$;
-- undo(type, fail): runs the compensation chain of a job type to its end,
-- completing (or failing for good, when fail) each compensation job as it
-- comes; returns the steps undone, in the order their jobs came
CREATE FUNCTION pg_temp.undo(jt text, fail boolean DEFAULT false) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    j workflow.job_queue;
    seen text := '';
BEGIN
    LOOP
        SELECT * INTO j FROM workflow.claim('saga-undoer', ARRAY[jt]);
        EXIT WHEN j.id IS NULL;
        IF NOT j.compensation THEN
            RAISE EXCEPTION 'undo: job % is not a compensation job', j.payload;
        END IF;
        seen := seen || (j.payload ->> 'step_key') || ' ';
        IF fail THEN
            PERFORM workflow.fail_job(j.id, j.lease_token, 'undo.broken', 'cannot undo', false);
        ELSE
            PERFORM workflow.complete_job(j.id, j.lease_token, '{"undone": true}');
        END IF;
    END LOOP;
    RETURN rtrim(seen);
END $$;

-- 1. The chain's order over a DAG with parallel branches.  a first; b, c
-- and d in parallel after a; e after b and c; f after d; no compensate on
-- d.  b and c finish in one complete_jobs call, d then; e is left running,
-- f queued.
SELECT workflow.start_run('{"name": "saga.dag", "steps": [
    {"key": "a", "job_type": "dag.work", "payload": {"p": "a"},
     "compensate": {"job_type": "dag.undo"}},
    {"key": "b", "job_type": "dag.work", "payload": {"p": "b"}, "depends_on": ["a"],
     "compensate": {"job_type": "dag.undo", "payload": {"refund": "b"}}},
    {"key": "c", "job_type": "dag.work", "depends_on": ["a"],
     "compensate": {"job_type": "dag.undo"}},
    {"key": "d", "job_type": "dag.work", "depends_on": ["a"]},
    {"key": "e", "job_type": "dag.work", "depends_on": ["b", "c"],
     "compensate": {"job_type": "dag.undo"}},
    {"key": "f", "job_type": "dag.work", "depends_on": ["d"],
     "compensate": {"job_type": "dag.undo"}}]}') AS dag \gset
SELECT pg_temp.work('dag.work', '{"made": "a"}') AS ran;
CREATE TEMP TABLE held_jobs AS
SELECT q.id, q.lease_token, s.step_key
  FROM workflow.claim('saga-worker', ARRAY['dag.work'], 3) q
  JOIN workflow.workflow_steps s ON s.id = q.workflow_step_id;
SELECT step_key FROM held_jobs ORDER BY step_key;
SELECT count(*) AS completed FROM workflow.complete_jobs(
    ARRAY[(SELECT id FROM held_jobs WHERE step_key = 'c'), (SELECT id FROM held_jobs WHERE step_key = 'b')],
    ARRAY[(SELECT lease_token FROM held_jobs WHERE step_key = 'c'), (SELECT lease_token FROM held_jobs WHERE step_key = 'b')],
    ARRAY['{"made": "c"}', '{"made": "b"}']::jsonb[]);
SELECT workflow.complete_job(id, lease_token, '{"made": "d"}') FROM held_jobs WHERE step_key = 'd';
-- e is claimed (a worker holds it), f is queued
SELECT id AS e_job, lease_token AS e_token FROM workflow.claim('saga-worker', ARRAY['dag.work'])
 WHERE workflow_step_id = (SELECT id FROM workflow.workflow_steps WHERE workflow_run_id = :'dag' AND step_key = 'e') \gset
SELECT * FROM pg_temp.steps(:'dag');
-- the completion order: a, then b and c, told apart though one call
-- finished both (in the order it took their jobs); d, with nothing to
-- undo, has no place
SELECT step_key, rank() OVER (ORDER BY completion_seq) AS completed
  FROM workflow.workflow_steps WHERE workflow_run_id = :'dag' AND completion_seq IS NOT NULL
 ORDER BY completion_seq;
SELECT workflow.compensate_run(:'dag', 'customer gave up') AS status;
SELECT * FROM pg_temp.run(:'dag');
-- e and f canceled, d has nothing to undo, c (finished last) is undone first
SELECT * FROM pg_temp.steps(:'dag');
-- the worker that held e finds its job canceled
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'e_job', :'e_token')) AS e_worker;
-- the compensation job: a job of the step's next generation, its payload
-- the step key, the step's output and compensate.payload
SELECT q.job_type, q.compensation, q.status, q.generation, q.payload, q.max_attempts,
       q.workflow_step_id = s.id AS of_the_step, s.job_id = q.id AS the_steps_job
  FROM workflow.job_queue q JOIN workflow.workflow_steps s ON s.id = q.workflow_step_id
 WHERE q.workflow_run_id = :'dag' AND q.compensation;
-- one live compensation job at a time; compensate_run again while it
-- compensates returns the status and starts nothing
SELECT workflow.compensate_run(:'dag', 'twice') AS again;
SELECT count(*) AS live_compensations FROM workflow.job_queue
 WHERE workflow_run_id = :'dag' AND compensation AND status IN ('QUEUED', 'RUNNING');
SELECT count(*) AS compensations_started FROM workflow.run_history(:'dag')
 WHERE event_type = 'compensation_started';
-- the chain, in reverse completion order: c, b, a (the payload of a step
-- without compensate.payload is the step's own)
SELECT pg_temp.undo('dag.undo') AS undone;
SELECT payload FROM workflow.job_queue
 WHERE workflow_run_id = :'dag' AND compensation ORDER BY id;
SELECT * FROM pg_temp.run(:'dag');
SELECT * FROM pg_temp.steps(:'dag');
-- its history, in order (the steps one statement released, or one claim
-- started, by step key: their order within the statement follows their
-- ids, or their counter shards, which are drawn)
SELECT event_type, step_key,
       CASE WHEN event_type IN ('step_compensating') THEN detail - 'job_id' - 'completion_seq'
            WHEN event_type IN ('step_status_changed', 'run_status_changed', 'run_started',
                                'compensation_started', 'step_compensated', 'step_compensation_failed')
            THEN detail - 'job_id' ELSE NULL END AS detail
  FROM workflow.run_history(:'dag')
 ORDER BY CASE WHEN event_type IN ('step_released', 'step_started')
               THEN min(id) OVER (PARTITION BY created_at, event_type) ELSE id END,
          step_key, id;
-- compensate_run again: the same status, no second chain
SELECT workflow.compensate_run(:'dag') AS again;
SELECT count(*) AS compensation_jobs FROM workflow.job_queue WHERE workflow_run_id = :'dag' AND compensation;

-- 2. A compensation that fails every attempt: max_attempts 2, each attempt
-- failed; the step is COMPENSATION_FAILED with the job's error code, the
-- chain goes on to the next step, and the run ends COMPENSATION_FAILED
-- with compensations_failed counted.  Its end is notified.
SELECT workflow.start_run('{"name": "saga.fail", "steps": [
    {"key": "p", "job_type": "fail.work", "compensate": {"job_type": "fail.undo.p"}},
    {"key": "q", "job_type": "fail.work", "depends_on": ["p"],
     "compensate": {"job_type": "fail.undo.q", "max_attempts": 2}},
    {"key": "r", "kind": "external"}]}') AS bad \gset
SELECT pg_temp.work('fail.work') AS ran;
SELECT pg_temp.work('fail.work') AS ran;
SELECT workflow.compensate_run(:'bad', 'undo it') AS status;
SELECT workflow.claim('w', ARRAY['fail.undo.q']) IS NOT NULL AS claimed_1 \gset
SELECT id AS qj, lease_token AS qt FROM workflow.job_queue
 WHERE workflow_run_id = :'bad' AND job_type = 'fail.undo.q' \gset
SELECT workflow.fail_job(:'qj', :'qt', 'undo.timeout', 'first try');
SELECT status, attempt FROM workflow.job_queue WHERE id = :'qj';
SELECT * FROM pg_temp.steps(:'bad');
SELECT id AS qj, lease_token AS qt FROM workflow.claim('w', ARRAY['fail.undo.q']) \gset
SELECT workflow.fail_job(:'qj', :'qt', 'undo.timeout', 'second try');
SELECT status, attempt FROM workflow.job_queue WHERE id = :'qj';
SELECT * FROM pg_temp.steps(:'bad');
SELECT * FROM pg_temp.run(:'bad');
LISTEN workflow_run_terminal;
\o results/sagas.notifications
SELECT pg_temp.undo('fail.undo.p') AS undone;
\o
SELECT * FROM pg_temp.steps(:'bad');
SELECT * FROM pg_temp.run(:'bad');

-- 3. An all-successful chain ends COMPENSATED, notified as it ends; a
-- compensate on an external step; a step without compensate.
SELECT workflow.start_run('{"name": "saga.ok", "steps": [
    {"key": "j", "job_type": "ok.work", "compensate": {"job_type": "ok.undo", "priority": 7,
                                                        "timeout_seconds": 30, "stage": "undo"}},
    {"key": "x", "kind": "external", "compensate": {"job_type": "ok.undo", "payload": {"x": 1}}},
    {"key": "plain", "job_type": "ok.work", "depends_on": ["j"]},
    {"key": "later", "kind": "external", "depends_on": ["x"]}]}') AS ok \gset
SELECT pg_temp.work('ok.work', '{"j": 1}') AS ran;
SELECT status FROM workflow.complete_external_step(:'ok', 'x', 'SUCCEEDED', '{"x_out": 2}');
SELECT pg_temp.work('ok.work') AS ran;
SELECT status::text FROM workflow.workflow_runs WHERE id = :'ok';
SELECT workflow.compensate_run(:'ok', 'undo ok') AS status;
SELECT * FROM pg_temp.steps(:'ok');
-- x finished last: its job comes first, with compensate.payload
SELECT job_type, priority, timeout_seconds, stage, payload FROM workflow.job_queue
 WHERE workflow_run_id = :'ok' AND compensation;
SELECT id AS xj, lease_token AS xt FROM workflow.claim('w', ARRAY['ok.undo'], 1, NULL, NULL) \gset
SELECT workflow.complete_job(:'xj', :'xt');
-- j's, with j's own payload and output, its priority, timeout and stage
SELECT job_type, priority, timeout_seconds, stage, payload FROM workflow.job_queue
 WHERE workflow_run_id = :'ok' AND compensation ORDER BY id;
SELECT id AS jj, lease_token AS jt FROM workflow.claim('w', ARRAY['ok.undo'], 1, NULL, 'undo') \gset
\o results/sagas.notifications2
SELECT workflow.complete_job(:'jj', :'jt');
\o
UNLISTEN *;
SELECT * FROM pg_temp.run(:'ok');
SELECT * FROM pg_temp.steps(:'ok');
-- the notifications: the failed chain's end, then the successful one's
CREATE TEMP TABLE received (n serial, line text);
\copy received (line) FROM 'results/sagas.notifications'
\copy received (line) FROM 'results/sagas.notifications2'
SELECT m[1] AS channel,
       replace(replace(m[2], :'bad', 'bad'), :'ok', 'ok') AS payload,
       m[3] = pg_backend_pid()::text AS this_backend
  FROM received r
 CROSS JOIN LATERAL regexp_match(r.line,
       '^Asynchronous notification "([^"]*)" with payload "(.*)" received from server process with PID ([0-9]+)\.$') m
 WHERE m IS NOT NULL ORDER BY r.n;

-- 4. compensate_run from COMPLETED_WITH_ERRORS: the succeeded steps are
-- undone, the failed one stays FAILED.
SELECT workflow.start_run('{"name": "saga.cwe", "steps": [
    {"key": "j", "job_type": "cwe.work", "compensate": {"job_type": "cwe.undo"}},
    {"key": "x", "kind": "external", "compensate": {"job_type": "cwe.undo"}}]}') AS cwe \gset
SELECT pg_temp.work('cwe.work') AS ran;
SELECT status FROM workflow.complete_external_step(:'cwe', 'x', 'FAILED', error_code => 'x.broke');
SELECT workflow.compensate_run(:'cwe') AS status;
SELECT * FROM pg_temp.steps(:'cwe');
SELECT pg_temp.undo('cwe.undo') AS undone;
SELECT * FROM pg_temp.run(:'cwe');

-- 5. compensate_on failure: the failure of a step (for good) starts the
-- compensation in its own transaction.  The running sibling s is
-- canceled, its worker finds job.canceled; t, an ON_TERMINAL dependent of
-- the failed step, is not released.
SELECT workflow.start_run('{"name": "saga.onfail", "compensate_on": "failure", "steps": [
    {"key": "a", "job_type": "onf.a", "compensate": {"job_type": "onf.undo"}},
    {"key": "s", "job_type": "onf.s", "depends_on": ["a"], "compensate": {"job_type": "onf.undo"}},
    {"key": "f", "job_type": "onf.f", "depends_on": ["a"], "max_attempts": 1},
    {"key": "t", "job_type": "onf.t", "depends_on": [{"step": "f", "release": "on_terminal"}]}]}') AS onf \gset
SELECT compensate_on_failure FROM workflow.workflow_runs WHERE id = :'onf';
SELECT pg_temp.work('onf.a', '{"a": 1}') AS ran;
SELECT id AS sj, lease_token AS st FROM workflow.claim('w', ARRAY['onf.s']) \gset
SELECT id AS fj, lease_token AS ft FROM workflow.claim('w', ARRAY['onf.f']) \gset
SELECT workflow.fail_job(:'fj', :'ft', 'f.broke', 'it broke');
SELECT * FROM pg_temp.run(:'onf');
SELECT * FROM pg_temp.steps(:'onf');
SELECT job_id IS NULL AS t_never_had_a_job FROM workflow.workflow_steps WHERE workflow_run_id = :'onf' AND step_key = 't';
SELECT count(*) AS t_released FROM workflow.run_history(:'onf') WHERE step_key = 't' AND event_type = 'step_released';
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'sj', :'st')) AS s_worker;
SELECT detail FROM workflow.run_history(:'onf') WHERE event_type = 'compensation_started';
SELECT pg_temp.undo('onf.undo') AS undone;
SELECT * FROM pg_temp.run(:'onf');
-- a canceled step does not start it: cancel_run of such a run is a cancel
SELECT workflow.start_run('{"name": "saga.onfail2", "compensate_on": "failure", "steps": [
    {"key": "a", "job_type": "onf2.a", "compensate": {"job_type": "onf2.undo"}},
    {"key": "b", "job_type": "onf2.b", "depends_on": ["a"]}]}') AS onf2 \gset
SELECT pg_temp.work('onf2.a') AS ran;
SELECT workflow.cancel_run(:'onf2') AS status;
SELECT * FROM pg_temp.steps(:'onf2');
SELECT count(*) AS compensation_jobs FROM workflow.job_queue WHERE workflow_run_id = :'onf2' AND compensation;

-- 6. cancel_run during compensation: the COMPENSATING step is
-- COMPENSATION_FAILED (workflow.run_canceled, counted in
-- compensations_failed), its job CANCELED, the run CANCELED; the step not
-- yet reached stays SUCCEEDED; the worker holding the compensation job
-- finds job.canceled.
SELECT workflow.start_run('{"name": "saga.cancel", "steps": [
    {"key": "a", "job_type": "cc.work", "compensate": {"job_type": "cc.undo"}},
    {"key": "b", "job_type": "cc.work", "depends_on": ["a"], "compensate": {"job_type": "cc.undo"}},
    {"key": "c", "kind": "external"}]}') AS cc \gset
SELECT pg_temp.work('cc.work') AS ran;
SELECT pg_temp.work('cc.work') AS ran;
SELECT workflow.compensate_run(:'cc', 'undo') AS status;
SELECT id AS ccj, lease_token AS cct FROM workflow.claim('w', ARRAY['cc.undo']) \gset
SELECT workflow.cancel_run(:'cc', 'stop undoing') AS status;
-- the abandoned compensation is counted as a failed one
SELECT * FROM pg_temp.run(:'cc');
SELECT * FROM pg_temp.steps(:'cc');
SELECT status, compensation FROM workflow.job_queue WHERE id = :'ccj';
SELECT pg_temp.err(format('SELECT workflow.complete_job(%L, %L)', :'ccj', :'cct')) AS undo_worker;
SELECT count(*) AS live_jobs FROM workflow.job_queue WHERE workflow_run_id = :'cc' AND status IN ('QUEUED', 'RUNNING');
-- cancel_run again, compensate_run on it: the same status / refused
SELECT workflow.cancel_run(:'cc') AS again;
SELECT pg_temp.err(format('SELECT workflow.compensate_run(%L)', :'cc')) AS compensate_canceled;

-- 7. compensate_run refused on a SUCCEEDED and a CANCELED run; on a
-- finished saga it returns the status; unknown run, bad organization.
SELECT workflow.start_run('{"steps": [{"key": "j", "job_type": "done.work",
                                       "compensate": {"job_type": "done.undo"}}]}') AS done \gset
SELECT pg_temp.work('done.work') AS ran;
SELECT pg_temp.errm(format('SELECT workflow.compensate_run(%L)', :'done')) AS succeeded;
SELECT workflow.start_run('{"steps": [{"key": "x", "kind": "external"}]}') AS canc \gset
SELECT workflow.cancel_run(:'canc') AS status;
SELECT pg_temp.errm(format('SELECT workflow.compensate_run(%L)', :'canc')) AS canceled;
SELECT count(*) AS compensation_jobs FROM workflow.job_queue WHERE workflow_run_id IN (:'done', :'canc') AND compensation;
SELECT workflow.compensate_run(:'ok') AS compensated, workflow.compensate_run(:'bad') AS compensation_failed;
SELECT pg_temp.err(format('SELECT workflow.compensate_run(%L)', workflow.uuid_v7())) AS unknown_run;

-- 8. Bad compensate objects and compensate_on: workflow.invalid_definition,
-- the message naming the step; nothing started.
SELECT count(*) AS runs_before FROM workflow.workflow_runs \gset
CREATE FUNCTION pg_temp.bad(comp text) RETURNS text LANGUAGE sql AS $$
    SELECT pg_temp.errm(format('SELECT workflow.start_run(%L)',
        '{"steps": [{"key": "ok", "job_type": "t"}, {"key": "s1", "job_type": "t", "compensate": ' || comp || '}]}'))
$$;
SELECT left(c, 40) AS compensate, pg_temp.bad(c) AS refused FROM (VALUES
    ('"undo"'), ('["undo"]'), ('7'), ('{}'), ('{"job_type": ""}'), ('{"job_type": 5}'),
    ('{"job_type": null}'), ('{"job_type": "u", "payload": null}'), ('{"job_type": "u", "priority": "high"}'),
    ('{"job_type": "u", "priority": 1.5}'), ('{"job_type": "u", "max_attempts": 0}'),
    ('{"job_type": "u", "timeout_seconds": 0}'), ('{"job_type": "u", "stage": 3}'),
    ('{"job_type": "u", "retries": 2}'), ('{"job_type": "u", "depends_on": ["ok"]}'),
    (format('{"job_type": "%s"}', repeat('u', 300)))) v(c);
SET workflow.max_payload_bytes = 100;
SELECT pg_temp.bad(format('{"job_type": "u", "payload": {"big": "%s"}}', repeat('p', 100))) AS too_big;
RESET workflow.max_payload_bytes;
-- on a sleep or an event step
SELECT pg_temp.errm($$SELECT workflow.start_run('{"steps": [{"key": "nap", "kind": "sleep", "seconds": 5,
    "compensate": {"job_type": "u"}}]}')$$) AS on_sleep;
SELECT pg_temp.errm($$SELECT workflow.start_run('{"steps": [{"key": "wait", "kind": "event", "event": "go",
    "compensate": {"job_type": "u"}}]}')$$) AS on_event;
SELECT c AS compensate_on, pg_temp.errm(format('SELECT workflow.start_run(%L)',
    '{"compensate_on": ' || c || ', "steps": [{"key": "a", "job_type": "t"}]}')) AS refused
  FROM (VALUES ('"always"'), ('"Failure"'), ('true'), ('["failure"]'), ('{"on": "failure"}')) v(c);
-- the registry refuses them too
SELECT pg_temp.errm($$SELECT workflow.register_workflow('saga.bad', '1', '{"steps": [{"key": "k", "job_type": "t",
    "compensate": {"priority": 1}}]}')$$) AS registered;
SELECT count(*) - :runs_before AS runs_started FROM workflow.workflow_runs;
-- a null compensate is none, a null compensate_on too
SELECT pg_temp.bad('null') AS null_compensate;
SELECT compensate IS NULL AS no_compensate FROM workflow.workflow_steps WHERE step_key = 's1';
SELECT workflow.start_run('{"compensate_on": null, "steps": [{"key": "a", "job_type": "t"}]}') AS nullon \gset
SELECT compensate_on_failure FROM workflow.workflow_runs WHERE id = :'nullon';

SELECT * FROM workflow.verify();
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox, workflow.workflow_definitions;
