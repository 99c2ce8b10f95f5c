-- Timers and events (1.6): sleep steps (seconds, until, past, zero), job
-- steps with start_after_seconds, event steps (buffered before their
-- release, consumed after it, FIFO over two waits of one name, a timeout
-- with its dependents, a late event, dedupe), send_event's errors in order,
-- fire_timers' batches and errors, cancel_run and cancel_job of runs with
-- timers, purge of the inbox, the new history events, the new invariants
-- of verify(), and every new field of the definition refused with a
-- message naming its step.
--
-- The clock is moved as the model test moves it for leases: the superuser
-- sets a step's wake_at (or a job's run_at) into the past, then calls
-- fire_timers() (or claim).
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
SET TimeZone = 'UTC';
SET IntervalStyle = 'postgres';
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox;

\set org_a 'a0000000-0000-4000-8000-00000000000a'
\set org_b 'b0000000-0000-4000-8000-00000000000b'

-- err() shows a statement's SQLSTATE and stable code; msg() its SQLSTATE
-- and whole message (for errors whose messages name no id)
CREATE FUNCTION pg_temp.err(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || split_part(SQLERRM, ':', 1);
END $$;
CREATE FUNCTION pg_temp.msg(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
-- def() starts a run of one definition, or shows why it is refused
CREATE FUNCTION pg_temp.def(d text) RETURNS text LANGUAGE sql AS $$
    SELECT pg_temp.msg(format('SELECT workflow.start_run(%L)', d))
$$;
-- st(run): a run's steps; wake is "released_at + <interval>" for a wake
-- time counted from the release, the time itself for a sleep until, "due"
-- once it is in the past
CREATE FUNCTION pg_temp.st(run uuid)
RETURNS TABLE (step text, kind text, status text, reason text, error_code text,
               output jsonb, event text, wake text)
LANGUAGE sql AS $$
    SELECT step_key, execution_kind::text, status::text, status_reason, last_error_code,
           output, event_name,
           CASE WHEN wake_at IS NULL THEN NULL
                WHEN wake_at <= now() THEN 'due'
                WHEN sleep_until IS NOT NULL
                THEN to_char(wake_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
                ELSE 'released_at + ' || (wake_at - released_at)::text END
      FROM workflow.workflow_steps WHERE workflow_run_id = run ORDER BY step_key
$$;
-- rn(run): a run's status, whether it finished, its result and its counts
CREATE FUNCTION pg_temp.rn(run uuid)
RETURNS TABLE (status text, finished boolean, result jsonb, active integer,
               waiting integer, blocked integer, succeeded integer, failed integer,
               canceled integer)
LANGUAGE sql AS $$
    SELECT r.status::text, r.finished_at IS NOT NULL, r.result, c.steps_active,
           c.steps_waiting, c.steps_blocked, c.steps_succeeded, c.steps_failed,
           c.steps_canceled
      FROM workflow.workflow_runs r CROSS JOIN LATERAL workflow.run_counters(r.id) c
     WHERE r.id = run
$$;
-- inbox(run): a run's events in the order they were sent
CREATE FUNCTION pg_temp.inbox(run uuid)
RETURNS TABLE (event_name text, payload jsonb, dedupe_key text, consumed boolean,
               consumed_by text)
LANGUAGE sql AS $$
    SELECT event_name, payload, dedupe_key, consumed_at IS NOT NULL, consumed_by_step_key
      FROM workflow.event_inbox WHERE workflow_run_id = run ORDER BY created_at, id
$$;
-- h(run): a run's history without ids, times and role names; facts shows
-- "job" where the detail names a job, "wake_at=defined" where the detail's
-- wake_at is the step's release time plus its seconds (or its until),
-- "wake_at" where it has one, and "event=<payload>" naming the inbox row
-- that detail's event_id points at; the steps one statement canceled by
-- step key (their order within the statement follows their ids, or their
-- counter shards, which are drawn)
CREATE FUNCTION pg_temp.h(run uuid)
RETURNS TABLE (step_key text, event_type text, detail jsonb, facts text)
LANGUAGE sql AS $$
    SELECT e.step_key, e.event_type, e.detail - '{job_id,run_at,role,wake_at,event_id}'::text[],
           concat_ws(' ',
               CASE WHEN e.detail ? 'job_id' THEN 'job' END,
               CASE WHEN NOT e.detail ? 'wake_at' THEN NULL
                    WHEN (e.detail ->> 'wake_at')::timestamptz =
                         (SELECT coalesce(s.sleep_until, s.released_at + make_interval(secs => s.sleep_seconds),
                                          s.released_at + make_interval(secs => s.wait_timeout_seconds))
                            FROM workflow.workflow_steps s
                           WHERE s.workflow_run_id = e.workflow_run_id AND s.step_key = e.step_key)
                    THEN 'wake_at=defined' ELSE 'wake_at' END,
               CASE WHEN e.detail ? 'event_id'
                    THEN 'event=' || coalesce((SELECT i.payload::text FROM workflow.event_inbox i
                                                WHERE i.id = (e.detail ->> 'event_id')::uuid), 'missing') END)
      FROM workflow.run_history(run) e
     ORDER BY CASE WHEN e.event_type = 'step_canceled'
                   THEN min(e.id) OVER (PARTITION BY e.created_at, e.event_type) ELSE e.id END,
              e.step_key, e.id
$$;
-- take(type): claims one job of a type
CREATE FUNCTION pg_temp.take(jt text)
RETURNS TABLE (id uuid, lease_token uuid)
LANGUAGE sql AS $$
    SELECT id, lease_token FROM workflow.claim('te-worker', ARRAY[jt])
$$;
-- finish(type): claims and completes one job of a type
CREATE FUNCTION pg_temp.finish(jt text, output jsonb DEFAULT NULL) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    j record;
BEGIN
    SELECT * INTO j FROM workflow.claim('te-worker', ARRAY[jt]);
    IF j.id IS NULL THEN
        RETURN 'nothing to claim';
    END IF;
    PERFORM workflow.complete_job(j.id, j.lease_token, output);
    RETURN 'completed';
END $$;
-- due(run, step): moves a step's wake time one second into the past
CREATE FUNCTION pg_temp.due(run uuid, step text) RETURNS text LANGUAGE sql AS $$
    UPDATE workflow.workflow_steps SET wake_at = now() - interval '1 second'
     WHERE workflow_run_id = run AND step_key = step AND wake_at IS NOT NULL
    RETURNING step_key || ' due'
$$;

-- roles left by an earlier run that stopped half-way
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_te_client_a, regress_te_client_b, regress_te_worker_b, regress_te_worker_a,
    regress_te_worker, regress_te_client;
RESET client_min_messages;

-- =========================================================================
-- 1. The definition: every new field's errors, each naming its step, and
-- nothing written.
SELECT count(*) AS runs_before FROM workflow.workflow_runs \gset
-- sleep: exactly one of seconds and until
SELECT pg_temp.def('{"steps": [{"key": "s1", "kind": "sleep"}]}');
SELECT pg_temp.def('{"steps": [{"key": "s2", "kind": "sleep", "seconds": 5, "until": "2099-01-01T00:00:00Z"}]}');
-- seconds: an integer from 0 to 315360000
SELECT pg_temp.def('{"steps": [{"key": "s3", "kind": "sleep", "seconds": -1}]}');
SELECT pg_temp.def('{"steps": [{"key": "s4", "kind": "sleep", "seconds": 1.5}]}');
SELECT pg_temp.def('{"steps": [{"key": "s5", "kind": "sleep", "seconds": 5.0}]}');
SELECT pg_temp.def('{"steps": [{"key": "s6", "kind": "sleep", "seconds": "5"}]}');
SELECT pg_temp.def('{"steps": [{"key": "s7", "kind": "sleep", "seconds": null}]}');
SELECT pg_temp.def('{"steps": [{"key": "s8", "kind": "sleep", "seconds": 315360001}]}');
SELECT pg_temp.def('{"steps": [{"key": "s9", "kind": "sleep", "seconds": 99999999999999999999999}]}');
SELECT pg_temp.def('{"steps": [{"key": "s10", "kind": "sleep", "seconds": 1e30}]}');
-- until: a string holding a finite timestamptz
SELECT pg_temp.def('{"steps": [{"key": "u1", "kind": "sleep", "until": "not a time"}]}');
SELECT pg_temp.def('{"steps": [{"key": "u2", "kind": "sleep", "until": "infinity"}]}');
SELECT pg_temp.def('{"steps": [{"key": "u3", "kind": "sleep", "until": "-infinity"}]}');
SELECT pg_temp.def('{"steps": [{"key": "u4", "kind": "sleep", "until": 1767225600}]}');
SELECT pg_temp.def('{"steps": [{"key": "u5", "kind": "sleep", "until": null}]}');
SELECT pg_temp.def('{"steps": [{"key": "u6", "kind": "sleep", "until": ""}]}');
SELECT pg_temp.def('{"steps": [{"key": "u7", "kind": "sleep", "until": "2099-02-30T00:00:00Z"}]}');
SELECT pg_temp.def('{"steps": [{"key": "u8", "kind": "sleep", "until": "epoch"}]}');
-- keys a sleep step does not take
SELECT pg_temp.def(format('{"steps": [{"key": "sk", "kind": "sleep", "seconds": 1, %s}]}', kv))
  FROM unnest(ARRAY['"job_type": "x"', '"payload": {}', '"priority": 1', '"max_attempts": 1',
                    '"timeout_seconds": 1', '"stage": "s"', '"event": "e"',
                    '"wait_timeout_seconds": 1', '"start_after_seconds": 1', '"secs": 1']) kv;
-- event: a non-empty string of at most 128 bytes
SELECT pg_temp.def('{"steps": [{"key": "e1", "kind": "event", "event": 5}]}');
SELECT pg_temp.def('{"steps": [{"key": "e2", "kind": "event", "event": ""}]}');
SELECT pg_temp.def('{"steps": [{"key": "e3", "kind": "event", "event": null}]}');
SELECT pg_temp.def(format('{"steps": [{"key": "e4", "kind": "event", "event": "%s"}]}', repeat('n', 129)));
SELECT pg_temp.def(format('{"steps": [{"key": "e5", "kind": "event", "event": "%s"}]}', repeat('é', 65)));
SELECT pg_temp.def('{"steps": [{"key": "e6", "kind": "event", "event": ["a"]}]}');
-- wait_timeout_seconds: an integer from 1 to 315360000
SELECT pg_temp.def(format('{"steps": [{"key": "w%s", "kind": "event", "wait_timeout_seconds": %s}]}', n, v))
  FROM (VALUES (1, '0'), (2, '-1'), (3, '1.5'), (4, '"60"'), (5, '315360001'),
               (6, '1e30'), (7, 'null'), (8, 'true')) t(n, v);
-- keys an event step does not take
SELECT pg_temp.def(format('{"steps": [{"key": "ek", "kind": "event", %s}]}', kv))
  FROM unnest(ARRAY['"job_type": "x"', '"payload": {}', '"priority": 1', '"max_attempts": 1',
                    '"timeout_seconds": 1', '"stage": "s"', '"seconds": 1',
                    '"until": "2099-01-01T00:00:00Z"', '"start_after_seconds": 1', '"timeout": 1']) kv;
-- start_after_seconds: an integer from 0 to 315360000, on job steps only
SELECT pg_temp.def(format('{"steps": [{"key": "j%s", "job_type": "x", "start_after_seconds": %s}]}', n, v))
  FROM (VALUES (1, '-1'), (2, '1.5'), (3, '"5"'), (4, '315360001'), (5, '1e30'), (6, 'null')) t(n, v);
SELECT pg_temp.def(format('{"steps": [{"key": "jk", "job_type": "x", %s}]}', kv))
  FROM unnest(ARRAY['"seconds": 1', '"until": "2099-01-01T00:00:00Z"', '"event": "e"',
                    '"wait_timeout_seconds": 1']) kv;
SELECT pg_temp.def(format('{"steps": [{"key": "xk", "kind": "external", %s}]}', kv))
  FROM unnest(ARRAY['"start_after_seconds": 1', '"seconds": 1', '"until": "2099-01-01T00:00:00Z"',
                    '"event": "e"', '"wait_timeout_seconds": 1']) kv;
-- a kind that does not exist; the first bad step of several is named
SELECT pg_temp.def('{"steps": [{"key": "k1", "kind": "timer", "seconds": 1}]}');
SELECT pg_temp.def('{"steps": [{"key": "ok", "kind": "sleep", "seconds": 1},
                               {"key": "bad", "kind": "event", "wait_timeout_seconds": 0}]}');
-- nothing was written
SELECT count(*) = :runs_before AS nothing_written FROM workflow.workflow_runs;

-- the bounds themselves are accepted; the fields are stored on the steps;
-- an event step's event defaults to its key
SELECT workflow.start_run(format('{"name": "te.bounds", "steps": [
    {"key": "max_sleep", "kind": "sleep", "seconds": 315360000},
    {"key": "max_wait", "kind": "event", "event": "%s", "wait_timeout_seconds": 315360000},
    {"key": "min_wait", "kind": "event", "wait_timeout_seconds": 1},
    {"key": "max_delay", "job_type": "te.bounds", "start_after_seconds": 315360000},
    {"key": "zero_delay", "job_type": "te.bounds", "start_after_seconds": 0,
     "depends_on": ["max_sleep"]}]}', repeat('n', 128))::jsonb) AS rb \gset
SELECT step_key, execution_kind, status, length(event_name) AS event_bytes, sleep_seconds,
       sleep_until, wait_timeout_seconds, start_after_seconds
  FROM workflow.workflow_steps WHERE workflow_run_id = :'rb' ORDER BY step_key;
SELECT step_key, status, CASE WHEN wake_at IS NOT NULL THEN wake_at - released_at END AS wake_after_release,
       (SELECT j.run_at - s.released_at FROM workflow.job_queue j WHERE j.id = s.job_id) AS due_after_release
  FROM workflow.workflow_steps s WHERE workflow_run_id = :'rb' ORDER BY step_key;
SELECT workflow.cancel_run(:'rb');

-- =========================================================================
-- 2. Sleep by seconds: SLEEPING (the run RUNNING, the step counted
-- active), nothing fires before its time, then fire_timers wakes it:
-- SUCCEEDED with no output, wake_at cleared, the dependent released.
SELECT workflow.start_run('{"name": "te.sleep", "steps": [
    {"key": "nap", "kind": "sleep", "seconds": 300},
    {"key": "after", "job_type": "te.after", "depends_on": ["nap"]}]}') AS r2 \gset
SELECT * FROM pg_temp.st(:'r2');
SELECT * FROM pg_temp.rn(:'r2');
SELECT workflow.fire_timers() AS fired_before_time;
SELECT count(*) AS claimed FROM pg_temp.take('te.after');
SELECT pg_temp.due(:'r2', 'nap');
SELECT workflow.fire_timers() AS fired;
SELECT * FROM pg_temp.st(:'r2');
SELECT * FROM pg_temp.rn(:'r2');
SELECT workflow.fire_timers() AS fired_again;
SELECT pg_temp.finish('te.after', '{"after": 1}');
SELECT * FROM pg_temp.rn(:'r2');
SELECT * FROM pg_temp.h(:'r2');
SELECT * FROM workflow.verify(:'r2');

-- =========================================================================
-- 3. Sleep until: with a zone, with an offset, without a zone (read in
-- the session's TimeZone); woken by fire_timers like the others.
SET TimeZone = 'America/New_York';
SELECT workflow.start_run('{"name": "te.until", "steps": [
    {"key": "u_z", "kind": "sleep", "until": "2099-01-01T00:00:00Z"},
    {"key": "u_offset", "kind": "sleep", "until": "2099-01-01T00:00:00+02:00"},
    {"key": "u_local", "kind": "sleep", "until": "2099-07-01 12:00:00"},
    {"key": "then", "job_type": "te.then", "depends_on": ["u_z", "u_offset", "u_local"]}]}') AS r3 \gset
SET TimeZone = 'UTC';
SELECT * FROM pg_temp.st(:'r3');
SELECT step_key, sleep_until FROM workflow.workflow_steps
 WHERE workflow_run_id = :'r3' AND sleep_until IS NOT NULL ORDER BY step_key;
SELECT pg_temp.due(:'r3', 'u_z');
SELECT workflow.fire_timers() AS fired;
SELECT * FROM pg_temp.st(:'r3');
SELECT * FROM pg_temp.rn(:'r3');
SELECT * FROM workflow.verify(:'r3');

-- =========================================================================
-- 4. A past until and seconds 0: SUCCEEDED inside start_run, the
-- dependents released in the same cascade; a run of only such steps
-- finishes inside start_run; a non-root sleep of 0 seconds is passed
-- through by the completion that releases it.
SELECT workflow.start_run('{"name": "te.past", "steps": [
    {"key": "past", "kind": "sleep", "until": "2000-01-01T00:00:00Z"},
    {"key": "zero", "kind": "sleep", "seconds": 0},
    {"key": "next", "job_type": "te.next", "depends_on": ["past", "zero"]}]}') AS r4 \gset
