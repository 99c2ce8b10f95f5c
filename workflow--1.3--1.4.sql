-- workflow 1.3 -> 1.4: event history, operator views, DAG pictures
\echo Use "ALTER EXTENSION workflow UPDATE TO '1.4'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- History: workflow_events, run_history

-- ---------------------------------------------------------------------------
-- Operator views: run_overview, queue_stats, step_timeline

-- ---------------------------------------------------------------------------
-- Pictures: run_graph
