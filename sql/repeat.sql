-- Repeat loops (1.12): a repeat step's loop checked whole at the start; its
-- body run again, generation after generation, while the predicate holds,
-- up to the bound of max_iterations or the run's cycle_cap; the loop ending
-- when the predicate clears, at its bound under both policies, or on a
-- predicate that is not boolean; failures, ON_TERMINAL edges, stale jobs,
-- cancellation, caps and the history inside a loop.
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
CREATE FUNCTION pg_temp.def_error(def text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM workflow.start_run(def::jsonb);
    RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
-- review_loop(): draft -> review -> again (repeat back to draft) -> publish
CREATE FUNCTION pg_temp.review_loop(max_iterations integer, policy text DEFAULT 'fail',
                                    limits jsonb DEFAULT '{}')
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('limits', limits, 'steps', jsonb_build_array(
        jsonb_build_object('key', 'draft', 'job_type', 'rp.draft', 'payload', '{"topic": "x"}'::jsonb),
        jsonb_build_object('key', 'review', 'job_type', 'rp.review', 'depends_on', '["draft"]'::jsonb),
        jsonb_build_object('key', 'again', 'kind', 'repeat', 'depends_on', '["review"]'::jsonb,
                           'back_to', '["draft"]'::jsonb, 'while', '$.approved == false',
                           'max_iterations', max_iterations, 'exhaustion_policy', policy),
        jsonb_build_object('key', 'publish', 'job_type', 'rp.publish', 'depends_on', '["again"]'::jsonb)))
$$;
-- finish(run, key, output) runs the job of the run's step key and completes
-- it with output; returns the payload the job was given
CREATE FUNCTION pg_temp.finish(run uuid, key text, output jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    j record;
BEGIN
    UPDATE workflow.job_queue q SET status = 'RUNNING', attempt = q.attempt + 1,
           lease_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
      FROM workflow.workflow_steps s
     WHERE s.workflow_run_id = run AND s.step_key = key AND q.id = s.job_id
       AND q.status = 'QUEUED'
    RETURNING q.* INTO j;
    IF j.id IS NULL THEN
        RAISE EXCEPTION 'step % has no queued job', key;
    END IF;
    PERFORM workflow.complete_job(j.id, j.lease_token, output);
    RETURN j.payload;
END $$;
-- fail_step(run, key) fails the job of the run's step key for good
CREATE FUNCTION pg_temp.fail_step(run uuid, key text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    j record;
BEGIN
    UPDATE workflow.job_queue q SET status = 'RUNNING', attempt = q.attempt + 1,
           lease_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
      FROM workflow.workflow_steps s
     WHERE s.workflow_run_id = run AND s.step_key = key AND q.id = s.job_id
    RETURNING q.* INTO j;
    PERFORM workflow.fail_job(j.id, j.lease_token, 'rp.bad', 'it failed', false);
    RETURN key || ' failed';
END $$;
-- steps(run): each step's status and generation
CREATE FUNCTION pg_temp.steps(run uuid)
RETURNS TABLE (step_key text, status text, generation integer, output jsonb, code text)
LANGUAGE sql AS $$
    SELECT s.step_key, s.status::text, s.generation, s.output, s.last_error_code
      FROM workflow.workflow_steps s WHERE s.workflow_run_id = run ORDER BY s.step_key
$$;
-- settled(run): the loop's control_node_settled events, in order
CREATE FUNCTION pg_temp.settled(run uuid)
RETURNS TABLE (step_key text, decision text, generation integer, iterations integer,
               bound integer, exhausted boolean)
LANGUAGE sql AS $$
    SELECT e.step_key, e.detail ->> 'decision', (e.detail ->> 'generation')::int,
           (e.detail ->> 'iterations_completed')::int,
           (e.detail ->> 'effective_iteration_bound')::int,
           (e.detail ->> 'iteration_bound_exhausted')::boolean
      FROM workflow.run_history(run) e
     WHERE e.event_type = 'control_node_settled' ORDER BY e.id
$$;

-- 1. The checksum: hex SHA-256 of the jsonb text form; a missing output is
-- checksummed as JSON null.
SELECT workflow.output_checksum('{"b": 2, "a": [1, "x"]}')
       = encode(sha256(convert_to('{"a": [1, "x"], "b": 2}', 'UTF8')), 'hex') AS checksum_of_text_form,
       workflow.output_checksum(NULL) = workflow.output_checksum('null') AS null_as_json_null;

-- 2. What a definition's loop must be.
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": [], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": [1], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["zz"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["r"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a", "a"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"}, {"key": "b", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["b"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"}, {"key": "b", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a", "b"], "back_to": ["a"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": [{"step": "a", "release": "on_terminal"}],
     "back_to": ["a"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "back_to": ["a"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "while": "$.x ==", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "while": "$.x"}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "while": "$.x", "max_iterations": 0}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "while": "$.x", "max_iterations": 1001}]}');
SET workflow.max_repeat_iterations = 2000;
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "while": "$.x", "max_iterations": 1001}]}');
RESET workflow.max_repeat_iterations;
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "while": "$.x", "max_iterations": 2,
     "exhaustion_policy": "retry"}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "while": "$.x", "max_iterations": 2,
     "job_type": "t"}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "while": "$.x", "max_iterations": 2,
     "compensate": {"job_type": "u"}}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t", "while": "$.x"}]}');
