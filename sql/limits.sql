-- Run limits (1.9): a definition's "limits" checked whole; job steps
-- parked under node_execution_cap and concurrency_cap and let run, oldest
-- first, when there is room; WAITING_FOR_ALLOWANCE and its exhaustion
-- evidence, written once per cap; every rule of
-- increase_execution_allowance; retry_cap; executions_used.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox;

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
-- def_error() shows the message a definition is refused with
CREATE FUNCTION pg_temp.def_error(limits text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM workflow.start_run(('{"steps": [{"key": "a", "job_type": "lim.v"}], "limits": '
                                || limits || '}')::jsonb);
    RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
-- work(run, n) claims and completes up to n queued jobs of the run, one
-- at a time; returns how many
CREATE FUNCTION pg_temp.work(run uuid, n integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    j record;
    done integer := 0;
BEGIN
    FOR i IN 1..n LOOP
        SELECT q.* INTO j FROM workflow.job_queue q
         WHERE q.workflow_run_id = run AND q.status = 'QUEUED' ORDER BY q.id LIMIT 1;
        EXIT WHEN NOT FOUND;
        UPDATE workflow.job_queue SET status = 'RUNNING', attempt = attempt + 1,
               lease_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
         WHERE id = j.id RETURNING * INTO j;
        PERFORM workflow.complete_job(j.id, j.lease_token, '{}');
        done := done + 1;
    END LOOP;
    RETURN done;
END $$;
-- state(run): the run's status and counters
CREATE FUNCTION pg_temp.state(run uuid)
RETURNS TABLE (status text, active integer, parked integer, blocked integer, executions integer,
               node_execution_cap integer, concurrency_cap integer)
LANGUAGE sql AS $$
    SELECT r.status::text, r.steps_active, r.steps_parked, r.steps_blocked, r.executions_used,
           r.node_execution_cap, r.concurrency_cap
      FROM workflow.workflow_runs r WHERE r.id = run
$$;
-- pass_deadline(run): the run's deadline moves one second into the past,
-- on the run, its steps and their jobs alike
CREATE FUNCTION pg_temp.pass_deadline(run uuid) RETURNS void LANGUAGE sql AS $$
    UPDATE workflow.workflow_runs SET deadline_at = now() - interval '1 second' WHERE id = run;
    UPDATE workflow.workflow_steps SET deadline_at = now() - interval '1 second' WHERE workflow_run_id = run;
    UPDATE workflow.job_queue SET deadline_at = now() - interval '1 second'
     WHERE workflow_run_id = run AND NOT compensation;
$$;
-- fan(n): a root and n job steps that depend on it
CREATE FUNCTION pg_temp.fan(n integer, limits jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('limits', limits, 'steps',
        jsonb_build_array(jsonb_build_object('key', 'root', 'job_type', 'lim.f'))
        || (SELECT jsonb_agg(jsonb_build_object('key', 'f' || lpad(i::text, 3, '0'),
                                                'job_type', 'lim.f',
                                                'depends_on', jsonb_build_array('root')) ORDER BY i)
              FROM generate_series(1, n) i))
$$;

-- 1. Validation: each bad limit is named; nothing is written.
SELECT pg_temp.def_error(l) FROM (VALUES
    ('[]'), ('{"node_execution_cap": 0}'), ('{"node_execution_cap": 1.5}'),
    ('{"node_execution_cap": "3"}'), ('{"concurrency_cap": -1}'), ('{"cycle_cap": 0}'),
    ('{"retry_cap": -1}'), ('{"retry_cap": 2147483648}'),
    ('{"node_execution_cap": 2, "concurrency_cap": 3}'), ('{"max_runs": 1}'),
    ('{"deadline_seconds": -1}'), ('{"deadline_seconds": 315360001}'),
    ('{"deadline_at": "soon"}'), ('{"deadline_at": 5}'),
    ('{"deadline_at": "2030-01-01T00:00:00Z", "deadline_seconds": 60}'),
    ('{"deadline_seconds": 60}'), ('{"deadline_at": "2030-01-01T00:00:00Z"}'),
    ('{}'), ('{"retry_cap": 0, "cycle_cap": 1, "concurrency_cap": 2, "node_execution_cap": 2}'),
    ('null')) v(l);
SELECT count(*) AS runs_written FROM workflow.workflow_runs;
SELECT node_execution_cap, concurrency_cap, cycle_cap, retry_cap, executions_used, counter_shards
  FROM workflow.workflow_runs ORDER BY node_execution_cap NULLS FIRST;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_steps, workflow.parked_steps;

-- 2. retry_cap lowers every step's max_attempts to retry_cap + 1, and
-- the jobs carry it: a job of five attempts fails for good at its second.
SELECT workflow.start_run('{"limits": {"retry_cap": 1}, "steps": [
    {"key": "a", "job_type": "lim.r", "max_attempts": 5},
    {"key": "b", "job_type": "lim.r1", "max_attempts": 1}]}') AS rc \gset
SELECT s.step_key, s.max_attempts AS step_max, j.max_attempts AS job_max
  FROM workflow.workflow_steps s JOIN workflow.job_queue j ON j.id = s.job_id
 WHERE s.workflow_run_id = :'rc' ORDER BY s.step_key;
SELECT id AS rj, lease_token AS rt FROM workflow.claim('w', ARRAY['lim.r']) \gset
SELECT workflow.fail_job(:'rj', :'rt', 'lim.boom', 'first', true);
SELECT j.attempt, j.status FROM workflow.job_queue j WHERE j.id = :'rj';
SELECT id AS rj, lease_token AS rt FROM workflow.claim('w', ARRAY['lim.r']) \gset
SELECT workflow.fail_job(:'rj', :'rt', 'lim.boom', 'second', true);
SELECT j.attempt, j.status FROM workflow.job_queue j WHERE j.id = :'rj';
SELECT status FROM workflow.workflow_steps WHERE workflow_run_id = :'rc' AND step_key = 'a';

-- 3. concurrency_cap: a fan-out of 50 under a cap of 5 never has more
-- than 5 steps active; the parked ones run oldest first as room appears.
SELECT workflow.start_run(pg_temp.fan(50, '{"concurrency_cap": 5}')) AS cc \gset
SELECT * FROM pg_temp.state(:'cc');
SELECT pg_temp.work(:'cc', 1) AS root_done;
SELECT * FROM pg_temp.state(:'cc');
CREATE TEMP TABLE peak (active integer);
DO $$
DECLARE
    run uuid := (SELECT id FROM workflow.workflow_runs WHERE concurrency_cap = 5);
BEGIN
    WHILE pg_temp.work(run, 1) > 0 LOOP
        INSERT INTO peak SELECT steps_active FROM workflow.workflow_runs WHERE id = run;
    END LOOP;
END $$;
SELECT max(active) AS most_active, count(*) AS completions FROM peak;
SELECT * FROM pg_temp.state(:'cc');
-- admission order: each step was let run (its job created) in the order
-- it was parked, (released_at, id)
SELECT bool_and(ordered) AS admitted_oldest_first FROM (
    SELECT j.created_at >= lag(j.created_at) OVER (ORDER BY s.released_at, s.id) AS ordered
      FROM workflow.workflow_steps s JOIN workflow.job_queue j ON j.id = s.job_id
     WHERE s.workflow_run_id = :'cc' AND s.step_key <> 'root') x
 WHERE ordered IS NOT NULL;
SELECT event_type, count(*) FROM workflow.run_history(:'cc')
 WHERE event_type IN ('step_parked', 'step_released') GROUP BY 1 ORDER BY 1;
SELECT * FROM workflow.verify(:'cc');

-- 4. node_execution_cap: three executions for six steps; the run waits
-- for its allowance once nothing else runs, and says so once.
SELECT workflow.start_run(pg_temp.fan(5, '{"node_execution_cap": 3, "concurrency_cap": 2}')) AS ec \gset
SELECT pg_temp.work(:'ec', 1) AS root_done;
SELECT * FROM pg_temp.state(:'ec');
SELECT pg_temp.work(:'ec', 10) AS done;
SELECT * FROM pg_temp.state(:'ec');
SELECT step_key, status, job_id IS NULL AS no_job FROM workflow.workflow_steps
 WHERE workflow_run_id = :'ec' ORDER BY step_key;
SELECT event_type, detail FROM workflow.run_history(:'ec')
 WHERE step_key IS NULL ORDER BY id;
SELECT * FROM workflow.verify(:'ec');

-- 5. increase_execution_allowance, rule by rule.
-- bad arguments: nothing is read
SELECT pg_temp.try(format('SELECT workflow.increase_execution_allowance(%L, %s, %s)', :'ec', a, b))
  FROM (VALUES ('NULL', '4'), ('3', 'NULL'), ('0', '4'), ('3', '3'), ('3', '2')) v(a, b);
SELECT pg_temp.try('SELECT workflow.increase_execution_allowance(NULL, 3, 4)');
-- a run of another organization is a run not found
SELECT pg_temp.try(format('SELECT workflow.increase_execution_allowance(%L, 3, 4, %L)',
                          :'ec', '00000000-0000-4000-8000-0000000000aa'));
-- a wrong expected cap is a conflict, and changes nothing
SELECT pg_temp.try(format('SELECT workflow.increase_execution_allowance(%L, 2, 4)', :'ec'));
-- the first call: the cap moves, the evidence is written, one parked step
-- runs (the room is one execution), the run is RUNNING again
SELECT workflow.increase_execution_allowance(:'ec', 3, 4);
SELECT * FROM pg_temp.state(:'ec');
-- the same call again: nothing written, the cap in force returned
SELECT workflow.increase_execution_allowance(:'ec', 3, 4) AS quiet_repeat;
SELECT count(*) AS increase_events FROM workflow.workflow_events
 WHERE workflow_run_id = :'ec' AND event_type = 'execution_allowance_increased';
-- the step runs, the allowance is exhausted again, at the new cap
SELECT pg_temp.work(:'ec', 10) AS done;
SELECT * FROM pg_temp.state(:'ec');
-- a later increase, then the first one repeated: a conflict now
SELECT workflow.increase_execution_allowance(:'ec', 4, 6);
SELECT pg_temp.try(format('SELECT workflow.increase_execution_allowance(%L, 3, 4)', :'ec'));
SELECT pg_temp.try(format('SELECT workflow.increase_execution_allowance(%L, 4, 7)', :'ec'));
SELECT workflow.increase_execution_allowance(:'ec', 4, 6) AS repeat_of_latest;
SELECT pg_temp.work(:'ec', 10) AS done;
SELECT * FROM pg_temp.state(:'ec');
SELECT event_type, detail FROM workflow.run_history(:'ec')
 WHERE event_type LIKE 'execution_allowance%' ORDER BY id;
-- a finished run: run_already_terminal
SELECT pg_temp.try(format('SELECT workflow.increase_execution_allowance(%L, 6, 8)', :'ec'));
-- a run without node_execution_cap: not eligible
SELECT pg_temp.try(format('SELECT workflow.increase_execution_allowance(%L, 3, 4)', :'cc'));
SELECT workflow.start_run('{"steps": [{"key": "x", "kind": "external"}], "limits": {"concurrency_cap": 1}}') AS nocap \gset
SELECT pg_temp.try(format('SELECT workflow.increase_execution_allowance(%L, 3, 4)', :'nocap'));
SELECT * FROM workflow.verify(:'ec');

-- 6. Evidence is written whatever workflow.history says, and a repeat is
-- judged by it; evidence that is not of the bounded form is a broken
-- invariant, for the call and for verify().
SET workflow.history = 'off';
SELECT workflow.start_run('{"limits": {"node_execution_cap": 1}, "steps": [
    {"key": "a", "job_type": "lim.h"}, {"key": "b", "job_type": "lim.h"}]}') AS ho \gset
SELECT workflow.increase_execution_allowance(:'ho', 1, 2);
SELECT workflow.increase_execution_allowance(:'ho', 1, 2) AS quiet_repeat;
SELECT event_type, detail FROM workflow.workflow_events WHERE workflow_run_id = :'ho' ORDER BY id;
RESET workflow.history;
INSERT INTO workflow.workflow_events (workflow_run_id, event_type, detail)
VALUES (:'ho', 'execution_allowance_increased',
        jsonb_build_object('version', 1, 'previous_cap', 1, 'target_cap', 2, 'note', repeat('x', 1100)));
SELECT pg_temp.try(format('SELECT workflow.increase_execution_allowance(%L, 1, 2)', :'ho'));
SELECT step_key, problem, expected, regexp_replace(actual, '[0-9]+', 'N') AS actual
  FROM workflow.verify(:'ho');

-- 7. A capped run canceled with steps parked: every step ends, the
-- counters with them.
SELECT workflow.start_run(pg_temp.fan(4, '{"concurrency_cap": 1}')) AS cx \gset
SELECT pg_temp.work(:'cx', 1) AS root_done;
SELECT * FROM pg_temp.state(:'cx');
SELECT workflow.cancel_run(:'cx', 'enough');
SELECT status, count(*) FROM workflow.workflow_steps WHERE workflow_run_id = :'cx' GROUP BY 1 ORDER BY 1;
SELECT * FROM pg_temp.state(:'cx');
SELECT count(*) AS still_parked_at FROM workflow.workflow_steps
 WHERE workflow_run_id = :'cx' AND parked_at IS NOT NULL;
SELECT * FROM workflow.verify(:'cx');

-- 8. Deadlines.  A run past its deadline has no job claimed; fire_timers
-- cancels what has not started, lets a running job finish (its dependents
-- are canceled, nothing more is released), records run_deadline_elapsed
-- once and ends the run COMPLETED_WITH_ERRORS with that status_reason.
SELECT workflow.start_run('{"limits": {"deadline_seconds": 3600}, "steps": [
    {"key": "busy", "job_type": "lim.d1"}, {"key": "idle", "job_type": "lim.d2"},
    {"key": "after", "job_type": "lim.d3", "depends_on": ["busy"]},
    {"key": "ask", "kind": "external"}, {"key": "nap", "kind": "sleep", "seconds": 600}]}') AS dl \gset
