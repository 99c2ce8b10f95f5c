/*-------------------------------------------------------------------------
 *
 * continuation.c
 *	  continuation_source and continue_run: a successor for an exhausted loop.
 *
 * A run is a continuation source when it ended COMPLETED_WITH_ERRORS only
 * because one repeat step was exhausted (FAILED with
 * workflow.repeat_iteration_limit_exhausted): every other step SUCCEEDED,
 * is in that loop's body, or was canceled for an unsatisfied dependency
 * below the repeat.  Its last control_node_settled must say so, with the
 * checksum of the output the repeat holds.
 *
 * continue_run starts the one successor of such a run: the source's
 * definition with the repeat's max_iterations and the run's cycle_cap set
 * to additional_iterations, the source's deadline (as a time) and
 * retry_cap, the given node_execution_cap (by default the source's) and a
 * concurrency_cap no higher than it.  The source's SUCCEEDED steps outside
 * the body, the repeat and the repeat's descendants are copied as
 * SUCCEEDED with their outputs and no job (run.c); the body starts again
 * at generation 0, its back_to steps' payloads carrying the loop's
 * "repeat" key with the exhausted output as "previous".  The lineage is a
 * row of workflow_continuations and the successor's run_continued event.
 * The source is not changed.  The same request again returns the same
 * successor; another one, or an expected checksum that is not the
 * output's, is workflow.continuation_conflict.
 *
 * Locks: continue_run takes the source's release lock exclusive
 * (status.c), so two continuations of one source go one after the other,
 * then keys-shares the source's run row, so that it waits for a purge that
 * deleted the source and a later purge skips it; then it only inserts.  continuation_source takes
 * no lock.  Both read the source's steps once: these are a client's calls
 * on a finished run, not an event path.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"

#include "workflow.h"

PG_FUNCTION_INFO_V1(workflow_continuation_source);
PG_FUNCTION_INFO_V1(workflow_continue_run);

/* an exhausted loop, as continuation_source reports it */
typedef struct Exhausted
{
	pg_uuid_t	run_id;
	pg_uuid_t	repeat_id;
	char	   *repeat_key;
	int32		generation;
	int32		iterations;		/* generation + 1 */
	int32		prior;			/* iterations of the runs before this one */
	pg_uuid_t	scope;			/* the first run of the chain */
	Datum		output;
	bool		output_null;
	char	   *checksum;
	Datum		back_to;		/* text[] */
} Exhausted;

/* what a successor is built from */
typedef struct SourceRun
{
	Jsonb	   *definition;
	Datum		input;
	bool		input_null;
	pg_uuid_t	org;
	bool		org_null;
	Datum		copied_keys;	/* text[] */
	Datum		copied_outputs; /* jsonb[] */
} SourceRun;

static Datum ContinuationSource(PG_FUNCTION_ARGS);
static Datum ContinueRun(PG_FUNCTION_ARGS);
static void Ineligible(const pg_uuid_t *run_id, const char *why);
static void ReadExhausted(const pg_uuid_t *run_id, const char *status,
						  Exhausted *x);
static void CheckRest(const Exhausted *x);
static void CheckEvidence(const Exhausted *x);
static void ReadLineage(Exhausted *x);
static void FindExhausted(const pg_uuid_t *run_id, const char *status,
						  Exhausted *x);
static Datum ContinuationRequest(FunctionCallInfo fcinfo);
static bool FindSuccessor(const pg_uuid_t *source, Datum request,
						  pg_uuid_t *successor);
static void ReadSourceRun(const Exhausted *x, SourceRun *src);
static Jsonb *SuccessorDefinition(const Exhausted *x, const SourceRun *src,
								  int32 additional, bool cap_given,
								  int32 cap);
static void PrepareSuccessor(WfDefinition *def, const Exhausted *x,
							 const SourceRun *src, bool **copied,
							 Datum **outputs, bool **output_nulls);
static void RecordLineage(const pg_uuid_t *successor, const Exhausted *x,
						  int32 additional, Datum request);
