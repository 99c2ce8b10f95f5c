-- bench/setup.sql: the bench schema, loaded once into the template database
-- that every workload database is copied from (after CREATE EXTENSION
-- workflow).  It holds definition generators, the definitions a workload
-- uses (so that building a large jsonb is never timed), run bookkeeping, and
-- plain tables of the same shape as the engine's for the INSERT baseline.

CREATE SCHEMA bench;

-- Definitions by name; pgbench scripts read them with
--   SELECT workflow.start_run(def) FROM bench.defs WHERE name = '...'.
CREATE TABLE bench.defs (
    name    text PRIMARY KEY,
    steps   integer NOT NULL,
    def     jsonb NOT NULL
);

-- Runs a workload started, numbered per tag (external steps: client c owns
-- runs c, c + clients, c + 2 * clients, ...).
CREATE TABLE bench.runs (
    tag     text NOT NULL,
    n       integer NOT NULL,
    run_id  uuid NOT NULL,
    PRIMARY KEY (tag, n)
);

-- A job step keyed "s<i>".
CREATE FUNCTION bench.job_step(i integer, job_type text, deps jsonb DEFAULT NULL)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN deps IS NULL
                THEN jsonb_build_object('key', 's' || i, 'job_type', job_type)
                ELSE jsonb_build_object('key', 's' || i, 'job_type', job_type,
                                        'depends_on', deps) END
$$;

-- n steps, none depending on another.
CREATE FUNCTION bench.def_independent(n integer, job_type text)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'independent-' || n, 'steps',
        (SELECT jsonb_agg(bench.job_step(i, job_type) ORDER BY i)
           FROM generate_series(0, n - 1) i))
$$;

-- s0 -> s1 -> ... -> s(n-1).
CREATE FUNCTION bench.def_chain(n integer, job_type text)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'chain-' || n, 'steps',
        (SELECT jsonb_agg(bench.job_step(i, job_type,
                    CASE WHEN i > 0 THEN jsonb_build_array('s' || (i - 1)) END)
                    ORDER BY i)
           FROM generate_series(0, n - 1) i))
$$;

-- s0 -> s1 -> ... -> s(n-1) -> again: a chain of n job steps, the body of
-- a loop that goes round while its last step's output is null (a job
-- completed without an output), up to max_iterations generations.
CREATE FUNCTION bench.def_loop(n integer, job_type text, max_iterations integer)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'loop-' || n, 'steps',
        (bench.def_chain(n, job_type) -> 'steps')
        || jsonb_build_array(jsonb_build_object('key', 'again', 'kind', 'repeat',
               'depends_on', jsonb_build_array('s' || (n - 1)),
               'back_to', jsonb_build_array('s0'),
               'while', '$ == null', 'max_iterations', max_iterations)))
$$;

-- s0 -> ... -> s(n-1) -> last: a chain of n job steps of job_type, each
-- with a compensate job of undo_type, then a step of last_type that no
-- worker of the chain takes, so that the run stays live until compensated.
CREATE FUNCTION bench.def_saga_chain(n integer, job_type text, undo_type text,
                                     last_type text)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'saga-' || n, 'steps',
        (SELECT jsonb_agg(bench.job_step(i, job_type,
                    CASE WHEN i > 0 THEN jsonb_build_array('s' || (i - 1)) END)
                    || jsonb_build_object('compensate',
                                          jsonb_build_object('job_type', undo_type))
                    ORDER BY i)
           FROM generate_series(0, n - 1) i)
        || jsonb_build_array(jsonb_build_object('key', 'last', 'job_type', last_type,
                                                'depends_on', jsonb_build_array('s' || (n - 1)))))
$$;

-- n roots -> join: the join step has n prerequisites.
CREATE FUNCTION bench.def_join(n integer, job_type text, join_type text)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'join-' || n, 'steps',
        (SELECT jsonb_agg(bench.job_step(i, job_type) ORDER BY i)
           FROM generate_series(0, n - 1) i)
        || jsonb_build_array(jsonb_build_object('key', 'join', 'job_type', join_type,
               'depends_on', (SELECT jsonb_agg('s' || i ORDER BY i)
                                FROM generate_series(0, n - 1) i))))
$$;

-- n/2 pairs s(2k) -> s(2k+1): half the steps are roots with a job, half
-- wait on one edge.
CREATE FUNCTION bench.def_pairs(n integer, job_type text)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'pairs-' || n, 'steps',
        (SELECT jsonb_agg(bench.job_step(i, job_type,
                    CASE WHEN i % 2 = 1 THEN jsonb_build_array('s' || (i - 1)) END)
                    ORDER BY i)
           FROM generate_series(0, n - 1) i))
$$;

-- s0 -> s1 .. sn -> s(n+1): one root, n parallel steps, one join.
CREATE FUNCTION bench.def_fanout(n integer, job_type text)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'fanout-' || n, 'steps',
        jsonb_build_array(bench.job_step(0, job_type))
        || (SELECT jsonb_agg(bench.job_step(i, job_type, '["s0"]') ORDER BY i)
              FROM generate_series(1, n) i)
        || jsonb_build_array(bench.job_step(n + 1, job_type,
               (SELECT jsonb_agg('s' || i ORDER BY i) FROM generate_series(1, n) i))))
