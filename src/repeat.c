/*-------------------------------------------------------------------------
 *
 * repeat.c
 *	  Settlement of repeat steps: the end of a loop, or its next generation.
 *
 * The cascade settles each repeat step whose one prerequisite just
 * succeeded (cascade.c, SettleRepeats), locked and still BLOCKED, its
 * dependency counters already updated.  WfReadRepeat evaluates the loop's
 * while predicate over the prerequisite's output, at the repeat's
 * generation g:
 *
 *	- false: the repeat SUCCEEDS with that output (under emit_outcome,
 *	  {"outcome": "condition_cleared", "output": ...});
 *	- true and g + 1 below the bound (max_iterations, or the run's
 *	  cycle_cap if lower): the body's steps go back to BLOCKED at
 *	  generation g + 1 (their jobs stay as they ended), the back_to steps
 *	  get the loop's "repeat" key in their payload, and the steps that
 *	  wait for nothing are released as the cascade releases any step;
 *	  the repeat waits again for its prerequisite;
 *	- true at the bound: exhausted; under fail the repeat FAILS with
 *	  workflow.repeat_iteration_limit_exhausted and the last output, under
 *	  emit_outcome it SUCCEEDS with {"outcome": "iteration_limit_reached",
 *	  "output": ...};
 *	- anything but a boolean: the repeat FAILS with
 *	  workflow.repeat_predicate_not_boolean.
 *
 * Every settlement writes control_node_settled on the repeat, whatever
 * workflow.history says: it is the loop's evidence.  This file writes the
 * rows and their counters; the cascade, which calls it, locks the body
 * (WfRepeatBody lists it), reports a finished repeat as any finished step
 * and releases the body's ready steps, so that calls go one way.
 *
 * Locks: none of its own; the caller holds the repeat's row and the
 * body's.  Work is proportional to the body, never to the run.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/resowner.h"

#include "workflow.h"

static void EvaluatePredicate(WfRepeat *rep, const char *path);
static void Decide(WfRepeat *rep);
static const char *VerdictName(WfRepeatVerdict verdict);
static Datum SettledDetail(const WfRepeat *rep);
static int	ResetBodyRows(const pg_uuid_t *run_id, Datum body, int32 generation,
						  Datum back_to, Datum output, bool output_null,
						  const char *key, bool restart, Datum pending_too,
						  pg_uuid_t *ids, bool *ready);
static int	ResetBody(const WfRepeat *rep, pg_uuid_t *ready);
static void ReopenRepeat(const WfLoopRestart *loop);
static WfCounter BodyCounter(const char *status);
static void RearmRepeat(const WfRepeat *rep);

/*
 * WfReadRepeat reads the repeat's loop, its generation, its run's
 * cycle_cap, and its prerequisite's output with the predicate's value over
 * it (a missing output read as JSON null, as output_checksum reads it; NULL
 * when the path finds nothing or fails: not a boolean), and decides what
 * the settlement does.
 */
