-- bench/start_run.sql: start one run of a stored definition.
-- Variables: def (a name in bench.defs).
SELECT workflow.start_run(def) FROM bench.defs WHERE name = ':def';