static void HoldSourceRow(const pg_uuid_t *source);

/* Ineligible raises workflow.continuation_ineligible for a run. */
static void
Ineligible(const pg_uuid_t *run_id, const char *why)
{
	ereport(ERROR,
			(errcode(WF_SQLSTATE_WRONG_STATE),
			 errmsg(WF_CONTINUATION_INELIGIBLE ": run %s cannot be continued",
					WfUuidString(run_id)),
			 errdetail("%s", why),
			 errhint("Only a run that ended COMPLETED_WITH_ERRORS because a repeat step reached its iteration bound can be continued.")));
}

/*
 * ReadExhausted finds the run's one exhausted repeat step, with its last
 * output and body; the run's status is given.
 */
static void
ReadExhausted(const pg_uuid_t *run_id, const char *status, Exhausted *x)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT s.id, s.step_key, s.generation, s.output,"
		" workflow.output_checksum(s.output),"
		" ARRAY(SELECT pg_catalog.jsonb_array_elements_text(s.payload" OP("->") "'back_to'))"
		" FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" AND s.execution_kind::pg_catalog.text" OP("=") "'REPEAT'"
		" AND s.status" OP("=") "'FAILED'::workflow.step_status"
		" AND s.last_error_code" OP("=") "'" WF_REPEAT_ITERATION_LIMIT_EXHAUSTED "'"
		" ORDER BY s.step_key";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];
	bool		isnull;

	if (strcmp(status, "COMPLETED_WITH_ERRORS") != 0)
		Ineligible(run_id, psprintf("The run is %s.", status));
	values[0] = UUIDPGetDatum(run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		Ineligible(run_id, SPI_processed == 0 ?
				   "No repeat step of the run was exhausted." :
				   "More than one repeat step of the run was exhausted.");
	x->run_id = *run_id;
	WfResultUuid(0, 1, &x->repeat_id);
	x->repeat_key = WfResultText(0, 2);
	x->generation = WfResultInt32(0, 3);
	x->iterations = x->generation + 1;
	x->output = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4,
							  &x->output_null);
	if (!x->output_null)
		x->output = SPI_datumTransfer(x->output, false, -1);
	x->checksum = WfResultText(0, 5);
	x->back_to = SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0],
												 SPI_tuptable->tupdesc, 6,
												 &isnull), false, -1);
}

/*
 * The parts of the loop of repeat step $2: the steps below it (below.id)
 * and its body (body.key).
 */
#define LOOP_PARTS_CTE \
	"WITH RECURSIVE below(id) AS (" \
	" SELECT e.dependent_step_id FROM workflow.workflow_step_dependencies e" \
	"  WHERE e.prerequisite_step_id" OP("=") "$2" \
	" UNION" \
	" SELECT e.dependent_step_id FROM below b" \
	"  JOIN workflow.workflow_step_dependencies e" \
	"   ON e.prerequisite_step_id" OP("=") "b.id)," \
	" body AS (SELECT pg_catalog.jsonb_array_elements_text(r.payload" OP("->") "'body') AS key" \
	"  FROM workflow.workflow_steps r WHERE r.id" OP("=") "$2)"

/*
 * The run's steps that are not finished work to copy and not part of the
 * loop that ended it: a step that is not SUCCEEDED, outside the repeat's
 * body, and not canceled for an unsatisfied dependency below the repeat.
 */
#define OTHER_UNFINISHED_SQL \
	LOOP_PARTS_CTE \
	" SELECT s.step_key, s.status::pg_catalog.text" \
	" FROM workflow.workflow_steps s" \
	" WHERE s.workflow_run_id" OP("=") "$1 AND s.id" OP("<>") "$2" \
	" AND s.status" OP("<>") "'SUCCEEDED'::workflow.step_status" \
	" AND s.step_key" OP("<>") "ALL (ARRAY(SELECT b.key FROM body b))" \
	" AND NOT (s.status" OP("=") "'CANCELED'::workflow.step_status" \
	"  AND s.status_reason" OP("=") "'" WF_REASON_DEPENDENCY_UNSATISFIED "'" \
	"  AND s.id" OP("=") "ANY (ARRAY(SELECT b.id FROM below b)))" \
	" ORDER BY s.step_key LIMIT 1"