void
WfReadRepeat(const pg_uuid_t *id, WfRepeat *rep)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT s.workflow_run_id, s.counter_shard::pg_catalog.int4,"
		" s.step_key, s.generation,"
		" (s.payload" OP("->>") "'max_iterations')::pg_catalog.int4,"
		" COALESCE(r.cycle_cap, 0),"
		" (s.payload" OP("->>") "'exhaustion_policy')" OP("=") "'emit_outcome',"
		" p.output, s.payload" OP("->>") "'while',"
		" ARRAY(SELECT pg_catalog.jsonb_array_elements_text(s.payload" OP("->") "'body')),"
		" ARRAY(SELECT pg_catalog.jsonb_array_elements_text(s.payload" OP("->") "'back_to'))"
		" FROM workflow.workflow_steps s"
		" JOIN workflow.workflow_step_dependencies e"
		"  ON e.workflow_run_id" OP("=") "s.workflow_run_id"
		"  AND e.dependent_step_id" OP("=") "s.id"
		" JOIN workflow.workflow_steps p ON p.id" OP("=") "e.prerequisite_step_id"
		" JOIN workflow.workflow_runs r ON r.id" OP("=") "s.workflow_run_id"
		" WHERE s.id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	bool		isnull;
	char	   *path;

	values[0] = UUIDPGetDatum(id);
	if (WfExecute(&plan, sql, 1, types, values, NULL, false, 0) != SPI_OK_SELECT ||
		SPI_processed != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": repeat step %s has not one prerequisite",
						WfUuidString(id))));
	rep->id = *id;
	WfResultUuid(0, 1, &rep->run_id);
	rep->shard = (int16) WfResultInt32(0, 2);
	rep->key = WfResultText(0, 3);
	rep->generation = WfResultInt32(0, 4);
	rep->max_iterations = WfResultInt32(0, 5);
	rep->cycle_cap = WfResultInt32(0, 6);
	rep->emit_outcome = WfResultBool(0, 7);
	rep->output = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								8, &rep->output_null);
	if (!rep->output_null)
		rep->output = SPI_datumTransfer(rep->output, false, -1);
	path = WfResultText(0, 9);
	rep->body = SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 10,
												&isnull), false, -1);
	rep->back_to = SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0],
												   SPI_tuptable->tupdesc, 11,
												   &isnull), false, -1);
	rep->bound = rep->max_iterations;
	if (rep->cycle_cap > 0 && rep->cycle_cap < rep->bound)
		rep->bound = rep->cycle_cap;
	EvaluatePredicate(rep, path);
	Decide(rep);
}

/*
 * EvaluatePredicate reads the value of the loop's while path over the
 * prerequisite's output (a missing output read as JSON null, as
 * output_checksum reads it): its jsonb type, and whether it is true.  A
 * path that finds nothing gives no value; one whose evaluation fails (an
 * undefined variable, a bad regular expression: a data exception or an
 * undefined object) too, and its error is kept: it is caught in a
 * subtransaction, so that the repeat fails rather than the completion that
 * settles it.  Any other error (a cancel, a timeout, memory) is raised
 * again: it says nothing of the predicate.
 */
static void
EvaluatePredicate(WfRepeat *rep, const char *path)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT pg_catalog.jsonb_typeof(v.value),"
		" COALESCE(v.value" OP("=") "'true'::pg_catalog.jsonb, false)"
		" FROM (SELECT pg_catalog.jsonb_path_query_first("
		"  COALESCE($1, 'null'::pg_catalog.jsonb),"
		"  CAST($2 AS pg_catalog.jsonpath), '{}'::pg_catalog.jsonb, true) AS value) v";
	static const Oid types[2] = {JSONBOID, TEXTOID};
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Datum		values[2];
	char		nulls[2] = "  ";

	values[0] = rep->output;
	nulls[0] = rep->output_null ? 'n' : ' ';
	values[1] = CStringGetTextDatum(path);
	rep->predicate_type = NULL;
	rep->predicate_true = false;
	rep->predicate_error = NULL;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		WfExecute(&plan, sql, 2, types, values, nulls, false, 0);
		rep->predicate_type = SPI_getvalue(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1);
		rep->predicate_true = WfResultBool(0, 2);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		/* the path's own failures; a cancel, a timeout or a lack of memory is not */
		if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_DATA_EXCEPTION &&
			ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION)
			ReThrowError(edata);
		rep->predicate_error = edata->message;
	}
	PG_END_TRY();
}

/* Decide settles the verdict of the predicate's value at the generation. */
static void
Decide(WfRepeat *rep)
{
	if (rep->predicate_type == NULL ||
		strcmp(rep->predicate_type, "boolean") != 0)
		rep->verdict = WF_REPEAT_NOT_BOOLEAN;
	else if (!rep->predicate_true)
		rep->verdict = WF_REPEAT_CLEARED;
	else if (rep->generation + 1 < rep->bound)
		rep->verdict = WF_REPEAT_ITERATE;
	else
		rep->verdict = WF_REPEAT_EXHAUSTED;
}