SELECT * FROM pg_temp.st(:'r4');
SELECT * FROM pg_temp.rn(:'r4');
SELECT * FROM pg_temp.h(:'r4');
SELECT workflow.start_run('{"name": "te.instant", "result_step": "z", "steps": [
    {"key": "z", "kind": "sleep", "seconds": 0},
    {"key": "y", "kind": "sleep", "until": "2000-01-01T00:00:00Z", "depends_on": ["z"]}]}') AS r4b \gset
SELECT * FROM pg_temp.st(:'r4b');
SELECT * FROM pg_temp.rn(:'r4b');
SELECT * FROM pg_temp.h(:'r4b');
SELECT workflow.start_run('{"name": "te.passthrough", "steps": [
    {"key": "a", "job_type": "te.pass_a"},
    {"key": "z", "kind": "sleep", "seconds": 0, "depends_on": ["a"]},
    {"key": "b", "job_type": "te.pass_b", "depends_on": ["z"]}]}') AS r4c \gset
SELECT pg_temp.finish('te.pass_a');
SELECT * FROM pg_temp.st(:'r4c');
SELECT pg_temp.finish('te.pass_b');
SELECT * FROM pg_temp.rn(:'r4c');
SELECT * FROM pg_temp.h(:'r4c');
SELECT * FROM workflow.verify(:'r4');
SELECT * FROM workflow.verify(:'r4b');
SELECT * FROM workflow.verify(:'r4c');

