-- bench/run_graph.sql: draw one run; the call returns the text's length,
-- so that the time is the call's, not the transfer of the picture.
-- Variables: run (a run id), format (dot or mermaid).
SELECT length(workflow.run_graph(':run', ':format'));