$$;

-- layers x width steps; step (l, w) of layer l > 0 depends on steps (l-1, w)
-- and (l-1, (w+1) % width) of the previous layer.
CREATE FUNCTION bench.def_lattice(layers integer, width integer, job_type text)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'lattice-' || layers || 'x' || width, 'steps',
        (SELECT jsonb_agg(
                    CASE WHEN l = 0
                         THEN jsonb_build_object('key', 'l0_' || w, 'job_type', job_type)
                         ELSE jsonb_build_object('key', 'l' || l || '_' || w,
                                  'job_type', job_type,
                                  'depends_on', jsonb_build_array(
                                      'l' || (l - 1) || '_' || w,
                                      'l' || (l - 1) || '_' || ((w + 1) % width)))
                    END ORDER BY l, w)
           FROM generate_series(0, layers - 1) l, generate_series(0, width - 1) w))
$$;

-- e0 -> e1 -> ... -> e(n-1), all external steps.
CREATE FUNCTION bench.def_external_chain(n integer)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'external-' || n, 'steps',
        (SELECT jsonb_agg(CASE WHEN i = 0
                               THEN jsonb_build_object('key', 'e0', 'kind', 'external')
                               ELSE jsonb_build_object('key', 'e' || i, 'kind', 'external',
                                        'depends_on', jsonb_build_array('e' || (i - 1)))
                          END ORDER BY i)
           FROM generate_series(0, n - 1) i))
$$;

-- n sleep steps s0 .. s(n-1) of `seconds` each, none depending on another
-- (1.6: the timers group makes them due by moving wake_at).
CREATE FUNCTION bench.def_sleep(n integer, seconds integer)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'sleep-' || n, 'steps',
        (SELECT jsonb_agg(jsonb_build_object('key', 's' || i, 'kind', 'sleep',
                                             'seconds', seconds) ORDER BY i)
           FROM generate_series(0, n - 1) i))
$$;

-- n event steps e0 .. e(n-1), none depending on another, each waiting for
-- the event of its own name (the step key), without a timeout (1.6).
CREATE FUNCTION bench.def_events(n integer)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('name', 'events-' || n, 'steps',
        (SELECT jsonb_agg(jsonb_build_object('key', 'e' || i, 'kind', 'event')
                          ORDER BY i)
           FROM generate_series(0, n - 1) i))
$$;

CREATE FUNCTION bench.put_def(name text, def jsonb)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO bench.defs (name, steps, def)
    VALUES (name, jsonb_array_length(def -> 'steps'), def)
    ON CONFLICT (name) DO UPDATE SET steps = EXCLUDED.steps, def = EXCLUDED.def
$$;

-- Tables of the same shape as the engine's (columns, defaults, indexes,
-- constraints; no triggers) for the plain INSERT ... SELECT baseline of
-- start_run.
CREATE TABLE bench.p_runs (LIKE workflow.workflow_runs INCLUDING ALL);
CREATE TABLE bench.p_steps (LIKE workflow.workflow_steps INCLUDING ALL);
CREATE TABLE bench.p_deps (LIKE workflow.workflow_step_dependencies INCLUDING ALL);
CREATE TABLE bench.p_jobs (LIKE workflow.job_queue INCLUDING ALL);

-- A bare SQL queue, the yardstick for the queue workloads: one table with
-- the claim contract's columns, a partial claim index for due QUEUED jobs,
-- a partial index of RUNNING jobs, no triggers, no workflow.  Its workers
-- (bare_claim_complete.sql, bare_claim_batch.sql) claim in the same order
-- with FOR NO KEY UPDATE SKIP LOCKED, take a lease and a fresh token, and
-- complete under the token, each call in autocommit.
CREATE TABLE bench.bare_jobs (
    id              uuid PRIMARY KEY DEFAULT workflow.uuid_v7(),
    job_type        text NOT NULL,
    payload         jsonb NOT NULL DEFAULT '{}',
    priority        integer NOT NULL DEFAULT 0,
    run_at          timestamptz NOT NULL DEFAULT now(),
    status          text NOT NULL DEFAULT 'QUEUED',
    attempt         integer NOT NULL DEFAULT 0,
    max_attempts    integer NOT NULL DEFAULT 3,
    timeout_seconds integer NOT NULL DEFAULT 300,
    worker_id       text,
    lease_token     uuid,
    leased_until    timestamptz,
    output          jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
) WITH (fillfactor = 80);
CREATE INDEX bare_jobs_claim_idx ON bench.bare_jobs (job_type, priority DESC, run_at, id)
    WHERE status = 'QUEUED';
CREATE INDEX bare_jobs_running_idx ON bench.bare_jobs (id) WHERE status = 'RUNNING';