-- =========================================================================
-- 5. start_after_seconds: the job is due that long after the step's
-- release (at start_run for a root, at the release by the cascade
-- otherwise); claim does not return it before.
SELECT workflow.start_run('{"name": "te.delay", "steps": [
    {"key": "slow", "job_type": "te.slow", "start_after_seconds": 3600},
    {"key": "now", "job_type": "te.now", "start_after_seconds": 0},
    {"key": "later", "job_type": "te.later", "start_after_seconds": 60, "depends_on": ["now"]}]}') AS r5 \gset
SELECT s.step_key, s.status, s.start_after_seconds, j.status AS job_status,
       j.run_at - s.released_at AS due_after_release
  FROM workflow.workflow_steps s LEFT JOIN workflow.job_queue j ON j.id = s.job_id
 WHERE s.workflow_run_id = :'r5' ORDER BY s.step_key;
SELECT count(*) AS claimed_slow FROM pg_temp.take('te.slow');
SELECT pg_temp.finish('te.now');
SELECT s.step_key, s.status, j.run_at - s.released_at AS due_after_release
  FROM workflow.workflow_steps s LEFT JOIN workflow.job_queue j ON j.id = s.job_id
 WHERE s.workflow_run_id = :'r5' ORDER BY s.step_key;
SELECT count(*) AS claimed_later FROM pg_temp.take('te.later');
-- fire_timers has nothing to do with delayed jobs
SELECT workflow.fire_timers() AS fired;
UPDATE workflow.job_queue SET run_at = now() - interval '1 second'
 WHERE workflow_run_id = :'r5' AND status = 'QUEUED';