SELECT deadline_at - created_at AS deadline_after FROM workflow.workflow_runs WHERE id = :'dl';
SELECT count(*) AS jobs_with_the_deadline FROM workflow.job_queue j
  JOIN workflow.workflow_runs r ON r.id = j.workflow_run_id
 WHERE r.id = :'dl' AND j.deadline_at = r.deadline_at;
SELECT id AS dj, lease_token AS dt FROM workflow.claim('w', ARRAY['lim.d1']) \gset
-- the deadline passes (moved into the past by hand)
SELECT pg_temp.pass_deadline(:'dl');
SELECT count(*) AS claimed_past_deadline FROM workflow.claim('w', ARRAY['lim.d2']);
SELECT workflow.fire_timers() AS fired;
SELECT step_key, status, status_reason FROM workflow.workflow_steps
 WHERE workflow_run_id = :'dl' ORDER BY step_key;
SELECT status, status_reason, deadline_swept FROM workflow.workflow_runs WHERE id = :'dl';
-- the running job finishes; nothing is released after it
SELECT workflow.complete_job(:'dj', :'dt', '{"late": true}');
SELECT step_key, status FROM workflow.workflow_steps
 WHERE workflow_run_id = :'dl' AND step_key IN ('busy', 'after') ORDER BY step_key;