/* VerdictName is the verdict as control_node_settled's detail names it. */
static const char *
VerdictName(WfRepeatVerdict verdict)
{
	switch (verdict)
	{
		case WF_REPEAT_CLEARED:
			return "condition_cleared";
		case WF_REPEAT_ITERATE:
			return "iterate";
		case WF_REPEAT_EXHAUSTED:
			return "iteration_limit_reached";
		case WF_REPEAT_NOT_BOOLEAN:
			return "predicate_not_boolean";
	}
	return NULL;				/* keep compiler quiet */
}

/* SettledDetail makes control_node_settled's detail, as jsonb. */
static Datum
SettledDetail(const WfRepeat *rep)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf,
					 "{\"decision\": \"%s\", \"generation\": %d,"
					 " \"iterations_completed\": %d, \"max_iterations\": %d,"
					 " \"cycle_cap\": ",
					 VerdictName(rep->verdict), rep->generation,
					 rep->generation + 1, rep->max_iterations);
	if (rep->cycle_cap > 0)
		appendStringInfo(&buf, "%d", rep->cycle_cap);
	else
		appendStringInfoString(&buf, "null");
	appendStringInfo(&buf,
					 ", \"effective_iteration_bound\": %d,"
					 " \"iteration_bound_exhausted\": %s}",
					 rep->bound,
					 rep->verdict == WF_REPEAT_EXHAUSTED ? "true" : "false");
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
}

/*
 * WfEndRepeat ends the repeat, SUCCEEDED or FAILED as its verdict says,
 * writes control_node_settled (with the checksum of the last output) and,
 * where the history records steps, step_released and step_succeeded or
 * step_failed; returns the status it ended in, for the caller to report.
 */