/* CheckRest refuses a run with unfinished work besides its loop. */
static void
CheckRest(const Exhausted *x)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {UUIDOID, UUIDOID};
	Datum		values[2];

	values[0] = UUIDPGetDatum(&x->run_id);
	values[1] = UUIDPGetDatum(&x->repeat_id);
	WfExecute(&plan, OTHER_UNFINISHED_SQL, 2, types, values, NULL, false, 0);
	if (SPI_processed > 0)
		Ineligible(&x->run_id,
				   psprintf("Step \"%s\" is %s, and is neither in the body of the exhausted repeat step \"%s\" nor canceled below it.",
							WfResultText(0, 1), WfResultText(0, 2),
							x->repeat_key));
}

/*
 * CheckEvidence reads the repeat's last control_node_settled: it must be
 * the exhaustion of its generation, with the checksum of the output the
 * step holds.  Anything else is a broken invariant.
 */
static void
CheckEvidence(const Exhausted *x)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT e.detail" OP("->>") "'decision',"
		" (e.detail" OP("->>") "'generation')::pg_catalog.int4,"
		" e.detail" OP("->>") "'output_checksum'"
		" FROM workflow.workflow_events e"
		" WHERE e.workflow_run_id" OP("=") "$1 AND e.step_key" OP("=") "$2"
		" AND e.event_type" OP("=") "'control_node_settled'"
		" ORDER BY e.id DESC LIMIT 1";
	static const Oid types[2] = {UUIDOID, TEXTOID};
	Datum		values[2];
	bool		isnull;

	values[0] = UUIDPGetDatum(&x->run_id);
	values[1] = CStringGetTextDatum(x->repeat_key);
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
	if (SPI_processed != 1 ||
		strcmp(WfResultText(0, 1), "iteration_limit_reached") != 0 ||
		DatumGetInt32(WfResultDatum(0, 2, &isnull)) != x->generation ||
		WfResultText(0, 3) == NULL ||
		strcmp(WfResultText(0, 3), x->checksum) != 0)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_INTERNAL),
				 errmsg(WF_INTERNAL_STATE ": the evidence of repeat step \"%s\" of run %s does not match the step",
						x->repeat_key, WfUuidString(&x->run_id)),
				 errdetail("Its last control_node_settled must record the exhaustion of generation %d with the checksum of its output.",
						   x->generation)));
}

/*
 * ReadLineage adds what the chain did before this run: the iterations of
 * the runs it continues, and the chain's first run (this one if none).
 */
static void
ReadLineage(Exhausted *x)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT c.prior_iterations, c.document_scope_id"
		" FROM workflow.workflow_continuations c"
		" WHERE c.successor_run_id" OP("=") "$1";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(&x->run_id);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 0);
	x->prior = 0;
	x->scope = x->run_id;
	if (SPI_processed == 1)
	{
		x->prior = WfResultInt32(0, 1);
		WfResultUuid(0, 2, &x->scope);
	}
}

/*
 * FindExhausted reads and checks a continuation source whose status is
 * given (the caller found the run).
 */
static void
FindExhausted(const pg_uuid_t *run_id, const char *status, Exhausted *x)
{
	ReadExhausted(run_id, status, x);
	CheckRest(x);
	CheckEvidence(x);
	ReadLineage(x);
}