SELECT status, status_reason, finished_at IS NOT NULL AS finished FROM workflow.workflow_runs WHERE id = :'dl';
-- a second sweep writes nothing more
SELECT workflow.fire_timers() AS fired_again;
SELECT event_type, detail ? 'deadline_at' AND detail ? 'observed_at' AS detail_ok
  FROM workflow.run_history(:'dl') WHERE event_type = 'run_deadline_elapsed';
SELECT * FROM workflow.verify(:'dl');
-- a start with a deadline already past is accepted and ends at the first sweep
SELECT workflow.start_run('{"limits": {"deadline_at": "2000-01-01T00:00:00Z"}, "steps": [
    {"key": "a", "job_type": "lim.past"}]}') AS past \gset
SELECT count(*) AS claimed FROM workflow.claim('w', ARRAY['lim.past']);
SELECT workflow.fire_timers() AS fired;
SELECT status, status_reason FROM workflow.workflow_runs WHERE id = :'past';
-- a running job retried after the sweep is not claimed again: the next
-- sweep cancels it, and only then is the run done with
SELECT workflow.start_run('{"limits": {"deadline_seconds": 3600}, "steps": [
    {"key": "a", "job_type": "lim.retry", "max_attempts": 3}]}') AS rt \gset
SELECT id AS rj, lease_token AS rtk FROM workflow.claim('w', ARRAY['lim.retry']) \gset
SELECT pg_temp.pass_deadline(:'rt');
SELECT workflow.fire_timers() AS fired;
SELECT status, deadline_swept FROM workflow.workflow_runs WHERE id = :'rt';
SELECT workflow.fail_job(:'rj', :'rtk', 'lim.flaky', 'try again', true);
SELECT count(*) AS claimed FROM workflow.claim('w', ARRAY['lim.retry']);
SELECT workflow.fire_timers() AS fired;
SELECT s.status, s.status_reason, j.status AS job_status, r.status AS run_status, r.deadline_swept
  FROM workflow.workflow_steps s JOIN workflow.job_queue j ON j.id = s.job_id
  JOIN workflow.workflow_runs r ON r.id = s.workflow_run_id WHERE r.id = :'rt';