-- the body: job steps only, nothing hanging off it, no overlap, no nesting
SELECT pg_temp.def_error('{"steps": [{"key": "a", "kind": "external"}, {"key": "b", "job_type": "t", "depends_on": ["a"]},
    {"key": "r", "kind": "repeat", "depends_on": ["b"], "back_to": ["a"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"}, {"key": "s", "kind": "sleep", "seconds": 1, "depends_on": ["a"]},
    {"key": "b", "job_type": "t", "depends_on": ["s"]},
    {"key": "r", "kind": "repeat", "depends_on": ["b"], "back_to": ["a"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"}, {"key": "b", "job_type": "t", "depends_on": ["a"]},
    {"key": "side", "job_type": "t", "depends_on": ["a"]},
    {"key": "r", "kind": "repeat", "depends_on": ["b"], "back_to": ["a"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"}, {"key": "b", "job_type": "t", "depends_on": ["a"]},
    {"key": "r1", "kind": "repeat", "depends_on": ["b"], "back_to": ["a"], "while": "$.x", "max_iterations": 2},
    {"key": "r2", "kind": "repeat", "depends_on": ["b"], "back_to": ["b"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t"}, {"key": "b", "job_type": "t", "depends_on": ["a"]},
    {"key": "r1", "kind": "repeat", "depends_on": ["b"], "back_to": ["b"], "while": "$.x", "max_iterations": 2},
    {"key": "c", "job_type": "t", "depends_on": ["r1"]},
    {"key": "r2", "kind": "repeat", "depends_on": ["c"], "back_to": ["a"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t", "payload": [1]}, {"key": "b", "job_type": "t", "depends_on": ["a"]},
    {"key": "r", "kind": "repeat", "depends_on": ["b"], "back_to": ["a"], "while": "$.x", "max_iterations": 2}]}');
SELECT pg_temp.def_error('{"steps": [{"key": "a", "job_type": "t", "payload": {"repeat": 1}}, {"key": "b", "job_type": "t", "depends_on": ["a"]},
    {"key": "r", "kind": "repeat", "depends_on": ["b"], "back_to": ["a"], "while": "$.x", "max_iterations": 2}]}');
-- only the run accepted under the raised setting was written
SELECT count(*) AS runs_written FROM workflow.workflow_runs;
-- the repeat step keeps its loop, with the body, in its payload
SELECT workflow.start_run(pg_temp.review_loop(3)) AS shape \gset
SELECT step_key, execution_kind, status, payload FROM workflow.workflow_steps
 WHERE workflow_run_id = :'shape' ORDER BY step_key;
SELECT workflow.cancel_run(:'shape');

-- 3. The predicate clears at the first generation: the repeat succeeds
-- with the review's output, and publish runs.
SELECT workflow.start_run(pg_temp.review_loop(3)) AS c1 \gset
SELECT pg_temp.finish(:'c1', 'draft', '{"text": "v1"}') AS draft_payload;
SELECT pg_temp.finish(:'c1', 'review', '{"approved": true}') IS NOT NULL AS reviewed;
SELECT * FROM pg_temp.steps(:'c1');
SELECT * FROM pg_temp.settled(:'c1');
SELECT pg_temp.finish(:'c1', 'publish', '{}') IS NOT NULL AS published;
SELECT status FROM workflow.workflow_runs WHERE id = :'c1';
SELECT * FROM workflow.verify(:'c1');

-- 4. It clears in the middle: generation 1 of 3.  The draft of generation 1
-- gets the previous review's output in its payload; each generation has its
-- own jobs, the earlier ones kept.
SELECT workflow.start_run(pg_temp.review_loop(3)) AS c2 \gset
SELECT pg_temp.finish(:'c2', 'draft', '{"text": "v1"}') AS draft_payload;
SELECT pg_temp.finish(:'c2', 'review', '{"approved": false, "notes": "shorter"}') IS NOT NULL AS reviewed;
SELECT * FROM pg_temp.steps(:'c2');
SELECT steps_succeeded, steps_active, steps_blocked FROM workflow.workflow_runs WHERE id = :'c2';
SELECT pg_temp.finish(:'c2', 'draft', '{"text": "v2"}') AS draft_payload;
SELECT pg_temp.finish(:'c2', 'review', '{"approved": true}') IS NOT NULL AS reviewed;
SELECT * FROM pg_temp.steps(:'c2');
SELECT * FROM pg_temp.settled(:'c2');
SELECT s.step_key, j.generation, j.status, j.output FROM workflow.job_queue j
  JOIN workflow.workflow_steps s ON s.id = j.workflow_step_id
 WHERE j.workflow_run_id = :'c2' ORDER BY s.step_key, j.generation;
SELECT * FROM workflow.verify(:'c2');

-- 5. It clears at the last generation of the bound: not exhausted.
SELECT workflow.start_run(pg_temp.review_loop(2)) AS c3 \gset
SELECT pg_temp.finish(:'c3', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'c3', 'review', '{"approved": false}') IS NOT NULL;
SELECT pg_temp.finish(:'c3', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'c3', 'review', '{"approved": true}') IS NOT NULL;
SELECT * FROM pg_temp.settled(:'c3');
SELECT step_key, status, generation FROM pg_temp.steps(:'c3');

-- 6. Exhausted under fail: the repeat fails with the last output, its
-- dependents are canceled, the run ends with errors.
SELECT workflow.start_run(pg_temp.review_loop(2)) AS x1 \gset
SELECT pg_temp.finish(:'x1', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'x1', 'review', '{"approved": false, "round": 1}') IS NOT NULL;
SELECT pg_temp.finish(:'x1', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'x1', 'review', '{"approved": false, "round": 2}') IS NOT NULL;
SELECT * FROM pg_temp.steps(:'x1');
SELECT status_reason, last_error_message FROM workflow.workflow_steps
 WHERE workflow_run_id = :'x1' AND step_key = 'again';
SELECT status FROM workflow.workflow_runs WHERE id = :'x1';
SELECT * FROM pg_temp.settled(:'x1');
SELECT detail ->> 'output_checksum' = workflow.output_checksum('{"approved": false, "round": 2}') AS checksum_of_last_output
  FROM workflow.run_history(:'x1') WHERE event_type = 'control_node_settled' ORDER BY id DESC LIMIT 1;
SELECT event_type, step_key FROM workflow.run_history(:'x1')
 WHERE step_key IN ('again', 'publish') OR step_key IS NULL ORDER BY id;
SELECT * FROM workflow.verify(:'x1');
-- a retry of the exhausted repeat settles it again, to the same end
SELECT workflow.retry_run(:'x1');
SELECT step_key, status, generation FROM pg_temp.steps(:'x1');
SELECT * FROM workflow.verify(:'x1');

-- 7. Exhausted under emit_outcome: the repeat succeeds with the outcome,
-- and so does the predicate clearing.
SELECT workflow.start_run(pg_temp.review_loop(1, 'emit_outcome')) AS e1 \gset
SELECT pg_temp.finish(:'e1', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'e1', 'review', '{"approved": false}') IS NOT NULL;
SELECT * FROM pg_temp.steps(:'e1');
SELECT pg_temp.finish(:'e1', 'publish', '{}') IS NOT NULL AS published;
SELECT status FROM workflow.workflow_runs WHERE id = :'e1';
SELECT workflow.start_run(pg_temp.review_loop(4, 'emit_outcome')) AS e2 \gset
SELECT pg_temp.finish(:'e2', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'e2', 'review', '{"approved": true}') IS NOT NULL;
SELECT output FROM workflow.workflow_steps WHERE workflow_run_id = :'e2' AND step_key = 'again';
SELECT * FROM workflow.verify(:'e2');

-- 8. The bound is the lower of max_iterations and the run's cycle_cap.
SELECT workflow.start_run(pg_temp.review_loop(5, 'fail', '{"cycle_cap": 2}')) AS cc \gset
SELECT pg_temp.finish(:'cc', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'cc', 'review', '{"approved": false}') IS NOT NULL;
SELECT pg_temp.finish(:'cc', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'cc', 'review', '{"approved": false}') IS NOT NULL;
SELECT * FROM pg_temp.settled(:'cc');
SELECT detail ->> 'max_iterations' AS max_iterations, detail ->> 'cycle_cap' AS cycle_cap
  FROM workflow.run_history(:'cc') WHERE event_type = 'control_node_settled' ORDER BY id DESC LIMIT 1;
SELECT status FROM workflow.workflow_runs WHERE id = :'cc';

-- 9. A predicate that gives no boolean fails the repeat.  In jsonpath's
-- lax mode a comparison with a missing key is false (the loop ends); in
-- strict mode it is unknown, which is no boolean.
SELECT workflow.start_run(pg_temp.review_loop(3)) AS nb \gset
SELECT pg_temp.finish(:'nb', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'nb', 'review', '{"verdict": "meh"}') IS NOT NULL;
SELECT step_key, status, output FROM pg_temp.steps(:'nb') WHERE step_key = 'again';
SELECT decision FROM pg_temp.settled(:'nb');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "rp.n"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"],
     "while": "strict $.approved == false", "max_iterations": 3}]}') AS nb1 \gset
SELECT pg_temp.finish(:'nb1', 'a', '{"verdict": "meh"}') IS NOT NULL;
SELECT step_key, status, output, code FROM pg_temp.steps(:'nb1');
SELECT last_error_message FROM workflow.workflow_steps WHERE workflow_run_id = :'nb1' AND step_key = 'r';
SELECT decision FROM pg_temp.settled(:'nb1');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "rp.n"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "while": "$.score", "max_iterations": 3}]}') AS nb2 \gset
SELECT pg_temp.finish(:'nb2', 'a', '{"score": 7}') IS NOT NULL;
SELECT step_key, status, code FROM pg_temp.steps(:'nb2');
-- a job completed without an output gives JSON null to the predicate
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "rp.n"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "while": "$ == null", "max_iterations": 2}]}') AS nu \gset
SELECT pg_temp.finish(:'nu', 'a', NULL) IS NOT NULL;
SELECT pg_temp.finish(:'nu', 'a', NULL) IS NOT NULL;
SELECT step_key, status, generation, output, code FROM pg_temp.steps(:'nu');
SELECT decision, generation FROM pg_temp.settled(:'nu');
-- a path that is a boolean value works as a predicate
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "rp.n"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"], "while": "$.more", "max_iterations": 3}]}') AS bv \gset
SELECT pg_temp.finish(:'bv', 'a', '{"more": true}') IS NOT NULL;
SELECT pg_temp.finish(:'bv', 'a', '{"more": false}') IS NOT NULL;
SELECT step_key, status, generation, output FROM pg_temp.steps(:'bv');