/* workflow_continuation_source: see the file header. */
static Datum
ContinuationSource(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Exhausted	x;
	char	   *status;
	Datum		values[7];
	bool		nulls[7];

	if (PG_ARGISNULL(0))
		wf_invalid_argument("workflow_run_id must not be null");
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	status = WfFindRun(PG_GETARG_UUID_P(0),
					   PG_ARGISNULL(1) ? NULL : PG_GETARG_UUID_P(1));
	FindExhausted(PG_GETARG_UUID_P(0), status, &x);

	memset(nulls, false, sizeof(nulls));
	values[0] = CStringGetTextDatum(x.repeat_key);
	values[1] = Int32GetDatum(x.generation);
	values[2] = Int32GetDatum(x.iterations);
	values[3] = Int32GetDatum(x.prior + x.iterations);
	values[4] = UUIDPGetDatum(&x.scope);
	values[5] = x.output;
	nulls[5] = x.output_null;
	values[6] = CStringGetTextDatum(x.checksum);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	SPI_finish();
	return (Datum) 0;
}

/*
 * ContinuationRequest is the request of a continue_run call, as it is
 * stored and compared: its arguments but the source.
 */
static Datum
ContinuationRequest(FunctionCallInfo fcinfo)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"additional_iterations\": %d, \"expected_output_checksum\": ",
					 PG_GETARG_INT32(1));
	escape_json(&buf, text_to_cstring(PG_GETARG_TEXT_PP(2)));
	if (PG_ARGISNULL(3))
		appendStringInfoString(&buf, ", \"node_execution_cap\": null}");
	else
		appendStringInfo(&buf, ", \"node_execution_cap\": %d}",
						 PG_GETARG_INT32(3));
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
}

/*
 * FindSuccessor finds the successor a source has already: returns whether
 * there is one, and raises workflow.continuation_conflict when it was made
 * for another request.
 */
static bool
FindSuccessor(const pg_uuid_t *source, Datum request, pg_uuid_t *successor)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT c.successor_run_id, c.request" OP("=") "$2"
		" FROM workflow.workflow_continuations c"
		" WHERE c.predecessor_run_id" OP("=") "$1";
	static const Oid types[2] = {UUIDOID, JSONBOID};
	Datum		values[2];

	values[0] = UUIDPGetDatum(source);
	values[1] = request;
	WfExecute(&plan, sql, 2, types, values, NULL, false, 0);
	if (SPI_processed == 0)
		return false;
	WfResultUuid(0, 1, successor);
	if (!WfResultBool(0, 2))
		ereport(ERROR,
				(errcode(WF_SQLSTATE_CONFLICT),
				 errmsg(WF_CONTINUATION_CONFLICT ": run %s was continued already, by run %s, with another request",
						WfUuidString(source), WfUuidString(successor)),
				 errdetail("A run has one successor; the same request again returns it.")));
	return true;
}

/*
 * ReadSourceRun reads what the successor is built from: the source's
 * definition, input and organization, and the outputs of the SUCCEEDED
 * steps it copies (outside the body, the repeat and the steps below it).
 */
static void
ReadSourceRun(const Exhausted *x, SourceRun *src)
{
	static SPIPlanPtr run_plan = NULL;
	static const char *run_sql =
		"SELECT r.definition, r.input, r.organization_id"
		" FROM workflow.workflow_runs r WHERE r.id" OP("=") "$1";
	static SPIPlanPtr steps_plan = NULL;
	static const char *steps_sql =
		LOOP_PARTS_CTE
		" SELECT COALESCE(pg_catalog.array_agg(s.step_key ORDER BY s.step_key), '{}'),"
		" COALESCE(pg_catalog.array_agg(s.output ORDER BY s.step_key), '{}')"
		" FROM workflow.workflow_steps s"
		" WHERE s.workflow_run_id" OP("=") "$1"
		" AND s.status" OP("=") "'SUCCEEDED'::workflow.step_status"
		" AND s.step_key" OP("<>") "ALL (ARRAY(SELECT b.key FROM body b))"
		" AND s.id" OP("<>") "ALL (ARRAY(SELECT b.id FROM below b))";
	static const Oid types[2] = {UUIDOID, UUIDOID};
	Datum		values[2];
	bool		isnull;

	values[0] = UUIDPGetDatum(&x->run_id);
	values[1] = UUIDPGetDatum(&x->repeat_id);
	WfExecute(&run_plan, run_sql, 1, types, values, NULL, false, 0);
	src->definition = DatumGetJsonbP(SPI_datumTransfer(WfResultDatum(0, 1, &isnull),
													   false, -1));
	src->input = WfResultDatum(0, 2, &src->input_null);
	if (!src->input_null)
		src->input = SPI_datumTransfer(src->input, false, -1);
	(void) WfResultDatum(0, 3, &src->org_null);
	if (!src->org_null)
		WfResultUuid(0, 3, &src->org);

	WfExecute(&steps_plan, steps_sql, 2, types, values, NULL, false, 0);
	src->copied_keys = SPI_datumTransfer(WfResultDatum(0, 1, &isnull), false, -1);
	src->copied_outputs = SPI_datumTransfer(WfResultDatum(0, 2, &isnull), false, -1);
}