SELECT * FROM workflow.verify(:'rt');
-- a run whose job still runs does not hide the runs after it from a
-- sweep of one run per page: the next page is read
SELECT workflow.start_run('{"limits": {"deadline_seconds": 3600}, "steps": [
    {"key": "a", "job_type": "lim.page1"}]}') AS pg1 \gset
SELECT id AS pj, lease_token AS pt FROM workflow.claim('w', ARRAY['lim.page1']) \gset
SELECT pg_temp.pass_deadline(:'pg1');
SELECT workflow.fire_timers(1) AS first_sweep;
SELECT workflow.start_run('{"limits": {"deadline_seconds": 3600}, "steps": [
    {"key": "a", "job_type": "lim.page2"}]}') AS pg2 \gset
SELECT pg_temp.pass_deadline(:'pg2');
UPDATE workflow.workflow_runs SET deadline_at = deadline_at + interval '0.5 second' WHERE id = :'pg2';
SELECT workflow.fire_timers(1) AS second_sweep;
SELECT id = :'pg1' AS first_run, status, deadline_swept FROM workflow.workflow_runs
 WHERE id IN (:'pg1', :'pg2') ORDER BY deadline_at;
SELECT workflow.complete_job(:'pj', :'pt');
SELECT workflow.fire_timers(1) AS third_sweep;
SELECT status, deadline_swept FROM workflow.workflow_runs WHERE id = :'pg1';