-- 10. A body step that fails stops the loop: the repeat and its dependents
-- are canceled, the run ends with errors.  retry_run runs the failed
-- generation again as a whole, at the next generation (which counts
-- against the bound): the body, the draft that had succeeded in it too,
-- and the repeat; a loop with no generation left is not retried.
SELECT workflow.start_run(pg_temp.review_loop(3)) AS bf \gset
SELECT pg_temp.finish(:'bf', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'bf', 'review', '{"approved": false}') IS NOT NULL;
SELECT pg_temp.finish(:'bf', 'draft', '{"text": "v2"}') AS draft_payload;
UPDATE workflow.job_queue q SET status = 'RUNNING', attempt = 1, lease_token = gen_random_uuid(),
       leased_until = now() + interval '1 hour'
  FROM workflow.workflow_steps s
 WHERE s.workflow_run_id = :'bf' AND s.step_key = 'review' AND q.id = s.job_id;
SELECT workflow.fail_job(q.id, q.lease_token, 'rp.bad', 'no reviewer', false)
  FROM workflow.job_queue q JOIN workflow.workflow_steps s ON q.id = s.job_id
 WHERE s.workflow_run_id = :'bf' AND s.step_key = 'review';
SELECT * FROM pg_temp.steps(:'bf');
SELECT status FROM workflow.workflow_runs WHERE id = :'bf';
SELECT workflow.retry_run(:'bf');
SELECT step_key, status, generation FROM pg_temp.steps(:'bf');
SELECT j.payload FROM workflow.job_queue j JOIN workflow.workflow_steps s ON s.job_id = j.id
 WHERE s.workflow_run_id = :'bf' AND s.step_key = 'draft';