SELECT pg_temp.finish('te.slow');
SELECT pg_temp.finish('te.later');
SELECT * FROM pg_temp.rn(:'r5');
SELECT * FROM workflow.verify(:'r5');

-- =========================================================================
-- 6. An event sent before its step is released is buffered; the release
-- consumes the oldest one of its name; a second one stays unconsumed.
SELECT workflow.start_run('{"name": "te.buffered", "steps": [
    {"key": "gate", "job_type": "te.gate"},
    {"key": "paid", "kind": "event", "event": "order.paid", "depends_on": ["gate"]},
    {"key": "ship", "job_type": "te.ship", "depends_on": ["paid"]}]}') AS r6 \gset
SELECT event_name, payload, dedupe_key, consumed_at IS NULL AS unconsumed,
       consumed_by_step_key, organization_id, workflow_run_id = :'r6' AS this_run
  FROM workflow.send_event(:'r6', 'order.paid', '{"n": 1}');
SELECT event_name, payload, consumed_at IS NULL AS unconsumed
  FROM workflow.send_event(:'r6', 'order.paid', '{"n": 2}');
SELECT * FROM pg_temp.st(:'r6');
SELECT * FROM pg_temp.inbox(:'r6');
SELECT pg_temp.finish('te.gate');
SELECT * FROM pg_temp.st(:'r6');
SELECT * FROM pg_temp.inbox(:'r6');
SELECT * FROM pg_temp.rn(:'r6');
SELECT pg_temp.finish('te.ship');
SELECT * FROM pg_temp.rn(:'r6');
SELECT * FROM pg_temp.h(:'r6');
SELECT * FROM workflow.verify(:'r6');

-- =========================================================================
-- 7. An event sent after the release: the waiting step (event name
-- defaulting to its key) consumes it in send_event's call; the run goes
-- from WAITING_FOR_EXTERNAL to RUNNING; an event of another name is only
-- stored.
SELECT workflow.start_run('{"name": "te.after_release", "result_step": "approve", "steps": [
    {"key": "approve", "kind": "event"},
    {"key": "next", "job_type": "te.next7", "depends_on": ["approve"]}]}') AS r7 \gset
SELECT * FROM pg_temp.st(:'r7');
SELECT * FROM pg_temp.rn(:'r7');
SELECT event_name, payload, consumed_at IS NOT NULL AS consumed, consumed_by_step_key
  FROM workflow.send_event(:'r7', 'other', '{"n": "other"}');
SELECT * FROM pg_temp.st(:'r7');
SELECT event_name, payload, consumed_at IS NOT NULL AS consumed,
       consumed_at = statement_timestamp() AS consumed_now, consumed_by_step_key
  FROM workflow.send_event(:'r7', 'approve', '{"by": "ann"}');
SELECT * FROM pg_temp.st(:'r7');
SELECT * FROM pg_temp.rn(:'r7');
SELECT pg_temp.finish('te.next7');
SELECT * FROM pg_temp.rn(:'r7');
SELECT * FROM pg_temp.inbox(:'r7');
SELECT * FROM pg_temp.h(:'r7');
SELECT * FROM workflow.verify(:'r7');

-- =========================================================================
-- 8. Two waits of one name: the first by (released_at, id) takes the
-- first event.  b_early is released by start_run, a_late (defined first,
-- and first by key) only when gate completes; a third event stays
-- unconsumed (hold keeps the run live).
SELECT workflow.start_run('{"name": "te.fifo", "steps": [
    {"key": "a_late", "kind": "event", "event": "tick", "depends_on": ["gate"]},
    {"key": "b_early", "kind": "event", "event": "tick"},
    {"key": "gate", "job_type": "te.fifo_gate"},
    {"key": "hold", "kind": "external"}]}') AS r8 \gset
SELECT pg_temp.finish('te.fifo_gate');
SELECT step_key, status, released_at IS NOT NULL AS released FROM workflow.workflow_steps
 WHERE workflow_run_id = :'r8' AND event_name = 'tick' ORDER BY released_at, id;