const char *
WfEndRepeat(const WfRepeat *rep)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" status = $2::workflow.step_status,"
		" output = CASE WHEN $6 THEN pg_catalog.jsonb_build_object('outcome', $7,"
		"  'output', $3) ELSE $3 END,"
		" released_at = pg_catalog.statement_timestamp(),"
		" finished_at = pg_catalog.statement_timestamp(),"
		" status_reason = $4, last_error_code = $4, last_error_message = $5,"
		" history_gap = s.history_gap OR NOT $8,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.id" OP("=") "$1 AND s.status" OP("=") "'BLOCKED'::workflow.step_status"
		" RETURNING s.workflow_run_id, s.step_key),"
		" e AS (" WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, v.event_type, v.detail"
		" FROM u, LATERAL (VALUES ('step_released', '{}'::pg_catalog.jsonb),"
		"  ('control_node_settled', $9::pg_catalog.jsonb"
		"  " OP("||") "pg_catalog.jsonb_build_object('output_checksum',"
		"  workflow.output_checksum($10))),"
		"  (CASE WHEN $2" OP("=") "'SUCCEEDED' THEN 'step_succeeded' ELSE 'step_failed' END,"
		"  CASE WHEN $4 IS NULL THEN '{}'::pg_catalog.jsonb"
		"  ELSE pg_catalog.jsonb_build_object('error_code', $4, 'error_message', $5) END))"
		"  AS v(event_type, detail)"
		" WHERE $8 OR v.event_type" OP("=") "'control_node_settled')"
		" SELECT 1 FROM u";
	static const Oid types[10] = {UUIDOID, TEXTOID, JSONBOID, TEXTOID, TEXTOID,
	BOOLOID, TEXTOID, BOOLOID, JSONBOID, JSONBOID};
	Datum		values[10];
	char		nulls[10];
	bool		succeeded;
	const char *code = NULL;
	char	   *message = NULL;

	succeeded = rep->verdict == WF_REPEAT_CLEARED ||
		(rep->verdict == WF_REPEAT_EXHAUSTED && rep->emit_outcome);
	if (rep->verdict == WF_REPEAT_EXHAUSTED && !succeeded)
	{
		code = WF_REPEAT_ITERATION_LIMIT_EXHAUSTED;
		message = psprintf("the loop reached its bound of %d iterations with its predicate still true",
						   rep->bound);
	}
	else if (rep->verdict == WF_REPEAT_NOT_BOOLEAN)
	{
		code = WF_REPEAT_PREDICATE_NOT_BOOLEAN;
		message = rep->predicate_error ?
			psprintf("the while predicate failed: %s", rep->predicate_error) :
			psprintf("the while predicate gave %s, not a boolean",
					 rep->predicate_type ? rep->predicate_type : "no value");
	}

	memset(nulls, ' ', sizeof(nulls));
	values[0] = UUIDPGetDatum(&rep->id);
	values[1] = CStringGetTextDatum(succeeded ? "SUCCEEDED" : "FAILED");
	values[2] = rep->output;
	nulls[2] = rep->output_null || rep->verdict == WF_REPEAT_NOT_BOOLEAN ? 'n' : ' ';
	values[3] = code ? CStringGetTextDatum(code) : (Datum) 0;
	nulls[3] = code ? ' ' : 'n';
	values[4] = message ? CStringGetTextDatum(message) : (Datum) 0;
	nulls[4] = message ? ' ' : 'n';
	values[5] = BoolGetDatum(rep->emit_outcome && succeeded);
	values[6] = CStringGetTextDatum(VerdictName(rep->verdict));
	values[7] = BoolGetDatum(WfHistoryRecordsSteps());
	values[8] = SettledDetail(rep);
	values[9] = rep->output;
	nulls[9] = rep->output_null ? 'n' : ' ';
	if (WfExecuteAsEngine(&plan, sql, 10, types, values, nulls) != SPI_OK_SELECT ||
		SPI_processed != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": repeat step %s changed while locked",
						WfUuidString(&rep->id))));
	return succeeded ? "SUCCEEDED" : "FAILED";
}

/*
 * WfRepeatBody lists the body's steps (by key, through the run's unique
 * key index) in ascending id, for the caller to lock; returns how many.
 */
int
WfRepeatBody(const WfRepeat *rep, pg_uuid_t **ids)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT s.id FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1 AND s.step_key" OP("=") "ANY ($2)"
		" ORDER BY s.id";
	static const Oid types[2] = {UUIDOID, TEXTARRAYOID};
	Datum		values[2];
	int			n;

	values[0] = UUIDPGetDatum(&rep->run_id);
	values[1] = rep->body;
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
	n = (int) SPI_processed;
	*ids = palloc(sizeof(pg_uuid_t) * Max(n, 1));
	for (int i = 0; i < n; i++)
		WfResultUuid(i, 1, &(*ids)[i]);
	return n;
}

/*
 * ResetBodyRows puts the body's steps (by key) back to BLOCKED at
 * generation: a prerequisite in the body counts as pending, an ON_SUCCESS
 * one outside it that did not succeed as unsatisfied; what their last
 * generation left is cleared.  Going round (restart false), the back_to
 * steps' payloads get the loop's "repeat" key with output as previous;
 * running a generation again (restart), a back_to payload that has the key
 * only gets the new generation in it.  A prerequisite among pending_too
 * (uuid[], or 0: none), steps outside the body that the caller resets too,
 * counts as pending.  A step's completion_seq goes with the rest: a
 * compensation undoes a looped step only as the generation it is in left
 * it (DECISIONS.md).  Moves their counters,
 * writes step_reset, and returns the steps in ids, with ready[i] for those
 * that wait for no prerequisite (the release cancels those that cannot
 * run); returns how many.
 */
