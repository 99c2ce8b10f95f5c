-- run_graph: a run's DAG in Graphviz DOT and as a Mermaid flowchart.
-- Nodes s1, s2, ... in the definition's order, labelled with key, kind,
-- status and attempts and coloured by status; ON_TERMINAL edges dashed;
-- keys that hold quotes, backslashes, braces, brackets, arrows, entity
-- codes, line breaks or any other character stay inside their label;
-- errors for bad arguments and for a run the caller may not see.
\set VERBOSITY terse
SET workflow.retry_base_delay_ms = 0;
TRUNCATE workflow.job_queue, workflow.workflow_runs, workflow.workflow_run_counters, workflow.workflow_steps, workflow.parked_steps,
         workflow.workflow_step_dependencies, workflow.organization_members;

\set org_a 'a0000000-0000-4000-8000-00000000000a'
\set org_b 'b0000000-0000-4000-8000-00000000000b'

-- errm() shows a statement's SQLSTATE and message with every uuid <id>
CREATE FUNCTION pg_temp.errm(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || regexp_replace(SQLERRM,
        '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<id>', 'g');
END $$;
-- finish(run, key, ok) claims the step's job (of type g.<key>) and
-- completes it, fails it for good, or (ok NULL) leaves it RUNNING
CREATE FUNCTION pg_temp.finish(run uuid, key text, ok boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    j workflow.job_queue;
BEGIN
    SELECT c.* INTO j FROM workflow.claim('w', ARRAY['g.' || key]) c;
    IF j.workflow_run_id IS DISTINCT FROM run THEN
        RAISE EXCEPTION 'no job for %', key;
    END IF;
    IF ok THEN
        PERFORM workflow.complete_job(j.id, j.lease_token);
    ELSIF NOT ok THEN
        PERFORM workflow.fail_job(j.id, j.lease_token, 'boom', 'no', false);
    END IF;
END $$;
-- as_role() evaluates one expression as another role (or shows its error)
CREATE FUNCTION pg_temp.as_role(r text, expr text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE 'SELECT (' || expr || ')::text' INTO v;
    RESET ROLE;
    RETURN v;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || regexp_replace(SQLERRM,
        '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<id>', 'g');
END $$;

-- roles left by an earlier run that stopped half-way
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_graph_client_a, regress_graph_reader_a, regress_graph_worker,
    regress_graph_nobody;
RESET client_min_messages;

-- 1. A run with a step in every status and both kinds of edge: done
-- SUCCEEDED, broke FAILED (after two attempts), skipped CANCELED (it
-- needed broke), cleanup ENQUEUED (it waited for broke whatever the
-- outcome, dashed), busy RUNNING, approve WAITING_FOR_EXTERNAL, publish
-- BLOCKED behind approve and, dashed, behind busy.
\set every '{"name": "every", "steps": [{"key": "done", "job_type": "g.done"}, {"key": "broke", "job_type": "g.broke", "max_attempts": 2}, {"key": "skipped", "job_type": "g.skipped", "depends_on": ["broke"]}, {"key": "cleanup", "job_type": "g.cleanup", "depends_on": [{"step": "broke", "release": "on_terminal"}]}, {"key": "busy", "job_type": "g.busy"}, {"key": "approve", "kind": "external", "depends_on": ["done"]}, {"key": "publish", "job_type": "g.publish", "depends_on": ["approve", {"step": "busy", "release": "on_terminal"}]}]}'
SELECT workflow.start_run(:'every') AS every \gset
SELECT pg_temp.finish(:'every', 'done', true);
SELECT id AS bj, lease_token AS bt FROM workflow.claim('w', ARRAY['g.broke']) \gset
SELECT workflow.fail_job(:'bj', :'bt', 'flaky', 'once');
SELECT pg_temp.finish(:'every', 'broke', false);
SELECT pg_temp.finish(:'every', 'busy', NULL);
SELECT step_key, status FROM workflow.workflow_steps WHERE workflow_run_id = :'every' ORDER BY id;

\pset format unaligned
\pset tuples_only on
SELECT workflow.run_graph(:'every');
SELECT workflow.run_graph(:'every', 'mermaid');
\pset format aligned
\pset tuples_only off
-- the default format is dot; named arguments work
SELECT workflow.run_graph(:'every') = workflow.run_graph(workflow_run_id => :'every', format => 'dot')
       AS dot_by_default;

-- 2. Hostile keys.  Keys from start_run match ^[A-Za-z0-9_.:-]+$, but a
-- key written by the owner, or by a later version with looser keys, may
-- hold anything: it must never leave its label, in either format.
SELECT workflow.start_run('{"name": "hostile", "steps": [
  {"key": "k01", "job_type": "g.h"}, {"key": "k02", "job_type": "g.h", "depends_on": ["k01"]},
  {"key": "k03", "job_type": "g.h", "depends_on": [{"step": "k02", "release": "on_terminal"}]},
  {"key": "k04", "job_type": "g.h"}, {"key": "k05", "job_type": "g.h"}, {"key": "k06", "job_type": "g.h"},
  {"key": "k07", "job_type": "g.h"}, {"key": "k08", "job_type": "g.h"}, {"key": "k09", "job_type": "g.h"},
  {"key": "k10", "job_type": "g.h"}, {"key": "k11", "job_type": "g.h"}, {"key": "k12", "job_type": "g.h"},
  {"key": "k13", "kind": "external"}, {"key": "k14", "job_type": "g.h"}, {"key": "k15", "job_type": "g.h"}]}') AS hostile \gset
UPDATE workflow.workflow_steps s SET step_key = k.hostile
  FROM (VALUES ('k01', E'say "hi"'),
               ('k02', E'back\\slash\\'),
               ('k03', E'{braces}; semi; a -> b [color=red]'),
               ('k04', E'line1\nline2\r\tend'),
               ('k05', E'x --> y]"];s9["evil'),
               ('k06', E'#quot;&amp;<br/>#35;'),
               ('k07', E'`md` %% not a comment'),
               ('k08', E'ünïcödé ✓ 日本 😀'),
               ('k09', E'sep\u2028par\u2029nel\u0085'),
               ('k10', E'\\N\\G\\n\\l'),
               ('k11', E'end'),
               ('k12', E'click s1 call evil()'),
               ('k13', E'"}\n}\ndigraph x {'),
               ('k14', E'-->'),
               ('k15', E'''] ::: "')) AS k(key, hostile)
 WHERE s.workflow_run_id = :'hostile' AND s.step_key = k.key;
\pset format unaligned
\pset tuples_only on
SELECT workflow.run_graph(:'hostile');
SELECT workflow.run_graph(:'hostile', 'mermaid');
\pset format aligned
\pset tuples_only off
-- every line of the output is the header, a node, an edge, a class or the
-- end: no key broke a line or ended its label early
SELECT f AS format, count(*) AS lines,
       count(*) FILTER (WHERE line ~ '^  s[0-9]+ \[label="([^"\\]|\\.)*", fillcolor="#[0-9a-f]{6}", color="#[0-9a-f]{6}"\];$'
                           OR line ~ '^  s[0-9]+\["[^"<>]*<br/>[A-Z_]+, [A-Z_]+, attempts: [0-9]+"\](:::[a-z_]+)?$') AS nodes,
       count(*) FILTER (WHERE line ~ '^  s[0-9]+ (->|-->|-\.->) s[0-9]+( \[style=dashed\])?;?$') AS edges,
       count(*) FILTER (WHERE line ~ '^(digraph workflow_run \{|  rankdir=LR;|  node \[.*\];|\}|flowchart LR|  classDef [a-z_]+ fill:#[0-9a-f]{6},stroke:#[0-9a-f]{6}|)$') AS other
  FROM unnest(ARRAY['dot', 'mermaid']) f,
       regexp_split_to_table(workflow.run_graph(:'hostile', f), E'\n') line
 GROUP BY f ORDER BY f;

-- 3. Size: a fan of 1000 steps and 1996 edges comes out whole.
SELECT workflow.start_run(jsonb_build_object('name', 'fan', 'steps',
    jsonb_build_array(jsonb_build_object('key', 'root', 'job_type', 'g.fan'))
    || (SELECT jsonb_agg(jsonb_build_object('key', 'f' || i, 'job_type', 'g.fan',
                                            'depends_on', jsonb_build_array('root')) ORDER BY i)
          FROM generate_series(1, 998) i)
    || jsonb_build_array(jsonb_build_object('key', 'join', 'job_type', 'g.fan', 'depends_on',
           (SELECT jsonb_agg('f' || i ORDER BY i) FROM generate_series(1, 998) i)))))
       AS fan \gset
SELECT f AS format,
       count(*) FILTER (WHERE line ~ '^  s[0-9]+ ?\[') AS nodes,
       count(*) FILTER (WHERE line ~ '^  s[0-9]+ -') AS edges,
       count(DISTINCT substring(line FROM '^  (s[0-9]+) ?\[')) AS distinct_ids
  FROM unnest(ARRAY['dot', 'mermaid']) f,
       regexp_split_to_table(workflow.run_graph(:'fan', f), E'\n') line
 GROUP BY f ORDER BY f;

-- 4. Errors: bad arguments first, then the run.
SELECT pg_temp.errm(format('SELECT workflow.run_graph(%L, %L)', :'every', 'svg'));
SELECT pg_temp.errm(format('SELECT workflow.run_graph(%L, %L)', :'every', 'DOT'));
SELECT pg_temp.errm(format('SELECT workflow.run_graph(%L, NULL)', :'every'));
SELECT pg_temp.errm('SELECT workflow.run_graph(NULL)');
SELECT pg_temp.errm('SELECT workflow.run_graph(NULL, ''svg'')');
SELECT pg_temp.errm('SELECT workflow.run_graph(''00000000-0000-4000-8000-000000000000'')');
SELECT pg_temp.errm('SELECT workflow.run_graph(''00000000-0000-4000-8000-000000000000'', ''mermaid'')');
-- it reads only: any isolation level will do
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT length(workflow.run_graph(:'every')) > 0 AS under_repeatable_read;
COMMIT;
-- a run of no organization, asked for under one, is not there
SELECT pg_temp.errm(format('SELECT workflow.run_graph(%L, organization_id => %L)', :'every', :'org_a'));

-- 5. Tenants.  A tenant role (client or reader) draws its organization's
-- runs; another organization's run, or one of none, fails exactly like a
-- run that does not exist.
SELECT workflow.start_run('{"name": "of-a", "steps": [{"key": "x", "job_type": "g.t"}]}', :'org_a') AS ra \gset
SELECT workflow.start_run('{"name": "of-b", "steps": [{"key": "y", "job_type": "g.t"}]}', :'org_b') AS rb \gset
CREATE ROLE regress_graph_client_a LOGIN IN ROLE workflow_client;
CREATE ROLE regress_graph_reader_a LOGIN IN ROLE workflow_reader;
CREATE ROLE regress_graph_worker LOGIN IN ROLE workflow_worker;
CREATE ROLE regress_graph_nobody LOGIN;
SELECT workflow.grant_organization('regress_graph_client_a', :'org_a');
SELECT workflow.grant_organization('regress_graph_reader_a', :'org_a');
SELECT r AS role, w AS run,
       pg_temp.as_role(r, format('length(workflow.run_graph(%L, ''mermaid'')) > 0', id)) AS result
  FROM unnest(ARRAY['regress_graph_client_a', 'regress_graph_reader_a']) r,
       (VALUES ('of-a', :'ra'::uuid), ('of-b', :'rb'::uuid), ('none', :'every'::uuid),
               ('missing', '00000000-0000-4000-8000-000000000000'::uuid)) AS v(w, id)
 ORDER BY 1, 2;
SELECT pg_temp.as_role('regress_graph_client_a',
           format('workflow.run_graph(%L, ''mermaid'', %L)', :'ra', :'org_a')) AS own_org_named;
SELECT pg_temp.as_role('regress_graph_client_a',
           format('workflow.run_graph(%L, ''mermaid'', %L)', :'ra', :'org_b')) AS other_org_named;
-- unconfined callers name the organization or not
SELECT length(workflow.run_graph(:'rb', 'dot', :'org_b')) > 0 AS superuser_naming_b;
SELECT pg_temp.errm(format('SELECT workflow.run_graph(%L, ''dot'', %L)', :'rb', :'org_a'));
-- a worker, and a role without a workflow role, may not call it
SELECT pg_temp.as_role('regress_graph_worker', format('workflow.run_graph(%L)', :'ra')) AS worker;
SELECT pg_temp.as_role('regress_graph_nobody', format('workflow.run_graph(%L)', :'ra')) AS nobody;

SELECT workflow.revoke_organization('regress_graph_client_a', :'org_a');
SELECT workflow.revoke_organization('regress_graph_reader_a', :'org_a');
DROP ROLE regress_graph_client_a, regress_graph_reader_a, regress_graph_worker,
    regress_graph_nobody;