SELECT consumed_by_step_key FROM workflow.send_event(:'r8', 'tick', '{"n": 1}');
SELECT consumed_by_step_key FROM workflow.send_event(:'r8', 'tick', '{"n": 2}');
SELECT consumed_by_step_key FROM workflow.send_event(:'r8', 'tick', '{"n": 3}');
SELECT * FROM pg_temp.st(:'r8');
SELECT * FROM pg_temp.inbox(:'r8');
SELECT * FROM pg_temp.rn(:'r8');
SELECT * FROM workflow.verify(:'r8');

-- =========================================================================
-- 8b. Two waits of one name released by the same completion, with one
-- event stored before: exactly one of them consumes it, the other waits
-- (its timeout counted from that release); an event whose wait is due
-- but not yet fired is still consumed, and fire_timers then finds nothing.
SELECT workflow.start_run('{"name": "te.same_release", "steps": [
    {"key": "gate", "job_type": "te.same_gate"},
    {"key": "w1", "kind": "event", "event": "pair", "wait_timeout_seconds": 30, "depends_on": ["gate"]},
    {"key": "w2", "kind": "event", "event": "pair", "wait_timeout_seconds": 30, "depends_on": ["gate"]}]}') AS r8b \gset
SELECT consumed_at IS NULL AS stored FROM workflow.send_event(:'r8b', 'pair', '{"n": 1}');
SELECT pg_temp.finish('te.same_gate');
SELECT status, count(*) AS steps, count(*) FILTER (WHERE wake_at - released_at = interval '30 seconds') AS timer_from_release,
       count(*) FILTER (WHERE output = '{"n": 1}') AS with_payload
  FROM workflow.workflow_steps WHERE workflow_run_id = :'r8b' AND event_name = 'pair'
 GROUP BY status ORDER BY status;
SELECT count(*) AS consumed, bool_and(consumed_by_step_key IN ('w1', 'w2')) AS by_a_wait
  FROM workflow.event_inbox WHERE workflow_run_id = :'r8b' AND consumed_at IS NOT NULL;
UPDATE workflow.workflow_steps SET wake_at = now() - interval '1 second'
 WHERE workflow_run_id = :'r8b' AND status = 'WAITING_FOR_EXTERNAL';
SELECT consumed_by_step_key IS NOT NULL AS consumed FROM workflow.send_event(:'r8b', 'pair', '{"n": 2}');
SELECT workflow.fire_timers() AS fired;
SELECT * FROM pg_temp.rn(:'r8b');
SELECT * FROM workflow.verify(:'r8b');

-- =========================================================================
-- 9. A wait with a timeout: nothing fires before it; then fire_timers
-- fails the step (workflow.event_timeout), cancels its ON_SUCCESS
-- dependent and releases its ON_TERMINAL one; a late event is stored and
-- stays unconsumed, visibly; once the run finished, send_event is refused.
SELECT workflow.start_run('{"name": "te.timeout", "steps": [
    {"key": "wait", "kind": "event", "event": "sig", "wait_timeout_seconds": 60},
    {"key": "on_s", "job_type": "te.on_s", "depends_on": ["wait"]},
    {"key": "on_t", "job_type": "te.on_t", "depends_on": [{"step": "wait", "release": "on_terminal"}]}]}') AS r9 \gset
SELECT * FROM pg_temp.st(:'r9');
SELECT * FROM pg_temp.rn(:'r9');
SELECT workflow.fire_timers() AS fired_before_time;
SELECT pg_temp.due(:'r9', 'wait');
SELECT workflow.fire_timers() AS fired;
SELECT * FROM pg_temp.st(:'r9');
SELECT step_key, last_error_message IS NOT NULL AS has_message, finished_at IS NOT NULL AS finished
  FROM workflow.workflow_steps WHERE workflow_run_id = :'r9' AND step_key = 'wait';
SELECT * FROM pg_temp.rn(:'r9');
SELECT event_name, payload, consumed_at IS NULL AS unconsumed, consumed_by_step_key
  FROM workflow.send_event(:'r9', 'sig', '{"n": "late"}');
SELECT * FROM pg_temp.st(:'r9');
SELECT * FROM pg_temp.inbox(:'r9');
SELECT count(*) AS unconsumed_in_inbox FROM workflow.event_inbox
 WHERE workflow_run_id = :'r9' AND consumed_at IS NULL;
SELECT * FROM workflow.verify(:'r9');
SELECT pg_temp.finish('te.on_t');
SELECT * FROM pg_temp.rn(:'r9');
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'sig', '{"n": "too late"}')$$, :'r9'));
SELECT * FROM pg_temp.h(:'r9');
SELECT * FROM workflow.verify(:'r9');

-- =========================================================================
-- 10. Dedupe: the same key with the same name and payload returns the
-- first row as it stands now (consumed meanwhile) and stores nothing;
-- another payload or name is workflow.event_conflict; keys are per run
-- (hold keeps the run live).
SELECT workflow.start_run('{"name": "te.dedupe", "steps": [
    {"key": "d1", "kind": "event", "event": "dd"},
    {"key": "d2", "kind": "event", "event": "dd", "depends_on": ["gate"]},
    {"key": "gate", "job_type": "te.dd_gate"},
    {"key": "hold", "kind": "external"}]}') AS r10 \gset
SELECT workflow.start_run('{"name": "te.dedupe_other", "steps": [
    {"key": "o1", "kind": "event", "event": "nothing"}]}') AS r10b \gset
SELECT id AS first_id, consumed_by_step_key AS first_by
  FROM workflow.send_event(:'r10', 'dd', '{"v": 1}', 'k1') \gset
SELECT :'first_by' AS first_consumed_by;
-- before the repeat, buffer one more for d2 under another key
SELECT id AS buffered_id, consumed_at IS NULL AS unconsumed
  FROM workflow.send_event(:'r10', 'dd', '{"v": 2}', 'k2') \gset
SELECT :'unconsumed' AS k2_unconsumed;
SELECT id = :'first_id' AS same_row, payload, dedupe_key, consumed_at IS NOT NULL AS consumed,
       consumed_by_step_key
  FROM workflow.send_event(:'r10', 'dd', '{"v": 1}', 'k1');