SELECT steps_active, steps_blocked, steps_succeeded, steps_failed, steps_canceled
  FROM workflow.workflow_runs WHERE id = :'bf';
SELECT * FROM workflow.verify(:'bf');
SELECT pg_temp.finish(:'bf', 'draft', '{"text": "v3"}') IS NOT NULL,
       pg_temp.finish(:'bf', 'review', '{"approved": true}') IS NOT NULL,
       pg_temp.finish(:'bf', 'publish', '{}') IS NOT NULL;
SELECT status FROM workflow.workflow_runs WHERE id = :'bf';
SELECT * FROM pg_temp.settled(:'bf');
SELECT event_type, step_key, detail ->> 'generation' AS generation FROM workflow.run_history(:'bf')
 WHERE event_type IN ('run_retried', 'step_reset') ORDER BY id;
SELECT * FROM workflow.verify(:'bf');
-- the failure in the last generation the bound allows: nothing to run again
SELECT workflow.start_run(pg_temp.review_loop(2)) AS bl \gset
SELECT pg_temp.finish(:'bl', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'bl', 'review', '{"approved": false}') IS NOT NULL,
       pg_temp.finish(:'bl', 'draft', '{}') IS NOT NULL;
UPDATE workflow.job_queue q SET status = 'RUNNING', attempt = 1, lease_token = gen_random_uuid(),
       leased_until = now() + interval '1 hour'
  FROM workflow.workflow_steps s
 WHERE s.workflow_run_id = :'bl' AND s.step_key = 'review' AND q.id = s.job_id;
SELECT workflow.fail_job(q.id, q.lease_token, 'rp.bad', 'no reviewer', false)
  FROM workflow.job_queue q JOIN workflow.workflow_steps s ON q.id = s.job_id
 WHERE s.workflow_run_id = :'bl' AND s.step_key = 'review';
SELECT pg_temp.try(format('SELECT workflow.retry_run(%L)', :'bl'));
SELECT step_key, status, generation FROM pg_temp.steps(:'bl');

-- A retry that resets a failed step outside a loop and a failed body
-- step: the body step after the outside one waits for it again; a body
-- step with a "repeat" key of its own in its payload keeps it.
SELECT workflow.start_run('{"steps": [
    {"key": "o", "job_type": "rp.ro"}, {"key": "w", "job_type": "rp.rw"},
    {"key": "y", "job_type": "rp.ry", "depends_on": ["o"]},
    {"key": "x", "job_type": "rp.rx", "depends_on": ["w"], "payload": {"repeat": [1]}},
    {"key": "z", "job_type": "rp.rz", "depends_on": ["x", "y"]},
    {"key": "again", "kind": "repeat", "depends_on": ["z"], "back_to": ["y", "w"],
     "while": "$.more", "max_iterations": 3}]}') AS ro \gset