static int
ResetBodyRows(const pg_uuid_t *run_id, Datum body, int32 generation,
			  Datum back_to, Datum output, bool output_null, const char *key,
			  bool restart, Datum pending_too, pg_uuid_t *ids, bool *ready)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH b AS (SELECT s.id, s.status AS was, s.counter_shard"
		"  FROM workflow.workflow_steps s"
		"  WHERE s.workflow_run_id" OP("=") "$1 AND s.step_key" OP("=") "ANY ($2)),"
		" c AS (SELECT b.id,"
		"  (pg_catalog.count(p.id) FILTER (WHERE p.step_key" OP("=") "ANY ($2)"
		"   OR p.id" OP("=") "ANY ($9)))::pg_catalog.int4 AS pending,"
		"  (pg_catalog.count(p.id) FILTER (WHERE e.release_mode" OP("=") "'ON_SUCCESS'"
		"   AND p.status" OP("<>") "'SUCCEEDED'::workflow.step_status"
		"   AND NOT p.step_key" OP("=") "ANY ($2) AND NOT p.id" OP("=") "ANY ($9)))::pg_catalog.int4"
		"   AS unsatisfied"
		"  FROM b LEFT JOIN workflow.workflow_step_dependencies e"
		"   ON e.workflow_run_id" OP("=") "$1 AND e.dependent_step_id" OP("=") "b.id"
		"  LEFT JOIN workflow.workflow_steps p ON p.id" OP("=") "e.prerequisite_step_id"
		"  GROUP BY b.id),"
		" u AS (UPDATE workflow.workflow_steps s SET status = 'BLOCKED',"
		"  generation = $3,"
		"  dependency_count_pending = c.pending,"
		"  dependency_count_unsatisfied = c.unsatisfied,"
		"  payload = CASE WHEN $8 THEN CASE WHEN s.step_key" OP("=") "ANY ($4)"
		"    AND s.payload" OP("?") "'repeat'"
		"    THEN pg_catalog.jsonb_set(s.payload, '{repeat,generation}', pg_catalog.to_jsonb($3))"
		"    ELSE s.payload END"
		"   WHEN s.step_key" OP("=") "ANY ($4)"
		"   THEN s.payload" OP("||") "pg_catalog.jsonb_build_object('repeat',"
		"   pg_catalog.jsonb_build_object('step', $7, 'generation', $3,"
		"   'previous', $5::pg_catalog.jsonb))"
		"   ELSE s.payload END,"
		"  job_id = NULL, released_at = NULL, started_at = NULL,"
		"  finished_at = NULL, wake_at = NULL, output = NULL,"
		"  status_reason = NULL, last_error_code = NULL,"
		"  last_error_message = NULL, completed_externally = false,"
		"  completion_seq = NULL, held = false,"
		"  history_gap = s.history_gap OR NOT $6,"
		"  updated_at = pg_catalog.statement_timestamp()"
		"  FROM b, c WHERE s.id" OP("=") "b.id AND c.id" OP("=") "b.id"
		"  RETURNING s.id, s.workflow_run_id, s.step_key, s.generation,"
		"  b.was::pg_catalog.text AS was, b.counter_shard::pg_catalog.int4 AS shard,"
		"  c.pending" OP("=") "0 AS ready),"
		" e AS (" WF_INSERT_EVENTS
		"  SELECT u.workflow_run_id, u.step_key, 'step_reset',"
		"  pg_catalog.jsonb_build_object('generation', u.generation, 'repeat', $7::pg_catalog.text)"
		"  FROM u WHERE $6)"
		" SELECT u.id, u.was, u.shard, u.ready FROM u ORDER BY u.id";
	static const Oid types[9] = {UUIDOID, TEXTARRAYOID, INT4OID, TEXTARRAYOID,
	JSONBOID, BOOLOID, TEXTOID, BOOLOID, UUIDARRAYOID};
	Datum		values[9];
	char		nulls[9];
	int			n;

	memset(nulls, ' ', sizeof(nulls));
	values[0] = UUIDPGetDatum(run_id);
	values[1] = body;
	values[2] = Int32GetDatum(generation);
	values[3] = back_to;
	nulls[3] = back_to == (Datum) 0 ? 'n' : ' ';
	values[4] = output;
	nulls[4] = output_null ? 'n' : ' ';
	values[5] = BoolGetDatum(WfHistoryRecordsSteps());
	values[6] = CStringGetTextDatum(key);
	values[7] = BoolGetDatum(restart);
	values[8] = pending_too == (Datum) 0 ? WfArray(NULL, NULL, 0, UUIDOID) : pending_too;
	WfExecuteAsEngine(&plan, sql, 9, types, values, nulls);
	n = (int) SPI_processed;
	for (int i = 0; i < n; i++)
	{
		int16		shard = (int16) WfResultInt32(i, 3);

		WfResultUuid(i, 1, &ids[i]);
		WfRunDeltaAdd(run_id, shard, BodyCounter(WfResultText(i, 2)), -1);
		WfRunDeltaAdd(run_id, shard, WF_COUNT_BLOCKED, 1);
		ready[i] = WfResultBool(i, 4);
	}
	return n;
}