-- retry_run of a run its deadline ended: its failed part is reset, and the
-- next sweep ends it again
SELECT workflow.start_run('{"limits": {"deadline_seconds": 3600}, "steps": [
    {"key": "a", "job_type": "lim.rr", "max_attempts": 1}, {"key": "b", "job_type": "lim.rr2"}]}') AS rr \gset
SELECT id AS rrj, lease_token AS rrt FROM workflow.claim('w', ARRAY['lim.rr']) \gset
SELECT workflow.fail_job(:'rrj', :'rrt', 'lim.no', 'no', false);
SELECT pg_temp.pass_deadline(:'rr');
SELECT workflow.fire_timers() AS fired;
SELECT status, status_reason FROM workflow.workflow_runs WHERE id = :'rr';
SELECT workflow.retry_run(:'rr');
SELECT status, status_reason, deadline_swept FROM workflow.workflow_runs WHERE id = :'rr';
SELECT workflow.fire_timers() AS fired;
SELECT step_key, status, status_reason FROM workflow.workflow_steps WHERE workflow_run_id = :'rr' ORDER BY 1;
SELECT status, status_reason FROM workflow.workflow_runs WHERE id = :'rr';
SELECT * FROM workflow.verify(:'rr');

-- 9. Root steps at the start: the caps hold from the first statement; a
-- start whose roots use up the allowance records its exhaustion at once.
SELECT workflow.start_run('{"limits": {"node_execution_cap": 2}, "steps": [
    {"key": "r1", "job_type": "lim.s"}, {"key": "r2", "job_type": "lim.s"},
    {"key": "r3", "job_type": "lim.s"}, {"key": "w", "kind": "external"}]}') AS st \gset