SELECT pg_temp.fail_step(:'ro', 'o'), pg_temp.finish(:'ro', 'w', '{}') IS NOT NULL,
       pg_temp.fail_step(:'ro', 'x');
SELECT status FROM workflow.workflow_runs WHERE id = :'ro';
SELECT workflow.retry_run(:'ro');
SELECT step_key, status, generation FROM pg_temp.steps(:'ro');
SELECT payload FROM workflow.workflow_steps WHERE workflow_run_id = :'ro' AND step_key = 'x';
SELECT * FROM workflow.verify(:'ro');
SELECT pg_temp.finish(:'ro', 'o', '{}') IS NOT NULL, pg_temp.finish(:'ro', 'w', '{}') IS NOT NULL,
       pg_temp.finish(:'ro', 'y', '{}') IS NOT NULL, pg_temp.finish(:'ro', 'x', '{}') IS NOT NULL,
       pg_temp.finish(:'ro', 'z', '{"more": false}') IS NOT NULL;
SELECT status FROM workflow.workflow_runs WHERE id = :'ro';
SELECT * FROM workflow.verify(:'ro');
-- a loop that went on past a failed body step (an ON_TERMINAL edge) and
-- ended is not run again
SELECT workflow.start_run('{"steps": [
    {"key": "d", "job_type": "rp.td"},
    {"key": "v", "job_type": "rp.tv", "depends_on": [{"step": "d", "release": "on_terminal"}]},
    {"key": "again", "kind": "repeat", "depends_on": ["v"], "back_to": ["d"],
     "while": "$.more", "max_iterations": 3},
    {"key": "after", "job_type": "rp.ta", "depends_on": ["again"]}]}') AS te \gset
SELECT pg_temp.fail_step(:'te', 'd'), pg_temp.finish(:'te', 'v', '{"more": false}') IS NOT NULL,
       pg_temp.finish(:'te', 'after', '{}') IS NOT NULL;
SELECT status FROM workflow.workflow_runs WHERE id = :'te';
SELECT pg_temp.try(format('SELECT workflow.retry_run(%L)', :'te'));
SELECT * FROM workflow.verify(:'te');

-- A body step whose ON_SUCCESS prerequisite outside the body failed is
-- canceled again in every generation, not left waiting: x fails, a (after
-- x) is canceled, b (after a, on_terminal) runs and sends the loop round.
SELECT workflow.start_run('{"steps": [
    {"key": "x", "job_type": "rp.x"},
    {"key": "a", "job_type": "rp.a", "depends_on": ["x"]},
    {"key": "b", "job_type": "rp.b", "depends_on": [{"step": "a", "release": "on_terminal"}]},
    {"key": "again", "kind": "repeat", "depends_on": ["b"], "back_to": ["a"],
     "while": "$.more", "max_iterations": 2}]}') AS ux \gset
UPDATE workflow.job_queue q SET status = 'RUNNING', attempt = 1, lease_token = gen_random_uuid(),
       leased_until = now() + interval '1 hour'
  FROM workflow.workflow_steps s
 WHERE s.workflow_run_id = :'ux' AND s.step_key = 'x' AND q.id = s.job_id;
SELECT workflow.fail_job(q.id, q.lease_token, 'rp.bad', 'x failed', false)
  FROM workflow.job_queue q JOIN workflow.workflow_steps s ON q.id = s.job_id
 WHERE s.workflow_run_id = :'ux' AND s.step_key = 'x';
SELECT pg_temp.finish(:'ux', 'b', '{"more": true}') IS NOT NULL;
SELECT step_key, status, generation, code FROM pg_temp.steps(:'ux');
SELECT pg_temp.finish(:'ux', 'b', '{"more": true}') IS NOT NULL;
SELECT step_key, status, generation, code FROM pg_temp.steps(:'ux');
SELECT status FROM workflow.workflow_runs WHERE id = :'ux';
SELECT * FROM workflow.verify(:'ux');

-- A predicate whose evaluation fails (a variable it was not given) fails
-- the repeat; the completion that settles it goes through, and the
-- evidence has the checksum of the output it was evaluated over.
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "rp.v"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"],
     "while": "$.score < $min", "max_iterations": 3}]}') AS pv \gset
SELECT pg_temp.finish(:'pv', 'a', '{"score": 1}') IS NOT NULL;
SELECT step_key, status, code FROM pg_temp.steps(:'pv');
SELECT last_error_message FROM workflow.workflow_steps WHERE workflow_run_id = :'pv' AND step_key = 'r';
SELECT detail ->> 'output_checksum' = workflow.output_checksum('{"score": 1}') AS checksum_of_the_output
  FROM workflow.run_history(:'pv') WHERE event_type = 'control_node_settled';