/*
 * ResetBody resets the body for the next generation, the output that sent
 * the loop round as previous; returns in ready the steps that wait for no
 * prerequisite, and how many.
 */
static int
ResetBody(const WfRepeat *rep, pg_uuid_t *ready)
{
	int			max = (int) ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(rep->body)),
										   ARR_DIMS(DatumGetArrayTypeP(rep->body)));
	pg_uuid_t  *ids = palloc(sizeof(pg_uuid_t) * Max(max, 1));
	bool	   *is_ready = palloc(sizeof(bool) * Max(max, 1));
	int			n;
	int			nready = 0;

	n = ResetBodyRows(&rep->run_id, rep->body, rep->generation + 1,
					  rep->back_to, rep->output, rep->output_null, rep->key,
					  false, (Datum) 0, ids, is_ready);
	for (int i = 0; i < n; i++)
		if (is_ready[i])
			ready[nready++] = ids[i];
	pfree(ids);
	pfree(is_ready);
	return nready;
}

/* BodyCounter is the counter of a body step's status: a terminal one. */
static WfCounter
BodyCounter(const char *status)
{
	if (strcmp(status, "SUCCEEDED") == 0)
		return WF_COUNT_SUCCEEDED;
	if (strcmp(status, "FAILED") == 0)
		return WF_COUNT_FAILED;
	if (strcmp(status, "CANCELED") == 0)
		return WF_COUNT_CANCELED;
	ereport(ERROR,
			(errcode(WF_SQLSTATE_INTERNAL),
			 errmsg(WF_INTERNAL_STATE ": a loop's body step is %s when its repeat settles",
					status)));
	return WF_COUNT_BLOCKED;	/* keep compiler quiet */
}

/*
 * RearmRepeat makes the repeat wait for its prerequisite again, at the
 * next generation, and writes control_node_settled.
 */
static void
RearmRepeat(const WfRepeat *rep)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH u AS (UPDATE workflow.workflow_steps s SET"
		" generation = $2,"
		" dependency_count_pending = s.dependency_count_total,"
		" dependency_count_unsatisfied = 0,"
		" updated_at = pg_catalog.statement_timestamp()"
		" WHERE s.id" OP("=") "$1 AND s.status" OP("=") "'BLOCKED'::workflow.step_status"
		" RETURNING s.workflow_run_id, s.step_key)"
		" " WF_INSERT_EVENTS
		" SELECT u.workflow_run_id, u.step_key, 'control_node_settled',"
		" $3::pg_catalog.jsonb" OP("||") "pg_catalog.jsonb_build_object('output_checksum',"
		" workflow.output_checksum($4))"
		" FROM u";
	static const Oid types[4] = {UUIDOID, INT4OID, JSONBOID, JSONBOID};
	Datum		values[4];
	char		nulls[4] = "    ";

	values[0] = UUIDPGetDatum(&rep->id);
	values[1] = Int32GetDatum(rep->generation + 1);
	values[2] = SettledDetail(rep);
	values[3] = rep->output;
	nulls[3] = rep->output_null ? 'n' : ' ';
	if (WfExecuteAsEngine(&plan, sql, 4, types, values, nulls) != SPI_OK_INSERT ||
		SPI_processed != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": repeat step %s changed while locked",
						WfUuidString(&rep->id))));
}