SELECT * FROM pg_temp.state(:'st');
SELECT event_type, detail FROM workflow.run_history(:'st') WHERE step_key IS NULL ORDER BY id;
-- the external step finishing leaves the run with nothing but the wait
-- for allowance
SELECT pg_temp.work(:'st', 5) AS done;
SELECT status FROM workflow.complete_external_step(:'st', 'w', 'SUCCEEDED');
SELECT * FROM pg_temp.state(:'st');
SELECT * FROM workflow.verify(:'st');
-- a sleep holds a place under concurrency_cap while it sleeps
SELECT workflow.start_run('{"limits": {"concurrency_cap": 1}, "steps": [
    {"key": "z", "kind": "sleep", "seconds": 600}, {"key": "j", "job_type": "lim.z"}]}') AS sl \gset
SELECT * FROM pg_temp.state(:'sl');
UPDATE workflow.workflow_steps SET wake_at = now() - interval '1 second'
 WHERE workflow_run_id = :'sl' AND step_key = 'z';
SELECT workflow.fire_timers();
SELECT * FROM pg_temp.state(:'sl');
-- a job step that finishes hands its place over only where a sleep does
-- not hold it: cap 1, a runs, b is parked; w's completion releases the
-- sleep z beside a (a sleep may go beyond the cap); a's end leaves the one
-- place to z, and b stays parked until z wakes
SELECT workflow.start_run('{"limits": {"concurrency_cap": 1}, "steps": [
    {"key": "a", "job_type": "lim.h"}, {"key": "b", "job_type": "lim.h"},
    {"key": "w", "kind": "external"},
    {"key": "z", "kind": "sleep", "seconds": 600, "depends_on": ["w"]}]}') AS hs \gset
SELECT status FROM workflow.complete_external_step(:'hs', 'w', 'SUCCEEDED');
SELECT * FROM pg_temp.state(:'hs');
SELECT pg_temp.work(:'hs', 1) AS done;
SELECT step_key, status FROM workflow.workflow_steps WHERE workflow_run_id = :'hs' ORDER BY 1;
SELECT * FROM pg_temp.state(:'hs');
UPDATE workflow.workflow_steps SET wake_at = now() - interval '1 second'
 WHERE workflow_run_id = :'hs' AND step_key = 'z';
SELECT workflow.fire_timers();
SELECT step_key, status FROM workflow.workflow_steps WHERE workflow_run_id = :'hs' ORDER BY 1;
SELECT * FROM workflow.verify(:'hs');
-- a job that a user's trigger ends as the engine makes it frees its place
-- once: cap 1, j runs, p1 to p3 are parked; j's end lets p1 run, whose new
-- job the trigger cancels, and then p2 runs, alone, and p3 stays parked
SELECT workflow.start_run('{"limits": {"concurrency_cap": 1}, "steps": [
    {"key": "j", "job_type": "lim.t"}, {"key": "p1", "job_type": "lim.t1"},
    {"key": "p2", "job_type": "lim.t"}, {"key": "p3", "job_type": "lim.t"}]}') AS tc \gset
CREATE FUNCTION pg_temp.cancel_new_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM workflow.cancel_job(NEW.id, 'not today');
    RETURN NULL;
END $$;
CREATE TRIGGER zz_cancel_new AFTER INSERT ON workflow.job_queue
    FOR EACH ROW WHEN (NEW.job_type = 'lim.t1')
    EXECUTE FUNCTION pg_temp.cancel_new_job();
SELECT pg_temp.work(:'tc', 1) AS done;
DROP TRIGGER zz_cancel_new ON workflow.job_queue;
SELECT step_key, status FROM workflow.workflow_steps WHERE workflow_run_id = :'tc' ORDER BY 1;
SELECT * FROM pg_temp.state(:'tc');
SELECT * FROM workflow.verify(:'tc');

-- everything else holds (the run of section 6 keeps its bad evidence)
SELECT workflow_run_id = :'ho' AS bad_evidence_run, problem FROM workflow.verify();
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox;