/*
 * SuccessorDefinition is the source's definition with the successor's
 * bound: the repeat's max_iterations and the run's cycle_cap are the
 * additional iterations; the deadline is the source's as a time; the
 * execution cap is the one given or the source's, and the concurrency cap
 * at most that.
 */
static Jsonb *
SuccessorDefinition(const Exhausted *x, const SourceRun *src,
					int32 additional, bool cap_given, int32 cap)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"WITH r AS (SELECT w.node_execution_cap AS nec, w.concurrency_cap AS cc,"
		"  w.retry_cap AS rc, w.deadline_at AS dl"
		"  FROM workflow.workflow_runs w WHERE w.id" OP("=") "$1),"
		" l AS (SELECT pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object("
		"  'cycle_cap', $4::pg_catalog.int4,"
		"  'node_execution_cap', CASE WHEN $5 THEN $6 ELSE r.nec END,"
		"  'concurrency_cap', CASE WHEN r.cc IS NULL THEN NULL"
		"   ELSE LEAST(r.cc, COALESCE(CASE WHEN $5 THEN $6 ELSE r.nec END, r.cc)) END,"
		"  'retry_cap', r.rc, 'deadline_at', r.dl)) AS limits FROM r)"
		" SELECT ($2" OP("-") "'limits')"
		"  " OP("||") "pg_catalog.jsonb_build_object('limits', l.limits,"
		"  'steps', (SELECT pg_catalog.jsonb_agg(CASE WHEN e.step" OP("->>") "'key'" OP("=") "$3"
		"   THEN e.step" OP("||") "pg_catalog.jsonb_build_object('max_iterations', $4::pg_catalog.int4)"
		"   ELSE e.step END ORDER BY e.n)"
		"   FROM pg_catalog.jsonb_array_elements($2" OP("->") "'steps')"
		"    WITH ORDINALITY AS e(step, n)))"
		" FROM l";
	static const Oid types[6] = {UUIDOID, JSONBOID, TEXTOID, INT4OID, BOOLOID,
	INT4OID};
	Datum		values[6];
	char		nulls[6] = "      ";
	bool		isnull;

	values[0] = UUIDPGetDatum(&x->run_id);
	values[1] = JsonbPGetDatum(src->definition);
	values[2] = CStringGetTextDatum(x->repeat_key);
	values[3] = Int32GetDatum(additional);
	values[4] = BoolGetDatum(cap_given);
	values[5] = Int32GetDatum(cap);
	WfExecute(&plan, sql, 6, types, values, nulls, false, 0);
	return DatumGetJsonbP(SPI_datumTransfer(WfResultDatum(0, 1, &isnull),
											false, -1));
}

/*
 * PrepareSuccessor marks the successor's steps copied from the source, with
 * their outputs, and gives its back_to steps the loop's "repeat" key at
 * generation 0, "previous" being the exhausted output.  The successor keeps
 * its counters on its row.
 */