-- k2 is returned as it stands now: consumed by d2 after the gate
SELECT pg_temp.finish('te.dd_gate');
SELECT id = :'buffered_id' AS same_row, consumed_at IS NOT NULL AS consumed, consumed_by_step_key
  FROM workflow.send_event(:'r10', 'dd', '{"v": 2}', 'k2');
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'dd', '{"v": 9}', 'k1')$$, :'r10'));
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'other', '{"v": 1}', 'k1')$$, :'r10'));
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'dd', NULL, 'k1')$$, :'r10'));
-- the same key in another run is another event
SELECT id <> :'first_id' AS new_row, consumed_at IS NULL AS unconsumed
  FROM workflow.send_event(:'r10b', 'dd', '{"v": 1}', 'k1');
-- a key sent with no payload twice
SELECT id AS null_id FROM workflow.send_event(:'r10b', 'nul', NULL, 'k-null') \gset
SELECT id = :'null_id' AS same_row FROM workflow.send_event(:'r10b', 'nul', NULL, 'k-null');
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'nul', '{}', 'k-null')$$, :'r10b'));
-- no key: every call is a new event
SELECT count(DISTINCT id) AS distinct_rows
  FROM (SELECT (workflow.send_event(:'r10b', 'nokey', '{"same": true}')).id
          FROM generate_series(1, 2)) s;
SELECT * FROM pg_temp.inbox(:'r10');
SELECT * FROM pg_temp.inbox(:'r10b');
SELECT * FROM pg_temp.st(:'r10');
SELECT * FROM pg_temp.h(:'r10');
SELECT * FROM workflow.verify(:'r10');
SELECT * FROM workflow.verify(:'r10b');

-- =========================================================================
-- 11. send_event's errors, in order: isolation level, arguments (before
-- the run is looked up), the run, a terminal run, dedupe.
SELECT workflow.start_run('{"name": "te.args", "steps": [{"key": "e", "kind": "event", "event": "never"}]}') AS r11 \gset
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'x')$$, :'r11'));
SELECT pg_temp.err($$SELECT workflow.send_event(NULL, NULL)$$);
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'x')$$, :'r11'));
ROLLBACK;
SELECT pg_temp.err($$SELECT workflow.send_event(NULL, 'x')$$);
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, NULL)$$, :'r11'));
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, '')$$, :'r11'));
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, %L)$$, :'r11', repeat('n', 129)));
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, %L)$$, :'r11', repeat('é', 65)));
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'x', NULL, '')$$, :'r11'));
SHOW workflow.max_idempotency_key_bytes;
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'x', NULL, %L)$$, :'r11', repeat('k', 513)));
SET workflow.max_payload_bytes = 100;
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'x', jsonb_build_object('big', repeat('x', 200)))$$, :'r11'));
RESET workflow.max_payload_bytes;
-- arguments are checked before the run is looked up
SELECT pg_temp.err($$SELECT workflow.send_event('00000000-0000-4000-8000-000000000000', '')$$);
SELECT pg_temp.err($$SELECT workflow.send_event('00000000-0000-4000-8000-000000000000', 'x', NULL, '')$$);
-- the limits themselves are accepted
SELECT length(event_name) AS name_bytes, length(dedupe_key) AS key_bytes
  FROM workflow.send_event(:'r11', repeat('n', 128), NULL, repeat('k', 512));
-- an unknown run
SELECT pg_temp.err($$SELECT workflow.send_event('00000000-0000-4000-8000-000000000000', 'x')$$);
-- only the accepted call stored an event
SELECT count(*) AS stored FROM workflow.event_inbox WHERE workflow_run_id = :'r11';
-- complete_external_step on an event step and on a sleep step
SELECT workflow.start_run('{"name": "te.not_external", "steps": [
    {"key": "e", "kind": "event"}, {"key": "z", "kind": "sleep", "seconds": 600}]}') AS r11b \gset
SELECT pg_temp.err(format($$SELECT workflow.complete_external_step(%L, 'e', 'SUCCEEDED')$$, :'r11b'));
SELECT pg_temp.err(format($$SELECT workflow.complete_external_step(%L, 'z', 'SUCCEEDED')$$, :'r11b'));
SELECT * FROM pg_temp.st(:'r11b');

-- =========================================================================
-- 12. Runs of other organizations, terminal and canceled runs.
SELECT workflow.start_run('{"name": "te.org_a", "steps": [{"key": "e", "kind": "event", "event": "org"},
    {"key": "z", "kind": "sleep", "seconds": 600}]}', :'org_a') AS r12 \gset
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'org', organization_id => %L)$$, :'r12', :'org_b'));
SELECT consumed_by_step_key, organization_id = :'org_a' AS org_of_run
  FROM workflow.send_event(:'r12', 'org', '{"n": "a"}', 'key-a', organization_id => :'org_a');
-- tenant roles: A's client sends, B's gets workflow.run_not_found like for
-- a missing run; B's worker fires no timer of A's run, A's worker does,
-- and fires none of a run without organization, which a worker of no
-- organization fires; a client may not fire timers, a worker may not send
-- events
CREATE ROLE regress_te_client_a LOGIN IN ROLE workflow_client;
CREATE ROLE regress_te_client_b LOGIN IN ROLE workflow_client;
CREATE ROLE regress_te_worker_b LOGIN IN ROLE workflow_worker;
CREATE ROLE regress_te_worker_a LOGIN IN ROLE workflow_worker;
CREATE ROLE regress_te_worker LOGIN IN ROLE workflow_worker;
CREATE ROLE regress_te_client LOGIN IN ROLE workflow_client;
SELECT workflow.grant_organization('regress_te_client_a', :'org_a');
SELECT workflow.grant_organization('regress_te_client_b', :'org_b');
SELECT workflow.grant_organization('regress_te_worker_b', :'org_b');
SELECT workflow.grant_organization('regress_te_worker_a', :'org_a');
SELECT workflow.start_run('{"name": "te.org_a2", "steps": [{"key": "e", "kind": "event", "event": "org"}]}',
                          :'org_a') AS r12b \gset