SELECT * FROM workflow.verify(:'pv');

-- 11. ON_TERMINAL edges inside a body: a draft that fails is still
-- reviewed, and the next generation starts it again from FAILED.
SELECT workflow.start_run('{"steps": [
    {"key": "draft", "job_type": "rp.t"},
    {"key": "check", "job_type": "rp.t", "depends_on": [{"step": "draft", "release": "on_terminal"}]},
    {"key": "review", "job_type": "rp.t", "depends_on": ["check"]},
    {"key": "again", "kind": "repeat", "depends_on": ["review"], "back_to": ["draft"],
     "while": "$.approved == false", "max_iterations": 3}]}') AS ot \gset
UPDATE workflow.job_queue q SET status = 'RUNNING', attempt = 1, lease_token = gen_random_uuid(),
       leased_until = now() + interval '1 hour'
  FROM workflow.workflow_steps s
 WHERE s.workflow_run_id = :'ot' AND s.step_key = 'draft' AND q.id = s.job_id;
SELECT workflow.fail_job(q.id, q.lease_token, 'rp.bad', 'draft failed', false)
  FROM workflow.job_queue q JOIN workflow.workflow_steps s ON q.id = s.job_id
 WHERE s.workflow_run_id = :'ot' AND s.step_key = 'draft';
SELECT pg_temp.finish(:'ot', 'check', '{}') IS NOT NULL,
       pg_temp.finish(:'ot', 'review', '{"approved": false}') IS NOT NULL;
SELECT * FROM pg_temp.steps(:'ot');
SELECT steps_failed, steps_succeeded, steps_active, steps_blocked FROM workflow.workflow_runs WHERE id = :'ot';
SELECT * FROM workflow.verify(:'ot');
SELECT pg_temp.finish(:'ot', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'ot', 'check', '{}') IS NOT NULL,
       pg_temp.finish(:'ot', 'review', '{"approved": true}') IS NOT NULL;
SELECT status FROM workflow.workflow_runs WHERE id = :'ot';
SELECT * FROM workflow.verify(:'ot');

-- 12. A late call on an earlier generation's job changes nothing: its
-- identical repeat is quiet, anything else is refused; the step goes on.
SELECT workflow.start_run(pg_temp.review_loop(3)) AS st \gset
SELECT pg_temp.finish(:'st', 'draft', '{"text": "v1"}') IS NOT NULL;
SELECT q.id AS old_job, q.lease_token AS old_token FROM workflow.job_queue q
  JOIN workflow.workflow_steps s ON q.id = s.job_id
 WHERE s.workflow_run_id = :'st' AND s.step_key = 'draft' \gset
SELECT pg_temp.finish(:'st', 'review', '{"approved": false}') IS NOT NULL;
SELECT workflow.complete_job(:'old_job', :'old_token', '{"text": "v1"}') AS identical_repeat;
SELECT pg_temp.try(format('SELECT workflow.complete_job(%L, %L, %L)', :'old_job', :'old_token', '{"text": "late"}'));
SELECT pg_temp.try(format('SELECT workflow.fail_job(%L, %L, %L, %L)', :'old_job', :'old_token', 'rp.late', 'late'));
SELECT step_key, status, generation, output FROM pg_temp.steps(:'st') WHERE step_key = 'draft';
SELECT status, output FROM workflow.job_queue WHERE id = :'old_job';
SELECT * FROM workflow.verify(:'st');

-- 13. cancel_run in the middle of a loop: every step and job ends, none
-- is left live.
SELECT workflow.start_run(pg_temp.review_loop(3)) AS cr \gset
SELECT pg_temp.finish(:'cr', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'cr', 'review', '{"approved": false}') IS NOT NULL;
SELECT workflow.cancel_run(:'cr', 'enough');
SELECT step_key, status, generation FROM pg_temp.steps(:'cr');
SELECT count(*) AS live_jobs FROM workflow.job_queue
 WHERE workflow_run_id = :'cr' AND status IN ('QUEUED', 'RUNNING');
SELECT * FROM workflow.verify(:'cr');

-- 14. The history off: the loop's evidence is still written, nothing else.
SET workflow.history = 'off';
SELECT workflow.start_run(pg_temp.review_loop(2)) AS ho \gset
SELECT pg_temp.finish(:'ho', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'ho', 'review', '{"approved": false}') IS NOT NULL;
SELECT pg_temp.finish(:'ho', 'draft', '{}') IS NOT NULL,
       pg_temp.finish(:'ho', 'review', '{"approved": false}') IS NOT NULL;
RESET workflow.history;
SELECT event_type, step_key, detail ->> 'decision' AS decision
  FROM workflow.run_history(:'ho') ORDER BY id;

-- 15. Under concurrency_cap 1, a body of two parallel steps runs one at a
-- time in every generation; each generation's jobs count as executions.
SELECT workflow.start_run('{"limits": {"concurrency_cap": 1}, "steps": [
    {"key": "a", "job_type": "rp.c"}, {"key": "b", "job_type": "rp.c"},
    {"key": "join", "job_type": "rp.c", "depends_on": ["a", "b"]},
    {"key": "again", "kind": "repeat", "depends_on": ["join"], "back_to": ["a", "b"],
     "while": "$.more", "max_iterations": 2}]}') AS cp \gset
