-- start_run: whole-definition validation, idempotency, release of roots.
\set VERBOSITY terse
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;

-- Every rule, each with a message that names the offending step.
SELECT workflow.start_run(NULL);
SELECT workflow.start_run('[]');
SELECT workflow.start_run('"steps"');
SELECT workflow.start_run('{}');
SELECT workflow.start_run('{"steps": []}');
SELECT workflow.start_run('{"steps": {}}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}], "colour": "red"}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}], "name": 7}');
SELECT workflow.start_run('{"steps": [42]}');
SELECT workflow.start_run('{"steps": [{"job_type": "t"}]}');
SELECT workflow.start_run('{"steps": [{"key": 1, "job_type": "t"}]}');
SELECT workflow.start_run('{"steps": [{"key": "", "job_type": "t"}]}');
SELECT workflow.start_run('{"steps": [{"key": "has space", "job_type": "t"}]}');
SELECT workflow.start_run(jsonb_build_object('steps', jsonb_build_array(
    jsonb_build_object('key', repeat('k', 129), 'job_type', 't'))));
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}, {"key": "a", "job_type": "t"}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t", "depend_on": ["b"]}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "kind": "timer"}]}');
SELECT workflow.start_run('{"steps": [{"key": "a"}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": ""}]}');
SELECT workflow.start_run(jsonb_build_object('steps', jsonb_build_array(
    jsonb_build_object('key', 'a', 'job_type', repeat('t', 129)))));
SELECT workflow.start_run('{"steps": [{"key": "a", "kind": "external", "job_type": "t"}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t", "depends_on": ["zzz"]}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t", "depends_on": ["a"]}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "b", "job_type": "t", "depends_on": ["a", {"step": "a", "release": "on_terminal"}]}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t", "depends_on": "b"}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t", "depends_on": [7]}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "b", "job_type": "t", "depends_on": [{"step": "a", "release": "sometimes"}]}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "b", "job_type": "t", "depends_on": [{"step": "a", "mode": "on_terminal"}]}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"},
    {"key": "b", "job_type": "t", "depends_on": [{"release": "on_terminal"}]}]}');
SELECT workflow.start_run('{"steps": [{"key": "root", "job_type": "t"},
    {"key": "a", "job_type": "t", "depends_on": ["root", "c"]},
    {"key": "b", "job_type": "t", "depends_on": ["a"]},
    {"key": "c", "job_type": "t", "depends_on": ["b"]},
    {"key": "after", "job_type": "t", "depends_on": ["c"]}]}');
SELECT workflow.start_run('{"result_step": "nope", "steps": [{"key": "a", "job_type": "t"}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t", "priority": 1.5}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t", "priority": "high"}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t", "max_attempts": 0}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t", "timeout_seconds": 99999999999}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t", "stage": 3}]}');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t", "payload": null}]}');
SET workflow.max_payload_bytes = 64;
SELECT workflow.start_run(jsonb_build_object('steps', jsonb_build_array(
    jsonb_build_object('key', 'a', 'job_type', 't', 'payload', jsonb_build_object('x', repeat('x', 100))))));
RESET workflow.max_payload_bytes;
SET workflow.max_steps = 2;
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}, {"key": "b", "job_type": "t"},
    {"key": "c", "job_type": "t"}]}');
RESET workflow.max_steps;
SET workflow.max_edges = 1;
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}, {"key": "b", "job_type": "t"},
    {"key": "c", "job_type": "t", "depends_on": ["a", "b"]}]}');
RESET workflow.max_edges;

-- nothing of a refused definition was written
SELECT (SELECT count(*) FROM workflow.workflow_runs) AS runs,
       (SELECT count(*) FROM workflow.workflow_steps) AS steps,
       (SELECT count(*) FROM workflow.workflow_step_dependencies) AS edges,
       (SELECT count(*) FROM workflow.job_queue) AS jobs;