/*
 * WfStartGeneration starts the loop's next generation, the body locked by
 * the caller: the body reset, the repeat rearmed.  Returns in ready (room
 * for the whole body) the body steps that wait for nothing, for the caller
 * to release; returns how many.
 */
int
WfStartGeneration(const WfRepeat *rep, pg_uuid_t *ready)
{
	int			nready = ResetBody(rep, ready);

	RearmRepeat(rep);
	return nready;
}

/*
 * WfLoopsToRestart finds the loops a retry runs a generation of again: the
 * repeat steps of the run whose body holds one of the steps to reset
 * (reset_ids, uuid[]) that had a job, i.e. failed or was canceled in the
 * generation under way.  Reads the run's repeat steps.  Returns how many,
 * in ascending repeat id.
 */
int
WfLoopsToRestart(const pg_uuid_t *run_id, Datum reset_ids, WfLoopRestart **loops)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT r.id, r.step_key, r.generation,"
		" LEAST((r.payload" OP("->>") "'max_iterations')::pg_catalog.int4,"
		"  COALESCE(w.cycle_cap, (r.payload" OP("->>") "'max_iterations')::pg_catalog.int4)),"
		" ARRAY(SELECT pg_catalog.jsonb_array_elements_text(r.payload" OP("->") "'body')),"
		" ARRAY(SELECT pg_catalog.jsonb_array_elements_text(r.payload" OP("->") "'back_to')),"
		" r.id" OP("=") "ANY ($2)"
		" FROM workflow.workflow_steps r"
		" JOIN workflow.workflow_runs w ON w.id" OP("=") "r.workflow_run_id"
		" WHERE r.workflow_run_id" OP("=") "$1"
		" AND r.execution_kind::pg_catalog.text" OP("=") "'REPEAT'"
		" AND EXISTS (SELECT 1 FROM workflow.workflow_steps b"
		"  WHERE b.id" OP("=") "ANY ($2) AND b.workflow_run_id" OP("=") "$1"
		"  AND b.job_id IS NOT NULL AND (r.payload" OP("->") "'body')" OP("?") "b.step_key)"
		" ORDER BY r.id";
	static const Oid types[2] = {UUIDOID, UUIDARRAYOID};
	Datum		values[2];
	bool		isnull;
	int			n;

	values[0] = UUIDPGetDatum(run_id);
	values[1] = reset_ids;
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
	n = (int) SPI_processed;
	*loops = palloc0(sizeof(WfLoopRestart) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		WfLoopRestart *l = &(*loops)[i];

		l->run_id = *run_id;
		WfResultUuid(i, 1, &l->repeat_id);
		l->key = WfResultText(i, 2);
		l->generation = WfResultInt32(i, 3);
		l->bound = WfResultInt32(i, 4);
		l->body = SPI_datumTransfer(WfResultDatum(i, 5, &isnull), false, -1);
		l->back_to = SPI_datumTransfer(WfResultDatum(i, 6, &isnull), false, -1);
		l->repeat_reset = WfResultBool(i, 7);
	}
	return n;
}

/*
 * ReopenRepeat makes a loop's repeat step, which the failure in its body
 * canceled, wait again for its prerequisite at the loop's next generation.
 */