SET ROLE regress_te_client_b;
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'org')$$, :'r12b'));
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'org', organization_id => %L)$$, :'r12b', :'org_a'));
SELECT pg_temp.err(format($$SELECT workflow.fire_timers()$$));
SET ROLE regress_te_client_a;
SELECT consumed_by_step_key FROM workflow.send_event(:'r12b', 'org', '{"n": "tenant a"}');
RESET ROLE;
SELECT pg_temp.due(:'r12', 'z');
SET ROLE regress_te_worker_b;
SELECT workflow.fire_timers() AS fired_by_b;
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'org')$$, :'r12'));
RESET ROLE;
SELECT * FROM pg_temp.st(:'r12');
SET ROLE regress_te_worker_a;
SELECT workflow.fire_timers() AS fired_by_a;
RESET ROLE;
SELECT * FROM pg_temp.st(:'r12');
SELECT pg_temp.due(:'r11b', 'z');
SET ROLE regress_te_worker_a;
SELECT workflow.fire_timers() AS fired_by_a;
SET ROLE regress_te_worker;
SELECT workflow.fire_timers() AS fired_by_untenanted_worker;
RESET ROLE;
SELECT * FROM pg_temp.st(:'r11b');
SET ROLE regress_te_client;
SELECT pg_temp.err($$SELECT workflow.fire_timers()$$);
RESET ROLE;
SELECT * FROM pg_temp.rn(:'r12');
SELECT * FROM pg_temp.rn(:'r12b');
-- terminal runs: SUCCEEDED, COMPLETED_WITH_ERRORS, CANCELED; the call
-- stores nothing
SELECT workflow.cancel_run(:'r11', 'stop');
SELECT n, (SELECT status FROM workflow.workflow_runs WHERE id = r) AS status,
       pg_temp.err(format($$SELECT workflow.send_event(%L, 'never', '{"n": "x"}')$$, r)) AS send_event
  FROM unnest(ARRAY[:'r2', :'r9', :'r11']::uuid[]) WITH ORDINALITY AS t(r, n)
 ORDER BY n;
SELECT count(*) AS stored FROM workflow.event_inbox
 WHERE workflow_run_id IN (:'r2', :'r11') AND payload = '{"n": "x"}';
-- a terminal run is checked before the dedupe key: an exact repeat of an
-- event the run took is refused once the run finished
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'org', '{"n": "a"}', 'key-a')$$, :'r12'));
SELECT * FROM workflow.verify(:'r12');
SELECT * FROM workflow.verify(:'r12b');

-- =========================================================================
-- 13. cancel_run of a run with a SLEEPING step and a waiting event step,
-- both already due: both CANCELED (workflow.run_canceled), wake_at
-- cleared, and fire_timers finds nothing.
SELECT workflow.start_run('{"name": "te.cancel", "steps": [
    {"key": "z", "kind": "sleep", "seconds": 600},
    {"key": "e", "kind": "event", "event": "ce", "wait_timeout_seconds": 600},
    {"key": "k", "job_type": "te.cancel_k", "depends_on": ["z"]}]}') AS r13 \gset
SELECT * FROM pg_temp.st(:'r13');
SELECT pg_temp.due(:'r13', 'z');
SELECT pg_temp.due(:'r13', 'e');
SELECT workflow.cancel_run(:'r13', 'stop it');
SELECT * FROM pg_temp.st(:'r13');
SELECT count(*) AS with_wake_at FROM workflow.workflow_steps
 WHERE workflow_run_id = :'r13' AND wake_at IS NOT NULL;
SELECT workflow.fire_timers() AS fired;
SELECT * FROM pg_temp.st(:'r13');
SELECT * FROM pg_temp.rn(:'r13');
SELECT workflow.cancel_run(:'r13') AS again;
SELECT * FROM pg_temp.h(:'r13');
SELECT * FROM workflow.verify(:'r13');

-- =========================================================================
-- 14. cancel_job upstream of sleep and event steps: they are canceled by
-- the cascade (workflow.dependency_unsatisfied), never released, no timer.
SELECT workflow.start_run('{"name": "te.cancel_job", "steps": [
    {"key": "up", "job_type": "te.up"},
    {"key": "z", "kind": "sleep", "seconds": 10, "depends_on": ["up"]},
    {"key": "e", "kind": "event", "event": "cj", "wait_timeout_seconds": 10, "depends_on": ["up"]}]}') AS r14 \gset
SELECT (workflow.send_event(:'r14', 'cj', '{"n": "early"}')).id IS NOT NULL AS sent;
SELECT workflow.cancel_job(job_id, 'not needed') FROM workflow.workflow_steps
 WHERE workflow_run_id = :'r14' AND step_key = 'up';
SELECT * FROM pg_temp.st(:'r14');
SELECT step_key, released_at IS NULL AS never_released FROM workflow.workflow_steps
 WHERE workflow_run_id = :'r14' ORDER BY step_key;
SELECT * FROM pg_temp.inbox(:'r14');
SELECT * FROM pg_temp.rn(:'r14');
SELECT workflow.fire_timers() AS fired;
SELECT * FROM pg_temp.h(:'r14');
SELECT * FROM workflow.verify(:'r14');

-- =========================================================================
-- 15. fire_timers: oldest wake_at first, at most batch_size, sleeps and
-- event timeouts alike; its argument errors; READ COMMITTED.
SELECT count(*) AS due_before FROM workflow.workflow_steps WHERE wake_at <= now();
SELECT workflow.start_run('{"name": "te.batch", "steps": [
    {"key": "s1", "kind": "sleep", "seconds": 600},
    {"key": "s2", "kind": "sleep", "seconds": 600},
    {"key": "s3", "kind": "sleep", "seconds": 600},
    {"key": "e4", "kind": "event", "event": "b", "wait_timeout_seconds": 600},
    {"key": "s5", "kind": "sleep", "seconds": 600}]}') AS r15 \gset
UPDATE workflow.workflow_steps SET wake_at = now() - make_interval(secs => o)
  FROM (VALUES ('s1', 1), ('s2', 4), ('s3', 2), ('e4', 3)) AS t(k, o)
 WHERE workflow_run_id = :'r15' AND step_key = t.k;
SELECT workflow.fire_timers(1) AS fired;
SELECT step_key, status FROM workflow.workflow_steps
 WHERE workflow_run_id = :'r15' AND status <> 'SLEEPING' AND status <> 'WAITING_FOR_EXTERNAL' ORDER BY 1;