static void
PrepareSuccessor(WfDefinition *def, const Exhausted *x, const SourceRun *src,
				 bool **copied, Datum **outputs, bool **output_nulls)
{
	Datum	   *keys;
	Datum	   *outs;
	bool	   *out_nulls;
	int			nkeys;
	Datum	   *back_to;
	int			nback_to;
	Datum		context;

	*copied = palloc0(sizeof(bool) * def->nsteps);
	*outputs = palloc0(sizeof(Datum) * def->nsteps);
	*output_nulls = palloc0(sizeof(bool) * def->nsteps);
	deconstruct_array(DatumGetArrayTypeP(src->copied_keys), TEXTOID, -1, false,
					  TYPALIGN_INT, &keys, NULL, &nkeys);
	deconstruct_array(DatumGetArrayTypeP(src->copied_outputs), JSONBOID, -1,
					  false, TYPALIGN_INT, &outs, &out_nulls, &nkeys);
	deconstruct_array(DatumGetArrayTypeP(x->back_to), TEXTOID, -1, false,
					  TYPALIGN_INT, &back_to, NULL, &nback_to);
	context = DirectFunctionCall1(jsonb_in, CStringGetDatum(psprintf(
		"{\"repeat\": {\"step\": \"%s\", \"generation\": 0, \"previous\": %s}}",
		x->repeat_key, x->output_null ? "null" :
		JsonbToCString(NULL, &DatumGetJsonbP(x->output)->root, -1))));

	def->counter_shards = 0;
	for (int i = 0; i < def->nsteps; i++)
	{
		WfStepDef  *s = &def->steps[i];

		s->counter_shard = 0;
		for (int k = 0; k < nkeys; k++)
			if (strcmp(s->key, TextDatumGetCString(keys[k])) == 0)
			{
				(*copied)[i] = true;
				(*outputs)[i] = outs[k];
				(*output_nulls)[i] = out_nulls[k];
			}
		for (int k = 0; k < nback_to; k++)
			if (strcmp(s->key, TextDatumGetCString(back_to[k])) == 0)
				s->payload = DirectFunctionCall2(jsonb_concat, s->payload,
												 context);
	}
}

/*
 * RecordLineage writes the successor's lineage row and its run_continued
 * event (evidence: written whatever workflow.history says).
 */
static void
RecordLineage(const pg_uuid_t *successor, const Exhausted *x,
			  int32 additional, Datum request)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"INSERT INTO workflow.workflow_continuations (successor_run_id,"
		" predecessor_run_id, document_scope_id, prior_iterations,"
		" additional_iterations, request) VALUES ($1, $2, $3, $4, $5, $6)";
	static const Oid types[6] = {UUIDOID, UUIDOID, UUIDOID, INT4OID, INT4OID,
	JSONBOID};
	Datum		values[6];
	StringInfoData detail;

	values[0] = UUIDPGetDatum(successor);
	values[1] = UUIDPGetDatum(&x->run_id);
	values[2] = UUIDPGetDatum(&x->scope);
	values[3] = Int32GetDatum(x->prior + x->iterations);
	values[4] = Int32GetDatum(additional);
	values[5] = request;
	WfExecuteAsEngine(&plan, sql, 6, types, values, NULL);

	WfDetailBegin(&detail);
	WfDetailText(&detail, "predecessor_run_id", WfUuidString(&x->run_id));
	WfDetailText(&detail, "document_scope_id", WfUuidString(&x->scope));
	WfDetailInt(&detail, "prior_iterations", x->prior + x->iterations);
	WfDetailInt(&detail, "additional_iterations", additional);
	WfDetailText(&detail, "repeat_step_key", x->repeat_key);
	WfDetailText(&detail, "output_checksum", x->checksum);
	WfRecordEvidence(successor, "run_continued", WfDetailEnd(&detail));
}

/*
 * HoldSourceRow keys-shares the source's run row, so that a purge that
 * deleted it first is waited for (the source is then gone), and a later
 * one skips the run.
 */