-- a valid run: roots released, the rest BLOCKED, counters right
SELECT workflow.start_run('{"name": "build", "result_step": "publish", "steps": [
   {"key": "fetch", "job_type": "git.fetch", "payload": {"ref": "main"}},
   {"key": "lint", "job_type": "ci.lint"},
   {"key": "test", "job_type": "ci.test", "depends_on": ["fetch"],
    "priority": 5, "max_attempts": 2, "timeout_seconds": 600, "stage": "ci"},
   {"key": "approve", "kind": "external", "depends_on": ["test"]},
   {"key": "sign", "kind": "external"},
   {"key": "publish", "job_type": "ci.publish",
    "depends_on": ["approve", {"step": "test", "release": "on_terminal"}, "lint"]}
 ]}', '00000000-0000-0000-0000-0000000000aa') AS run \gset
SELECT r.name, r.status, r.result_step_key, r.result, r.organization_id, r.finished_at, c.*
  FROM workflow.workflow_runs r, workflow.run_counters(r.id) c WHERE r.id = :'run';
SELECT step_key, execution_kind, job_type, status, payload, priority,
       max_attempts, timeout_seconds, stage, job_id IS NOT NULL AS has_job,
       released_at IS NOT NULL AS released, dependency_count_total,
       dependency_count_pending, dependency_count_unsatisfied, organization_id
  FROM workflow.workflow_steps WHERE workflow_run_id = :'run' ORDER BY step_key;
SELECT p.step_key AS prerequisite, d.step_key AS dependent, e.release_mode
  FROM workflow.workflow_step_dependencies e
  JOIN workflow.workflow_steps p ON p.id = e.prerequisite_step_id
  JOIN workflow.workflow_steps d ON d.id = e.dependent_step_id
 WHERE e.workflow_run_id = :'run' ORDER BY 1, 2;
SELECT s.step_key, j.job_type, j.status, j.payload, j.priority, j.max_attempts,
       j.timeout_seconds, j.stage, j.organization_id, j.generation,
       j.workflow_run_id = s.workflow_run_id AS same_run, s.job_id = j.id AS linked
  FROM workflow.job_queue j JOIN workflow.workflow_steps s ON s.id = j.workflow_step_id
 WHERE s.workflow_run_id = :'run' ORDER BY s.step_key;

-- a run of external steps only waits for the outside world
SELECT workflow.start_run('{"steps": [{"key": "x", "kind": "external"},
    {"key": "y", "kind": "external", "depends_on": ["x"]}]}') AS ext_run \gset
SELECT r.status, c.steps_waiting, c.steps_blocked FROM workflow.workflow_runs r, workflow.run_counters(r.id) c WHERE r.id = :'ext_run';

-- idempotency: same key and definition returns the first run
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}]}', NULL, 'key-1') AS first \gset
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}]}', NULL, 'key-1') = :'first' AS same_run;
SELECT workflow.start_run('{"steps": [{"key": "b", "job_type": "t"}]}', NULL, 'key-1');
-- keys are scoped by organization
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}]}',
    '00000000-0000-0000-0000-0000000000bb', 'key-1') <> :'first' AS other_org_other_run;
SELECT count(*) AS runs_with_key FROM workflow.workflow_runs WHERE idempotency_key = 'key-1';
SELECT count(*) AS jobs_of_key_runs FROM workflow.job_queue j
  JOIN workflow.workflow_runs r ON r.id = j.workflow_run_id WHERE r.idempotency_key = 'key-1';

-- the idempotency key is bounded (it lives in a unique index)
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}]}', NULL, repeat('k', 513));
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}]}', NULL, '');
SELECT workflow.start_run('{"steps": [{"key": "a", "job_type": "t"}]}', NULL, repeat('é', 256)) IS NOT NULL AS max_key_ok;
SELECT count(*) AS runs_with_long_keys FROM workflow.workflow_runs WHERE octet_length(idempotency_key) > 100;

-- every invariant holds at the end
SELECT * FROM workflow.verify();