static void
ReopenRepeat(const WfLoopRestart *loop)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH o AS (SELECT s.status AS was, s.counter_shard FROM workflow.workflow_steps s"
		"  WHERE s.id" OP("=") "$1),"
		" u AS (UPDATE workflow.workflow_steps s SET status = 'BLOCKED',"
		"  generation = $2,"
		"  dependency_count_pending = s.dependency_count_total,"
		"  dependency_count_unsatisfied = 0,"
		"  released_at = NULL, finished_at = NULL, output = NULL,"
		"  status_reason = NULL, last_error_code = NULL, last_error_message = NULL,"
		"  history_gap = s.history_gap OR NOT $3,"
		"  updated_at = pg_catalog.statement_timestamp()"
		"  FROM o WHERE s.id" OP("=") "$1"
		"  RETURNING s.workflow_run_id, s.step_key, o.was::pg_catalog.text AS was,"
		"  o.counter_shard::pg_catalog.int4 AS shard),"
		" e AS (" WF_INSERT_EVENTS
		"  SELECT u.workflow_run_id, u.step_key, 'step_reset',"
		"  pg_catalog.jsonb_build_object('generation', $2)"
		"  FROM u WHERE $3)"
		" SELECT u.was, u.shard FROM u";
	static const Oid types[3] = {UUIDOID, INT4OID, BOOLOID};
	Datum		values[3];

	values[0] = UUIDPGetDatum(&loop->repeat_id);
	values[1] = Int32GetDatum(loop->generation + 1);
	values[2] = BoolGetDatum(WfHistoryRecordsSteps());
	if (WfExecuteAsEngine(&plan, sql, 3, types, values, NULL) != SPI_OK_SELECT ||
		SPI_processed != 1)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": repeat step %s vanished while locked",
						WfUuidString(&loop->repeat_id))));
	WfRunDeltaAdd(&loop->run_id, (int16) WfResultInt32(0, 2),
				  BodyCounter(WfResultText(0, 1)), -1);
	WfRunDeltaAdd(&loop->run_id, (int16) WfResultInt32(0, 2), WF_COUNT_BLOCKED, 1);
}

/*
 * WfRestartLoop runs a loop's generation again for a retry, at the next
 * generation: every body step, the ones that succeeded in it too, and the
 * repeat go back to BLOCKED (the caller holds the run's release lock
 * exclusive; the rows are locked here NOWAIT, in ascending id).  The steps
 * pending_too (uuid[]), which the retry resets too, count as pending
 * prerequisites of the body.  Returns in ids the steps it reset (room for the body and the repeat), with ready[i]
 * for those that wait for no prerequisite; returns how many.
 */
int
WfRestartLoop(const WfLoopRestart *loop, Datum pending_too, pg_uuid_t *ids,
			  bool *ready)
{
	static SPIPlanPtr lock_plan = NULL;
	static const char *lock_sql =
		"SELECT s.id FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" AND (s.step_key" OP("=") "ANY ($2) OR s.id" OP("=") "$3)"
		" ORDER BY s.id FOR NO KEY UPDATE NOWAIT";
	static const Oid lock_types[3] = {UUIDOID, TEXTARRAYOID, UUIDOID};
	Datum		values[3];
	int			n;

	values[0] = UUIDPGetDatum(&loop->run_id);
	values[1] = loop->body;
	values[2] = UUIDPGetDatum(&loop->repeat_id);
	WfExecuteNowait(&lock_plan, lock_sql, 3, lock_types, values, NULL);
	n = ResetBodyRows(&loop->run_id, loop->body, loop->generation + 1,
					  loop->back_to, (Datum) 0, true, loop->key, true,
					  pending_too, ids, ready);
	ReopenRepeat(loop);
	ids[n] = loop->repeat_id;
	ready[n] = false;
	return n + 1;
}