static void
HoldSourceRow(const pg_uuid_t *source)
{
	static SPIPlanPtr plan = NULL;
	static const char *sql =
		"SELECT 1 FROM workflow.workflow_runs r WHERE r.id" OP("=") "$1"
		" FOR KEY SHARE";
	static const Oid types[1] = {UUIDOID};
	Datum		values[1];

	values[0] = UUIDPGetDatum(source);
	WfExecute(&plan, sql, 1, types, values, NULL, false, 0);
	if (SPI_processed != 1)
		wf_error(WF_SQLSTATE_NOT_FOUND, WF_RUN_NOT_FOUND,
				 "run %s does not exist", WfUuidString(source));
}

/* workflow_continue_run: see the file header. */
static Datum
ContinueRun(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *source;
	int32		additional;
	Datum		request;
	char	   *status;
	Exhausted	x;
	SourceRun	src;
	Jsonb	   *definition;
	WfDefinition def;
	WfRunContinuation c;
	bool	   *copied;
	Datum	   *outputs;
	bool	   *output_nulls;
	pg_uuid_t	successor;

	WfRequireReadCommitted();
	if (PG_ARGISNULL(0))
		wf_invalid_argument("source_run_id must not be null");
	if (PG_ARGISNULL(1))
		wf_invalid_argument("additional_iterations must not be null");
	if (PG_ARGISNULL(2))
		wf_invalid_argument("expected_output_checksum must not be null");
	source = PG_GETARG_UUID_P(0);
	additional = PG_GETARG_INT32(1);
	if (additional < 1 || additional > wf_max_repeat_iterations)
		wf_invalid_argument("additional_iterations must be between 1 and workflow.max_repeat_iterations (%d), not %d",
							wf_max_repeat_iterations, additional);
	if (!PG_ARGISNULL(3) && PG_GETARG_INT32(3) < 1)
		wf_invalid_argument("node_execution_cap must be at least 1, not %d",
							PG_GETARG_INT32(3));
	request = ContinuationRequest(fcinfo);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	status = WfLockRunForCall(source, PG_ARGISNULL(4) ? NULL : PG_GETARG_UUID_P(4));
	HoldSourceRow(source);
	if (FindSuccessor(source, request, &successor))
	{
		SPI_finish();
		PG_RETURN_DATUM(WfUuidDatum(&successor));
	}
	FindExhausted(source, status, &x);
	if (strcmp(text_to_cstring(PG_GETARG_TEXT_PP(2)), x.checksum) != 0)
		ereport(ERROR,
				(errcode(WF_SQLSTATE_CONFLICT),
				 errmsg(WF_CONTINUATION_CONFLICT ": expected_output_checksum is not the checksum of the exhausted output of run %s",
						WfUuidString(source)),
				 errdetail("The output's checksum is %s.", x.checksum),
				 errhint("Read continuation_source again: the output to continue from is not the one the request was made for.")));

	ReadSourceRun(&x, &src);
	definition = SuccessorDefinition(&x, &src, additional, !PG_ARGISNULL(3),
									 PG_ARGISNULL(3) ? 0 : PG_GETARG_INT32(3));
	WfParseDefinition(definition, &def);
	PrepareSuccessor(&def, &x, &src, &copied, &outputs, &output_nulls);
	c.org = src.org_null ? NULL : &src.org;
	c.input = src.input;
	c.input_null = src.input_null;
	c.source_run_id = source;
	c.copied = copied;
	c.outputs = outputs;
	c.output_nulls = output_nulls;
	WfInsertContinuationRun(&def, definition, &successor, &c);
	RecordLineage(&successor, &x, additional, request);
	SPI_finish();
	PG_RETURN_DATUM(WfUuidDatum(&successor));
}

/*
 * The SQL-callable entry points: each body runs as the extension's owner,
 * confined to the caller's organizations (privilege.c).
 */
WF_OWNER_ENTRY(workflow_continuation_source, ContinuationSource)
WF_OWNER_ENTRY(workflow_continue_run, ContinueRun)