SELECT workflow.fire_timers(1) AS fired;
SELECT step_key, status, last_error_code FROM workflow.workflow_steps
 WHERE workflow_run_id = :'r15' AND status <> 'SLEEPING' AND status <> 'WAITING_FOR_EXTERNAL' ORDER BY 1;
SELECT workflow.fire_timers(10) AS fired;
SELECT workflow.fire_timers(10000) AS fired;
SELECT * FROM pg_temp.st(:'r15');
SELECT * FROM pg_temp.rn(:'r15');
SELECT pg_temp.err($$SELECT workflow.fire_timers(NULL)$$);
SELECT pg_temp.err($$SELECT workflow.fire_timers(0)$$);
SELECT pg_temp.err($$SELECT workflow.fire_timers(-1)$$);
SELECT pg_temp.err($$SELECT workflow.fire_timers(10001)$$);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.err($$SELECT workflow.fire_timers()$$);
ROLLBACK;
-- a claim never fires a timer
SELECT pg_temp.due(:'r15', 's5');
SELECT count(*) AS claimed FROM workflow.claim('te-worker', ARRAY['te.nothing']);
SELECT status FROM workflow.workflow_steps WHERE workflow_run_id = :'r15' AND step_key = 's5';
SELECT workflow.fire_timers() AS fired;
SELECT * FROM pg_temp.rn(:'r15');
SELECT * FROM pg_temp.h(:'r15');
SELECT * FROM workflow.verify(:'r15');

-- =========================================================================
-- 16. verify() reports each new invariant broken by hand (each in a
-- transaction rolled back).
SELECT workflow.start_run('{"name": "te.verify", "steps": [
    {"key": "z", "kind": "sleep", "seconds": 600},
    {"key": "w", "kind": "event", "event": "vw"},
    {"key": "c", "kind": "event", "event": "vc"},
    {"key": "c2", "kind": "event", "event": "vc", "depends_on": ["gate"]},
    {"key": "gate", "job_type": "te.v_gate"}]}') AS r16 \gset
SELECT id AS ev_c FROM workflow.send_event(:'r16', 'vc', '{"n": "c"}') \gset
SELECT id AS ev_spare FROM workflow.send_event(:'r16', 'spare', '{"n": "spare"}') \gset
SELECT * FROM pg_temp.st(:'r16');
SELECT count(*) AS healthy FROM workflow.verify(:'r16');
-- a SLEEPING step without a wake time
BEGIN;
UPDATE workflow.workflow_steps SET wake_at = NULL WHERE workflow_run_id = :'r16' AND step_key = 'z';
SELECT step_key, problem, expected, actual FROM workflow.verify(:'r16') ORDER BY problem, step_key;
ROLLBACK;
-- a waiting event step with an unconsumed event of its name
BEGIN;
INSERT INTO workflow.event_inbox (id, workflow_run_id, event_name, payload)
VALUES (workflow.uuid_v7(), :'r16', 'vw', '{"n": "planted"}');
SELECT step_key, problem, expected, actual FROM workflow.verify(:'r16') ORDER BY problem, step_key;
ROLLBACK;
-- the same, by renaming a stored event
BEGIN;
UPDATE workflow.event_inbox SET event_name = 'vw' WHERE id = :'ev_spare';
SELECT step_key, problem, expected, actual FROM workflow.verify(:'r16') ORDER BY problem, step_key;
ROLLBACK;
-- a step that consumed two events
BEGIN;
UPDATE workflow.event_inbox SET consumed_at = now(), consumed_by_step_key = 'c' WHERE id = :'ev_spare';
SELECT step_key, problem, expected, actual FROM workflow.verify(:'r16') ORDER BY problem, step_key;
ROLLBACK;
-- one event consumed by two steps: c2 released and given the event c took
SELECT pg_temp.finish('te.v_gate');
SELECT * FROM pg_temp.st(:'r16');
BEGIN;
INSERT INTO workflow.workflow_events (workflow_run_id, step_key, event_type, detail)
VALUES (:'r16', 'c2', 'event_consumed', jsonb_build_object('event_id', :'ev_c', 'event_name', 'vc'));
SELECT step_key, problem, expected, actual FROM workflow.verify(:'r16') ORDER BY problem, step_key;
ROLLBACK;
SELECT count(*) AS healthy_again FROM workflow.verify(:'r16');
SELECT workflow.cancel_run(:'r16');
SELECT count(*) AS healthy_after_cancel FROM workflow.verify(:'r16');

-- =========================================================================
-- 17. purge deletes a finished run's inbox rows with the run, and leaves
-- a live run's.
SELECT workflow.start_run('{"name": "te.live", "steps": [{"key": "e", "kind": "event", "event": "live"}]}') AS r17 \gset
SELECT (workflow.send_event(:'r17', 'other', '{"n": "kept"}')).id IS NOT NULL AS sent;
SELECT count(*) AS inbox_of_finished_runs FROM workflow.event_inbox i
  JOIN workflow.workflow_runs r ON r.id = i.workflow_run_id WHERE r.finished_at IS NOT NULL;
SELECT workflow.purge(interval '0', 100000) > 0 AS purged;
SELECT r.name, r.status, (SELECT count(*) FROM workflow.event_inbox i WHERE i.workflow_run_id = r.id) AS inbox
  FROM workflow.workflow_runs r ORDER BY r.name;
SELECT count(*) AS orphan_inbox_rows FROM workflow.event_inbox i
 WHERE NOT EXISTS (SELECT FROM workflow.workflow_runs r WHERE r.id = i.workflow_run_id);
SELECT pg_temp.err(format($$SELECT workflow.send_event(%L, 'x')$$, :'r9'));

SELECT workflow.revoke_organization('regress_te_client_a', :'org_a');
SELECT workflow.revoke_organization('regress_te_client_b', :'org_b');
SELECT workflow.revoke_organization('regress_te_worker_b', :'org_b');
SELECT workflow.revoke_organization('regress_te_worker_a', :'org_a');
DROP ROLE regress_te_client_a, regress_te_client_b, regress_te_worker_b, regress_te_worker_a,
    regress_te_worker, regress_te_client;
SELECT * FROM workflow.verify();

-- the files that follow truncate the runs but not the inbox: leave none of
-- this file's rows behind
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox;