SELECT step_key, status FROM pg_temp.steps(:'cp');
SELECT pg_temp.finish(:'cp', 'a', '{}') IS NOT NULL, pg_temp.finish(:'cp', 'b', '{}') IS NOT NULL,
       pg_temp.finish(:'cp', 'join', '{"more": true}') IS NOT NULL;
SELECT step_key, status, generation FROM pg_temp.steps(:'cp');
SELECT steps_active, steps_parked, executions_used FROM workflow.workflow_runs WHERE id = :'cp';
SELECT * FROM workflow.verify(:'cp');
SELECT pg_temp.finish(:'cp', 'a', '{}') IS NOT NULL, pg_temp.finish(:'cp', 'b', '{}') IS NOT NULL,
       pg_temp.finish(:'cp', 'join', '{"more": true}') IS NOT NULL;
SELECT status, executions_used FROM workflow.workflow_runs WHERE id = :'cp';
SELECT * FROM workflow.verify(:'cp');

-- 16. compensate_run of a loop's run undoes the last generation of a
-- looped step: its compensation job gets that generation's output and
-- payload.
SELECT workflow.start_run('{"steps": [
    {"key": "draft", "job_type": "rp.cd", "compensate": {"job_type": "rp.undo"}},
    {"key": "review", "job_type": "rp.cr", "depends_on": ["draft"]},
    {"key": "again", "kind": "repeat", "depends_on": ["review"], "back_to": ["draft"],
     "while": "$.approved == false", "max_iterations": 3}]}') AS cm \gset
SELECT pg_temp.finish(:'cm', 'draft', '{"v": 1}') IS NOT NULL,
       pg_temp.finish(:'cm', 'review', '{"approved": false}') IS NOT NULL,
       pg_temp.finish(:'cm', 'draft', '{"v": 2}') IS NOT NULL;
SELECT workflow.compensate_run(:'cm');
SELECT step_key, status, generation FROM pg_temp.steps(:'cm');
SELECT generation, payload FROM workflow.job_queue WHERE workflow_run_id = :'cm' AND job_type = 'rp.undo';
SELECT * FROM workflow.verify(:'cm');
UPDATE workflow.job_queue SET status = 'RUNNING', attempt = 1, lease_token = gen_random_uuid(),
       leased_until = now() + interval '1 hour'
 WHERE workflow_run_id = :'cm' AND job_type = 'rp.undo';
SELECT workflow.complete_job(id, lease_token, '{}') FROM workflow.job_queue
 WHERE workflow_run_id = :'cm' AND job_type = 'rp.undo';
SELECT status FROM workflow.workflow_runs WHERE id = :'cm';
SELECT * FROM workflow.verify(:'cm');

-- compensate_run in the middle of a generation: the draft that the next
-- generation reset is canceled, and its earlier generation not undone
-- (a looped step is undone as its generation left it)
SELECT workflow.start_run('{"steps": [
    {"key": "draft", "job_type": "rp.md", "compensate": {"job_type": "rp.mundo"}},
    {"key": "review", "job_type": "rp.mr", "depends_on": ["draft"]},
    {"key": "again", "kind": "repeat", "depends_on": ["review"], "back_to": ["draft"],
     "while": "$.approved == false", "max_iterations": 3}]}') AS cmid \gset
SELECT pg_temp.finish(:'cmid', 'draft', '{"v": 1}') IS NOT NULL,
       pg_temp.finish(:'cmid', 'review', '{"approved": false}') IS NOT NULL;
SELECT step_key, status, generation, completion_seq IS NOT NULL AS to_undo
  FROM workflow.workflow_steps WHERE workflow_run_id = :'cmid' ORDER BY step_key;
SELECT * FROM workflow.verify(:'cmid');
SELECT workflow.compensate_run(:'cmid');
SELECT step_key, status, generation FROM pg_temp.steps(:'cmid');
SELECT generation, payload -> 'output' AS undoes FROM workflow.job_queue
 WHERE workflow_run_id = :'cmid' AND job_type = 'rp.mundo';
SELECT steps_succeeded, steps_canceled FROM workflow.workflow_runs WHERE id = :'cmid';
SELECT * FROM workflow.verify(:'cmid');
UPDATE workflow.job_queue SET status = 'RUNNING', attempt = 1, lease_token = gen_random_uuid(),
       leased_until = now() + interval '1 hour'
 WHERE workflow_run_id = :'cmid' AND job_type = 'rp.mundo';
SELECT workflow.complete_job(id, lease_token, '{}') FROM workflow.job_queue
 WHERE workflow_run_id = :'cmid' AND job_type = 'rp.mundo';
SELECT status FROM workflow.workflow_runs WHERE id = :'cmid';
SELECT * FROM workflow.verify(:'cmid');

