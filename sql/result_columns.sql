-- claim and complete_external_step return rows of their declared types,
-- column by column by name: a column dropped and added again, which leaves
-- a dropped column in its old place and puts the new one last, changes
-- nothing in what they return.  Each layout change is rolled back.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies;

-- what claim and complete_external_step returned, as jsonb by column name
CREATE TEMP TABLE claimed (id uuid, row jsonb);
CREATE TEMP TABLE completed (id uuid, row jsonb);

-- a claimed row is the row the table now holds, compared by column name
CREATE FUNCTION pg_temp.claimed_rows()
RETURNS TABLE (job_type text, worker_id text, status text, attempt int,
               same_row boolean)
LANGUAGE sql AS $$
    SELECT c.row->>'job_type', c.row->>'worker_id', c.row->>'status',
           (c.row->>'attempt')::int, c.row = to_jsonb(j)
      FROM claimed c JOIN workflow.job_queue j USING (id)
     ORDER BY 1
$$;

-- claim, with the table's columns as installed
SELECT count(workflow.enqueue(t, jsonb_build_object('t', t), 5))
  FROM unnest(ARRAY['layout.a', 'layout.b', 'layout.c', 'layout.d',
                    'layout.e', 'layout.f', 'layout.g']) t;
INSERT INTO claimed SELECT c.id, to_jsonb(c) FROM workflow.claim('w0', ARRAY['layout.a']) c;
SELECT * FROM pg_temp.claimed_rows();

-- claim: worker_id dropped and added again, in each kind of claim plan
BEGIN;
ALTER TABLE workflow.job_queue DROP COLUMN worker_id, ADD COLUMN worker_id text;
TRUNCATE claimed;
INSERT INTO claimed SELECT c.id, to_jsonb(c) FROM workflow.claim('w1', ARRAY['layout.b']) c;
INSERT INTO claimed SELECT c.id, to_jsonb(c) FROM workflow.claim('w2', ARRAY['layout.c', 'layout.d'], 2) c;
INSERT INTO claimed SELECT c.id, to_jsonb(c) FROM workflow.claim('w3', NULL, 1) c;
SELECT * FROM pg_temp.claimed_rows();
ROLLBACK;

-- claim: the same backend again with the columns as installed
TRUNCATE claimed;
INSERT INTO claimed SELECT c.id, to_jsonb(c) FROM workflow.claim('w4', ARRAY['layout.b']) c;
INSERT INTO claimed SELECT c.id, to_jsonb(c) FROM workflow.claim('w5', ARRAY['layout.c', 'layout.d'], 2) c;
SELECT * FROM pg_temp.claimed_rows();

-- complete_external_step: output dropped and added again, on a first
-- completion and on its identical repeat
SELECT workflow.start_run('{"steps": [{"key": "approve", "kind": "external"},
    {"key": "after", "kind": "external", "depends_on": ["approve"]}]}') AS run \gset
BEGIN;
ALTER TABLE workflow.workflow_steps DROP COLUMN output, ADD COLUMN output jsonb;
INSERT INTO completed
    SELECT c.id, to_jsonb(c) FROM workflow.complete_external_step(:'run', 'approve', 'SUCCEEDED',
                                                  '{"by": "ann"}') c;
INSERT INTO completed
    SELECT c.id, to_jsonb(c) FROM workflow.complete_external_step(:'run', 'approve', 'SUCCEEDED',
                                                  '{"by": "ann"}') c;
SELECT c.row->>'step_key' AS step_key, c.row->>'status' AS status,
       c.row->'output' AS output, c.row->'completed_externally' AS completed_externally,
       c.row = to_jsonb(s) AS same_row
  FROM completed c JOIN workflow.workflow_steps s USING (id);
SELECT (workflow.complete_external_step(:'run', 'approve', 'SUCCEEDED',
                                        '{"by": "ann"}')).output AS output_field;
ROLLBACK;

-- complete_external_step with the columns as installed
SELECT step_key, status, output, completed_externally
  FROM workflow.complete_external_step(:'run', 'approve', 'SUCCEEDED', '{"by": "bob"}');
SELECT (workflow.complete_external_step(:'run', 'approve', 'SUCCEEDED',
                                        '{"by": "bob"}')).output AS output_field;

-- every invariant holds at the end
SELECT * FROM workflow.verify();