-- the same with a body two steps wide (its counters in shards when the
-- suite runs with counter shards)
SELECT workflow.start_run('{"steps": [
    {"key": "left", "job_type": "rp.wl", "compensate": {"job_type": "rp.wundo"}},
    {"key": "right", "job_type": "rp.wr"},
    {"key": "review", "job_type": "rp.wv", "depends_on": ["left", "right"]},
    {"key": "again", "kind": "repeat", "depends_on": ["review"], "back_to": ["left", "right"],
     "while": "$.approved == false", "max_iterations": 3}]}') AS cw \gset
SELECT pg_temp.finish(:'cw', 'left', '{"v": 1}') IS NOT NULL,
       pg_temp.finish(:'cw', 'right', '{}') IS NOT NULL,
       pg_temp.finish(:'cw', 'review', '{"approved": false}') IS NOT NULL;
SELECT workflow.compensate_run(:'cw');
SELECT step_key, status, generation FROM pg_temp.steps(:'cw');
SELECT * FROM workflow.verify(:'cw');
UPDATE workflow.job_queue SET status = 'RUNNING', attempt = 1, lease_token = gen_random_uuid(),
       leased_until = now() + interval '1 hour'
 WHERE workflow_run_id = :'cw' AND job_type = 'rp.wundo';
SELECT workflow.complete_job(id, lease_token, '{}') FROM workflow.job_queue
 WHERE workflow_run_id = :'cw' AND job_type = 'rp.wundo';
SELECT status FROM workflow.workflow_runs WHERE id = :'cw';
SELECT * FROM workflow.verify(:'cw');

-- A repeat that fails under "compensate_on": "failure" starts the
-- compensation, even as the run's last step.
SELECT workflow.start_run('{"compensate_on": "failure", "steps": [
    {"key": "a", "job_type": "rp.fa", "compensate": {"job_type": "rp.fundo"}},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"],
     "while": "$.again", "max_iterations": 1}]}') AS cf \gset
SELECT pg_temp.finish(:'cf', 'a', '{"again": true}') IS NOT NULL;
SELECT status FROM workflow.workflow_runs WHERE id = :'cf';
SELECT step_key, status FROM pg_temp.steps(:'cf');
SELECT * FROM workflow.verify(:'cf');
-- The dependents of a repeat that ends are released in the same round: the
-- run does not pass through a status it never had (here, waiting for the
-- outside while z is about to be released) ...
SELECT workflow.start_run('{"steps": [
    {"key": "e", "kind": "external"}, {"key": "a", "job_type": "rp.sa"},
    {"key": "r", "kind": "repeat", "depends_on": ["a"], "back_to": ["a"],
     "while": "$.again", "max_iterations": 2},
    {"key": "z", "job_type": "rp.sz", "depends_on": ["r"]}]}') AS sr \gset
SELECT pg_temp.finish(:'sr', 'a', '{"again": false}') IS NOT NULL;
SELECT event_type, detail FROM workflow.run_history(:'sr') WHERE step_key IS NULL ORDER BY id;
SELECT * FROM workflow.verify(:'sr');
-- ... nor one it cannot leave: under node_execution_cap, with a step parked
-- and the repeat's dependent an external step
SELECT workflow.start_run('{"limits": {"node_execution_cap": 2}, "steps": [
    {"key": "a", "job_type": "rp.ca"}, {"key": "p", "job_type": "rp.cp"},
    {"key": "r", "kind": "repeat", "depends_on": ["p"], "back_to": ["p"],
     "while": "$.again", "max_iterations": 2},
    {"key": "e", "kind": "external", "depends_on": ["r"]},
    {"key": "z", "job_type": "rp.cz", "depends_on": ["a"]}]}') AS ce \gset
SELECT pg_temp.finish(:'ce', 'a', '{}') IS NOT NULL;
SELECT pg_temp.finish(:'ce', 'p', '{"again": false}') IS NOT NULL;
SELECT status FROM workflow.workflow_runs WHERE id = :'ce';
SELECT step_key, status FROM pg_temp.steps(:'ce');
SELECT * FROM workflow.verify(:'ce');

-- 17. The picture of a loop's run names the repeat's kind.
SELECT workflow.run_graph(:'c2', 'dot') LIKE '%REPEAT%' AS shows_repeat;

-- 18. purge deletes the finished runs of loops with every generation's jobs,
-- the compensated run of section 16 included.
SELECT count(*) AS loop_jobs_before FROM workflow.job_queue q
  JOIN workflow.workflow_runs r ON r.id = q.workflow_run_id
 WHERE r.finished_at IS NOT NULL AND q.generation > 0 \gset
SELECT :loop_jobs_before > 0 AS some_later_generations;
SELECT workflow.purge('0 seconds', 1000) > 0 AS purged;
SELECT count(*) AS jobs_without_their_run FROM workflow.job_queue j
 WHERE j.workflow_run_id IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM workflow.workflow_runs r WHERE r.id = j.workflow_run_id);
SELECT count(*) AS finished_runs_left FROM workflow.workflow_runs WHERE finished_at IS NOT NULL;

-- everything holds
SELECT * FROM workflow.verify();
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.event_inbox;
